"""Lowering of the linear-algebra ops (:data:`tapejit.core.ops.LINALG`): ``matmul`` as loops or a
call of the host's BLAS ``dgemm``, ``eigh`` and ``svd`` as calls of the host's LAPACK
(``dsyevd``, ``dgesdd``) through function pointers that :mod:`tapejit.codegen.blas` binds.
Registered as the ``"linalg"`` row of :data:`.lowering.LOWER`; a module of its own because it is
one concern: the memory layouts and calling conventions of BLAS/LAPACK.
"""

from __future__ import annotations

import functools
import math

import llvmlite.ir as ir

from ...core import ops
from ...core.ir import Node
from ...core.ops import Op

from .. import blas
from .base import F64, I8, I8P, I32, I64
from .lowering import LOWER, Lowering


def _lower_matmul(L: Lowering, n: Node) -> None:
    """``a @ b`` as loops whose innermost loop runs along contiguous memory, so it vectorises:

    * one result column (matrix @ vector): a dot product per row of ``a``, summed in a register
      (``reassoc`` lets LLVM split the sum into vector lanes);
    * otherwise row ``i`` of the result accumulates ``a[i, l] * b[l, :]`` for l = 0, 1, ...
      (the i-k-j order of e.g. Goto & van de Geijn's micro-kernels): every element is summed in
      the same order as a dot product would, but the inner loop walks rows of ``b`` and of the
      result instead of striding down a column of ``b`` — at 256 x 256 that was 7x slower.
    """
    a, bm = n.args
    m, k, cols = ops.matmul_dims(a.shape, bm.shape)  # a vector operand is one row / column
    if L.sym:  # some of them are size arguments (validated above on this kernel's sizes)
        sa, sb = L.shape(a), L.shape(bm)
        m, k = sa if len(sa) == 2 else (1, sa[0])
        cols = sb[1] if len(sb) == 2 else 1
    elif (
        cols > 1
        and m * k * cols >= blas.MIN_MULTIPLY_ADDS
        and all(id(x) in L.prog.slots and x.op != Op.CONST for x in (a, bm))
    ):
        # the host's BLAS when the runtime has set its address; these loops otherwise
        with L.b.if_else(_blas_gemm_set(L)) as (call, own):
            with call:
                _blas_gemm(L, m, k, cols, L.ptr(a), L.ptr(bm), L.ptr(n))
            with own:
                _matmul_loops(L, n, m, k, cols)
        return
    _matmul_loops(L, n, m, k, cols)


def _routine_global(L: Lowering, symbol: str) -> ir.GlobalVariable:
    """The module's global ``symbol`` (an ``i8*``, null until :func:`blas.bind` sets it)."""
    g = L.module.globals.get(symbol)
    if g is None:
        g = ir.GlobalVariable(L.module, I8P, name=symbol)
        g.initializer = ir.Constant(I8P, None)
    return g


def _routine_set(L: Lowering, symbol: str) -> ir.Value:
    """Whether the module's pointer ``symbol`` is set (its routine bound)."""
    p = L.b.load(_routine_global(L, symbol))
    return L.b.icmp_unsigned("!=", p, ir.Constant(I8P, None))


def _blas_gemm_set(L: Lowering) -> ir.Value:
    """Whether the module's BLAS pointer (:data:`blas.SYMBOL`) is set."""
    return _routine_set(L, blas.SYMBOL)


def _blas_gemm(L: Lowering, m: int, k: int, cols: int, pa, pb, pc) -> None:
    """``C (m x cols) = A (m x k) @ B (k x cols)``, row-major, as column-major ``dgemm``:
    ``C^T = B^T A^T``, i.e. ``dgemm('N', 'N', cols, m, k, 1, B, cols, A, k, 0, C, cols)``."""
    b = L.b
    i32, i8 = I32, I8

    def ref(ty, value):
        with b.goto_entry_block():
            slot = b.alloca(ty)
        b.store(value, slot)
        return slot

    cp, ip, dp = i8.as_pointer(), i32.as_pointer(), F64.as_pointer()
    # transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc
    fnty = ir.FunctionType(ir.VoidType(), [cp, cp, ip, ip, ip, dp, dp, ip, dp, ip, dp, dp, ip])
    fn = b.bitcast(b.load(L.module.globals[blas.SYMBOL]), fnty.as_pointer())
    no = ref(i8, i8(ord("N")))
    f64p = F64.as_pointer()
    b.call(fn, [
        no, no, ref(i32, i32(cols)), ref(i32, i32(m)), ref(i32, i32(k)), ref(F64, F64(1.0)),
        b.bitcast(pb, f64p), ref(i32, i32(cols)), b.bitcast(pa, f64p), ref(i32, i32(k)),
        ref(F64, F64(0.0)), b.bitcast(pc, f64p), ref(i32, i32(cols)),
    ])  # fmt: skip


