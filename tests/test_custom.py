"""Derivatives given by hand (custom_vjp, custom_jvp): the rule is used, it is traced and
compiled like any code, forward and reverse mode both work, and a wrong rule gets a clear error
naming it."""

from __future__ import annotations

import numpy as np
import pytest

import tapejit as tj

X = np.array([-800.0, -30.0, -1.0, 0.0, 0.5, 3.0, 40.0, 800.0])


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


@tj.custom_vjp
def log1pexp(x):
    return np.log1p(np.exp(x))  # overflows for large x: the custom rule is what stays finite


def _fwd(x):
    y = np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))
    return y, (x,)


def _bwd(res, g):
    (x,) = res
    return (g * _sigmoid(x),)


log1pexp.defvjp(_fwd, _bwd)


@tj.custom_jvp
def softplus(x):
    return np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))


@softplus.defjvp
def _softplus_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return softplus(x), t * _sigmoid(x)


def test_custom_vjp_rule_is_used_in_reverse_mode():
    g = tj.compile(lambda x: np.sum(log1pexp(x) * 2.0), X, cache=False)
    np.testing.assert_allclose(g(X), 2 * _sigmoid(X), rtol=1e-14)
    assert "custom_vjp(log1pexp" in g.ir("trace") and "custom" not in g.ir("opt")
    assert np.all(np.isfinite(g(X)))
    assert log1pexp(1.0) == pytest.approx(np.log1p(np.e))  # outside tracing: the function


def test_custom_jvp_rule_in_forward_reverse_and_second_order():
    def f(x):
        return np.sum(softplus(x) ** 2)

    sp, s = softplus(X), _sigmoid(X)
    np.testing.assert_allclose(tj.compile(f, X, cache=False)(X), 2 * sp * s, rtol=1e-13)
    y, t = tj.jvp(softplus, (X,), (np.ones_like(X),))
    np.testing.assert_allclose(t, s, rtol=1e-14)
    x = X[2:6]
    H = tj.hessian(f)(x)
    np.testing.assert_allclose(np.diag(H), 2 * (s[2:6] ** 2 + sp[2:6] * s[2:6] * (1 - s[2:6])), rtol=1e-12)


def test_a_custom_rule_inside_a_jacobian_and_a_loop_free_model():
    def vec(x):
        return softplus(x) * np.sum(x)

    x = np.linspace(-1.0, 1.0, 5)
    J = tj.jacrev(vec)(x)
    Jf = tj.jacfwd(vec)(x)
    np.testing.assert_allclose(J, Jf, rtol=1e-12, atol=1e-14)
    want = np.diag(_sigmoid(x) * np.sum(x)) + softplus(x)[:, None]
    np.testing.assert_allclose(J, want, rtol=1e-12)


def test_wrong_rules_get_clear_errors_naming_the_rule():
    @tj.custom_vjp
    def f(x, y):
        return x * y

    f.defvjp(lambda x, y: (x * y, (x, y)), lambda res, g: (g * res[1],))  # one cotangent short
    with pytest.raises(TypeError, match="f.bwd must return cotangents with 2 entries"):
        tj.compile(lambda x: np.sum(f(x, x)), np.ones(3), cache=False)

    @tj.custom_vjp
    def k(x):
        return x * 2.0

    k.defvjp(lambda x: (x * 2.0, x), lambda x, g: (np.sum(g),))  # a scalar for a vector
    with pytest.raises(ValueError, match=r"k.bwd returned cotangents 0 of shape \(\)"):
        tj.compile(lambda x: np.sum(k(x)), np.ones(3), cache=False)

    @tj.custom_jvp
    def m(x):
        return x * 2.0

    with pytest.raises(TypeError, match=r"call m.defjvp\(jvp\) before using it"):
        tj.compile(lambda x: np.sum(m(x)), np.ones(3), cache=False)
    m.defjvp(lambda p, t: (p[0] * 2.0, np.sum(t[0])))
    with pytest.raises(ValueError, match=r"m.jvp returned a tangent of shape \(\)"):
        tj.compile(lambda x: np.sum(m(x)), np.ones(3), cache=False)

    @tj.custom_vjp
    def b(x):
        return x

    def bad_bwd(res, g):
        return (g if float(np.sum(res)) > 0 else -g,)  # branches on a value

    b.defvjp(lambda x: (x, x), bad_bwd)
    with pytest.raises(tj.TracingError, match="b.bwd"):
        tj.compile(lambda x: np.sum(b(x)), np.ones(3), cache=False)


@tj.custom_vjp
def clip_gradient(x):
    return np.sin(x)


def _clip_fwd(x):
    return clip_gradient(x), np.cos(x)  # calls the decorated function itself, as JAX's docs do


def _clip_bwd(cos_x, g):
    return (np.clip(g * cos_x, -0.5, 0.5),)


clip_gradient.defvjp(_clip_fwd, _clip_bwd)


def test_a_fwd_rule_may_call_the_decorated_function():
    """Recursed until RecursionError: fwd's call of f re-entered the rule."""
    x = np.array([0.1, 1.0, 2.0, 3.0])
    value, grad = tj.value_and_grad(lambda x: np.sum(clip_gradient(x) * 2.0))(x)
    assert value == pytest.approx(2.0 * np.sum(np.sin(x)), rel=1e-14)
    np.testing.assert_allclose(grad, np.clip(2.0 * np.cos(x), -0.5, 0.5), rtol=1e-14)
