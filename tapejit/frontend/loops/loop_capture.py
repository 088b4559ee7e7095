"""Capturing a Python loop while tracing it: a few iterations traced, the rest built.

Tracing a scalarised model runs its Python loops, one copy of the body per iteration, and
:mod:`tapejit.passes.reroll.driver` rebuilds the copies as loops afterwards. For a loop whose
iterations provably trace the same (:mod:`tapejit.frontend.loops.loop_source` reads that from the source and
rewrites the loop into a call of :func:`run_loop`), tracing every iteration is wasted: this
module traces :data:`TRACED` of them and builds the loop those iterations are the start of
(:func:`tapejit.passes.reroll.driver.extend`, the re-rolling pass's own construction), so tracing
and the passes after it no longer grow with the trip count.

What makes the shortcut exact, beyond the source's guarantee (every iteration runs the same
straight-line code, the loop variable only in affine element reads of arrays the loop does
not assign): while capturing, each of those element reads must produce an element read of
the same traced array (not a constant, not a value numpy computed: a numpy table read at the
index, ``mu[i]``, gives numbers that numpy combines before tapejit sees them — ``mu[i] ** 0.5``,
``mu[i] % 2.0`` — so such a loop is traced in full and re-rolled with the numbers it traced,
:mod:`tapejit.passes.reroll.driver`); the traced iterations may
record no guard and no conversion error; each carry must be a traced float array or scalar
after every iteration, a new one (not written in place, not a view); the traced iterations must match one template up to the last, with no varying
constant; and every element read must stay in bounds over the whole range. When anything
fails the loop simply goes on running, iteration by iteration, as Python would: the trace is
then exactly the unrolled one, and the re-rolling pass sees it as before.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable

import numpy as np

from ..trace_state import _UNSET, _current
from ..tracer import Tracer
from . import loop_purity, loop_source
from ..convert import runtime as convert_runtime
from .. import views
from ...progress import log
from ...core.ops import Op
from ...passes.reroll import driver as reroll, ragged as reroll_ragged
from ...passes.reroll.common import _Fail

#: Iterations of a captured loop that are traced (the first may differ: a carry that starts
#: as ``0.0`` folds away; the template needs three).
TRACED = 6
#: Loops of fewer iterations than this run as written (:data:`reroll.MIN_RUN`'s reason: a
#: loop costs a call; the re-rolling pass still sees them).
MIN_TRIPS = 8


class _Reading(threading.local):
    """The capture in progress on this thread: whether every element read so far was one."""

    def __init__(self):
        self.capturing = False
        self.ok = True


_reading = _Reading()


def read(base, key):
    """``base[key]``: an element read of the loop variable in a captured body. While
    capturing, it must be an ``index`` node of ``base``'s own node at integer positions."""
    out = base[key]
    r = _reading
    if r.capturing and r.ok:
        node = getattr(out, "node", None)
        items = key if isinstance(key, tuple) else (key,)
        if not (
            isinstance(base, Tracer)
            and isinstance(out, Tracer)
            and (
                (node.op == Op.INDEX and node.args[0] is base.node)
                # the element this iteration wrote (ops.index forwards the value written)
                or (base.node.op == Op.SCATTER and base.node.args[1] is node)
            )
            and all(type(k) is int or k is ALL or _int_slice(k) for k in items)
        ):
            r.ok = False
    return out


ALL = slice(None)


def is_int(value: Callable) -> bool:
    """Whether ``value()`` is a Python ``int`` (False when it raises: an unbound name): the
    test before a skip split in two loops (``loop_skips._SplitSkips``)."""
    try:
        return type(value()) is int
    except Exception:  # noqa: BLE001 - the loop as written raises it where Python would
        return False


def _int_slice(k) -> bool:
    """A slice of integer (or absent) bounds: a row of a loop over rows (``x[i + 1:]``)."""
    return type(k) is slice and all(v is None or type(v) is int for v in (k.start, k.stop, k.step))


@contextmanager
def _reads_checked():
    """Element reads checked (:func:`read`) while the block traces iterations; yields a list
    whose one entry says, after the block, whether every read was an element read. The state
    of an enclosing capture (a nest's row traced by :func:`run_nest` captures its inner loop)
    is restored, and keeps a failure of the reads inside."""
    outer = (_reading.capturing, _reading.ok)
    _reading.capturing, _reading.ok = True, True
    result = [True]
    try:
        yield result
    finally:
        result[0] = _reading.ok
        _reading.capturing, _reading.ok = outer[0], outer[1] and result[0]


def _run(it, body: Callable, carries: tuple) -> tuple:
    for v in it:
        carries = body(v, *carries)
    return carries


