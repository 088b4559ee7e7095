"""The rows of plain array code: the scalar instructions of the elementwise ops (:data:`EMIT`,
the math ops through :mod:`tapejit.codegen.mathlib`) and the lowering of the elementwise, leaf,
reduce, shape and index groups (gathers, scatters, and the dispatch to :data:`INDEX_OPS`) —
registered into the tables of :mod:`.lowering`."""

from __future__ import annotations

import math

from ...core import ops
from ...core.ir import Node
from ...core.ops import Op

from .. import mathlib
from .base import F64, I1, I64, _i64
from .lowering import EMIT, INDEX_OPS, LOWER, Lowering, block_in_place, gather_affine


def _math(op):
    # array nodes are loop-body code (inlined so the loop vectoriser sees the math); scalar nodes
    # are straight-line code, which calls one out-of-line copy per module (compile time)
    return lambda b, n, *xs: mathlib.call(b, op, list(xs), inline=n.shape != ())


def _sign(b, n, x):
    pos = b.select(b.fcmp_ordered(">", x, F64(0.0)), F64(1.0), x)
    return b.select(b.fcmp_ordered("<", x, F64(0.0)), F64(-1.0), pos)


def _cast(b, n, x):
    src, dst = n.args[0].dtype, n.dtype
    if src == dst:
        return x
    if dst == "f64":
        return b.uitofp(x, F64)
    return b.fcmp_unordered("!=", x, F64(0.0))  # bool(nan) is True, as in numpy


#: Scalar code of each elementwise op: (builder, node, *operand values) -> value.
EMIT.update({
    Op.NEG: lambda b, n, x: b.fneg(x),
    Op.ADD: lambda b, n, x, y: b.fadd(x, y),
    Op.SUB: lambda b, n, x, y: b.fsub(x, y),
    Op.MUL: lambda b, n, x, y: b.fmul(x, y),
    Op.DIV: lambda b, n, x, y: b.fdiv(x, y),
    Op.FMOD: lambda b, n, x, y: b.frem(x, y),  # LLVM's frem is C's fmod
    Op.SIGN: _sign,
    Op.LT: lambda b, n, x, y: b.fcmp_ordered("<", x, y),
    Op.LE: lambda b, n, x, y: b.fcmp_ordered("<=", x, y),
    Op.GT: lambda b, n, x, y: b.fcmp_ordered(">", x, y),
    Op.GE: lambda b, n, x, y: b.fcmp_ordered(">=", x, y),
    Op.EQ: lambda b, n, x, y: b.fcmp_ordered("==", x, y),
    Op.NE: lambda b, n, x, y: b.fcmp_unordered("!=", x, y),
    Op.AND: lambda b, n, x, y: b.and_(x, y),
    Op.OR: lambda b, n, x, y: b.or_(x, y),
    Op.NOT: lambda b, n, x: b.xor(x, I1(1)),
    Op.WHERE: lambda b, n, c, x, y: b.select(c, x, y),
    Op.CAST: _cast,
    Op.STOP_GRADIENT: lambda b, n, x: x,  # (the passes remove it; its value is x)
    **{op: _math(op) for op in mathlib.MATH},
})

missing = set(ops.ELEMENTWISE) - set(EMIT)
assert not missing, f"elementwise ops without a lowering: {missing}"


def _lower_elementwise(L: Lowering, n: Node) -> None:
    if n.shape == ():
        L.define(n, None, EMIT[n.op](L.b, n, *(L.load(a, None) for a in n.args)))
        return
    with L.loop(L.size(L.shape(n))) as i:
        L.define(n, i, EMIT[n.op](L.b, n, *(L.load(a, i) for a in n.args)))


def _lower_const(L: Lowering, n: Node) -> None:
    if n.shape != () and id(n) in L.prog.slots:
        with L.loop(L.size(L.shape(n))) as i:
            L.define(n, i, L.load(n, i))


