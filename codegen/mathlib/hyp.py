"""The exp family's IR bodies: ``exp2``, ``sinh``, ``cosh`` and ``cbrt`` (the helpers come
from :mod:`.core`).

Branch-free like the rest of mathlib: every range is computed and the right one selected, integer
work on the bit pattern for exponents, no fast-math flags. The polynomials were fitted here (a
Remez exchange in mpmath, 60 digits, minimising the relative error; the script's method is
described at each table); the rounded coefficients' errors are quoted next to them.
"""

from __future__ import annotations

import math

from ...core.ops import Op

from .core import (
    EXP_SHIFT,
    LN2_HI,
    LN2_LO,
    LN2_TAIL,
    LOG2E,
    MATH,
    SHIFT,
    SQRT2_HI,
    SQRT2_TAIL,
    Math,
    _bits,
    _c,
    _clamp,
    _double,
    _eq,
    _f64_bits,
    _fast_two_sum,
    _fma,
    _gt,
    _horner,
    _i,
    _intrinsic,
    _lt,
)

# ----------------------------------------------------------------------------------------------
# exp2


#: exp(r) = 1 + r + r^2 EXP2_Q(r) on |r| <= ln2/4: degree 8 fitted here by the Remez exchange
#: (mpmath, 60 digits) to (e^r - 1 - r)/r^2, relative error 2^-55.0, i.e. 2^-60.9 of e^r with the
#: coefficients rounded: one fma more than exp's EXP_Q (2^-54.9), which keeps exp2 within 0.9 ulp.
EXP2_Q = [0.5, 0.16666666666666596, 0.04166666666666724, 0.008333333333651192,
          0.001388888888809385, 0.00019841266029439837, 2.4801589773417307e-05,
          2.7574247220671796e-06, 2.756201973006425e-07]  # fmt: skip


def _exp2(b, x):
    """2^x by :func:`.exp._exp`'s scheme (two-entry table 2^(j/2), e^r = 1 + u), the
    reduction done in base 2: n = round(2x), f = x - n/2 exactly (|f| <= 1/4), 2^x =
    2^(n div 2) 2^(j/2) e^(f ln 2) with j = n mod 2. The reduced argument r = f ln 2 + t_j (t_j
    the table's tail, see :func:`_exp`) is rounded once: one fma of f by ``ln 2`` rounded to
    double, whose addend is f times ln 2's tail plus t_j (both tiny, their rounding below
    2^-100). No error grows with |x| (exp(x ln 2) would round x ln 2 first: 40 ulp at x = 700).
    u = r + r (r EXP2_Q(r)) (degree 10 in all, :data:`EXP2_Q`), then as exp: y = fma(S, u, S)
    and the scale in two exact steps, so overflow to inf and subnormal results come from one
    rounding (two for subnormals). x is clamped to [-1080, 1030]: exp2(-inf) = 0,
    exp2(inf) = inf, NaN -> NaN.

    Error (2^20 points per range, several seeds): <= 0.77 ulp against long double, 0.81 for
    subnormal results, <= 1 ulp from numpy. (With exp's degree-9 EXP_Q: 0.95, ~4% faster.)"""
    x = _clamp(b, x, -1080.0, 1030.0)
    kd = _fma(b, x, _c(2.0), _c(EXP_SHIFT))  # low bits: n + 4092, n = round(2x)
    nf = b.fsub(kd, _c(EXP_SHIFT))
    m = _bits(b, kd)
    f = _fma(b, nf, _c(-0.5), x)  # exact
    mask = b.sub(_i(0), b.and_(m, _i(1)))  # all ones for j = 1
    tail = _double(b, b.and_(mask, _i(_f64_bits(SQRT2_TAIL))))
    r = _fma(b, f, _c(math.log(2.0)), _fma(b, f, _c(LN2_TAIL), tail))
    u = _fma(b, r, b.fmul(r, _horner(b, r, EXP2_Q)), r)
    tadj = b.and_(mask, _i((_f64_bits(SQRT2_HI) - (1 << 51) - (1023 << 52)) % (1 << 64)))
    e1 = b.shl(b.lshr(m, _i(2)), _i(52))
    scale = _double(b, b.sub(b.add(tadj, b.shl(m, _i(51))), e1))
    return b.fmul(_fma(b, scale, u, scale), _double(b, e1))


