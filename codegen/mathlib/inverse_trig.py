"""The inverse trigonometric functions as branch-free LLVM IR: arcsin and arccos (a polynomial
fitted here by the Remez exchange in mpmath, the half-angle identity above 1/2 as FDLIBM's
``e_asin.c``/``e_acos.c`` reduce, here with one polynomial for both ranges), arctan and arctan2
(Cephes' ``atan.c``).
"""

from __future__ import annotations

import math

import llvmlite.ir as ir

from ...core.ops import Op

from .core import (
    MATH,
    PIO2,
    _PI,
    Math,
    _bits,
    _c,
    _double,
    _eq,
    _fast_two_sum,
    _fma,
    _gt,
    _horner,
    _i,
    _intrinsic,
    _isnan,
    _lt,
    _split,
)

# ----------------------------------------------------------------------------------------------
# arcsin and arccos

#: asin(s) = s + s z P(z), z = s^2 in [0, 1/4]: a degree-12 polynomial fitted by the Remez
#: exchange to (asin(sqrt z)/sqrt z - 1)/z, error relative to asin(s) (P[0] fixed to fl(1/6));
#: 2^-59.5 with the coefficients rounded to double.
ASIN_P = [0.16666666666666666, 0.07499999999990897, 0.04464285715860319, 0.030381943375213157,
          0.022372198222874465, 0.017351885321429318, 0.013977807588519665,
          0.011421814373991293, 0.010660024403327717, 0.004134604884683384,
          0.020719612276407007, -0.01966732148305932, 0.03183202674043752]  # fmt: skip
PIO2_DD = [PIO2[0], PIO2[1]]
PI_DD = _split(_PI, 2)
#: bits of 1/s ~ RECIP_MAGIC - bits(s) for normal s (within 12.5%): enough for the tail of sqrt
RECIP_MAGIC = 0x7FDE6238502484BA


def _asin_core(b, x):
    """(big, u, tail) with asin|x| = u + tail for |x| <= 1/2 and
    2 asin(sqrt((1 - |x|)/2)) = u + tail above (so asin|x| = pi/2 - (u + tail) there).

    Below 1/2: u = a = |x|, z = a^2; above: z = (1 - a)/2 (exact), s = sqrt(z) with its
    rounding error sl = (z - s^2)/(2s) (the remainder exact by fma, 1/s from the bit pattern to
    12%, which is plenty for a term below ulp(s)), u = 2s (exact). One polynomial in z serves
    both: tail = u z P(z) (+ 2 sl). |x| > 1 gives z < 0, so s and everything after it NaN."""
    a = _intrinsic(b, "llvm.fabs", x)
    big = _gt(b, a, _c(0.5))
    zb = b.fmul(b.fsub(_c(1.0), a), _c(0.5))
    z = b.select(big, zb, b.fmul(a, a))
    s = _intrinsic(b, "llvm.sqrt", zb)
    rs = _double(b, b.sub(_i(RECIP_MAGIC), _bits(b, s)))  # ~1/s
    sl2 = b.fmul(_fma(b, b.fneg(s), s, zb), rs)  # 2 sl
    u = b.select(big, b.fadd(s, s), a)
    ul = b.select(big, sl2, _c(0.0))
    p = b.fmul(z, _horner(b, z, ASIN_P))
    tail = _fma(b, u, p, ul)
    return big, u, tail


