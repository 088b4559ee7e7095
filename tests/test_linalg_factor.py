"""``np.linalg``'s and ``scipy.linalg``'s factorisations and solves above the composition size
(:mod:`tapejit.frontend.numpy.numpy_factor`): values against numpy/scipy, gradients against
float64 central differences in random directions, tangents and Hessians, numpy's
``LinAlgError``, the adjugate of ``det`` at singular matrices, the IR size independent of n,
and the generated stand-ins for LAPACK (no scipy, exported objects).

Tolerances: values rtol 1e-10 against numpy (LAPACK's blocked routines round differently from
the unblocked ones); directional derivatives rtol 1e-6 (central differences at eps = 1e-6 on
matrices with condition numbers ~1e2: truncation ~eps^2 |f'''|, round-off ~1e-16 |f| / eps).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sla
from scipy.linalg import cho_factor, cho_solve, lu_factor, lu_solve, solve_triangular

import tapejit as tj
from tapejit.codegen import blas
from tapejit.frontend.numpy import numpy_factor

RNG = np.random.default_rng(32)
N = 7  # above numpy_factor.SMALL_MAX: the primitives


def _general(n=N, seed=0):
    r = np.random.default_rng(seed)
    return r.standard_normal((n, n)) + n**0.5 * np.eye(n)


def _spd(n=N, seed=0):
    a = np.random.default_rng(seed).standard_normal((n, n))
    return a @ a.T / n + np.eye(n)


def _directional(f, x, g, trials=3, eps=1e-6):
    """Worst relative mismatch of <g, d> against central differences of f along random d."""
    worst = 0.0
    for _ in range(trials):
        d = RNG.standard_normal(x.shape)
        num = (f(x + eps * d) - f(x - eps * d)) / (2 * eps)
        worst = max(worst, abs(num - float(np.sum(g * d))) / max(1.0, abs(num)))
    return worst


def _check(f, x, rtol=1e-6):
    grad = tj.compile(f, x)
    value, g = grad.value_and_grad(x)
    assert value == pytest.approx(f(x), rel=1e-10, abs=1e-12)
    assert _directional(f, x, g) < rtol
    return grad


W = RNG.standard_normal((N, 3))
Y = RNG.standard_normal(N)

NUMPY_MODELS = {
    "solve[vector]": (lambda a: np.sum(np.linalg.solve(a, Y) ** 2), _general),
    "solve[matrix]": (lambda a: np.sum(np.linalg.solve(a, W) * W), _general),
    "solve[rhs traced]": (lambda a: np.sum(np.linalg.solve(_general(), a[:, :3])), _general),
    "inv": (lambda a: np.sum(np.sin(np.linalg.inv(a))), _general),
    "det": (lambda a: np.linalg.det(a / 2.0), _general),
    "slogdet": (lambda a: np.linalg.slogdet(a)[1] * np.linalg.slogdet(a)[0], _general),
    "cholesky": (lambda a: np.sum(np.linalg.cholesky(a) ** 3), _spd),
    "cholesky[upper]": (lambda a: np.sum(np.linalg.cholesky(a, upper=True) * W[:, :1]), _spd),
    "gp": (lambda a: Y @ np.linalg.solve(a, Y) + 2 * np.sum(np.log(np.diag(np.linalg.cholesky(a)))),
           _spd),  # fmt: skip
}


@pytest.mark.parametrize("name", NUMPY_MODELS)
def test_numpy_linalg_value_and_gradient(name):
    f, make = NUMPY_MODELS[name]
    grad = _check(f, make())
    assert any(op in grad.ir("trace") for op in ("lu", "cholesky")), "not the primitives"
    _check(f, make(seed=3))  # another input, same compiled code (no guard depends on values)


def test_batched_solve_det_and_cholesky():
    a = np.stack([_general(seed=s) for s in range(3)])
    s = np.stack([_spd(seed=s) for s in range(3)])
    _check(lambda x: np.sum(np.linalg.solve(x, np.ones((3, N, 2)))), a)
    _check(lambda x: np.sum(np.linalg.det(x)), a)
    _check(lambda x: np.sum(np.linalg.cholesky(x + s)), a * 0.01)


def test_reads_one_triangle_as_numpy():
    """numpy's cholesky reads the lower triangle: the upper one gets no gradient."""
    a = _spd()
    skewed = a + np.triu(RNG.standard_normal((N, N)), 1)
    f = lambda x: np.sum(np.linalg.cholesky(x) ** 2)  # noqa: E731
    grad = _check(f, skewed)
    assert np.all(np.triu(grad(skewed), 1) == 0.0)


