"""The log family as branch-free IR: log and log1p (FDLIBM's e_log.c and s_log1p.c, its kernel
in the even/odd form), and log2, log10, arcsinh, arccosh and arctanh.

Each is one range reduction x = 2^k m (m in [sqrt(2)/2, sqrt(2))) and one evaluation of FDLIBM's
log kernel (s = f/(2 + f), f = m - 1, and its Remez polynomial ``LG`` in s^2, here by Horner's
rule: :func:`_log_kernel`), with the result assembled so that no step loses more than a fraction
of an ulp:

* log2, log10: log(1 + f) = g + t, g = f - hfsq (hfsq = f^2/2) and t the small rest (g's and
  hfsq's rounding errors recovered exactly, plus s (hfsq + R)); (g + t) / ln b with 1/ln b as
  a double-double, k log_b 2 (k itself for log2; for log10 k LOG10_2 with a 41-bit head, exact)
  plus g (1/ln b)_hi as an exact sum w + we (one fma, then Sterbenz and an fma for the
  remainder), and everything else added to we: one final rounding, no extra division (the
  derivative 1/(x ln b) is the gradient's second division, as log's 1/x).
* arcsinh, arccosh, arctanh: log(y) for y = a + sqrt(a^2 + 1), x + sqrt(x^2 - 1) and
  (1 + x)/(1 - x) computed as double-doubles y = yh + yl: log(y) = log(yh) + yl/yh, with
  1/y known without a division (sqrt(a^2 + 1) - a, x - sqrt(x^2 - 1), (1 - x)/(1 + x)). The
  reduction of yh keeps f = m - 1 exact, so near the zero of the function (a -> 0, x -> 1,
  x -> 0) the result keeps its relative accuracy with no separate small-argument polynomial.
  The one reciprocal each needs (1/sqrt(a^2 + 1), 1/sqrt((x - 1)(|x| + 1)), 1/((1 - x)(1 + x)))
  is the expression their derivatives in tapejit/core/ops.py compute, built here from the same
  operations in the same order, so in a gradient LLVM's CSE computes it once.

The polynomial is FDLIBM's (``e_log.c``, Remez-fitted by Sun; see codegen/mathlib/core.py); the
double-double formulations are ours, no code was copied. Measured errors (2^20 points per
domain of the MATH rows, against an x86 long double evaluation; all within 1 ulp of numpy):
log2 0.68, log10 0.65 (near m = sqrt 2; 0.52 elsewhere), arcsinh 0.66, arccosh 0.64, arctanh
0.64.
"""

from __future__ import annotations

import math
from decimal import Context, Decimal
from fractions import Fraction

from ...core.ops import Op

