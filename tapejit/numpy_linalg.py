"""``numpy.linalg`` for the small dense matrices of scalarised models, as compositions.

The algorithms are written with the tracer's array operations, so their derivatives come from
differentiating the algorithm itself (exact for the computed result; it agrees with the
closed-form matrix-calculus rules of Giles, "An extended collection of matrix derivative
results for forward and reverse mode AD", 2008, e.g. d(A^-1) = -A^-1 dA A^-1), and everything
is fused and vectorised like any other traced code. They unroll one step per row: meant for
matrices up to ~30 x 30 (compile time grows with n, run time as n^3); batched inputs
(``(..., n, n)``) loop over the batch at trace time.

* LU factorisation with **partial pivoting** (Golub & Van Loan, *Matrix Computations*, 4th ed.,
  alg. 3.4.1), branch-free: the pivot row is selected with masks (the first row of largest
  magnitude, as LAPACK's ``dgetrf``), so no guard and no recompile depends on the values.
  ``solve``, ``inv``, ``det`` and ``slogdet`` use it. A singular matrix gives inf/NaN (numpy
  raises ``LinAlgError``; a traced value cannot raise at run time).
* Cholesky (Golub & Van Loan alg. 4.2.1), no pivoting; a matrix that is not positive definite
  gives NaN (numpy raises ``LinAlgError``).
"""

from __future__ import annotations

import numpy as np

from .np_common import _like, _t
from .np_shape import _concatenate, _stack
from .tracing import _fail, _reduce, _reshape, _where


def _square(a, name: str):
    a = _t(a)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise _fail(f"numpy.linalg.{name}: last 2 dimensions of the array must be square")
    return a


def _batched(fn, a, *rest):
    """``fn`` on each matrix of a ``(..., n, n)`` stack, results stacked back."""
    if a.ndim == 2:
        return fn(a, *rest)
    lead = a.shape[:-2]
    outs = [fn(a[idx], *(r[idx] if r.ndim > 2 else r for r in rest)) for idx in np.ndindex(*lead)]
    if isinstance(outs[0], tuple):
        return tuple(_reshape(_stack(list(p)), lead + p[0].shape) for p in zip(*outs))
    return _reshape(_stack(outs), lead + outs[0].shape)


def _lu(m):
    """Partially pivoted elimination of ``m`` (n x p, p >= n) to upper-triangular form.
    Returns (the eliminated matrix, the sign of the row permutation)."""
    n = m.shape[0]
    sign = 1.0
    for k in range(n - 1):
        col = abs(m[k:, k])
        big = col == _reduce("reduce_max", col)
        # the first row of largest magnitude: an exclusive prefix count of earlier maxima is 0
        count = np.cumsum(big.astype(float))
        first = big & (count == 1.0)
        pivot = _reduce("reduce_sum", _where(first[:, None], m[k:], 0.0), (0,))
        rest = _where(first[:, None], m[k : k + 1], m[k:])  # the pivot row's old place gets row k
        sign = sign * _where(first[0], 1.0, -1.0)
        rows = _concatenate([pivot[None, :], rest[1:]], 0)
        factors = rows[1:, k] / rows[0, k]
        below = rows[1:, k + 1 :] - factors[:, None] * rows[0, k + 1 :][None, :]
        lower = _concatenate([_like(0.0, below, shape=(n - k - 1, k + 1)), below], 1)
        m = _concatenate([m[:k], rows[:1], lower], 0) if k else _concatenate([rows[:1], lower], 0)
    return m, sign


def _back_substitute(u, rhs):
    """Solve upper-triangular ``u`` (n x n) for the columns of ``rhs`` (n x p)."""
    n = u.shape[0]
    rows = [None] * n
    for i in reversed(range(n)):
        acc = rhs[i]
        for j in range(i + 1, n):
            acc = acc - u[i, j] * rows[j]
        rows[i] = acc / u[i, i]
    return _stack(rows)


def _solve2(a, b):
    n = a.shape[0]
    vec = b.ndim == 1
    rhs = _reshape(b, (n, 1)) if vec else b
    m, _ = _lu(_concatenate([a, rhs], 1))
    x = _back_substitute(m[:, :n], m[:, n:])
    return _reshape(x, (n,)) if vec else x


def solve(a, b):
    """``np.linalg.solve(a, b)``: ``a`` (..., n, n), ``b`` (..., n) or (..., n, k)."""
    a, b = _square(a, "solve"), _t(b)
    if a.ndim == 2:
        return _solve2(a, b)
    return _batched(_solve2, a, b)


def inv(a):
    """``np.linalg.inv(a)`` for ``a`` of shape (..., n, n)."""
    a = _square(a, "inv")
    eye = np.eye(a.shape[-1])
    return _batched(lambda m: _solve2(m, _t(eye)), a)


def _det2(a):
    m, sign = _lu(a)
    d = m[0, 0]
    for i in range(1, a.shape[0]):
        d = d * m[i, i]
    return sign * d


def det(a):
    """``np.linalg.det(a)``: the product of the pivots times the permutation's sign."""
    return _batched(_det2, _square(a, "det"))


def _slogdet2(a):
    m, sign = _lu(a)
    n = a.shape[0]
    diag = _stack([m[i, i] for i in range(n)])
    s = sign * np.prod(np.sign(diag))
    return s, _reduce("reduce_sum", np.log(abs(diag)))


def slogdet(a):
    """``np.linalg.slogdet(a)`` as ``(sign, logabsdet)``; a singular ``a`` gives (0, -inf)."""
    return _batched(_slogdet2, _square(a, "slogdet"))


def _cholesky2(a):
    n = a.shape[0]
    cols = []
    for k in range(n):
        # column k of L: (A[k:, k] - L[k:, :k] @ L[k, :k]) / L[k, k]
        c = a[k:, k]
        for j in range(k):
            c = c - cols[j][k:] * cols[j][k]
        d = np.sqrt(c[0])
        col = c / d
        col = _concatenate([_t(np.zeros(k)), col], 0) if k else col
        cols.append(col)
    return np.stack(cols, axis=1)


def cholesky(a, upper=False):
    """``np.linalg.cholesky(a)``: lower-triangular ``L`` with ``L @ L.T == a``."""
    L = _batched(_cholesky2, _square(a, "cholesky"))
    return np.swapaxes(L, -1, -2) if upper else L


FUNCTIONS = {
    np.linalg.solve: solve,
    np.linalg.inv: inv,
    np.linalg.det: det,
    np.linalg.slogdet: slogdet,
    np.linalg.cholesky: cholesky,
}
