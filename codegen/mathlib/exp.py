"""The exp family's rows: ``exp`` (reduction by ln2/2 against the two-entry table 2^(j/2), a
degree-9 polynomial fitted here: :data:`EXP_Q`), ``expm1`` (Cody-Waite reduction, Taylor
coefficients, a double-double result) and ``tanh`` (an odd minimax polynomial below 0.4, above it
1 - 2/(exp(2|x|) + 1) with a double-double exp). The shared Cody-Waite core
(:func:`.core._exp_core`) and the exp table's constants live in :mod:`.core`; the sources are
cited in :mod:`tapejit.codegen.mathlib`.
"""

from __future__ import annotations

from fractions import Fraction

from ...core.ops import Op

from .core import (
    EXP_SHIFT,
    INV_FACT,
    LN2_HI,
    LN2_LO,
    LOG2E,
    MATH,
    SHIFT,
    SQRT2_HI,
    SQRT2_TAIL,
    _LN2,
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
    _isnan,
    _lt,
    _pow2,
    _two_sum,
)


#: exp's reduction by ln2/2 (:func:`_exp`): LN2_HALF_HI is ln 2 / 2 rounded to 41 significant
#: bits, so n LN2_HALF_HI is exact for |n| < 2^12 (the clamped range has |n| <= 2153) and
#: x - n LN2_HALF_HI is exact too; LN2_HALF_LO (~2^-43) is the rest.
LN2_HALF_HI = float(Fraction(round(_LN2 / 2 * 2**42), 2**42))
LN2_HALF_LO = float(_LN2 / 2 - Fraction(LN2_HALF_HI))
TWO_LOG2E = float(2 / _LN2)
#: exp(r) = 1 + r + r^2 Q(r) on |r| <= ln2/4: a degree-7 Q fitted here to e^r by the Remez
#: exchange (60-digit mpmath, relative error of 1 + r + r^2 Q(r)); with the coefficients rounded
#: to double the relative error is < 2^-54.9 (tests/test_exp_table.py). A degree-8 Q (2^-60.8)
#: costs one more FMA per element: measured 0.80 instead of 0.95 ulp, 3-5% slower.
EXP_Q = [0.499999999999986, 0.16666666666666538, 0.041666666671799274, 0.00833333333379984,
         0.0013888883605997452, 0.0001984126503931278, 2.4822282544961552e-05,
         2.7576131467136165e-06]  # fmt: skip


def _exp(b, x):
    """exp(x); exp(-inf) = 0, exp(inf) = inf, NaN in -> NaN out. x is clamped to [-746, 710].

    A two-entry table 2^(j/2) (the idea of table-driven exps such as ARM optimized-routines'
    ``exp.c`` and glibc's libmvec, cut to N = 2 and selected by bit masks: on this hardware a
    vector gather costs more than the polynomial terms a big table saves). n = round(2x/ln 2),
    x = (n div 2) ln 2 + j ln2/2 + r with j = n mod 2, |r| <= ln2/4:

    * 2^(j/2) = T (1 + t), T = 1 or SQRT2_HI, t = 0 or SQRT2_TAIL, and 1 + t = e^t to 2^-107,
      so the tail moves into the reduced argument: exp(x) = 2^(n div 2) T e^r with
      r = x - n ln2/2 + t = rh - rl, rh = x - n LN2_HALF_HI exactly, rl = n LN2_HALF_LO - t
      (one FMA, |rl| < 2^-31), r rounded once;
    * e^r = 1 + u, u = r + r (r Q(r)) (two roundings: r Q, then u by an FMA), and the result
      y = fma(S, u, S), S = T 2^k2, one more rounding. Error: 0.5 (y) + 0.125 (u, |u| < 0.19)
      + 0.11 (r) + 0.21 (Q, 2^-55 relative) <= 0.96 ulp in the worst case, where T = 1 and
      r < -0.13 (results just below a power of two, whose ulp is the smaller one): measured
      0.951 there (4M points), 0.84 with T = sqrt 2;
    * the scale 2^(n div 2) in two steps, S carrying 2^k2 and a final product by 2^k1
      (k1 = floor((n div 2)/2), k2 = n div 2 - k1, both in the normal range), so overflow to
      inf and gradual underflow come from that one product. As in :func:`_exp_core`, a
      subnormal result is rounded twice (y, then the product): measured 0.86 ulp.

    Branch-free integer work on m = bits(kd) (low bits n + 4092 > 0, :data:`EXP_SHIFT`):
    j = m & 1, 2^k1 = (m >> 2) << 52, bits(S) = A_j + (m << 51) - bits(2^k1) (mod 2^64) with
    A_j = bits(T) - j 2^51 - 1023 2^52, i.e. A_0 = 0 and A_1 selected by the mask -(m & 1),
    which also selects -t. No fast-math flags, so every target rounds alike: AVX2 and AVX-512
    results are bitwise equal. Measured (EAM gradient, n = 10^4..10^5, vs gcc -O3 -ffast-math
    with libmvec): AVX2 0.91-0.97x, AVX-512 0.61-0.67x (the degree-8 form with an exact rh + ...
    sum: 1.03-1.14x and 0.72x)."""
    x = _clamp(b, x, -746.0, 710.0)
    kd = _fma(b, x, _c(TWO_LOG2E), _c(EXP_SHIFT))
    nf = b.fsub(kd, _c(EXP_SHIFT))
    m = _bits(b, kd)
    rh = _fma(b, nf, _c(-LN2_HALF_HI), x)  # exact
    mask = b.sub(_i(0), b.and_(m, _i(1)))  # all ones for j = 1
    neg_tail = _double(b, b.and_(mask, _i(_f64_bits(-SQRT2_TAIL))))
    r = b.fsub(rh, _fma(b, nf, _c(LN2_HALF_LO), neg_tail))
    u = _fma(b, r, b.fmul(r, _horner(b, r, EXP_Q)), r)
    tadj = b.and_(mask, _i((_f64_bits(SQRT2_HI) - (1 << 51) - (1023 << 52)) % (1 << 64)))
    e1 = b.shl(b.lshr(m, _i(2)), _i(52))
    scale = _double(b, b.sub(b.add(tadj, b.shl(m, _i(51))), e1))
    return b.fmul(_fma(b, scale, u, scale), _double(b, e1))


