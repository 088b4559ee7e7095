"""scipy.special's ufuncs beyond the error and gamma functions, as compositions of primitives.

Every function here is built from the IR's primitives (``exp log log1p expm1 erfc gammaln
digamma sqrt ... where``) through the tracer, branch-free: a series, an asymptotic expansion or
a continued fraction runs a fixed number of terms on every element and :func:`_where` picks the
branch, so the fused loop vectorises. Functions whose value is an approximation get their
derivative from an analytic formula (a :class:`~tapejit.frontend.custom.custom_jvp` rule written with the
same primitives, so forward and reverse mode see IR), never from differentiating the
approximation; :func:`_rule` builds them from a table of partial derivatives.

An argument whose derivative is not computed (``gammainc``'s shape ``a``, ``zeta``'s order
``s``) passes through :func:`_no_derivative`: reverse or forward mode raises a
:class:`~tapejit.frontend.tracing.TracingError` naming the user's line, only when that argument is active.

Accuracy: each function's docstring states the bound that ``tests/test_scipy_special_more.py``
checks, as a relative error against mpmath (50 digits) or scipy, over the grid named there.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ...core import ops
from ..custom import custom_jvp
from ...core.ops import Op
from ..tracing import Tracer, TracingError, _build, _unary, _where, lift

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

    # the package's root (this module sits in a subfolder of it)
    here = os.path.dirname(os.path.abspath(sys.modules[__name__.split(".")[0]].__file__)) + os.sep
    frame = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        skip = ("numpy" + os.sep, "scipy" + os.sep, "<frozen")
        if not path.startswith(here) and not any(s in path for s in skip):
            return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}()"
        frame = frame.f_back
    return "<unknown location>"


#: A fixed-length recurrence (Horner's rule, a series, a continued fraction) is written with a
#: step of another form (the same IEEE result: negations are exact) every ``_BREAK`` steps, so
#: that no run of 16 identical steps exists for the re-roll pass (tapejit/passes/reroll/driver.py) to
#: turn into a loop over whole arrays: unrolled, the steps fuse into one vectorised loop.
_BREAK = 12


def _broken(k: int) -> bool:
    return k % _BREAK == _BREAK - 1


def _step_add(acc, term, k: int):
    """acc + term (as acc - (-term) on every ``_BREAK``-th step k)."""
    return acc - (-term) if _broken(k) else acc + term


def _horner(coefs, w):
    """sum coefs[k] w^(n-1-k) (highest power first)."""
    p = coefs[0]
    for k, c in enumerate(coefs[1:]):
        p = c - (-p) * w if _broken(k) else c + p * w
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


# Wichura's AS 241 (PPND16), Appl. Statist. 37 (1988) 477-484: Phi^-1(p) = q A(r) / B(r) with
# r = 0.180625 - q^2 for |q| = |p - 1/2| <= 0.425, else C(s - 1.6) / D(s - 1.6) for s = sqrt(-log
# min(p, 1 - p)) <= 5 and E(s - 5) / F(s - 5) beyond (coefficients lowest power first, as
# published; the leading 1 of each denominator included)
_AS241 = (
    ((3.3871328727963666080e0, 1.3314166789178437745e2, 1.9715909503065514427e3,
      1.3731693765509461125e4, 4.5921953931549871457e4, 6.7265770927008700853e4,
      3.3430575583588128105e4, 2.5090809287301226727e3),
     (1.0, 4.2313330701600911252e1, 6.8718700749205790830e2, 5.3941960214247511077e3,
      2.1213794301586595867e4, 3.9307895800092710610e4, 2.8729085735721942674e4,
      5.2264952788528545610e3)),
    ((1.42343711074968357734e0, 4.63033784615654529590e0, 5.76949722146069140550e0,
      3.64784832476320460504e0, 1.27045825245236838258e0, 2.41780725177450611770e-1,
      2.27238449892691845833e-2, 7.74545014278341407640e-4),
     (1.0, 2.05319162663775882187e0, 1.67638483018380384940e0, 6.89767334985100004550e-1,
      1.48103976427480074590e-1, 1.51986665636164571966e-2, 5.47593808499534494600e-4,
      1.05075007164441684324e-9)),
    ((6.65790464350110377720e0, 5.46378491116411436990e0, 1.78482653991729133580e0,
      2.96560571828504891230e-1, 2.65321895265761230930e-2, 1.24266094738807843860e-3,
      2.71155556874348757815e-5, 2.01033439929228813265e-7),
     (1.0, 5.99832206555887937690e-1, 1.36929880922735805310e-1, 1.48753612908506148525e-2,
      7.86869131145613259100e-4, 1.84631831751005468180e-5, 1.42151175831644588870e-7,
      2.04426310338993978564e-15)),
)  # fmt: skip


def _ndtri_value(p):
    """AS 241 branch-free: the three rationals' numerators and denominators are picked before
    one division; 1 - p is exact where it is used (p > 1/2)."""
    (a, b), (c, d), (e, f) = _AS241
    q = p - 0.5
    central = abs(q) <= 0.425
    r = 0.180625 - q * q
    s = np.sqrt(-np.log(_where(central, 0.5, _where(q < 0.0, p, 1.0 - p))))
    near = s <= 5.0
    sn, sf = s - 1.6, s - 5.0
    tail_num = _where(near, _horner(c[::-1], sn), _horner(e[::-1], sf))
    tail_den = _where(near, _horner(d[::-1], sn), _horner(f[::-1], sf))
    num = _where(central, q * _horner(a[::-1], r), tail_num)
    den = _where(central, _horner(b[::-1], r), tail_den)
    y = num / den
    y = _where(central | (q >= 0.0), y, -y)
    y = _where(p == 0.0, -np.inf, _where(p == 1.0, np.inf, y))
    return _where((p < 0.0) | (p > 1.0) | _isnan(p), np.nan, y)


#: ndtri(p) = Phi^-1(p) by Wichura's AS 241 (PPND16, no iteration); derivative sqrt(2 pi)
#: exp(y^2/2). Bound: 4 ulp against mpmath on (0, 1), 1e-300 included; -inf at 0, inf at 1,
#: NaN outside.
_ndtri = _rule(_ndtri_value, lambda out, p: _SQRT2PI * _exp_sq(out, 0.5))


# ----------------------------------------------------------------------------------------------
# Dawson's integral
#
# F(x) = exp(-x^2) int_0^x exp(t^2) dt is odd. For |x| < 3: F(x) = x P(u), P the degree-24
# Chebyshev interpolant of F(x)/x in u = x^2 / 4.5 - 1 (x^2 in [0, 9]); for |x| >= 3: F(x) =
# (1 + t H(v)) / (2x), t = 1/x^2, H the degree-34 Chebyshev interpolant of (2x F(x) - 1) / t in
# v = 18 t - 1 (t in [0, 1/9]; H(0) = 1/2 from the asymptotic series 2x F ~ sum (2k-1)!! t^k / 2^k,
# A&S 7.1.23 with DLMF 7.5.1). Interpolants computed with mpmath at 50 digits (F = x 1F1(1; 3/2;
# -x^2), DLMF 7.11.7), converted to the monomial basis and rounded; the derivative F' = 1 - 2x F
# is -t H(v) in the second piece, without the cancellation of 1 - 2x F.
_DAWSN_SMALL = (
    2.009919913658476e-11, -1.1154374602420818e-10, 4.694682090997492e-10, -2.350455531811878e-09,
    1.1585414250354117e-08, -5.313314181781086e-08, 2.3144443858566764e-07, -9.58976181880847e-07,
    3.7629631318222217e-06, -1.3937350068292178e-05, 4.856409770592128e-05,
    -0.00015859078735414473, 0.0004832749518603893, -0.0013675541266169441, 0.003573681438050378,
    -0.008569361394909119, 0.018718721149281914, -0.03693758274888355, 0.0652224941755122,
    -0.10197430148668132, 0.13964623329197556, -0.1659876871542871, 0.17095923645919792,
    -0.1552781319447835, 0.1310556263889567,
)
_DAWSN_LARGE = (
    -5.462349376208751e-05, 7.913028396567485e-05, 0.0004303967651775051, -0.0006956958779925127,
    -0.0014617866662858662, 0.002768942414295338, 0.0026740898958130116, -0.006550959816325251,
    -0.00241991879297574, 0.010107746548624006, -0.0003031655332201066, -0.010334419707765555,
    0.003818014468246043, 0.006425850774598373, -0.005116297700196385, -0.0011815319573969417,
    0.0032602624560129204, -0.0019319226696698356, -0.00014398682962609046, 0.0019929845204080155,
    -0.0019596337091703202, -0.0004634674671872593, 0.002438619872323392, -0.0009916860248089852,
    -0.0020828363142052445, 0.0017349544135446201, 0.0019198663790747149, -0.0017242778136689764,
    -0.0026227124383897934, 4.12050569008457e-05, 0.0029098418352170178, 0.005450583911488649,
    0.013026218115513948, 0.05859038989606698, 0.5490054781755227,
)


def _dawsn_parts(x):
    """(F(x), F'(x)) from the two interpolants above."""
    big = abs(x) >= 3.0
    xs = _where(big, 0.0, x)
    small = xs * _horner(_DAWSN_SMALL, xs * xs * (1.0 / 4.5) - 1.0)
    xb = _where(big, x, 3.0)
    t = 1.0 / (xb * xb)
    th = t * _horner(_DAWSN_LARGE, 18.0 * t - 1.0)
    large = (1.0 + th) / (2.0 * xb)
    return _where(big, large, small), _where(big, -th, 1.0 - 2.0 * x * small)


#: dawsn(x) = F(x), Dawson's integral (scipy.special.dawsn), derivative 1 - 2x F(x) (DLMF
#: 7.10). Bound: 4 ulp against mpmath on [-1e300, 1e300]; 0 at 0, +-0 at +-inf, NaN at NaN.
_dawsn = _rule(lambda x: _dawsn_parts(x)[0], lambda out, x: _dawsn_parts(x)[1])


# ----------------------------------------------------------------------------------------------
# Owen's T function
#
# T(h, a) = (1/2pi) int_0^a exp(-h^2 (1 + x^2) / 2) / (1 + x^2) dx (Owen, Ann. Math. Statist. 27,
# 1956), even in h, odd in a. For 0 <= a <= 1: exp(-h^2/2) / 2pi times the integral of exp(-(h
# x)^2 / 2) / (1 + x^2) over [0, b], b = min(a, 9/h) (the rest is below 1e-17 of it), by the
# 48-point Gauss-Legendre rule on [-b, b] (the integrand is even: 24 evaluations); its poles at +-i
# lie outside the rule's Bernstein ellipse and h b <= 9 bounds the Gaussian's variation. For a > 1
# the reflection T(h, a) = (Phi(h) Q(a h) + Phi(a h) Q(h)) / 2 - T(a h, 1/a) (h >= 0, Q = 1 -
# Phi; Owen 1956 eq. 2.3, written without the cancellation of 1/2 Phi(h) + 1/2 Phi(ah) -
# Phi(h) Phi(ah)), whose first derivative in the rounded product a h vanishes, so its rounding
# does not show.
_OWENS_NODES, _OWENS_WEIGHTS = (
    tuple(float(v) for v in u[24:]) for u in np.polynomial.legendre.leggauss(48)
)
_OWENS_CUT = 9.0  # h b beyond which exp(-(h x)^2 / 2) is negligible (exp(-40.5) / 9 < 1e-18)


def _owens_t_small(p, ap):
    """T(p, ap) for 0 <= p <= 40 and 0 <= ap <= 1 (the quadrature above)."""
    far = p * ap > _OWENS_CUT
    b = _where(far, _OWENS_CUT / _where(far, p, 1.0), ap)
    pb = p * b
    acc = None
    for k, (t, w) in enumerate(zip(_OWENS_NODES, _OWENS_WEIGHTS)):
        x = b * t
        y = pb * t
        term = w * np.exp(-0.5 * (y * y)) / (1.0 + x * x)
        acc = term if acc is None else _step_add(acc, term, k)
    return _exp_sq(p, -0.5) * b * acc * (1.0 / (2.0 * math.pi))


def _owens_t_value(h, a):
    hh = abs(h)
    hh = _where(hh > 40.0, 40.0, hh)  # T(40, a) underflows for every a
    aa = abs(a)
    big = aa > 1.0
    ah = aa * hh
    p = _where(big, _where(hh == 0.0, 0.0, _where(ah > 40.0, 40.0, ah)), hh)
    ap = _where(big, 1.0 / aa, aa)
    core = _owens_t_small(p, ap)
    refl = 0.5 * (_ndtr_value(hh) * _ndtr_value(-p) + _ndtr_value(p) * _ndtr_value(-hh)) - core
    t = _where(big, refl, core)
    return _where(a < 0.0, -t, t)


def _owens_t_dh(out, h, a):
    """-phi(h) erf(a h / sqrt 2) / 2 (|h| clamped at 40, where phi underflows)."""
    hc = _where(abs(h) > 40.0, 40.0, h)
    return -0.5 * _gauss_pdf(hc) * _unary(Op.ERF, a * hc * (1.0 / _SQRT2))


def _owens_t_da(out, h, a):
    """exp(-h^2 (1 + a^2) / 2) / (2 pi (1 + a^2)), both squares exact."""
    hc = _where(abs(h) > 40.0, 40.0, h)
    ah = a * hc
    ah = _where(hc == 0.0, 0.0, _where(abs(ah) > 40.0, 40.0, ah))
    return _exp_sq(hc, -0.5) * _exp_sq(ah, -0.5) / ((2.0 * math.pi) * (1.0 + a * a))


#: owens_t(h, a) = T(h, a) (scipy.special.owens_t), by the quadrature and reflection above;
#: partials -phi(h) erf(a h / sqrt 2) / 2 and exp(-h^2 (1 + a^2) / 2) / (2 pi (1 + a^2)).
#: Bound: 1e-14 relative against mpmath for |h| <= 37, any a (inf included); 0 beyond |h| = 40.
_owens_t = _rule(_owens_t_value, _owens_t_dh, _owens_t_da)


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
# each with a fixed number of terms (80), the fraction evaluated from its tail. The bound holds
# for a <= 50: larger a needs more terms (Temme's uniform expansion is not implemented).
_GAMMAINC_TERMS = 80


def _gamma_series(a, x):
    """sum_n x^n / ((a+1)...(a+n)), n < 80."""
    s, t = None, None
    for n in range(_GAMMAINC_TERMS):
        if t is None:
            t, s = 1.0, lift(1.0)
            continue
        t = -((-t) * x) / (a + float(n - 1)) if _broken(n) else t * x / (a + float(n - 1))
        s = _step_add(s, t, n)
    return s


def _gamma_fraction(a, x, terms: int = _GAMMAINC_TERMS):
    """The denominator of Legendre's continued fraction for Gamma(a, x) e^x x^-a."""
    f = x + float(2 * terms + 1) - a
    for k in range(terms - 1, -1, -1):
        r = float(k + 1) * (float(k + 1) - a)
        f = x + float(2 * k + 1) - a + (r / -f if _broken(k) else -(r / f))
    return f


def _gammainc_pq(a, x):
    """(P(a, x), Q(a, x)) for a > 0, x >= 0, each computed where it is the small one (the
    other is 1 minus it)."""
    ok = (a > 0.0) & (x > 0.0) & (x < np.inf)
    a1 = _where(ok, a, 1.0)
    x1 = _where(ok, x, 1.0)
    use_series = x1 < a1 + 1.0
    xs, xf = _where(use_series, x1, 0.5), _where(use_series, a1 + 2.0, x1)
    p = np.exp(a1 * np.log(xs) - xs - _gammaln(a1 + 1.0)) * _gamma_series(a1 + 1.0, xs)
    q = np.exp(a1 * np.log(xf) - xf - _gammaln(a1)) / _gamma_fraction(a1, xf)
    p_out = _where(use_series, p, 1.0 - q)
    q_out = _where(use_series, 1.0 - p, q)
    bad = (a < 0.0) | _isnan(a) | _isnan(x) | (x < 0.0) | ((a == 0.0) & (x == 0.0))
    edge_p = _where(x == 0.0, 0.0, 1.0)  # x = 0, x = inf, a = 0 (P(0, x) = 1 as scipy)
    p_out = _where(ok, p_out, _where(bad, np.nan, edge_p))
    q_out = _where(ok, q_out, _where(bad, np.nan, 1.0 - edge_p))
    return p_out, q_out


def _gamma_density(a, x):
    """d P(a, x) / dx = x^(a-1) e^-x / Gamma(a)."""
    d = np.exp((a - 1.0) * np.log(x) - x - _gammaln(a))
    return _where((x == 0.0) & (a == 1.0), 1.0, d)


_gammainc_rule = _rule(
    lambda a, x: _gammainc_pq(a, x)[0], lambda out, a, x: 0.0, lambda out, a, x: _gamma_density(a, x)
)
_gammaincc_rule = _rule(
    lambda a, x: _gammainc_pq(a, x)[1], lambda out, a, x: 0.0, lambda out, a, x: -_gamma_density(a, x)
)


def _gammainc(a, x):
    """scipy.special.gammainc(a, x) = P(a, x), the regularised lower incomplete gamma function;
    d/dx = x^(a-1) e^-x / Gamma(a). Bound: 1e-13 relative against mpmath for a in (0, 50],
    x in [0, 200] (from the prefactor's exp of a log x - x - log Gamma). Differentiating in a
    raises a TracingError naming the line."""
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
    cf = np.exp(-xf) / _gamma_fraction(lift(0.0), xf)
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
