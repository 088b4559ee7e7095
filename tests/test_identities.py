"""Simplification rules and derivative rules hold for every float input, inf, NaN and -0.0
included (tapejit/passes/simplify.py): each model is compiled natively and compared with numpy
bitwise (NaN-aware, and the sign of a zero must match: ``arctan2`` and division tell them apart).
The overflow models check that no rule reassociates a product or a sum."""

from __future__ import annotations

import numpy as np
import pytest

import tapejit as tj
from tapejit.ad import autodiff
from tapejit.core import interpret
from tapejit.frontend import tracing
from tapejit.passes import simplify

SPECIAL = np.array([np.inf, -np.inf, np.nan, -0.0, 0.0, 1.5, -2.0, 1e308, 5e-324, 1e200, 1e-200])


def same(a, b):
    """Equal, NaN where the other is NaN, and zeros of the same sign."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    equal = (a == b) & (np.signbit(a) == np.signbit(b))
    return a.shape == b.shape and bool(np.all(equal | (np.isnan(a) & np.isnan(b))))


MODELS = {
    "x - x": lambda x: np.sum((x - x) * 0.5 + x * 0.0),
    "0 - y": lambda x: np.sum(tj.where(x > 0, 0.0 - x[0], x)),
    "where(c, a, a) of a scalar": lambda x: np.sum(tj.where(x > 0, 2.0, 2.0) * x),
    "x / 2^k": lambda x: np.sum(x / 0.25 + x / 2.0**-1023),
    "x ** 0.5": lambda x: np.sum(np.abs(x) ** 0.5 + x**0.5),  # numpy: sqrt, NaN at -inf
    "np.power(x, 0.5)": lambda x: np.sum(np.power(x, 0.5)),  # numpy's loop: sqrt too
    "x ** k": lambda x: np.sum(x**2 + x**-1),
    "max": lambda x: np.max(x),
    "x * 1, x * -1": lambda x: np.sum(x * 1.0 - x * -1.0),
    # the sign of a zero, seen through arctan2 (+0.0 -> pi, -0.0 -> -pi) and a division
    "y + 0.0": lambda x: np.sum(np.arctan2(x * 0.0 + 0.0, -1.0)),
    "0.0 + y": lambda x: np.sum(np.arctan2(0.0 + x * 0.0, -1.0)),
    "0.0 - y": lambda x: np.sum(np.arctan2(0.0 - x * 0.0, -1.0)),
    "y - -0.0": lambda x: np.sum(1.0 / (x * 0.0 - -0.0)),
    "-0.0 - y": lambda x: np.sum(1.0 / (-0.0 - x * 0.0)),
    "y + 0.0 scalar": lambda x: np.arctan2(x[0] * 0.0 + 0.0, -1.0) + np.arctan2(0.0 - x[1] * 0.0, -1.0),
    # no reassociation of products or sums: x * 1e200 overflows, x * 1e-200 underflows
    "(x * c1) * c2": lambda x: np.sum((x * 1e200) * 1e-200 + (x * 1e-200) * 1e200),
    "(c1 * x) * c2 scalar": lambda x: (1e200 * x[0]) * 1e-200 + 3.0 * (x[1] * 1e-300) * 1e300,
    "(x + c1) + c2": lambda x: np.sum((x + 1e308) + -1e308),
    "c / (x * c1)": lambda x: np.sum(1.0 / ((x * 1e-200) * 1e-200)),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_values_match_numpy_on_special_inputs(name):
    f = MODELS[name]
    rng = np.random.default_rng(0)
    for _ in range(20):
        x = rng.choice(SPECIAL, size=5)
        with np.errstate(all="ignore"):
            want = f(x.copy())
            g = tj.compile(f, x, cache=False, on_guard_failure="recompile")
            value, _ = g.value_and_grad(x)
        assert same(value, want), (name, x, value, want)


def test_simplified_graph_matches_interpreter_on_special_inputs():
    """Interpret the joint graph before and after simplification on special values."""
    rng = np.random.default_rng(1)
    for name, f in MODELS.items():
        x = np.array([0.5, -1.0, 2.0, 3.0, -0.25])
        joint = autodiff.vjp_graph(tracing.trace(f, (x,), (0,)))
        simple, _ = simplify.simplify(joint)
        for _ in range(10):
            xs = rng.choice(SPECIAL, size=5)
            with np.errstate(all="ignore"):
                before = interpret.evaluate(joint, [xs])
                after = interpret.evaluate(simple, [xs])
            for b, a in zip(before, after):
                assert same(b, a), (name, xs, b, a)


def test_where_of_equal_branches_keeps_the_broadcast_shape():
    """Was an internal AssertionError ('changed its type to f64[]') at compile time."""
    g = tj.compile(lambda x: np.sum(tj.where(x > 0, 2.0, 2.0) * x), np.array([0.3, -0.7, 1.1]),
                   cache=False)  # fmt: skip
    np.testing.assert_array_equal(g(np.array([0.3, -0.7, 1.1])), [2.0, 2.0, 2.0])


def test_max_with_nan_has_a_nan_gradient():
    """The maximum of an array with a NaN is NaN; its gradient is NaN too (as JAX), not 0."""
    g = tj.compile(lambda x: np.max(x) * 2.0, np.array([1.0, 3.0, 2.0]), cache=False)
    value, grad = g.value_and_grad(np.array([1.0, np.nan, 2.0]))
    assert np.isnan(value) and np.all(np.isnan(grad))
    value, grad = g.value_and_grad(np.array([1.0, 3.0, 3.0]))  # ties share the cotangent
    np.testing.assert_array_equal(grad, [0.0, 1.0, 1.0])


def test_x_minus_x_of_inf_is_nan():
    g = tj.compile(lambda x: np.sum(x - x), np.array([1.0, 2.0]), cache=False)
    with np.errstate(all="ignore"):
        value, _ = g.value_and_grad(np.array([np.inf, 1.0]))
    assert np.isnan(value)
