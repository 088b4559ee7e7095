"""The operators converted code calls (:mod:`tapejit.frontend.convert.transform`): each decides,
from the values it is given, whether its statement runs as written or becomes IR.

* :func:`for_stmt` — a loop over a range (bounds may be traced), the rows of an array or index
  table, ``enumerate``/``zip`` of them, becomes one structured loop
  (:func:`tapejit.frontend.control._loop`) whose body is traced once, with the iteration's
  index a traced scalar; its carries are the names the body assigns that are live. A loop
  over Python values, of fewer than :data:`MIN_TRIPS` iterations, with a carry that is not a
  number or a numeric array, or whose body cannot be traced once (it records a guard, changes
  a carry's shape, ...) runs as written — the reason is recorded (:func:`fallbacks`).
* :func:`if_stmt` — an ``if`` on a traced scalar becomes a select of both branches' values
  (if-conversion), so the compiled code does not depend on which way the data goes. Each
  branch runs on its inputs *masked* by its condition — ``where(c, v, stop_gradient(v))``: the
  value is ``v``, the cotangent ``where(c, ct, 0)`` — so a branch not taken contributes exactly
  zero to every cotangent even where its own values or derivatives are inf or NaN (JAX's
  "double where" problem, solved at the branch's inputs). Index checks and guards recorded
  while a branch is traced hold only where the branch is taken. A branch pair whose values
  cannot be selected (one side leaves a name unbound, shapes differ, a non-numeric value
  differs) falls back to a guard: the branch the example input takes, as before conversion.
* :func:`getitem` — ``t[k]`` of a numpy table at a traced position is a gather from the table
  (captured as a constant, float64 — positions are whole numbers below 2**53).
* :func:`and_`, :func:`or_`, :func:`not_` — Python's operators on plain values, the elementwise
  logical operators on traced booleans (both operands evaluated, the second under the first).
"""

from __future__ import annotations

import gc
import math
import operator
import os
import sys
import threading
from contextlib import contextmanager
from typing import Any, Callable

import numpy as np

from ...core import ops
from ...core.ir import Node
from ...core.ops import Op
from ...core.ops_table import add_at, put, take
from .. import dynamic_index
from . import purity
from ..control import _loop
from ..errors import TracingError
from ..trace_state import BodyTrace, _current, _state
from .. import views
from ..trace_state import _UNSET as _UNSET_VALUE
from ..tracer import Tracer, _build, _wrap, dynamic_length, lift

#: Loops of fewer iterations run as written (unrolled into the trace): a loop costs a call per
#: iteration and hides the body from fusion, and a few copies trace quickly.
MIN_TRIPS = 8

#: Whether a converted loop of independent iterations becomes array code
#: (:mod:`tapejit.passes.vectorise`; ``TAPEJIT_VECTORISE=0`` in the environment: off).
VECTORISE = os.environ.get("TAPEJIT_VECTORISE", "1") not in ("", "0")


class _Undefined:
    """The value of a name that was unbound where converted code read it; using it raises."""

    __slots__ = ("name",)

    def __repr__(self):
        return "<unbound>"

    def _raise(self, *a, **k):
        raise NameError("a name used here is only assigned on a path that was not taken "
                        "(unbound in the code as written)")  # fmt: skip

    __bool__ = __float__ = __int__ = __index__ = __len__ = __iter__ = __getitem__ = _raise
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = _raise
    __rtruediv__ = __pow__ = __rpow__ = __neg__ = __lt__ = __gt__ = __le__ = __ge__ = _raise
    __array__ = __array_ufunc__ = __array_function__ = _raise


UNDEFINED = _Undefined()
_UNSET_TEST = object()


class _Log(threading.local):
    def __init__(self):
        self.fallbacks: list[tuple[int, str]] = []
        self.converted = {"loops": 0, "vectorised": 0, "branches": 0}
        self.events: list[tuple[str, int]] = []  # (kind, line) of each conversion
        self.mark = (0, 0)


_log = _Log()


