"""``numpy.linalg`` for the small dense matrices of scalarised models, as compositions.

The algorithms are written with the tracer's array operations, so their derivatives come from
differentiating the algorithm itself (exact for the computed result; it agrees with the
closed-form matrix-calculus rules of Giles, "An extended collection of matrix derivative
results for forward and reverse mode AD", 2008, e.g. d(A^-1) = -A^-1 dA A^-1), and everything
is fused and vectorised like any other traced code. They unroll one step per row: they
serve matrices up to :data:`.numpy_factor.SMALL_MAX` (4 x 4), and ``solve``, ``inv``, ``det``, ``slogdet`` and ``cholesky`` of larger ones are LAPACK-backed
primitives (:mod:`.numpy_factor`: compile time independent of n, numpy's ``LinAlgError``;
generated stand-ins for LAPACK without scipy). Batched inputs
(``(..., n, n)``) loop over the batch at trace time.

* Up to 4 x 4 (:data:`COFACTOR_MAX`), ``det`` is the cofactor (Laplace) expansion and ``inv``
  and ``solve`` the adjugate over it: polynomials and one division, whose derivatives need no
  hand-given rule (the gradient of ``det`` is the cofactor matrix, singular matrices included)
  and which vectorise across a loop's elements as scalar code
  (:mod:`tapejit.passes.small_arrays`). An exactly singular matrix raises numpy's
  ``LinAlgError`` at the call. The products are unscaled: entries beyond about 1e100 (or
  below 1e-100; 1e75 and 1e-75 at 4 x 4) overflow (underflow) where a pivoted LU would not.
* LU factorisation with **partial pivoting** (Golub & Van Loan, *Matrix Computations*, 4th ed.,
  alg. 3.4.1), branch-free: the pivot row is selected with masks (the first row of largest
  magnitude, as LAPACK's ``dgetrf``), so no guard and no recompile depends on the values.
  ``solve`` of a stack of small matrices uses it. A singular
  matrix gives inf/NaN there (numpy raises ``LinAlgError``; the primitives of
  :mod:`.numpy_factor` and the adjugate path do).
* Cholesky (Golub & Van Loan alg. 4.2.1), no pivoting; a matrix that is not positive definite
  gives NaN (numpy raises ``LinAlgError``).
* ``eigh``/``eigvalsh`` by cyclic Jacobi rotations (Golub & Van Loan alg. 8.5.3) for a fixed
  number of sweeps, reading one triangle as LAPACK does; the eigen-derivatives come from
  differentiating the rotations (defined where the eigenvalues are distinct).

With scipy installed, ``eigh`` and ``svd`` are primitives instead (``Op.EIGH``, ``Op.SVD``) that
call LAPACK's ``dsyevd``/``dgesdd`` as numpy does, with closed-form derivative rules; ``pinv``
and the singular-value norms (``'nuc'``, ``2``, ``-2``) build on ``svd``.
"""

from __future__ import annotations

import functools

import numpy as np

from .np_common import _axis, _like, _reduce, _t
from .np_math import _norm
from .np_shape import _concatenate, _stack
from ...core import ops
from ..custom import custom_jvp
from ...core.ops import Op
from ..errors import _fail
from ..tracer import _build, _reshape, _transpose, _where
from . import numpy_factor as factor
from .numpy_factor import _lapack_has


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


#: The largest n whose determinant is the cofactor (Laplace) expansion: a polynomial in the
#: entries, so its derivative is the cofactor matrix (the adjugate's transpose) everywhere —
#: singular matrices included, without a hand-given rule — and a few multiply-adds per matrix
#: that batch and vectorise across a loop's elements (a deformation gradient's det per element).
#: Above it every square factorisation is a primitive (:data:`.numpy_factor.SMALL_MAX`).
COFACTOR_MAX = factor.SMALL_MAX


