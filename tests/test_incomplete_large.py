"""gammainc / gammaincc for large shapes (a > 50: :mod:`tapejit.frontend.numpy.np_gamma_large`),
compiled to native code, against mpmath at random points (fixed seed), value and derivative.

Regimes (a log-uniform in (50, 1e8]): x/a log-uniform in [0.01, 100]; x = a + z sqrt(a), z
normal with deviation 3 (the transition, Temme's expansion); x/a uniform in [0.4, 1.4] (the
switches between the series, Temme's expansion and the fraction at x/a = 1/2 and 1.3); for a
in (50, 1000], x/a in [1e-6, 0.01] and [100, 1e4]; a few shapes up to 1e10; tails with the
smaller of P and Q between 1 and 1e-300 (x/a from a (x/a - 1 - log(x/a)) uniform in [0, 690]).

Tolerances: the smaller of P and Q = 1 - P within 1e-12 relative (measured: 3e-13, from the
rounding of a (x/a - 1 - log(x/a)) in the exp: up to 745 times a few ulps) plus 1e-300 absolute
(where it is subnormal), the larger one within 1e-15 relative; the derivative x^(a-1) e^-x /
Gamma(a) within 1e-12 relative (+ 1e-300) against mpmath's density, and within 1e-7 of central
differences of the values. For a <= 50 the results are bit for bit those of the fixed-length
series and fraction alone (the forms before the large-a path existed).
"""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest
import scipy.special as sp

import tapejit as tj
from tapejit.frontend.numpy import np_gamma as G

RNG = np.random.default_rng(20240611)


def _points():
    n = 40
    a = np.exp(RNG.uniform(np.log(50.0), np.log(1e8), 3 * n))
    a = np.where(a > 50.0, a, 50.5)
    lam1 = np.exp(RNG.uniform(np.log(0.01), np.log(100.0), n))
    x1 = a[:n] * lam1
    x2 = np.maximum(a[n : 2 * n] + 3.0 * RNG.standard_normal(n) * np.sqrt(a[n : 2 * n]), 0.0)
    x3 = a[2 * n :] * RNG.uniform(0.4, 1.4, n)
    a4 = np.exp(RNG.uniform(np.log(50.0), np.log(1000.0), 20))
    lam4 = np.concatenate([np.exp(RNG.uniform(np.log(1e-6), np.log(0.01), 10)),
                           np.exp(RNG.uniform(np.log(100.0), np.log(1e4), 10))])  # fmt: skip
    # tails down to 1e-300: a phi = a (lambda - 1 - log lambda) uniform in [0, 690], lambda from
    # Lambert's W (lambda - log lambda = 1 + phi: W_0 below lambda = 1, W_-1 above)
    a6 = np.exp(RNG.uniform(np.log(50.0), np.log(1e8), 40))
    phi = RNG.uniform(0.0, 690.0, 40) / a6
    w = -np.exp(-1.0 - phi)
    lam6 = np.where(np.arange(40) % 2 == 0, -sp.lambertw(w, 0).real, -sp.lambertw(w, -1).real)
    # the switches exactly, x = a, the smallest large shape, shapes to 1e10
    a5 = np.array([50.000001, 60.0, 60.0, 60.0, 1e4, 1e4, 1e4, 1e8, 1e8, 1.3e9, 7.7e9])
    x5 = a5 * np.array([1.0, 0.5, 1.3, 1.0, 0.5, 1.3, 1.0, 1.0, 1.0 + 3e-4,
                        1.0 - 4.6 / np.sqrt(1.3e9), 1.0 + 2.0 / np.sqrt(7.7e9)])  # fmt: skip
    return np.concatenate([a, a4, a5, a6]), np.concatenate([x1, x2, x3, a4 * lam4, x5, a6 * lam6])


def _series_p(a, x, dps):
    """P(a, x) = x^a e^-x / Gamma(a + 1) 1F1(1; a + 1; x) (DLMF 8.5.1), the series summed to
    convergence (mpmath's gammainc gives up on it for a > 1e5 near x = a)."""
    with mp.workdps(dps):
        a, x = mp.mpf(a), mp.mpf(x)
        h = mp.hyp1f1(1, a + 1, x, maxterms=10**8)
        return mp.exp(a * mp.log(x) - x - mp.loggamma(a + 1)) * h