def fallbacks() -> list[tuple[int, str]]:
    """``(line, reason)`` for each loop or branch of the last traces that ran as written."""
    return list(_log.fallbacks)


def start() -> None:
    """Begin counting for one compile (a top-level trace): :func:`report` says what it did."""
    if len(_log.events) > 4096:
        del _log.events[:2048]
    _log.mark = (len(_log.fallbacks), len(_log.events))


def _event(kind: str, line: int) -> None:
    _log.converted[kind] += 1
    _log.events.append((kind, line))


def report() -> dict:
    """What conversion did since :func:`start`, by source line (a body traced twice counts
    once): loops converted (``loops``; ``vectorised`` of them became array code),
    ``branches`` converted to selects, and ``kept``: ``(line, reason)`` of each loop or
    branch that ran as written."""
    first, ev = _log.mark
    out = {k: len({line for kind, line in _log.events[ev:] if kind == k})
           for k in ("loops", "vectorised", "branches")}  # fmt: skip
    seen, kept = set(), []
    for line, why in _log.fallbacks[first:]:
        if line not in seen and not why.startswith("fewer than"):
            seen.add(line)
            kept.append((line, why))
    out["kept"] = kept
    return out


def _note(line: int, reason: str) -> None:
    if len(_log.fallbacks) > 4096:
        del _log.fallbacks[:2048]
        _log.mark = (max(0, _log.mark[0] - 2048), _log.mark[1])
    _log.fallbacks.append((line, reason))


def _tracing() -> bool:
    return bool(_current.items)


def kept(line: int, reason: str, test: Any = _UNSET_TEST) -> Any:
    """A statement left as written, and why (recorded while tracing); for an ``if``, its
    test, returned as it is (recorded only when it is traced: a guard)."""
    if test is _UNSET_TEST:
        if _tracing():
            _note(line, reason)
        return None
    if test.__class__ is Tracer:
        _note(line, reason)
    return test


def args(*getters: Callable[[], Any]) -> tuple:
    """The values of the names read by ``getters`` (``lambda: name``), :data:`UNDEFINED` for
    one that is unbound."""
    out = []
    for g in getters:
        try:
            out.append(g())
        except NameError:
            out.append(UNDEFINED)
    return tuple(out)


# ----------------------------------------------------------------------------------------------
# Element reads, ints, conditions


def _has_tracer(key: Any) -> bool:
    if key.__class__ is Tracer:
        return True
    return key.__class__ is tuple and any(k.__class__ is Tracer for k in key)


def _table(arr: np.ndarray) -> Tracer:
    """A numpy array read at a traced position, as a float64 constant of this trace (one per
    array and trace)."""
    top = _current.items[0]
    cache = top.__dict__.setdefault("_tj_tables", {})
    hit = cache.get(id(arr))
    if hit is None or hit[0] is not arr:
        conv = arr if arr.dtype == np.float64 else arr.astype(np.float64)
        if arr.dtype.kind in "iu" and arr.size and np.abs(arr).max() > 2**53:
            raise TracingError("an index table with entries beyond 2**53 cannot be read at a "
                               "traced position")  # fmt: skip
        hit = cache[id(arr)] = (arr, conv)
    return lift(hit[1])


def getitem(base: Any, key: Any) -> Any:
    """``base[key]``; a numpy array read at a traced position is a gather from it. An array
    a converted branch reads (masked by its condition, :func:`_mask`) is read unmasked and the
    element masked: the same value and cotangent, without a select over the whole array."""
    if base.__class__ is Tracer:
        masked = _masked_of(base)
        if masked is not None:
            whole, c = masked
            return _mask(whole[key], c)
        return base[key]
    if (base.__class__ is np.ndarray and _tracing() and _has_tracer(key)
            and base.dtype.kind in "fiub"):  # fmt: skip
        return _table(base)[key]
    return base[key]


_AUG = {"+": operator.iadd, "-": operator.isub, "*": operator.imul, "/": operator.itruediv,
        "**": operator.ipow, "//": operator.ifloordiv, "%": operator.imod}  # fmt: skip