def _minors4(e):
    """The 2 x 2 minors of rows 0-1 (``s``) and rows 2-3 (``c``) of a 4 x 4 matrix's entries
    ``e[i][j]``, column pairs (0,1) (0,2) (0,3) (1,2) (1,3) (2,3): det = s0 c5 - s1 c4 + s2 c3 +
    s3 c2 - s4 c1 + s5 c0, the Laplace expansion along rows 0-1 (D. Eberly, "The Laplace
    Expansion Theorem: Computing the Determinants and Inverses of Matrices", 2008)."""
    pairs = ((0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3))
    s = [e[0][p] * e[1][q] - e[1][p] * e[0][q] for p, q in pairs]
    c = [e[2][p] * e[3][q] - e[3][p] * e[2][q] for p, q in pairs]
    return s, c


def _det4(s, c):
    return s[0] * c[5] - s[1] * c[4] + s[2] * c[3] + s[3] * c[2] - s[4] * c[1] + s[5] * c[0]


def _adjugate4(e):
    """adj of a 4 x 4 matrix's entries ``e[i][j]`` (rows of adj), and its det, from
    :func:`_minors4` (Eberly 2008, sec. 3)."""
    s, c = _minors4(e)
    a = e
    adj = [
        [a[1][1] * c[5] - a[1][2] * c[4] + a[1][3] * c[3],
         -a[0][1] * c[5] + a[0][2] * c[4] - a[0][3] * c[3],
         a[3][1] * s[5] - a[3][2] * s[4] + a[3][3] * s[3],
         -a[2][1] * s[5] + a[2][2] * s[4] - a[2][3] * s[3]],
        [-a[1][0] * c[5] + a[1][2] * c[2] - a[1][3] * c[1],
         a[0][0] * c[5] - a[0][2] * c[2] + a[0][3] * c[1],
         -a[3][0] * s[5] + a[3][2] * s[2] - a[3][3] * s[1],
         a[2][0] * s[5] - a[2][2] * s[2] + a[2][3] * s[1]],
        [a[1][0] * c[4] - a[1][1] * c[2] + a[1][3] * c[0],
         -a[0][0] * c[4] + a[0][1] * c[2] - a[0][3] * c[0],
         a[3][0] * s[4] - a[3][1] * s[2] + a[3][3] * s[0],
         -a[2][0] * s[4] + a[2][1] * s[2] - a[2][3] * s[0]],
        [-a[1][0] * c[3] + a[1][1] * c[1] - a[1][2] * c[0],
         a[0][0] * c[3] - a[0][1] * c[1] + a[0][2] * c[0],
         -a[3][0] * s[3] + a[3][1] * s[1] - a[3][2] * s[0],
         a[2][0] * s[3] - a[2][1] * s[1] + a[2][2] * s[0]],
    ]  # fmt: skip
    return adj, _det4(s, c)


def _lu(m):
    """Partially pivoted elimination of ``m`` (n x p, p >= n) to upper-triangular form.
    Returns (the eliminated matrix, the sign of the row permutation)."""
    n = m.shape[0]
    sign = 1.0
    for k in range(n - 1):
        col = abs(m[k:, k])
        big = col == _reduce(Op.REDUCE_MAX, col)
        # the first row of largest magnitude: an exclusive prefix count of earlier maxima is 0
        count = np.cumsum(big.astype(float))
        first = big & (count == 1.0)
        pivot = _reduce(Op.REDUCE_SUM, _where(first[:, None], m[k:], 0.0), (0,))
        rest = _where(first[:, None], m[k : k + 1], m[k:])  # the pivot row's old place gets row k
        sign = sign * _where(first[0], 1.0, -1.0)
        rows = _concatenate([pivot[None, :], rest[1:]], 0)
        # a zero pivot (the column is zero from row k down) eliminates nothing, as LAPACK's
        # dgetrf: its factors are 0, not 0/0, so a singular matrix's det is 0, not NaN
        factors = rows[1:, k] / _where(rows[0, k] == 0.0, 1.0, rows[0, k])
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


