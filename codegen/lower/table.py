"""Lowering of the table-indexed primitives ``take``, ``add_at`` and ``put``
(:mod:`tapejit.core.ops_table`):
a loop over the table, each position converted from its f64 value to an element offset.
Registered into :data:`.lowering.INDEX_OPS` (the ``LOWER`` table's ``"index"`` row dispatches
there).

The table is a constant input whose values the graph's builder checked (whole numbers in
``[0, n)``), so the generated code indexes with them directly.
"""

from __future__ import annotations

import math

from ...core.ir import Node
from ...core.ops import Op

from .base import I64
from .lowering import INDEX_OPS, Lowering


def _row(L: Lowering, idx: Node, t, width: int):
    """Element offset of the row table ``idx`` names at position ``t``."""
    b = L.b
    row = b.fptosi(L.load(idx, t), I64)
    return b.mul(row, I64(width), flags=("nsw",)) if width != 1 else row


def lower_take(L: Lowering, n: Node) -> None:
    """``out[t, ...] = x[idx[t], ...]``: one loop over the table, the row copied inside it."""
    x, idx = n.args
    width = math.prod(x.shape[1:])
    b = L.b
    with L.loop(idx.shape[0]) as t:
        src = _row(L, idx, t, width)
        dst = b.mul(t, I64(width), flags=("nsw",)) if width != 1 else t
        if width == 1:
            L.define(n, dst, L.load(x, src))
        else:
            with L.loop(width) as r:
                L.define(n, b.add(dst, r, flags=("nsw",)), L.load(x, b.add(src, r, flags=("nsw",))))


def lower_add_at(L: Lowering, n: Node) -> None:
    """``out = acc`` (copied unless it shares the buffer), then ``out[idx[t], ...] += upd[t,
    ...]`` for t = 0, 1, ... in order (a repeated position accumulates, as ``np.add.at``)."""
    _lower_rows_into(L, n, add=True)


def lower_put(L: Lowering, n: Node) -> None:
    """``out = acc`` (copied unless it shares the buffer), then ``out[idx[t], ...] = upd[t,
    ...]`` (distinct positions: any order)."""
    _lower_rows_into(L, n, add=False)


def _lower_rows_into(L: Lowering, n: Node, add: bool) -> None:
    acc, idx, upd = n.args
    if L.location(n) != L.location(acc):
        L.copy_into(L.ptr(n), acc)
    width = math.prod(acc.shape[1:])
    b = L.b
    base = L.ptr(n)
    with L.loop(idx.shape[0]) as t:
        at = _row(L, idx, t, width)
        src = b.mul(t, I64(width), flags=("nsw",)) if width != 1 else t
        with L.loop(width) as r:
            u = L.load(upd, b.add(src, r, flags=("nsw",)))
            dst = b.add(at, r, flags=("nsw",))
            if add:
                p = b.gep(base, [dst], inbounds=True)
                b.store(b.fadd(b.load(p), u), p)
            else:
                L.store_to(base, dst, u, n.dtype)


INDEX_OPS.update({Op.TAKE: lower_take, Op.ADD_AT: lower_add_at, Op.PUT: lower_put})