def can_capture(it, writes: Callable[[], tuple] | None = None) -> bool:
    """Whether a loop over ``it`` may be captured: a ``range`` of at least
    :data:`MIN_TRIPS` iterations, while tracing (not inside a loop body's own trace), that
    writes into no numpy array (``writes()``: the arrays it writes; such a loop is left to the
    conversion, :mod:`tapejit.frontend.convert`, which carries the array). The loop as
    written runs otherwise."""
    if type(it) is not range:
        return False
    if writes is not None:
        try:
            ws = writes()
        except NameError:
            ws = ()
        if any(type(w) is np.ndarray for w in ws):
            return False
    try:
        n = len(it)
    except OverflowError:  # more than sys.maxsize iterations: the loop as written says what
        return False
    items = _current.items
    return n >= MIN_TRIPS and len(items) == 1 and not items[0].dynamic


def _capturable(carries: tuple, bases: Callable, writes: tuple, invariants: tuple,
                helpers: tuple) -> bool:  # fmt: skip
    if not carries and not writes:
        return False
    if not all(loop_purity.pure_helper(h) for h in helpers):
        return False  # a helper or a value it reads is no longer what the source said
    if not all(loop_purity.inert(v) for v in invariants):
        return False  # an object whose arithmetic is user code: it must run every iteration
    try:  # p["w"] of inert containers: no user code; an error is the loop's to raise
        arrays = bases()
    except Exception:  # noqa: BLE001 - the loop as written raises it where Python would
        return False
    if not all(type(b) is Tracer and b.level == 1 for b in arrays):
        return False
    # a written array must be a root (the writes of a view go to its base) of its own
    return all(
        type(w) is Tracer and w.level == 1 and w._view is None
        and w.node.dtype == "f64" for w in writes
    )  # fmt: skip


def run_loop(it: range, body: Callable, carries: tuple, bases: Callable, writes: tuple,
             invariants: tuple, helpers: tuple = ()) -> tuple:  # fmt: skip
    """The loop ``for v in it: carries = body(v, *carries)`` (see :mod:`tapejit.frontend.loops.loop_source`;
    :func:`can_capture` said yes), captured when it can be (see the module docstring): the
    carries after it, as tracers. ``bases()``: the arrays the body reads at the loop variable
    (evaluated only once the names they come from are known to be plain values);
    ``writes``: the arrays it writes (``y[i] = v``), rebound to the loop's result;
    ``invariants``: the values of the other names it reads; ``helpers``: the pure helpers it
    calls."""
    if not _capturable(carries, bases, writes, invariants, helpers):
        return _run(it, body, carries)
    st = _current.items[0]
    guards, conversion = len(st.guards), st.conversion_error
    history = [(*carries, *[w.node for w in writes])]
    with _reads_checked() as read_ok:
        for k in range(TRACED):
            carries = body(it[k], *carries)
            history.append((*carries, *[w.node for w in writes]))
    rest = it[TRACED:]
    ok = read_ok[0] and len(st.guards) == guards and st.conversion_error is conversion
    ok = ok and all(w._view is None for w in writes)
    if ok:
        built = _build(history, len(carries), len(rest), st)
        if built is not None:
            for w, node in zip(writes, built[len(carries):]):
                views.write(w, node, _UNSET)  # as each iteration's write did
            st.captured[0] += len(built)
            st.captured[1] += len(it)
            return tuple(Tracer(n, _UNSET, 1) for n in built[: len(carries)])
    return _run(rest, body, carries)


def _build(history: list[tuple], n_carries: int, extra: int, st) -> list | None:
    """The nodes of the carries (the first ``n_carries`` of each entry of ``history``: tracers)
    and written arrays (the rest: nodes) after the traced iterations and ``extra`` more."""
    chains = []
    for c in range(len(history[0])):
        chain = []
        for k, h in enumerate(history[1:]):
            t = h[c]
            if c >= n_carries:  # a written array's node
                if t is history[k][c] or t.dtype != "f64":
                    return None
                chain.append(t)
                continue
            if not isinstance(t, Tracer) or t.level != 1 or t.node.dtype != "f64":
                return None
            if t is history[k][c] or t._view is not None:
                return None  # written in place (`f += v` on an array), or a view of another
            chain.append(t.node)
        chains.append(chain)
    ids = {id(n) for chain in chains for n in chain}
    out = []
    for chain in chains:
        number = f"c{st.captured[0] + len(out)}"
        try:
            out.append(reroll.extend(chain, ids, extra, number, st.differentiable))
        except _Fail:
            return None
        except Exception:  # noqa: BLE001 - a bug here must not change a result: run the loop
            log.warning("capturing a loop failed; it runs as written", exc_info=True)
            return None
    return out


#: Rows of a nest traced before the rest are built (:func:`run_nest`): the first, whose carry
#: may start as a number, and the rows whose terms give the template, its steps and a check.
ROWS_TRACED = 5


#: Rows of a nest beyond which it runs as written (the rows' ranges are computed up front).
MAX_ROWS = 1 << 20


