"""scipy.special's ufuncs beyond the error and gamma functions, as compositions of primitives.

Every function here is built from the IR's primitives (``exp log log1p expm1 erfc gammaln
digamma sqrt ... where``) through the tracer, branch-free: a series, an asymptotic expansion or
a continued fraction runs a fixed number of terms on every element and :func:`_where` picks the
branch, so the fused loop vectorises. Functions whose value is an approximation get their
derivative from an analytic formula (a :class:`~tapejit.custom.custom_jvp` rule written with the
same primitives, so forward and reverse mode see IR), never from differentiating the
approximation; :func:`_rule` builds them from a table of partial derivatives.

An argument whose derivative is not computed (``gammainc``'s shape ``a``, ``zeta``'s order
``s``) passes through :func:`_no_derivative`: reverse or forward mode raises a
:class:`~tapejit.tracing.TracingError` naming the user's line, only when that argument is active.

Accuracy: each function's docstring states the bound that ``tests/test_scipy_special_more.py``
checks, as a relative error against mpmath (50 digits) or scipy, over the grid named there.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from . import ops
from .custom import custom_jvp
from .ops import Op
from .tracing import Tracer, TracingError, _build, _unary, _where, lift

_SQRT2 = math.sqrt(2.0)
_SQRTPI = math.sqrt(math.pi)
_SQRT2PI = math.sqrt(2.0 * math.pi)
_EULER = 0.57721566490153286061


def _t(x) -> Tracer:
    return lift(x)


def lifted(f: Callable) -> Callable:
    """``f`` called with its arguments as tracers (a ufunc may get numpy arrays next to them)."""
    return lambda *args: f(*(_t(a) for a in args))


# ----------------------------------------------------------------------------------------------
# Derivative rules and guards


def _rule(fun: Callable, *partials: Callable | None) -> Callable:
    """``fun(*xs)`` with the JVP ``sum_i partials[i](out, *xs) * t_i``: a ``custom`` node whose
    rule is IR (forward mode uses it, reverse mode its transpose). Every argument has a
    partial: pass non-differentiable arguments through :func:`_no_derivative` first."""
    f = custom_jvp(fun)

    def jvp(primals, tangents):
        out = fun(*primals)
        tan = None
        for p, t in zip(partials, tangents):
            term = p(out, *primals) * t
            tan = term if tan is None else tan + term
        return out, tan

    f.defjvp(jvp)
    return f


class _NoDerivative:
    """The rule of a ``custom`` node that passes its value on and raises a
    :class:`TracingError` (naming the user's line) when reverse or forward mode reaches it."""

    def __init__(self, what: str, site: str):
        self.message = f"{site}: {what} is not implemented (tapejit computes no derivative there)"

    def __repr__(self) -> str:  # deterministic: the cache key prints it
        return f"no_derivative({self.message.rsplit(': ', 1)[-1]})"

    def vjp(self, g, out, *args):
        raise TracingError(self.message)

    def jvp(self, t, out, *args):
        raise TracingError(self.message)


class _PassOn:
    """The rule of the node joining a guard to a result: the result's cotangent passes on, the
    guard gets a zero (so the guard's own rule runs exactly when its input is active)."""

    def __repr__(self) -> str:
        return "pass_on"

    def vjp(self, g, out, value, guard):
        return g, ops.const(0.0, guard.shape)

    def jvp(self, t, out, value, guard):
        return t[0]


_PASS_ON = _PassOn()


def _no_derivative(result, arg, what: str):
    """``result``, joined to a guard on ``arg``: differentiating through ``arg`` raises a
    TracingError naming the user's line and ``what``; differentiating ``result`` w.r.t. other
    arguments is unaffected."""
    arg = _t(arg)
    rule = _NoDerivative(what, _user_site())
    guard = _build(lambda a: ops.make(Op.CUSTOM, a, attrs=(rule,)), arg)
    return _build(lambda r, gd: ops.make(Op.CUSTOM, r, gd, attrs=(_PASS_ON,)), result, guard)


def _user_site() -> str:
    """``file:line in function`` of the innermost frame outside tapejit, numpy and scipy."""
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        skip = ("numpy" + os.sep, "scipy" + os.sep, "<frozen")
        if not path.startswith(here) and not any(s in path for s in skip):
            return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}()"
        frame = frame.f_back
    return "<unknown location>"


