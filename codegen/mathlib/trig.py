"""tan, arcsin and arccos as branch-free LLVM IR (rows of :data:`codegen.mathlib.MATH`).

Built on the helpers of :mod:`codegen.mathlib` (imported from there at the end of its helper
section, so this module sees them defined). Polynomials and rational functions fitted here: a
Remez exchange in mpmath (60 digits) minimising the error relative to the final result, with the
leading coefficient fixed to its double (1/3, 1/6) and the others rounded to double afterwards;
the bounds quoted are those of the rounded coefficients, sampled on 20001 points.
"""

from __future__ import annotations

import math

import llvmlite.ir as ir

from .core import (
    _PI,
    F64,
    PIO2,
    SHIFT,
    TRIG_LANES,
    TRIG_MAX,
    TWO_OVER_PI,
    _bits,
    _c,
    _compiler_used,
    cold_path,
    _double,
    _eq,
    _fast_two_sum,
    _fma,
    _gt,
    _horner,
    _i,
    _internal,
    _intrinsic,
    _lanewise,
    _lt,
    _reduce_pio2,
    _reduce_pio2_large,
    _split,
    _two_sum,
)

# ----------------------------------------------------------------------------------------------
# tan

#: tan(r) = r + r z P(z)/Q(z), z = r^2, |r| <= pi/4: a (3, 3) rational fitted by the Remez
#: exchange to (tan(sqrt z)/sqrt z - 1)/z on z in [0, 0.617], weighted so that the error is
#: relative to tan(r) (P[0] fixed to fl(1/3)); minimax 2^-62.1, 2^-58.2 with the coefficients
#: rounded to double.
TAN_P = [0.3333333333333333, -0.021433837120392527, 0.00024445528328329046,
         -1.7719012041127164e-08]  # fmt: skip
TAN_Q = [1.0, -0.46430151136117914, 0.024549208489573596, -0.00025557651243281843]


def _odd(b, q):
    """q (an integer-valued double) is odd."""
    half = b.fmul(q, _c(0.5))
    return b.fcmp_ordered("!=", _intrinsic(b, "llvm.floor", half), half)


def _tan_eval(b, x, odd, rh, rl):
    """tan of x = q pi/2 + rh + rl (|rh| <= ~pi/4, |rl| <= ulp(rh)), ``odd`` the parity of q:
    tan(r) = N/D with D = Q(z) (one double, z = rh^2) and N = r D + r^3 P(z) a double-double
    (r D and r^3 by exact products, P as 1/3 + z P'(z) by an exact fast two-sum), so the
    rounding of D cancels from r D / D and only that of r^3 P/Q (its share of the result is
    <= 0.21) and the last one count. For odd q, tan(x) = -1/tan(r) = -D/N: the two quadrants
    swap numerator and denominator, and one division 1/den (with an fma-corrected quotient)
    serves both. rl enters through tan' = 1 + tan^2 (also -cot' = 1 + cot^2). NaN in, NaN
    out; -0.0 kept. (D as a double-double too: 0.68 instead of 0.75 ulp, 5% slower.)"""
    z = b.fmul(rh, rh)
    zl = _fma(b, rh, rh, b.fneg(z))  # rh^2 = z + zl exactly
    ph, pl = _fast_two_sum(b, _c(TAN_P[0]), b.fmul(z, _horner(b, z, TAN_P[1:])))  # P(z)
    d = _horner(b, z, TAN_Q)
    a = b.fmul(rh, d)
    ae = _fma(b, rh, d, b.fneg(a))  # rh d = a + ae exactly
    r3 = b.fmul(rh, z)
    r3l = _fma(b, rh, zl, _fma(b, rh, z, b.fneg(r3)))  # rh^3 = r3 + r3l to ~2^-104
    t = b.fmul(r3, ph)  # |t| <= 0.28 |a|
    tl = _fma(b, r3, pl, _fma(b, r3l, ph, _fma(b, r3, ph, b.fneg(t))))
    nh, ne = _fast_two_sum(b, a, t)
    nl = b.fadd(b.fadd(ne, ae), tl)
    num_h = b.select(odd, b.fneg(d), nh)
    num_l = b.select(odd, _c(0.0), nl)
    den_h = b.select(odd, nh, d)
    den_l = b.select(odd, nl, _c(0.0))
    rcp = b.fdiv(_c(1.0), den_h)
    qt = b.fmul(num_h, rcp)
    rem = b.fadd(_fma(b, b.fneg(qt), den_h, num_h), _fma(b, b.fneg(qt), den_l, num_l))
    # tan(rh + rl) = tan(rh) + rl (1 + tan(rh)^2), and -cot likewise: the tail rl joins the
    # quotient's correction
    corr = _fma(b, rl, _fma(b, qt, qt, _c(1.0)), b.fmul(rem, rcp))
    res = b.fadd(qt, corr)
    return b.select(_eq(b, x, _c(0.0)), x, res)