def _adjugate_small(a, name: str):
    """(adj a, det a) of ``a`` (..., n, n), n <= :data:`COFACTOR_MAX`, from the cofactors
    (the 3 x 3 ones by the cyclic rule C[i][j] = e[i+1][j+1] e[i+2][j+2] - e[i+1][j+2] e[i+2][j+1],
    indices mod 3; 4 x 4 by :func:`_adjugate4`); ``LinAlgError`` at the call, as numpy's,
    where a determinant is exactly 0 (numpy raises where its LU meets an exactly zero pivot:
    the two agree for a zero row or column and two equal rows of a 2 x 2 — or rows 0 and 1 of
    a 4 x 4 — matrix; a singular matrix whose expansion rounds to a tiny nonzero det gives
    huge entries, as a nearly singular one does in numpy).
    The entries' products are formed unscaled: magnitudes beyond about 1e100 (1e-100; 1e75 at
    4 x 4) overflow (underflow) where LAPACK's pivoted LU would not."""
    n = a.shape[-1]
    e = [[a[..., i, j] for j in range(n)] for i in range(n)]
    if n == 4:
        rows, d = _adjugate4(e)
        return _finish_adjugate(rows, d, name)
    if n == 1:
        cof = [[_like(1.0, e[0][0])]]
    elif n == 2:
        cof = [[e[1][1], -e[1][0]], [-e[0][1], e[0][0]]]
    else:
        cof = [[e[(i + 1) % 3][(j + 1) % 3] * e[(i + 2) % 3][(j + 2) % 3]
                - e[(i + 1) % 3][(j + 2) % 3] * e[(i + 2) % 3][(j + 1) % 3]
                for j in range(3)] for i in range(3)]  # fmt: skip
    d = e[0][0] * cof[0][0]
    for j in range(1, n):
        d = d + e[0][j] * cof[0][j]
    return _finish_adjugate([[cof[j][i] for j in range(n)] for i in range(n)], d, name)


def _finish_adjugate(rows, d, name: str):
    """(adj, det) from adj's entries by rows; ``LinAlgError`` at the call where det is 0."""
    n = len(rows)
    adj = np.stack([np.stack([rows[i][j] for j in range(n)], axis=-1) for i in range(n)], axis=-2)
    factor._raises_if(_t(np.any(d == 0.0)).node, "Singular matrix", name)
    return adj, d


def solve(a, b):
    """``np.linalg.solve(a, b)``: ``a`` (..., n, n), ``b`` (..., n) or (..., n, k). Up to
    4 x 4 (:data:`COFACTOR_MAX`) by the adjugate, ``adj(a) b / det(a)`` (a few multiply-adds
    that vectorise across a loop's elements); above, pivoted LU."""
    a, b = _square(a, "solve"), _t(b)
    n = a.shape[-1]
    if n <= COFACTOR_MAX and a.ndim == 2:
        adj, d = _adjugate_small(a, "numpy.linalg.solve")
        return (adj @ b) / d
    if factor.use_primitives(a.shape[-1]):
        return _batched(factor.solve, a, b)
    if a.ndim == 2:
        return _solve2(a, b)
    return _batched(_solve2, a, b)


def inv(a):
    """``np.linalg.inv(a)`` for ``a`` of shape (..., n, n)."""
    a = _square(a, "inv")
    if a.shape[-1] <= COFACTOR_MAX:  # the adjugate over the determinant (see _adjugate_small)
        adj, d = _adjugate_small(a, "numpy.linalg.inv")
        return adj / d[..., None, None]
    return _batched(factor.inv, a)


def _det_cofactor(a):
    """det of ``a`` (..., n, n), n <= 4, by cofactor expansion along the first row (4 x 4:
    along the first two, :func:`_minors4`); ``+ 0.0``
    makes an exact zero +0.0, as numpy's det of a singular matrix."""
    n = a.shape[-1]
    e = [[a[..., i, j] for j in range(n)] for i in range(n)]
    if n == 4:
        d = _det4(*_minors4(e))
    elif n == 1:
        d = e[0][0]
    elif n == 2:
        d = e[0][0] * e[1][1] - e[0][1] * e[1][0]
    else:
        d = (e[0][0] * (e[1][1] * e[2][2] - e[1][2] * e[2][1])
             - e[0][1] * (e[1][0] * e[2][2] - e[1][2] * e[2][0])
             + e[0][2] * (e[1][0] * e[2][1] - e[1][1] * e[2][0]))  # fmt: skip
    return d + 0.0