def _horner(coefs, w):
    """sum coefs[k] w^(n-1-k) (highest power first)."""
    p = coefs[0]
    for c in coefs[1:]:
        p = c + p * w
    return p


def _isnan(x):
    return x != x


def _exp_sq(x, sign: float):
    """exp(sign * x^2) with x^2 as an exact double-double (Veltkamp's split): the rounding of
    x^2 would cost |x^2| ulps of relative error (Dekker, Numer. Math. 18, 1971)."""
    c = x * 134217729.0  # 2^27 + 1
    hi = c - (c - x)
    lo = x - hi
    h = x * x
    err = ((hi * hi - h) + 2.0 * hi * lo) + lo * lo  # x^2 = h + err exactly (up to 2^-106)
    return np.exp(sign * h) * (1.0 + sign * err)


# ----------------------------------------------------------------------------------------------
# x log y and the entropies (scipy.special's convex-analysis functions)


def _xlogy_value(x, y):
    safe = _where(x == 0.0, 1.0, y)
    r = _where(x == 0.0, 0.0, x * np.log(safe))
    return _where(_isnan(y), np.nan, r)


def _xlog1py_value(x, y):
    safe = _where(x == 0.0, 0.0, y)
    r = _where(x == 0.0, 0.0, x * np.log1p(safe))
    return _where(_isnan(y), np.nan, r)


_xlogy_rule = _rule(
    _xlogy_value,
    lambda out, x, y: np.log(y),  # at x = 0 too: d/dx (x log y) = log y (as JAX)
    lambda out, x, y: _where(x == 0.0, 0.0, x / y),
)
_xlog1py_rule = _rule(
    _xlog1py_value,
    lambda out, x, y: np.log1p(y),
    lambda out, x, y: _where(x == 0.0, 0.0, x / (1.0 + y)),
)


def _xlogy(x, y):
    """x * log(y), 0 where x == 0 and y is not NaN (scipy.special.xlogy); d/dx = log(y), also
    at x = 0, and d/dy = x / y (0 at x = 0). Within 1 ulp of x * log(y)."""
    return _xlogy_rule(_t(x), _t(y))


def _xlog1py(x, y):
    """x * log1p(y), 0 where x == 0 and y is not NaN; d/dx = log1p(y) at x = 0 too."""
    return _xlog1py_rule(_t(x), _t(y))


def _log_ratio(x, y):
    """log(x / y), from log x - log y where x / y over- or underflows."""
    r = x / y
    ok = (r > 0.0) & (r < np.inf)
    return _where(ok, np.log(_where(ok, r, 1.0)), np.log(x) - np.log(y))


def _entr_value(x):
    r = -x * np.log(_where(x > 0.0, x, 1.0))
    return _where(x > 0.0, r, _where(x == 0.0, 0.0, _where(_isnan(x), np.nan, -np.inf)))


def _rel_entr_value(x, y):
    both = (x > 0.0) & (y > 0.0)
    r = x * _log_ratio(_where(both, x, 1.0), _where(both, y, 1.0))
    r = _where(both, r, _where((x == 0.0) & (y >= 0.0), 0.0, np.inf))
    return _where(_isnan(x) | _isnan(y), np.nan, r)


def _kl_div_value(x, y):
    both = (x > 0.0) & (y > 0.0)
    r = x * _log_ratio(_where(both, x, 1.0), _where(both, y, 1.0)) - x + y
    r = _where(both, r, _where((x == 0.0) & (y >= 0.0), y, np.inf))
    return _where(_isnan(x) | _isnan(y), np.nan, r)


