"""The matrix factorisation primitives: ``triangle`` (a masked triangle), ``cholesky``,
``trisolve`` (a triangular solve), ``lu`` (LU with partial pivoting) and ``lu_solve``, with
their numpy references and matrix-level derivative rules, one ``defop`` block each (a family
of the registry :mod:`tapejit.core.ops`; lowered by :mod:`tapejit.codegen.lower.factor` to
LAPACK calls). Each node is one kernel, so a traced ``np.linalg.solve`` is a few nodes at any n.

Layouts (row-major, as every node):

* ``cholesky(a)`` is the lower factor L (L L^T = A, zeros above the diagonal) of the symmetric
  matrix A whose lower triangle ``a`` holds (the upper one is never read, as numpy's); NaN
  everywhere when A is not positive definite (the frontend's guard turns that into numpy's
  ``LinAlgError``).
* ``trisolve(t, b)``, attrs ``(lower, trans, unit)``: x with op(T) x = b for the (n, k) ``b``,
  T the lower or upper triangle of ``t`` (the other one never read; ones on the diagonal when
  ``unit``), op(T) = T^T when ``trans``.
* ``lu(a)`` is (n + 2, n): rows 0..n-1 the packed factors of A = P L U (L unit lower, U upper:
  scipy's ``lu_factor`` array), row n the pivots (row i was swapped with row piv[i], in order:
  scipy's ``piv``), row n + 1 the permutation: (P^T A)[i] = A[perm[i]].
* ``lu_solve(a, lu, b)``, attrs ``(trans,)``: x with A x = b (A^T x = b when trans) from ``lu =
  lu(a)``. ``a`` is an operand only for the derivative: the cotangent of A is the whole one
  (the solve's rule does not pass one through ``lu``), so ``lu`` must be ``lu(a)`` itself.

Derivatives: Cholesky by Murray, "Differentiation of the Cholesky decomposition" (2016), with
Phi(X) the lower triangle of X with half its diagonal: dL = L Phi(L^-1 dA L^-T) and A_bar =
L^-T Phi(L^T L_bar) L^-1 (symmetrised onto the triangle read); triangular and LU solves by
Giles, "An extended collection of matrix derivative results" (2008), sec. 2.3.1: dX = A^-1 (dB
- dA X), B_bar = A^-T X_bar, A_bar = -B_bar X^T; LU by the rule JAX uses (lu_jvp): with X =
L^-1 P^T dA U^-1, dL = L strict_lower(X), dU = upper(X) U, and its transpose for the VJP.
"""

from __future__ import annotations

import numpy as np

from .ir import Node
from .ops import (
    Op,
    RuleError,
    add,
    const,
    defop,
    index,
    make,
    matmul,
    neg,
    reshape,
    sub,
    transpose,
)
from .ops_table import add_at, take
from .typerules import _cholesky, _lu, _lu_solve, _triangle, _trisolve


def triangle(x: Node, lower: bool, diagonal: float = 1.0) -> Node:
    """The lower (``j <= i``) or upper triangle of square ``x``, its diagonal times
    ``diagonal`` (0: the strict triangle; 0.5: Murray's Phi), zeros elsewhere."""
    return make(Op.TRIANGLE, x, attrs=(bool(lower), float(diagonal)))


def trisolve(t: Node, b: Node, lower: bool, trans: bool = False, unit: bool = False) -> Node:
    """x with op(T) x = b (see the module docstring); ``b`` is (n, k)."""
    return make(Op.TRISOLVE, t, b, attrs=(bool(lower), bool(trans), bool(unit)))


def lu_solve(a: Node, f: Node, b: Node, trans: bool = False) -> Node:
    """x with A x = b (A^T x = b when ``trans``) from ``f = lu(a)``; ``b`` is (n, k)."""
    return make(Op.LU_SOLVE, a, f, b, attrs=(bool(trans),))


def _t(x: Node) -> Node:
    return transpose(x, (1, 0))


# ----------------------------------------------------------------------------------------------
# triangle


def _triangle_ref(attrs, x):
    lower, d = attrs
    x = np.asarray(x, dtype=np.float64)
    out = np.tril(x) if lower else np.triu(x)
    idx = np.arange(x.shape[0])
    out[idx, idx] = x[idx, idx] * d
    return out


def _triangle_vjp(g, out, x):
    return (make(Op.TRIANGLE, g, attrs=out.attrs),)


def _triangle_jvp(t, out, x):
    (tx,) = t
    return None if tx is None else make(Op.TRIANGLE, tx, attrs=out.attrs)


# ----------------------------------------------------------------------------------------------
# cholesky


def _cholesky_ref(attrs, a):
    a = np.asarray(a, dtype=np.float64)
    sym = np.tril(a) + np.tril(a, -1).T
    try:
        return np.linalg.cholesky(sym)
    except np.linalg.LinAlgError:
        return np.full(a.shape, np.nan)


