"""Lowering of the factorisation ops (:mod:`tapejit.core.ops_factor`): ``triangle`` as a loop
nest, ``cholesky``, ``lu``, ``trisolve`` and ``lu_solve`` as calls of LAPACK's ``dpotrf`` /
``dgetrf`` and BLAS's ``dtrsm`` through the function pointers :mod:`tapejit.codegen.blas`
binds — or, where a pointer is null (an exported object file, a host without scipy), of the
module's own stand-ins with the same signatures (:mod:`.fallback`). Registered into the
``"linalg"`` row's table (:data:`.linalg._LINALG`).

Layouts: a row-major matrix is, read column-major as LAPACK reads it, its transpose. So
``cholesky`` runs ``dpotrf('U')`` on a copy of the operand (column-major upper = row-major
lower triangle: the one numpy reads), ``lu`` runs ``dgetrf`` on a transposed copy and
transposes the factors back, and a solve with the (n, k) right-hand side X (row-major: X^T
column-major) is ``dtrsm`` from the right: X^T := X^T op(T)^-T. Nothing is allocated: the
operands are copied into the node's own output, pivots live in the frame.

Failures are values, checked by the frontend's guards: ``cholesky`` of a matrix that is not
positive definite is NaN everywhere; ``lu`` of a singular matrix has a zero on U's diagonal (as
LAPACK returns it).
"""

from __future__ import annotations

import functools
import math

import llvmlite.ir as ir

from ...core.ir import Node
from ...core.ops import Op

from .. import blas
from .base import F64, I8, I32, I64
from . import fallback
from .linalg import _LINALG, _call_routine, _cell, _stack_array
from .lowering import Lowering


def _args(L: Lowering, chars: str, ints: tuple, doubles: tuple = ()):
    """Frame cells holding ``chars`` (one i8 each), ``ints`` (i32) and ``doubles``, as the
    pointers a Fortran routine takes."""
    cs = _stack_array(L, I8, len(chars))
    is_ = _stack_array(L, I32, max(len(ints), 1))
    ds = _stack_array(L, F64, max(len(doubles), 1))
    c = [_cell(L, cs, k, I8(ord(ch))) for k, ch in enumerate(chars)]
    i = [_cell(L, is_, k, v if isinstance(v, ir.Value) else I32(v)) for k, v in enumerate(ints)]
    d = [_cell(L, ds, k, F64(v)) for k, v in enumerate(doubles)]
    return c, i, d


def _copy(L: Lowering, src: Node, out: ir.Value, rows: int, cols: int, transposed=False) -> None:
    """``out[i, j] = src[i, j]`` (``src[j, i]`` when ``transposed``), row-major."""
    b = L.b
    with L.loop(rows) as i:
        with L.loop(cols) as j:
            at = L.affine([j, i], 0, (cols, 1)) if transposed else L.affine([i, j], 0, (cols, 1))
            v = L.load(src, at)
            b.store(v, b.gep(out, [L.affine([i, j], 0, (cols, 1))], inbounds=True))


def _call(L: Lowering, symbol: str, routine: str, args: list) -> None:
    """Call ``routine`` through the module's pointer ``symbol``, or its stand-in."""
    _call_routine(L, symbol, fallback.SIGNATURES[routine], args, ir.Constant(ir.IntType(1), 1),
                  own=fallback.routine(L.module, routine))  # fmt: skip


def _elem(L: Lowering, p: ir.Value, at: ir.Value) -> ir.Value:
    return L.b.gep(p, [at], inbounds=True)


def _lower_triangle(L: Lowering, n: Node) -> None:
    (x,) = n.args
    lower, scale = n.attrs
    m = n.shape[0]
    b = L.b
    out = L.ptr(n)
    with L.loop(m) as i:
        with L.loop(m) as j:
            at = L.affine([i, j], 0, (m, 1))
            v = L.load(x, at)
            keep = b.icmp_signed("<=" if lower else ">=", j, i)
            v = b.select(keep, v, F64(0.0))
            if scale != 1.0:
                v = b.select(b.icmp_signed("==", i, j), b.fmul(v, F64(scale)), v)
            b.store(v, _elem(L, out, at))