from .core import (
    F64,
    LG,
    LN2_HI,
    LN2_LO,
    MATH,
    MIN_NORMAL,
    _LN2,
    Math,
    _c,
    _eq,
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

_LN10 = Fraction(Decimal(10).ln(Context(prec=60)))
#: 1/ln 2 and 1/ln 10 as double-doubles (~2^-106 relative)
INVLN2_DD = _split(1 / _LN2, 2)
INVLN10_DD = _split(1 / _LN10, 2)
#: log10(2) = LOG10_2_HI + LOG10_2_LO, the head on a 2^-43 grid (41 significant bits): k times
#: it is exact for every exponent |k| <= 1078
LOG10_2_HI = float(Fraction(round(_LN2 / _LN10 * 2**43), 2**43))
LOG10_2_LO = float(_LN2 / _LN10 - Fraction(LOG10_2_HI))
#: above this, arcsinh(a) = log(2a) and arccosh(x) = log(2x) to < 2^-56 relative (the next term
#: is 1/(4 a^2)), and a^2 may not be formed (it overflows from 1.3e154)
BIG = 2.0**28


def _log_kernel(b, m):
    """(f, s, hfsq, R) of FDLIBM's log(1 + f) = f - hfsq + s (hfsq + R) for m = 1 + f,
    s = f/(2 + f), R = R(s^2) from ``LG``: :func:`_fdlibm_log_kernel` with R by Horner's
    rule in s^2 (two operations fewer than its even/odd split; measured 6% faster in a gradient
    loop, where the many independent elements hide the longer dependency chain) and 2 + f formed
    as m + 1 (the same double; one constant and one dependent step fewer, ~2% faster)."""
    f = b.fsub(m, _c(1.0))  # exact
    s = b.fdiv(f, b.fadd(m, _c(1.0)))
    z = b.fmul(s, s)
    hfsq = b.fmul(b.fmul(_c(0.5), f), f)
    return f, s, hfsq, b.fmul(z, _horner(b, z, LG))


def _log_parts(b, x):
    """(dk, f, s, hfsq, R) for finite x > 0, subnormals scaled by 2^54 (as in
    :func:`_fdlibm_log_parts`, with the kernel above)."""
    sub = _lt(b, x, _c(MIN_NORMAL))
    xs = b.select(sub, b.fmul(x, _c(2.0**54)), x)
    m, k = _reduce_exponent(b, xs)
    dk = b.fadd(b.sitofp(k, F64), b.select(sub, _c(-54.0), _c(0.0)))
    return (dk, *_log_kernel(b, m))


def _log_b(b, x, inv, k_hi, k_lo):
    """log(x) / ln(base) for the constants of the base: ``inv`` = 1/ln(base) as a double-double,
    ``k_hi`` (exact in products with k) and ``k_lo``: log_b 2 (None for base 2, where it is 1).
    Special values as log: -inf at +-0, NaN below 0, inf at inf, NaN -> NaN."""
    dk, f, s, hfsq, r = _log_parts(b, x)
    # log(1 + f) = g + t: g = f - hfsq rounded, t = its rounding error (exact: f - g is, by
    # Sterbenz, and so is the difference of that and hfsq), minus hfsq's own rounding error
    # (by fma; hfsq = (f/2) f), plus s (hfsq + R)
    g = b.fsub(f, hfsq)
    hl = _fma(b, b.fmul(_c(0.5), f), f, b.fneg(hfsq))
    t = _fma(b, s, b.fadd(hfsq, r), b.fsub(b.fsub(b.fsub(f, g), hfsq), hl))
    c1 = _c(inv[0])
    lo = b.fmul(g, _c(inv[1]))
    if k_hi is None:
        kh = dk
    else:
        kh = b.fmul(dk, _c(k_hi))  # exact
        lo = _fma(b, dk, _c(k_lo), lo)
    lo = _fma(b, t, c1, lo)
    # kh + g c1 = w + we: |g c1| < |log_b m| <= |kh|/2 unless k = 0, so kh - w is exact
    # (Sterbenz), and the remainder g c1 - (w - kh) is formed by one fma
    w = _fma(b, g, c1, kh)
    we = _fma(b, g, c1, b.fsub(kh, w))
    res = b.fadd(w, b.fadd(we, lo))
    res = b.select(b.fcmp_unordered("<", x, _c(0.0)), _c(math.nan), res)  # NaN too
    res = b.select(_eq(b, x, _c(0.0)), _c(-math.inf), res)
    return b.select(_eq(b, x, _c(math.inf)), x, res)


def _log2(b, x):
    """log2(x): see the module docstring and :func:`_log_b`. Exact at powers of two; measured
    0.68 ulp (long double), subnormals included."""
    return _log_b(b, x, INVLN2_DD, None, None)


def _log10(b, x):
    """log10(x): see the module docstring and :func:`_log_b`; measured 0.65 ulp (long double),
    subnormals included."""
    return _log_b(b, x, INVLN10_DD, LOG10_2_HI, LOG10_2_LO)


def _log_dd_arg(b, yh, corr, dk_extra):
    """log(yh) + corr for yh >= 2^-1022 finite (not checked) and |corr| < 2^-50 |log yh| or so,
    plus dk_extra ln 2 (a double, 0 or 1). Assembled as log2/log10 are (:func:`_log_b`):
    k LN2_HI + g = w + we exactly (a fast two-sum: |g| <= |k LN2_HI|/2 unless k = 0), and
    t + k LN2_LO + corr added to we, so there is one final rounding (FDLIBM's log rounds twice:
    0.86 ulp measured for arcsinh that way, 0.66 this way, for ~9 operations more)."""
    m, k = _reduce_exponent(b, yh)
    dk = b.fadd(b.sitofp(k, F64), dk_extra)
    f, s, hfsq, r = _log_kernel(b, m)
    g = b.fsub(f, hfsq)
    hl = _fma(b, b.fmul(_c(0.5), f), f, b.fneg(hfsq))
    t = _fma(b, s, b.fadd(hfsq, r), b.fsub(b.fsub(b.fsub(f, g), hfsq), hl))
    kh = b.fmul(dk, _c(LN2_HI))  # exact
    w = b.fadd(kh, g)
    we = b.fsub(g, b.fsub(w, kh))  # |g| < |log m| <= |kh|/2 (or k = 0): kh - w exact
    lo = b.fadd(t, _fma(b, dk, _c(LN2_LO), corr))
    return b.fadd(w, b.fadd(we, lo))


def _arcsinh(b, x):
    """arcsinh(x) = sign(x) log(a + sqrt(a^2 + 1)), a = |x|.

    For a <= 2^28: a^2 + 1 = q as a double-double (x^2 exact by fma, an exact two-sum),
    r = sqrt(qh) with its correction rl = (q - r^2) / (2r) (remainder by fma, the division as a
    product with 1/r), y = r + a = yh + yl (fast two-sum), and log(y) = log(yh) + yl (r - a + rl)
    (1/y = sqrt(a^2 + 1) - a). Above 2^28, log(a) + ln 2. The sign is put back by copysign:
    arcsinh(-0) = -0, +-inf -> +-inf, NaN -> NaN. 1/r = 1/sqrt(1 + x^2) (1/a above 2^28, where
    x^2 may overflow) is the derivative. Measured 0.66 ulp (long double) over all magnitudes;
    no small-argument polynomial is needed: f = yh - 1 is exact and yl carries the rest."""
    a = _intrinsic(b, "llvm.fabs", x)
    z = b.fmul(x, x)
    zl = _fma(b, x, x, b.fneg(z))
    qh, qe = _two_sum(b, _c(1.0), z)
    r = _intrinsic(b, "llvm.sqrt", qh)
    big = _gt(b, a, _c(BIG))
    inv = b.fdiv(_c(1.0), b.select(big, a, r))
    rem = b.fadd(_fma(b, b.fneg(r), r, qh), b.fadd(qe, zl))
    rl = b.fmul(b.fmul(rem, _c(0.5)), inv)
    yh, ye = _fast_two_sum(b, r, a)  # r >= a
    yl = b.fadd(ye, rl)
    # yl/y = yl (r + rl - a): r - a would round (relative 2^-53, all of the result for tiny a)
    corr = _fma(b, yl, r, b.fmul(yl, b.fsub(rl, a)))
    res = _log_dd_arg(b, b.select(big, a, yh), b.select(big, _c(0.0), corr),
                      b.select(big, _c(1.0), _c(0.0)))  # fmt: skip
    # below 2^-28, arcsinh(a) = a (1 - a^2/6) rounds to a; computed, log(1 + e) = e - e^2/2
    # (e = yl/yh) would leave e^2/2, half an ulp when a ~ 2^-53 is the whole result
    res = b.select(_lt(b, a, _c(2.0**-28)), a, res)
    res = b.select(_eq(b, a, _c(math.inf)), a, res)
    res = b.select(_isnan(b, x), x, res)
    return _intrinsic(b, "llvm.copysign", res, x)


def _arccosh(b, x):
    """arccosh(x) = log(x + sqrt(x^2 - 1)) for x >= 1, NaN below.

    For x <= 2^28: t = x - 1 (exact), x + 1 = u + ul (fast two-sum), x^2 - 1 = t u + (fma
    remainder + t ul) = w + wl, r = sqrt(w) with rl = (w + wl - r^2) / (2r) (1/r times the fma
    remainder), y = x + r = yh + yl, log(y) = log(yh) + yl (x - r - rl) (1/y = x - sqrt(x^2 - 1)).
    Above 2^28, log(x) + ln 2. arccosh(1) = 0, arccosh(inf) = inf, NaN -> NaN.
    1/r, with w formed as (x - 1)(|x| + 1) (negative below 1: a NaN derivative there) and x
    itself above 2^28, is the derivative. Measured 0.64 ulp (long double), down to the doubles
    next to 1 (where y = 1 + sqrt(2 t) + ..., no cancellation) and up to max double."""
    t = b.fsub(x, _c(1.0))
    ax = _intrinsic(b, "llvm.fabs", x)  # x itself where the result is not NaN
    u = b.fadd(ax, _c(1.0))
    ul = b.fsub(_c(1.0), b.fsub(u, ax))  # x + 1 = u + ul: a fast two-sum for x >= 1
    w = b.fmul(t, u)
    wl = _fma(b, t, ul, _fma(b, t, u, b.fneg(w)))
    r = _intrinsic(b, "llvm.sqrt", w)
    big = _gt(b, x, _c(BIG))
    inv = b.fdiv(_c(1.0), b.select(big, x, r))
    rl = b.fmul(b.fmul(b.fadd(_fma(b, b.fneg(r), r, w), wl), _c(0.5)), inv)
    yh, ye = _fast_two_sum(b, x, r)  # x >= r
    corr = b.fmul(b.fadd(ye, rl), b.fsub(b.fsub(x, r), rl))
    res = _log_dd_arg(b, b.select(big, x, yh), b.select(big, _c(0.0), corr),
                      b.select(big, _c(1.0), _c(0.0)))  # fmt: skip
    res = b.select(_eq(b, x, _c(1.0)), _c(0.0), res)  # 0 * inf in corr
    res = b.select(_eq(b, x, _c(math.inf)), x, res)
    return b.select(b.fcmp_unordered("<", x, _c(1.0)), _c(math.nan), res)  # NaN in too


def _arctanh(b, x):
    """arctanh(x) = log(q) / 2, q = (1 + x)/(1 - x), for |x| < 1.

    1 + x = p + pl and 1 - x = n + nl by exact (fast) two-sums; D = n p and inv = 1/D (the
    derivative 1/((1 - x)(1 + x))); qh = p (p inv) ~ p/n (two roundings, no division), the remainder
    p + pl - qh (n + nl) (fma) divided by p, i.e. times n inv, is qh's relative correction, so
    log(q) = log(qh) + rem n inv. Near 0, q ~ 1 + 2x and the exact f = m - 1 of the reduction
    keeps the relative accuracy; near +-1 one of p, n is exact and small, no cancellation.
    arctanh(+-1) = +-inf, |x| > 1 -> NaN, -0 -> -0 (copysign), NaN -> NaN. Measured 0.64 ulp
    (long double), 0.51 next to +-1. FDLIBM's e_atanh.c instead takes log1p(2a/(1 - a)): two
    divisions more, with the derivative's."""
    p, pl = _fast_two_sum(b, _c(1.0), x)  # exact for |x| <= 1 (beyond, the result is NaN)
    n = b.fsub(_c(1.0), x)  # the derivative's expression
    nl = b.fsub(b.fsub(_c(1.0), n), x)  # 1 - x = n + nl (fast two-sum)
    inv = b.fdiv(_c(1.0), b.fmul(n, p))
    qh = b.fmul(p, b.fmul(p, inv))
    rem = b.fadd(_fma(b, b.fneg(qh), n, p), _fma(b, b.fneg(qh), nl, pl))
    corr = b.fmul(b.fmul(rem, n), inv)
    res = b.fmul(_log_dd_arg(b, qh, corr, _c(0.0)), _c(0.5))
    a = _intrinsic(b, "llvm.fabs", x)
    # below 2^-28, arctanh(x) = x (1 + x^2/3) rounds to x; computed, log(qh) and corr cancel
    # to the last bits there
    res = b.select(_lt(b, a, _c(2.0**-28)), a, res)
    res = b.select(b.fcmp_unordered(">=", a, _c(1.0)), _c(math.nan), res)  # NaN in too
    res = b.select(_eq(b, a, _c(1.0)), _c(math.inf), res)
    return _intrinsic(b, "llvm.copysign", res, x)


# ----------------------------------------------------------------------------------------------
# log and log1p: FDLIBM's reduction and kernel (Lg1..Lg7 split into even and odd terms).


def _fdlibm_log_parts(b, x):
    """(dk, f, s, hfsq, R) of FDLIBM's log reduction of finite x > 0 (subnormals scaled by 2^54):
    x = 2^k (1 + f), 1 + f in [sqrt(2)/2, sqrt(2)), s = f / (2 + f), R = R(s^2) from ``LG``."""
    sub = _lt(b, x, _c(MIN_NORMAL))
    xs = b.select(sub, b.fmul(x, _c(2.0**54)), x)
    m, k = _reduce_exponent(b, xs)
    dk = b.fadd(b.sitofp(k, F64), b.select(sub, _c(-54.0), _c(0.0)))
    return (dk, *_fdlibm_log_kernel(b, b.fsub(m, _c(1.0))))


def _fdlibm_log_kernel(b, f):
    s = b.fdiv(f, b.fadd(_c(2.0), f))
    z = b.fmul(s, s)
    w = b.fmul(z, z)
    t1 = b.fmul(w, _horner(b, w, LG[1::2]))  # w (Lg2 + w Lg4 + w^2 Lg6)
    t2 = b.fmul(z, _horner(b, w, LG[0::2]))  # z (Lg1 + w Lg3 + w^2 Lg5 + w^3 Lg7)
    hfsq = b.fmul(b.fmul(_c(0.5), f), f)
    return f, s, hfsq, b.fadd(t2, t1)


def _log(b, x):
    """log(x): FDLIBM's reduction x = 2^k (1+f), log(1+f) = f - hfsq + s (hfsq + R(s^2)) with
    s = f/(2+f), evaluated as k LN2_HI - ((hfsq - (s (hfsq + R) + k LN2_LO)) - f).
    Special values: log(0) = -inf, log(x<0) = NaN, log(inf) = inf, NaN -> NaN."""
    dk, f, s, hfsq, r = _fdlibm_log_parts(b, x)
    inner = b.fadd(b.fmul(s, b.fadd(hfsq, r)), b.fmul(dk, _c(LN2_LO)))
    res = b.fsub(b.fmul(dk, _c(LN2_HI)), b.fsub(b.fsub(hfsq, inner), f))
    res = b.select(_eq(b, x, _c(math.inf)), x, res)
    res = b.select(_lt(b, x, _c(0.0)), _c(math.nan), res)
    res = b.select(_eq(b, x, _c(0.0)), _c(-math.inf), res)
    return b.select(_isnan(b, x), x, res)


def _log1p(b, x):
    """log(1+x): FDLIBM's s_log1p.c scheme. u = 1 + x is reduced like :func:`_log`; the rounding
    error of u is recovered exactly as c = (1 - (u - x)) or (x - (u - 1)) and added as c/u.
    log1p(±0) = ±0, log1p(-1) = -inf, log1p(x < -1) = NaN, log1p(inf) = inf, NaN -> NaN."""
    u = b.fadd(_c(1.0), x)
    m, k = _reduce_exponent(b, u)
    dk = b.sitofp(k, F64)
    big = b.icmp_signed(">=", k, _i(2))
    c = b.select(big, b.fsub(_c(1.0), b.fsub(u, x)), b.fsub(x, b.fsub(u, _c(1.0))))
    c = b.fdiv(c, u)
    c = b.select(b.icmp_signed(">=", k, _i(54)), _c(0.0), c)
    f, s, hfsq, r = _fdlibm_log_kernel(b, b.fsub(m, _c(1.0)))
    res = b.fadd(b.fmul(s, b.fadd(hfsq, r)), b.fadd(b.fmul(dk, _c(LN2_LO)), c))
    res = b.fadd(b.fadd(b.fsub(res, hfsq), f), b.fmul(dk, _c(LN2_HI)))
    res = b.select(_eq(b, x, _c(math.inf)), x, res)
    res = b.select(_lt(b, x, _c(-1.0)), _c(math.nan), res)
    res = b.select(_eq(b, x, _c(-1.0)), _c(-math.inf), res)
    res = b.select(_eq(b, x, _c(0.0)), x, res)
    return b.select(_isnan(b, x), x, res)


#: This family's rows of the math table (:data:`.core.MATH`).
MATH.update({
    Op.LOG:     Math(1, body=_log, ulp=1, ulp_ld=0.85, domains=(
        ("subnormal..1e308", "log", -323.5, 308.2), ("near 1", "uniform", 0.9, 1.1),
        ("[0.5, 2]", "uniform", 0.5, 2))),
    Op.LOG1P:   Math(1, body=_log1p, ulp=1, ulp_ld=0.85, domains=(
        ("[-0.9, 10]", "uniform", -0.9, 10), ("|x| in 1e-20..1e-2", "-log", -20, -2),
        ("1e-300..1e300", "log", -300, 300))),
    Op.LOG2:    Math(1, body=_log2, ulp=1, ulp_ld=0.75, domains=(
        ("subnormal..1e308", "log", -323.5, 308.2), ("near 1", "uniform", 0.9, 1.1),
        ("[0.5, 2]", "uniform", 0.5, 2))),
    Op.LOG10:   Math(1, body=_log10, ulp=1, ulp_ld=0.75, domains=(
        ("subnormal..1e308", "log", -323.5, 308.2), ("near 1", "uniform", 0.9, 1.1),
        ("[0.5, 2]", "uniform", 0.5, 2))),
    Op.ARCSINH: Math(1, body=_arcsinh, ulp=1, ulp_ld=0.75, domains=(
        ("[-10, 10]", "uniform", -10, 10), ("[-1, 1]", "uniform", -1, 1),
        ("1e-300..1e300", "log", -300, 300), ("-1e-300..-1e300", "-log", -300, 300),
        ("1e7..1e10 (the 2^28 switch)", "log", 7, 10))),
    Op.ARCCOSH: Math(1, body=_arccosh, ulp=1, ulp_ld=0.75, domains=(
        ("[1, 10]", "uniform", 1, 10), ("x near 1", "near", 1.0, -1),
        ("1..1e300", "log", 0, 300), ("1e7..1e10 (the 2^28 switch)", "log", 7, 10))),
    Op.ARCTANH: Math(1, body=_arctanh, ulp=1, ulp_ld=0.75, domains=(
        ("(-1, 1)", "uniform", -1, 1), ("[-0.5, 0.5]", "uniform", -0.5, 0.5),
        ("1e-300..1e-1", "log", -300, -1), ("-1e-300..-1e-1", "-log", -300, -1),
        ("x near 1", "near", 1.0, -1), ("x near -1", "near", -1.0, -1))),
})  # fmt: skip
