"""scipy.special's incomplete beta function and what follows from it, as compositions of
primitives with analytic derivatives (the approach and the helpers are :mod:`.np_special`'s):
``betainc betaincc`` (the regularised incomplete beta I_x(a, b) and 1 - I_x(a, b)) and
``stdtr`` (Student's t distribution function). Each bound is stated where the function is
defined and checked by ``tests/test_scipy_special_more.py`` against mpmath.

Algorithm: the continued fraction of I_x(a, b) (Numerical Recipes, 3rd ed., sec. 6.4; DLMF
8.17.22), x^a (1-x)^b / (a B(a, b)) / (1 + d_1 / (1 + d_2 / (1 + ...))) with d_2m+1 =
-(a+m)(a+b+m) x / ((a+2m)(a+2m+1)) and d_2m = m (b-m) x / ((a+2m-1)(a+2m)), for x below
(a+1)/(a+b+2), where it converges fastest; above, by the symmetry I_x(a, b) = 1 - I_1-x(b, a).
It runs a fixed number of terms (:data:`_BETA_TERMS`) from its tail, division-free (see
:func:`_beta_fraction`); the bound holds for a, b in (0, :data:`BETAINC_AB_MAX`], and outside
that domain the functions are NaN, never a wrong probability.
"""

from __future__ import annotations

import math

import numpy as np

from ..tracing import _where
from .np_gamma import _gammaln, _log_poch_large, _stirling_tail
from .np_math import _betaln
from .np_special import _broken, _isnan, _no_derivative, _rule, _t

#: The number of terms d_k of the fraction (1e-16 at a = b = 100 at the switch point, where
#: it converges slowest)
_BETA_TERMS = 160

#: The largest a and b betainc/betaincc/stdtr (2 * this for df) compute (1e-13 relative up to
#: here, from the prefactor's exp of a log x + b log(1-x) - log B(a, b)); NaN above.
BETAINC_AB_MAX = 100.0

#: 1 - I is computed as 1 - (the other one) above the switch point: it cancels when the other
#: is near 1, which happens for a small b (betainc) or a small a (betaincc): NaN for that
#: parameter in (0, this) (4e-12 at 0.001; scipy's asymptotic forms are not implemented)
BETAINC_SMALL_MIN = 0.1


