"""``numpy.linalg``'s factorisations and solves at any size: one primitive each
(:mod:`tapejit.core.ops_factor`: ``cholesky``, ``lu``, ``lu_solve``, ``trisolve``), lowered to
LAPACK's ``dpotrf``/``dgetrf`` and BLAS's ``dtrsm`` (the routines numpy and scipy call), with
the matrix-level derivative rules of that module. A traced ``solve`` is a handful of nodes
whatever n is, so compile time does not grow with the matrix.

Used for matrices larger than :data:`SMALL_MAX`; the small ones (the deformation gradients and
stiffness blocks of constitutive laws) stay the branch-free compositions of
:mod:`.numpy_linalg`, which fuse and vectorise across a loop's elements. Without scipy (and in
exported object files) the generated code calls its own unblocked stand-ins for the routines
(:mod:`tapejit.codegen.lower.fallback`): the same results, slower for large n.

Errors follow numpy: a ``solve``/``inv`` of a singular matrix and a ``cholesky`` of a matrix
that is not positive definite raise ``numpy.linalg.LinAlgError`` at the call (a guard whose
site begins with :data:`~tapejit.frontend.dynamic_index.LINALG_SITE`; nothing is written).
``det`` of a singular matrix is 0 (``slogdet``: sign 0, log -inf), as numpy's; the gradient of
``det`` there is the adjugate where one pivot is zero, NaN where two are (the cofactor
expansion of :mod:`.numpy_linalg` up to 3 x 3 gives the adjugate always).
"""

from __future__ import annotations

import functools

import numpy as np

from ...core import ops, ops_factor
from ...core.ops import Op
from ..dynamic_index import LINALG_SITE, check
from ..errors import _user_site
from ..custom import custom_jvp
from ..tracer import Tracer, _build, _reshape, _transpose
from ...core.ops_table import add_at
from .np_common import _t

#: Matrices up to this size (n x n) use the compositions of :mod:`.numpy_linalg` (inline code
#: that vectorises across a loop's elements); larger ones the LAPACK-backed primitives.
SMALL_MAX = 4


@functools.cache
def _lapack_has(routine: str) -> bool:
    """Whether scipy's LAPACK, which generated code calls through a function pointer, is
    installed and exports ``routine``."""
    try:
        from scipy.linalg import cython_lapack
    except ImportError:
        return False
    return routine in cython_lapack.__pyx_capi__


def use_primitives(n: int) -> bool:
    """Whether an n x n factorisation is one primitive (see :data:`SMALL_MAX`)."""
    return n > SMALL_MAX


def _raises_if(bad: ops.Node, what: str, name: str) -> None:
    """A guard: the call raises ``LinAlgError(what)`` naming ``name`` and the user's line where
    the bool scalar ``bad`` holds."""
    check(bad, f"{LINALG_SITE}{what} ({name} at {_user_site()})")


def _any(mask: ops.Node) -> ops.Node:
    as_f64 = ops.make(Op.CAST, mask, attrs=("f64",))
    return ops.elementwise(Op.GT, ops.reduce(Op.REDUCE_MAX, as_f64), ops.const(0.0))


def cholesky(a: Tracer, name: str = "numpy.linalg.cholesky") -> Tracer:
    """The lower factor L of the (n, n) ``a`` (its lower triangle read); ``LinAlgError`` when
    it is not positive definite (the factor is NaN: checked at its last diagonal element)."""
    low = _build(lambda m: ops.make(Op.CHOLESKY, ops._float(m)), a)
    n = a.shape[0]
    last = ops.index(low.node, (n - 1, n - 1))
    _raises_if(ops.elementwise(Op.NE, last, last), "Matrix is not positive definite", name)
    return low


def lu(a: Tracer) -> Tracer:
    """The ``lu`` node of the (n, n) ``a``: (n + 2, n), see :mod:`tapejit.core.ops_factor`."""
    return _build(lambda m: ops.make(Op.LU, ops._float(m)), a)


