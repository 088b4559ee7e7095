"""scipy.special's normal-distribution family, as compositions of primitives with analytic
derivatives (the approach and the helpers are :mod:`.np_special`'s): ``ndtr``, ``log_ndtr``,
``ndtri``, the scaled complementary error function ``erfcx``, Dawson's integral ``dawsn`` and
Owen's ``owens_t``. Each bound is stated where the function is defined and checked by
``tests/test_scipy_special_more.py`` against mpmath.
"""

from __future__ import annotations

import math

import numpy as np

from ...core.ops import Op
from ..tracing import _unary, _where
from .np_special import _SQRT2, _SQRT2PI, _SQRTPI, _exp_sq, _horner, _isnan, _rule, _step_add

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
    xl = _where(low, _where(x < -40.0, -40.0, x), -1.0)  # Phi(-40) underflows to 0 already;
    # below, x^2 would overflow (x = -inf, -1e300 gave NaN for 0)
    tail = 0.5 * _erfcx_value(-xl / _SQRT2) * _exp_sq(xl, -0.5)
    return _where(low, tail, 0.5 * _erfc(-_where(low, 0.0, x) / _SQRT2))


def _gauss_pdf(x):
    return _exp_sq(x, -0.5) / _SQRT2PI


#: ndtr(x) = Phi(x), the standard normal CDF; derivative the density exp(-x^2/2)/sqrt(2 pi).
#: Bound: 4 ulp against mpmath on [-38, 9] (scipy: up to ~1000 ulp near -37).
_ndtr = _rule(_ndtr_value, lambda out, x: _gauss_pdf(x))


def _log_ndtr_parts(x):
    """(log Phi(x), phi(x) / Phi(x)) from one erfc(|x| / sqrt 2) (shared with erfcx's), one
    erfcx and one exp(-x^2 / 2): Q = Phi(-|x|) is erfc / 2 for |x| <= 1 and erfcx exp(-x^2 / 2)
    / 2 beyond (the square exact, as in ndtr); below -1 log(erfcx / 2) - x^2 / 2 and sqrt(2 /
    pi) / erfcx (no underflow)."""
    ax = abs(x)
    y = ax * (1.0 / _SQRT2)
    ec = _erfc(_where(y >= 20.0, 0.0, y))  # the node erfcx computes below 20
    e = _erfcx_value(y)
    big = ax > 1.0
    g = _exp_sq(_where(ax > 40.0, 40.0, ax), -0.5)  # exp(-x^2/2): 0 beyond 40 (underflow)
    q = _where(big, 0.5 * e * g, 0.5 * ec)
    low = x < -1.0
    xl = _where(low, x, -1.0)
    logs = np.log(_where(low, 0.5 * e, q))
    value = _where(low, logs - 0.5 * xl * xl, _where(x > 0.0, np.log1p(-q), logs))
    phi_num = _where(low, 2.0 / _SQRT2PI, g * (1.0 / _SQRT2PI))
    deriv = phi_num / _where(low, e, _where(x > 0.0, 1.0 - q, q))
    return value, deriv


#: log_ndtr(x) = log Phi(x): log(erfcx(-x/sqrt 2)/2) - x^2/2 below -1 (no underflow for any
#: x), log1p(-Phi(-x)) above 0. Bound: 4 ulp against mpmath on [-1e150, 40].
_log_ndtr = _rule(lambda x: _log_ndtr_parts(x)[0], lambda out, x: _log_ndtr_parts(x)[1])


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

