"""scipy.special's gamma-function relatives and integrals, as compositions of primitives with
analytic derivatives (the approach and the helpers are :mod:`.np_special`'s): Box-Cox
transforms, ``loggamma``, ``poch``, Hurwitz ``zeta``, the modified Bessel functions ``i0 i0e i1
i1e``, the incomplete gamma functions ``gammainc gammaincc`` and the exponential integrals
``exp1 expi``. Each bound is stated where the function is defined and checked by
``tests/test_scipy_special_more.py`` against mpmath (the incomplete gamma functions' shapes
above 50, by :mod:`.np_gamma_large`: ``tests/test_incomplete_large.py``).
"""

from __future__ import annotations

import math

import numpy as np

from ...core.ops import Op
from ..tracing import _unary, _where, lift
from .np_gamma_large import TEMME_LAMBDA_HI, TEMME_LAMBDA_LO, _log_prefactor, _phi, _temme_smaller
from .np_special import _EULER, _broken, _horner, _isnan, _no_derivative, _rule, _t

# ----------------------------------------------------------------------------------------------
# Box-Cox transforms


def _boxcox_core(lg, lmbda, power):
    """(exp(lmbda * lg) - 1) / lmbda, lg at lmbda == 0 (scipy's |lmbda| < 1e-19 cut); for
    |lmbda lg| > 1/2 as (power - 1) / lmbda with power = exp(lmbda lg) computed by ``pow``
    (the rounding of lmbda lg would cost |lmbda lg| ulps through exp)."""
    u = lmbda * lg
    tiny = abs(lmbda) < 1e-19
    lb = _where(tiny, 1.0, lmbda)
    r = _where(abs(u) < 0.5, np.expm1(u), power - 1.0) / lb
    return _where(tiny, lg, r)


def _pow1p(x, lmbda):
    """(1 + x)^lmbda with the rounding of 1 + x corrected to first order: s = fl(1 + x),
    e = x - (s - 1) exact, (s + e)^lmbda = s^lmbda (1 + lmbda e / s)."""
    s = 1.0 + x
    e = x - (s - 1.0)
    return np.power(s, lmbda) * (1.0 + lmbda * e / s)


#: (u e^u - expm1(u)) / u^2 = sum_{n>=2} (n - 1) u^(n-2) / n! for |u| < 1/2 (17 terms)
_BOXCOX_DL = tuple((n - 1) / math.factorial(n) for n in range(2, 19))


def _boxcox_dlmbda(lg, lmbda):
    """d/dlmbda (exp(lmbda lg) - 1) / lmbda = lg^2 (u e^u - expm1 u) / u^2, u = lmbda lg:
    the series near u = 0 (the quotient cancels there), the quotient elsewhere."""
    u = lmbda * lg
    small = abs(u) < 0.5
    us = _where(small, u, 1.0)
    series = _horner(_BOXCOX_DL[::-1], us) * lg * lg
    ub = _where(small, 1.0, u)
    lb = _where(small, 1.0, lmbda)
    direct = (ub * np.exp(ub) - np.expm1(ub)) / (lb * lb)
    return _where(small, series, direct)


#: boxcox(x, l) = (x^l - 1)/l (log x at l = 0) as expm1(l log x)/l, as scipy; partials
#: x^(l-1) and the l-derivative above. Bound: 2 ulp against scipy (x > 0).
_boxcox = _rule(
    lambda x, lm: _boxcox_core(np.log(x), lm, np.power(x, lm)),
    lambda out, x, lm: np.exp((lm - 1.0) * np.log(x)),
    lambda out, x, lm: _boxcox_dlmbda(np.log(x), lm),
)
_boxcox1p = _rule(
    lambda x, lm: _boxcox_core(np.log1p(x), lm, _pow1p(x, lm)),
    lambda out, x, lm: np.exp((lm - 1.0) * np.log1p(x)),
    lambda out, x, lm: _boxcox_dlmbda(np.log1p(x), lm),
)