def _diagonal(f: Tracer) -> Tracer:
    """U's diagonal (n,) from an ``lu`` node."""
    n = f.shape[1]
    return _build(lambda x: ops.index(ops.reshape(x, ((n + 2) * n,)), ((0, n * n, n + 1),)), f)


def _pivot_sign(f: Tracer) -> Tracer:
    """The permutation's determinant: -1 to the number of pivots that swap a row."""
    n = f.shape[1]

    def build(x):
        piv = ops.index(x, (n,))
        rows = ops.const(0.0, (n,))
        for i in range(1, n):  # 0, 1, ..., n-1 (a constant: scatters of constants fold)
            rows = ops.make(Op.SCATTER, rows, ops.const(float(i), (1,)), attrs=(((i, i + 1, 1),)))
        swaps = ops.reduce(Op.REDUCE_SUM, ops.make(Op.CAST, ops.elementwise(Op.NE, piv, rows),
                                                   attrs=("f64",)))  # fmt: skip
        # (-1)^s = 1 - 2 (s mod 2)
        return ops.sub(ops.const(1.0), ops.mul(ops.const(2.0), ops.elementwise(Op.FMOD, swaps,
                                                                               ops.const(2.0))))  # fmt: skip

    return _build(build, f)


def lu_solve(a: Tracer, f: Tracer, b: Tracer, trans: bool, name: str) -> Tracer:
    """x with a x = b (a^T x = b when ``trans``), ``f = lu(a)``, ``b`` (n,) or (n, k);
    ``LinAlgError`` where U has a zero pivot (numpy's "Singular matrix")."""
    n = a.shape[0]
    d = _diagonal(f)
    _raises_if(_any(ops.elementwise(Op.EQ, d.node, ops.const(0.0))), "Singular matrix", name)
    vec = b.ndim == 1
    rhs = _reshape(b, (n, 1)) if vec else b
    x = _build(lambda m, lu_, r: ops_factor.lu_solve(m, lu_, ops._float(r), trans), a, f, rhs)
    return _reshape(x, (n,)) if vec else x


def _cholesky_factor(a: Tracer) -> tuple[ops.Node, bool] | None:
    """(L, transposed) when ``a`` is a Cholesky factor L (or L^T) computed in this trace: a
    triangular matrix with a positive diagonal (the guard of :func:`cholesky` holds), which a
    solve needs no LU for (the Gaussian-process pattern ``solve(L.T, solve(L, y))``)."""
    node = a.node
    if node.op == Op.CHOLESKY:
        return node, False
    if node.op == Op.TRANSPOSE and node.attrs == ((1, 0),) and node.args[0].op == Op.CHOLESKY:
        return node.args[0], True
    return None


def _solve_factor(a: Tracer, trans: bool, b: Tracer) -> Tracer:
    """x with a x = b for a = L (``trans``: L^T) of :func:`_cholesky_factor`: one ``trisolve``."""
    n = a.shape[0]
    vec = b.ndim == 1
    rhs = _reshape(b, (n, 1)) if vec else b
    x = _build(lambda m, r: ops_factor.trisolve(m.args[0] if trans else m, ops._float(r), True,
                                                trans), a, rhs)  # fmt: skip
    return _reshape(x, (n,)) if vec else x


def solve(a: Tracer, b: Tracer, name: str = "numpy.linalg.solve") -> Tracer:
    factor = _cholesky_factor(a)
    if factor is not None:
        return _solve_factor(a, factor[1], b)
    return lu_solve(a, lu(a), b, False, name)


def inv(a: Tracer, name: str = "numpy.linalg.inv") -> Tracer:
    eye = _t(np.eye(a.shape[0]))
    factor = _cholesky_factor(a)
    if factor is not None:
        return _solve_factor(a, factor[1], eye)
    return lu_solve(a, lu(a), eye, False, name)


@custom_jvp
def det(a: Tracer) -> Tracer:
    """The product of U's diagonal times the permutation's sign (0 for a singular matrix);
    its derivative is the adjugate (Jacobi's formula, :func:`_det_jvp`)."""
    f = lu(a)
    return _pivot_sign(f) * np.prod(_diagonal(f)) + 0.0


