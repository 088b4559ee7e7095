"""Loops converted to structured loops (:mod:`tapejit.frontend.convert`): a ``for`` over a
range (bounds may be traced: ``range(i + 1, n)``), the rows of an array or index table, or
``enumerate``/``zip`` of them, becomes one loop (:func:`tapejit.frontend.control._loop`) whose
body is traced once with the iteration's index a traced scalar; its carries are the names the
body assigns that are live. A loop of independent iterations becomes array code there
(:mod:`tapejit.passes.vectorise`). A loop over Python values, of fewer than :data:`MIN_TRIPS`
iterations, with a carry that is not a number or a numeric array, that writes into an array
reachable another way, or whose body cannot be traced once (it records a guard, changes a
carry's shape, reads stateful objects: :mod:`~tapejit.frontend.convert.purity`) runs as written,
and the reason is recorded.
"""

from __future__ import annotations

import math
import operator
import os
from typing import Any, Callable

import numpy as np

from ...core import ops
from .. import dynamic_index
from ..control import _loop
from ..errors import TracingError
from ..tracer import Tracer, dynamic_length, lift
from . import purity
from .common import (_aliased, _event, _note, _own, _read_only, _rebind, _tracing, _unbound,
                     getitem)  # fmt: skip


#: Loops of fewer iterations run as written (unrolled into the trace): a loop costs a call per
#: iteration and hides the body from fusion, and a few copies trace quickly.
MIN_TRIPS = 8


#: Whether a converted loop of independent iterations becomes array code
#: (:mod:`tapejit.passes.vectorise`; ``TAPEJIT_VECTORISE=0`` in the environment: off).
VECTORISE = os.environ.get("TAPEJIT_VECTORISE", "1") not in ("", "0")


class TracedRange:
    """``range(start, stop, step)`` with a traced bound (``range(i + 1, n)`` in a loop body)."""

    def __init__(self, start, stop, step):
        self.start, self.stop, self.step = start, stop, step

    def __iter__(self):  # as written: the bounds as ints (a guard, or an error in a body)
        return iter(range(operator.index(self.start), operator.index(self.stop),
                          operator.index(self.step)))  # fmt: skip


def range_(*a: Any) -> Any:
    """``range(...)``, kept symbolic when a bound is traced."""
    if not any(v.__class__ is Tracer for v in a):
        return range(*a)
    if len(a) == 1:
        return TracedRange(0, a[0], 1)
    return TracedRange(a[0], a[1], a[2] if len(a) > 2 else 1)


class Enumerate:
    def __init__(self, seq, start=0):
        self.seq, self.start = seq, start

    def __iter__(self):
        return iter(enumerate(self.seq, self.start))


class Zip:
    def __init__(self, *seqs):
        self.seqs = seqs

    def __iter__(self):
        return iter(zip(*self.seqs))


def enumerate_(seq, start=0):
    return Enumerate(seq, start)


def zip_(*seqs):
    return Zip(*seqs)


def _rows_of(x: Any) -> int | None:
    """The number of rows of an array a loop may run over by index, or ``None``."""
    if x.__class__ is Tracer:
        if not x.shape or dynamic_length(x) is not None:
            return None
        return x.shape[0]
    if isinstance(x, np.ndarray) and x.ndim >= 1 and x.dtype.kind in "fiub":
        return x.shape[0]
    return None


def _row(x: Any, k: Tracer) -> Any:
    return getitem(x, k)


def _few(it: Any) -> bool:
    """Whether ``it`` is a range of fewer than :data:`MIN_TRIPS` iterations (run as written
    without a note)."""
    try:
        return type(it) is range and len(it) < MIN_TRIPS
    except OverflowError:  # longer than an index can count
        return False


def _plan(it: Any):
    """``(n, start, item, steps)`` for a loop to convert over ``it``, or a reason why not: the
    trip count (a bound, with ``steps`` the traced count), the first counter value, and the
    loop's item as a function of the counter."""
    if type(it) is range:
        try:
            n = len(it)
        except OverflowError:  # more than sys.maxsize iterations: as written (an error soon)
            return "a range of more iterations than an index can count"
        if n < MIN_TRIPS:
            return f"fewer than {MIN_TRIPS} iterations"
        if it.step == 1:
            return n, it.start, (lambda k: k), None
        return n, 0, (lambda k, a=it.start, s=it.step: a + s * k), None
    if isinstance(it, TracedRange):
        return _traced_range(it)
    if isinstance(it, Enumerate):
        n = _rows_of(it.seq)
        if n is None or not isinstance(it.start, int):
            return "enumerate over something other than an array"
        if n < MIN_TRIPS:
            return f"fewer than {MIN_TRIPS} iterations"
        return n, 0, (lambda k, s=it.seq, a=it.start: (k + a, _row(s, k))), None
    if isinstance(it, Zip):
        ns = [_rows_of(s) for s in it.seqs]
        if not ns or any(n is None for n in ns):
            return "zip over something other than arrays"
        n = min(ns)
        if n < MIN_TRIPS:
            return f"fewer than {MIN_TRIPS} iterations"
        return n, 0, (lambda k, ss=it.seqs: tuple(_row(s, k) for s in ss)), None
    n = _rows_of(it)
    if n is None:
        return f"a loop over a {type(it).__name__}, not a range or an array"
    if n < MIN_TRIPS:
        return f"fewer than {MIN_TRIPS} iterations"
    return n, 0, (lambda k, s=it: _row(s, k)), None