def _arcsin(b, x):
    """asin(x) = sign(x) asin|x|: for |x| <= 1/2, a + a z P(z) (z = a^2); above,
    pi/2 - 2 asin(sqrt((1 - a)/2)) with pi/2 a double-double and the leading subtraction by an
    exact fast two-sum (:func:`_asin_core`). Both computed, one selected; the sign by
    copysign (asin(-0) = -0). NaN outside [-1, 1] and for NaN, as numpy. Measured 0.65 ulp
    (long double reference; numpy's own arcsin: 0.84), the worst just above |x| = 1/2."""
    big, u, tail = _asin_core(b, x)
    kh = b.select(big, _c(PIO2_DD[0]), _c(0.0))
    kl = b.select(big, _c(PIO2_DD[1]), _c(0.0))
    su = b.select(big, b.fneg(u), u)
    st = b.select(big, b.fneg(tail), tail)
    hh, he = _fast_two_sum(b, kh, su)
    res = b.fadd(hh, b.fadd(he, b.fadd(kl, st)))
    return _intrinsic(b, "llvm.copysign", res, x)


def _arccos(b, x):
    """acos(x) from the core of :func:`_arcsin`: pi/2 - asin(x) for |x| <= 1/2,
    2 asin(sqrt((1 - x)/2)) for x > 1/2, pi - 2 asin(sqrt((1 + x)/2)) for x < -1/2; pi/2 and pi
    as double-doubles, the leading sum an exact fast two-sum, then one rounding of the rest.
    NaN outside [-1, 1] and for NaN, as numpy. Measured 0.63 ulp (numpy's own: 0.82)."""
    big, u, tail = _asin_core(b, x)
    neg = _lt(b, x, _c(0.0))
    zero = _c(0.0)
    kh = b.select(big, b.select(neg, _c(PI_DD[0]), zero), _c(PIO2_DD[0]))
    kl = b.select(big, b.select(neg, _c(PI_DD[1]), zero), _c(PIO2_DD[1]))
    # u + tail is subtracted for |x| <= 1/2 with x >= 0 (-0 included) and for x < -1/2
    minus = b.xor(big, neg)
    minus = b.xor(minus, ir.Constant(ir.IntType(1), 1))
    su = b.select(minus, b.fneg(u), u)
    st = b.select(minus, b.fneg(tail), tail)
    hh, he = _fast_two_sum(b, kh, su)
    return b.fadd(hh, b.fadd(he, b.fadd(kl, st)))


# ----------------------------------------------------------------------------------------------
# atan and atan2: Cephes' atan.c (S. L. Moshier, "Methods and Programs for Mathematical
# Functions", 1989): |x| is reduced to [0, 0.66] by pi/2 - atan(1/x) above tan(3pi/8) and
# pi/4 + atan((x-1)/(x+1)) between 0.66 and tan(3pi/8), then a (4,5) rational approximation in
# x^2; the lost low bits of pi/2 and pi/4 are added back (MOREBITS). All branches are computed
# and selected, so a loop of it vectorises. Measured < 0.9 ulp against a long-double reference.

_ATAN_P = (-6.485021904942025371773e1, -1.228866684490136173410e2, -7.500855792314704667340e1,
           -1.615753718733365076637e1, -8.750608600031904122785e-1)  # fmt: skip
_ATAN_Q = (1.945506571482613964425e2, 4.853903996359136964868e2, 4.328810604912902668951e2,
           1.650270098316988542046e2, 2.485846490142306297962e1, 1.0)  # fmt: skip
_T3P8 = 2.41421356237309504880  # tan(3 pi / 8)
_MOREBITS = 6.123233995736765886130e-17  # pi/2 - fl(pi/2)


def _atan_abs(b, a):
    """atan(a) for a >= 0 (or NaN)."""
    big = _gt(b, a, _c(_T3P8))
    mid = b.and_(_gt(b, a, _c(0.66)), b.not_(big))
    t = b.select(
        big,
        b.fdiv(_c(-1.0), a),
        b.select(mid, b.fdiv(b.fsub(a, _c(1.0)), b.fadd(a, _c(1.0))), a),
    )
    z = b.fmul(t, t)
    r = b.fdiv(b.fmul(z, _horner(b, z, _ATAN_P)), _horner(b, z, _ATAN_Q))
    r = _fma(b, t, r, t)
    base = b.select(big, _c(math.pi / 2), b.select(mid, _c(math.pi / 4), _c(0.0)))
    extra = b.select(big, _c(_MOREBITS), b.select(mid, _c(0.5 * _MOREBITS), _c(0.0)))
    return b.fadd(base, b.fadd(r, extra))