def test_forward_mode_and_hessian_through_cholesky_and_solve():
    a = _spd()
    f = lambda x: Y @ np.linalg.solve(x, Y) + np.sum(np.log(np.diag(np.linalg.cholesky(x))))  # noqa: E731
    d = RNG.standard_normal(a.shape)
    value, tangent = tj.jvp(f, (a,), (d,))
    eps = 1e-6
    assert tangent == pytest.approx((f(a + eps * d) - f(a - eps * d)) / (2 * eps), rel=1e-6)
    h = tj.hessian(lambda x: f(np.diag(np.exp(x)) + a))(np.zeros(N))
    g = tj.grad(lambda x: f(np.diag(np.exp(x)) + a))
    fd = np.stack([(g(eps * e) - g(-eps * e)) / (2 * eps) for e in np.eye(N)])
    np.testing.assert_allclose(h, fd, rtol=1e-5, atol=1e-8)


def _cofactors(m):
    n = m.shape[0]
    c = np.empty_like(m)
    for i in range(n):
        for j in range(n):
            c[i, j] = (-1) ** (i + j) * np.linalg.det(np.delete(np.delete(m, i, 0), j, 1))
    return c


@pytest.mark.parametrize("where", ["zero column", "zero first row", "repeated row"])
def test_det_of_a_singular_matrix_is_zero_with_the_adjugate_as_gradient(where):
    a = _general()
    if where == "zero column":
        a[:, 2] = 0.0
    elif where == "zero first row":
        a[0] = 0.0
    else:
        a[4] = a[1]
    grad = tj.compile(np.linalg.det, _general())
    value, g = grad.value_and_grad(a)
    assert value == pytest.approx(np.linalg.det(a), abs=1e-12)
    if where != "repeated row":  # (there rounding leaves a pivot of ~1e-15, as in numpy's)
        assert value == 0.0 and np.linalg.det(a) == 0.0
    np.testing.assert_allclose(g, _cofactors(a), rtol=1e-9, atol=1e-9)


def test_singular_solve_and_non_positive_definite_cholesky_raise_linalgerror():
    grad = tj.compile(lambda a: np.sum(np.linalg.solve(a, Y)), _general())
    bad = _general()
    bad[:, 3] = 0.0
    with pytest.raises(np.linalg.LinAlgError, match=r"Singular matrix \(numpy.linalg.solve at .*test_linalg_factor.py"):
        grad(bad)
    with pytest.raises(np.linalg.LinAlgError):
        np.linalg.solve(bad, Y)  # numpy's own decision agrees
    assert grad(_general(seed=4)).shape == (N, N)  # the same function still answers others
    chol = tj.compile(lambda a: np.sum(np.linalg.cholesky(a)), _spd())
    with pytest.raises(np.linalg.LinAlgError, match="not positive definite"):
        chol(-_spd())
    nan = _spd()
    nan[3, 2] = np.nan
    with pytest.raises(np.linalg.LinAlgError):
        chol(nan)
    inv = tj.compile(lambda a: np.sum(np.linalg.inv(a)), _general())
    with pytest.raises(np.linalg.LinAlgError, match="numpy.linalg.inv"):
        inv(bad)


def test_slogdet_of_a_singular_matrix():
    bad = _general()
    bad[2] = 2 * bad[5]
    bad[:, 1] = 0.0
    grad = tj.compile(lambda a: np.linalg.slogdet(a)[1], _general())
    assert grad.value_and_grad(bad)[0] == -np.inf


def test_ir_size_does_not_grow_with_n():
    """Compile time independent of n: the same number of nodes at n = 8 and n = 120."""
    f = lambda a: Y[0] * np.sum(np.linalg.solve(a, np.ones(a.shape[0]))) + np.linalg.slogdet(a)[1]  # noqa: E731
    sizes = []
    for n in (8, 120):
        g = tj.compile(f, _general(n))
        sizes.append(g.stats["nodes"]["opt"])
        assert _directional(f, _general(n, 1), g(_general(n, 1))) < 1e-6
    assert sizes[0] == sizes[1]


# -- scipy.linalg ----------------------------------------------------------------------------