#: |x| up to which tan reduces in line by :func:`_reduce_pio2_fast`; beyond, the cold path
TAN_FAST_MAX = 2.0**30


def _reduce_pio2_fast(b, x):
    """(odd, rh, rl): x = q pi/2 + rh + rl for |x| <= TAN_FAST_MAX, ``odd`` (i1) q's parity;
    half the operations of :func:`_reduce_pio2` (whose q is exact up to 2^50). q = x 2/pi
    rounded to an integer by the 1.5*2^52 shift (one rounding of x 2/pi, so |rh| <= pi/4 +
    2^-22), its parity the low bit of the shifted value; r1 = x - q P0 exact by fma (x and
    q P0 are multiples of 2^-53 and |r1| < 1); then r1 - q P1 - q P2 with q P1 an exact
    two-product and an error-free two-sum, renormalised. Absolute error ~2^-129 for
    |q| < 2^30, far below the smallest |x - q pi/2| (> 2^-62 for every double)."""
    kd = _fma(b, x, _c(TWO_OVER_PI[0]), _c(SHIFT))
    q = b.fsub(kd, _c(SHIFT))
    r1 = _fma(b, b.fneg(q), _c(PIO2[0]), x)  # exact
    h1 = b.fmul(q, _c(PIO2[1]))
    l1 = _fma(b, q, _c(PIO2[1]), b.fneg(h1))
    rh, e = _two_sum(b, r1, b.fneg(h1))
    rl = b.fsub(e, _fma(b, q, _c(PIO2[2]), l1))
    rh, rl = _fast_two_sum(b, rh, rl)
    return b.trunc(_bits(b, kd), ir.IntType(1)), rh, rl


def _tan(b, x):
    """tan(x) for every double: x = q pi/2 + r by the three-part reduction
    :func:`_reduce_pio2_fast` in line for |x| <= 2^30, larger |x| and +-inf by a call to the
    cold path :func:`_tan_large` (sin/cos's four-part reduction up to 2^50, their 2/pi table
    beyond), taken only when a lane has |x| > 2^30; then :func:`_tan_eval`: the rational
    :data:`TAN_P`/:data:`TAN_Q` on |r| <= pi/4, -1/tan(r) in the odd quadrants from the same
    division. Measured 0.75 ulp (long double reference; numpy's own tan: 0.57) on all ranges,
    the doubles nearest the multiples of pi/2 included. Cost: |x| in (2^30, 2^50] goes through
    the cold path's per-lane scalar code (~20 ns/element instead of ~0.9), as sin/cos beyond
    2^50: the in-line reduction is cut to three parts for speed."""
    res = _tan_eval(b, x, *_reduce_pio2_fast(b, x))
    return cold_path(b, x, res, TAN_FAST_MAX, _tan_large(b.module))


def _tan_large(module: ir.Module) -> ir.Function:
    """``tapejit.math.tan.large``: tan for |x| > TAN_FAST_MAX (2^30) and +-inf (NaN): by the
    four-part :func:`_reduce_pio2` up to 2^50, the 2/pi table beyond; with vector variants for
    the vectoriser (each handles only its lanes above 2^30), as
    :func:`codegen.mathlib._sincos_large` does for sin and cos."""
    name = "tapejit.math.tan.large"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    fn = _internal(module, name, F64, [F64])
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    x = fn.args[0]
    mid = _reduce_pio2(b, x)
    large = _reduce_pio2_large(b, x)
    big = _gt(b, _intrinsic(b, "llvm.fabs", x), _c(TRIG_MAX))
    q, rh, rl = (b.select(big, v2, v1) for v1, v2 in zip(mid, large))
    res = _tan_eval(b, x, _odd(b, q), rh, rl)
    ok = _lt(b, _intrinsic(b, "llvm.fabs", x), _c(math.inf))
    b.ret(b.select(ok, res, _c(math.nan)))
    variants = [_lanewise(module, fn, n, TAN_FAST_MAX) for n in TRIG_LANES]
    mapping = ",".join(f"_ZGV_LLVM_N{n}v_{name}({v.name})" for n, v in zip(TRIG_LANES, variants))
    set.add(fn.attributes, f'"vector-function-abi-variant"="{mapping}"')
    _compiler_used(module, variants)
    return fn


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