#: entr(x) = -x log x; rel_entr(x, y) = x log(x / y); kl_div(x, y) = x log(x / y) - x + y
#: (scipy's conventions at 0 and outside the domain). Partials: d entr = -log x - 1; d rel_entr
#: = (log(x / y) + 1, -x / y); d kl_div = (log(x / y), 1 - x / y). Within 2 ulp of scipy
#: (which computes the same formulas) where x / y neither over- nor underflows, and of
#: mpmath where it does (scipy gives 0 or inf there).
_entr = _rule(_entr_value, lambda out, x: -np.log(x) - 1.0)
_rel_entr = _rule(
    _rel_entr_value, lambda out, x, y: _log_ratio(x, y) + 1.0, lambda out, x, y: -x / y
)
_kl_div = _rule(_kl_div_value, lambda out, x, y: _log_ratio(x, y), lambda out, x, y: 1.0 - x / y)


# ----------------------------------------------------------------------------------------------
# The normal distribution and the scaled complementary error function


def _erfc(x):
    return _unary(Op.ERFC, x)


# erfcx(x) ~ 1/(x sqrt(pi)) sum_k (-1)^k (2k-1)!! / (2 x^2)^k for x >= 20 (A&S 7.1.23): ten
# terms leave < 1e-17 relative at x = 20; below, erfc(x) exp(x^2) with x^2 as a double-double
_ERFCX_ASYM = tuple(
    (-1.0) ** k * math.prod(range(1, 2 * k, 2)) / 2.0**k for k in range(10)
)  # coefficients of z^k, z = 1/x^2


def _erfcx_value(x):
    big = x >= 20.0
    xb = _where(big, x, 20.0)
    z = 1.0 / (xb * xb)
    asym = _horner(_ERFCX_ASYM[::-1], z) / (xb * _SQRTPI)
    xs = _where(big, 0.0, x)
    direct = _erfc(xs) * _exp_sq(xs, 1.0)
    direct = _where(x < -26.7, np.inf, direct)  # 2 exp(x^2) overflows
    return _where(big, asym, direct)


def _erfcx_derivative(out, x):
    """2 x erfcx(x) - 2/sqrt(pi); for x >= 20 the derivative of the asymptotic series (the
    difference cancels there)."""
    big = x >= 20.0
    xb = _where(big, x, 20.0)
    z = 1.0 / (xb * xb)
    d = tuple(-(2 * k + 1) * c for k, c in enumerate(_ERFCX_ASYM))
    asym = _horner(d[::-1], z) * z / _SQRTPI
    return _where(big, asym, 2.0 * x * out - 2.0 / _SQRTPI)


#: erfcx(x) = exp(x^2) erfc(x) (scipy.special.erfcx): erfc times an exp of the exact square
#: below 20, the asymptotic series above (A&S 7.1.23). Bound: 4 ulp (relative 1e-15) against
#: mpmath on [-26, 1e300]; inf below -26.64, where exp(x^2) overflows.
_erfcx = _rule(_erfcx_value, _erfcx_derivative)


def _ndtr_value(x):
    """Phi(x) = erfc(-x / sqrt 2) / 2; below -1 as erfcx(-x / sqrt 2) exp(-x^2 / 2) / 2 with
    the square exact (erfc of the rounded x / sqrt 2 would be |x|^2 ulps off far out)."""
    low = x < -1.0
    xl = _where(low, x, -1.0)
    tail = 0.5 * _erfcx_value(-xl / _SQRT2) * _exp_sq(xl, -0.5)
    return _where(low, tail, 0.5 * _erfc(-_where(low, 0.0, x) / _SQRT2))


def _gauss_pdf(x):
    return _exp_sq(x, -0.5) / _SQRT2PI


#: ndtr(x) = Phi(x), the standard normal CDF; derivative the density exp(-x^2/2)/sqrt(2 pi).
#: Bound: 4 ulp against mpmath on [-38, 9] (scipy: up to ~1000 ulp near -37).
_ndtr = _rule(_ndtr_value, lambda out, x: _gauss_pdf(x))