def _fraction_q(a, x):
    """Q(a, x) = x^a e^-x / Gamma(a) / (x + 1 - a - 1 (1 - a) / (x + 3 - a - ...)) (Legendre's
    fraction, DLMF 8.9.2), by Lentz's method to convergence, for x > a."""
    with mp.workdps(30):
        a, x = mp.mpf(a), mp.mpf(x)
        tiny = mp.mpf(10) ** -300
        b = x + 1 - a
        f, c, d = b, b, 0
        for k in range(1, 10**6):
            b += 2
            r = -k * (k - a)
            d = b + r * d
            d = 1 / (d if d != 0 else tiny)
            c = b + r / c
            delta = c * d
            f *= delta
            if abs(delta - 1) < mp.mpf(10) ** -28:
                break
        return mp.exp(a * mp.log(x) - x - mp.loggamma(a)) / f


def _smaller_ref(a, x):
    """The smaller of P(a, x) (x < a) and Q(a, x) (x >= a), from mpmath (30 digits)."""
    lower = x < a
    if x == 0.0:
        return mp.mpf(0)
    with mp.workdps(30):
        am, xm = mp.mpf(a), mp.mpf(x)
        try:
            if lower:
                return mp.gammainc(am, 0, xm, regularized=True)
            return mp.gammainc(am, xm, mp.inf, regularized=True)
        except (mp.libmp.NoConvergence, ValueError):
            pass
        lam = xm / am
        a_phi = am * (lam - 1 - mp.log(lam))  # -log of the value, to within log(a)
    if a_phi > 800:  # below the double range
        return mp.mpf(0)
    return _series_p(a, x, 30) if lower else _fraction_q(a, x)


def _density_ref(a, x):
    with mp.workdps(40):
        a, x = mp.mpf(a), mp.mpf(x)
        return mp.exp((a - 1) * mp.log(x) - x - mp.loggamma(a)) if x > 0 else mp.mpf(0)


A, X = _points()
SMALL = np.array([float(_smaller_ref(a, x)) for a, x in zip(A, X)])
DENSITY = np.array([float(_density_ref(a, x)) for a, x in zip(A, X)])
LOWER = X < A

# central differences: relative steps h = 1e-6 x at points where P is not tiny (the Temme
# region and its switches), as the triples (x - h, x + h, x)
_FD_A = np.array([60.0, 60.0, 300.0, 300.0, 1e4, 1e4, 1e6])
_FD_X = _FD_A * np.array([0.55, 1.25, 0.95, 1.1, 0.99, 1.01, 1.0 + 1e-3])
_FD_H = 1e-6 * _FD_X
# a <= 50 (the fixed-length forms alone)
_R = np.random.default_rng(7)
_OLD_A = np.concatenate([_R.uniform(0.01, 50.0, 400), [50.0, 49.999, 1.0, 0.05]])
_OLD_X = np.concatenate([np.exp(_R.uniform(-8.0, 6.0, 400)), [51.0, 30.0, 2.0, 1e-3]])
_OLD_X[:100] = _OLD_A[:100] * _R.uniform(0.4, 1.5, 100)
# edges, the bound and invalid arguments
_EDGE_A = np.array([60.0, 60.0, 1e6, 1e10, 1.01e10, np.inf, 1e20, 60.0, np.nan])
_EDGE_X = np.array([0.0, np.inf, 1e300, 1e10, 1e10, 5.0, 1e20, -1.0, 1.0])

#: every point of every test in one array each, so that each function compiles once
_PARTS = {"ref": (A, X),
          "fd": (np.tile(_FD_A, 3), np.concatenate([_FD_X - _FD_H, _FD_X + _FD_H, _FD_X])),
          "old": (_OLD_A, _OLD_X), "edge": (_EDGE_A, _EDGE_X)}  # fmt: skip
