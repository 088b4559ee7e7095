"""``np.linalg.svd`` through LAPACK's ``dgesdd`` (the ``svd`` op) and what builds on it (the
nuclear and spectral norms, ``pinv``): the same U, s and Vt — signs included — as numpy's
``svd(a, full_matrices=False)``, and gradients, tangents and Hessian-vector products that match
central differences of numpy's own function (which sees numpy's signs)."""

import numpy as np
import pytest
from tapejit.codegen import blas
from test_eigh import _directional  # <g, d> against central differences of f

import tapejit as tj
from tapejit.frontend.numpy import numpy_linalg
from tapejit.core import ops

pytestmark = pytest.mark.skipif(blas.dgesdd_address() is None, reason="needs scipy's LAPACK")

RNG = np.random.default_rng(2027)
SHAPES = [(3, 5), (5, 3), (4, 4), (1, 4), (4, 1), (1, 1), (7, 2)]


def _model(shape):
    """sum(w_u * U) + sum(w_s * s) + sum(w_v * Vt) with random weights, for ``shape``."""
    *lead, m, n = shape
    k = min(m, n)
    wu, ws, wv = (RNG.standard_normal((*lead, *s)) for s in ((m, k), (k,), (k, n)))

    def f(x):
        u, s, vt = np.linalg.svd(x, full_matrices=False)
        return np.sum(wu * u) + np.sum(ws * s) + np.sum(wv * vt)

    return f


@pytest.mark.parametrize("shape", SHAPES + [(2, 3, 4, 6), (2, 3, 6, 4)], ids=str)
def test_values_match_numpy_signs_included(shape):
    a = RNG.standard_normal(shape)
    got = tj.jvp(lambda x: np.linalg.svd(x, full_matrices=False), (a,), (a,))[0]
    want = np.linalg.svd(a, full_matrices=False)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("shape", SHAPES + [(2, 3, 4, 5)], ids=str)
def test_gradient_matches_central_differences(shape):
    a = RNG.standard_normal(shape)
    f = _model(shape)
    value, gr = tj.compile(f, a, cache=False).value_and_grad(a)
    assert value == pytest.approx(f(a), rel=1e-12, abs=1e-12)  # numpy's signs, or this differs
    assert _directional(f, a, gr) < 1e-6


@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (4, 4)], ids=str)
def test_forward_mode_and_hessian(shape):
    a = RNG.standard_normal(shape)
    f = _model(shape)
    d = RNG.standard_normal(shape)
    value, tangent = tj.jvp(f, (a,), (d,))
    assert value == pytest.approx(f(a), rel=1e-12)
    assert tangent == pytest.approx((f(a + 1e-6 * d) - f(a - 1e-6 * d)) / 2e-6, rel=1e-6)
    grad = tj.compile(f, a, cache=False)
    assert tangent == pytest.approx(float(np.sum(grad(a) * d)), rel=1e-12)  # <Jv, 1> = <v, J^T 1>
    hvp = np.tensordot(tj.hessian(f)(a), d, d.ndim)
    fd = (grad(a + 1e-5 * d) - grad(a - 1e-5 * d)) / 2e-5
    np.testing.assert_allclose(hvp, fd, rtol=1e-5, atol=1e-6 * np.abs(fd).max())


def test_singular_values_alone_and_full_matrices_of_a_square_matrix():
    a = RNG.standard_normal((2, 4, 3))
    w = RNG.standard_normal((2, 3))

    def f(x):
        s = np.linalg.svd(x, compute_uv=False)
        u, s2, vt = np.linalg.svd(x[0, 1:])  # full_matrices=True: square, so thin
        return np.sum(w * s) + np.sum(u * vt.T) + np.sum(s2)

    value, gr = tj.compile(f, a, cache=False).value_and_grad(a)
    assert value == pytest.approx(f(a), rel=1e-12)
    assert _directional(f, a, gr) < 1e-6


def test_nuclear_and_spectral_norms():
    a = RNG.standard_normal((2, 4, 3))

    def f(x):
        return (np.linalg.norm(x[0], "nuc") + np.linalg.norm(x[1], 2) + np.linalg.norm(x[0], -2)
                + np.sum(np.linalg.norm(x, "nuc", axis=(1, 2)) ** 2)
                + np.sum(np.linalg.norm(x, 2, axis=(2, 1), keepdims=True) * x)
                + np.linalg.norm(x[1], "fro") + np.linalg.norm(x[1, 0], 2))  # fmt: skip

    value, gr = tj.compile(f, a, cache=False).value_and_grad(a)
    assert value == pytest.approx(f(a), rel=1e-12)
    assert _directional(f, a, gr) < 1e-6