def run_nest(it: range, body: Callable, carries: tuple, inner: Callable, bases: Callable,
             invariants: tuple = (), helpers: tuple = ()) -> tuple:  # fmt: skip
    """The nest ``for v in it: carries = body(v, *carries)`` whose body runs inner loops over
    the ranges ``inner(v)`` (see ``loop_source._Rewriter._nest``), captured when it can be:
    the carries after it.

    Where the inner loops are long enough to be captured (:data:`MIN_TRIPS` iterations each)
    and their bounds move by a fixed step from row to row, each row traces to the carry plus
    one sum per inner loop over a row whose length moves by a fixed step: the rows before run
    as written, :data:`ROWS_TRACED` rows are traced, the others up to the last such row are
    built as one sum over all of them (:func:`tapejit.passes.reroll.ragged.extend_rows`; sums
    are reassociated, so only with :data:`tapejit.passes.reroll.driver.REDUCE`), and the rows after
    run as written. The traced rows must record no guard and no conversion error, capture
    each inner loop, and their terms fit one template with every number affine in the row;
    the rows built must stay in bounds. Otherwise the loop runs as written."""
    if (
        not reroll.REDUCE
        or len(carries) != 1
        or len(it) > MAX_ROWS
        or not _capturable(carries, bases, (), invariants, helpers)
    ):
        return _run(it, body, carries)
    try:
        bounds = [inner(v) for v in it]
    except Exception:  # noqa: BLE001 - the loop as written raises it where Python would
        return _run(it, body, carries)
    lo, hi = _regular_rows(bounds)
    if hi - lo < max(ROWS_TRACED + 2, reroll.MIN_RUN):
        return _run(it, body, carries)
    carries = _run(it[:lo], body, carries)
    st = _current.items[0]
    guards, conversion, captured = len(st.guards), st.conversion_error, st.captured[0]
    history = []
    with _reads_checked() as read_ok:  # reads at the row: elements of traced arrays
        for k in range(lo, lo + ROWS_TRACED):
            carries = body(it[k], *carries)
            history.append(carries[0])
    ok = (
        read_ok[0]
        and len(st.guards) == guards
        and st.conversion_error is conversion
        and st.captured[0] == captured + ROWS_TRACED * len(bounds[lo])
        and all(type(t) is Tracer and t.level == 1 and t._view is None
                and t.node.shape == () and t.node.dtype == "f64" for t in history)
    )  # fmt: skip
    if ok:
        try:
            node = reroll_ragged.extend_rows([t.node for t in history], hi - lo)
        except _Fail:
            node = None
        except Exception:  # noqa: BLE001 - a bug here must not change a result: run the loop
            log.warning("capturing a loop nest failed; it runs as written", exc_info=True)
            node = None
        if node is not None:
            st.captured[0] += 1
            st.captured[1] += sum(len(r) for rs in bounds[lo + ROWS_TRACED : hi] for r in rs)
            carries = (Tracer(node, _UNSET, 1),)
            return _run(it[hi:], body, carries)
    return _run(it[lo + ROWS_TRACED :], body, carries)


def _regular_rows(bounds: list) -> tuple[int, int]:
    """``(lo, hi)``: the longest stretch of rows whose inner ranges (``bounds[r]``, a tuple per
    row) all have at least :data:`MIN_TRIPS` iterations and whose starts, steps and lengths
    each move by a fixed step from row to row (:func:`_steady`)."""
    good = [_long(rs) and len(rs) == len(bounds[0]) for rs in bounds]
    best, r = (0, 0), 0
    while r < len(bounds):
        if not good[r]:
            r += 1
            continue
        lo, hi = r, r + 1
        while hi < len(bounds) and good[hi] and (hi - lo < 2 or _steady(bounds, lo, hi)):
            hi += 1
        if hi - lo > best[1] - best[0]:
            best = (lo, hi)
        r = hi
    return best


def _long(ranges) -> bool:
    """Whether every one of a row's inner ranges has at least :data:`MIN_TRIPS` iterations."""
    try:
        return all(type(r) is range and len(r) >= MIN_TRIPS for r in ranges)
    except (OverflowError, TypeError):  # (more than sys.maxsize; not a tuple)
        return False


def _steady(bounds: list, lo: int, r: int) -> bool:
    """Whether row ``r``'s ranges continue rows ``lo`` and ``lo + 1``'s by a fixed step: the
    start, the step and the length (with a step other than 1 the length is not the stop's)."""
    t = r - lo
    for a, b, c in zip(bounds[lo], bounds[lo + 1], bounds[r]):
        for f in (lambda x: x.start, lambda x: x.step, len):
            v0, v1 = f(a), f(b)
            if f(c) != v0 + t * (v1 - v0):
                return False
    return True


def prepare(f: Callable) -> Callable:
    """``f`` with its capturable loops rewritten to call :func:`run_loop` (or ``f``; also
    when re-rolling is off, :data:`reroll.ENABLED`: loops then stay unrolled)."""
    if not reroll.ENABLED:
        return f
    return loop_source.rewrite(
        f, {"_tj_for": run_loop, "_tj_read": read, "_tj_all": ALL, "_tj_can": can_capture,
            "_tj_nest": run_nest, "_tj_min": min, "_tj_max": max, "_tj_slice": slice,
            "_tj_int": is_int, **convert_runtime.OPERATORS},
    )


__all__ = ["MAX_ROWS", "MIN_TRIPS", "ROWS_TRACED", "TRACED", "can_capture", "prepare", "read",
           "run_loop", "run_nest"]