SCIPY_MODELS = {
    "cho_factor/cho_solve[lower]": (
        lambda a: np.sum(cho_solve(cho_factor(a, lower=True), W) * W), _spd),
    "cho_factor/cho_solve[upper]": (
        lambda a: np.sum(cho_solve(cho_factor(a), Y) ** 2), _spd),
    "cholesky": (lambda a: np.sum(sla.cholesky(a) * np.arange(N)), _spd),
    "cholesky[lower]": (lambda a: np.sum(sla.cholesky(a, lower=True) ** 2), _spd),
    "solve_triangular": (lambda a: np.sum(solve_triangular(a, W, lower=True) ** 2), _general),
    "solve_triangular[upper, T, unit]": (
        lambda a: np.sum(solve_triangular(a, Y, trans="T", unit_diagonal=True) * Y), _general),
    "lu_factor/lu_solve": (lambda a: np.sum(lu_solve(lu_factor(a), W) ** 2), _general),
    "lu_solve[trans]": (lambda a: np.sum(lu_solve(lu_factor(a), Y, trans=1) * Y), _general),
    "lu_factor[factors]": (lambda a: np.sum(np.log(np.abs(np.diag(lu_factor(a)[0])))), _general),
    "solve": (lambda a: np.sum(sla.solve(a, Y) ** 2), _general),
    "solve[pos]": (lambda a: np.sum(sla.solve(a, W, assume_a="pos") ** 2), _spd),
    "solve[sym, lower]": (lambda a: np.sum(sla.solve(np.tril(a), Y, assume_a="sym", lower=True)),
                          _spd),
    "solve[transposed]": (lambda a: np.sum(sla.solve(a, Y, transposed=True) ** 2), _general),
    "inv": (lambda a: np.sum(sla.inv(a) ** 2), _general),
    "det": (lambda a: sla.det(a), _general),
}  # fmt: skip


@pytest.mark.parametrize("name", SCIPY_MODELS)
def test_scipy_linalg_value_and_gradient(name):
    f, make = SCIPY_MODELS[name]
    _check(f, make())


def test_scipy_linalg_as_a_module_attribute_and_restored_after():
    import scipy.linalg

    before = scipy.linalg.solve
    f = lambda a: np.sum(scipy.linalg.solve(a, Y))  # noqa: E731
    _check(f, _general())
    assert scipy.linalg.solve is before and solve_triangular.__module__.startswith("scipy")
    assert globals()["cho_factor"] is sla.cho_factor


def test_scipy_errors():
    bad = _general()
    bad[:, 0] = 0.0
    g = tj.compile(lambda a: np.sum(solve_triangular(a, Y, lower=True)), _general())
    with pytest.raises(np.linalg.LinAlgError, match="scipy.linalg.solve_triangular"):
        g(bad)
    with pytest.raises(tj.TracingError, match="lu_factor returned"):
        tj.compile(lambda a: np.sum(lu_solve((lu_factor(a)[0] * 2, None), Y)), _general())
    with pytest.raises(tj.TracingError, match="assume_a='banded'"):
        tj.compile(lambda a: np.sum(sla.solve(a, Y, assume_a="banded")), _general())


# -- without LAPACK ---------------------------------------------------------------------------


@pytest.fixture
def no_lapack(monkeypatch):
    """The factorisation routines unbound, as in an exported object or without scipy."""
    real = blas.routine_address
    monkeypatch.setattr(blas, "routine_address",
                        lambda m, n: None if n in ("dpotrf", "dgetrf", "dtrsm") else real(m, n))  # fmt: skip


@pytest.mark.parametrize("name", ["solve[matrix]", "det", "cholesky", "gp", "inv"])
def test_generated_stand_ins_match_lapack(no_lapack, name):
    f, make = NUMPY_MODELS[name]
    grad = tj.compile(f, make(), cache=False)
    value, g = grad.value_and_grad(make(seed=5))
    assert value == pytest.approx(f(make(seed=5)), rel=1e-10)
    assert _directional(f, make(seed=5), g) < 1e-6


def test_stand_ins_report_singular_and_indefinite(no_lapack):
    bad = _general()
    bad[:, 3] = 0.0
    grad = tj.compile(lambda a: np.sum(np.linalg.solve(a, Y)), _general(), cache=False)
    with pytest.raises(np.linalg.LinAlgError):
        grad(bad)
    chol = tj.compile(lambda a: np.sum(np.linalg.cholesky(a)), _spd(), cache=False)
    with pytest.raises(np.linalg.LinAlgError):
        chol(-_spd())
    g = tj.compile(np.linalg.det, _general(), cache=False)
    np.testing.assert_allclose(g(bad), _cofactors(bad), rtol=1e-9, atol=1e-9)


def test_small_matrices_stay_compositions():
    a = _general(numpy_factor.SMALL_MAX)
    grad = tj.compile(lambda x: np.sum(np.linalg.inv(x)), a)
    assert "lu" not in grad.ir("trace").split()