def _adjugate(f: Tracer) -> Tracer:
    """adj(A) from ``f = lu(A)``, A = P L U: sign(P) adj(U) L^-1 P^T, with adj(U) without a
    division by a zero pivot. With U' = U plus ones at its zero pivots, m the indicator of the
    zero pivots and W = U'^-1: adj(U) = prod(d) W + prod(d') (W m)(m^T W), d' = diag(U') —
    prod(d) W where no pivot is 0; where exactly pivot k is, U' x = e_k gives U's right null
    vector (x_k = 1, as e_k^T U'^-1 gives the left one) and adj(U) = prod_{i != k} d_i x y^T
    (adj of a rank n-1 matrix is the outer product of its null vectors, scaled). NaN where two
    or more pivots are 0 (numpy's compositions, used up to SMALL_MAX, cover that case)."""
    n = f.shape[1]
    d = _diagonal(f)
    zero = d == 0.0
    m = zero.astype(float)
    eye = np.eye(n)

    def inverse(x, mm):
        lu_ = ops.index(x, ((0, n, 1),))
        shifted = ops.add(ops_factor.triangle(lu_, False), ops.mul(_t(eye).node, ops.reshape(mm, (1, n))))
        return ops_factor.trisolve(shifted, _t(eye).node, lower=False)

    w = _build(inverse, f, m)
    count = np.sum(m)
    rest = np.where(count <= 1.0, np.prod(np.where(zero, 1.0, d)), np.nan)
    adj_u = np.prod(d) * w + rest * ((w @ m)[:, None] * (m @ w)[None, :])

    def finish(x, adj):
        lu_ = ops.index(x, ((0, n, 1),))
        perm = ops.index(x, (n + 1,))
        y = ops_factor.trisolve(lu_, ops.transpose(adj, (1, 0)), lower=True, trans=True, unit=True)
        return ops.transpose(add_at(ops.const(0.0, (n, n)), perm, y), (1, 0))  # (P X^T)^T

    return _pivot_sign(f) * _build(finish, f, adj_u)


@det.defjvp
def _det_jvp(primals, tangents):
    """d det(A) = tr(adj(A) dA) (Jacobi's formula), defined at a singular A too."""
    (a,), (da,) = primals, tangents
    f = lu(a)
    value = _pivot_sign(f) * np.prod(_diagonal(f)) + 0.0
    return value, np.sum(_transpose(_adjugate(f), (1, 0)) * da)


def slogdet(a: Tracer) -> tuple[Tracer, Tracer]:
    """(sign, log|det|) from U's diagonal and the pivots; (0, -inf) for a singular matrix."""
    f = lu(a)
    d = _diagonal(f)
    return _pivot_sign(f) * np.prod(np.sign(d)), np.sum(np.log(np.abs(d)))


def triangular_solve(
    t: Tracer, b: Tracer, lower: bool, trans: bool, unit: bool, name: str
) -> Tracer:
    """x with op(T) x = b for T the ``lower``/upper triangle of ``t`` (ones on its diagonal
    when ``unit``), op(T) = T^T when ``trans``; ``b`` (n,) or (n, k). A zero on the diagonal
    raises ``LinAlgError`` (as scipy's, from LAPACK's ``dtrtrs``)."""
    n = t.shape[0]
    if not unit:
        d = _build(lambda x: ops.index(ops.reshape(ops._float(x), (n * n,)), ((0, n * n, n + 1),)), t)
        _raises_if(_any(ops.elementwise(Op.EQ, d.node, ops.const(0.0))), "singular matrix", name)
    vec = b.ndim == 1
    rhs = _reshape(b, (n, 1)) if vec else b
    x = _build(lambda m, r: ops_factor.trisolve(ops._float(m), ops._float(r), lower, trans, unit),
               t, rhs)  # fmt: skip
    return _reshape(x, (n,)) if vec else x