# ----------------------------------------------------------------------------------------------
# Gamma-function relatives


def _gammaln(x):
    return _unary(Op.GAMMALN, x)


def _digamma(x):
    return _unary(Op.DIGAMMA, x)


def _loggamma(x):
    """scipy.special.loggamma on reals: gammaln(x) for x >= 0 (inf at 0), NaN for x < 0 (the
    principal branch is complex there). Exactly gammaln's accuracy (2 ulp)."""
    x = _t(x)
    return _where(x < 0.0, np.nan, _gammaln(x))


# Stirling's series of log Gamma(z) - ((z - 1/2) log z - z + log(2 pi)/2), in 1/z (A&S 6.1.41):
# B_2k / (2k (2k - 1) z^(2k-1)), k = 1..8; for z >= 10 the next term is below 1e-19
_STIRLING = (1 / 12, -1 / 360, 1 / 1260, -1 / 1680, 1 / 1188, -691 / 360360, 1 / 156, -3617 / 122400)


def _stirling_tail(iz):
    """The Stirling series above at z = 1 / iz."""
    return _horner(_STIRLING[::-1], iz * iz) * iz


def _log_poch_large(z, m):
    """log(Gamma(z + m) / Gamma(z)) for z, z + m >= 10, without subtracting two log Gammas:
    m log z + (z + m - 1/2) log1p(m / z) - m + the difference of the Stirling tails."""
    iz = 1.0 / z
    zm = z + m
    return (
        m * np.log(z)
        + (zm - 0.5) * np.log1p(m * iz)
        - m
        + (_stirling_tail(1.0 / zm) - _stirling_tail(iz))
    )


def _odd(n):
    """1 for odd integers n, 0 for even ones (n - 2 floor(n / 2): vectorises, fmod is a libm
    call per element); NaN at +-inf."""
    return n - 2.0 * np.floor(0.5 * n)


def _gamma_sign(x):
    """scipy.special.gammasgn (np_math's), with the parity of ceil(-x) by :func:`_odd`."""
    neg = 1.0 - 2.0 * _odd(np.ceil(-x))
    zero = _where(1.0 / x < 0.0, -1.0, 1.0)  # the sign of a zero
    return _where(x > 0.0, 1.0, _where(x == 0.0, zero, _where(x == np.floor(x), np.nan, neg)))


def _poch_value(z, m):
    zm = z + m
    large = (z >= 10.0) & (zm >= 10.0)
    lg = _log_poch_large(_where(large, z, 10.0), _where(large, m, 0.0))
    pole_z = (z <= 0.0) & (z == np.floor(z))
    pole_zm = (zm <= 0.0) & (zm == np.floor(zm))
    # Gamma(z + m)/Gamma(z) with z a pole: a finite ratio when z + m is one too (a product of
    # integers), computed as (-1)^m Gamma(1 - z) / Gamma(1 - z - m) by the same two log Gammas;
    # 0 when only z is
    refl = pole_z & pole_zm
    small = _gammaln(_where(refl, 1.0 - z, zm)) - _gammaln(_where(refl, 1.0 - zm, z))
    pos = (z > 0.0) & (zm > 0.0)
    sign_z = 1.0 - 2.0 * _odd(np.ceil(-z))  # at z <= 0 only off the poles (handled below)
    sign = _where(pos, 1.0, _gamma_sign(zm) * _where(z > 0.0, 1.0, sign_z))
    sign = _where(refl, 1.0 - 2.0 * _odd(abs(m)), sign)
    r = sign * np.exp(_where(large, lg, small))
    r = _where(pole_z & ~pole_zm, 0.0, r)
    return _where(m == 0.0, 1.0, r)


#: poch(z, m) = Gamma(z + m) / Gamma(z) (scipy.special.poch); partials poch (psi(z+m) -
#: psi(z)) and poch psi(z + m). Bound: 1e-13 relative against mpmath for z, z + m in
#: (0, 170] (the log-Gamma difference, or Stirling's series for both >= 10).
_poch = _rule(
    _poch_value,
    lambda out, z, m: out * (_digamma(z + m) - _digamma(z)),
    lambda out, z, m: out * _digamma(z + m),
)