@pytest.mark.parametrize("n,m", [(2, 4), (3, 5), (1, 3)])
def test_pinv_of_a_rank_deficient_matrix(n, m):
    """autograd's test: pinv(x^T x) of rank n < m, as numpy computes it (singular values below
    rcond * max(s) are zero), and its gradient through x."""
    x = RNG.standard_normal((n, m))
    w = RNG.standard_normal((m, m))

    def f(x):
        return np.sum(w * np.linalg.pinv(x.T @ x))

    grad = tj.compile(f, x, cache=False)
    value, gr = grad.value_and_grad(x)
    assert value == pytest.approx(f(x), rel=1e-9)
    assert _directional(f, x, gr) < 1e-6
    y = RNG.standard_normal((n, m))  # the same compiled code serves other inputs
    assert grad.value_and_grad(y)[0] == pytest.approx(f(y), rel=1e-9)

    def h(a):
        return np.sum(w * np.linalg.pinv(a))

    square = tj.compile(h, x.T @ x, cache=False)  # compiled at rank n, run at rank m: no guard
    full = RNG.standard_normal((m, m))
    value, gr = square.value_and_grad(full)
    assert value == pytest.approx(h(full), rel=1e-10)
    assert _directional(h, full, gr) < 1e-6


@pytest.mark.parametrize("n,m", [(2, 4), (3, 5), (5, 5)])
def test_pinv_hermitian(n, m):
    """pinv(a, hermitian=True) as numpy computes it (from the eigenvalues, |w| <= rcond max|w|
    zero; only the lower triangle read): of x^T x at rank n, with its gradient through x
    (rank locally constant), and of a matrix that is not symmetric; forward mode and a stack
    of matrices with rcond."""
    x = RNG.standard_normal((n, m))
    w = RNG.standard_normal((m, m))

    def f(x):
        return np.sum(w * np.linalg.pinv(x.T @ x, hermitian=True))

    grad = tj.compile(f, x, cache=False)
    value, gr = grad.value_and_grad(x)
    assert value == pytest.approx(f(x), rel=1e-9)
    assert _directional(f, x, gr) < 1e-6

    def h(a):
        return np.sum(w * np.linalg.pinv(a, hermitian=True))

    a = RNG.standard_normal((m, m))  # not symmetric: numpy reads the lower triangle
    value, gr = tj.compile(h, a, cache=False).value_and_grad(a)
    assert value == pytest.approx(h(a), rel=1e-10)
    assert _directional(h, a, gr) < 1e-6
    assert np.all(np.triu(gr, 1) == 0.0)  # the upper triangle is not read
    tangent = tj.jvp(lambda a: np.linalg.pinv(a, hermitian=True), (a,), (a,))
    want = np.linalg.pinv(a, hermitian=True)
    np.testing.assert_allclose(tangent[0], want, rtol=1e-10, atol=1e-13)
    stack = RNG.standard_normal((3, m, m))
    stack = stack + np.swapaxes(stack, 1, 2)
    got = tj.jvp(lambda b: np.linalg.pinv(b, hermitian=True, rcond=1e-3), (stack,), (stack,))[0]
    want = np.linalg.pinv(stack, hermitian=True, rcond=1e-3)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-13)


def test_pinv_rcond_and_rtol():
    x = RNG.standard_normal((3, 5))
    s = np.linalg.svd(x, compute_uv=False)
    for kw in ({"rcond": 0.9 * s[-1] / s[0]}, {"rcond": 1.1 * s[-1] / s[0]}, {"rtol": None},
               {"rtol": 0.5}):  # fmt: skip
        got = tj.jvp(lambda a, kw=kw: np.linalg.pinv(a, **kw), (x,), (x,))[0]
        np.testing.assert_allclose(got, np.linalg.pinv(x, **kw), rtol=1e-10, atol=1e-14)


def test_full_matrices_of_a_non_square_matrix_is_refused():
    a = RNG.standard_normal((3, 4))
    pattern = r"full_matrices=True.*not unique.*full_matrices=False"
    with pytest.raises(tj.TracingError, match=pattern):
        tj.compile(lambda x: np.sum(np.linalg.svd(x)[0]), a, cache=False)