def _symmetric_from_lower(x: Node) -> Node:
    """The symmetric matrix whose lower triangle is that of ``x``."""
    return add(triangle(x, True), _t(triangle(x, True, 0.0)))


def _cholesky_jvp(t, out, a):
    """dL = L Phi(L^-1 dA L^-T), dA symmetric from the lower triangle of the tangent."""
    (ta,) = t
    if ta is None:
        return None
    da = _symmetric_from_lower(ta)
    y = trisolve(out, da, lower=True)  # L^-1 dA
    x = _t(trisolve(out, _t(y), lower=True))  # (L^-1 (L^-1 dA)^T)^T = L^-1 dA L^-T
    return matmul(out, triangle(x, True, 0.5))


def _cholesky_vjp(g, out, a):
    """S = L^-T Phi(L^T L_bar) L^-1; the cotangent of the lower triangle read is S + S^T below
    the diagonal and S's diagonal on it (a perturbation of a[i, j], i > j, moves A[i, j] and
    A[j, i])."""
    gl = triangle(g, True)  # the factor's upper triangle is 0 whatever a is
    p = triangle(matmul(_t(out), gl), True, 0.5)
    z = trisolve(out, p, lower=True, trans=True)  # L^-T P
    s = _t(trisolve(out, _t(z), lower=True, trans=True))  # (L^-T (L^-T P)^T)^T = L^-T P L^-1
    return (triangle(add(s, _t(s)), True, 0.5),)


# ----------------------------------------------------------------------------------------------
# trisolve


def _trisolve_ref(attrs, t, b):
    lower, trans, unit = attrs
    t = np.asarray(t, dtype=np.float64)
    m = np.tril(t) if lower else np.triu(t)
    if unit:
        np.fill_diagonal(m, 1.0)
    with np.errstate(all="ignore"):
        return np.linalg.solve(m.T if trans else m, np.asarray(b, dtype=np.float64))


def _masked(x: Node, attrs) -> Node:
    """``x`` on the triangle a ``trisolve`` with ``attrs`` reads (its diagonal only if not unit)."""
    lower, _, unit = attrs
    return triangle(x, lower, 0.0 if unit else 1.0)


def _trisolve_jvp(t, out, tm, b):
    """dX = op(T)^-1 (dB - op(dT) X)."""
    tt, tb = t
    lower, trans, unit = out.attrs
    rhs = tb
    if tt is not None:
        dt = _masked(tt, out.attrs)
        term = matmul(_t(dt) if trans else dt, out)
        rhs = neg(term) if rhs is None else sub(rhs, term)
    return None if rhs is None else trisolve(tm, rhs, lower, trans, unit)


def _trisolve_vjp(g, out, tm, b):
    """B_bar = op(T)^-T G; T_bar = -B_bar X^T (-X B_bar^T when op is the transpose), on the
    triangle read."""
    lower, trans, unit = out.attrs
    gb = trisolve(tm, g, lower, not trans, unit)
    gt = matmul(out, _t(gb)) if trans else matmul(gb, _t(out))
    return _masked(neg(gt), out.attrs), gb


# ----------------------------------------------------------------------------------------------
# lu


def _lu_ref(attrs, a):
    a = np.array(a, dtype=np.float64)
    n = a.shape[0]
    try:
        from scipy.linalg import lu_factor
    except ImportError:  # partial pivoting as dgetrf (the first row of largest magnitude)
        piv = np.zeros(n, dtype=np.int64)
        lu = a.copy()
        with np.errstate(all="ignore"):
            for k in range(n):
                p = k + int(np.argmax(np.abs(lu[k:, k])))
                piv[k] = p
                lu[[k, p]] = lu[[p, k]]
                if lu[k, k] != 0.0:
                    lu[k + 1 :, k] /= lu[k, k]
                lu[k + 1 :, k + 1 :] -= np.outer(lu[k + 1 :, k], lu[k, k + 1 :])
    else:
        with np.errstate(all="ignore"):
            import warnings

            with warnings.catch_warnings():  # a singular matrix warns; its factors are right
                warnings.simplefilter("ignore")
                lu, piv = lu_factor(a, check_finite=False)
    perm = np.arange(n)
    for i, p in enumerate(piv):
        perm[[i, p]] = perm[[p, i]]
    return np.concatenate([lu, piv[None, :].astype(np.float64), perm[None, :].astype(np.float64)])


def _lu_parts(out: Node) -> tuple[Node, Node]:
    """(the packed factors, n x n; the permutation table, (n,)) of an ``lu`` result."""
    n = out.shape[1]
    return index(out, ((0, n, 1),)), index(out, (n + 1,))