def det(a):
    """``np.linalg.det(a)``, ``a`` of shape (..., n, n): the cofactor expansion up to 4 x 4
    (:data:`COFACTOR_MAX`), else the product of the pivots times the permutation's sign; 0 for
    a singular matrix, with the adjugate as its gradient (Jacobi's formula)."""
    a = _square(a, "det")
    n = a.shape[-1]
    if n <= COFACTOR_MAX:
        return _det_cofactor(a)
    return _batched(factor.det, a)


def _slogdet_cofactor(a):
    """(sign, log|det|) of ``a`` (..., n, n), n <= :data:`COFACTOR_MAX`, from the cofactor
    expansion of ``a / 2^e``, 2^(e-1) <= sum |a_ij| < 2^e (``np.frexp``; e = 0 for a zero
    matrix): log|det a| = log|det(a / 2^e)| + n e log 2, so entries of any magnitude below
    ~1e306 neither overflow nor underflow (those of a / 2^e are below 1), and the division by a
    power of two is exact (an exactly singular matrix stays exactly singular: (0, -inf), as
    numpy's). A sum, not a maximum: it splits into scalars in an element loop
    (:mod:`tapejit.passes.small_arrays`). e is piecewise constant (no derivative), so the
    gradient of log|det| is inv(a)^T wherever a is nonsingular."""
    n = a.shape[-1]
    _, e = np.frexp(np.sum(abs(a), axis=(-2, -1)))
    d = _det_cofactor(a / np.ldexp(1.0, e)[..., None, None])
    return np.sign(d), np.log(abs(d)) + (float(n) * np.log(2.0)) * e


def slogdet(a):
    """``np.linalg.slogdet(a)`` as ``(sign, logabsdet)``; a singular ``a`` gives (0, -inf).
    Up to 4 x 4 (:data:`COFACTOR_MAX`) by the scaled cofactor expansion
    (:func:`_slogdet_cofactor`), above by pivoted LU."""
    a = _square(a, "slogdet")
    if a.shape[-1] <= COFACTOR_MAX:
        return _slogdet_cofactor(a)
    return _batched(factor.slogdet, a)


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
    """``np.linalg.cholesky(a)``: lower-triangular ``L`` with ``L @ L.T == a``, reading a's
    lower triangle; with ``upper``, ``U`` with ``U.T @ U == a``, reading the upper one (as
    numpy's, whose LAPACK call reads the triangle it returns)."""
    a = _square(a, "cholesky")
    if upper:
        a = np.swapaxes(a, -1, -2)
    L = _batched(factor.cholesky if factor.use_primitives(a.shape[-1]) else _cholesky2, a)
    return np.swapaxes(L, -1, -2) if upper else L


#: Cyclic Jacobi sweeps run by :func:`eigh` (quadratic convergence: 6-8 suffice at n <= 10).
JACOBI_SWEEPS = 10


def _eigh2(a, uplo="L"):
    """Cyclic Jacobi (Golub & Van Loan alg. 8.5.3): each rotation zeroes a[p, q] with the angle
    theta = atan2(2 a_pq, a_qq - a_pp) / 2 (smooth in the entries, so reverse mode through the
    sweeps gives the eigen-derivatives wherever the eigenvalues are distinct), for a fixed
    number of sweeps; then the pairs are sorted ascending by odd-even transposition."""
    n = a.shape[0]
    # numpy (LAPACK) reads one triangle: the other is never looked at, nor differentiated
    low = np.tril(a) if uplo == "L" else np.triu(a).T
    a = low + np.tril(low, -1).T
    v = _t(np.eye(n))
    for _ in range(JACOBI_SWEEPS):
        for p in range(n - 1):
            for q in range(p + 1, n):
                theta = 0.5 * np.arctan2(2.0 * a[p, q], a[q, q] - a[p, p])
                c, s = np.cos(theta), np.sin(theta)
                g = _like(0.0, a)
                g[...] = np.eye(n)
                g[p, p] = c
                g[q, q] = c
                g[p, q] = s
                g[q, p] = -s
                a = g.T @ a @ g
                v = v @ g
    w = [a[i, i] for i in range(n)]
    cols = [v[:, i] for i in range(n)]
    for r in range(n):  # odd-even transposition sort of (w, column) pairs, branch-free
        for i in range(r % 2, n - 1, 2):
            swap = w[i] > w[i + 1]
            w[i], w[i + 1] = _where(swap, w[i + 1], w[i]), _where(swap, w[i], w[i + 1])
            cols[i], cols[i + 1] = (_where(swap, cols[i + 1], cols[i]),
                                    _where(swap, cols[i], cols[i + 1]))  # fmt: skip
    return _stack(w), _stack(cols, axis=1)


