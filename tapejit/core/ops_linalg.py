"""The linear-algebra primitives ``matmul`` and the LAPACK-backed ``eigh`` and ``svd``: their
numpy references and derivative rules, written with the ops builders like every other rule, and
one ``defop`` block each (a family of the registry :mod:`tapejit.core.ops`). Sources: Giles,
"An extended collection of matrix derivative results for forward and reverse mode AD" (2008),
sec. 3.1 (eigh); Townsend, "Differentiating the singular value decomposition" (2016) (svd).
"""

from __future__ import annotations

import math

import numpy as np

from .ir import Node
from .ops import (
    Op,
    _tadd,
    add,
    const,
    defop,
    div,
    index,
    make,
    matmul,
    mul,
    neg,
    reduce,
    reshape,
    sub,
    svd_sizes,
    transpose,
)
from .typerules import _eigh, _matmul, _svd


def _transpose2(x: Node) -> Node:
    """``x.T`` of a 2-D ``x``; with a unit dimension that is the same element order, a reshape
    (a view, never a copy)."""
    return reshape(x, x.shape[::-1]) if 1 in x.shape else transpose(x)


def _matmul_vjp(g, a, b):
    """Cotangents of ``a @ b``: ``g @ b.T`` and ``a.T @ g``, with vectors as numpy treats them
    (an outer product is a (m,1) @ (1,n) product of reshaped vectors). ``a.T @ g`` with a vector
    ``g`` is computed as ``g @ a`` — the same products summed in the same order, so
    bit-identical — which reads ``a`` in place: ``a.T`` would be a gather that matmul needs
    materialised, a copy of ``a`` per call."""
    if b.ndim == 1:  # (m,k) @ (k,): g is (m,)
        return matmul(reshape(g, (g.shape[0], 1)), reshape(b, (1, b.shape[0]))), matmul(g, a)
    if a.ndim == 1:  # (k,) @ (k,n): g is (n,)
        return matmul(b, g), matmul(reshape(a, (a.shape[0], 1)), reshape(g, (1, g.shape[0])))
    ga = matmul(g, _transpose2(b))
    if g.shape[1] == 1:
        gb = reshape(matmul(reshape(g, (g.shape[0],)), a), (a.shape[1], 1))
    else:
        gb = matmul(_transpose2(a), g)
    return ga, gb


def _matmul_jvp(t, out, a, b):
    ta, tb = t
    return _tadd(
        None if ta is None else make(Op.MATMUL, ta, b),
        None if tb is None else make(Op.MATMUL, a, tb),
    )


def _eye(n: int) -> Node:
    """The n x n identity: ones scattered along the diagonal of a zero fill."""
    flat = make(Op.SCATTER, const(0.0, (n * n,)), const(1.0, (n,)), attrs=((0, n * n, n + 1),))
    return reshape(flat, (n, n))


def _eigh_parts(out: Node) -> tuple[Node, Node, Node, Node]:
    """(w, V, eye, F) of an ``eigh`` result: eigenvalues (n,), eigenvectors (columns, n x n),
    the identity, and F[i, j] = 1 / (w[j] - w[i]) off the diagonal, 0 on it (as JAX builds it:
    1 / (w_j - w_i + I) - I)."""
    n = out.shape[1]
    w, v = index(out, (0,)), index(out, ((1, n + 1, 1),))
    eye = _eye(n)
    gaps = sub(reshape(w, (1, n)), reshape(w, (n, 1)))
    return w, v, eye, sub(div(const(1.0), add(gaps, eye)), eye)


def _eigh_vjp(g, out, a):
    """Cotangent of a symmetric matrix from those of its eigenvalues and eigenvectors
    (Giles 2008, sec. 3.1; Magnus & Neudecker): with S = V^T g_V, A_bar = V (diag(g_w) + F o S)
    V^T, symmetrised (the op is defined on symmetric matrices; its operand is built from one
    triangle, whose own VJP routes both halves back to it)."""
    n = out.shape[1]
    w, v, eye, f = _eigh_parts(out)
    gw, gv = index(g, (0,)), index(g, ((1, n + 1, 1),))
    inner = add(mul(eye, reshape(gw, (1, n))), mul(f, matmul(_transpose2(v), gv)))
    full = matmul(matmul(v, inner), _transpose2(v))
    return (mul(add(full, _transpose2(full)), const(0.5)),)


