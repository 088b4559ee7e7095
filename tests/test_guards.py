"""Guards: Python control flow on traced values never gives a silently wrong gradient.

Every example is checked on inputs that take each path, switching back and forth, against a
hand-derived gradient or float64 central differences (rtol 1e-6 for differences, 1e-12 for
formulas)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tapejit as tj
from oracles import central

RNG = np.random.default_rng(5)


def cubic_or_square(x):
    return x[0] ** 3 if x[0] > 1 else x[0] ** 2


def test_branch_on_an_element_both_ways_and_back():
    g = tj.compile(cubic_or_square, np.array([2.0]), cache=False)
    for v in [2.0, 0.5, 3.0, 0.25, 1.5, -2.0]:
        o = np.full(1, np.nan)
        assert g(np.array([v]), out=o) is o
        assert o[0] == pytest.approx(3 * v * v if v > 1 else 2 * v, rel=1e-12)
    assert len(g.specialisations) == 2
    (guard,) = g.specialisations[0]["guards"]
    assert "test_guards.py" in guard["source"]


def test_clipped_and_piecewise_models():
    def huber(x, d=1.0):
        r = np.sum(x * x)
        if r < d:
            return 0.5 * r
        return np.sqrt(r) * d - 0.5 * d * d

    def clipped(x):
        s = np.sum(np.sin(x))
        if s > 0.5:
            s = 0.5 + 0.1 * (s - 0.5)
        return s * s

    for f, xs in ((huber, [0.1, 1.0, 0.2, 3.0]), (clipped, [0.1, 2.0, 0.05, 1.0])):
        g = tj.compile(f, np.full(3, xs[0]), cache=False)
        for v in xs:
            x = np.full(3, v) + RNG.normal(0, 0.01, 3)
            np.testing.assert_allclose(g(x), central(f, x), rtol=1e-6, atol=1e-9)


def test_whole_array_condition():
    def f(x):
        if x.sum() > 1:
            return np.sum(np.exp(x))
        return np.sum(x * x)

    g = tj.compile(f, np.full(4, 0.5), cache=False)
    for scale in (0.5, 0.1, 0.6, 0.05):
        x = np.full(4, scale) + RNG.normal(0, 0.01, 4)
        expect = np.exp(x) if x.sum() > 1 else 2 * x
        np.testing.assert_allclose(g(x), expect, rtol=1e-12)


def test_while_loop_with_input_dependent_trip_count():
    def f(x):
        s, n = x[1], 0
        while s < 10.0:
            s = s * (1.0 + x[0])
            n += 1
        return s + n

    g = tj.compile(f, np.array([0.5, 1.0]), cache=False)
    for a in ([0.5, 1.0], [2.0, 1.0], [0.1, 3.0], [0.5, 1.1]):
        x = np.array(a)
        np.testing.assert_allclose(g(x), central(f, x), rtol=1e-6)


def test_range_of_int_of_a_traced_value():
    def f(x):
        s = 0.0
        for i in range(int(x[0])):
            s = s + x[1] ** 2 * (i + 1)
        return s

    g = tj.compile(f, np.array([3.5, 1.5]), cache=False)
    for a in ([3.5, 1.5], [5.9, 0.5], [0.2, 2.0], [3.0, 1.0], [-1.5, 1.0]):
        k = max(int(a[0]), 0)
        expect = [0.0, 2 * a[1] * k * (k + 1) / 2]
        np.testing.assert_allclose(g(np.array(a)), expect, rtol=1e-12)


def test_failed_guard_leaves_outputs_untouched_and_raise_names_the_line():
    def f(x):
        rho = np.sum(np.exp(x))  # the gradient loop writes e_i before the guard is known
        if rho > 5.0:
            return rho * rho
        return rho

    x_hi, x_lo = np.full(8, 1.0), np.full(8, -1.0)
    g = tj.compile(f, x_hi, on_guard_failure="raise", cache=False)
    o = np.full(8, 123.0)
    with pytest.raises(tj.GuardError, match=r"test_guards.py:\d+"):
        g(x_lo, out=o)
    np.testing.assert_array_equal(o, 123.0)
    np.testing.assert_allclose(g(x_hi, out=o), 2 * np.exp(x_hi).sum() * np.exp(x_hi), rtol=1e-12)


def test_specialisations_are_bounded_and_recompiles_warned():
    def f(x):
        k = int(x[0])  # one specialisation per integer part
        return x[1] * k

    g = tj.compile(f, np.array([0.5, 1.0]), max_specialisations=2, cache=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for v in (0.5, 1.5, 2.5, 3.5, 0.5):
            np.testing.assert_allclose(g(np.array([v, 2.0])), [0.0, int(v)])
    assert len(g.specialisations) == 2
    assert any(issubclass(w.category, tj.GuardWarning) for w in caught)


def test_batch_rows_on_both_sides_of_a_guard():
    g = tj.compile(cubic_or_square, np.array([2.0]), cache=False)
    X = np.array([[2.0], [0.5], [1.5], [0.1]])
    G = g.batch(X)
    np.testing.assert_allclose(
        G[:, 0], [3 * v * v if v > 1 else 2 * v for v in X[:, 0]], rtol=1e-12
    )


def test_float_and_item_of_a_differentiated_value_raise():
    """float() would drop the derivative of x[0] (the first wave returned [0, 2] here, not the
    correct [3, 2]): it raises instead, naming the line and what to write."""
    for f in (lambda x: x[1] * float(x[0]), lambda x: x[1] * x[0].item()):
        with pytest.raises(tj.TracingError, match=r"test_guards\.py:\d+.*drops its derivative"):
            tj.compile(f, np.array([2.0, 3.0]), cache=False)


def test_float_and_item_of_an_inactive_value_take_the_concrete_value():
    """A value computed only from arguments that are not differentiated has no derivative to
    lose: float() of it follows the example input and records a guard."""

    def f(x, s):
        c = float(s[0])
        return x[1] * c + s[1].item() * x[0]

    g = tj.compile(f, np.array([2.0, 3.0]), np.array([5.0, 7.0]), cache=False)
    np.testing.assert_allclose(g(np.array([2.0, 3.0]), np.array([5.0, 7.0])), [7.0, 5.0])
    np.testing.assert_allclose(g(np.array([2.0, 3.0]), np.array([4.0, 1.0])), [1.0, 4.0])


def test_ambiguous_truth_value_of_an_array_is_an_error():
    def f(x):
        if x > 0:
            return np.sum(x)
        return 0.0

    with pytest.raises(tj.TracingError, match="ambiguous"):
        tj.compile(f, np.ones(3), cache=False)
