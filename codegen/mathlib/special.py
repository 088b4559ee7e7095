"""The special functions as branch-free LLVM IR: erf and erfc (Sun's fdlibm ``s_erf.c``),
lgamma (scipy's gammaln) and digamma (psi) — see the comments above each for the method, the
sources and the fits made here. Every range is computed and the right one selected, so loops of
them vectorise.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

from ...core.ops import Op

from .core import (
    F64,
    LN2_HI,
    LN2_LO,
    MATH,
    MIN_NORMAL,
    TWO_THIRDS,
    _PI,
    Math,
    _bits,
    _c,
    _double,
    _eq,
    _exp_core,
    _fast_two_sum,
    _fma,
    _gt,
    _horner,
    _i,
    _intrinsic,
    _isnan,
    _lt,
    _reduce_exponent,
    _split,
    _two_sum,
)

# ----------------------------------------------------------------------------------------------
# erf and erfc: the method and coefficients of Sun's fdlibm s_erf.c (1993; also FreeBSD msun,
# openlibm): four ranges of |x| — [0, 0.84375): x + x R(x^2) with R a rational approximation;
# [0.84375, 1.25): a constant plus a rational function of |x| - 1; [1.25, 28): erfc(x) =
# exp(-z^2 - 0.5625) exp((z - x)(z + x) + R/S) / x with z = x with its low 32 bits cleared (so
# z^2 is exact) and R/S rational in 1/x^2 (two sets, split at 1/0.35); beyond 28 the limits.
# Here every range is computed and the right one selected, so loops of it vectorise.

_ERX = 8.45062911510467529297e-01  # erf(1) rounded to single precision
_EFX8 = 1.02703333676410069053e00  # 8 * (2/sqrt(pi) - 1)
_ERF_PP = (1.28379167095512558561e-01, -3.25042107247001499370e-01, -2.84817495755985104766e-02,
           -5.77027029648944159157e-03, -2.37630166566501626084e-05)  # fmt: skip
_ERF_QQ = (1.0, 3.97917223959155352819e-01, 6.50222499887672944485e-02,
           5.08130628187576562776e-03, 1.32494738004321644526e-04, -3.96022827877536812320e-06)  # fmt: skip
_ERF_PA = (-2.36211856075265944077e-03, 4.14856118683748331666e-01, -3.72207876035701323847e-01,
           3.18346619901161753674e-01, -1.10894694282396677476e-01, 3.54783043256182359371e-02,
           -2.16637559486879084300e-03)  # fmt: skip
_ERF_QA = (1.0, 1.06420880400844228286e-01, 5.40397917702171048937e-01,
           7.18286544141962662868e-02, 1.26171219808761642112e-01, 1.36370839120290507362e-02,
           1.19844998467991074170e-02)  # fmt: skip
_ERF_RA = (-9.86494403484714822705e-03, -6.93858572707181764372e-01, -1.05586262253232909814e01,
           -6.23753324503260060396e01, -1.62396669462573470355e02, -1.84605092906711035994e02,
           -8.12874355063065934246e01, -9.81432934416914548592e00)  # fmt: skip
_ERF_SA = (1.0, 1.96512716674392571292e01, 1.37657754143519042600e02, 4.34565877475229228821e02,
           6.45387271733267880336e02, 4.29008140027567833386e02, 1.08635005541779435134e02,
           6.57024977031928170135e00, -6.04244152148580987438e-02)  # fmt: skip
_ERF_RB = (-9.86494292470009928597e-03, -7.99283237680523006574e-01, -1.77579549177547519889e01,
           -1.60636384855821916062e02, -6.37566443368389627722e02, -1.02509513161107724954e03,
           -4.83519191608651397019e02)  # fmt: skip
_ERF_SB = (1.0, 3.03380607434824582924e01, 3.25792512996573918826e02, 1.53672958608443695994e03,
           3.19985821950859553908e03, 2.55305040643316442583e03, 4.74528541206955367215e02,
           -2.24409524465858183362e01)  # fmt: skip


def _erf_parts(b, x):
    """(|x| ranges, and each range's erf(|x|) and erfc(|x|) pieces) shared by erf and erfc."""
    ax = _intrinsic(b, "llvm.fabs", x)
    # [0, 0.84375)
    z = b.fmul(x, x)
    y = b.fdiv(_horner(b, z, _ERF_PP), _horner(b, z, _ERF_QQ))
    xy = b.fmul(x, y)
    # [0.84375, 1.25)
    s1 = b.fsub(ax, _c(1.0))
    pq = b.fdiv(_horner(b, s1, _ERF_PA), _horner(b, s1, _ERF_QA))
    # [1.25, 28): r / |x| = erfc(|x|)
    inv = b.fdiv(_c(1.0), b.fmul(ax, ax))
    near = _lt(b, ax, _c(1 / 0.35))
    rs = b.select(
        near,
        b.fdiv(_horner(b, inv, _ERF_RA), _horner(b, inv, _ERF_SA)),
        b.fdiv(_horner(b, inv, _ERF_RB), _horner(b, inv, _ERF_SB)),
    )
    zz = _double(b, b.and_(_bits(b, ax), _i(0xFFFFFFFF00000000)))
    # exp(-z^2 - 0.5625 + ((z - x)(z + x) + R/S)): the exact first part and the small second
    # summed as a double-double, so one exponential (one rounding) serves both (fdlibm takes
    # two exps, each rounding once)
    head = b.fsub(b.fneg(b.fmul(zz, zz)), _c(0.5625))  # exact: z has 21 significant bits
    hi, lo = _two_sum(b, head, b.fadd(b.fmul(b.fsub(zz, ax), b.fadd(zz, ax)), rs))
    low = _lt(b, hi, _c(-746.0))  # exp underflows to 0 below -745.2: clamp, drop lo
    e = _exp_core(b, b.select(low, _c(-746.0), hi), b.select(low, _c(0.0), lo))
    tail = b.fdiv(e, ax)  # erfc(|x|) for |x| in [1.25, 28)
    return ax, xy, pq, tail


def _erf(b, x):
    ax, xy, pq, tail = _erf_parts(b, x)
    small = b.select(
        _lt(b, ax, _c(2.0**-28)),
        b.fmul(_c(0.125), b.fadd(b.fmul(_c(8.0), x), b.fmul(_c(_EFX8), x))),  # no underflow
        b.fadd(x, xy),
    )
    mid = _intrinsic(b, "llvm.copysign", b.fadd(_c(_ERX), pq), x)
    big = _intrinsic(b, "llvm.copysign", b.select(_lt(b, ax, _c(6.0)), b.fsub(_c(1.0), tail), _c(1.0)), x)
    r = b.select(_lt(b, ax, _c(0.84375)), small, b.select(_lt(b, ax, _c(1.25)), mid, big))
    return b.select(_isnan(b, x), x, r)


def _erfc(b, x):
    ax, xy, pq, tail = _erf_parts(b, x)
    negative = _lt(b, x, _c(0.0))
    small = b.select(
        _lt(b, x, _c(0.25)),
        b.fsub(_c(1.0), b.fadd(x, xy)),
        b.fsub(_c(0.5), b.fadd(xy, b.fsub(x, _c(0.5)))),
    )
    mid = b.select(
        negative, b.fadd(_c(1.0), b.fadd(_c(_ERX), pq)), b.fsub(_c(1.0 - _ERX), pq)
    )
    tail = b.select(_lt(b, ax, _c(28.0)), tail, _c(0.0))
    big = b.select(negative, b.fsub(_c(2.0), tail), tail)
    r = b.select(_lt(b, ax, _c(0.84375)), small, b.select(_lt(b, ax, _c(1.25)), mid, big))
    return b.select(_isnan(b, x), x, r)


# ----------------------------------------------------------------------------------------------
# lgamma (log |Gamma(x)|, scipy's gammaln) and digamma (psi), both within 2 ulp of mpmath for
# every x > 0 — their zeros (lgamma: 1 and 2; psi: x0 = 1.4616...) included, where the error stays
# relative — and for x < 0 away from the zeros of the reflection formula (see the MATH rows).
#
# Method (no code copied; the structure follows the cited sources):
#
# * psi around its positive zero: psi(y) = t (Y0 + Y1 t + P(t)/Q(t)) with t = y - x0 and x0 split
#   in two doubles (Cephes psi.c and Boost digamma.hpp do the same: Boost's digamma_imp_1_2 writes
#   psi = (x - root) (Y + R(x - 1)) with the root in three parts). y - X0H is exact (Sterbenz),
#   so t is the double-double th - X0L; th Y0 and th^2 Y1 are formed exactly (fma), and the
#   rational part — fitted here to be small (|P/Q| <= 6% of the total) — is the only rounded
#   term, so the relative error stays bounded as t -> 0. Used for y in [1, x0 + 1]; 0 < x < 1
#   goes through psi(x) = psi(x + 1) - 1/x (no cancellation: psi(x + 1) > -0.58, 1/x > 1, the
#   reciprocal as a double-double), so no recurrence sum is needed anywhere.
# * psi for x >= x0 + 1: log x - 1/(2x) - z H(z), z = 1/x^2, H a rational fit on the whole range
#   (the asymptotic series psi ~ log x - 1/(2x) - sum B_2k / (2k x^2k) of Boost's
#   digamma_imp_large only converges above ~10; a (5, 5) rational in z replaces both it and the
#   recurrence), with log x as a double-double (:func:`_log_dd_lean`).
# * lgamma for x < 3: fdlibm's e_lgamma_r.c (Sun, 1993) approximations and ranges below 2
#   (around 1 and 2 they are functions of x - 1 and 2 - x times a polynomial or rational, so the
#   zeros are exact; -log x added below 0.9), with -log x as a double-double; [2, 3) as
#   lgamma(2 + y) = y (Y0 + Y1 y + P(y)/Q(y)) in the same exact-leading-terms form as psi.
# * lgamma for x >= 3: Stirling, (x - 1/2) log x - x + log(2 pi)/2 + W(x), W = (1/x) P(z)/Q(z)
#   fitted on [3, inf) (fdlibm's W is a polynomial valid above 8), every term summed as a
#   double-double (log x from :func:`_log_dd_lean`), one final rounding.
# * x < 0: reflection, psi(x) = psi(1 + |x|) - pi cot(pi x) (psi(1 + |x|) = psi(|x|) + 1/|x|
#   keeps the argument exact) and lgamma(x) = log(pi) - log|x| - log|sin(pi x)| - lgamma(|x|),
#   with sin(pi x), cos(pi x) as double-doubles (:func:`_sincospi`, shared: a gradient computes
#   them once), cot(pi x) by one quotient with an fma correction, and the last subtraction in
#   double-double. Near the poles the result is then accurate to ~0.5 ulp; near the zeros of the
#   result (psi: one per unit interval; lgamma: two per interval below -2) the terms cancel and
#   the error is absolute: <= 1 ulp of the larger reflection term.
#
# Fits ("fitted here"): minimax in mpmath at 40-50 digits — polynomials by the Remez exchange,
# rationals by Loeb's linearised least squares with Lawson reweighting on 300 Chebyshev points —
# minimising the error relative to the function each piece contributes to; the quoted errors
# are of the fit before rounding the coefficients to double. Every branch is computed for every
# element and the right one selected, so loops calling these vectorise.

#: digamma's positive zero x0 = X0H + X0L (x0 from mpmath's findroot at 60 digits).
X0H, X0L = _split(Fraction(Decimal("1.4616321449683623412626595423257213284681962040064")), 2)
_LOGPI = Fraction(Decimal("1.1447298858494001741434273513530587116472948129153"))
_HALF_LOG_2PI = Fraction(Decimal("0.91893853320467274178032973640561763986139747363778"))
LOGPI_DD = _split(_LOGPI, 2)
HALF_LOG_2PI_DD = _split(_HALF_LOG_2PI, 2)
PI2_DD = _split(_PI * _PI, 2)
PI_DD = _split(_PI, 2)
#: leading Taylor coefficients of cos(pi w) and sin(pi w)/pi, as double-doubles
COSPI_C1_DD = _split(-_PI * _PI / 2, 2)
SINPI_C1_DD = _split(-_PI * _PI / 6, 2)
#: sin(pi w)/pi = w + w^3 SINPI(w^2) and cos(pi w) = 1 + w^2 COSPI(w^2) on w in [0, 1/4]:
#: degree-6 polynomials fitted here (Remez), relative error 2^-63.6 / 2^-61.1 in SINPI / COSPI
#: (SINPI[0], COSPI[0] are -pi^2/6, -pi^2/2; the code uses the double-doubles above instead).
SINPI = (-1.6449340668482264, 0.8117424252833535, -0.19075182412203795, 0.026147847813221308,
         -0.0023460808330788953, 0.00014842404805508235, -6.92065792690857e-06)  # fmt: skip
COSPI = (-4.934802200544679, 4.058712126416765, -1.335262768853799, 0.23533063028328222,
         -0.025806887942825502, 0.0019294935641306177, -0.00010369917390329546)  # fmt: skip
#: log m = 2 s + (2/3) s^3 + s^5 LOGQ(s^2), s = (m - 1)/(m + 1), |s| <= 0.1716: the atanh series
#: tail 2/5 + 2/7 s^2 + ... as a degree-6 minimax polynomial (fitted here, Remez, 2^-64.5
#: relative to log m; the Taylor series needs 10 terms, see ATANH_SERIES).
LOGQ = (0.40000000000000385, 0.2857142857099869, 0.22222222363554892, 0.18181797470464983,
        0.15386185367960892, 0.1326935570832972, 0.13087218441454018)  # fmt: skip
#: psi(x0 + t) / t = PSI_Y0 + PSI_Y1 t + PSI_P(t) / PSI_Q(t) for t in [1 - x0, 1]: the linear
#: part a Remez fit of psi(x0 + t)/t (residual <= 5.6%), the (6, 6) rational fitted here to the
#: residual, error 2^-58.8 relative to psi(x0 + t)/t.
PSI_Y0, PSI_Y1 = 1.0112549423507984, -0.36558628703229573
PSI_P = (-0.04358269690317721, -0.1485628423869423, 0.09002177254416309, 0.17386352647642886,
         0.06783222305136098, 0.009710195288389935, 0.0004386760491060072)  # fmt: skip
PSI_Q = (1.0, 1.637942704514961, 0.9652151117587906, 0.25490099761843, 0.029793492654045763,
         0.0012014398017625282, -2.739666712313356e-08)  # fmt: skip
#: psi(x) = log x - 1/(2x) - z PSI_HP(z) / PSI_HQ(z), z = 1/x^2, for x >= PSI_SPLIT: a (5, 5)
#: rational fitted here on z in (0, 1/(x0 + 1)^2], error 2^-60.8 relative to psi(x).
PSI_SPLIT = 2.4616  # <= x0 + 1: both pieces are valid at the split
PSI_HP = (0.08333333333333126, 1.1721974413926308, 4.847505627583524, 6.807334643969126,
          2.7637938163739735, 0.15152266691462937)  # fmt: skip
PSI_HQ = (1.0, 14.166369296700909, 59.539085414710655, 87.01733512038405, 39.649480894700794,
          3.581520520430432)  # fmt: skip
#: lgamma(2 + y) = y (LG2_Y0 + LG2_Y1 y + LG2_P(y) / LG2_Q(y)) for y in [0, 1]: linear Remez
#: part (residual <= 1.05%), (6, 5) rational fitted here to the rest, error 2^-59.7 relative.
LG2_Y0, LG2_Y1 = 0.42720577846641283, 0.27319027758411385
LG2_P = (-0.004421443367945694, 0.04369184022714239, -0.007648093611085189, -0.036694007978530986,
         -0.014533432715542765, -0.0017957120441397952, -5.5801201017123496e-05)  # fmt: skip
LG2_Q = (1.0, 1.2631430843027385, 0.5743341489968837, 0.11320890213803678, 0.00909848717977239,
         0.00021251335190252004)  # fmt: skip
#: Stirling's remainder lgamma(x) - (x - 1/2) log x + x - log(2 pi)/2 = (1/x) LG_WP(z) / LG_WQ(z),
#: z = 1/x^2, x >= 3: a (4, 4) rational fitted here, error 2^-59.8 relative to lgamma(x).
LG_WP = (0.08333333333333114, 0.6753622102418654, 1.3518915391554307, 0.6710985005116495,
         0.042359500630291175)  # fmt: skip
LG_WQ = (1.0, 8.137679856226457, 16.484430656745058, 8.53230409183171, 0.6837581239367484)
# fdlibm e_lgamma_r.c's coefficients (published): a0..a11 around 2 (and 1 via 1 - x), t0..t14
# around the minimum tc = 1.4616 (lgamma(tc) = tf + tt), u0..u5 / v1..v5 around 1.
_LG_A = (7.72156649015328655494e-02, 3.22467033424113591611e-01, 6.73523010531292681824e-02,
         2.05808084325167332806e-02, 7.38555086081402883957e-03, 2.89051383673415629091e-03,
         1.19270763183362067845e-03, 5.10069792153511336608e-04, 2.20862790713908385557e-04,
         1.08011567247583939954e-04, 2.52144565451257326939e-05, 4.48640949618915160150e-05)  # fmt: skip
_LG_TC, _LG_TF, _LG_TT = 1.46163214496836224576e00, -1.21486290535849611461e-01, -3.63867699703950536541e-18
_LG_T = (4.83836122723810047042e-01, -1.47587722994593911752e-01, 6.46249402391333854778e-02,
         -3.27885410759859649565e-02, 1.79706750811820387126e-02, -1.03142241298341437450e-02,
         6.10053870246291332635e-03, -3.68452016781138256760e-03, 2.25964780900612472250e-03,
         -1.40346469989232843813e-03, 8.81081882437654011382e-04, -5.38595305356740546715e-04,
         3.15632070903625950361e-04, -3.12754168375120860518e-04, 3.35529192635519073543e-04)  # fmt: skip
_LG_U = (-7.72156649015328655494e-02, 6.32827064025093366517e-01, 1.45492250137234768737e00,
         9.77717527963372745603e-01, 2.28963728064692451092e-01, 1.33810918536787660377e-02)  # fmt: skip
_LG_V = (1.0, 2.45597793713041134822e00, 2.12848976379893395361e00, 7.69285150456672783825e-01,
         1.04222645593369134254e-01, 3.21709242282423911810e-03)  # fmt: skip


def _log_dd_lean(b, x):
    """log(x) as a double-double (h, l) for finite x > 0 (subnormals included), ~2^-60 relative:
    :func:`_log_dd`'s method with ~15% fewer operations, for gammaln and digamma (which take
    logs in every element; in a gradient both use this one, computed once). 2 + f as a fast
    two-sum, s = f/(2 + f) corrected by fma, s^3 as a double-double (the s^2 sl term included),
    (2/3) s^3 with a double-rounded constant (its low part is below 2^-62 of the result), the
    tail s^5 LOGQ(s^2), and the two leading sums as fast two-sums (|k ln2| >= 0.69 > |2s| unless
    k = 0)."""
    sub = _lt(b, x, _c(MIN_NORMAL))
    xs = b.select(sub, b.fmul(x, _c(2.0**54)), x)
    m, k = _reduce_exponent(b, xs)
    dk = b.fadd(b.sitofp(k, F64), b.select(sub, _c(-54.0), _c(0.0)))
    f = b.fsub(m, _c(1.0))  # exact
    dh, dl = _fast_two_sum(b, _c(2.0), f)
    sh = b.fdiv(f, dh)
    inv = b.fmul(b.fsub(_c(1.0), sh), _c(0.5))  # 1/(2 + f) = (1 - s)/2
    sl = b.fmul(b.fsub(_fma(b, b.fneg(sh), dh, f), b.fmul(sh, dl)), inv)
    z = b.fmul(sh, sh)
    zl = _fma(b, sh, sh, b.fneg(z))
    u = b.fmul(z, sh)
    ul = _fma(b, zl, sh, _fma(b, z, sh, b.fneg(u)))
    ul = _fma(b, b.fmul(_c(3.0), z), sl, ul)  # s^3 = u + ul
    ch = b.fmul(u, _c(TWO_THIRDS[0]))
    cl = _fma(b, ul, _c(TWO_THIRDS[0]), _fma(b, u, _c(TWO_THIRDS[0]), b.fneg(ch)))
    tail = b.fmul(b.fmul(u, z), _horner(b, z, LOGQ))
    kh = b.fmul(dk, _c(LN2_HI))  # exact: LN2_HI has 32 bits
    a, ae = _fast_two_sum(b, kh, b.fmul(_c(2.0), sh))
    a, ae2 = _fast_two_sum(b, a, ch)
    lo = b.fadd(b.fadd(ae, ae2), b.fadd(_fma(b, _c(2.0), sl, cl), _fma(b, dk, _c(LN2_LO), tail)))
    return _fast_two_sum(b, a, lo)


def _mul_dd(b, ah, al, bh, bl=None):
    """(ah + al)(bh + bl) as a double-double, the product of the high parts exact (fma); ``bl``
    None: a double ``bh``."""
    h = b.fmul(ah, bh)
    low = _fma(b, al, bh, _fma(b, ah, bh, b.fneg(h)))
    return h, low if bl is None else _fma(b, ah, bl, low)


def _recip_dd(b, a):
    """1/a = r + rl (the remainder by fma); rl = 0 where r overflows (a < 2^-1024, or 0)."""
    r = b.fdiv(_c(1.0), a)
    rl = b.fmul(_fma(b, b.fneg(r), a, _c(1.0)), r)
    return r, b.select(_eq(b, r, _c(math.inf)), _c(0.0), rl)


def _sincospi(b, x):
    """(t, small, (sh, sl), (ch, cl)) for the reflection formulas: t = x - rint(x) in [-1/2, 1/2]
    (exact), w = |t| if ``small`` (|t| <= 1/4) else 1/2 - |t| (exact), and sin(pi w)/pi = sh + sl,
    cos(pi w) = ch + cl as normalised double-doubles (~2^-60 relative): the leading terms w and
    1, the first corrections -pi^2/6 w^3 and -pi^2/2 w^2 formed exactly (w^2, w^3 by fma, the
    constants as double-doubles), the rest of each series (SINPI, COSPI) rounded — it is below
    2% of the result. Shared by digamma and gammaln (one computation in a gradient)."""
    t = b.fsub(x, _intrinsic(b, "llvm.rint", x))
    at = _intrinsic(b, "llvm.fabs", t)
    small = b.fcmp_ordered("<=", at, _c(0.25))
    w = b.select(small, at, b.fsub(_c(0.5), at))
    z = b.fmul(w, w)
    zl = _fma(b, w, w, b.fneg(z))
    # cos(pi w) = 1 + C1 (z + zl) + z^2 COSPI'(z)
    a, ae = _mul_dd(b, _c(COSPI_C1_DD[0]), _c(COSPI_C1_DD[1]), z, zl)
    tail = b.fmul(b.fmul(z, z), _horner(b, z, COSPI[1:]))
    ch, cl = _fast_two_sum(b, _c(1.0), a)
    ch, cl = _fast_two_sum(b, ch, b.fadd(cl, b.fadd(ae, tail)))
    # sin(pi w)/pi = w + S1 w^3 + w^3 z SINPI'(z), w^3 = u + ul
    u = b.fmul(w, z)
    ul = _fma(b, w, zl, _fma(b, w, z, b.fneg(u)))
    a, ae = _mul_dd(b, _c(SINPI_C1_DD[0]), _c(SINPI_C1_DD[1]), u, ul)
    tail = b.fmul(b.fmul(u, z), _horner(b, z, SINPI[1:]))
    sh, sl = _fast_two_sum(b, w, a)
    sh, sl = _fast_two_sum(b, sh, b.fadd(sl, b.fadd(ae, tail)))
    return t, small, (sh, sl), (ch, cl)


def _linear_plus_rational(b, th, tl, y0, y1, rr):
    """t (y0 + y1 t + rr) for t = th + tl (|tl| tiny) and rr = P(t)/Q(t) (the caller divides:
    one division serves two ranges' rationals) as (hi, lo): th y0 and th^2 y1 exact (fma), summed
    by a two-sum, everything else (the small rational part, the tl terms) in lo."""
    p1 = b.fmul(th, _c(y0))
    e1 = _fma(b, th, _c(y0), b.fneg(p1))
    sq = b.fmul(th, th)
    sqe = _fma(b, th, th, b.fneg(sq))
    p2 = b.fmul(sq, _c(y1))
    e2 = _fma(b, sqe, _c(y1), _fma(b, sq, _c(y1), b.fneg(p2)))  # exact residual, then sqe y1
    hi, e3 = _two_sum(b, p1, p2)
    # tl (y0 + 2 y1 th + rr): first order in tl
    dt = b.fadd(_fma(b, _c(2.0 * y1), th, _c(y0)), rr)
    low = b.fadd(b.fadd(e3, b.fadd(e1, e2)), b.fmul(tl, dt))
    return hi, _fma(b, th, rr, low)


def _digamma(b, x):
    """psi(x), see the comment above. scipy's special values: psi(±0) = ∓inf (and ∓inf where
    1/x overflows), NaN at the negative integers (every x <= -2^52) and -inf, psi(inf) = inf."""
    ax = _intrinsic(b, "llvm.fabs", x)
    neg = _lt(b, x, _c(0.0))
    r0, r0l = _recip_dd(b, ax)
    lh, ll = _log_dd_lean(b, ax)
    # ax < PSI_SPLIT: psi(y) around x0 for y = ax (ax >= 1) or ax + 1 (ax < 1): t = y - x0
    below1 = _lt(b, ax, _c(1.0))
    th = b.select(below1, b.fsub(ax, _c(X0H - 1.0)), b.fsub(ax, _c(X0H)))  # exact for ax >= 0.23
    tr = b.fadd(th, _c(-X0L))
    z = b.fmul(r0, r0)
    lt = _lt(b, ax, _c(PSI_SPLIT))
    # PSI_P(t)/PSI_Q(t) below PSI_SPLIT, PSI_HP(z)/PSI_HQ(z) above: one division
    ratio = b.fdiv(b.select(lt, _horner(b, tr, PSI_P), _horner(b, z, PSI_HP)),
                   b.select(lt, _horner(b, tr, PSI_Q), _horner(b, z, PSI_HQ)))
    ph, pl = _linear_plus_rational(b, th, _c(-X0L), PSI_Y0, PSI_Y1, ratio)
    # plus -1/x for 0 < x < 1 (psi(x) = psi(x + 1) - 1/x), +1/|x| for x <= -1 (the reflection
    # below needs psi(1 + |x|) = psi(|x|) + 1/|x|)
    zero = _c(0.0)
    kh = b.select(below1, b.select(neg, zero, b.fneg(r0)), b.select(neg, r0, zero))
    kl = b.select(below1, b.select(neg, zero, b.fneg(r0l)), b.select(neg, r0l, zero))
    sh, se = _two_sum(b, kh, ph)
    small_l = b.fadd(se, b.fadd(kl, pl))
    # ax >= PSI_SPLIT: log ax -+ 1/(2 ax) - z H(z) (+ for psi(1 + |x|) = psi(|x|) + 1/|x|)
    hz = b.fmul(z, ratio)
    half = b.select(neg, _c(-0.5), _c(0.5))
    bh, be = _two_sum(b, lh, b.fneg(b.fmul(half, r0)))  # -+ r0/2 exact
    big_l = b.fadd(be, b.fsub(ll, _fma(b, half, r0l, hz)))
    hi, lo = b.select(lt, sh, bh), b.select(lt, small_l, big_l)
    # x < 0: minus pi cot(pi x) = pi cot(pi t): cos(pi w) / (sin(pi w)/pi) for |t| <= 1/4, else
    # pi^2 (sin(pi w)/pi) / cos(pi w) (w = 1/2 - |t|), as a double-double quotient: one division
    # for 1/den, the numerator's remainder by fma; the last subtraction exact (two-sum)
    tt, sm, (svh, svl), (cvh, cvl) = _sincospi(b, x)
    p2h, p2l = _mul_dd(b, svh, svl, _c(PI2_DD[0]), _c(PI2_DD[1]))
    nh, nl = b.select(sm, cvh, p2h), b.select(sm, cvl, p2l)
    dh, dl = b.select(sm, svh, cvh), b.select(sm, svl, cvl)
    rcp = b.fdiv(_c(1.0), dh)
    qh = b.fmul(nh, rcp)
    ql = b.fmul(b.fsub(b.fadd(_fma(b, b.fneg(qh), dh, nh), nl), b.fmul(qh, dl)), rcp)
    sg = _intrinsic(b, "llvm.copysign", _c(1.0), tt)
    rh, re = _two_sum(b, hi, b.fneg(b.fmul(qh, sg)))
    res = b.select(neg, b.fadd(rh, b.fadd(lo, b.fsub(re, b.fmul(ql, sg)))), b.fadd(hi, lo))
    res = b.select(_eq(b, x, _c(math.inf)), x, res)
    res = b.select(b.and_(neg, _eq(b, tt, zero)), _c(math.nan), res)  # poles; -inf (tt NaN) too
    inf_x = _intrinsic(b, "llvm.copysign", _c(math.inf), b.fneg(x))
    res = b.select(_eq(b, r0, _c(math.inf)), inf_x, res)
    return b.select(_isnan(b, x), x, res)


def _lgamma_small_y2(b, x):
    """fdlibm's third variable (below): x below 0.9, x - 1 from 0.9 (around the zero at 1)."""
    return b.select(_lt(b, x, _c(0.9)), x, b.fsub(x, _c(1.0)))


def _lgamma_small(b, x, uv):
    """fdlibm's approximations for 0 < x < 2 without its -log(x) term: lgamma(1 + x) below 0.9
    (around 2 via y = 1 - x, the minimum via y = x - (tc - 1), and y = x), lgamma(x) from 0.9
    (around 2 via y = 2 - x, the minimum, and around 1 via y = x - 1). All computed, one selected.
    ``uv`` is y2 U(y2) / V(y2), y2 = :func:`_lgamma_small_y2` (the caller divides)."""
    lt = lambda v: _lt(b, x, _c(v))  # noqa: E731
    below = lt(0.9)
    y0 = b.select(below, b.fsub(_c(1.0), x), b.fsub(_c(2.0), x))
    y1 = b.select(below, b.fsub(x, _c(_LG_TC - 1.0)), b.fsub(x, _c(_LG_TC)))
    y2 = _lgamma_small_y2(b, x)
    is0 = b.select(below, b.not_(lt(0.7316)), b.not_(lt(1.7316)))
    is1 = b.select(below, b.not_(lt(0.23164)), b.not_(lt(1.23164)))
    z0 = b.fmul(y0, y0)
    p1 = _horner(b, z0, _LG_A[0::2])
    p2 = b.fmul(z0, _horner(b, z0, _LG_A[1::2]))
    c0 = b.fsub(b.fadd(b.fmul(y0, p1), p2), b.fmul(_c(0.5), y0))
    z1 = b.fmul(y1, y1)
    w1 = b.fmul(z1, y1)
    q1 = _horner(b, w1, _LG_T[0::3])
    q2 = _horner(b, w1, _LG_T[1::3])
    q3 = _horner(b, w1, _LG_T[2::3])
    c1 = b.fadd(_c(_LG_TF), b.fsub(b.fmul(z1, q1), b.fsub(_c(_LG_TT), b.fmul(w1, b.fadd(q2, b.fmul(y1, q3))))))
    c2 = b.fadd(b.fmul(_c(-0.5), y2), uv)
    return b.select(is0, c0, b.select(is1, c1, c2))


def _lgamma(b, x):
    """log|Gamma(x)|, see the comment above. scipy's special values: inf at ±0 and the negative
    integers (every x <= -2^52), lgamma(inf) = inf, lgamma(-inf) = -inf; NaN in, NaN out.
    Subnormal x gives -log|x| (scipy: inf)."""
    ax = _intrinsic(b, "llvm.fabs", x)
    # |x| <= 2^-54 takes the x > 0 path for both signs: lgamma(-a) = -log a + O(a)
    neg = b.and_(_lt(b, x, _c(0.0)), _gt(b, ax, _c(2.0**-54)))
    r0, _ = _recip_dd(b, ax)
    lh, ll = _log_dd_lean(b, ax)
    lt09, lt2, lt3 = _lt(b, ax, _c(0.9)), _lt(b, ax, _c(2.0)), _lt(b, ax, _c(3.0))
    # ax < 3: lgamma(ax) = sgn log(ax) + E, E from fdlibm below 2 and LG2 on [2, 3)
    # one division for the three ranges' rationals: fdlibm's U/V below 2, LG2 on [2, 3), W above
    y = b.fsub(ax, _c(2.0))
    y2 = _lgamma_small_y2(b, ax)
    z = b.fmul(r0, r0)
    num = b.select(lt3, _horner(b, y, LG2_P), _horner(b, z, LG_WP))
    num = b.select(lt2, b.fmul(y2, _horner(b, y2, _LG_U)), num)
    den = b.select(lt3, _horner(b, y, LG2_Q), _horner(b, z, LG_WQ))
    den = b.select(lt2, _horner(b, y2, _LG_V), den)
    ratio = b.fdiv(num, den)
    gh, gl = _linear_plus_rational(b, y, _c(0.0), LG2_Y0, LG2_Y1, ratio)
    eh = b.select(lt2, _lgamma_small(b, ax, ratio), gh)
    el = b.select(lt2, _c(0.0), gl)
    sgn = b.select(lt09, _c(-1.0), _c(0.0))
    sh, se = _two_sum(b, b.fmul(sgn, lh), eh)
    sl = b.fadd(se, _fma(b, sgn, ll, el))
    # ax >= 3: (ax - 1/2) log ax - ax + log(2 pi)/2 + W as ax lh - ax - lh/2 + log(2 pi)/2 + ...
    wv = b.fmul(r0, ratio)
    p = b.fmul(ax, lh)
    pe = _fma(b, ax, lh, b.fneg(p))
    s1, e1 = _two_sum(b, p, b.fneg(ax))
    s2, e2 = _two_sum(b, s1, b.fmul(_c(-0.5), lh))
    s3, e3 = _two_sum(b, s2, _c(HALF_LOG_2PI_DD[0]))
    rest = b.fadd(b.fmul(_c(-0.5), ll), b.fadd(_c(HALF_LOG_2PI_DD[1]), wv))
    st_l = b.fadd(b.fadd(b.fadd(pe, e1), b.fadd(e2, e3)), _fma(b, ax, ll, rest))
    gam_h, gam_l = b.select(lt3, sh, s3), b.select(lt3, sl, st_l)  # lgamma(ax)
    pos = b.select(_eq(b, p, _c(math.inf)), p, b.fadd(gam_h, gam_l))  # overflow above ~2.5e305
    # x < 0: log(pi) - log|sin(pi x)| - log ax - lgamma(ax), all double-doubles
    tt, sm, (svh, svl), (cvh, cvl) = _sincospi(b, x)
    pih, pil = _mul_dd(b, svh, svl, _c(PI_DD[0]), _c(PI_DD[1]))
    s_h, s_l = b.select(sm, pih, cvh), b.select(sm, pil, cvl)  # |sin(pi x)|
    l2h, l2l = _log_dd_lean(b, s_h)
    l2l = b.fadd(l2l, b.fdiv(s_l, s_h))
    n1, f1 = _two_sum(b, _c(LOGPI_DD[0]), b.fneg(l2h))
    n2, f2 = _two_sum(b, n1, b.fneg(lh))
    n3, f3 = _two_sum(b, n2, b.fneg(gam_h))
    low = b.fsub(_c(LOGPI_DD[1]), b.fadd(b.fadd(ll, l2l), gam_l))
    negr = b.fadd(n3, b.fadd(b.fadd(b.fadd(f1, f2), f3), low))
    res = b.select(neg, negr, pos)
    pole = b.or_(_eq(b, x, _c(0.0)), b.and_(_lt(b, x, _c(0.0)), _eq(b, tt, _c(0.0))))
    res = b.select(pole, _c(math.inf), res)
    res = b.select(_eq(b, ax, _c(math.inf)), x, res)  # lgamma(-inf) = -inf as scipy
    return b.select(_isnan(b, x), x, res)


#: This family's rows of the math table (:data:`.core.MATH`).
MATH.update({
    # erf/erfc: ``ulp_ld`` is against mpmath (40 digits), the real contract; the whole-ulp
    # reference is scipy's, itself up to 12 ulp off near |x| = 1 (Cephes computes erfc there
    # as 1 - erf) and ~500 ulp off for erfc near x = 23 (where this one is within 1 ulp)
    Op.ERF:     Math(1, body=_erf, ulp=4, ulp_ld=1.5, domains=(
        ("[-1, 1]", "uniform", -1, 1), ("[-6, 6]", "uniform", -6, 6),
        ("1e-300..1", "log", -300, 0))),
    # erfc below 0.84375 is 1 - erf(x) (fdlibm's split): up to 2.35 ulp measured near x = 0.84
    # (a 200,001-point grid on [-1, 1] against mpmath; the stated 2.0 was exceeded there)
    Op.ERFC:    Math(1, body=_erfc, ulp=1024, ulp_ld=2.5, domains=(
        ("[-1, 1]", "uniform", -1, 1), ("[-6, 26]", "uniform", -6, 26),
        ("1e-300..1", "log", -300, 0))),
    # gammaln/digamma: ``ulp_ld`` against mpmath (50 digits), the contract, and ``ulp`` whole
    # ulps from mpmath's correctly rounded value too: scipy's are no reference (off by up to 10^6
    # ulp near gammaln's zeros 1 and 2, 10^11 ulp next to digamma's negative poles). Domains:
    # every x > 0, the zeros (x = 1, 2; x0 = 1.4616...) sampled down to the adjacent doubles
    # ("near": c (1 +- 10^u), u in [-18, hi]); x < 0 ("reflect*": uniform on [lo, hi], magnitudes
    # 10^lo..10^hi, or 10^lo..10^hi from the poles -1..-50) where |f(x)| >= 1/16 of the larger
    # term of the reflection formula. That leaves out an interval around each zero of f for
    # x < 0 (digamma: 6e-4 wide at -0.504, ~0.02 below -2; gammaln: 0.03 at -2.46 and -2.75,
    # 0.01 at -3.14 and -3.96, then ~1/n! next to the pole -n), where the error is absolute:
    # <= 1 ulp (measured 0.57) of that term (tests/test_mathlib.py,
    # test_reflection_absolute_error). Next to the poles the error stays relative. Measured
    # maxima (2e5 points per domain), in domain order: gammaln 0.50 1.21 1.03 0.94 0.54 0.50
    # 0.50 0.57 1.74 0.51 0.69; digamma 0.50 0.67 0.62 0.54 0.50 0.50 1.26 0.74 0.50.
    Op.GAMMALN: Math(1, body=_lgamma, ulp=2, ulp_ld=2.0, domains=(
        ("1e-300..1e-2", "log", -300, -2), ("[0.01, 3]", "uniform", 0.01, 3),
        ("x near 1", "near", 1.0, -2), ("x near 2", "near", 2.0, -2),
        ("[3, 200]", "uniform", 3, 200), ("1e2..2.5e305", "log", 2, 305.4),
        ("-1e-300..-1e-2", "-log", -300, -2), ("(-1, 0)", "uniform", -1, 0),
        ("(-20, -1) off the zeros", "reflect", -20, -1),
        ("-1e1..-1e15 off the zeros", "reflect-log", 1, 15),
        ("1e-14..1e-1 from the poles", "reflect-poles", -14, -1))),
    Op.DIGAMMA: Math(1, body=_digamma, ulp=2, ulp_ld=1.5, domains=(
        ("1e-300..1e-2", "log", -300, -2), ("[0.01, 2.5]", "uniform", 0.01, 2.5),
        ("x near x0", "near", X0H, -2), ("[2.5, 50]", "uniform", 2.5, 50),
        ("1e2..1e300", "log", 2, 300), ("-1e-300..-1e-2", "-log", -300, -2),
        ("(-20, 0) off the zeros", "reflect", -20, 0),
        ("-1e1..-1e15 off the zeros", "reflect-log", 1, 15),
        ("1e-14..1e-1 from the poles", "reflect-poles", -14, -1))),
})  # fmt: skip