def aug(base: Any, key: Any, op: str, value: Any) -> None:
    """``base[key] op= value``, in place, as Python runs it (one read, one write)."""
    base[key] = _AUG[op](getitem(base, key), value)


def _masked_of(t: Tracer) -> tuple[Tracer, Tracer] | None:
    """``(x, c)`` when ``t`` is an array ``where(c, x, stop_gradient(x))`` of this trace."""
    n = t.node
    if n.op != Op.WHERE or n.type.size <= 1 or n.args[2].op != Op.STOP_GRADIENT:
        return None
    if n.args[2].args[0] is not n.args[1] or t.level != len(_current.items):
        return None
    return _wrap(n.args[1]), _wrap(n.args[0])


def to_int(v: Any) -> Any:
    """``int(v)``; in a loop body traced once, a traced ``v`` is truncated in the IR instead
    (a guard on its value would hold for one iteration only)."""
    if v.__class__ is Tracer and isinstance(_state(), BodyTrace):
        return np.trunc(v)
    return int(v)


def _logical(v: Tracer) -> Tracer:
    """A traced scalar as a bool tracer (numpy's truth of a number: ``!= 0``)."""
    if v.shape != ():
        if int(np.prod(v.shape)) != 1:
            bool(v)  # numpy's "truth value of an array is ambiguous", with the line
        v = v.reshape(())
    return v if v.node.dtype == "bool" else (v != 0.0)


def and_(*thunks: Callable[[], Any]) -> Any:
    """``a and b and ...``: Python's on plain values; on traced ones the logical and."""
    v = thunks[0]()
    for t in thunks[1:]:
        if v.__class__ is Tracer:
            c = _logical(v)
            with under(c):
                w = t()
            v = c & (_logical(w) if w.__class__ is Tracer else bool(w))
        elif not v:
            return v
        else:
            v = t()
    return v


def or_(*thunks: Callable[[], Any]) -> Any:
    """``a or b or ...``: Python's on plain values; on traced ones the logical or."""
    v = thunks[0]()
    for t in thunks[1:]:
        if v.__class__ is Tracer:
            c = _logical(v)
            with under(~c):
                w = t()
            v = c | (_logical(w) if w.__class__ is Tracer else bool(w))
        elif v:
            return v
        else:
            v = t()
    return v


def not_(v: Any) -> Any:
    return ~_logical(v) if v.__class__ is Tracer else not v


@contextmanager
def under(c: Tracer):
    """Index checks and guards recorded inside hold only where ``c`` (a bool tracer) holds:
    an element read in a branch not taken is never an error."""
    st = _state()
    g0, i0 = len(st.guards), len(st.index_checks)
    yield
    cl = lift(c)
    for k in range(i0, len(st.index_checks)):
        bad, site = st.index_checks[k]
        st.index_checks[k] = ((_wrap(bad) & cl).node, site)
    for k in range(g0, len(st.guards)):
        cond, expected, site = st.guards[k]
        if cond.shape != ():
            continue
        if expected:
            st.guards[k] = ((_wrap(cond) | ~cl).node, True, site)
        else:
            st.guards[k] = ((_wrap(cond) & cl).node, False, site)


# ----------------------------------------------------------------------------------------------
# Branches


def _mask(v: Any, c: Tracer) -> Any:
    """``v`` with its cotangent masked by ``c``: ``where(c, v, stop_gradient(v))``."""
    if v.__class__ is not Tracer or v.node.dtype != "f64" or v.node.op == Op.CONST:
        return v
    if not _state().differentiable(lift(v).node):
        return v
    return _build(lambda cn, vn: ops.where(cn, vn, ops.make(Op.STOP_GRADIENT, vn)), c, v)


def _own(v: Any) -> Any:
    """A traced value as a new tracer object of the same value: a branch that writes into it
    in place rebinds its own object, not the one the other branch and the code after see."""
    return Tracer(v.node, v._value, v.level) if v.__class__ is Tracer else v


