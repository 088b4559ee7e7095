"""A while_loop that runs out of max_steps with its condition still true is reported (it stopped
silently before): a MaxStepsWarning by default, MaxStepsError with on_max_steps="raise"."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tapejit as tj


def halve_until_small(x):
    """Halves the carry until its norm is below 1e-3: needs ~log2(|x| / 1e-3) steps."""
    c = tj.while_loop(lambda c: np.sum(c * c) > 1e-6, lambda c: c * 0.5, x, max_steps=8)
    return np.sum(c * x)


def reference(x, max_steps=8):
    c, k = x.copy(), 0
    while np.sum(c * c) > 1e-6 and k < max_steps:
        c, k = c * 0.5, k + 1
    return np.sum(c * x), 2 * c  # d/dx sum((x * 0.5^k) * x) = 2 * 0.5^k x


SMALL = np.array([1e-3, 2e-3])  # finishes in 2 steps
LARGE = np.array([10.0, -20.0])  # would need ~15 steps


def test_a_loop_that_finishes_does_not_warn():
    g = tj.compile(halve_until_small, SMALL, cache=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value, grad = g.value_and_grad(SMALL)
    want_v, want_g = reference(SMALL)
    assert value == pytest.approx(want_v, rel=1e-14)
    np.testing.assert_allclose(grad, want_g, rtol=1e-14)


@pytest.mark.parametrize("first", [SMALL, LARGE], ids=["traced-finishing", "traced-exhausted"])
def test_an_exhausted_loop_warns_and_returns_the_cut_off_result(first):
    g = tj.compile(halve_until_small, first, cache=False)
    for x in (LARGE, SMALL, LARGE):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value, grad = g.value_and_grad(x)
        exhausted = x is LARGE
        assert any(issubclass(w.category, tj.MaxStepsWarning) for w in caught) == exhausted
        if exhausted:
            assert "max_steps (8)" in str(caught[0].message)
            assert "test_while_status.py" in str(caught[0].message)
        want_v, want_g = reference(x)
        assert value == pytest.approx(want_v, rel=1e-14)
        np.testing.assert_allclose(grad, want_g, rtol=1e-14)


def test_on_max_steps_raise():
    g = tj.compile(halve_until_small, SMALL, cache=False, on_max_steps="raise")
    with pytest.raises(tj.MaxStepsError, match="max_steps"):
        g(LARGE)
    np.testing.assert_allclose(g(SMALL), reference(SMALL)[1], rtol=1e-14)
    with pytest.raises(ValueError, match="on_max_steps"):
        tj.compile(halve_until_small, SMALL, cache=False, on_max_steps="ignore")


def test_batches_report_rows_that_run_out():
    g = tj.compile(halve_until_small, SMALL, cache=False)
    X = np.stack([SMALL, LARGE, SMALL * 0.5])
    with pytest.warns(tj.MaxStepsWarning):
        G = g.batch(X)
    np.testing.assert_allclose(G, np.stack([reference(x)[1] for x in X]), rtol=1e-14)
