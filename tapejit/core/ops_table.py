"""Element access through a table of positions: the primitives ``take``, ``add_at`` and ``put``,
with their type rules, numpy references and derivative rules, written with the ops builders like
every other rule, and their ``defop`` blocks at the end (a family of the registry
:mod:`tapejit.core.ops`).

* ``take(x, idx)``: rows ``x[idx[t]]`` of ``x`` (shape ``(n, *rest)``) for a table ``idx`` of
  ``T`` positions — ``numpy.take(x, idx, axis=0)``; shape ``(T, *rest)``.
* ``add_at(acc, idx, upd)``: ``acc`` with row ``upd[t]`` added to row ``idx[t]``, in the order
  ``t = 0, 1, ...`` (a position repeated accumulates) — ``numpy.add.at(acc, idx, upd)`` on a
  copy; shape of ``acc``.
* ``put(acc, idx, upd)``: ``acc`` with row ``idx[t]`` replaced by ``upd[t]`` — ``acc[idx] =
  upd`` on a copy, for a table of *distinct* positions (so the order of the writes does not
  matter); shape of ``acc``.

The table is an f64 array of whole numbers in ``[0, n)`` — a constant input (a table the
re-rolling pass builds from the positions a trace read, or a numpy index array the function
captured): whoever builds the node vouches for its values (:func:`table_of` checks them), and
generated code reads it without a bounds check. The derivative rules are the adjoint pair: the
cotangent of ``take`` is an ``add_at`` of it into zeros, the cotangent of ``add_at``'s update a
``take`` of it; ``put`` passes the cotangent of the rows it keeps to ``acc`` (zeros ``put``
where it writes) and those of the rows it writes to ``upd`` (a ``take``); ``idx`` gets none.
"""

from __future__ import annotations

import numpy as np

from .ir import Node, Type
from .ops import Op, _or_zero, const, defop, make


def take(x: Node, idx: Node) -> Node:
    """Rows ``x[idx[t]]``: shape ``(T, *x.shape[1:])`` for a table ``idx`` of shape ``(T,)``."""
    return make(Op.TAKE, x, idx)


def add_at(acc: Node, idx: Node, upd: Node) -> Node:
    """``acc`` with ``upd[t]`` added to row ``idx[t]`` for ``t = 0, 1, ...`` in order."""
    return make(Op.ADD_AT, acc, idx, upd)


def put(acc: Node, idx: Node, upd: Node) -> Node:
    """``acc`` with row ``idx[t]`` replaced by ``upd[t]``; the positions must be distinct."""
    return make(Op.PUT, acc, idx, upd)


def table_of(positions, n: int) -> np.ndarray:
    """The f64 table of ``positions`` (whole numbers) into an axis of length ``n``, negative
    ones counted from the end as numpy does. Raises ``IndexError`` for a position outside
    ``[-n, n)``, ``TypeError`` for one that is not a whole number."""
    p = np.asarray(positions)
    if p.dtype.kind not in "iu" and not (p.dtype.kind == "f" and np.all(p == np.floor(p))):
        raise TypeError(f"positions must be integers, got {p.dtype}")
    p = p.astype(np.int64).ravel()
    if p.size and (p.min() < -n or p.max() >= n):
        bad = p[(p < -n) | (p >= n)][0]
        raise IndexError(f"index {bad} is out of bounds for axis 0 with size {n}")
    return np.where(p < 0, p + n, p).astype(np.float64)


def _positions(idx: np.ndarray, n: int) -> np.ndarray:
    p = np.asarray(idx, dtype=np.float64)
    if p.size and (p.min() < 0 or p.max() >= n or np.any(p != np.floor(p))):
        raise ValueError(f"a position table holds values outside the whole numbers of [0, {n})")
    return p.astype(np.int64)


def _take_type(types, attrs) -> Type:
    x, idx = types
    if x.dtype != "f64" or idx.dtype != "f64":
        raise TypeError(f"take needs f64 operands, got {x.dtype} and {idx.dtype}")
    if x.shape == () or len(idx.shape) != 1:
        raise ValueError(f"take needs an array and a 1-D table, got {x.shape} and {idx.shape}")
    return Type((idx.shape[0], *x.shape[1:]))


def _add_at_type(types, attrs) -> Type:
    acc, idx, upd = types
    if acc.dtype != "f64" or idx.dtype != "f64" or upd.dtype != "f64":
        raise TypeError("add_at needs f64 operands")
    if acc.shape == () or len(idx.shape) != 1 or upd.shape != (idx.shape[0], *acc.shape[1:]):
        raise ValueError(
            f"add_at of updates {upd.shape} at a table {idx.shape} into {acc.shape}: the updates "
            "must be one row of the array per position"
        )
    return acc


def _put_type(types, attrs) -> Type:
    acc, idx, upd = types
    if acc.dtype != upd.dtype or idx.dtype != "f64":
        raise TypeError(f"put needs an update of the array's dtype {acc.dtype} and an f64 table")
    if acc.shape == () or len(idx.shape) != 1 or upd.shape != (idx.shape[0], *acc.shape[1:]):
        raise ValueError(
            f"put of updates {upd.shape} at a table {idx.shape} into {acc.shape}: the updates "
            "must be one row of the array per position"
        )
    return acc


def _put_ref(attrs, acc, idx, upd):
    out = np.array(acc, copy=True)
    rows = _positions(idx, out.shape[0])
    if len(np.unique(rows)) != len(rows):
        raise ValueError("put needs distinct positions")
    out[rows] = upd
    return out


def _put_vjp(g, out, acc, idx, upd):
    return put(g, idx, const(0.0, upd.shape)), None, take(g, idx)


def _put_jvp(t, out, acc, idx, upd):
    ta, _, tu = t
    if ta is None and tu is None:
        return None
    return put(_or_zero(ta, acc), idx, _or_zero(tu, upd))


def _take_ref(attrs, x, idx):
    x = np.asarray(x, dtype=np.float64)
    return x[_positions(idx, x.shape[0])]


def _add_at_ref(attrs, acc, idx, upd):
    out = np.array(acc, dtype=np.float64, copy=True)
    np.add.at(out, _positions(idx, out.shape[0]), upd)
    return out


def _take_vjp(g, out, x, idx):
    return add_at(const(0.0, x.shape), idx, g), None


def _add_at_vjp(g, out, acc, idx, upd):
    return g, None, take(g, idx)


def _take_jvp(t, out, x, idx):
    tx, _ = t
    return None if tx is None else take(tx, idx)


def _add_at_jvp(t, out, acc, idx, upd):
    ta, _, tu = t
    if tu is None:
        return ta
    return add_at(_or_zero(ta, acc), idx, tu)


# fmt: off
# take(x, idx): rows x[idx[t]] for a table of whole-number positions (an f64 constant input);
# add_at(acc, idx, upd): acc with row upd[t] added at row idx[t], t in order (above)
defop(Op.TAKE, "index", 2, _take_type, _take_ref, _take_vjp, jvp=_take_jvp)
defop(Op.ADD_AT, "index", 3, _add_at_type, _add_at_ref, _add_at_vjp, jvp=_add_at_jvp)
# put(acc, idx, upd): acc with rows idx[t] replaced by upd[t], the positions distinct
defop(Op.PUT, "index", 3, _put_type, _put_ref, _put_vjp, jvp=_put_jvp)
# fmt: on