def _lapack_available() -> bool:
    """Whether ``eigh`` can call LAPACK's ``dsyevd``."""
    return _lapack_has("dsyevd")


def _eigh_lapack(a, uplo="L"):
    """One ``eigh`` node (LAPACK ``dsyevd``, as numpy) on the matrix symmetrised from the
    triangle LAPACK reads; its derivative rules are the closed-form ones (tapejit.core.ops_linalg)."""
    n = a.shape[0]
    low = np.tril(a) if uplo == "L" else np.triu(a).T
    sym = low + np.tril(low, -1).T
    out = _build(lambda m: ops.make(Op.EIGH, m, attrs=(uplo,)), sym)
    return out[0], out[1:]


def eigh(a, UPLO="L"):
    """``np.linalg.eigh(a)`` -> ``(w, v)``: eigenvalues ascending and orthonormal eigenvectors
    (columns) of symmetric ``a`` (..., n, n), reading only the ``UPLO`` triangle as numpy does.

    With scipy installed (its LAPACK), by a call to LAPACK's ``dsyevd`` — the routine numpy
    calls, so the eigenvectors' signs agree with numpy's — for n <= 96 (its work arrays live on
    the stack); the derivatives are the closed-form rules (Giles 2008, sec. 3.1: with F[i, j] =
    1/(w_j - w_i), dV = V (F o V^T dA V), dw = diag(V^T dA V)). Without scipy, or for larger n,
    by :data:`JACOBI_SWEEPS` cyclic Jacobi sweeps — meant for n <= ~10 (n^4 work per sweep),
    whose eigenvectors may have the other sign than numpy's (a function of them that does not
    depend on the signs, ``v @ diag(f(w)) @ v.T``, matches). The gradient is undefined (inf or
    NaN) where eigenvalues coincide."""
    a = _square(a, "eigh")
    if UPLO not in ("L", "U"):
        raise _fail(f"numpy.linalg.eigh: UPLO must be 'L' or 'U', got {UPLO!r}")
    if a.shape[-1] <= ops.EIGH_MAX and _lapack_available():
        return _batched(lambda m: _eigh_lapack(m, UPLO), a)
    return _batched(lambda m: _eigh2(m, UPLO), a)


def eigvalsh(a, UPLO="L"):
    """``np.linalg.eigvalsh(a)``: the eigenvalues of :func:`eigh`, ascending."""
    return eigh(a, UPLO)[0]


def matrix_power(a, n):
    """``np.linalg.matrix_power``: repeated squaring; a negative ``n`` inverts first."""
    a = _square(a, "matrix_power")
    n = int(n)
    if n < 0:
        a, n = inv(a), -n
    result, base = None, a
    while n:
        if n & 1:
            result = base if result is None else result @ base
        n >>= 1
        if n:
            base = base @ base
    if result is None:
        eye = np.broadcast_to(np.eye(a.shape[-1]), a.shape)
        return _t(np.ascontiguousarray(eye)) + a * 0.0
    return result


def multi_dot(arrays, *, out=None):
    """``np.linalg.multi_dot``, left to right (numpy picks the cheapest order; the products
    agree up to rounding)."""
    if out is not None:
        raise _fail("numpy.linalg.multi_dot with out= is not supported by tapejit")
    r = _t(arrays[0])
    for m in arrays[1:]:
        r = r @ m
    return r


