"""sinh and cosh (primitives, codegen/mathlib/hyp.py): within 2 ulp of mpmath over the whole
range — up to |x| = 710.47, where e^|x| overflows but numpy's result is finite — with their
derivatives (each the other primitive, so cosh' does not cancel near 0), the sign of zero kept."""

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


EDGES = np.array([1e-300, 1e-20, 0.5, 0.999999, 1.0, 1.000001, 2.0, 30.0, 700.0, 1e20, 1e155,
                  1e300, 1.7e308, np.inf, 0.0, -0.0, np.nan])  # fmt: skip


@pytest.mark.parametrize(
    "name,f",
    [
        ("arccosh", np.arccosh),
        ("cbrt", np.cbrt),
        ("arctanh", np.arctanh),
        ("hypot", lambda x: np.hypot(x, 0.7)),
        ("hypot of itself", lambda x: np.hypot(x, x)),
        ("logaddexp of itself", lambda x: np.logaddexp(x, x)),
        ("logaddexp", lambda x: np.logaddexp(x, 0.3)),
    ],
)
def test_composed_functions_at_the_edges_of_their_domains(name, f):
    """Overflow, infinities, NaN, signed zeros and the cancellation-prone points (x near 1 for
    arccosh, near -1 for arctanh) as numpy: within 4 ulp, special values exactly."""
    x = np.concatenate([EDGES, -EDGES])
    got = tj.compile(lambda v: f(v), x, mode="jvp", cache=False)(x, np.ones_like(x))[0]
    with np.errstate(all="ignore"):
        want = f(x)
    special = ~np.isfinite(want) | (want == 0)
    np.testing.assert_array_equal(got[special], want[special])
    signed = special & ~np.isnan(want)  # a NaN's sign bit means nothing
    np.testing.assert_array_equal(np.signbit(got[signed]), np.signbit(want[signed]))
    assert _ulps(got[~special], want[~special]).max() <= 4.0


@pytest.mark.parametrize(
    "name,f,x,want",
    [
        ("cbrt", np.cbrt, [0.0, -0.0, np.inf, 8.0], [np.inf, np.inf, 0.0, 1 / 12]),
        ("sinh", np.sinh, [711.0, -711.0, np.inf, 1.0], [np.inf, np.inf, np.inf, np.cosh(1.0)]),
        ("arccosh", np.arccosh, [1.0, 2.0**28, 2.0, 1e200],
         [np.inf, 2.0**-28, 1 / np.sqrt(3.0), 1e-200]),
        ("arctanh", np.arctanh, [1.0, -1.0, 0.5, 0.0], [np.inf, np.inf, 4 / 3, 1.0]),
        ("arcsin", np.arcsin, [1.0, -1.0, 0.6, -0.0], [np.inf, np.inf, 1.25, 1.0]),
        ("arccos", np.arccos, [1.0, -1.0, 0.6, 0.0], [-np.inf, -np.inf, -1.25, -1.0]),
        ("tan", np.tan, [0.0, -np.pi / 4, 1e-300, 3.0], [1.0, 2.0, 1.0, 1 / np.cos(3.0) ** 2]),
    ],
)  # fmt: skip
def test_derivatives_at_the_edges_are_the_limits(name, f, x, want):
    """No NaN leaking from the branch a where does not take, no cotangent halved at a
    clamp's tie: reverse and forward mode give the derivative's limits."""
    x = np.array(x)
    g = tj.grad(lambda v: np.sum(f(v)))(x)
    t = tj.jvp(lambda v: f(v), (x,), (np.ones_like(x),))[1]
    np.testing.assert_allclose(g, want, rtol=1e-14)
    np.testing.assert_allclose(t, want, rtol=1e-14)