def _atan(b, x):
    """atan(x): odd, so the reduction of |x| with the sign put back (``copysign`` keeps -0.0
    and NaN as they are)."""
    return _intrinsic(b, "llvm.copysign", _atan_abs(b, _intrinsic(b, "llvm.fabs", x)), x)


def _atan2(b, y, x):
    """atan2(y, x) as C's: atan of min(|x|,|y|) / max(|x|,|y|) (<= 1, so the reduction above
    stays in its accurate range), reflected by quadrant, with the sign of ``y``. Both zero:
    0 or pi (by the sign of x); both infinite: pi/4 or 3pi/4; NaN in, NaN out."""
    ax, ay = _intrinsic(b, "llvm.fabs", x), _intrinsic(b, "llvm.fabs", y)
    hi = _intrinsic(b, "llvm.maxnum", ax, ay)
    lo = _intrinsic(b, "llvm.minnum", ax, ay)
    inf = _c(math.inf)
    both_inf = b.and_(_eq(b, ax, inf), _eq(b, ay, inf))
    ratio = b.select(_eq(b, hi, _c(0.0)), _c(0.0), b.fdiv(lo, hi))
    a = _atan_abs(b, b.select(both_inf, _c(1.0), ratio))
    # the reflections pi/2 - a and pi - t, with the low bits of pi/2 and pi carried apart
    # (hi + lo) and added once at the end
    swap = _gt(b, ay, ax)
    hi = b.select(swap, b.fsub(_c(math.pi / 2), a), a)
    lo = b.select(swap, _c(_MOREBITS), _c(0.0))
    negative_x = b.icmp_signed("<", _bits(b, x), _i(0))  # -0.0 counts: atan2(0, -0) = pi
    hi, lo = (
        b.select(negative_x, b.fsub(_c(math.pi), hi), hi),
        b.select(negative_x, b.fsub(_c(2 * _MOREBITS), lo), lo),
    )
    t = b.select(b.or_(_isnan(b, x), _isnan(b, y)), _c(math.nan), b.fadd(hi, lo))
    return _intrinsic(b, "llvm.copysign", t, y)


#: This family's rows of the math table (:data:`.core.MATH`).
MATH.update({
    Op.ARCSIN:  Math(1, body=_arcsin, ulp=1, ulp_ld=0.75, domains=(
        ("[-0.5, 0.5]", "uniform", -0.5, 0.5), ("[-1, 1]", "uniform", -1, 1),
        ("1e-300..1e-1", "log", -300, -1), ("x near 1", "near", 1.0, -1),
        ("x near -1", "near", -1.0, -1))),
    Op.ARCCOS:  Math(1, body=_arccos, ulp=1, ulp_ld=0.75, domains=(
        ("[-0.5, 0.5]", "uniform", -0.5, 0.5), ("[-1, 1]", "uniform", -1, 1),
        ("-1e-300..-1e-1", "-log", -300, -1), ("x near 1", "near", 1.0, -1),
        ("x near -1", "near", -1.0, -1))),
    Op.ARCTAN:  Math(1, body=_atan, ulp=1, ulp_ld=0.95, domains=(
        ("[-1, 1]", "uniform", -1, 1), ("[-10, 10]", "uniform", -10, 10),
        ("1e-300..1e300", "log", -300, 300), ("-1e-20..-1e20", "-log", -20, 20))),
    Op.ARCTAN2: Math(2, body=_atan2, ulp=2, ulp_ld=2.0, domains=(
        ("y, x in [-10, 10]", "atan2", -10, 10), ("y, x in [-1e-3, 1e-3]", "atan2", -1e-3, 1e-3))),
})  # fmt: skip