# ----------------------------------------------------------------------------------------------
# sinh and cosh

#: cosh(r) = 1 + z COSH_P(z), z = r^2, |r| <= 0.3466 (> ln2/2): degree 5 in z fitted here by the
#: Remez exchange (mpmath, 60 digits) to (cosh(r) - 1)/z, relative error 2^-64.7 (2^-61.1 with
#: the coefficients rounded to double).
COSH_P = [0.5, 0.04166666666666668, 0.00138888888888791, 2.4801587336385536e-05,
          2.7557263333636493e-07, 2.0918119374254905e-09]  # fmt: skip
#: sinh(r) = r + r z SINH_P(z): degree 4 fitted likewise to (sinh(r)/r - 1)/z, relative error
#: 2^-54.2 (2^-53.0 rounded: the leading 1/6 itself is rounded), i.e. < 2^-58 of sinh(r).
SINH_P = [0.16666666666666669, 0.008333333333330068, 0.00019841269863026835,
          2.75572684963632e-06, 2.5100370069870228e-08]  # fmt: skip
#: |x| is clamped here (n <= 1025, so 2^(n-2) stays finite): sinh and cosh overflow from
#: 710.4758600739439 on.
HYP_MAX = 710.5
#: n is capped here in q = 2^(1-2n) (kept normal; beyond, q is below 2^-1000 of the result).
HYP_QCAP = 500


def _hyp_core(b, x):
    """The part sinh and cosh of x share (emitted identically by both, so that after inlining
    LLVM computes it once when a loop needs both, as a gradient does).

    a = |x| (clamped to HYP_MAX) = n ln 2 + r, n = round(a / ln 2) >= 0, by the Cody-Waite split
    of :func:`_exp_core`: rh = a - n LN2_HI exactly, rl = n LN2_LO, r = rh - rl rounded (used
    only in the small terms). With q = 2^(1-2n), A = 2 + q and D = 2 - q, the addition theorem
    (cosh(n ln 2) = 2^(n-2) A, sinh(n ln 2) = 2^(n-2) D) gives

        sinh a = 2^(n-2) (D cosh r + A sinh r),   cosh a = 2^(n-2) (A cosh r + D sinh r)

    with cosh r = 1 + ce, sinh r = r + so from the even and odd polynomials COSH_P, SINH_P.
    The factor 2^(n-2) is one double up to n = 1025 (HYP_MAX), applied by one product, so the
    result's overflow comes from one rounding. A and D are exact up to n = 26 and round to 2
    from n = 27 on: qe = (2 - D) - q (0 or -q, exact) is the rounding, and w = qe (1 - rh) its
    effect on the leading terms (D + A rh gets +w, A + D rh gets -w).
    Returns (rh, rl, ce, so, A, D, w, 2^(n-2))."""
    a = _intrinsic(b, "llvm.fabs", x)
    a = b.select(_gt(b, a, _c(HYP_MAX)), _c(HYP_MAX), a)  # NaN passes
    kd = _fma(b, a, _c(LOG2E), _c(SHIFT + 1021))  # low bits: n + 1021
    nf = b.fsub(kd, _c(SHIFT + 1021))
    rh = _fma(b, nf, _c(-LN2_HI), a)  # exact
    rl = b.fmul(nf, _c(LN2_LO))
    r = b.fsub(rh, rl)
    z = b.fmul(r, r)
    ce = b.fmul(z, _horner(b, z, COSH_P))
    so = b.fmul(b.fmul(z, r), _horner(b, z, SINH_P))
    # q = 2^(1 - 2 min(n, HYP_QCAP)): the exponent 1024 - 2 nc rounded into the low bits of kq
    nc = b.select(_gt(b, nf, _c(HYP_QCAP)), _c(HYP_QCAP), nf)
    kq = _fma(b, nc, _c(-2.0), _c(SHIFT + 1024))
    q = _double(b, b.shl(_bits(b, kq), _i(52)))
    big_a = b.fadd(_c(2.0), q)
    big_d = b.fsub(_c(2.0), q)
    qe = b.fsub(b.fsub(_c(2.0), big_d), q)
    w = _fma(b, qe, b.fneg(rh), qe)
    scale = _double(b, b.shl(_bits(b, kd), _i(52)))  # 2^(n-2): the shift's bits drop out
    return rh, rl, ce, so, big_a, big_d, w, scale