def _log_ndtr_value(x):
    low = x < -1.0
    xl = _where(low, x, -1.0)
    tail = np.log(0.5 * _erfcx_value(-xl / _SQRT2)) - 0.5 * xl * xl
    xm = _where(low, 0.0, x)
    high = np.log1p(-_ndtr_value(-xm))  # log(1 - Phi(-x)): exact as Phi -> 1
    mid = np.log(0.5 * _erfc(-xm / _SQRT2))
    return _where(low, tail, _where(xm > 0.0, high, mid))


def _log_ndtr_derivative(out, x):
    """phi(x) / Phi(x): below -1 as sqrt(2/pi) / erfcx(-x / sqrt 2) (no underflow)."""
    low = x < -1.0
    xl = _where(low, x, -1.0)
    tail = (2.0 / _SQRT2PI) / _erfcx_value(-xl / _SQRT2)
    xm = _where(low, 0.0, x)
    return _where(low, tail, _gauss_pdf(xm) / _ndtr_value(xm))


#: log_ndtr(x) = log Phi(x): log(erfcx(-x/sqrt 2)/2) - x^2/2 below -1 (no underflow for any
#: x), log1p(-Phi(-x)) above 0. Bound: 4 ulp against mpmath on [-1e150, 40].
_log_ndtr = _rule(_log_ndtr_value, _log_ndtr_derivative)


def _ndtri_value(p):
    from .np_math import _erfcinv

    return -_SQRT2 * _erfcinv(2.0 * p)


#: ndtri(p) = Phi^-1(p) = -sqrt(2) erfcinv(2p) (2p is exact); derivative sqrt(2 pi) exp(y^2/2).
#: Bound: 4 ulp against mpmath on (0, 1), 1e-300 included; -inf at 0, inf at 1, NaN outside.
_ndtri = _rule(_ndtri_value, lambda out, p: _SQRT2PI * _exp_sq(out, 0.5))


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


def _stirling_tail(z):
    w = 1.0 / (z * z)
    return _horner(_STIRLING[::-1], w) / z


def _log_poch_large(z, m):
    """log(Gamma(z + m) / Gamma(z)) for z, z + m >= 10, without subtracting two log Gammas:
    m log z + (z + m - 1/2) log1p(m / z) - m + the difference of the Stirling tails."""
    return (
        m * np.log(z)
        + (z + m - 0.5) * np.log1p(m / z)
        - m
        + (_stirling_tail(z + m) - _stirling_tail(z))
    )


def _poch_value(z, m):
    from .np_math import _gammasgn

    zm = z + m
    large = (z >= 10.0) & (zm >= 10.0)
    lg = _log_poch_large(_where(large, z, 10.0), _where(large, m, 0.0))
    small = _gammaln(zm) - _gammaln(z)
    sign = _gammasgn(zm) * _gammasgn(z)
    r = sign * np.exp(_where(large, lg, small))
    pole_z = (z <= 0.0) & (z == np.floor(z))
    pole_zm = (zm <= 0.0) & (zm == np.floor(zm))
    # Gamma(z + m)/Gamma(z) with z a pole: a finite ratio when z + m is one too (a product of
    # integers), computed as (-1)^m Gamma(1 - z) / Gamma(1 - z - m); 0 when only z is
    refl = np.exp(_gammaln(1.0 - z) - _gammaln(1.0 - zm)) * (1.0 - 2.0 * (abs(m) % 2.0))
    r = _where(pole_z, _where(pole_zm, refl, 0.0), r)
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
# Hurwitz zeta and polygamma

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


def _polygamma(n, x):
    """psi^(n)(x) = (-1)^(n+1) n! zeta(n + 1, x) for integer n >= 1, digamma for n = 0
    (DLMF 25.11.12), x > 0. scipy.special.polygamma itself converts with np.asarray and does
    not trace; this is what the name ``polygamma`` maps to in tapejit's table."""
    n, x = _t(n), _t(x)
    fac = (1.0 - 2.0 * (n % 2.0)) * -1.0 * np.exp(_gammaln(n + 1.0))
    z = _zeta_of(_where(n >= 1.0, n + 1.0, 2.0), x)
    return _where(n == 0.0, _digamma(x), fac * z)