_ALL_A = np.concatenate([v[0] for v in _PARTS.values()])
_ALL_X = np.concatenate([v[1] for v in _PARTS.values()])
_ENDS = np.cumsum([0] + [len(v[0]) for v in _PARTS.values()])
_SLICES = {k: slice(_ENDS[i], _ENDS[i + 1]) for i, k in enumerate(_PARTS)}


def _value_and_partial(f, a, x):
    """One native call of the compiled VJP (cotangent 1): values and d/dx."""
    vf = tj.compile(f, a, x, argnums=(1,), mode="vjp", cache=False)
    out = vf(a, x, np.ones_like(x))
    return np.asarray(out[0]), np.asarray(out[1])


@pytest.fixture(scope="module")
def compiled():
    """{part: (P, Q, dP/dx, dQ/dx)}"""
    with np.errstate(all="ignore"):
        p, dp = _value_and_partial(sp.gammainc, _ALL_A, _ALL_X)
        q, dq = _value_and_partial(sp.gammaincc, _ALL_A, _ALL_X)
    return {k: (p[s], q[s], dp[s], dq[s]) for k, s in _SLICES.items()}


def _check(got, want, rtol, atol, what):
    err = np.abs(got - want)
    bad = ~(err <= rtol * np.abs(want) + atol)
    if bad.any():
        i = np.flatnonzero(bad)[:6]
        raise AssertionError(f"{what}: {bad.sum()} points off: a {A[i]}, x {X[i]}, got {got[i]}, "
                             f"want {want[i]}, rel {err[i] / np.abs(want[i])}")  # fmt: skip


def test_values_match_mpmath(compiled):
    p, q, _, _ = compiled["ref"]
    small = np.where(LOWER, p, q)
    large = np.where(LOWER, q, p)
    _check(small, SMALL, 1e-12, 1e-300, "the smaller of P, Q")
    _check(large, 1.0 - SMALL, 1e-15, 0.0, "the larger of P, Q")


def test_derivative_is_the_density(compiled):
    _, _, dp, dq = compiled["ref"]
    _check(dp, DENSITY, 1e-12, 1e-300, "d gammainc / dx")
    _check(dq, -DENSITY, 1e-12, 1e-300, "d gammaincc / dx")


def test_derivative_matches_central_differences(compiled):
    p, q, dp, dq = compiled["fd"]
    n = len(_FD_A)
    for v, d in ((p, dp), (q, dq)):
        fd = (v[n : 2 * n] - v[:n]) / (2 * _FD_H)
        np.testing.assert_allclose(d[2 * n :], fd, rtol=1e-7)


def _old_pq(a, x):
    """The a <= 50 forms alone (the fixed-length series and fraction as before the large-a
    path): the new code must reproduce them exactly there."""
    use_series = x < a + 1.0
    xs = np.where(use_series, x, 0.5)
    xf = np.where(use_series, a + 2.0, np.where(x > 1e30, 1e30, x))
    pre = np.exp(a * np.log(x) - x - G._gammaln(a))
    p = pre * (G._gamma_series(a + 1.0, xs) / a)
    q = pre / G._gamma_fraction(a, xf)
    return np.where(use_series, p, 1.0 - q), np.where(use_series, 1.0 - p, q)


def test_shapes_up_to_50_are_unchanged(compiled):
    p, q, dp, _ = compiled["old"]
    old_p, old_q = tj.jit(_old_pq)(_OLD_A, _OLD_X)
    np.testing.assert_array_equal(p, old_p)
    np.testing.assert_array_equal(q, old_q)
    dens = np.exp((_OLD_A - 1.0) * np.log(_OLD_X) - _OLD_X - sp.gammaln(_OLD_A))
    np.testing.assert_allclose(dp, dens, rtol=1e-12)


def test_edges_and_the_bound(compiled):
    p, q, _, _ = compiled["edge"]
    np.testing.assert_array_equal(p[:3], [0.0, 1.0, 1.0])
    np.testing.assert_array_equal(q[:3], [1.0, 0.0, 0.0])
    assert p[3] == pytest.approx(0.5 + 1.0 / (3.0 * np.sqrt(2.0 * np.pi * 1e10)), rel=1e-12)
    assert np.isnan(p[4:]).all() and np.isnan(q[4:]).all()  # above GAMMAINC_A_MAX, invalid