def _hyp_sum(b, lead, coef_r, coef_c, rh, rl, ce, so, w):
    """lead + coef_r (rh - rl + so) + coef_c ce + w with the leading lead + coef_r rh exact
    (coef_r rh an exact product by fma, then a fast two-sum: |lead| >= |coef_r rh| for n >= 1,
    lead = 0 at n = 0), the small rest added to its low part, one final rounding."""
    p = b.fmul(coef_r, rh)
    pe = _fma(b, coef_r, rh, b.fneg(p))
    s, se = _fast_two_sum(b, lead, p)
    tail = b.fadd(b.fadd(se, pe), _fma(b, coef_r, b.fsub(so, rl), _fma(b, coef_c, ce, w)))
    return b.fadd(s, tail)


def _sinh(b, x):
    """sinh(x) = 2^(n-2) (D + A rh + ...) from :func:`_hyp_core`, the sum by :func:`_hyp_sum`:
    where the terms cancel (n = 1, r < 0: sinh of 0.35..0.52 as 0.75 cosh r + 1.25 sinh r) only
    the small tail is rounded before the final sum, and n = 0 (|x| < ln2/2) gives 4 (x + so) / 4
    with r = x exactly: the odd polynomial itself, tiny and subnormal x exact. The sign restored
    by copysign (sinh(-0) = -0); finite up to |x| = 710.4758600739439 as numpy's, inf beyond;
    NaN -> NaN.

    Error (2^20 points per range, several seeds): <= 0.87 ulp against long double (the
    cancellation range 0.35..0.4, where the rounding of r and of ce shows), <= 1 ulp from
    numpy."""
    rh, rl, ce, so, big_a, big_d, w, scale = _hyp_core(b, x)
    v = _hyp_sum(b, big_d, big_a, big_d, rh, rl, ce, so, w)
    return _intrinsic(b, "llvm.copysign", b.fmul(v, scale), x)


def _cosh(b, x):
    """cosh(x) = 2^(n-2) (A + (D rh + tail)) from :func:`_hyp_core`: no cancellation (A >= 2 >
    |D rh|), so the inner sum is rounded once by an fma (<= 1/4 ulp) instead of being kept exact
    as sinh's (which measured 0.69 ulp but costs ~8% in a gradient loop). cosh(±0) = 1, finite
    up to |x| = 710.4758600739439, inf beyond; NaN -> NaN.

    Error (2^20 points per range, several seeds): <= 0.96 ulp against long double (results
    just below a power of two, r < 0), <= 1 ulp from numpy."""
    rh, rl, ce, so, big_a, big_d, w, scale = _hyp_core(b, x)
    tail = _fma(b, big_d, b.fsub(so, rl), _fma(b, big_a, ce, b.fneg(w)))
    v = b.fadd(big_a, _fma(b, big_d, rh, tail))
    return b.fmul(v, scale)


# ----------------------------------------------------------------------------------------------
# cbrt

#: The initial guess of a^(-1/3) from the bit pattern (the idea of the "fast inverse square root"
#: of Quake III, for the cube root): hi(W0) = RCBRT_MAGIC - hi(a)/3 on the high 32 bits (hi(a) =
#: biased exponent 2^20 + top 20 mantissa bits, log2 a up to a piecewise-linear error), the
#: constant ~ (4/3) 1023 2^20 tuned here to minimise the maximum relative error of W0 over
#: [1, 8) (a coarse-to-fine integer search in numpy on 2*10^6 points): 4.02%.
RCBRT_MAGIC = 0x553F1342
#: below this a is scaled by 2^324 (the result by 2^-108), so that the residual y^3 - a (~2^-53 a)
#: stays normal: subnormal inputs and those near them
CBRT_TINY = 2.0**-900


def _rcbrt_step(b, a, w):
    """w (1 + e/3 + 2e^2/9), e = 1 - a w^3: a second-order step toward a^(-1/3) (the first terms
    of (1 - e)^(-1/3)), multiplications only; relative error d -> ~(14/81) 27 d^3 = 4.7 d^3."""
    e = _fma(b, b.fneg(b.fmul(a, w)), b.fmul(w, w), _c(1.0))
    return _fma(b, w, b.fmul(e, _fma(b, e, _c(2 / 9), _c(1 / 3))), w)


