"""What converted code shares (:mod:`tapejit.frontend.convert`): the record of what was
converted and kept (:func:`report`), the values of names that may be unbound (:func:`args`),
element reads and writes (``t[k]`` of a numpy table at a traced position is a gather from it,
captured as a float64 constant — positions are whole numbers below 2**53; a read of an array a
branch masks is masked per element), ``int()`` in a loop body, Python's ``and``/``or``/``not`` on
plain values and the logical operators on traced booleans (both operands evaluated, the second
under the first: :func:`under`), the cotangent mask of a branch's inputs (:func:`_mask`), and
the rules for writing into an array in place (:func:`_aliased`, :func:`_rebind`).
"""

from __future__ import annotations

import gc
import operator
import sys
import threading
from contextlib import contextmanager
from typing import Any, Callable

import numpy as np

from ...core import ops
from ...core.ops import Op
from .. import views
from ..errors import TracingError
from ..trace_state import _UNSET as _UNSET_VALUE
from ..trace_state import BodyTrace, _current, _state
from ..tracer import Tracer, _build, _wrap, lift


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
    """``base[key]``; a numpy array read at a traced position is a gather from it, and a slice
    of fixed length at a traced start (``x[3 * i : 3 * i + 3]``) reads its elements. An array
    a converted branch reads (masked by its condition, :func:`_mask`) is read unmasked and the
    element masked: the same value and cotangent, without a select over the whole array."""
    if base.__class__ is Tracer:
        masked = _masked_of(base)
        if masked is not None:
            whole, c = masked
            return _mask(getitem(whole, key), c)
        split = _moving_slice(key)
        if split is not None:
            keys, axis = split
            return _stack([base[k] for k in keys], axis)
        return base[key]
    if base.__class__ is np.ndarray and _tracing() and base.dtype.kind in "fiub":
        if _has_tracer(key):
            return getitem(_table(base), key)
    return base[key]


def setitem(base: Any, key: Any, value: Any) -> None:
    """``base[key] = value``; a slice of fixed length at a traced start writes its elements."""
    split = _moving_slice(key) if base.__class__ is Tracer else None
    if split is None:
        base[key] = value
        return
    keys, axis = split
    v = value if value.__class__ is Tracer else np.asarray(value)
    for j, k in enumerate(keys):
        base[k] = v[(slice(None),) * axis + (j,)] if np.ndim(v) > axis else v


#: The longest slice at a traced start read element by element (``x[3*i : 3*i + 3]``); a
#: longer one (a layer's weights, ``p[b : b + 64]``) makes its loop run as written.
MOVING_SLICE = 8


def _has_slice_tracer(k: Any) -> bool:
    return k.__class__ is slice and (k.start.__class__ is Tracer or k.stop.__class__ is Tracer)


def _moving_slice(key: Any) -> tuple[list, int] | None:
    """For a key with one slice whose bounds are traced and whose length is fixed (``stop`` is
    ``start`` plus a constant; step 1), the keys of its elements and the axis of the result
    they stack along; ``None`` for a key without such a slice. Raises ``TracingError`` for a
    traced slice of another form (its length would follow the data)."""
    items = key if key.__class__ is tuple else (key,)
    pos = [k for k, it in enumerate(items) if _has_slice_tracer(it)]
    if not pos:
        return None
    if len(pos) > 1 or any(it is Ellipsis or it is None for it in items):
        raise TracingError("more than one slice with traced bounds in one index")
    sl = items[pos[0]]
    if sl.step not in (None, 1):
        raise TracingError("a slice with traced bounds and a step")
    start, stop = lift(0.0 if sl.start is None else sl.start), lift(sl.stop)
    n = stop.node
    length = None
    if n.op == Op.ADD:
        a, b = n.args
        if a is start.node and b.op == Op.CONST and b.shape == ():
            length = b.attrs[0]
        elif b is start.node and a.op == Op.CONST and a.shape == ():
            length = a.attrs[0]
    if length is None or length != int(length) or not 0 <= length <= MOVING_SLICE:
        raise TracingError(
            "a slice whose length follows traced values; write x[s : s + L] with a fixed L, "
            "or read the elements one by one"
        )
    axis = sum(1 for it in items[: pos[0]] if it.__class__ is slice)
    keys = [items[: pos[0]] + (sl.start + j if sl.start is not None else j,) + items[pos[0] + 1 :]
            for j in range(int(length))]  # fmt: skip
    return [k if len(k) > 1 else k[0] for k in keys], axis


def _stack(parts: list, axis: int) -> Any:
    if not parts:
        raise TracingError("an empty slice with traced bounds")
    return np.stack(parts, axis=axis)


_AUG = {"+": operator.iadd, "-": operator.isub, "*": operator.imul, "/": operator.itruediv,
        "**": operator.ipow, "//": operator.ifloordiv, "%": operator.imod}  # fmt: skip


def aug(base: Any, key: Any, op: str, value: Any) -> None:
    """``base[key] op= value``, in place, as Python runs it (one read, one write)."""
    setitem(base, key, _AUG[op](getitem(base, key), value))


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


def max2(a: Any, b: Any) -> Any:
    """Python's ``max(a, b)`` — ``b if b > a else a`` — as a select when either is traced
    (no guard: the choice may differ from element to element of the data)."""
    if a.__class__ is Tracer or b.__class__ is Tracer:
        if np.ndim(a) or np.ndim(b):
            return max(a, b)  # an array: Python's max compares it as a truth value (an error)
        return _build(ops.where, lift(b) > lift(a), b, a)
    return max(a, b)


def min2(a: Any, b: Any) -> Any:
    """Python's ``min(a, b)`` — ``b if b < a else a`` — as a select when either is traced."""
    if a.__class__ is Tracer or b.__class__ is Tracer:
        if np.ndim(a) or np.ndim(b):
            return min(a, b)
        return _build(ops.where, lift(b) < lift(a), b, a)
    return min(a, b)


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


#: ``sys.getrefcount`` of a carry referenced only by its name and the loop's value tuple, as
#: :func:`_aliased` sees it (the frame in between adds none).
_EXPECTED_REFS = 4


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


def _unbound(e: NameError) -> NameError:
    """The error the code as written raises for ``e``: a local of the function read before it
    is bound, which a converted body reads as a closure cell, is an ``UnboundLocalError``."""
    if type(e) is NameError and "free variable" in str(e) and getattr(e, "name", None):
        return UnboundLocalError(
            f"cannot access local variable '{e.name}' where it is not associated with a value"
        )
    return e
