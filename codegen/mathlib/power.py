"""``pow`` as branch-free IR: exp(y log|x|) with a double-double log from the series
``log m = 2 atanh s = 2 (s + s^3/3 + s^5/5 + ...)`` (coefficients 2/(2k+1), exact rationals rounded
to double) and the Cody-Waite exp of :mod:`.core` applied to a double-double argument; numpy's
(C99 ``pow``) special cases bit-exact.
"""

from __future__ import annotations

import math

import llvmlite.ir as ir

from ...core.ops import Op

from .core import (
    ATANH_SERIES,
    F64,
    LN2_DD,
    MATH,
    MIN_NORMAL,
    TWO_THIRDS,
    Math,
    _c,
    _clamp,
    _eq,
    _exp_core,
    _fast_two_sum,
    _fma,
    _gt,
    _horner,
    _intrinsic,
    _isnan,
    _lt,
    _reduce_exponent,
    _two_sum,
)

def _log_dd(b, x):
    """log(x) as a double-double (h, l) for finite x > 0, absolute error ~2^-66 |log m| + 2^-100.

    x = 2^k m, m in [sqrt(2)/2, sqrt(2)); s = (m - 1)/(m + 1) as a double-double (m + 1 by an
    exact two-sum, the quotient's remainder by fma); log m = 2s + (2/3) s^3 + s^5 Q(s^2) where
    Q = 2/5 + 2/7 s^2 + ... + 2/23 s^18 (series truncated below 2^-70 for |s| <= 0.1716), the
    first two terms in double-double; k ln 2 with ln 2 as a double-double and an exact product.
    """
    sub = _lt(b, x, _c(MIN_NORMAL))
    xs = b.select(sub, b.fmul(x, _c(2.0**54)), x)
    m, k = _reduce_exponent(b, xs)
    dk = b.fadd(b.sitofp(k, F64), b.select(sub, _c(-54.0), _c(0.0)))
    f = b.fsub(m, _c(1.0))  # exact
    dh, dl = _two_sum(b, m, _c(1.0))
    sh = b.fdiv(f, dh)
    # low part of f/(m+1): remainder by fma, divided by m+1 as a product with 1/(m+1) = (1-s)/2
    inv = b.fmul(b.fsub(_c(1.0), sh), _c(0.5))
    sl = b.fmul(b.fsub(_fma(b, b.fneg(sh), dh, f), b.fmul(sh, dl)), inv)
    z = b.fmul(sh, sh)
    zl = _fma(b, sh, sh, b.fneg(z))
    ch = b.fmul(z, sh)  # s^3 = ch + cl
    cl = b.fadd(_fma(b, z, sh, b.fneg(ch)), b.fadd(b.fmul(zl, sh), b.fmul(b.fmul(_c(3.0), z), sl)))
    th = b.fmul(ch, _c(TWO_THIRDS[0]))  # (2/3) s^3 = th + tl
    tl = b.fadd(
        _fma(b, ch, _c(TWO_THIRDS[0]), b.fneg(th)),
        b.fadd(b.fmul(ch, _c(TWO_THIRDS[1])), b.fmul(cl, _c(TWO_THIRDS[0]))),
    )
    tail = b.fmul(b.fmul(ch, z), _horner(b, z, ATANH_SERIES))
    kh = b.fmul(dk, _c(LN2_DD[0]))
    kl = _fma(b, dk, _c(LN2_DD[0]), b.fneg(kh))
    kl = _fma(b, dk, _c(LN2_DD[1]), kl)
    a, ae = _two_sum(b, kh, b.fmul(_c(2.0), sh))
    a, ae2 = _two_sum(b, a, th)
    lo = b.fadd(b.fadd(ae, ae2), b.fadd(kl, b.fmul(_c(2.0), sl)))
    lo = b.fadd(lo, b.fadd(tl, tail))
    return _fast_two_sum(b, a, lo)


def _pow(b, x, y):
    """x**y with numpy's (C99 ``pow``) special cases.

    Core: |x|^y = exp(y log|x|) with log|x| = h + l from :func:`_log_dd`, y (h + l) as a
    double-double (exact product by fma), and :func:`_exp_core` on that double-double, so the
    result keeps ~2^-62 relative accuracy in the exponent even for results near 2^±1023.
    Special cases, applied by select in this order: y = ±inf (|x| = 1 -> 1, else 0 or inf);
    x = ±0 or ±inf (0 or inf, signed like x when y is an odd integer); x < 0 finite: NaN for a
    non-integer y, negated for an odd integer y; NaN in x or y -> NaN; then pow(x, ±0) = 1 and
    pow(1, y) = 1 for any x, y (NaN included).
    """
    ax = _intrinsic(b, "llvm.fabs", x)
    ay = _intrinsic(b, "llvm.fabs", y)
    h, l = _log_dd(b, ax)
    ph = b.fmul(y, h)
    pl = _fma(b, y, l, _fma(b, y, h, b.fneg(ph)))
    ph_c = _clamp(b, ph, -746.0, 710.0)
    clamped = b.fcmp_unordered("!=", ph_c, ph)
    pl = b.select(clamped, _c(0.0), pl)
    res = _exp_core(b, ph_c, pl)

    y_finite = _lt(b, ay, _c(math.inf))
    y_int = b.and_(y_finite, _eq(b, _intrinsic(b, "llvm.floor", y), y))
    hy = b.fmul(y, _c(0.5))
    y_odd = b.and_(y_int, b.fcmp_ordered("!=", _intrinsic(b, "llvm.floor", hy), hy))
    inf, zero = _c(math.inf), _c(0.0)
    y_pos = _gt(b, y, zero)
    # y = ±inf, x finite
    big = b.xor(_lt(b, ax, _c(1.0)), y_pos)
    at_inf = b.select(_eq(b, ax, _c(1.0)), _c(1.0), b.select(big, inf, zero))
    res = b.select(y_finite, res, at_inf)
    # x = ±0 or ±inf
    mag = b.select(b.xor(_eq(b, ax, zero), y_pos), inf, zero)
    mag = b.select(y_odd, _intrinsic(b, "llvm.copysign", mag, x), mag)
    edge = b.or_(_eq(b, ax, zero), _eq(b, ax, inf))
    res = b.select(edge, mag, res)
    # x < 0 finite
    neg = b.and_(_lt(b, x, zero), b.fcmp_ordered(">", x, _c(-math.inf)))
    res = b.select(b.and_(neg, y_odd), b.fneg(res), res)
    res = b.select(
        b.and_(b.and_(neg, y_finite), b.xor(y_int, ir.Constant(ir.IntType(1), 1))),
        _c(math.nan),
        res,
    )
    # NaNs, then the two cases that beat NaN
    res = b.select(b.or_(_isnan(b, x), _isnan(b, y)), _c(math.nan), res)
    res = b.select(_eq(b, x, _c(1.0)), _c(1.0), res)
    return b.select(_eq(b, y, zero), _c(1.0), res)


#: This family's rows of the math table (:data:`.core.MATH`).
MATH.update({
    # pow's domains are two-argument samplers, named here and defined in tests/test_mathlib.py
    Op.POW:     Math(2, body=_pow, ulp=1, ulp_ld=0.9, domains=(
        ("x in [0,10], y in [-10,10]", "pow", 0, 0), ("results near 2^+-1023", "pow", 0, 0),
        ("x near 1, |y| <= 7e4", "pow", 0, 0), ("negative x, integer y", "pow", 0, 0),
        ("subnormal x and results", "pow", 0, 0))),
})  # fmt: skip
