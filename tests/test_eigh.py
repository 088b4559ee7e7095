"""``np.linalg.eigh`` through LAPACK's ``dsyevd`` (the ``eigh`` op): the same eigenvalues and
eigenvectors — signs included — as numpy, and gradients, tangents and Hessians that match
central differences of numpy's own function (which sees numpy's signs). Without scipy the
Jacobi composition runs (its eigenvectors may have other signs: only sign-independent
functions are compared there)."""

import numpy as np
import pytest

import tapejit as tj
from tapejit.frontend.numpy import numpy_linalg
from tapejit.codegen import blas

pytestmark = pytest.mark.skipif(not blas.lapack_available(), reason="needs scipy's LAPACK")

RNG = np.random.default_rng(2026)


def _weights(shape):
    return RNG.standard_normal(shape)


def _model(uplo, ww, wv):
    def f(x):
        w, v = np.linalg.eigh(x, uplo)
        return np.sum(w * ww) + np.sum(v * wv)

    return f


def _directional(f, x, g, trials=3, eps=1e-6):
    """Worst relative mismatch of <g, d> against central differences of f along random d."""
    worst = 0.0
    for _ in range(trials):
        d = RNG.standard_normal(x.shape)
        num = (f(x + eps * d) - f(x - eps * d)) / (2 * eps)
        an = float(np.sum(g * d))
        worst = max(worst, abs(num - an) / max(1.0, abs(num)))
    return worst


@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("n", [1, 2, 3, 6, 12])
def test_eigenvectors_match_numpy_signs_included(uplo, n):
    a = RNG.standard_normal((n, n))  # not symmetric: only the UPLO triangle is read
    f = _model(uplo, _weights(n), _weights((n, n)))
    grad = tj.compile(f, a, cache=False)
    value, gr = grad.value_and_grad(a)
    assert value == pytest.approx(f(a), rel=1e-12, abs=1e-12)  # numpy's signs, or this differs
    assert _directional(f, a, gr) < 1e-6
    if n > 1:  # the triangle that is not read gets no gradient
        other = np.triu(gr, 1) if uplo == "L" else np.tril(gr, -1)
        assert np.all(other == 0.0)


def test_batched_and_symmetric_input():
    m = RNG.standard_normal((2, 3, 5, 5)) + 5 * np.eye(5)
    h = m @ np.swapaxes(m, -1, -2)
    for uplo in "LU":
        f = _model(uplo, _weights(5), _weights((2, 3, 5, 5)))
        value, gr = tj.compile(f, h, cache=False).value_and_grad(h)
        assert value == pytest.approx(f(h), rel=1e-12)
        assert _directional(f, h, gr) < 1e-6


def test_forward_mode_and_hessian():
    a = RNG.standard_normal((4, 4))
    f = _model("L", _weights(4), _weights((4, 4)))
    d = RNG.standard_normal((4, 4))
    value, tangent = tj.jvp(f, (a,), (d,))
    assert value == pytest.approx(f(a), rel=1e-12)
    assert tangent == pytest.approx((f(a + 1e-6 * d) - f(a - 1e-6 * d)) / 2e-6, rel=1e-6)
    grad = tj.compile(f, a, cache=False)
    hess = tj.hessian(f)(a)
    fd = (grad(a + 1e-5 * d) - grad(a - 1e-5 * d)) / 2e-5
    np.testing.assert_allclose(np.tensordot(hess, d, 2), fd, rtol=1e-5, atol=1e-6 * np.abs(fd).max())


def test_eigenvalue_functions_and_eigvalsh():
    a = RNG.standard_normal((6, 6))
    a = a + a.T

    def f(x):
        w, v = np.linalg.eigh(x)
        return np.sum(v @ np.diag(np.exp(0.1 * w)) @ v.T) + np.sum(np.linalg.eigvalsh(x) ** 2)

    value, gr = tj.compile(f, a, cache=False).value_and_grad(a)
    assert value == pytest.approx(f(a), rel=1e-12)
    assert _directional(f, a, gr) < 1e-6


def test_without_lapack_the_jacobi_composition_runs(monkeypatch):
    monkeypatch.setattr(numpy_linalg, "_lapack_available", lambda: False)
    a = RNG.standard_normal((4, 4))
    a = a + a.T

    def f(x):  # independent of the eigenvectors' signs
        w, v = np.linalg.eigh(x)
        return np.sum(v @ np.diag(w**3) @ v.T * a)

    grad = tj.compile(f, a, cache=False)
    assert "eigh" not in grad.ir("trace")
    value, gr = grad.value_and_grad(a)
    assert value == pytest.approx(f(a), rel=1e-10)
    assert _directional(f, a, gr) < 1e-6


def test_unbound_lapack_gives_nan_not_a_crash(monkeypatch):
    monkeypatch.setattr(blas, "dsyevd_address", lambda: None)
    a = RNG.standard_normal((3, 3))
    value, gr = tj.compile(_model("L", _weights(3), _weights((3, 3))), a, cache=False).value_and_grad(a)
    assert np.isnan(value) and np.isnan(gr[np.tril_indices(3)]).all()


def test_larger_matrices_use_the_op_up_to_its_limit():
    from tapejit.core import ops

    n = ops.EIGH_MAX
    a = RNG.standard_normal((n, n))
    f = _model("L", _weights(n), _weights((n, n)))
    value, gr = tj.compile(f, a, cache=False).value_and_grad(a)
    assert value == pytest.approx(f(a), rel=1e-10)
    assert _directional(f, a, gr, trials=1) < 1e-5


def test_export_refuses_a_gradient_that_calls_lapack(tmp_path):
    a = RNG.standard_normal((3, 3))
    grad = tj.compile(_model("L", _weights(3), _weights((3, 3))), a, cache=False)
    with pytest.raises(ValueError, match=r"export: .*LAPACK.*eigh"):
        grad.export(tmp_path)


def test_pickled_gradient_rebinds_lapack():
    import pickle

    a = RNG.standard_normal((4, 4))
    f = _model("U", _weights(4), _weights((4, 4)))
    grad = pickle.loads(pickle.dumps(tj.compile(f, a, cache=False)))
    value, gr = grad.value_and_grad(a)
    assert value == pytest.approx(f(a), rel=1e-12)
    assert _directional(f, a, gr) < 1e-6
