"""Indexing at traced positions: ``x[i]``, ``x[i, :]``, ``x[i + 1, j]``, ``y[i] = v``, ``y[i] += v``.

A *traced position* is a traced scalar used as an index: the counter of a
:func:`tapejit.fori_loop` / :func:`tapejit.scan` / :func:`tapejit.while_loop` body, an integer
value carried through a loop, or any scalar computed from the inputs. Any axis may take one;
the other entries of the key are ints, slices or ``...``. numpy's semantics: a position is a
whole number in ``[-n, n)`` for an axis of length ``n`` (a negative one counts from the end),
and the result is what numpy's basic indexing gives (``x[i]`` of a 2-D ``x`` is a row — a view:
writes to it reach ``x``, as in numpy).

**Out of range is an error, never a read of other memory.** The position the generated code
uses is always clamped into ``[0, n)``; whether the traced one was in range is checked apart:

* at trace time, by interval arithmetic over the position's expression (:func:`interval`):
  a loop counter ranges over its loop's iterations, constants are themselves, and ``+ - *``,
  ``floor``/``ceil``/``rint``/``trunc``, ``maximum``/``minimum`` and division by a positive
  constant carry ranges through. A position proved in range (and whole) costs nothing more —
  ``x[i]``, ``x[i + 1]`` and ``x[n - 1 - i]`` over ``fori_loop(0, n - 1, ...)`` are proved;
* otherwise at run time: at the top level of the traced function the flag "out of range or
  not whole" is a guard whose site begins with :data:`INDEX_SITE`, which the runtime turns
  into an ``IndexError`` naming the line (no output is written); in a loop body the flag is
  recorded on the body's trace (:func:`check`) and :func:`tapejit.frontend.control` counts, in an extra
  carry per site, the iterations where it was set — checked after the loop, by the enclosing
  body or by a guard, in turn.

The read is ``take`` and the write ``put`` of :mod:`tapejit.core.ops_table` through a one-entry
table computed from the position (the axes with traced positions moved to the front and merged
into one): their derivative rules are the dynamic gather/scatter-add pair, so the cotangent of
``x[i]`` is one ``add_at`` into ``x``'s cotangent at the same position.
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import numpy as np

from ..core import ops
from . import views
from ..core.ir import Node
from ..core.ops import Op
from ..core.ops_table import put, take
from .errors import _fail, _user_site
from .trace_state import _UNSET, BodyTrace, _state, _values
from .trace_state import _current as _stack
from .tracer import Tracer, lift

#: How the site of a traced-position check begins (a guard's site; the runtime reads it).
INDEX_SITE = "tapejit: traced index out of range"

def is_index_site(where: str) -> bool:
    return where.startswith(INDEX_SITE)


def index_error(name: str, where: str) -> IndexError:
    """The error of a call whose traced index check ``where`` (a guard's site) failed."""
    return IndexError(f"{name}: {where[len('tapejit: ') :]}; nothing was written")


#: How the site of a linear-algebra check begins (a singular ``solve``/``inv``, a Cholesky
#: factor of a matrix that is not positive definite): a guard the runtime turns into numpy's
#: ``LinAlgError`` (:func:`run_error`), recorded by :func:`check` like an index check.
LINALG_SITE = "tapejit: linalg: "


def run_error(name: str, where: str) -> Exception | None:
    """The error a call raises when the guard at site ``where`` fails and no other variant can
    answer it — an index out of range (``IndexError``), a singular matrix (``LinAlgError``) —
    or ``None`` for a guard on the path taken (a retrace answers it)."""
    if is_index_site(where):
        return index_error(name, where)
    if where.startswith(LINALG_SITE):
        return np.linalg.LinAlgError(f"{name}: {where[len(LINALG_SITE) :]}; nothing was written")
    return None


def is_dynamic(key: Any) -> bool:
    """Whether ``key`` holds a traced scalar position."""
    if key.__class__ is Tracer:
        return key.node.shape == ()
    return key.__class__ is tuple and any(k.__class__ is Tracer and k.node.shape == () for k in key)


# ----------------------------------------------------------------------------------------------
# Ranges of positions, at trace time


def interval(node: Node, st: Any = None, depth: int = 0) -> tuple[float, float, bool] | None:
    """``(lo, hi, whole)``: bounds of the values scalar ``node`` takes in trace ``st`` (default:
    the innermost) and whether they are all whole numbers; ``None`` when not known."""
    st = _state() if st is None else st
    if depth > 32 or node.type.size != 1:
        return None
    op, args = node.op, node.args
    if op == Op.CONST:
        v = float(node.attrs[0])
        return v, v, v.is_integer()
    if op == Op.INPUT:
        if isinstance(st, BodyTrace):
            if node is st.inputs[0] and st.counter_range is not None:
                lo, hi = st.counter_range
                return float(lo), float(hi), True
            for inp, outer in zip(st.param_inputs, st.params):
                if inp is node:
                    return interval(outer.node, st.parent, depth + 1)
        return None
    if op == Op.RESHAPE:
        return interval(args[0], st, depth + 1)
    if op == Op.CAST:
        return (0.0, 1.0, True) if args[0].dtype == "bool" else None
    rs = [interval(a, st, depth + 1) for a in args]
    if any(r is None for r in rs):
        return None
    whole = all(r[2] for r in rs)
    if op in (Op.FLOOR, Op.CEIL, Op.RINT, Op.TRUNC):
        lo, hi, _ = rs[0]
        return math.floor(lo), math.ceil(hi), True
    if op == Op.NEG:
        lo, hi, w = rs[0]
        return -hi, -lo, w
    if op in (Op.ADD, Op.SUB, Op.MUL, Op.MAXIMUM, Op.MINIMUM):
        (a, b, _), (c, d, _) = rs
        if op == Op.ADD:
            return a + c, b + d, whole
        if op == Op.SUB:
            return a - d, b - c, whole
        if op == Op.MAXIMUM:
            return max(a, c), max(b, d), whole
        if op == Op.MINIMUM:
            return min(a, c), min(b, d), whole
        with np.errstate(all="ignore"):
            corners = [a * c, a * d, b * c, b * d]
        if any(math.isnan(v) for v in corners):
            return None
        return min(corners), max(corners), whole
    if op == Op.DIV and rs[1][0] == rs[1][1] and rs[1][0] > 0:
        return rs[0][0] / rs[1][0], rs[0][1] / rs[1][0], False
    return None


def check(bad: Node, site: str) -> None:
    """Record that this trace is wrong where the bool scalar ``bad`` holds (a position at
    ``site`` out of range): a guard at the top level, a recorded check in a loop body (which
    the loop turns into a count carried through it, see :func:`tapejit.frontend.control._loop`)."""
    if bad.op == Op.CONST and not bad.attrs[0]:
        return
    st = _state()
    if isinstance(st, BodyTrace) and not getattr(st, "allows_guards", False):
        if st.counter_range is None:
            raise _fail(
                "a traced index in a while_loop's cond that is not provably in range: the cond "
                "cannot report it; index in the body and carry the value to the cond instead"
            )
        st.index_checks.append((bad, site))
    else:
        st.guards.append((bad, False, site))


# ----------------------------------------------------------------------------------------------
# The key


class _Plan:
    """How ``x[key]`` reads: the traced axes ``dyn`` moved to the front (``perm``) and merged
    into one of length ``rows``, ``table`` the one-entry f64 table of the (clamped) merged
    position; ``rest`` the other axes' key entries, applied to the row by basic indexing."""

    def __init__(self, shape: tuple[int, ...], dyn: list[int], positions: list[Node], rest_key):
        self.shape = shape
        others = [a for a in range(len(shape)) if a not in dyn]
        self.perm = tuple(dyn + others)
        self.row_shape = tuple(shape[a] for a in others)
        self.rows = math.prod(shape[a] for a in dyn)
        merged = None
        for a, p in zip(dyn, positions):  # row-major over the traced axes
            merged = p if merged is None else ops.add(ops.mul(merged, ops.const(float(shape[a]))), p)
        self.table = ops.reshape(merged, (1,))
        self.rest_key = rest_key
        self.others = others

    def _front(self, node: Node) -> Node:
        return ops.reshape(ops.transpose(node, self.perm), (self.rows, *self.row_shape))

    def read(self, node: Node) -> Node:
        """The row of ``node`` (of the planned shape) at the traced position."""
        return ops.reshape(take(self._front(node), self.table), self.row_shape)

    def write(self, node: Node, row: Node) -> Node:
        """``node`` with the row at the traced position replaced by ``row``."""
        new = put(self._front(node), self.table, ops.reshape(row, (1, *self.row_shape)))
        moved = ops.reshape(new, tuple(self.shape[p] for p in self.perm))
        return ops.transpose(moved, tuple(np.argsort(self.perm).tolist()))


def _plan(x: Tracer, key: Any) -> _Plan:
    """Check ``key`` against ``x``'s shape, build and check each traced position."""
    shape = x.node.shape
    items = key if key.__class__ is tuple else (key,)
    if sum(k is Ellipsis for k in items) > 1:
        raise _fail("an index can only have a single ellipsis ('...')")
    if any(k is Ellipsis for k in items):
        i = next(j for j, k in enumerate(items) if k is Ellipsis)
        fill = len(shape) - (len(items) - 1)
        items = items[:i] + (slice(None),) * fill + items[i + 1 :]
    if len(items) > len(shape):
        raise _fail(f"too many indices ({len(items)}) for an array of shape {shape}")
    items = items + (slice(None),) * (len(shape) - len(items))
    dyn, positions, rest = [], [], []
    site = f"{INDEX_SITE} at {_user_site()}"
    for a, k in enumerate(items):
        if isinstance(k, Tracer):
            if k.node.dtype == "bool":
                raise _fail(
                    "a traced bool scalar as an index (a mask) is not supported; use "
                    "tapejit.where(cond, a, b)"
                )
            dyn.append(a)
            positions.append(_position(lift(k).node, shape[a], a, site))
        elif isinstance(k, (slice, int, np.integer)) and not isinstance(k, (bool, np.bool_)):
            rest.append(k)
        else:
            raise _fail(
                f"index of type {type(k).__name__} next to a traced index is not supported "
                "(the other entries must be ints, slices or '...')"
            )
    return _Plan(shape, dyn, positions, tuple(rest))


def _position(k: Node, n: int, axis: int, site: str) -> Node:
    """Position ``k`` into an axis of length ``n``, wrapped (negative ones) and clamped into
    ``[0, n)``; a run-time check records whether ``k`` was out of range or not whole, unless
    its range proves it was not."""
    if n == 0:
        raise _fail(f"index into axis {axis} of size 0")
    k = ops._float(k)
    r = interval(k)
    lo, hi, whole = r if r is not None else (-math.inf, math.inf, False)
    if whole and 0 <= lo and hi < n:
        return k
    if whole and -n <= lo and hi < 0:
        return ops.add(k, ops.const(float(n)))
    zero, size = ops.const(0.0), ops.const(float(n))
    wrapped = k if lo >= 0 else ops.where(ops.make(Op.LT, k, zero), ops.add(k, size), k)
    bad = ops.make(
        Op.OR,
        ops.make(Op.LT, wrapped, zero),
        ops.make(Op.GE, wrapped, size),
    )
    if not whole:
        bad = ops.make(Op.OR, bad, ops.make(Op.NE, k, ops.elementwise(Op.FLOOR, k)))
    check(bad, f"{site}: index outside [-{n}, {n}) (or not a whole number) for axis {axis}")
    clamped = ops.elementwise(
        Op.MINIMUM, ops.elementwise(Op.MAXIMUM, wrapped, zero), ops.const(n - 1.0)
    )
    return clamped if whole else ops.elementwise(Op.FLOOR, clamped)


# ----------------------------------------------------------------------------------------------
# Reads and writes


def _current(x: Any) -> Tracer:
    """``x`` as a tracer of the innermost trace, its value known to the evaluator."""
    t = lift(x)
    if t._value is not _UNSET:
        _values.setdefault(id(t.node), (t.node, t._value))
    return t


def getitem(x: Tracer, key: Any) -> Tracer:
    """``x[key]`` for a key with traced positions (see the module docstring)."""
    own = x.level == _depth()  # (an enclosing function's array, read in a loop body: no view)
    x = _current(x)
    plan = _plan(x, key)
    row = Tracer(plan.read(x.node), _UNSET, x.level)
    if plan.row_shape and own:
        # a view, as numpy's: writes to the row reach x (views.apply_step/_inverse replay it)
        strides, _ = views.layout(x)
        step = (views.DYNAMIC, plan)
        row._view = views.ViewOf(x, step, tuple(strides[a] for a in plan.others), 0)
        if not isinstance(views.root_of(x)._view, views.ReadOnly):
            x._views = x._views if x._views is not None else []
            x._views.append(weakref.ref(row))
    if all(isinstance(k, slice) and k == slice(None) for k in plan.rest_key):
        return row
    return row[plan.rest_key]


def setitem(y: Tracer, key: Any, value: Any) -> None:
    """``y[key] = value`` for a key with traced positions: the row at the position is read
    (unless the key covers all of it), updated by basic indexing, and written back (``put``);
    ``y`` and its views are rebound to the result, as every write is (:func:`views.write`)."""
    plan = _plan(y, key)
    whole_row = all(isinstance(k, slice) and k == slice(None) for k in plan.rest_key)
    if whole_row:
        start = ops.const(False if y.node.dtype == "bool" else 0.0, plan.row_shape, y.node.dtype)
    else:
        start = plan.read(y.node)
    row = Tracer(start, _UNSET, y.level)
    row[plan.rest_key if plan.rest_key else Ellipsis] = value  # casts and broadcasts as numpy
    views.write(y, plan.write(y.node, row.node), _UNSET)


def _depth() -> int:
    return len(_stack.items)
