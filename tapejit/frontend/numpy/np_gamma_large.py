"""The incomplete gamma functions P(a, x), Q(a, x) for large shapes (a > 50; used by
:func:`.np_gamma._gammainc_pq`): the pieces that do not fit the fixed-length series and fraction
there. With lambda = x / a and phi = lambda - 1 - log lambda (>= 0),

* x^a e^-x / Gamma(a) = exp(-a phi + log(a / (2 pi)) / 2 - S(a)) (S: Stirling's series of log
  Gamma), so the large logs a log x, x and log Gamma(a) never meet (their rounding cost
  |a log x| ulps: 1e-9 relative at a = 1e6); the series and the fraction use it for
  lambda < 1/2 and lambda > 1.3, where their 72 terms converge for every a;
* 1/2 <= lambda <= 1.3 (|eta| <= 0.63): Temme's uniform asymptotic expansion (N. M. Temme,
  SIAM J. Math. Anal. 10 (1979) 757-766; DLMF 8.12.3, 8.12.8-8.12.10) with eta = sign(lambda -
  1) sqrt(2 phi):  Q(a, x) = erfc(eta sqrt(a/2)) / 2 + R,  P(a, x) = erfc(-eta sqrt(a/2)) / 2 - R,
  R = e^(-a eta^2 / 2) / sqrt(2 pi a) sum_k c_k(eta) a^-k. Since e^(-a eta^2/2) = e^(-a phi)
  and erfc(y) = erfcx(y) e^(-y^2), y^2 = a phi, the smaller of P and Q is
  e^(-a phi) (erfcx(|y|) / 2 + sign(eta) sum_k c_k a^-k / sqrt(2 pi a)): relative accuracy down
  to underflow, no cancellation beyond a factor 2 (the two terms have opposite signs only on
  the P side, where their ratio is (1 - lambda) / |eta| < 1); the larger one is 1 minus it.

The c_k(eta) are power series in eta (their closed forms cancel near eta = 0), computed at
import in exact rational arithmetic by :func:`_temme_series` from the definitions in DLMF
8.12.9-8.12.10 (nothing is copied from another implementation): c_0 = 1/(lambda - 1) - 1/eta,
c_k = c_{k-1}'(eta) / eta + beta_k / (lambda - 1), where beta_k (= (-1)^k g_k, g_k Stirling's
coefficients of Gamma*(a), DLMF 5.11.3-5.11.4: -1/12, 1/288, 139/51840, ...) is the one number
that cancels the pole at eta = 0. They were checked against mpmath's incomplete gamma (40
digits): with the degrees of :data:`_TEMME_DEGREES` the truncated expansion is within 1e-23
relative for a >= 50, |eta| <= 0.7 (each term left out is below 1e-19 at a = 50, |eta| = 0.63).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..tracing import _where
from .np_normal import _erfcx_value
from .np_special import _horner

#: The Temme region in lambda = x / a (the series below it, the fraction above it) and its
#: largest |eta| (at lambda = 1/2: eta = -0.6215; at 1.3: 0.2744)
TEMME_LAMBDA_LO, TEMME_LAMBDA_HI = 0.5, 1.3

#: The number of terms of the power series of c_0 .. c_9 in eta: the terms with
#: |c_kj| 0.63^j 50^-k > 1e-19 (c_10 and beyond have none)
_TEMME_DEGREES = (23, 21, 19, 17, 15, 13, 11, 9, 6, 3)


def _temme_series(degrees: tuple[int, ...]) -> tuple[tuple[float, ...], ...]:
    """The coefficients (lowest power first) of c_k(eta), k < len(degrees), to degrees[k] terms.

    t = lambda - 1 as a series in eta: eta^2 / 2 = t - log(1 + t) gives eta d eta = t dt / (1 + t),
    i.e. (t^2)' / 2 = eta (1 + t), solved order by order (t = eta + eta^2/3 + eta^3/36 - ...);
    1/t = b(eta) / eta with b = 1 / (t / eta), so c_0 = 1/t - 1/eta = sum_j b_(j+1) eta^j; then
    c_k = c_(k-1)' / eta + beta_k / t term by term, beta_k = -[eta^1] c_(k-1) (no pole)."""
    n = max(d + 2 * k for k, d in enumerate(degrees)) + 2
    t = [Fraction(0), Fraction(1)] + [Fraction(0)] * n
    for m in range(2, n + 1):
        rest = sum(t[i] * t[m + 1 - i] for i in range(2, m))
        t[m] = (Fraction(2, m + 1) * t[m - 1] - rest) / 2
    q = t[1:]  # t / eta, q[0] = 1
    b = [Fraction(1)] + [Fraction(0)] * (n - 1)
    for m in range(1, n):
        b[m] = -sum(q[j] * b[m - j] for j in range(1, m + 1))
    c = b[1:]
    out = []
    for k, deg in enumerate(degrees):
        if k:
            beta = -c[1]
            c = [(j + 2) * c[j + 2] + beta * b[j + 1] for j in range(len(c) - 2)]
        out.append(tuple(float(v) for v in c[:deg]))
    return tuple(out)


_TEMME = _temme_series(_TEMME_DEGREES)

#: phi(t) = t - log1p(t) = u (t - 2 u^2 sum_k u^(2k) / (2k + 3)) with u = t / (2 + t) (from
#: log1p(t) = 2 atanh(u) and t - 2u = t u): 17 terms reach 1e-17 for |u| <= 1/3 (t in [-1/2, 1])
_PHI_SERIES = tuple(1.0 / (2 * k + 3) for k in range(17))


def _phi(t, lam):
    """lambda - 1 - log lambda for t = lambda - 1 and lambda = x / a, both given (x > 0): the
    series above for t in [-1/2, 1] (the difference cancels at t = 0), the difference beyond
    (a cancellation of at most 3.6: a few ulps)."""
    near = (t >= -0.5) & (t <= 1.0)
    tn = _where(near, t, 0.0)
    u = tn / (2.0 + tn)
    u2 = u * u
    series = u * (tn - 2.0 * u2 * _horner(_PHI_SERIES[::-1], u2))
    return _where(near, series, t - np.log(_where(near, 1.0, lam)))


def _log_prefactor(a, a_phi, stirling):
    """log(x^a e^-x / Gamma(a)) = -a phi + log(a / (2 pi)) / 2 - S(a), S(a) = ``stirling`` (the
    tail of Stirling's series of log Gamma(a))."""
    return -a_phi + 0.5 * np.log(a * (1.0 / (2.0 * math.pi))) - stirling


def _temme_smaller(a, phi, a_phi, lower):
    """The smaller of P(a, x) and Q(a, x) by Temme's expansion (module docstring): P where
    ``lower`` (x < a, eta < 0), Q elsewhere, for a >= 50 and |eta| <= 0.63 (callers clamp)."""
    eta = np.sqrt(2.0 * phi)
    eta = _where(lower, -eta, eta)
    ia = 1.0 / a
    acc = None
    for k in range(len(_TEMME) - 1, -1, -1):
        ck = _horner(_TEMME[k][::-1], eta)
        acc = ck if acc is None else ck + acc * ia
    s = acc / np.sqrt((2.0 * math.pi) * a)
    y = np.sqrt(a_phi)  # |eta| sqrt(a / 2)
    return np.exp(-a_phi) * (0.5 * _erfcx_value(y) + _where(lower, -s, s))