# ----------------------------------------------------------------------------------------------
# Hurwitz zeta

# Euler-Maclaurin summation (DLMF 25.11.5 with the remainder of 2.10.1): zeta(s, q) =
# sum_{k<N} (q+k)^-s + (q+N)^(1-s)/(s-1) + (q+N)^-s/2 + sum_{j=1}^{M} B_2j/(2j)! s(s+1)...
# (s+2j-2) (q+N)^(-s-2j+1); N = 12, M = 10 give < 1e-17 relative for s <= 60, q > 0
_ZETA_N, _ZETA_M = 12, 10
_BERNOULLI = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510,
              43867 / 798, -174611 / 330)  # fmt: skip


def _hurwitz(s, q):
    """zeta(s, q) for s > 1, q > 0 (Euler-Maclaurin, see above)."""
    acc = None
    ms = -s
    for k in range(_ZETA_N):
        t = np.power(q + float(k), ms)  # pow: exp(-s log q) would be |s log q| ulps off
        acc = t if acc is None else acc + t
    a = q + float(_ZETA_N)
    a_s = np.power(a, ms)  # (q + N)^-s
    tail = a * a_s / (s - 1.0) + 0.5 * a_s
    ia2 = 1.0 / (a * a)
    term = s * a_s / a  # s (q+N)^(-s-1), then times (s+2j-1)(s+2j) / (q+N)^2 per step
    corr = None
    for j in range(1, _ZETA_M + 1):
        c = _BERNOULLI[j - 1] / math.factorial(2 * j) * term
        corr = c if corr is None else corr + c
        term = term * (s + float(2 * j - 1)) * (s + float(2 * j)) * ia2
    return acc + tail + corr


def _zeta_value(s, q):
    """Hurwitz zeta for s > 1 and q > 0 (scipy: inf at s = 1, NaN for s < 1; for q <= 0 scipy
    answers only integer s: NaN here, not supported)."""
    ok = (s > 1.0) & (q > 0.0)
    r = _hurwitz(_where(ok, s, 2.0), _where(ok, q, 1.0))
    r = _where(ok, r, _where(s == 1.0, np.inf, np.nan))
    return _where(s == np.inf, _where(q == 1.0, 1.0, _where(q < 1.0, np.inf, 0.0)), r)


#: d/dq zeta(s, q) = -s zeta(s + 1, q) (DLMF 25.11.17); s's partial is never used: s is
#: guarded by :func:`_no_derivative`
_zeta_rule = _rule(
    _zeta_value, lambda out, s, q: 0.0, lambda out, s, q: -s * _zeta_value(s + 1.0, q)
)


def _zeta_of(s, q):
    """zeta(s, q), differentiable in q; differentiating in s raises (names the line)."""
    return _no_derivative(_zeta_rule(s, q), s, "the derivative of zeta(s, q) with respect to s")


def _zeta(s, q):
    """scipy.special.zeta(s, q) (the ufunc ``_zeta``): the Hurwitz zeta function for s > 1,
    q > 0. Bound: 4 ulp against mpmath for s in (1, 60], q in (0, 1e6]."""
    return _zeta_of(_t(s), _t(q))


def _riemann_zeta(s):
    """scipy.special.zeta(s) (the ufunc ``_riemann_zeta``) for s > 1 (Hurwitz with q = 1; s < 1
    is not supported: NaN). Bound as :func:`_zeta`."""
    return _zeta_of(_t(s), lift(1.0))