def _cbrt(b, x):
    """cbrt(x) without pow or division. a = |x| (below CBRT_TINY = 2^-900, subnormals included,
    scaled by 2^324 first and the result by 2^-108 at the end):

    1. W0 ~ a^(-1/3) to 4% from the bit pattern (:data:`RCBRT_MAGIC`): hi(a) as a double
       (or'ed into 2^52's pattern), the fma hi(a) (-1/3) + magic rounded to an integer against
       the 1.5 2^52 shift, shifted back into the high word. Exponent and mantissa in one go: no
       split, no table.
    2. Two second-order steps (:func:`_rcbrt_step`): 4% -> 3e-4 -> 1.3e-10.
    3. y1 = a W^2 ~ cbrt(a), then a Newton step on y^3 = a, y = y1 - (y1^3 - a) W^2/3 (W^2/3
       standing for 1/(3 y1^2)): the relative error squares (< 2^-62) and the result is rounded
       once. The residual is fma(y1^2, y1, -a) with y1^2 rounded, an error <= 2^-53 a that
       reaches the result as <= 1/3 ulp; with y1^2 as a double-double (two more fmas) this
       measured 0.50 ulp (correctly rounded but for a few cases) but cost ~15% in a gradient.

    cbrt(±0) = ±0 comes out of the steps (a = 0: y1 = 0 W^2 = 0); ±inf by a select, NaN
    propagates; the sign by copysign (cbrt is odd). Error (2^20 points per range, several
    seeds): <= 0.74 ulp against long double, <= 1 ulp from numpy."""
    a = _intrinsic(b, "llvm.fabs", x)
    sub = _lt(b, a, _c(CBRT_TINY))
    a = b.select(sub, b.fmul(a, _c(2.0**324)), a)
    hi = b.fsub(_double(b, b.or_(b.lshr(_bits(b, a), _i(32)), _i(_f64_bits(2.0**52)))), _c(2.0**52))
    kd = _fma(b, hi, _c(-1 / 3), _c(SHIFT + RCBRT_MAGIC))
    w = _double(b, b.shl(_bits(b, kd), _i(32)))
    w = _rcbrt_step(b, a, _rcbrt_step(b, a, w))
    w2 = b.fmul(w, w)
    y1 = b.fmul(a, w2)
    d = _fma(b, b.fmul(y1, y1), y1, b.fneg(a))  # y1^3 - a
    y = _fma(b, b.fmul(d, w2), _c(-1 / 3), y1)
    y = b.fmul(y, b.select(sub, _c(2.0**-108), _c(1.0)))
    y = b.select(_eq(b, a, _c(math.inf)), a, y)
    return _intrinsic(b, "llvm.copysign", y, x)


#: This family's rows of the math table (:data:`.core.MATH`).
MATH.update({
    Op.EXP2:    Math(1, body=_exp2, ulp=1, ulp_ld=0.9, domains=(
        ("[-1074, 1023.9]", "uniform", -1074.5, 1023.9), ("[-1, 1]", "uniform", -1, 1),
        ("subnormal results", "uniform", -1074.5, -1020))),
    Op.SINH:    Math(1, body=_sinh, ulp=1, ulp_ld=1.0, domains=(
        ("[-1, 1]", "uniform", -1, 1), ("[-25, 25]", "uniform", -25, 25),
        ("[-710.475, 710.475]", "uniform", -710.475, 710.475), ("1e-300..1", "log", -300, 0),
        ("-1e-300..-1", "-log", -300, 0))),
    Op.COSH:    Math(1, body=_cosh, ulp=1, ulp_ld=1.0, domains=(
        ("[-1, 1]", "uniform", -1, 1), ("[-25, 25]", "uniform", -25, 25),
        ("[-710.475, 710.475]", "uniform", -710.475, 710.475), ("1e-300..1", "log", -300, 0))),
    Op.CBRT:    Math(1, body=_cbrt, ulp=1, ulp_ld=0.8, domains=(
        ("[-10, 10]", "uniform", -10, 10), ("[0.5, 8]", "uniform", 0.5, 8),
        ("subnormal..1e308", "log", -323.3, 308.2), ("-subnormal..-1e308", "-log", -323.3, 308.2))),
})  # fmt: skip