def _expm1_dd(b, xc):
    """(a, low, n): expm1(xc) = (a + low) * (2 if n > 1023 else 1), a + low a double-double with
    |low| <= ulp(a), for xc clamped to [-60, 710] (or NaN).

    Same reduction as :func:`_exp_core`: r = rr + rc as a double-double, expm1(r) = rr + tail,
    tail = rr^2 P(rr) + rc (1 + rr) with the Taylor coefficients 1/2! .. 1/13!. Then
    expm1(x) = ((2^n - 1) + 2^n rr) + 2^n tail, where the first sum is an exact two-sum (2^n rr
    is exact, and so is 2^n - 1 for n <= 53; for n > 53 the -1 joins the low-order part), so
    there is no cancellation loss for n = -1, 1. For n = 1024 (x in (709.44, 709.79]) the scale
    2^n is applied as 2^1023 * 2 by the caller.
    """
    kd = _fma(b, xc, _c(LOG2E), _c(SHIFT))
    nf = b.fsub(kd, _c(SHIFT))
    n = b.sub(_bits(b, kd), _bits(b, _c(SHIFT)))
    hi = _fma(b, nf, _c(-LN2_HI), xc)
    lo = b.fmul(nf, _c(LN2_LO))
    rr = b.fsub(hi, lo)
    rc = b.fsub(b.fsub(hi, rr), lo)
    q = _horner(b, rr, INV_FACT[2:])
    tail = _fma(b, b.fmul(rr, rr), q, _fma(b, rc, rr, rc))
    na = b.select(b.icmp_signed(">", n, _i(1023)), _i(1023), n)
    s = _pow2(b, na)
    wide = b.icmp_signed(">", n, _i(53))
    a, ae = _two_sum(b, b.select(wide, s, b.fsub(s, _c(1.0))), b.fmul(s, rr))
    low = b.fadd(_fma(b, s, tail, ae), b.select(wide, _c(-1.0), _c(0.0)))
    a, low = _fast_two_sum(b, a, low)  # |low| < |a|: renormalise
    return a, low, n


def _expm1(b, x):
    """exp(x) - 1 without cancellation near 0 (:func:`_expm1_dd`, x clamped to [-60, 710]:
    expm1 rounds to -1 below -38). expm1(±0) = ±0, expm1(-inf) = -1, expm1(inf) = inf,
    NaN -> NaN."""
    a, low, n = _expm1_dd(b, _clamp(b, x, -60.0, 710.0))
    res = b.fmul(b.fadd(a, low), b.select(b.icmp_signed(">", n, _i(1023)), _c(2.0), _c(1.0)))
    return b.select(_eq(b, x, _c(0.0)), x, res)


#: tanh(x) = x + x z P(z), z = x^2, on |x| < TANH_SMALL: a degree-8 P fitted by the Remez exchange
#: algorithm (mpmath, 60 digits) to g(z) = tanh(sqrt z)/sqrt z - 1 on [0, 0.16], minimising
#: max |z P(z) - g(z)|; minimax error 2^-59.2, 2^-57.7 after rounding the coefficients to double.
TANH_SMALL = 0.4
TANH_P = [-0.3333333333333321, 0.13333333333302486, -0.0539682539414325, 0.021869487391544467,
          -0.008863207845243522, 0.0035917222938507184, -0.0014521490163374403,
          0.0005696081072669966, -0.00017466183542360082]  # fmt: skip