# ----------------------------------------------------------------------------------------------
# Modified Bessel functions of orders 0 and 1
#
# |x| < 18: the power series I0 = sum (x^2/4)^k / k!^2, I1 = x/2 sum (x^2/4)^k / (k! (k+1)!)
# (A&S 9.6.10), 48 terms, all positive (no cancellation); |x| >= 18: Hankel's asymptotic
# expansion I_n(x) e^-x sqrt(2 pi x) = sum_k (-1)^k prod_{j<=k} (4n^2 - (2j-1)^2) / (k! (8x)^k)
# (A&S 9.7.1), 30 terms (the smallest term at x = 18 is ~1e-17).
_BESSEL_SPLIT = 18.0
_I0_SERIES = tuple(1.0 / math.factorial(k) ** 2 for k in range(48))
_I1_SERIES = tuple(0.5 / (math.factorial(k) * math.factorial(k + 1)) for k in range(48))


def _hankel(n: int) -> tuple[float, ...]:
    c, out = 1.0, [1.0]
    for k in range(1, 30):
        c *= -(4 * n * n - (2 * k - 1) ** 2) / (k * 8.0)
        out.append(c)
    return tuple(out)


_I0_ASYM, _I1_ASYM = _hankel(0), _hankel(1)


def _bessel_scaled(x, series, asym, odd: bool):
    """(I_n(x) e^-|x|, I_n(x)) for n = 0 (even) or 1 (odd), from the tables above."""
    a = abs(x)
    big = a >= _BESSEL_SPLIT
    xs = _where(big, 0.0, x)
    ser = _horner(series[::-1], xs * xs * 0.25)
    ser = ser * xs if odd else ser
    ab = _where(big, a, _BESSEL_SPLIT)
    sc = _horner(asym[::-1], 1.0 / ab) / np.sqrt((2.0 * math.pi) * ab)
    sc = _where(x < 0.0, -sc, sc) if odd else sc
    half = np.exp(0.5 * ab)  # I = I e^-|x| * e^(|x|/2) * e^(|x|/2): finite up to x = 713.98
    scaled = _where(big, sc, ser * np.exp(-abs(xs)))
    value = _where(big, sc * half * half, ser)
    return scaled, _where(_isnan(x), np.nan, value), a


def _i0_value(x):
    return _bessel_scaled(x, _I0_SERIES, _I0_ASYM, False)[1]


def _i0e_value(x):
    return _bessel_scaled(x, _I0_SERIES, _I0_ASYM, False)[0]


def _i1_value(x):
    return _bessel_scaled(x, _I1_SERIES, _I1_ASYM, True)[1]


def _i1e_value(x):
    return _bessel_scaled(x, _I1_SERIES, _I1_ASYM, True)[0]


def _over_x(v, x):
    """I_1(x) / x (or its scaled form), 1/2 at x = 0."""
    return _where(x == 0.0, 0.5, v / _where(x == 0.0, 1.0, x))


def _sgn(x):
    return _unary(Op.SIGN, x)


#: i0, i0e, i1, i1e (scipy.special): series and asymptotic expansion above; derivatives
#: I0' = I1, I1' = I0 - I1/x, and for the scaled forms (I e^-|x|)' = I' e^-|x| - sign(x) I e^-|x|
#: (DLMF 10.29.3). Bound: 4 ulp against mpmath for |x| <= 700 (i0, i1: up to overflow at
#: 713.98; i0e, i1e: 1e300).
_i0 = _rule(_i0_value, lambda out, x: _i1_value(x))
_i1 = _rule(_i1_value, lambda out, x: _i0_value(x) - _over_x(out, x))
_i0e = _rule(_i0e_value, lambda out, x: _i1e_value(x) - _sgn(x) * out)
_i1e = _rule(_i1e_value, lambda out, x: _i0e_value(x) - _over_x(out, x) - _sgn(x) * out)