def _beta_fraction(a, b, x, terms: int = _BETA_TERMS):
    """1 / (1 + d_1 / (1 + d_2 / (...))) (the d_k above, truncated after ``terms``) as the
    ratio p_1 / p_0 of p_k = q_k (p_k+1 + n_k+1 p_k+2), the fraction scaled term by term by
    q_k = (a+k-1)(a+k) (d_k = n_k / q_k), so no step divides; renormalised (p / q, 1) every 8
    steps (a step grows p by ~q_k n_k <= (a + b + terms)^4 < 1e10 for a, b <= 100): 1 division
    per 8 steps."""
    ab = a + b
    p, q = (a + float(terms - 1)) * (a + float(terms)), None  # p_K = q_K, p_K+1 = 1
    for k in range(terms - 1, -1, -1):
        j = k + 1  # n_j
        m = float(j // 2)
        n = -(a + m) * (ab + m) * x if j % 2 else (m * (b - m)) * x
        s = p + (n if q is None else n * q)
        if _broken(k):
            s = p - (-n if q is None else (-n) * q)
        p, q = (s if k == 0 else (a + float(k - 1)) * (a + float(k)) * s), p
        if k % 8 == 0 and k:
            p, q = p / q, None
    return q / p  # p_1 / p_0 (the last step leaves p_1 in q)


def _log_beta(a, b):
    """log B(a, b) for a, b > 0, not as a difference of large log Gammas where they are large
    (which cost 500 ulps in I_x(99, 100), 1e-13 relative in I_x(50, 0.2)): for max(a, b) >= 10
    as log Gamma(lo) - log(Gamma(hi + lo) / Gamma(hi)) (:func:`_log_poch_large`), for both
    >= 10 by Stirling's series for all three Gammas with the large logs combined."""
    lo, hi = _where(a < b, a, b), _where(a < b, b, a)
    big = hi >= 10.0
    ratio = _log_poch_large(_where(big, hi, 10.0), _where(big, lo, 1.0))
    # both >= 10: Stirling for all three, (a - 1/2) log(a / s) + (b - 1/2) log(b / s) +
    # log(2 pi / s) / 2 + tails, s = a + b, each log of a ratio as log1p of the smaller part
    both = lo >= 10.0
    la, lb = _where(both, lo, 10.0), _where(both, hi, 10.0)
    s = la + lb
    st = ((la - 0.5) * np.log(la / s) + (lb - 0.5) * np.log1p(-la / s)
          + 0.5 * np.log((2.0 * math.pi) / s)
          + (_stirling_tail(1.0 / la) + _stirling_tail(1.0 / lb)
             - _stirling_tail(1.0 / s)))  # fmt: skip
    return _where(both, st, _where(big, _gammaln(lo) - ratio, _betaln(a, b)))


def _log_pair(x, y):
    """(log x, log y) for y = 1 - x (both given exactly): log1p of the other one near 1."""
    lx = _where(x < 0.5, np.log(_where(x < 0.5, x, 0.5)), np.log1p(-_where(x < 0.5, 0.5, y)))
    ly = _where(y < 0.5, np.log(_where(y < 0.5, y, 0.5)), np.log1p(-_where(y < 0.5, 0.5, x)))
    return lx, ly


def _beta_prefactor(a, b, x, y, lx, ly):
    """x^a y^b / B(a, b): the factor whose argument is below 1/2 by ``pow`` (exp(a log x) would
    cost |a log x| ulps: 650 at x = 0.1, a = 99), the other one (near 1, where log1p is exact
    to the ulp) and 1 / B(a, b) in one exp; all in one exp where the pow would underflow."""
    lb = _log_beta(a, b)
    low = x < 0.5
    u, v = _where(low, x, y), _where(low, a, b)  # the small argument and its exponent
    lu = _where(low, lx, ly)
    rest = _where(low, b * ly, a * lx) - lb
    safe = (v * lu > -700.0) & (lu > -700.0)  # (stdtr's x may have underflowed)
    powed = np.power(_where(safe, u, 0.5), _where(safe, v, 1.0)) * np.exp(rest)
    return _where(safe, powed, np.exp(a * lx + b * ly - lb))


def _ibeta_core(a, b, x, y, lx, ly):
    """(I_x(a, b), 1 - I_x(a, b)) for a, b > 0, 0 < x < 1 with y = 1 - x, lx = log x, ly = log y
    given accurately: the fraction at (a, b, x) below the switch point, at (b, a, y) above; one
    prefactor x^a y^b / B(a, b) for both (divided by a or by b)."""
    swap = x * (a + b + 2.0) > a + 1.0
    a1, b1, x1 = _where(swap, b, a), _where(swap, a, b), _where(swap, y, x)
    pre = _beta_prefactor(a, b, x, y, lx, ly)
    f = pre * _beta_fraction(a1, b1, x1) / a1
    return _where(swap, 1.0 - f, f), _where(swap, f, 1.0 - f)


def _ibeta(a, b, x, y, lx, ly):
    """(I, 1 - I) with scipy's edge values: 0 / 1 at x = 0 / 1; the step function for a = 0 or
    b = 0 (NaN for both); NaN for a or b negative or above :data:`BETAINC_AB_MAX` (inf
    included), x outside [0, 1] and NaN anywhere."""
    ok = (a > 0.0) & (b > 0.0) & (a <= BETAINC_AB_MAX) & (b <= BETAINC_AB_MAX)
    inner = ok & (lx > -np.inf) & (ly > -np.inf) & (x >= 0.0) & (y >= 0.0)  # x may underflow
    i, c = _ibeta_core(*(_where(inner, v, w) for v, w in
                         ((a, 1.0), (b, 1.0), (x, 0.5), (y, 0.5), (lx, -0.6931471805599453),
                          (ly, -0.6931471805599453))))  # fmt: skip
    # the edges: log x = -inf (or a = 0 < x: 1), x = 1 (or b = 0, x < 1: 0)
    edge = _where((lx == -np.inf) | ((b == 0.0) & (ly > -np.inf)), 0.0, 1.0)
    i, c = _where(inner, i, edge), _where(inner, c, 1.0 - edge)
    big = (a > BETAINC_AB_MAX) | (b > BETAINC_AB_MAX)
    bad = ((a < 0.0) | (b < 0.0) | ((a == 0.0) & (b == 0.0)) | (x < 0.0) | (y < 0.0) | big
           | _isnan(a) | _isnan(b) | _isnan(x) | _isnan(y))  # fmt: skip
    return _where(bad, np.nan, i), _where(bad, np.nan, c)


def _betainc_pair(a, b, x):
    """(betainc, betaincc): :func:`_ibeta`, NaN where the complement cancels (see
    :data:`BETAINC_SMALL_MIN`)."""
    y = 1.0 - x  # exact for x >= 1/2; below, the fraction is at x (y only in log1p(-x))
    lx, ly = _log_pair(x, y)
    i, c = _ibeta(a, b, x, y, lx, ly)
    small_a = (a > 0.0) & (a < BETAINC_SMALL_MIN)
    small_b = (b > 0.0) & (b < BETAINC_SMALL_MIN)
    return _where(small_b, np.nan, i), _where(small_a, np.nan, c)


def _beta_density(a, b, x):
    """d I_x(a, b) / dx = x^(a-1) (1-x)^(b-1) / B(a, b)."""
    d = np.exp((a - 1.0) * np.log(x) + (b - 1.0) * np.log1p(-x) - _betaln(a, b))
    corner = ((x == 0.0) & (a == 1.0)) | ((x == 1.0) & (b == 1.0))  # 0 * log 0
    return _where(corner, 1.0 / np.exp(_betaln(a, b)), d)


_betainc_rule = _rule(
    lambda a, b, x: _betainc_pair(a, b, x)[0],
    lambda out, a, b, x: 0.0, lambda out, a, b, x: 0.0,
    lambda out, a, b, x: _beta_density(a, b, x),
)  # fmt: skip
_betaincc_rule = _rule(
    lambda a, b, x: _betainc_pair(a, b, x)[1],
    lambda out, a, b, x: 0.0, lambda out, a, b, x: 0.0,
    lambda out, a, b, x: -_beta_density(a, b, x),
)  # fmt: skip


def _guard_ab(r, a, b, name: str):
    r = _no_derivative(r, a, f"the derivative of {name}(a, b, x) in a")
    return _no_derivative(r, b, f"the derivative of {name}(a, b, x) in b")


def _betainc(a, b, x):
    """scipy.special.betainc(a, b, x) = I_x(a, b), the regularised incomplete beta function;
    d/dx = x^(a-1) (1-x)^(b-1) / B(a, b). Bound: 1e-13 relative against mpmath for a in
    (0, 100], b in [0.1, 100], x in [0, 1]; NaN for 0 < b < 0.1 (see
    :data:`BETAINC_SMALL_MIN`) and for a or b > 100 (inf included: scipy's limits 0 and 1 are
    not reproduced), where the fixed-length fraction and the prefactor are not accurate (scipy
    uses asymptotic expansions there, not implemented here); edge values as scipy (see
    :func:`_ibeta`). Differentiating in a or b raises a TracingError naming the line."""
    a, b, x = _t(a), _t(b), _t(x)
    return _guard_ab(_betainc_rule(a, b, x), a, b, "betainc")


def _betaincc(a, b, x):
    """scipy.special.betaincc(a, b, x) = 1 - I_x(a, b), computed directly where it is small; as
    :func:`_betainc` with a and b exchanged (bound for a in [0.1, 100], b in (0, 100]; NaN for
    0 < a < 0.1), derivative and guards as there."""
    a, b, x = _t(a), _t(b), _t(x)
    return _guard_ab(_betaincc_rule(a, b, x), a, b, "betaincc")


# ----------------------------------------------------------------------------------------------
# Student's t distribution function


def _stdtr_args(df, t):
    """(x, y, log x, log y) for x = df / (df + t^2), y = t^2 / (df + t^2), without overflow of
    t^2 (|t| > 1e100: x = df / t^2, y = 1)."""
    big = abs(t) > 1e100
    ts = _where(big, 1.0, t)
    t2 = ts * ts
    s = df + t2
    x, y = df / s, t2 / s
    lx, ly = _log_pair(x, y)
    lbig = np.log(df) - 2.0 * np.log(abs(_where(big, t, 1.0)))
    return (_where(big, np.exp(lbig), x), _where(big, 1.0, y), _where(big, lbig, lx),
            _where(big, 0.0, ly))  # fmt: skip


def _stdtr_value(df, t):
    """P(T <= t) = I_x(df/2, 1/2) / 2 for t <= 0, (1 + (1 - I_x(df/2, 1/2))) / 2 above (no
    cancellation: 1 - I is computed directly where it is small); NaN for df <= 0 or df >
    2 * BETAINC_AB_MAX (scipy: the normal limit at df = inf, not reproduced)."""
    x, y, lx, ly = _stdtr_args(df, t)
    i, c = _ibeta(0.5 * df, _t(0.5), x, y, lx, ly)
    r = _where(t > 0.0, 0.5 + 0.5 * c, 0.5 * i)
    r = _where(abs(t) == np.inf, _where(t > 0.0, 1.0, 0.0), r)
    return _where((df > 0.0) & (df <= 2.0 * BETAINC_AB_MAX) & ~_isnan(t), r, np.nan)


def _t_density(df, t):
    """Student's t density (1 + t^2/df)^(-(df+1)/2) / (sqrt(df) B(df/2, 1/2))."""
    lx = _stdtr_args(df, t)[2]
    return np.exp(0.5 * (df + 1.0) * lx - _betaln(0.5 * df, 0.5)) / np.sqrt(df)


_stdtr_rule = _rule(_stdtr_value, lambda out, df, t: 0.0, lambda out, df, t: _t_density(df, t))


def _stdtr(df, t):
    """scipy.special.stdtr(df, t), Student's t distribution function; d/dt = the t density.
    Bound: 1e-13 relative against mpmath for df in (0, 200] (betainc's domain), NaN above.
    Differentiating in df raises a TracingError naming the line."""
    df, t = _t(df), _t(t)
    return _no_derivative(_stdtr_rule(df, t), df, "the derivative of stdtr(df, t) in df")