def _estrin(b, x, coeffs):
    """``coeffs[0] + coeffs[1] x + ...`` by Estrin's scheme (pairs joined by fma with x, x^2,
    x^4, ...): the same polynomial as :func:`_horner` with a dependency chain of log2(n) fmas
    instead of n, which is what limits a loop computing two polynomials per element."""
    terms, p = [_c(a) for a in coeffs], x
    while len(terms) > 1:
        terms = [_fma(b, terms[i + 1], p, terms[i]) if i + 1 < len(terms) else terms[i]
                 for i in range(0, len(terms), 2)]  # fmt: skip
        if len(terms) > 1:
            p = b.fmul(p, p)
    return terms[0]


def _exp_dd_tanh(b, x):
    """exp(x) = eh + el (|el| <= ulp(eh)/2, ~2^-57 relative) for x in [0, 44]: the reduction of
    :func:`_exp_core` with r = hi - corr, 1 + hi as an exact two-sum and the Taylor tail (to
    1/13!, by Estrin) added to its low part; no over/underflow handling (2^n <= 2^64)."""
    kd = _fma(b, x, _c(LOG2E), _c(SHIFT))
    nf = b.fsub(kd, _c(SHIFT))
    n = b.sub(_bits(b, kd), _bits(b, _c(SHIFT)))
    hi = _fma(b, nf, _c(-LN2_HI), x)  # exact
    corr = b.fmul(nf, _c(LN2_LO))
    r = b.fsub(hi, corr)
    one, one_e = _fast_two_sum(b, _c(1.0), hi)  # 1 + hi exactly
    s = _fma(b, b.fmul(r, r), _estrin(b, r, INV_FACT[2:]), b.fsub(one_e, corr))
    eh, el = _fast_two_sum(b, one, s)
    p = _pow2(b, n)
    return b.fmul(eh, p), b.fmul(el, p)


def _tanh(b, x):
    """tanh(x) for a = |x|, both branches computed and one chosen by ``select``:

    * a < TANH_SMALL (0.4): a + a z P(z), z = a^2, the minimax polynomial :data:`TANH_P`; the
      correction a z P is below 0.053 a, so only the final fma rounds noticeably;
    * a >= 0.4: 1 - 2/(e + 1), e = exp(2a) as a double-double (:func:`_exp_dd_tanh`, a clamped to
      22, where tanh rounds to 1), d = e + 1 = dh + dl by an exact two-sum, 1/d = r + rl with
      r = 1/dh and one fma-corrected step rl = r (1 - r dh - r dl), and 1 - 2r = s + se exactly
      (fast two-sum, as fmas), so the result s + (se - 2 rl) carries one rounding.

    Polynomials by Estrin's scheme (the loop is latency-bound). The sign is restored with
    copysign: tanh(±0) = ±0, tanh(±inf) = ±1, NaN -> NaN, tiny x -> x."""
    a = _intrinsic(b, "llvm.fabs", x)
    z = b.fmul(a, a)
    small = _fma(b, a, b.fmul(z, _estrin(b, z, TANH_P)), a)
    ac = b.select(_gt(b, a, _c(22.0)), _c(22.0), a)
    eh, el = _exp_dd_tanh(b, b.fmul(ac, _c(2.0)))
    dh, dl = _fast_two_sum(b, eh, _c(1.0))  # eh > 2 on this branch
    dl = b.fadd(dl, el)
    r = b.fdiv(_c(1.0), dh)
    rem = b.fsub(_fma(b, b.fneg(r), dh, _c(1.0)), b.fmul(r, dl))
    rl = b.fmul(rem, r)  # r + rl = 1/(dh + dl) to ~2^-100
    s = _fma(b, r, _c(-2.0), _c(1.0))
    se = _fma(b, r, _c(-2.0), b.fsub(_c(1.0), s))  # 1 - 2r = s + se exactly (fast two-sum)
    large = b.fadd(s, _fma(b, rl, _c(-2.0), se))
    res = b.select(_lt(b, a, _c(TANH_SMALL)), small, large)
    res = b.select(_isnan(b, x), x, res)
    return _intrinsic(b, "llvm.copysign", res, x)


#: This family's rows of the math table (:data:`.core.MATH`).
MATH.update({
    Op.EXP:     Math(1, body=_exp, ulp=1, ulp_ld=1.0, domains=(
        ("[-745, 710]", "uniform", -745.2, 709.8), ("[-1, 1]", "uniform", -1, 1),
        ("subnormal results", "uniform", -745.2, -708))),
    Op.EXPM1:   Math(1, body=_expm1, ulp=1, ulp_ld=0.9, domains=(
        ("[-1, 1]", "uniform", -1, 1), ("[-60, 709.7]", "uniform", -60, 709.7),
        ("|x| in 1e-20..1e-3", "-log", -20, -3))),
    Op.TANH:    Math(1, body=_tanh, ulp=2, ulp_ld=0.7, domains=(
        ("[-20, 20]", "uniform", -20, 20), ("[-0.6, 0.6]", "uniform", -0.6, 0.6))),
})  # fmt: skip