# ----------------------------------------------------------------------------------------------
# Incomplete gamma functions and exponential integrals
#
# P(a, x) by its series x^a e^-x / Gamma(a + 1) sum_n x^n / ((a+1)...(a+n)) for x < a + 1 and
# Q(a, x) by Legendre's continued fraction e^-x x^a / Gamma(a) / (x + 1 - a - 1 (1 - a) / (x + 3
# - a - 2 (2 - a) / ...)) otherwise (Numerical Recipes, 3rd ed., sec. 6.2; A&S 6.5.29, 6.5.31),
# each with a fixed number of terms (72), both evaluated from their tails as the ratio of a
# three-term recurrence (no division per term: a division costs ~16 multiplications' time in a
# vectorised loop, and both forms run on every element). Alone they hold for a <= 50; for
# larger a they run only where they converge (x < a/2, x > 1.3 a) with a prefactor that keeps
# its accuracy, and Temme's uniform expansion covers x/a in [1/2, 1.3] (:mod:`.np_gamma_large`).
_SERIES_TERMS = _FRACTION_TERMS = 72


def _gamma_series(a, x):
    """sum_{n<72} x^n / (a (a+1)...(a+n-1)) by Horner's rule from the tail, 1 + x/(a+j) h, kept
    as a fraction num/den (scaled by 1/a, so no factor exceeds 1 + 71/a): one division."""
    r = 1.0 / a
    y = x * r
    num, den = lift(1.0), lift(1.0)
    for j in range(_SERIES_TERMS - 2, -1, -1):
        c = 1.0 + float(j) * r  # (a + j) / a
        cd = c * den
        num = cd - (-y) * num if _broken(j) else cd + y * num
        den = cd
    return num / den


def _gamma_fraction(a, x, terms: int = _FRACTION_TERMS):
    """The denominator f_0 of Legendre's continued fraction for Gamma(a, x) e^x x^-a (x >= a + 1,
    a >= 0), f_k = b_k - r_k / f_{k+1} with b_k = x + 2k + 1 - a, r_k = (k+1)(k+1-a),
    as the ratio p_0 / p_1 of p_k = b_k p_{k+1} - r_k p_{k+2}, renormalised (p / q, 1) every
    8 steps, so p cannot overflow for x <= 1e30 (callers clamp x there): 1 division per 8 steps."""
    xa = x - a
    p, q = xa + float(2 * terms + 1), None
    for k in range(terms - 1, -1, -1):
        b = xa + float(2 * k + 1)
        r = float((k + 1) ** 2) - float(k + 1) * a
        rq = r if q is None else r * q
        p, q = (b * p - rq if not _broken(k) else -(rq - b * p)), p
        if k % 8 == 0 and k:
            p, q = p / q, None
    return p / q


#: The shapes above which :mod:`.np_gamma_large`'s forms take over (the fixed-length series
#: and fraction alone are accurate up to here: x = a = 1000 was off by 0.01, and the prefactor's
#: exp(a log x - x - log Gamma(a)) costs |a log x| ulps)
GAMMAINC_A_LARGE = 50.0

#: The largest shape computed (1e-12 relative up to here: tests/test_incomplete_large.py
#: checks a <= 1e8 and points up to 1e10 against mpmath; 7e10 was checked once, 1e-13); NaN
#: above, a = inf included (scipy: P = 0, Q = 1; scipy's own tails are off for a > 1e9)
GAMMAINC_A_MAX = 1e10


def _large_prefactor(a, x):
    """``(t, phi, log(x^a e^-x / Gamma(a)))`` for a > 50 (clamped by the callers), t = x/a - 1,
    phi = t - log(1 + t): the prefactor without the large logs (:mod:`.np_gamma_large`)."""
    t = (x - a) / a
    phi = _phi(t, x / a)
    return t, phi, _log_prefactor(a, a * phi, _stirling_tail(1.0 / a))


