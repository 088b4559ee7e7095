"""``ufunc.at``: numpy's unbuffered in-place ufunc (``np.add.at(a, idx, b)``,
``np.maximum.at``, ``np.negative.at(a, idx)``, ...) on a traced array, as a functional update
that ``a`` (and every view of its memory) is rebound to, like ``a[idx] += b`` — except that a
position named several times is updated once per occurrence, in order, as numpy does.

numpy itself resolves the index (ints, slices, ``...``, ``None``, integer arrays, boolean
masks, tuples of them): ``arange(a.size).reshape(a.shape)[idx]`` gives the flat position of
every element the key selects, in the shape ``b`` broadcasts to. Then, on ``a`` flattened:

* ``add``/``subtract``: one ``add_at`` node (:mod:`tapejit.core.ops_table`), which adds row ``t``
  at position ``t`` in order; its adjoint is a ``take`` of the cotangent.
* any other ufunc: the occurrences split into rounds, round ``r`` holding each position's
  ``r``-th occurrence (distinct positions): ``a = put(a, p_r, f(take(a, p_r), take(b, t_r)))``.
  As many rounds as the most repeated position, each three table nodes; the order of the
  updates of one position is numpy's.

Index arrays must be known when tracing. ``a`` must be an array the traced function made (not
its argument: the write raises the error of every other write into an argument, see
:func:`tapejit.frontend.tracing._setitem`), and float64.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ...core import ops_table
from .np_shape import _broadcast_to
from ..errors import _fail
from ..indexing import _setitem
from ..tracer import Tracer, _build, _copy, _reshape, lift


def _positions(name: str, shape: tuple, indices) -> np.ndarray:
    """The flat position of each element ``indices`` selects from an array of ``shape``."""
    items = indices if isinstance(indices, tuple) else (indices,)
    if any(isinstance(k, Tracer) for k in items):
        raise _fail(
            f"numpy.{name}.at with a traced index: index arrays must be known when tracing"
        )
    try:
        return np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)[indices]
    except (IndexError, TypeError, ValueError) as e:
        raise _fail(f"numpy.{name}.at: {e}") from None


def _rounds(p: np.ndarray) -> list[np.ndarray]:
    """The indices ``t`` of ``p`` grouped by occurrence: round ``r`` holds, for each position
    named more than ``r`` times, the ``t`` of its ``r``-th occurrence (ascending ``t``)."""
    order = np.argsort(p, kind="stable")
    sp = p[order]
    start = np.r_[0, np.flatnonzero(sp[1:] != sp[:-1]) + 1] if p.size else np.zeros(0, int)
    occ = np.empty(p.size, dtype=np.int64)
    occ[order] = np.arange(p.size) - np.repeat(start, np.diff(np.r_[start, p.size]))
    return [np.flatnonzero(occ == r) for r in range(int(occ.max()) + 1 if p.size else 0)]


def _table(positions: np.ndarray, n: int) -> Tracer:
    return lift(ops_table.table_of(positions, n))


def ufunc_at(name: str, fn: Callable[..., Tracer], a, indices, b=None) -> None:
    """``numpy.<name>.at(a, indices, b)`` for the traced float64 array ``a`` (see the module
    docstring); ``fn`` is the ufunc's traced implementation. Returns None, as numpy."""
    if not isinstance(a, Tracer):
        raise _fail(
            f"numpy.{name}.at into a numpy array with traced values: a numpy array cannot hold "
            "them; make the array a traced one, e.g. y = np.zeros_like(x, shape=(n,))"
        )
    if a.node.dtype != "f64":
        raise _fail(f"numpy.{name}.at on a {a.dtype} array is not supported (float64 only)")
    p = _positions(name, a.shape, indices)
    if p.size == 0:
        return None
    flat = _copy(_reshape(a, (-1,)))  # the values, not a view: a is written once below
    n = flat.shape[0]
    v = None
    if b is not None:
        bt = lift(b)
        try:
            v = _reshape(_broadcast_to(bt, p.shape), (-1,))
        except Exception:
            raise _fail(
                f"numpy.{name}.at: operands could not be broadcast together with remapped "
                f"shapes {bt.shape} and {p.shape}"
            ) from None
    p = p.reshape(-1)
    if name in ("add", "subtract") and v is not None:
        upd = v if name == "add" else -v
        new = _build(ops_table.add_at, flat, _table(p, n), upd)
    else:
        new = flat
        for ts in _rounds(p):
            rows = _table(p[ts], n)
            cur = _build(ops_table.take, new, rows)
            r = fn(cur) if v is None else fn(cur, _build(ops_table.take, v, _table(ts, p.size)))
            r = lift(r)
            if r.node.dtype != "f64":
                raise _fail(f"numpy.{name}.at: the ufunc's {r.dtype} result in a float64 array")
            new = _build(ops_table.put, new, rows, r)
    _setitem(a, Ellipsis, _reshape(new, a.shape))
    return None