def _eigh_jvp(t, out, a):
    """Tangents of the eigenvalues and eigenvectors: with S = V^T sym(dA) V, dw = diag(S),
    dV = V (F o S) (the same rule as :func:`_eigh_vjp`, forward)."""
    (ta,) = t
    if ta is None:
        return None
    n = out.shape[1]
    w, v, eye, f = _eigh_parts(out)
    sym = mul(add(ta, _transpose2(ta)), const(0.5))
    s = matmul(matmul(_transpose2(v), sym), v)
    dw = reduce(Op.REDUCE_SUM, mul(s, eye), (0,))
    dv = matmul(v, mul(f, s))
    acc = make(Op.SCATTER, const(0.0, out.shape), dv, attrs=((1, n + 1, 1),))
    return make(Op.SCATTER, acc, dw, attrs=(0,))


def _eigh_ref(attrs, x):
    w, v = np.linalg.eigh(np.asarray(x, dtype=np.float64), UPLO=attrs[0])
    return np.concatenate([w[None, :], v], axis=0)


def _svd_parts(out: Node, a: Node) -> tuple[Node, Node, Node, Node, Node]:
    """(U, s, Vt, eye, F) of an ``svd`` result of the (m, n) matrix ``a``: U (m, k), s (k,),
    Vt (k, n), the k x k identity and F[i, j] = 1 / (s_j^2 - s_i^2) off the diagonal, 0 on it
    (built as :func:`_eigh_parts` builds its F, from the squared singular values)."""
    k = min(a.shape)
    u, s, vt = (_svd_slice(out, a, part) for part in range(3))
    eye = _eye(k)
    s2 = mul(s, s)
    gaps = sub(reshape(s2, (1, k)), reshape(s2, (k, 1)))
    return u, s, vt, eye, sub(div(const(1.0), add(gaps, eye)), eye)


def _svd_slice(flat: Node, a: Node, part: int) -> Node:
    """Part 0 (U, m x k), 1 (s, k) or 2 (Vt, k x n) of an ``svd`` result (or its cotangent)."""
    m, n, k = svd_sizes(a.shape)
    start, shape = ((0, (m, k)), (m * k, (k,)), (m * k + k, (k, n)))[part]
    return reshape(index(flat, ((start, start + math.prod(shape), 1),)), shape)


def _svd_pack(a: Node, u: Node, s: Node, vt: Node) -> Node:
    """The flat ``svd`` layout of (U, s, Vt) tangents: [U row-major | s | Vt row-major]."""
    m, n, k = svd_sizes(a.shape)
    acc = const(0.0, (m * k + k + k * n,))
    for start, part in ((0, u), (m * k, s), (m * k + k, vt)):
        size = math.prod(part.shape)
        acc = make(Op.SCATTER, acc, reshape(part, (size,)), attrs=((start, start + size, 1),))
    return acc