def _lower_reduce(L: Lowering, n: Node) -> None:
    (x,) = n.args
    (axes,) = n.attrs
    xs = L.shape(x)
    kept = [d for i, d in enumerate(xs) if i not in axes]
    red = [d for i, d in enumerate(xs) if i in axes]
    strides = L.c_strides(xs)
    b = L.b
    with L.nest(tuple(kept)) as kidx:
        acc = L.accumulator(0.0 if n.op == Op.REDUCE_SUM else -math.inf)
        with L.nest(tuple(red)) as ridx:
            it_k, it_r = iter(kidx), iter(ridx)
            full = [next(it_r) if i in axes else next(it_k) for i in range(x.ndim)]
            v = L.load(x, L.affine(full, 0, strides))
            a = b.load(acc)
            if n.op == Op.REDUCE_SUM:
                b.store(b.fadd(a, v, flags=("reassoc",)), acc)
            else:
                b.store(mathlib.call(b, Op.MAXIMUM, [a, v]), acc)
        L.define(n, L.flat(kidx, L.shape(n)) if kidx else I64(0), b.load(acc))


def _lower_shape(L: Lowering, n: Node) -> None:
    (x,) = n.args
    if n.op == Op.RESHAPE:
        if n.shape == ():
            L.define(n, None, L.load(x, I64(0)))
        elif x.shape == ():
            L.define(n, I64(0), L.load(x, None))
        return  # an array reshape aliases its operand (memory plan)
    offset, strides = gather_affine(n)
    if n.shape == ():
        L.define(n, None, L.load(x, I64(offset)))
        return
    with L.nest(n.shape) as idx:
        src = L.affine(idx, offset, strides) if x.shape != () else None
        L.define(n, L.flat(idx, n.shape), L.load(x, src))


def _lower_index(L: Lowering, n: Node) -> None:
    if n.op == Op.INDEX:
        return _lower_shape(L, n)
    if n.op in INDEX_OPS:  # table- and window-indexed ops (their families' rows)
        return INDEX_OPS[n.op](L, n)
    acc, upd = n.args
    base, offset, strides = L.scatter_target(n)
    b = L.b
    fresh = L.location(n) != L.location(acc)
    # a constant (zeros, the start of a gradient or a concatenation) with a contiguous block
    # written: the constant around the block, and the block written once (acc[items] + upd
    # with the constant's value: no fill of the block, no load)
    spliced = fresh and ops.splice_offset(n) is not None
    if spliced:
        c = L.load(acc, None)
        start = _i64(offset)
        end = b.add(start, _i64(L.size(L.shape(upd))))
        with L.loop(start) as i:
            L.store_to(base, i, c, n.dtype)
        with L.loop(b.sub(_i64(L.size(L.shape(acc))), end)) as i:
            L.store_to(base, b.add(end, i), c, n.dtype)
        if block_in_place(L, n):
            return
    elif fresh:  # not in place: start from a copy of acc
        L.copy_into(L.ptr(n), acc)
    us = L.shape(upd)
    with L.nest(us) as idx:
        at = L.affine(idx, offset, strides)
        u = L.load(upd, L.flat(idx, us) if idx else None)
        if n.op == Op.SCATTER:  # acc[items] = upd
            L.store_to(base, at, u, n.dtype)
        elif spliced:  # the constant + upd
            L.store_to(base, at, b.fadd(c, u), n.dtype)
        else:  # acc[items] += upd
            p = b.gep(base, [at], inbounds=True)
            b.store(b.fadd(b.load(p), u), p)


LOWER.update({
    "unary": _lower_elementwise,
    "binary": _lower_elementwise,
    "compare": _lower_elementwise,
    "logical": _lower_elementwise,
    "select": _lower_elementwise,
    "cast": _lower_elementwise,
    "reduce": _lower_reduce,
    "shape": _lower_shape,
    "index": _lower_index,
    "leaf": _lower_const,
})