def _gesdd_available() -> bool:
    """Whether ``svd`` can call LAPACK's ``dgesdd``."""
    return _lapack_has("dgesdd")


def _svd_fits(shape) -> bool:
    m, n = shape[-2:]
    return min(m, n) <= ops.SVD_MAX_K and m * n <= ops.SVD_MAX_SIZE


def _svd_check(a, name: str):
    """``a`` as a tracer of at least 2 dimensions that one ``svd`` node per matrix takes."""
    a = _t(a)
    if a.ndim < 2:
        raise _fail(f"numpy.linalg.{name}: the array must have at least 2 dimensions")
    if not _gesdd_available():
        raise _fail(
            f"numpy.linalg.{name} needs scipy's LAPACK (dgesdd), which tapejit calls as numpy "
            "does: pip install scipy"
        )
    if 0 in a.shape[-2:] or not _svd_fits(a.shape):
        raise _fail(
            f"numpy.linalg.{name}: tapejit's SVD takes matrices with min(m, n) <= "
            f"{ops.SVD_MAX_K} and m n <= {ops.SVD_MAX_SIZE} (its work arrays live on the "
            f"stack), got {a.shape[-2:]}"
        )
    return a


def _svd2(a):
    """(U, s, Vt) of one (m, n) matrix: one ``svd`` node, its flat result cut in three."""
    m, n, k = ops.svd_sizes(a.shape)
    out = _build(lambda x: ops.make(Op.SVD, ops._float(x)), a)
    u = _reshape(out[: m * k], (m, k))
    return u, out[m * k : m * k + k], _reshape(out[m * k + k :], (k, n))


def svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    """``np.linalg.svd(a, full_matrices=False)`` -> ``(U, s, Vt)`` for ``a`` (..., m, n): U
    (..., m, k), s (..., k) descending, Vt (..., k, n), k = min(m, n); ``compute_uv=False``
    gives ``s``. Needs scipy: one ``svd`` node per matrix, a call of LAPACK's ``dgesdd``
    (jobz='S') — the routine numpy calls, so the singular vectors' signs agree with numpy's —
    for min(m, n) <= 48 and m n <= 4096 (``ops.SVD_MAX_K``, ``ops.SVD_MAX_SIZE``).

    Derivatives are the closed-form rules for the real thin SVD (Townsend 2016; Giles 2008),
    with F[i, j] = 1 / (s_j^2 - s_i^2): undefined (inf or NaN) where singular values coincide,
    or (for m != n, through S^-1) where one is 0 — as for any SVD derivative. The default
    ``full_matrices=True`` works for square matrices; for m != n the extra singular vectors are
    not unique (any orthonormal basis of the complement), so their derivative is undefined and
    it is refused. ``hermitian=True`` (numpy's eigh-based path, other signs) is refused unless
    ``compute_uv=False``."""
    a = _svd_check(a, "svd")
    m, n = a.shape[-2:]
    if full_matrices and compute_uv and m != n:
        raise _fail(
            "numpy.linalg.svd with full_matrices=True (numpy's default) of a non-square matrix: "
            "the extra singular vectors are not unique, so their derivative is undefined; use "
            "full_matrices=False"
        )
    if hermitian and compute_uv:
        raise _fail(
            "numpy.linalg.svd with hermitian=True is not supported (numpy's eigh-based path "
            "picks other signs); use hermitian=False, or np.linalg.eigh"
        )
    if not compute_uv:
        return _batched(lambda x: _svd2(x)[1], a)
    return _batched(_svd2, a)


def _singular_norm(x, ord, axis, keepdims):
    """The matrix norms of the singular values: 'nuc' (their sum), 2 (the largest), -2 (the
    smallest), over the axis pair ``axis`` (None: the last two of a 2-D array)."""
    rows, cols = (0, 1) if axis is None else (_axis(axis[0], x.ndim), _axis(axis[1], x.ndim))
    rest = [d for d in range(x.ndim) if d not in (rows, cols)]
    s = svd(_transpose(x, tuple(rest) + (rows, cols)), compute_uv=False)
    last = s.ndim - 1
    if ord == "nuc":
        r = _reduce(Op.REDUCE_SUM, s, last)
    else:
        r = s[..., 0] if ord == 2 else s[..., -1]  # s is descending
    if keepdims:
        shape = list(x.shape)
        shape[rows] = shape[cols] = 1
        r = _reshape(r, tuple(shape))
    return r