def _svd_vjp(g, out, a):
    """Cotangent of A = U diag(s) V^T from those of the thin SVD's U, s and Vt (Townsend 2016,
    "Differentiating the singular value decomposition", eq. for the real thin SVD; Giles 2008,
    sec. 3.2): with S = diag(s), J = F o (U^T U_bar - U_bar^T U), K = F o (V^T V_bar - V_bar^T V),

        A_bar = U (J S + diag(s_bar) + S K) V^T
              + (I - U U^T) U_bar S^-1 V^T      (m > k only: else U U^T = I)
              + U S^-1 V_bar^T (I - V V^T)      (n > k only).

    Checked against central differences and against :func:`_svd_jvp` (tests/test_svd.py)."""
    m, n, k = svd_sizes(a.shape)
    u, s, vt, eye, f = _svd_parts(out, a)
    gu, gs, gvt = (_svd_slice(g, a, part) for part in range(3))
    row, col = reshape(s, (1, k)), reshape(s, (k, 1))
    x = matmul(_transpose2(u), gu)  # U^T U_bar
    y = matmul(vt, _transpose2(gvt))  # V^T V_bar
    j = mul(f, sub(x, _transpose2(x)))
    kk = mul(f, sub(y, _transpose2(y)))
    inner = add(add(mul(j, row), mul(eye, reshape(gs, (1, k)))), mul(col, kk))
    if n > k:  # U S^-1 V_bar^T (I - V V^T) = U (S^-1 (V_bar^T - y^T V^T))
        inner_vt = add(matmul(inner, vt), div(sub(gvt, matmul(_transpose2(y), vt)), col))
    else:
        inner_vt = matmul(inner, vt)
    abar = matmul(u, inner_vt)
    if m > k:  # (I - U U^T) U_bar S^-1 V^T = ((U_bar - U x) / s) V^T
        abar = add(abar, matmul(div(sub(gu, matmul(u, x)), row), vt))
    return (abar,)


def _svd_jvp(t, out, a):
    """Tangents of the thin SVD (the rule of :func:`_svd_vjp`, forward): with dP = U^T dA V,
    M = S dP + dP^T S (symmetric) and F antisymmetric, ds = diag(dP),

        dU  = U (F o (dP S + S dP^T)) + (dA V - U dP) S^-1       (second term for m > k)
        dVt = -(F o M) V^T + S^-1 (U^T dA - dP V^T)              (second term for n > k)."""
    (ta,) = t
    if ta is None:
        return None
    m, n, k = svd_sizes(a.shape)
    u, s, vt, eye, f = _svd_parts(out, a)
    row, col = reshape(s, (1, k)), reshape(s, (k, 1))
    ut_da = matmul(_transpose2(u), ta)  # k x n
    da_v = matmul(ta, _transpose2(vt))  # m x k
    dp = matmul(ut_da, _transpose2(vt))
    dpt = _transpose2(dp)
    ds = reduce(Op.REDUCE_SUM, mul(dp, eye), (0,))
    du = matmul(u, mul(f, add(mul(dp, row), mul(col, dpt))))
    if m > k:
        du = add(du, div(sub(da_v, matmul(u, dp)), row))
    dvt = neg(matmul(mul(f, add(mul(col, dp), mul(dpt, row))), vt))
    if n > k:
        dvt = add(dvt, div(sub(ut_da, matmul(dp, vt)), col))
    return _svd_pack(a, du, ds, dvt)


def _svd_ref(attrs, x):
    u, s, vt = np.linalg.svd(np.asarray(x, dtype=np.float64), full_matrices=False)
    return np.concatenate([u.ravel(), s, vt.ravel()])


# fmt: off
defop(Op.MATMUL, "linalg", 2, _matmul, lambda a, x, y: np.matmul(x, y),
      lambda g, out, a, b: _matmul_vjp(g, a, b), jvp=_matmul_jvp)
# eigh(a): row 0 the eigenvalues (ascending), rows 1..n the eigenvectors (columns) of the
# symmetric matrix a, by LAPACK's dsyevd reading triangle attrs[0] (codegen/blas.py)
defop(Op.EIGH, "linalg", 1, _eigh, _eigh_ref, _eigh_vjp, jvp=_eigh_jvp)
# svd(a): the thin SVD of the (m, n) matrix a, k = min(m, n), flat: U (m x k, row-major), then
# s (k, descending), then Vt (k x n, row-major), by LAPACK's dgesdd, jobz='S' (codegen/blas.py)
defop(Op.SVD, "linalg", 1, _svd, _svd_ref, _svd_vjp, jvp=_svd_jvp)
# fmt: on