def _stack_array(L: Lowering, ty: ir.Type, count: int) -> ir.Value:
    """A ``count``-element array of ``ty`` in the function's frame (an entry-block alloca)."""
    with L.b.goto_entry_block():
        return L.b.alloca(ty, count)


def _cell(L: Lowering, p: ir.Value, at: int, value: ir.Value | None = None) -> ir.Value:
    """Pointer to element ``at`` of frame array ``p`` (storing ``value`` there if given)."""
    q = L.b.gep(p, [I64(at)], inbounds=True)
    if value is not None:
        L.b.store(value, q)
    return q


def _copy_column_major(L: Lowering, a: Node, rows: int, cols: int, dst: ir.Value) -> None:
    """``dst[i + j rows] = a[i, j]``: ``a`` (rows x cols, row-major) as LAPACK reads it."""
    b = L.b
    with L.loop(cols) as j:
        with L.loop(rows) as i:
            v = L.load(a, L.affine([i, j], 0, (cols, 1)))
            b.store(v, b.gep(dst, [L.affine([i, j], 0, (1, rows))], inbounds=True))


def _all_finite(L: Lowering, p: ir.Value, count: int) -> ir.Value:
    """Whether the ``count`` doubles at ``p`` are all finite (their sum of x - x is 0, not NaN)."""
    b = L.b
    acc = L.accumulator(0.0)
    with L.loop(count) as i:
        v = b.load(b.gep(p, [i], inbounds=True))
        b.store(b.fadd(b.load(acc), b.fsub(v, v)), acc)
    return b.fcmp_ordered("==", b.load(acc), F64(0.0))


def _call_lapack(
    L: Lowering, symbol: str, params: list, args: list, info: ir.Value, valid: ir.Value
) -> ir.Value:
    """:func:`_call_routine`; returns whether it ran and returned ``info == 0``."""
    bound = _call_routine(L, symbol, params, args, valid)
    return L.b.and_(bound, L.b.icmp_signed("==", L.b.load(info), I32(0)))


def _call_routine(
    L: Lowering, symbol: str, params: list, args: list, valid: ir.Value, own=None
) -> ir.Value:
    """Call the routine whose address the module's global ``symbol`` holds (bound at load time
    by :func:`blas.bind`) when it is set and ``valid`` holds — or, where it is null, the
    module's own function ``own`` if given (:mod:`.fallback`); returns whether one ran."""
    b = L.b
    fp = b.load(_routine_global(L, symbol))
    unset = b.icmp_unsigned("==", fp, ir.Constant(I8P, None))
    if own is not None:
        fp = b.select(unset, b.bitcast(own, I8P), fp)
        bound = valid
    else:
        bound = b.and_(b.not_(unset), valid)
    with b.if_then(bound):
        fnty = ir.FunctionType(ir.VoidType(), params)
        b.call(b.bitcast(fp, fnty.as_pointer()), args)
    return bound


def _lower_eigh(L: Lowering, n: Node) -> None:
    """``eigh(a)`` by LAPACK's ``dsyevd`` ('V', attrs[0]) through :data:`blas.SYEVD_SYMBOL` on a
    copy of ``a`` in the frame (column-major; ``a`` is symmetric); row 0 of the result takes
    the eigenvalues, rows 1..n the eigenvectors (LAPACK returns them as columns of its copy).
    A null pointer (no LAPACK bound) or ``info != 0`` (no convergence) gives NaN."""
    (a,) = n.args
    m = a.shape[0]  # at most ops.EIGH_MAX: the frame holds the work arrays
    b = L.b
    lwork, liwork = 1 + 6 * m + 2 * m * m, 3 + 5 * m
    work = _stack_array(L, F64, m * m + m + lwork)  # the copy, the eigenvalues, dsyevd's work
    ints = _stack_array(L, I32, liwork + 5)  # n, lda, lwork, liwork, info, iwork
    chars = _stack_array(L, I8, 2)
    out = L.ptr(n)
    _copy_column_major(L, a, m, m, work)
    for k, v in enumerate((m, m, lwork, liwork, 0)):
        _cell(L, ints, k, I32(v))
    _cell(L, chars, 0, I8(ord("V")))
    _cell(L, chars, 1, I8(ord(n.attrs[0])))
    ip, dp = I32.as_pointer(), F64.as_pointer()
    c = functools.partial(_cell, L)
    ok = _call_lapack(
        L, blas.SYEVD_SYMBOL,
        # jobz, uplo, n, a, lda, w, work, lwork, iwork, liwork, info
        [I8P, I8P, ip, dp, ip, dp, dp, ip, ip, ip, ip],
        [c(chars, 0), c(chars, 1), c(ints, 0), work, c(ints, 1), c(work, m * m),
         c(work, m * m + m), c(ints, 2), c(ints, 5), c(ints, 3), c(ints, 4)],
        c(ints, 4), _all_finite(L, work, m * m),
    )  # fmt: skip
    nan = F64(math.nan)
    with L.loop(m) as j:
        w = b.load(b.gep(work, [b.add(j, I64(m * m))], inbounds=True))
        L.store_to(out, j, b.select(ok, w, nan), "f64")
        with L.loop(m) as i:  # result[1 + i, j] = copy[i + j m]
            v = b.load(b.gep(work, [L.affine([i, j], 0, (1, m))], inbounds=True))
            L.store_to(out, L.affine([i, j], m, (m, 1)), b.select(ok, v, nan), "f64")