def _gammainc_pq(a, x):
    """(P(a, x), Q(a, x)) for a > 0, x >= 0. a <= 50: the series below x = a + 1 (72 terms reach
    1e-16 there for a <= 50), the fraction above (72 terms: 1e-14 for a >= 0.05 near x = a + 1,
    where it converges slowest; 30 would do for a >= 3), the other one as 1 minus it; one
    prefactor x^a e^-x / Gamma(a) for both. a > 50 (:mod:`.np_gamma_large`): the same series
    for x < a / 2 and fraction for x > 1.3 a (both converge there in 72 terms for every a), with
    the prefactor from a phi = a (lambda - 1 - log lambda); Temme's expansion in between."""
    ok = (a > 0.0) & (x > 0.0) & (x < np.inf) & (a <= GAMMAINC_A_MAX)
    a1 = _where(ok, a, 1.0)
    x1 = _where(ok, x, 1.0)
    large = a1 > GAMMAINC_A_LARGE
    use_series = (large & (x1 < TEMME_LAMBDA_LO * a1)) | (~large & (x1 < a1 + 1.0))
    use_fraction = (large & (x1 > TEMME_LAMBDA_HI * a1)) | (~large & ~use_series)
    xs = _where(use_series, x1, 0.5)
    xf = _where(use_fraction, _where(x1 > 1e30, 1e30, x1), a1 + a1 + 2.0)
    a_s, x_s = _where(large, 1.0, a1), _where(large, 1.0, x1)  # (the a <= 50 prefactor's)
    a_l, x_l = _where(large, a1, 100.0), _where(large, x1, 100.0)
    t, phi, log_large = _large_prefactor(a_l, x_l)
    log_pre = _where(large, log_large, a_s * np.log(x_s) - x_s - _gammaln(a_s))
    pre = np.exp(log_pre)
    p = pre * (_gamma_series(a1 + 1.0, xs) / a1)
    q = pre / _gamma_fraction(a1, xf)
    p_out = _where(use_series, p, 1.0 - q)
    q_out = _where(use_series, 1.0 - p, q)
    # Temme's region: |eta| <= 0.63 (clamped to lambda = 1 outside it)
    temme = large & ~use_series & ~use_fraction
    lower = t < 0.0
    a_t = _where(temme, a_l, 100.0)
    phi_t = _where(temme, phi, 0.0)
    small = _temme_smaller(a_t, phi_t, a_t * phi_t, lower)
    p_out = _where(temme, _where(lower, small, 1.0 - small), p_out)
    q_out = _where(temme, _where(lower, 1.0 - small, small), q_out)
    bad = ((a < 0.0) | _isnan(a) | _isnan(x) | (x < 0.0) | ((a == 0.0) & (x == 0.0))
           | (a > GAMMAINC_A_MAX))  # fmt: skip
    edge_p = _where(x == 0.0, 0.0, 1.0)  # x = 0, x = inf, a = 0 (P(0, x) = 1 as scipy)
    p_out = _where(ok, p_out, _where(bad, np.nan, edge_p))
    q_out = _where(ok, q_out, _where(bad, np.nan, 1.0 - edge_p))
    return p_out, q_out


def _gamma_density(a, x):
    """d P(a, x) / dx = x^(a-1) e^-x / Gamma(a); for a > 50 as the prefactor of
    :func:`_gammainc_pq` over x (0 at x = 0 and x = inf; NaN above :data:`GAMMAINC_A_MAX`)."""
    d = np.exp((a - 1.0) * np.log(x) - x - _gammaln(a))
    d = _where((x == 0.0) & (a == 1.0), 1.0, d)
    large = (a > GAMMAINC_A_LARGE) & (x > 0.0) & (x < np.inf)
    a_l, x_l = _where(large, a, 100.0), _where(large, x, 100.0)
    dl = np.exp(_large_prefactor(a_l, x_l)[2]) / x_l
    d = _where(large, dl, _where(a > GAMMAINC_A_LARGE, 0.0, d))
    return _where(a > GAMMAINC_A_MAX, np.nan, d)


_gammainc_rule = _rule(
    lambda a, x: _gammainc_pq(a, x)[0], lambda out, a, x: 0.0, lambda out, a, x: _gamma_density(a, x)
)
_gammaincc_rule = _rule(
    lambda a, x: _gammainc_pq(a, x)[1], lambda out, a, x: 0.0, lambda out, a, x: -_gamma_density(a, x)
)


