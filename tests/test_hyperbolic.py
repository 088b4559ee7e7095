"""sinh and cosh (compositions in tapejit/np_math.py): within 2 ulp of mpmath over the whole
range — up to |x| = 710.47, where e^|x| overflows but numpy's result is finite — with their
derivatives (cosh's from sinh's formula, so it does not cancel near 0), the sign of zero kept."""

import mpmath
import numpy as np
import pytest

import tapejit as tj

mpmath.mp.prec = 120
RNG = np.random.default_rng(710)
X = np.concatenate([
    RNG.uniform(-1, 1, 600) * 10.0 ** RNG.integers(-12, 3, 600),
    RNG.uniform(700, 710.47, 60) * RNG.choice([-1, 1], 60),
    [21.999999, 22.0, -22.0, 22.000001, 1e-300],
])  # fmt: skip


def _ulps(got, want):
    return np.abs(got - want) / np.spacing(np.abs(want))


@pytest.mark.parametrize("name", ["sinh", "cosh"])
def test_values_and_derivatives_within_two_ulp(name):
    f, df = {"sinh": (np.sinh, mpmath.cosh), "cosh": (np.cosh, mpmath.sinh)}[name]
    mf = getattr(mpmath, name)
    value, tangent = tj.compile(lambda v: f(v), X, mode="jvp", cache=False)(X, np.ones_like(X))
    want = np.array([float(mf(mpmath.mpf(float(v)))) for v in X])
    dwant = np.array([float(df(mpmath.mpf(float(v)))) for v in X])
    assert np.all(np.isfinite(value)) and _ulps(value, want).max() <= 2.0
    nz = dwant != 0
    assert _ulps(tangent[nz], dwant[nz]).max() <= 2.0


def test_special_values_as_numpy():
    x = np.array([0.0, -0.0, 711.0, -711.0, np.inf, -np.inf, np.nan])
    for f in (np.sinh, np.cosh):
        got = tj.compile(lambda v: f(v), x, mode="jvp", cache=False)(x, np.ones_like(x))[0]
        with np.errstate(over="ignore"):
            want = f(x)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