def _lower_cholesky(L: Lowering, n: Node) -> None:
    """``dpotrf('U')`` on a copy of the operand in the output; the strict upper triangle then
    zeroed, everything NaN where the routine reported ``info != 0``."""
    (a,) = n.args
    m = n.shape[0]
    b = L.b
    out = L.ptr(n)
    _copy(L, a, out, m, m)
    (uplo,), (size, info), _ = _args(L, "U", (m, 0))
    _call(L, blas.POTRF_SYMBOL, "dpotrf", [uplo, size, out, size, info])
    ok = b.icmp_signed("==", b.load(info), I32(0))
    with L.loop(m) as i:
        with L.loop(m) as j:
            p = _elem(L, out, L.affine([i, j], 0, (m, 1)))
            v = b.select(ok, b.load(p), F64(math.nan))
            b.store(b.select(b.icmp_signed(">", j, i), F64(0.0), v), p)


def _lower_lu(L: Lowering, n: Node) -> None:
    """``dgetrf`` on a transposed copy of the operand in rows 0..n-1 of the output, transposed
    back in place; LAPACK's 1-based pivots to row n (0-based), their permutation to row n+1."""
    (a,) = n.args
    m = n.shape[1]
    b = L.b
    out = L.ptr(n)
    _copy(L, a, out, m, m, transposed=True)
    ipiv = _stack_array(L, I32, m)
    _, (size, info), _ = _args(L, "", (m, 0))
    _call(L, blas.GETRF_SYMBOL, "dgetrf", [size, size, out, size, ipiv, info])  # info > 0: singular
    with L.loop(m) as i:  # the transpose back (swaps across the diagonal)
        with L.loop(b.sub(I64(m - 1), i)) as jj:
            j = b.add(b.add(i, jj), I64(1))
            p, q = _elem(L, out, L.affine([i, j], 0, (m, 1))), _elem(L, out, L.affine([j, i], 0, (m, 1)))
            u, v = b.load(p), b.load(q)
            b.store(v, p)
            b.store(u, q)
    piv_row, perm_row = m * m, (m + 1) * m
    with L.loop(m) as i:
        piv = b.sext(b.sub(b.load(b.gep(ipiv, [i], inbounds=True)), I32(1)), I64)
        b.store(b.sitofp(piv, F64), _elem(L, out, b.add(i, I64(piv_row))))
        b.store(b.sitofp(i, F64), _elem(L, out, b.add(i, I64(perm_row))))
    with L.loop(m) as i:  # perm: the swaps applied to 0, 1, ..., n-1 in order
        p = b.fptosi(b.load(_elem(L, out, b.add(i, I64(piv_row)))), I64)
        x, y = _elem(L, out, b.add(i, I64(perm_row))), _elem(L, out, b.add(p, I64(perm_row)))
        u, v = b.load(x), b.load(y)
        b.store(v, x)
        b.store(u, y)


def _substitute(L: Lowering, tload, out: ir.Value, m: int, k: int, lower, trans, unit) -> None:
    """op(T) X = X in place by substitution loops (row-major X, ``m`` x ``k``); ``tload(i, j)``
    reads T[i, j]. Rows in order for a lower op(T), in reverse for an upper one."""
    b = L.b
    ascending = lower != trans
    with L.loop(m) as ii:
        i = ii if ascending else b.sub(I64(m - 1), ii)
        count = i if ascending else b.sub(I64(m - 1), i)
        with L.loop(count) as jj:
            j = jj if ascending else b.add(b.add(i, jj), I64(1))
            coef = tload(j, i) if trans else tload(i, j)
            with L.loop(k) as c:
                p = _elem(L, out, L.affine([i, c], 0, (k, 1)))
                y = b.load(_elem(L, out, L.affine([j, c], 0, (k, 1))))
                b.store(b.fsub(b.load(p), b.fmul(coef, y)), p)
        if not unit:
            d = tload(i, i)
            with L.loop(k) as c:
                p = _elem(L, out, L.affine([i, c], 0, (k, 1)))
                b.store(b.fdiv(b.load(p), d), p)