def _lu_pack(out: Node, factors: Node) -> Node:
    """An ``lu``-shaped value: ``factors`` in rows 0..n-1, zeros in the pivot rows."""
    n = out.shape[1]
    flat = make(Op.SCATTER, const(0.0, ((n + 2) * n,)), reshape(factors, (n * n,)),
                attrs=(((0, n * n, 1),)))  # fmt: skip
    return reshape(flat, out.shape)


def _lu_jvp(t, out, a):
    """X = L^-1 P^T dA U^-1; dL = L strict_lower(X), dU = upper(X) U (the pivots are piecewise
    constant: no tangent)."""
    (ta,) = t
    if ta is None:
        return None
    lu, perm = _lu_parts(out)
    z = trisolve(lu, take(ta, perm), lower=True, unit=True)  # L^-1 P^T dA
    x = _t(trisolve(lu, _t(z), lower=False, trans=True))  # (U^-T Z^T)^T = Z U^-1
    s = triangle(x, True, 0.0)
    dl = add(s, matmul(triangle(lu, True, 0.0), s))  # (I + strict_lower(lu)) S
    du = matmul(triangle(x, False), triangle(lu, False))
    return _lu_pack(out, add(dl, du))


def _lu_vjp(g, out, a):
    """The transpose of :func:`_lu_jvp`: with Y = strict_lower(L^T L_bar) + upper(U_bar U^T),
    A_bar = P L^-T Y U^-T."""
    lu, perm = _lu_parts(out)
    n = out.shape[1]
    gf = index(g, ((0, n, 1),))
    gl, gu = triangle(gf, True, 0.0), triangle(gf, False)
    ltl = add(gl, matmul(_t(triangle(lu, True, 0.0)), gl))  # L^T L_bar
    y = add(triangle(ltl, True, 0.0), triangle(matmul(gu, _t(triangle(lu, False))), False))
    w = trisolve(lu, y, lower=True, trans=True, unit=True)  # L^-T Y
    q = _t(trisolve(lu, _t(w), lower=False))  # (U^-1 W^T)^T = W U^-T
    return (add_at(const(0.0, a.shape), perm, q),)  # P Q: row i of Q to row perm[i]


# ----------------------------------------------------------------------------------------------
# lu_solve


def _lu_solve_ref(attrs, a, f, b):
    (trans,) = attrs
    f = np.asarray(f, dtype=np.float64)
    n = f.shape[1]
    lu, perm = f[:n], f[n + 1].astype(np.int64)
    lo, up = np.tril(lu, -1) + np.eye(n), np.triu(lu)
    b = np.asarray(b, dtype=np.float64)
    with np.errstate(all="ignore"):
        if not trans:
            return np.linalg.solve(up, np.linalg.solve(lo, b[perm]))
        y = np.linalg.solve(lo.T, np.linalg.solve(up.T, b))
    x = np.empty_like(y)
    x[perm] = y
    return x


def _own_lu(a: Node, f: Node) -> None:
    if f.op != Op.LU or f.args[0] is not a:
        raise RuleError("lu_solve's derivative needs its factors to be lu(a) of its own matrix")


def _lu_solve_jvp(t, out, a, f, b):
    """dX = op(A)^-1 (dB - op(dA) X); the factors' tangent is not used (see the module)."""
    ta, _, tb = t
    (trans,) = out.attrs
    rhs = tb
    if ta is not None:
        _own_lu(a, f)
        term = matmul(_t(ta) if trans else ta, out)
        rhs = neg(term) if rhs is None else sub(rhs, term)
    return None if rhs is None else lu_solve(a, f, rhs, trans)


def _lu_solve_vjp(g, out, a, f, b):
    """B_bar = op(A)^-T G, A_bar = -B_bar X^T (-X B_bar^T for the transposed solve)."""
    _own_lu(a, f)
    (trans,) = out.attrs
    gb = lu_solve(a, f, g, not trans)
    ga = matmul(out, _t(gb)) if trans else matmul(gb, _t(out))
    return neg(ga), None, gb


# fmt: off
defop(Op.TRIANGLE, "linalg", 1, _triangle, _triangle_ref, _triangle_vjp, jvp=_triangle_jvp)
defop(Op.CHOLESKY, "linalg", 1, _cholesky, _cholesky_ref, _cholesky_vjp, jvp=_cholesky_jvp)
defop(Op.TRISOLVE, "linalg", 2, _trisolve, _trisolve_ref, _trisolve_vjp, jvp=_trisolve_jvp)
defop(Op.LU, "linalg", 1, _lu, _lu_ref, _lu_vjp, jvp=_lu_jvp)
defop(Op.LU_SOLVE, "linalg", 3, _lu_solve, _lu_solve_ref, _lu_solve_vjp, jvp=_lu_solve_jvp)
# fmt: on