def _gammainc(a, x):
    """scipy.special.gammainc(a, x) = P(a, x), the regularised lower incomplete gamma function;
    d/dx = x^(a-1) e^-x / Gamma(a). Bound: 1e-13 relative against mpmath for a in (0, 50],
    x in [0, 200] (from the prefactor's exp of a log x - x - log Gamma); for a in (50, 1e10]
    (:data:`GAMMAINC_A_MAX`) and any x >= 0, 1e-12 relative on the smaller of P and 1 - P
    (1e-15 on the larger one; 1e-300 absolute where the smaller one is subnormal), the
    derivative likewise (tests/test_incomplete_large.py); NaN for a > 1e10. Differentiating in
    a raises a TracingError naming the line."""
    a, x = _t(a), _t(x)
    return _no_derivative(_gammainc_rule(a, x), a, "the derivative of gammainc(a, x) in a")


def _gammaincc(a, x):
    """scipy.special.gammaincc(a, x) = Q(a, x) = 1 - P(a, x), computed directly where it is
    small; as :func:`_gammainc` otherwise (bound, derivative, guard on a)."""
    a, x = _t(a), _t(x)
    return _no_derivative(_gammaincc_rule(a, x), a, "the derivative of gammaincc(a, x) in a")


# E1(x) for 0 < x <= 1.5 by its series -gamma - log x - sum_k (-x)^k / (k k!) (A&S 5.1.11,
# 30 terms), above by the continued fraction of Gamma(0, x) (as Q above, a = 0, 80 terms);
# Ei(x) for 0 < x < 40 by its series gamma + log x + sum_k x^k / (k k!) (A&S 5.1.10, 110 terms,
# all positive), above by the asymptotic series e^x / x sum_k k! / x^k (A&S 5.1.51, 40 terms);
# Ei(-x) = -E1(x).
_E1_SERIES = tuple((-1.0) ** (k + 1) / (k * math.factorial(k)) for k in range(1, 31))
_EI_SERIES = tuple(1.0 / (k * math.factorial(k)) for k in range(1, 111))
_EI_ASYM = tuple(float(math.factorial(k)) for k in range(40))


def _exp1_positive(x):
    """E1(x) for x > 0 (the argument is clamped away from 0 by the callers)."""
    small = x <= 1.5
    xs = _where(small, x, 1.0)
    ser = -_EULER - np.log(xs) + _horner(_E1_SERIES[::-1], xs) * xs
    xf = _where(small, 2.0, x)
    cf = np.exp(-xf) / _gamma_fraction(lift(0.0), _where(xf > 1e30, 1e30, xf), 80)
    return _where(small, ser, cf)


def _exp1_value(x):
    pos = x > 0.0
    r = _exp1_positive(_where(pos, x, 1.0))
    return _where(pos, r, _where(x == 0.0, np.inf, np.nan))


def _expi_value(x):
    pos = x > 0.0
    small = x < 40.0
    xs = _where(pos & small, x, 1.0)
    ser = _EULER + np.log(xs) + _horner(_EI_SERIES[::-1], xs) * xs
    xb = _where(small, 40.0, x)
    half = np.exp(0.5 * xb)  # e^x / x = (e^(x/2) / x) e^(x/2): finite up to Ei's overflow
    asym = _horner(_EI_ASYM[::-1], 1.0 / xb) * (half / xb) * half
    neg = -_exp1_positive(_where(pos | (x == 0.0), 1.0, -x))
    r = _where(pos, _where(small, ser, asym), neg)
    return _where(x == 0.0, -np.inf, _where(_isnan(x), np.nan, r))


#: exp1(x) = E1(x) (NaN for x < 0, as scipy), expi(x) = Ei(x); derivatives -e^-x / x and
#: e^x / x. Bound: 8 ulp against mpmath (x > 0 for E1; Ei away from its zero x0 = 0.3725:
#: within 1e-16 absolute there).
_exp1 = _rule(_exp1_value, lambda out, x: -np.exp(-x) / x)
_expi = _rule(_expi_value, lambda out, x: np.exp(x) / x)
