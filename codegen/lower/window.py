"""Lowering of the ragged-window primitives ``window`` and ``window_add``
(:mod:`tapejit.core.ops_window`): a loop nest over the layout's rows ``k`` and their positions ``m``,
the rows of the operand addressed as ``a + c*k + d*m`` — an affine inner loop, vectorised like
a hand-written triangular double loop. Registered into :data:`.lowering.INDEX_OPS` (the
``LOWER`` table's ``"index"`` row dispatches there); the loops over rows and positions
(:func:`ragged_nest`) are the registry's, as fused loops reading windows run in them too.

The attributes were checked when the node was built (every row read is in bounds), so the
generated code indexes without a check.
"""

from __future__ import annotations

import math

from ...core.ir import Node
from ...core.ops import Op

from .base import I64
from .lowering import INDEX_OPS, Lowering, ragged_nest, row_element, rows, window_element


def lower_window(L: Lowering, n: Node) -> None:
    """``out[base(k) + m] = x[a + c*k + d*m]`` for every row ``k`` and ``m < L(k)``."""
    with ragged_nest(L, n.attrs, n.shape) as (idx, row):
        v = L.load(n.args[0], window_element(L, n, row, idx[1:]))
        L.define(n, L.flat(idx, n.shape), v)


def lower_window_add(L: Lowering, n: Node) -> None:
    """``out = acc`` (copied unless it shares the buffer), then ``out[a + c*k + d*m] +=
    upd[base(k) + m]``. With ``d = 0`` a row's updates go to one row of ``out``: they are summed
    in a register first (reassociated, as ``np.sum`` is), one addition into ``out`` per row."""
    acc, upd = n.args
    if L.location(n) != L.location(acc):
        L.copy_into(L.ptr(n), acc)
    b = L.b
    out = L.ptr(n)

    def add_into(at, u) -> None:
        p = b.gep(out, [at], inbounds=True)
        b.store(b.fadd(b.load(p), u), p)

    if n.attrs[5] != 0:
        with ragged_nest(L, n.attrs, upd.shape) as (idx, row):
            u = L.load(upd, L.flat(idx, upd.shape))
            add_into(row_element(L, n.attrs, n.shape, row, idx[1:]), u)
        return
    width = math.prod(acc.shape[1:])
    with rows(L, n.attrs) as (k, length, base):
        at = row_element(L, n.attrs, n.shape, (k, I64(0)), [])
        with L.loop(width) as r:
            s = L.accumulator(0.0)
            with L.loop(length) as m:
                src = L.affine([base, m, r], 0, (width, width, 1))
                b.store(b.fadd(b.load(s), L.load(upd, src), flags=("reassoc",)), s)
            add_into(b.add(at, r, flags=("nsw",)), b.load(s))


INDEX_OPS.update({Op.WINDOW: lower_window, Op.WINDOW_ADD: lower_window_add})
