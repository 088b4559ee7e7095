"""Lowering of the ragged-window primitives ``window`` and ``window_add``
(:mod:`tapejit.ops_window`): a loop nest over the layout's rows ``k`` and their positions ``m``,
the rows of the operand addressed as ``a + c*k + d*m`` — an affine inner loop, vectorised like
a hand-written triangular double loop. Part of :mod:`tapejit.codegen.lower` (its ``LOWER``
table's ``"index"`` row dispatches here).

The attributes were checked when the node was built (every row read is in bounds), so the
generated code indexes without a check.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

from tapejit.ir import Node
from tapejit.ops import Op

from .lower import I64, Lowering


def _mul(L: Lowering, v, s: int):
    b = L.b
    if s == 0:
        return I64(0)
    return v if s == 1 else b.mul(v, I64(s), flags=("nsw",))


def _add(L: Lowering, *vs):
    acc = None
    for v in vs:
        if isinstance(v, int):
            if v == 0:
                continue
            v = I64(v)
        acc = v if acc is None else L.b.add(acc, v, flags=("nsw",))
    return I64(0) if acc is None else acc


@contextmanager
def rows(L: Lowering, attrs: tuple):
    """``for k in range(T)``: yields ``(k, L(k), base(k))`` as i64 values."""
    T, L0, dL = attrs[:3]
    b = L.b
    with L.loop(T) as k:
        length = _add(L, L0, _mul(L, k, dL))
        # base(k) = L0*k + dL*k*(k-1)/2, exact in i64 (k*(k-1) is even)
        tri = b.sdiv(b.mul(k, b.sub(k, I64(1)), flags=("nsw",)), I64(2))
        yield k, length, _add(L, _mul(L, k, L0), _mul(L, tri, dL))


def row_of(L: Lowering, attrs: tuple, k, m):
    """The operand row ``a + c*k + d*m`` of window position ``(k, m)``."""
    a, c, d = attrs[3:]
    return _add(L, a, _mul(L, k, c), _mul(L, m, d))


def lower_window(L: Lowering, n: Node) -> None:
    """``out[base(k) + m] = x[a + c*k + d*m]`` for every row ``k`` and ``m < L(k)``."""
    (x,) = n.args
    width = math.prod(x.shape[1:])
    b = L.b
    with rows(L, n.attrs) as (k, length, base):
        with L.loop(length) as m:
            src = _mul(L, row_of(L, n.attrs, k, m), width)
            dst = _mul(L, b.add(base, m, flags=("nsw",)), width)
            with L.loop(width) as r:
                L.define(n, b.add(dst, r, flags=("nsw",)), L.load(x, b.add(src, r, flags=("nsw",))))


def lower_window_add(L: Lowering, n: Node) -> None:
    """``out = acc`` (copied unless it shares the buffer), then ``out[a + c*k + d*m] +=
    upd[base(k) + m]``. With ``d = 0`` a row's updates go to one row of ``out``: they are summed
    in a register first (reassociated, as ``np.sum`` is), one addition into ``out`` per row."""
    acc, upd = n.args
    if L.location(n) != L.location(acc):
        L.copy_into(L.ptr(n), acc)
    width = math.prod(acc.shape[1:])
    d = n.attrs[5]
    b = L.b
    out = L.ptr(n)
    with rows(L, n.attrs) as (k, length, base):
        if d == 0:
            at = _mul(L, row_of(L, n.attrs, k, I64(0)), width)
            with L.loop(width) as r:
                s = L.accumulator(0.0)
                with L.loop(length) as m:
                    src = b.add(_mul(L, b.add(base, m, flags=("nsw",)), width), r, flags=("nsw",))
                    b.store(b.fadd(b.load(s), L.load(upd, src), flags=("reassoc",)), s)
                p = b.gep(out, [b.add(at, r, flags=("nsw",))], inbounds=True)
                b.store(b.fadd(b.load(p), b.load(s)), p)
        else:
            with L.loop(length) as m:
                at = _mul(L, row_of(L, n.attrs, k, m), width)
                src = _mul(L, b.add(base, m, flags=("nsw",)), width)
                with L.loop(width) as r:
                    u = L.load(upd, b.add(src, r, flags=("nsw",)))
                    p = b.gep(out, [b.add(at, r, flags=("nsw",))], inbounds=True)
                    b.store(b.fadd(b.load(p), u), p)


@contextmanager
def ragged_nest(L: Lowering, attrs: tuple, space: tuple, hint: int):
    """The loops of a fused kernel over ``space = (P, *S)`` whose body reads ragged windows of
    layout ``attrs[:3]``: rows ``k``, their positions ``m`` (the vectorised loop, with the
    kernel's interleave ``hint``), then ``S``. Yields ``([p, *s], (k, m))`` with ``p = base(k)
    + m`` the flat position, as :meth:`Lowering.nest` yields ``[p, *s]``."""
    b = L.b
    with rows(L, attrs) as (k, length, base):
        with L.loop(length, hint) as m:
            p = b.add(base, m, flags=("nsw",))
            with L.nest(tuple(space[1:])) as rest:
                yield [p, *rest], (k, m)


def window_element(L: Lowering, n: Node, row: tuple, rest: list):
    """Element offset in ``window`` ``n``'s operand of the element at row position ``row =
    (k, m)`` and inner index ``rest``."""
    x = n.args[0]
    dims = L.shape(x)
    strides = L.c_strides(dims)
    at = row_of(L, n.attrs, *row)
    return L.affine([at, *rest], 0, strides)


WINDOW_OPS = {Op.WINDOW: lower_window, Op.WINDOW_ADD: lower_window_add}