_NO = object()


def _numeric(v: Any) -> bool:
    if v.__class__ is Tracer:
        return True
    if isinstance(v, (bool, int, float, np.number, np.bool_)):
        return True
    return isinstance(v, np.ndarray) and v.dtype.kind in "fiub"


def _select(c: Tracer, a: Any, b: Any) -> Any:
    """The value of a name after the branch: ``a`` where ``c``, else ``b``; :data:`_NO` when
    the two cannot be selected elementwise."""
    if a is b:
        return a
    if a.__class__ is Tracer and b.__class__ is Tracer and a.node is b.node:
        return a  # unchanged on both sides
    if a is UNDEFINED or b is UNDEFINED:
        return _NO
    if not (_numeric(a) and _numeric(b)):
        try:
            return a if type(a) is type(b) and bool(a == b) else _NO
        except Exception:  # noqa: BLE001 - an object whose == is not a plain truth
            return _NO
    if np.shape(a) != np.shape(b):
        return _NO
    if a.__class__ is Tracer and b.__class__ is Tracer and a.node.type.size > 1:
        pushed = _pushdown(c, a, b)
        if pushed is not None:
            return pushed
    if a.__class__ is not Tracer and b.__class__ is not Tracer:
        if type(a) is type(b) and np.array_equal(a, b):
            return a
    ta, tb = lift(a), lift(b)
    if ta.node.dtype != tb.node.dtype:
        ta, tb = _build(ops._float, ta), _build(ops._float, tb)
    return _build(ops.where, c, ta, tb)


def if_stmt(test: Any, then: Callable, other: Callable, values: tuple, line: int,
            inplace: tuple = ()) -> tuple:  # fmt: skip
    """``if test: then else: other`` over the names ``values`` (see the module docstring);
    ``inplace``: ``(output, value)`` positions of the names whose elements a branch writes."""
    if test.__class__ is not Tracer or not _tracing():
        try:
            return (then if test else other)(*values)
        except NameError as e:
            raise _unbound(e) from None
    why = purity.why_not(then, other)
    if not why and any(_aliased(values[k]) or _read_only(values[k]) for _, k in inplace):
        why = "an array a branch writes into is also reachable another way"
    if why:
        _note(line, f"only the branch taken may run: {why}")
        return (then if test else other)(*values)
    c = _logical(test)
    try:
        with under(c):
            out_t = then(*(_own(_mask(v, c)) for v in values))
        nc = ~c
        with under(nc):
            out_f = other(*(_own(_mask(v, nc)) for v in values))
        result = []
        for a, b in zip(out_t, out_f):
            a, b = _unmask(a, values, c), _unmask(b, values, nc)
            r = _select(c, a, b)
            if r is _NO:
                raise _Unselectable
            result.append(r)
        _event("branches", line)
        origin = {j: values[k] for j, k in inplace}
        return tuple(_rebind(origin[j], r) if j in origin else r for j, r in enumerate(result))
    except _Unselectable:
        _note(line, "the branches' values cannot be selected elementwise (a name assigned on "
                    "one side only, or values of different shapes or kinds)")  # fmt: skip
    except TracingError as e:
        _note(line, f"a branch cannot be traced on both sides: {e}")
    return (then if test else other)(*values)  # a guard: the branch this input takes


def _chain(n: Node) -> tuple[Node, list[Node]]:
    """The element writes (``put``/``add_at``) ``n`` is the last of, first first, and what the
    first writes into."""
    links = []
    while n.op in (Op.PUT, Op.ADD_AT):
        links.append(n)
        n = n.args[0]
    return n, links[::-1]