def norm(x, ord=None, axis=None, keepdims=False):
    """``np.linalg.norm``: the vector norms and the matrix norms 'fro', 1, -1, inf, -inf
    (``tapejit.frontend.numpy.np_math._norm``), and the matrix norms of the singular values — 'nuc', 2, -2 —
    through :func:`svd` (so these need scipy; the derivative of 2 / -2 is undefined where the
    largest / smallest singular value is repeated)."""
    x = _t(x)
    if axis is not None and np.ndim(axis) == 0:
        axis = (axis,)
    matrix = (axis is None and x.ndim == 2) or (axis is not None and len(axis) == 2)
    if matrix and (isinstance(ord, str) and ord == "nuc" or ord in (2, -2)):
        return _singular_norm(x, ord, axis, keepdims)
    return _norm(x, ord, axis, keepdims)


def _pinv_values(a, rcond):
    """numpy's pseudo-inverse: V diag(1/s) U^T with the singular values s <= rcond max(s)
    treated as zero — by a traced select, so the rank is not a guard and the same code serves
    matrices of any rank."""
    u, s, vt = _svd2(a)
    large = s > rcond * s[0]  # s is descending: s[0] is the largest
    inv = _where(large, 1.0 / _where(large, s, 1.0), 0.0)  # no inf, so no 0 * inf cotangent
    return _transpose(vt * inv[:, None], (1, 0)) @ _transpose(u, (1, 0))


def _pinv_hermitian_values(a, rcond):
    """numpy's ``pinv(a, hermitian=True)`` of symmetric ``a``: V diag(1/w) V^T from
    :func:`eigh`, the eigenvalues with |w| <= rcond max|w| treated as zero (numpy takes the
    singular values as |w|)."""
    w, v = eigh(a)
    s = abs(w)
    large = s > rcond * _reduce(Op.REDUCE_MAX, s)
    inv = _where(large, 1.0 / _where(large, w, 1.0), 0.0)
    return (v * inv[None, :]) @ _transpose(v, (1, 0))


@functools.cache
def _pinv_rule(rcond: float, hermitian: bool = False) -> custom_jvp:
    """The pseudo-inverse with its closed-form derivative (Golub & Pereyra, "The
    differentiation of pseudo-inverses and nonlinear least squares problems", SIAM J. Numer.
    Anal. 10, 1973): with P = A^+, dP = -P dA P + P P^T dA^T (I - A P) + (I - P A) dA^T P^T P,
    valid where the rank is locally constant. Unlike differentiating through the SVD it is
    defined where singular values coincide (an orthogonal matrix, the identity). Reverse mode
    transposes it (it is linear in dA)."""

    values = _pinv_hermitian_values if hermitian else _pinv_values

    @custom_jvp
    def pinv_at_rank(a):
        return values(a, rcond)

    @pinv_at_rank.defjvp
    def _jvp(primals, tangents):
        (a,), (da,) = primals, tangents
        p = values(a, rcond)
        m, n = a.shape
        left = np.eye(m) - a @ p  # projects onto the complement of A's range
        right = np.eye(n) - p @ a  # ... of A's row space
        dat = _transpose(da, (1, 0))
        pt = _transpose(p, (1, 0))
        return p, -(p @ da @ p) + p @ pt @ dat @ left + right @ dat @ pt @ p

    return pinv_at_rank


def _pinv_svd(a, rcond):
    return _pinv_rule(rcond)(a)


