"""``np.linalg.qr``, ``np.linalg.lstsq`` and ``scipy.linalg.expm`` on traced values: values
against numpy/scipy (signs of Q and R included), gradients against float64 central
differences in random directions (rtol 1e-6 at eps = 1e-6 on well-conditioned inputs), and
expm's specialisation on the 1-norm (a guard per power of two)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sla

import tapejit as tj

RNG = np.random.default_rng(77)


def _directional(f, x, g, trials=3, eps=1e-6):
    worst = 0.0
    for _ in range(trials):
        d = RNG.standard_normal(x.shape)
        num = (f(x + eps * d) - f(x - eps * d)) / (2 * eps)
        worst = max(worst, abs(num - float(np.sum(g * d))) / max(1.0, abs(num)))
    return worst


def _check(f, x, rtol=1e-6):
    grad = tj.compile(f, x)
    value, g = grad.value_and_grad(x)
    assert value == pytest.approx(f(x), rel=1e-11, abs=1e-12)
    assert _directional(f, x, g) < rtol
    return grad


@pytest.mark.parametrize("shape", [(7, 4), (4, 7), (6, 6), (1, 3), (3, 1), (40, 6)])
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_qr_has_numpy_signs_and_gradients(shape, mode):
    a = RNG.standard_normal(shape)
    want = np.linalg.qr(a, mode=mode)
    got = tj.jit(lambda x: np.linalg.qr(x, mode=mode))(a)
    for w, g in zip(want if mode != "r" else (want,), got if mode != "r" else (got,)):
        np.testing.assert_allclose(g, w, rtol=1e-11, atol=1e-12)
    if mode == "r":
        wr = RNG.standard_normal(want.shape)
        _check(lambda x: np.sum(np.linalg.qr(x, mode="r") * wr), a)
    else:
        wq, wr = RNG.standard_normal(want[0].shape), RNG.standard_normal(want[1].shape)
        _check(lambda x: np.sum(np.linalg.qr(x, mode=mode)[0] * wq)
               + np.sum(np.linalg.qr(x, mode=mode)[1] * wr), a)  # fmt: skip


def test_qr_of_a_column_already_triangular_is_numpy():
    """A zero column below the diagonal: LAPACK's reflector is the identity (R keeps the sign)."""
    a = np.triu(RNG.standard_normal((5, 5)))
    a[0, 0] = -2.0
    q, r = tj.jit(np.linalg.qr)(a)
    qn, rn = np.linalg.qr(a)
    np.testing.assert_allclose(q, qn, atol=1e-14)
    np.testing.assert_allclose(r, rn, atol=1e-14)


def test_qr_batched():
    a = RNG.standard_normal((3, 5, 4))
    q, r = tj.jit(np.linalg.qr)(a)
    qn, rn = np.linalg.qr(a)
    np.testing.assert_allclose(q, qn, atol=1e-12)
    np.testing.assert_allclose(r, rn, atol=1e-12)


@pytest.mark.parametrize("shape", [(9, 3), (3, 9), (5, 5)])
def test_lstsq_matches_numpy(shape):
    a = RNG.standard_normal(shape)
    b = RNG.standard_normal((shape[0], 2))
    x, res, rank, s = tj.jit(lambda m: np.linalg.lstsq(m, b))(a)
    xn, resn, rankn, sn = np.linalg.lstsq(a, b)
    np.testing.assert_allclose(x, xn, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(res, resn, rtol=1e-10)
    assert rank == rankn
    np.testing.assert_allclose(s, sn, rtol=1e-12)
    _check(lambda m: np.sum(np.linalg.lstsq(m, b)[0] ** 2) + np.sum(np.linalg.lstsq(m, b)[1]), a)


def test_lstsq_of_a_rank_deficient_matrix_is_the_minimum_norm_solution():
    a = RNG.standard_normal((8, 3))
    a[:, 2] = a[:, 0] + a[:, 1]
    b = RNG.standard_normal(8)
    x, _, rank, _ = tj.jit(lambda m: np.linalg.lstsq(m, b))(a)
    xn, _, rankn, _ = np.linalg.lstsq(a, b)
    np.testing.assert_allclose(x, xn, rtol=1e-9, atol=1e-12)
    assert rank == rankn == 2


@pytest.mark.parametrize("n, scale", [(3, 0.05), (6, 1.0), (6, 30.0), (9, 3.0)])
def test_expm_matches_scipy_with_its_frechet_derivative(n, scale):
    a = RNG.standard_normal((n, n)) * scale
    w = RNG.standard_normal((n, n))
    np.testing.assert_allclose(tj.jit(sla.expm)(a), sla.expm(a), rtol=1e-12, atol=1e-14 * np.abs(sla.expm(a)).max())
    f = lambda x: np.sum(sla.expm(x) * w)  # noqa: E731
    grad = tj.compile(f, a)
    value, g = grad.value_and_grad(a)
    assert value == pytest.approx(f(a), rel=1e-11)
    # scipy's own Fréchet derivative (Al-Mohy & Higham 2009) as the reference: <w, L(A, E)>
    for _ in range(2):
        e = RNG.standard_normal((n, n))
        _, frechet = sla.expm_frechet(a, e)
        assert float(np.sum(g * e)) == pytest.approx(float(np.sum(w * frechet)), rel=1e-9)


def test_expm_specialises_on_the_norm_and_stays_right():
    a = RNG.standard_normal((5, 5))
    grad = tj.compile(lambda x: np.sum(sla.expm(x)), a)
    for s in (1.0, 0.01, 8.0, 1.0):
        x = a * s
        value = grad.value_and_grad(x)[0]
        assert value == pytest.approx(np.sum(sla.expm(x)), rel=1e-11)