def _pushdown(c: Tracer, a: Tracer, b: Tracer) -> Tracer | None:
    """``where(c, a, b)`` for arrays that are element writes into the same array by either
    branch (``F[i] += f`` under an ``if``): the writes applied to that array with their rows
    selected — ``put(x, t, where(c, u, x[t]))``, ``add_at(x, t, where(c, u, 0))`` — so the
    select costs the rows written, not the whole array."""
    cn = lift(c).node
    ncn = lift(~c).node
    ra, la = _chain(a.node)
    rb, lb = _chain(b.node)
    if not (la or lb):
        return None

    def base(root: Node, links: list, cond: Node) -> Node | None:
        if not links:
            return root
        if (root.op == Op.WHERE and root.args[0] is cond and root.args[2].op == Op.STOP_GRADIENT
                and root.args[2].args[0] is root.args[1]):  # fmt: skip
            return root.args[1]
        return None

    x = base(ra, la, cn)
    if x is None or x is not base(rb, lb, ncn) or x.type != a.node.type:
        return None
    acc = x
    for cond, links in ((cn, la), (ncn, lb)):
        for w in links:
            t, u = w.args[1], w.args[2]
            if w.op == Op.PUT:
                acc = put(acc, t, ops.where(cond, u, take(acc, t)))
            else:
                acc = add_at(acc, t, ops.where(cond, u, ops.const(0.0, u.shape)))
    return _wrap(acc)


class _Unselectable(Exception):
    pass


def _unmask(v: Any, values: tuple, c: Tracer) -> Any:
    """A branch's output that is one of its (masked) inputs, as the unmasked input."""
    if v.__class__ is not Tracer or v.node.op != Op.WHERE:
        return v
    for orig in values:
        if orig.__class__ is Tracer and v.node.args[1] is lift(orig).node \
                and v.node.args[2].op == Op.STOP_GRADIENT:  # fmt: skip
            return orig
    return v


def ifexp(test: Any, then: Callable, other: Callable, values: tuple) -> Any:
    """``then(...) if test else other(...)`` — a select when ``test`` is traced."""
    if test.__class__ is not Tracer or not _tracing():
        return (then if test else other)(*values)
    if purity.why_not(then, other):
        return (then if test else other)(*values)
    c = _logical(test)
    try:
        with under(c):
            a = then(*(_own(_mask(v, c)) for v in values))
        nc = ~c
        with under(nc):
            b = other(*(_own(_mask(v, nc)) for v in values))
        r = _select(c, _unmask(a, values, c), _unmask(b, values, nc))
        if r is not _NO:
            return r
    except TracingError:
        pass
    return (then if test else other)(*values)


# ----------------------------------------------------------------------------------------------
# Loops


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


def _plan(it: Any):
    """``(n, start, item, steps)`` for a loop to convert over ``it``, or a reason why not: the
    trip count (a bound, with ``steps`` the traced count), the first counter value, and the
    loop's item as a function of the counter."""
    if type(it) is range:
        n = len(it)
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


def _aliased(v: Any) -> bool:
    """Whether numpy array ``v`` (a value a loop or branch writes into) is referenced from
    anywhere but the one name the statement reads it from: converted, that name is rebound to
    a traced array, and any other reference would keep the old one (written as it is, the
    statement raises: a traced value cannot be stored into a numpy array). The references
    expected: the name (a cell: the rewritten code reads it in a lambda), the tuple of the
    statement's values, this function's parameter and ``getrefcount``'s argument. (A traced
    array is rebound in place instead, :func:`_rebind`: its other names see the writes.)"""
    if not isinstance(v, np.ndarray):
        return False
    if v.base is not None:  # a view of another array
        return True
    if sys.getrefcount(v) <= _EXPECTED_REFS:
        return False
    gc.collect(0)  # a reference from garbage (a cycle not collected yet) is none
    return sys.getrefcount(v) > _EXPECTED_REFS


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


def _read_only(v: Any) -> bool:
    """A traced array the function may not write into (an argument, or a view of one)."""
    return v.__class__ is Tracer and isinstance(views.root_of(v)._view, views.ReadOnly)


