"""Regression tests for numbers that were wrong without an error (issue 29): each case failed
before its fix. The reference is independent of tapejit: numpy's value, cofactors computed one
minor at a time, or the exact IEEE result."""

from __future__ import annotations

import numpy as np
import pytest

import tapejit as tj
from tapejit.frontend.tracing import TracingError


def _cofactors(a: np.ndarray) -> np.ndarray:
    """d det(a) / da: the cofactor matrix, one (n-1) x (n-1) minor at a time."""
    n = a.shape[0]
    c = np.empty_like(a)
    for i in range(n):
        for j in range(n):
            minor = np.delete(np.delete(a, i, 0), j, 1)
            c[i, j] = (-1) ** (i + j) * (np.linalg.det(minor) if n > 1 else 1.0)
    return c


SINGULAR = {
    "zeros 3x3": np.zeros((3, 3)),
    "rank 2, zero pivot last": np.array([[1.0, 2, 3], [2, 4, 6], [1, 1, 1]]),
    "zero first column": np.array([[0.0, 1], [0, 1]]),
    "rank 3 of 4": np.array([[1.0, 2, 3, 4], [2, 4, 6, 8], [0, 1, 0, 1], [1, 0, 0, 2]]),
    "zero pivot in the middle": np.array([[0.0, 0, 1], [0, 0, 2], [1, 1, 1]]),
    "rank 1": np.outer([1.0, -2, 3], [0.5, 1, -1]),
}


@pytest.mark.parametrize("name", list(SINGULAR))
def test_det_of_a_singular_matrix_is_zero_with_the_adjugate_as_gradient(name):
    """Was NaN, value and gradient; numpy's det is +0.0 and Jacobi's formula gives adj(A)^T."""
    a = SINGULAR[name]
    n = a.shape[0]
    f = lambda x: np.linalg.det(x.reshape(n, n))  # noqa: E731
    value, grad = tj.compile(f, a.ravel(), cache=False).value_and_grad(a.ravel())
    assert value == 0.0 and not np.signbit(value)
    np.testing.assert_allclose(grad, _cofactors(a).ravel(), rtol=1e-12, atol=1e-12)


def test_det_gradient_and_hessian_away_from_singular_matrices():
    rng = np.random.default_rng(3)
    for n in (1, 2, 3, 5):
        a = rng.normal(size=(n, n))
        f = lambda x: np.linalg.det(x.reshape(n, n))  # noqa: E731
        value, grad = tj.compile(f, a.ravel(), cache=False).value_and_grad(a.ravel())
        assert value == pytest.approx(np.linalg.det(a), rel=1e-12)
        np.testing.assert_allclose(grad, _cofactors(a).ravel(), rtol=1e-10, atol=1e-12)
    # second order through the custom rule: the Hessian of det by central differences
    a = rng.normal(size=(3, 3))
    f = lambda x: np.linalg.det(x.reshape(3, 3))  # noqa: E731
    h = tj.hessian(f)(a.ravel())
    eps, fd = 1e-5, np.empty((9, 9))
    for k in range(9):
        e = np.zeros(9)
        e[k] = eps
        fd[:, k] = (_cofactors((a.ravel() + e).reshape(3, 3)) - _cofactors((a.ravel() - e).reshape(3, 3))).ravel() / (2 * eps)
    np.testing.assert_allclose(h, fd, rtol=1e-6, atol=1e-8)


def test_batched_det_of_singular_and_regular_matrices():
    a = np.stack([SINGULAR["rank 2, zero pivot last"], np.eye(3) * 2.0])
    f = lambda x: np.sum(np.linalg.det(x) * np.array([1.0, 3.0]))  # noqa: E731
    value, grad = tj.compile(f, a, cache=False).value_and_grad(a)
    assert value == pytest.approx(24.0)
    np.testing.assert_allclose(grad[0], _cofactors(a[0]), atol=1e-12)
    np.testing.assert_allclose(grad[1], 3.0 * _cofactors(a[1]), atol=1e-12)


def test_a_masked_array_argument_is_refused_not_unmasked():
    """The mask was dropped silently: sum(x*x) over [1, --, 3] returned the gradient of all 3."""
    m = np.ma.masked_array([1.0, 2.0, 3.0], mask=[0, 1, 0])
    f = lambda x: np.sum(x * x)  # noqa: E731
    with pytest.raises(TypeError, match="masked array"):
        tj.grad(f)(m)
    g = tj.compile(f, np.ones(3), cache=False)
    with pytest.raises(TypeError, match="masked array"):
        g(m)
    with pytest.raises(TypeError, match="masked array"):
        tj.compile(f, m, cache=False)
    with pytest.raises(TypeError, match=r"d\['a'\] is a numpy masked array"):
        tj.grad(lambda d: np.sum(d["a"]))({"a": m})