def _lower_svd(L: Lowering, n: Node) -> None:
    """``svd(a)`` by LAPACK's ``dgesdd`` (jobz='S') through :data:`blas.GESDD_SYMBOL` on a
    column-major copy of ``a`` (m x n) in the frame, with U (ldu = m) and Vt (ldvt = k) and the
    work arrays (:func:`ops.svd_lwork` doubles, 8k ints) there too; the result takes U and Vt
    back in row-major order around s (the layout of ``tapejit.core.ops_linalg._svd_ref``). A null pointer (no
    LAPACK bound) or ``info != 0`` (no convergence, or a NaN in ``a``) gives NaN."""
    (a,) = n.args
    m, cols, k = ops.svd_sizes(a.shape)  # capped by ops.SVD_MAX_*: the frame holds it all
    b = L.b
    lwork = ops.svd_lwork(m, cols)
    at_s, at_u, at_vt = m * cols, m * cols + k, m * cols + k + m * k
    at_work = at_vt + k * cols
    work = _stack_array(L, F64, at_work + lwork)  # copy of a, s, U, Vt, dgesdd's work
    ints = _stack_array(L, I32, 7 + 8 * k)  # m, n, lda, ldu, ldvt, lwork, info, iwork
    chars = _stack_array(L, I8, 1)
    out = L.ptr(n)
    _copy_column_major(L, a, m, cols, work)
    for at, v in enumerate((m, cols, m, m, k, lwork, 0)):
        _cell(L, ints, at, I32(v))
    _cell(L, chars, 0, I8(ord("S")))
    ip, dp = I32.as_pointer(), F64.as_pointer()
    c = functools.partial(_cell, L)
    ok = _call_lapack(
        L, blas.GESDD_SYMBOL,
        # jobz, m, n, a, lda, s, u, ldu, vt, ldvt, work, lwork, iwork, info
        [I8P, ip, ip, dp, ip, dp, dp, ip, dp, ip, dp, ip, ip, ip],
        [c(chars, 0), c(ints, 0), c(ints, 1), work, c(ints, 2), c(work, at_s),
         c(work, at_u), c(ints, 3), c(work, at_vt), c(ints, 4), c(work, at_work),
         c(ints, 5), c(ints, 7), c(ints, 6)],
        c(ints, 6), _all_finite(L, work, m * cols),  # dgesdd does not return on inf input
    )  # fmt: skip
    nan = F64(math.nan)

    def move(rows: int, width: int, src: int, ld: int, dst: int) -> None:
        # result[dst + i width + j] = work[src + i + j ld], for i < rows, j < width
        with L.loop(rows) as i:
            with L.loop(width) as j:
                v = b.load(b.gep(work, [L.affine([i, j], src, (1, ld))], inbounds=True))
                L.store_to(out, L.affine([i, j], dst, (width, 1)), b.select(ok, v, nan), "f64")

    move(m, k, at_u, m, 0)  # U
    move(1, k, at_s, 1, m * k)  # s
    move(k, cols, at_vt, k, m * k + k)  # Vt


_LINALG = {Op.EIGH: _lower_eigh, Op.SVD: _lower_svd}


def _lower_linalg(L: Lowering, n: Node) -> None:
    _LINALG.get(n.op, _lower_matmul)(L, n)


def _matmul_loops(L: Lowering, n: Node, m, k, cols) -> None:
    """The generated loops of :func:`_lower_matmul`."""
    a, bm = n.args
    b = L.b
    if isinstance(cols, int) and cols == 1:
        with L.loop(m) as i:
            acc = L.accumulator(0.0)
            with L.loop(k) as l:
                x = L.load(a, L.affine([i, l], 0, (k, 1)))
                y = L.load(bm, l)
                b.store(b.fadd(b.load(acc), b.fmul(x, y), flags=("reassoc", "contract")), acc)
            L.define(n, i, b.load(acc))
        return
    out = L.ptr(n)
    with L.loop(m) as i:
        row = L.affine([i], 0, (cols,))
        with L.loop(cols) as j:
            L.store_to(out, b.add(row, j, flags=("nsw",)), F64(0.0), "f64")
        with L.loop(k) as l:
            x = L.load(a, L.affine([i, l], 0, (k, 1)))
            brow = L.affine([l], 0, (cols,))
            with L.loop(cols) as j:
                p = b.gep(out, [b.add(row, j, flags=("nsw",))], inbounds=True)
                y = L.load(bm, b.add(brow, j, flags=("nsw",)))
                b.store(b.fadd(b.load(p), b.fmul(x, y), flags=("contract",)), p)


LOWER["linalg"] = _lower_linalg
