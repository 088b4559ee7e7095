"""Nested differentiation: ``tj.grad`` / ``tj.value_and_grad`` called inside a traced function
build the inner gradient as IR, so the outer derivative differentiates it (tapejit/frontend/nested.py).
References: hand-derived derivatives and float64 central differences."""

from __future__ import annotations

import numpy as np
import pytest

import tapejit as tj
from oracles import central

RNG = np.random.default_rng(7)


def test_nested_grad_closing_over_the_outer_argument():
    """Crashed with "'_Trace' object has no attribute 'lift_outer'" / was refused."""

    def f(x):
        def inner(y):
            return np.sum(y * x) ** 2  # closes over the outer x

        return np.sum(tj.grad(inner)(x))

    x = RNG.normal(size=4)
    value, grad = tj.value_and_grad(f)(x)
    assert value == pytest.approx(2 * (x @ x) * np.sum(x), rel=1e-13)
    np.testing.assert_allclose(grad, 4 * x * np.sum(x) + 2 * (x @ x), rtol=1e-12)


def test_derivatives_of_any_order_of_scalar_functions():
    d = lambda g: lambda t: tj.grad(g)(t)  # noqa: E731
    quintic = lambda u: u**5  # noqa: E731
    t = 1.3
    assert tj.grad(d(quintic))(t) == pytest.approx(20 * t**3, rel=1e-13)
    assert tj.grad(d(d(quintic)))(t) == pytest.approx(60 * t**2, rel=1e-13)
    assert tj.grad(d(d(d(quintic))))(t) == pytest.approx(120 * t, rel=1e-13)
    assert tj.grad(d(d(np.sin)))(t) == pytest.approx(-np.cos(t), rel=1e-13)


def test_second_order_of_a_vector_function_matches_the_hessian():
    def f(x):
        return np.sum(np.exp(0.3 * x) * np.sin(x)) + np.sum(x) ** 3

    v = RNG.normal(size=5)

    def hvp_by_nesting(x):  # d/dx <grad f(x), v> = H v
        return np.sum(tj.grad(f)(x) * v)

    x = RNG.normal(size=5)
    hv = tj.grad(hvp_by_nesting)(x)
    np.testing.assert_allclose(hv, tj.hessian(f)(x) @ v, rtol=1e-11, atol=1e-12)


def test_value_and_grad_argnums_and_guards_inside():
    def inner(a, b):
        if np.sum(a) > 0:  # a guard of the enclosing trace
            return np.sum(a * a * b)
        return np.sum(a * b)

    def f(x):
        value, (ga, gb) = tj.value_and_grad(inner, argnums=(0, 1))(x, 2.0 * x)
        return value + np.sum(ga * gb)

    def ref(x):
        a, b = x, 2.0 * x
        if np.sum(a) > 0:
            return np.sum(a * a * b) + np.sum((2 * a * b) * (a * a))
        return np.sum(a * b) + np.sum(b * a)

    for x in (np.abs(RNG.normal(size=3)) + 0.1, -np.abs(RNG.normal(size=3)) - 0.1):
        value, grad = tj.value_and_grad(f)(x)
        assert value == pytest.approx(ref(x), rel=1e-12)
        np.testing.assert_allclose(grad, central(ref, x), rtol=1e-7, atol=1e-8)


def test_nested_grad_of_a_loop_is_refused_by_name_and_hessian_serves_it():
    """Reverse mode over a loop's backward loop has no rule: the error says so and names the
    forms that work (forward over reverse)."""
    w = RNG.normal(size=4)

    def inner(y):
        c = tj.fori_loop(0, 3, lambda i, c: c * np.tanh(y + w), np.ones(4))
        return np.sum(c)

    def f(x):
        return np.sum(tj.grad(inner)(x) ** 2)

    x = RNG.normal(size=4)
    with pytest.raises(tj.RuleError, match="nested around"):
        tj.value_and_grad(f)(x)
    t = np.tanh(x + w)
    d1 = 3 * t**2 * (1 - t**2)  # d/dy of sum(tanh(y + w)^3)
    np.testing.assert_allclose(tj.grad(inner)(x), d1, rtol=1e-12)
    d2 = 6 * t * (1 - t**2) ** 2 - 6 * t**3 * (1 - t**2)
    np.testing.assert_allclose(tj.hessian(inner)(x), np.diag(d2), rtol=1e-10, atol=1e-12)


def test_nested_grad_errors_name_what_to_do():
    with pytest.raises(tj.TracingError, match="must return a scalar"):
        tj.grad(lambda x: np.sum(tj.grad(lambda y: y * 2.0)(x)))(np.ones(3))
    with pytest.raises(tj.TracingError, match="has_aux"):
        tj.grad(lambda x: tj.grad(lambda y: (np.sum(y), y), has_aux=True)(x)[0].sum())(np.ones(2))