def _rebind(orig: Any, new: Any) -> Any:
    """The value written in place: ``orig`` itself when it is a traced array of this trace,
    rebound to ``new``'s value (so every name and view of it sees the writes, as Python's
    statement would make them), else ``new``."""
    if orig.__class__ is not Tracer or new.__class__ is not Tracer:
        return new
    if orig.level != len(_current.items) or orig.node.type != new.node.type:
        return new
    views.write(orig, lift(new).node, _UNSET_VALUE)
    return orig


#: ``sys.getrefcount`` of a carry referenced only by its name and the loop's value tuple, as
#: :func:`_aliased` sees it (the frame in between adds none).
_EXPECTED_REFS = 4


def _carriable(v: Any) -> bool:
    if v.__class__ is Tracer:
        return True
    if isinstance(v, (bool, int, float, np.number, np.bool_)):
        return True
    return isinstance(v, np.ndarray) and v.dtype.kind in "fiub" and v.ndim >= 0


def _python(it: Any, body: Callable, values: tuple) -> tuple:
    carries = values
    try:
        for item in it:
            carries = body(item, *carries)
    except NameError as e:
        raise _unbound(e) from None
    return carries


def _unbound(e: NameError) -> NameError:
    """The error the code as written raises for ``e``: a local of the function read before it
    is bound, which a converted body reads as a closure cell, is an ``UnboundLocalError``."""
    if type(e) is NameError and "free variable" in str(e) and getattr(e, "name", None):
        return UnboundLocalError(
            f"cannot access local variable '{e.name}' where it is not associated with a value"
        )
    return e


def for_stmt(it: Any, body: Callable, values: tuple, line: int, inplace: tuple = ()) -> tuple:
    """``for item in it: values = body(item, *values)`` (see the module docstring).
    ``inplace``: positions of the values whose elements the body writes."""
    if not _tracing():
        return _python(it, body, values)
    plan = _plan(it)
    if isinstance(plan, str):
        if not (type(it) is range and len(it) < MIN_TRIPS):
            _note(line, plan)
        return _python(it, body, _traced_writes(values, inplace))
    bad = [k for k, v in enumerate(values) if not _carriable(v)]
    if bad:
        _note(line, "a value the loop updates is not a number or a numeric array "
                    f"({type(values[bad[0]]).__name__})")  # fmt: skip
        return _python(it, body, values)
    shared = [k for k in inplace if _aliased(values[k]) or _read_only(values[k])]
    if shared:
        _note(line, "an array the loop writes into is also reachable another way (another "
                    "name, a container, a view, the caller): converted, the writes would not "
                    "reach it")  # fmt: skip
        return _python(it, body, values)
    why = purity.why_not(body)
    if why:
        _note(line, f"its body must run every iteration: {why}")
        return _python(it, body, values)
    n, start, item, steps = plan
    if n == 0:
        return values
    done: dict = {}
    try:
        carry, _ = _loop(
            lambda k, c, xs: (tuple(body(item(k), *c)), None),
            tuple(values), [], n, start=start, name=f"the loop at line {line}", steps=steps,
            vectorise=done if VECTORISE else False,
        )  # fmt: skip
    except (TracingError, TypeError, ValueError, IndexError, NotImplementedError) as e:
        _note(line, f"its body cannot be traced once for every iteration: {e}")
        return _python(it, body, values)
    _event("loops", line)
    if done.get("vectorised"):
        _event("vectorised", line)
    carry = tuple(carry)
    return tuple(_rebind(values[k], c) if k in inplace else c for k, c in enumerate(carry))


#: The operators by the names the rewritten code calls them.
OPERATORS = {
    "_tj_for_stmt": for_stmt, "_tj_if_stmt": if_stmt, "_tj_ifexp": ifexp, "_tj_args": args,
    "_tj_and": and_, "_tj_or": or_, "_tj_not": not_, "_tj_getitem": getitem,
    "_tj_range": range_, "_tj_enumerate": enumerate_, "_tj_zip": zip_, "_tj_mkslice": slice,
    "_tj_to_int": to_int, "_tj_aug": aug, "_tj_kept": kept,
}
