"""Lowering of the ragged-window primitives ``window`` and ``window_add``
(:mod:`tapejit.core.ops_window`): a loop nest over the layout's rows ``k`` and their positions ``m``,
the rows of the operand addressed as ``a + c*k + d*m`` — an affine inner loop, vectorised like
a hand-written triangular double loop. Part of :mod:`tapejit.codegen.lower.driver` (its ``LOWER``
table's ``"index"`` row dispatches here).

The attributes were checked when the node was built (every row read is in bounds), so the
generated code indexes without a check.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

from ...core.ir import Node
from ...core.ops import Op

from .driver import I64, Lowering


@contextmanager
def rows(L: Lowering, attrs: tuple):
    """``for k in range(T)``: yields ``(k, L(k), base(k))`` as i64 values."""
    T, L0, dL = attrs[:3]
    b = L.b
    with L.loop(T) as k:
        # base(k) = L0*k + dL*k*(k-1)/2, exact in i64 (k*(k-1) is even)
        tri = b.sdiv(b.mul(k, b.sub(k, I64(1)), flags=("nsw",)), I64(2))
        yield k, L.affine([k], L0, (dL,)), L.affine([k, tri], 0, (L0, dL))


@contextmanager
def ragged_nest(L: Lowering, attrs: tuple, space: tuple, hint: int = 0):
    """The loops over ``space = (P, *S)`` of a ragged layout ``attrs[:3]``: rows ``k``, their
    positions ``m`` (the vectorised loop, with the interleave ``hint``), then ``S``. Yields
    ``([p, *s], (k, m))`` with ``p = base(k) + m`` the flat position, as
    :meth:`Lowering.nest` yields ``[p, *s]``. A fused loop whose body reads windows runs in
    it, and so do the standalone ops."""
    b = L.b
    with rows(L, attrs) as (k, length, base):
        with L.loop(length, hint) as m:
            p = b.add(base, m, flags=("nsw",))
            with L.nest(tuple(space[1:])) as rest:
                yield [p, *rest], (k, m)


def row_element(L: Lowering, attrs: tuple, dims: tuple, row: tuple, rest: list):
    """Element offset, in an array of extents ``dims``, of row ``a + c*k + d*m`` of window
    position ``row = (k, m)`` and inner index ``rest``."""
    a, c, d = attrs[3:]
    return L.affine([L.affine(list(row), a, (c, d)), *rest], 0, L.c_strides(dims))


def window_element(L: Lowering, n: Node, row: tuple, rest: list):
    """Element offset in ``window`` ``n``'s operand of the element at row position ``row =
    (k, m)`` and inner index ``rest``."""
    return row_element(L, n.attrs, L.shape(n.args[0]), row, rest)


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


WINDOW_OPS = {Op.WINDOW: lower_window, Op.WINDOW_ADD: lower_window_add}