def test_without_lapack_svd_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(numpy_linalg, "_gesdd_available", lambda: False)
    a = RNG.standard_normal((3, 4))
    with pytest.raises(tj.TracingError, match=r"svd needs scipy's LAPACK.*pip install scipy"):
        tj.compile(lambda x: np.sum(np.linalg.svd(x, full_matrices=False)[1]), a, cache=False)
    with pytest.raises(tj.TracingError, match=r"rank-deficient.*scipy"):  # pinv's LU fallback
        tj.compile(lambda x: np.sum(np.linalg.pinv(x.T @ x)), a, cache=False)
    value = tj.compile(lambda x: np.sum(np.linalg.pinv(x)), a, cache=False).value_and_grad(a)[0]
    assert value == pytest.approx(np.sum(np.linalg.pinv(a)), rel=1e-10)


def test_unbound_lapack_gives_nan_not_a_crash(monkeypatch):
    monkeypatch.setattr(blas, "dgesdd_address", lambda: None)
    a = RNG.standard_normal((3, 4))
    value, gr = tj.compile(_model((3, 4)), a, cache=False).value_and_grad(a)
    assert np.isnan(value) and np.isnan(gr).all()


@pytest.mark.parametrize("shape", [(ops.SVD_MAX_K, ops.SVD_MAX_SIZE // ops.SVD_MAX_K), (600, 6)])
def test_largest_matrices_the_op_takes(shape):
    a = RNG.standard_normal(shape)
    f = _model(shape)
    value, gr = tj.compile(f, a, cache=False).value_and_grad(a)
    assert value == pytest.approx(f(a), rel=1e-10)
    assert _directional(f, a, gr, trials=1) < 1e-5
    with pytest.raises(tj.TracingError, match=r"min\(m, n\) <= 48"):
        tj.compile(f, RNG.standard_normal((ops.SVD_MAX_K + 1,) * 2), cache=False)


def test_export_refuses_a_gradient_that_calls_lapack(tmp_path):
    a = RNG.standard_normal((3, 2))
    grad = tj.compile(_model((3, 2)), a, cache=False)
    with pytest.raises(ValueError, match=r"export: .*LAPACK.*svd"):
        grad.export(tmp_path)


def test_pickled_gradient_rebinds_lapack():
    import pickle

    a = RNG.standard_normal((4, 3))
    f = _model((4, 3))
    grad = pickle.loads(pickle.dumps(tj.compile(f, a, cache=False)))
    value, gr = grad.value_and_grad(a)
    assert value == pytest.approx(f(a), rel=1e-12)
    assert _directional(f, a, gr) < 1e-6


@pytest.mark.parametrize("kind", ["identity", "orthogonal", "scaled orthogonal"])
def test_pinv_derivative_where_singular_values_coincide(kind):
    """Golub & Pereyra's closed form: finite where the SVD's own derivative is not."""
    q = np.linalg.qr(RNG.standard_normal((4, 4)))[0]
    a = {"identity": np.eye(4), "orthogonal": q, "scaled orthogonal": 3.0 * q}[kind]
    w = RNG.standard_normal((4, 4))

    def f(x):
        return np.sum(np.linalg.pinv(x) * w)

    value, g = tj.compile(f, a, cache=False).value_and_grad(a)
    assert value == pytest.approx(f(a), rel=1e-12)
    assert np.all(np.isfinite(g))
    for _ in range(3):
        d = RNG.standard_normal(a.shape)
        fd = (f(a + 1e-6 * d) - f(a - 1e-6 * d)) / 2e-6
        assert np.sum(g * d) == pytest.approx(fd, rel=1e-6, abs=1e-9)
    _, tangent = tj.jvp(f, (a,), (d,))
    assert tangent == pytest.approx(np.sum(g * d), rel=1e-12, abs=1e-12)


def test_non_finite_input_gives_nan_and_returns():
    """LAPACK's dgesdd does not return on an inf entry (numpy's svd hangs there): the call is
    skipped for non-finite input and the result is NaN."""
    x = np.ones((4, 3))
    x[1, 0] = np.inf
    f = lambda a: np.sum(np.linalg.svd(a, full_matrices=False)[1])  # noqa: E731
    value, g = tj.compile(f, RNG.random((4, 3)), cache=False).value_and_grad(x)
    assert np.isnan(value) and np.isnan(g).all()