def _pinv2(a):
    m, n = a.shape
    g = a.T @ a if m >= n else a @ a.T  # the Gram matrix of the smaller side: full rank or not
    u, _ = _lu(g)
    pivots = abs(_stack([u[i, i] for i in range(g.shape[0])]))
    # a rank-deficient matrix's pseudo-inverse (its derivative) needs an SVD; refuse it (the
    # check is a guard, so a rank-deficient input at run time is refused too)
    if not bool(_reduce(Op.REDUCE_MAX, -pivots) * -1.0 > 1e-13 * _reduce(Op.REDUCE_MAX, pivots)):
        raise _fail(
            "numpy.linalg.pinv: a rank-deficient (or numerically singular) matrix needs an SVD, "
            "which needs scipy's LAPACK (pip install scipy) and min(m, n) <= "
            f"{ops.SVD_MAX_K}, m n <= {ops.SVD_MAX_SIZE}"
        )
    return _solve2(g, a.T) if m >= n else _solve2(g, a).T


_NO_VALUE = object()


def pinv(a, rcond=None, hermitian=False, *, rtol=_NO_VALUE):
    """``np.linalg.pinv(a)`` for ``a`` (..., m, n), as numpy computes it: from the SVD
    (:func:`svd`, LAPACK's ``dgesdd``), with the singular values s <= rcond * max(s) treated as
    zero — rcond 1e-15 by default, ``max(m, n) * eps`` for ``rtol=None``, else ``rtol`` —
    through a traced select, so matrices of any rank work and no guard depends on the rank.
    The derivative is the closed form of Golub & Pereyra (1973) at the matrix's rank (defined
    where singular values coincide too: the identity, an orthogonal matrix).

    Without scipy (or beyond the SVD's size caps): ``(A^T A)^-1 A^T`` (m >= n) or
    ``A^T (A A^T)^-1`` by LU, for full-rank matrices only (a guard refuses the others).

    ``hermitian=True``: ``a`` (..., n, n) is taken as symmetric from its lower triangle (as
    numpy's ``eigh`` reads it) and its pseudo-inverse computed from :func:`eigh` (n <=
    ``EIGH_MAX`` with scipy; otherwise by the SVD of the symmetric matrix, the same matrix up
    to rounding), with the same derivative rule."""
    a = _t(a)
    if a.ndim < 2:
        raise _fail("numpy.linalg.pinv: the array must have at least 2 dimensions")
    if hermitian:
        a = _square(a, "pinv")
        lower = np.tril(np.ones(a.shape[-2:], dtype=bool))
        a = _where(lower, a, _transpose(a, (*range(a.ndim - 2), a.ndim - 1, a.ndim - 2)))
    if rcond is not None and rtol is not _NO_VALUE:
        raise _fail("numpy.linalg.pinv: rtol and rcond can't be both set")
    if rcond is None:
        rcond = 1e-15 if rtol is _NO_VALUE else rtol
        if rcond is None:
            rcond = max(a.shape[-2:]) * np.finfo(np.float64).eps
    if np.ndim(rcond) != 0:
        raise _fail("numpy.linalg.pinv: only a scalar rcond / rtol is supported")
    rcond = float(rcond)
    if hermitian and 0 not in a.shape[-2:] and a.shape[-1] <= ops.EIGH_MAX and _lapack_available():
        return _batched(lambda m: _pinv_rule(rcond, True)(m), a)
    if _gesdd_available() and 0 not in a.shape[-2:] and _svd_fits(a.shape):
        return _batched(lambda m: _pinv_svd(m, rcond), a)
    if rcond != 1e-15:
        raise _fail("numpy.linalg.pinv: rcond= and rtol= need the SVD (pip install scipy)")
    return _batched(_pinv2, a)


FUNCTIONS = {
    np.linalg.svd: svd,
    np.linalg.norm: norm,
    np.linalg.pinv: pinv,
    np.linalg.matrix_power: matrix_power,
    np.linalg.multi_dot: multi_dot,
    np.linalg.eigh: eigh,
    np.linalg.eigvalsh: eigvalsh,
    np.linalg.solve: solve,
    np.linalg.inv: inv,
    np.linalg.det: det,
    np.linalg.slogdet: slogdet,
    np.linalg.cholesky: cholesky,
}