def _trsm(L: Lowering, tptr, out, m: int, k: int, lower, trans, unit) -> None:
    """``dtrsm('R', ...)``: X^T := X^T op(T)^-T, i.e. op(T) X = X for row-major X and T."""
    uplo = "U" if lower else "L"  # the row-major lower triangle is column-major upper
    (side, up, ta, diag), (mm, nn), (one,) = _args(L, "R" + uplo + ("T" if trans else "N")
                                                  + ("U" if unit else "N"), (k, m), (1.0,))  # fmt: skip
    _call(L, blas.TRSM_SYMBOL, "dtrsm", [side, up, ta, diag, mm, nn, one, tptr, nn, out, mm])


def _solve_triangular(L: Lowering, t: Node, at: int, out, m: int, k: int, lower, trans, unit):
    """op(T) X = X in place for the m x m matrix T stored from element ``at`` of node ``t``:
    ``dtrsm``, or substitution loops where ``t`` is not in memory (a constant fill)."""
    b = L.b

    def tload(i, j):
        return L.load(t, b.add(L.affine([i, j], 0, (m, 1)), I64(at)))

    if id(t) not in L.prog.slots or t.op == Op.CONST:
        _substitute(L, tload, out, m, k, lower, trans, unit)
        return
    base = L.ptr(t)
    _trsm(L, _elem(L, base, I64(at)) if at else base, out, m, k, lower, trans, unit)


def _lower_trisolve(L: Lowering, n: Node) -> None:
    t, rhs = n.args
    m, k = n.shape
    out = L.ptr(n)
    _copy(L, rhs, out, m, k)
    _solve_triangular(L, t, 0, out, m, k, *n.attrs)


def _swap_rows(L: Lowering, f: Node, out, m: int, k: int, reverse: bool) -> None:
    """Row i of X swapped with row piv[i] (the pivots of ``lu`` node ``f``), i ascending (P^T
    X) or descending (P X)."""
    b = L.b
    with L.loop(m) as ii:
        i = b.sub(I64(m - 1), ii) if reverse else ii
        p = b.fptosi(L.load(f, b.add(i, I64(m * m))), I64)
        with L.loop(k) as c:
            x = _elem(L, out, L.affine([i, c], 0, (k, 1)))
            y = _elem(L, out, L.affine([p, c], 0, (k, 1)))
            u, v = b.load(x), b.load(y)
            b.store(v, x)
            b.store(u, y)


def _lower_lu_solve(L: Lowering, n: Node) -> None:
    """A x = b as U^-1 L^-1 (P^T b); A^T x = b as P (L^-T U^-T b)."""
    _, f, rhs = n.args
    (trans,) = n.attrs
    m, k = n.shape
    out = L.ptr(n)
    _copy(L, rhs, out, m, k)
    solve = functools.partial(_solve_triangular, L, f, 0, out, m, k)
    if not trans:
        _swap_rows(L, f, out, m, k, reverse=False)
        solve(True, False, True)
        solve(False, False, False)
    else:
        solve(False, True, False)
        solve(True, True, True)
        _swap_rows(L, f, out, m, k, reverse=True)


FACTOR = {
    Op.TRIANGLE: _lower_triangle,
    Op.CHOLESKY: _lower_cholesky,
    Op.TRISOLVE: _lower_trisolve,
    Op.LU: _lower_lu,
    Op.LU_SOLVE: _lower_lu_solve,
}
_LINALG.update(FACTOR)