def _traced_range(r: TracedRange):
    step = r.step
    if step.__class__ is Tracer or not isinstance(step, (int, np.integer)) or step == 0:
        return "a range whose step is traced or zero"
    step = int(step)
    a, b = lift(r.start), lift(r.stop)
    ia, ib = dynamic_index.interval(a.node), dynamic_index.interval(b.node)
    if ia is None or ib is None or not (ia[2] and ib[2]):
        return "a range whose traced bounds are not known to be whole numbers in a finite range"
    span = (ib[1] - ia[0]) if step > 0 else (ia[1] - ib[0])
    n = max(0, math.ceil(span / abs(step)))
    if not math.isfinite(span) or n > 2**31:
        return "a range with traced bounds and no finite bound on its length"
    count = np.ceil((b - a) / float(step)) if step != 1 else b - a
    count = np.maximum(count, 0.0)
    if n == 0:
        return 0, 0, None, count
    return n, 0, (lambda k: a + step * k if step != 1 else a + k), count


def _traced_writes(values: tuple, inplace: tuple) -> tuple:
    """``values`` with each numpy array the loop writes into (no other name reaching it) as a
    traced array: a loop run as written may then store traced values into it, as a converted
    one does (``f = np.zeros(3); for k in range(3): f[k] = ...``)."""
    own = [k for k in inplace if isinstance(values[k], np.ndarray)
           and values[k].dtype.kind in "fiub" and not _aliased(values[k])]  # fmt: skip
    if not own:
        return values
    out = list(values)
    for k in own:
        out[k] = _own(lift(out[k].astype(np.float64)))
    return tuple(out)


def _carriable(v: Any) -> bool:
    if v.__class__ is Tracer:
        return True
    if isinstance(v, (bool, int, float, np.number, np.bool_)):
        return True
    return isinstance(v, np.ndarray) and v.dtype.kind in "fiub" and v.ndim >= 0


def _python(it: Any, body: Callable, values: tuple, appends: int = 0) -> tuple:
    """The loop as written; with ``appends``, the body's last ``appends`` results are each
    iteration's appended values, returned after the carries as one list per appended list."""
    carries = values
    rows: list[list] = [[] for _ in range(appends)]
    try:
        for item in it:
            out = body(item, *carries)
            if appends:
                carries = out[: len(out) - appends]
                for r, v in zip(rows, out[len(out) - appends :]):
                    r.append(v)
            else:
                carries = out
    except NameError as e:
        raise _unbound(e) from None
    return (*carries, *rows) if appends else carries


def _appended(v: Any) -> Any:
    """An appended value a converted loop stacks over its iterations (a number or a numeric
    array); anything else raises, and the loop runs as written."""
    if not _carriable(v):
        raise TracingError(f"it appends a {type(v).__name__}, not a number or a numeric array")
    return v


def for_stmt(it: Any, body: Callable, values: tuple, line: int, inplace: tuple = (),
             appends: int = 0) -> tuple:  # fmt: skip
    """``for item in it: values = body(item, *values)`` (see the module docstring).
    ``inplace``: positions of the values whose elements the body writes; ``appends``: how many
    of the body's results after the carries are values appended to lists
    (:mod:`~tapejit.frontend.convert.appends`), returned after the carries as one list of
    rows each."""
    run = lambda vals: _python(it, body, vals, appends)  # noqa: E731
    if not _tracing():
        return run(values)
    plan = _plan(it)
    if isinstance(plan, str):
        if not _few(it):
            _note(line, plan)
        return run(_traced_writes(values, inplace))
    bad = [k for k, v in enumerate(values) if not _carriable(v)]
    if bad:
        _note(line, "a value the loop updates is not a number or a numeric array "
                    f"({type(values[bad[0]]).__name__})")  # fmt: skip
        return run(values)
    shared = [k for k in inplace if _aliased(values[k]) or _read_only(values[k])]
    if shared:
        _note(line, "an array the loop writes into is also reachable another way (another "
                    "name, a container, a view, the caller): converted, the writes would not "
                    "reach it")  # fmt: skip
        return run(values)
    why = purity.why_not(body)
    if why:
        _note(line, f"its body must run every iteration: {why}")
        return run(values)
    n, start, item, steps = plan
    if appends and steps is not None:
        _note(line, "it appends to a list, and its trip count is traced")
        return run(values)
    if n == 0:
        return (*values, *([] for _ in range(appends)))
    done: dict = {}
    nc = len(values)

    def step(k, c, xs):
        out = tuple(body(item(k), *c))
        return out[:nc], (tuple(_appended(v) for v in out[nc:]) if appends else None)

    try:
        carry, ys = _loop(step, tuple(values), [], n, start=start,
                          name=f"the loop at line {line}", steps=steps, ys=bool(appends),
                          vectorise=done if VECTORISE else False)  # fmt: skip
    except (TracingError, TypeError, ValueError, IndexError, NotImplementedError) as e:
        _note(line, f"its body cannot be traced once for every iteration: {e}")
        return run(values)
    _event("loops", line)
    if done.get("vectorised"):
        _event("vectorised", line)
    carry = tuple(_rebind(values[k], c) if k in inplace else c for k, c in enumerate(carry))
    if not appends:
        return carry
    return (*carry, *(_rows(y, n) for y in ys))


def _rows(y: Tracer, n: int) -> list:
    """The ``n`` rows of a loop's stacked output, as the list of values it appended: a scalar
    row is an element of ``y`` (``np.array(rows)`` is then ``y`` itself), an array row
    ``y[j]`` (``np.stack(rows)`` is ``y``: :func:`~tapejit.frontend.numpy.np_shape.row_runs`)."""
    from ..numpy.np_assemble import Element  # (the numpy layer imports this package)

    if y.ndim == 1:
        return [Element(y, j, (j,)) for j in range(n)]
    return [Tracer(ops.index(y.node, (j,)), level=y.level) for j in range(n)]
