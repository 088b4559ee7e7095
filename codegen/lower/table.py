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

from .base import F64, I64
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


def _slot(L: Lowering, t, init):
    """A stack slot of type ``t`` (in the entry block: promoted to a register) set to ``init``."""
    here = L.b.block
    L.b.position_at_start(L.fn.entry_basic_block)
    slot = L.b.alloca(t)
    L.b.position_at_end(here)
    L.b.store(init, slot)
    return slot


def _add_runs(L: Lowering, n: Node, base) -> None:
    """``out[idx[t]] += upd[t]`` for one-element rows, a run of equal positions summed in a
    register and stored once when the position changes: the additions into each element
    are the same, in the same order, as one read-modify-write per entry — but a run (the
    cotangent of a flattened nest's row, the table ``0, 0, ..., 1, 1, ...``) no longer waits
    on a store and a reload per entry."""
    _, idx, upd = n.args
    b = L.b
    at_slot = _slot(L, I64, I64(-1))
    sum_slot = _slot(L, F64, F64(0.0))
    with L.loop(idx.shape[0]) as t:
        at = _row(L, idx, t, 1)
        u = L.load(upd, t)
        prev = b.load(at_slot)
        with b.if_else(b.icmp_signed("==", at, prev)) as (same, other):
            with same:
                b.store(b.fadd(b.load(sum_slot), u), sum_slot)
            with other:
                with b.if_then(b.icmp_signed(">=", prev, I64(0))):
                    b.store(b.load(sum_slot), b.gep(base, [prev], inbounds=True))
                b.store(b.fadd(b.load(b.gep(base, [at], inbounds=True)), u), sum_slot)
                b.store(at, at_slot)
    last = b.load(at_slot)
    with b.if_then(b.icmp_signed(">=", last, I64(0))):
        b.store(b.load(sum_slot), b.gep(base, [last], inbounds=True))


def _lower_rows_into(L: Lowering, n: Node, add: bool) -> None:
    acc, idx, upd = n.args
    if L.location(n) != L.location(acc):
        L.copy_into(L.ptr(n), acc)
    width = math.prod(acc.shape[1:])
    b = L.b
    base = L.ptr(n)
    if add and width == 1 and n.dtype == "f64":
        return _add_runs(L, n, base)
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
