"""Transcendental functions as branch-free LLVM IR: the one table of math implementations.

llvmlite 0.50 ships no vector math library (DESIGN.md, "Math must be our own"), so an
``llvm.exp.f64`` in a loop is scalarised into libm calls (~5 ns/element). Every function here is
instead written in ``llvmlite.ir`` as straight-line double arithmetic — ``llvm.fma.f64``, integer
operations on the bit pattern (bitcast to i64) for exponent manipulation, and ``select`` for the
special cases; no control flow — so LLVM's loop vectoriser turns a loop that calls one into 8-wide
(zmm) code. The one exception is sin/cos for |x| > 2^50 (tan: |x| > 2^30): a branch to a cold
function with vector variants (:func:`_sincos_large`), which the vectoriser calls once per vector
of x.

Contract. :func:`call` emits ``op(*args)`` on doubles. Ops with an IR body (``exp log log1p expm1
sin cos tanh pow``) are defined once per module, on first use, as an internal function
``tapejit.math.<op>``:

* ``inline=True`` (loop bodies) calls a copy marked ``alwaysinline``: O3 inlines it before the loop
  vectoriser runs, and the copy is deleted once inlined;
* ``inline=False`` (straight-line scalar code) calls ``tapejit.math.<op>.ool``, marked
  ``noinline``: one out-of-line copy per module, so scalar code stays small (compile time grows
  faster than linearly in straight-line code; DESIGN.md).

``sqrt``, ``abs``, ``maximum`` and ``minimum`` stay single instructions (``llvm.sqrt``,
``llvm.fabs``, ``llvm.maximum``/``llvm.minimum``, the last two propagate NaN as numpy does).

No fast-math flags are used anywhere: the double-double steps below rely on IEEE rounding of
each operation and would be destroyed by reassociation or contraction.

Accuracy: the maximum error measured on 2^20 random points per range (several ranges per
function; tests/test_mathlib.py checks these bounds), in whole ulps against numpy 2.4 (its own
SIMD/glibc routines) and in fractional ulps against an x86 ``long double`` evaluation (64-bit
significand). These are sampled maxima, not proofs::

    op     vs numpy  vs long double  range covered
    exp    <= 1      0.95            all x (<= 0.96 by the bound in _exp; subnormal results 0.86)
    log    <= 1      0.81            subnormal .. max double
    log1p  <= 1      0.80            (-1, max double], tiny x
    log2   <= 1      0.68            subnormal .. max double (mathlib_log, as log10)
    log10  <= 1      0.65            subnormal .. max double
    arcsinh <= 1     0.66            all x, tiny and huge (the 2^28 switch to log(2|x|))
    arccosh <= 1     0.64            [1, max double], down to the doubles next to 1
    arctanh <= 1     0.64            (-1, 1), tiny x, down to the doubles next to +-1
    expm1  <= 1      0.87            all x
    exp2   <= 1      0.77            all x, subnormal results (0.81) (mathlib_hyp)
    sinh   <= 1      0.87            all x (finite up to |x| = 710.4758 as numpy's), tiny x
    cosh   <= 1      0.96            all x (likewise)
    cbrt   <= 1      0.74            all x, subnormals included
    tanh   <= 2 (*)  0.66            all x   (*) measured 1; numpy's tanh is itself 1.19 ulp off
    sin    <= 1      0.78            all finite x (|x| > 2^50 by a 2/pi table; see _sincos)
    cos    <= 1      0.78            all finite x
    tan    <= 1      0.75            all finite x (|x| > 2^30 on the cold path; mathlib_trig)
    arcsin <= 1      0.65            [-1, 1] (numpy's own: 0.84), down to the doubles next to +-1
    arccos <= 1      0.63            [-1, 1] (numpy's own: 0.82), likewise
    pow    <= 1      0.84            x^y up to 2^+-1023, subnormal x and results, x near 1
                                     with |y| up to 7e4; numpy/C99 special cases bit-exact

Throughput (loop over 10^4 doubles, AVX-512 Zen 5, ns/element; numpy in brackets): exp 0.65
(0.67), log 0.78 (0.60), log1p 0.75 (0.69), expm1 0.88 (0.85), tanh 1.1 (0.87), sin 1.6 (8.9),
cos 1.6 (9.1), pow 3.4 (1.4); value and derivative (bench/test_math.py): tan 0.86 (0.85),
arcsin 0.64 (0.68), arccos 0.66 (0.68), sinh 0.53 (0.65), cosh 0.52 (0.53), cbrt 0.49
(0.47), exp2 0.33 (0.47), log2 0.55 (0.53), log10 0.56 (0.52), arcsinh 0.77 (1.15), arccosh
0.72 (1.29), arctanh 0.67 (0.77). Unvectorised libm calls cost ~5 ns.

Sources of the polynomials (no code was copied; the structure follows the cited descriptions):

* exp, expm1: Taylor coefficients 1/k!, each rounded to nearest double (computed exactly with
  :class:`fractions.Fraction` below); Cody & Waite range reduction (W. J. Cody, W. Waite,
  *Software Manual for the Elementary Functions*, 1980) with the split of ln 2 used by FDLIBM.
  The plain exp op (:func:`_exp`) instead reduces by ln2/2 against a two-entry table
  2^(j/2) with a tail (the scheme of table-driven exps, e.g. ARM optimized-routines ``exp.c``)
  and a degree-9 polynomial fitted here (:data:`EXP_Q`); the others keep :func:`_exp_core`.
* log, log1p: the reduction to ``s = f/(2+f)`` and the minimax coefficients ``Lg1..Lg7`` of
  ``R(s^2)`` are Sun's FDLIBM (``e_log.c``, ``s_log1p.c``; published, Remez-fitted by Sun).
* sin, cos: FDLIBM's minimax kernels (``k_sin.c`` coefficients ``S1..S6``, ``k_cos.c``
  ``C1..C6``, valid on [-pi/4, pi/4] with a tail correction), after a four-part Cody-Waite
  reduction by pi/2 whose pieces are computed below from a 200-digit value of pi; for
  |x| > 2^50 a Payne-Hanek reduction (a row of 2/pi bits per exponent, computed here by
  Machin's formula; the idea of FDLIBM's ``__kernel_rem_pio2`` and SLEEF's ``rempi``) on a
  cold path, so the common range keeps its speed.
* tanh: for |x| < 0.4 an odd minimax polynomial fitted here (Remez exchange in mpmath; see
  :data:`TANH_P`), above 1 - 2/(exp(2|x|) + 1) with a double-double exp as in exp above.
* pow: exp(y log|x|) with a double-double log from the series
  ``log m = 2 atanh s = 2 (s + s^3/3 + s^5/5 + ...)`` (coefficients 2/(2k+1), exact rationals
  rounded to double) and the exp above applied to a double-double argument.
* log2, log10, arcsinh, arccosh, arctanh (:mod:`codegen.mathlib_log`): FDLIBM's log kernel
  above (its ``Lg1..Lg7`` by Horner's rule), one reduction each: log2/log10 scale log(1 + f)
  by 1/ln 2, 1/ln 10 as double-doubles (exact products by fma, one final rounding); the
  inverse hyperbolics take the log of a double-double argument (a + sqrt(a^2 + 1),
  x + sqrt(x^2 - 1), (1 + x)/(1 - x)) whose reciprocal needs no division, so with the
  derivative's own reciprocal (shared, by CSE) a gradient has one sqrt and two divisions
  (arctanh: no sqrt) per element.
* exp2, sinh, cosh, cbrt (:mod:`codegen.mathlib_hyp`): exp2 is :func:`_exp`'s scheme reduced
  in base 2 with a degree-10 polynomial fitted here (Remez, :data:`~codegen.mathlib_hyp.EXP2_Q`);
  sinh and cosh share one core (Cody-Waite reduction by ln 2, the addition theorem with
  cosh/sinh(n ln 2) exact, even and odd minimax polynomials for cosh r and sinh r fitted here by
  the Remez exchange in mpmath: :data:`~codegen.mathlib_hyp.COSH_P`,
  :data:`~codegen.mathlib_hyp.SINH_P`); cbrt starts from a bit-pattern guess of x^(-1/3) (the
  "fast inverse square root" idea, constant tuned here), two multiplication-only steps and a
  Newton step on the residual y^3 - x: no polynomial, no division.
* tan, arcsin, arccos (:mod:`codegen.mathlib_trig`): tan(r) = r + r^3 P(z)/Q(z) on |r| <= pi/4
  (a (3, 3) rational) and asin(s) = s + s z P(z) on z = s^2 <= 1/4 (degree 12), both fitted
  here by the Remez exchange in mpmath (:data:`~codegen.mathlib_trig.TAN_P`,
  :data:`~codegen.mathlib_trig.ASIN_P`); arcsin/arccos above 1/2 by the half-angle identity
  asin x = pi/2 - 2 asin(sqrt((1 - x)/2)) (the reduction of FDLIBM's ``e_asin.c``/``e_acos.c``,
  here branch-free with one polynomial for both ranges).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from decimal import Context, Decimal
from fractions import Fraction
from collections.abc import Callable

import llvmlite.ir as ir

from ...core.ops import Op

F64 = ir.DoubleType()
I64 = ir.IntType(64)


# ----------------------------------------------------------------------------------------------
# Constants, derived here rather than pasted as opaque literals.

_PI = Fraction(
    Decimal(
        "3.14159265358979323846264338327950288419716939937510582097494459230781640628620899862803482"
        "534211706798214808651328230664709384460955058223172535940812848111745028410270193852110555"
        "964462294895493038196"
    )
)
_LN2 = Fraction(
    Decimal("0.69314718055994530941723212145817656807550013436025525412068000949339362")
)


def _split(v: Fraction, parts: int) -> list[float]:
    """``v`` as an unevaluated sum of ``parts`` doubles (each the nearest double to the rest)."""
    out = []
    for _ in range(parts):
        d = float(v)
        out.append(d)
        v -= Fraction(d)
    return out


PIO2 = _split(_PI / 2, 4)  # pi/2 = PIO2[0] + PIO2[1] + PIO2[2] + PIO2[3] (~212 bits)
TWO_OVER_PI = _split(2 / _PI, 2)
LN2_DD = _split(_LN2, 2)  # ln 2 as a double-double (pow's log)
TWO_THIRDS = _split(Fraction(2, 3), 2)
# Cody-Waite split of ln 2 (FDLIBM's ln2_hi/ln2_lo): LN2_HI has 32 significant bits, so n*LN2_HI
# is exact for |n| < 2^21, and x - n*LN2_HI is exact (Sterbenz) for the n = round(x/ln 2) used.
LN2_HI = float.fromhex("0x1.62e42feep-1")
LN2_LO = float(_LN2 - Fraction(LN2_HI))
LOG2E = float(1 / _LN2)
SHIFT = 1.5 * 2.0**52  # adding it rounds to an integer held in the low significand bits
INV_FACT = [float(Fraction(1, math.factorial(k))) for k in range(14)]  # 1/k!, k = 0..13
ATANH_SERIES = [float(Fraction(2, 2 * k + 1)) for k in range(2, 12)]  # 2/5, 2/7, ..., 2/23

# FDLIBM e_log.c: log(1+f) = f - f^2/2 + s*(f^2/2 + R(s^2)), R(z) = Lg1 z + ... + Lg7 z^7,
# a Remez minimax fit on |s| <= 0.1716 with |error| < 2^-58.45 (as published).
LG = [
    6.666666666666735130e-01,
    3.999999999940941908e-01,
    2.857142874366239149e-01,
    2.222219843214978396e-01,
    1.818357216161805012e-01,
    1.531383769920937332e-01,
    1.479819860511658591e-01,
]
# FDLIBM k_sin.c: sin(x) ~ x + S1 x^3 + ... + S6 x^13 on |x| <= pi/4, |error| < 2^-58.
SIN_C = [
    -1.66666666666666324348e-01,
    8.33333333332248946124e-03,
    -1.98412698298579493134e-04,
    2.75573137070700676789e-06,
    -2.50507602534068634195e-08,
    1.58969099521155010221e-10,
]
# FDLIBM k_cos.c: cos(x) ~ 1 - x^2/2 + C1 x^4 + ... + C6 x^14 on |x| <= pi/4, |error| < 2^-58.
COS_C = [
    4.16666666666666019037e-02,
    -1.38888888888741095749e-03,
    2.48015872894767294178e-05,
    -2.75573143513906633035e-07,
    2.08757232129817482790e-09,
    -1.13596475577881948265e-11,
]
SQRT1_2_BITS = 0x3FE6A09E667F3BCD  # bits of sqrt(2)/2: m is reduced to [sqrt(2)/2, sqrt(2))
EXP_MASK = 0xFFF0000000000000
MIN_NORMAL = 2.2250738585072014e-308
TRIG_MAX = 2.0**50  # Cody-Waite reduction up to |x| = 2^50, the 2/pi table (TRIG_TABLE) beyond


def _pi_fixed(bits: int) -> int:
    """pi 2^bits as an integer, to within a few units: Machin's formula
    pi = 16 atan(1/5) - 4 atan(1/239) in integer fixed point with 16 guard bits."""
    one = 1 << (bits + 16)

    def atan_inv(n: int) -> int:  # atan(1/n) * one by its Taylor series
        total, power, k = 0, one // n, 0
        while power:
            total += (-1) ** k * (power // (2 * k + 1))
            power //= n * n
            k += 1
        return total

    return (16 * atan_inv(5) - 4 * atan_inv(239)) >> 16


def _trig_table() -> list[float]:
    """The 2/pi table of the large-argument reduction (:func:`_reduce_pio2_large`): for each
    k = e - 52 with e = 50 .. 1023 the exponent of x (rows k = -2 .. 971), four doubles
    t0 + t1 + t2 + t3 = T(k) = (2^k 2/pi) mod 4, cut on fixed grids: t0 a multiple of 2^-50 in
    [0, 4), t1 of 2^-100 in [0, 2^-50), t2 of 2^-150 in [0, 2^-100), t3 the rest rounded
    (error < 2^-203). Each t0..t2 has <= 52 significant bits, so M ti is exact as a two-product
    for a 53-bit integer M. 2/pi is taken to 1400 bits (error ~2^-1395, i.e. < 2^-420 in T(k))."""
    frac = 1400
    two_over_pi = (1 << (2 * frac + 1)) // _pi_fixed(frac)  # (2/pi) 2^frac
    out = []
    for k in range(-2, 972):
        t = (two_over_pi << k if k >= 0 else two_over_pi >> -k) % (4 << frac)
        for cut in (50, 100, 150):
            head = t >> (frac - cut)
            out.append(math.ldexp(head, -cut))  # exact: head < 2^52
            t -= head << (frac - cut)
        out.append(float(Fraction(t, 1 << frac)))
    return out


TRIG_TABLE = _trig_table()


# ----------------------------------------------------------------------------------------------
# Emission helpers (scalar IR; vectorisation is LLVM's job).


def _c(v: float) -> ir.Constant:
    return ir.Constant(F64, v)


def _i(v: int) -> ir.Constant:
    return ir.Constant(I64, v - (1 << 64) if v >= 1 << 63 else v)


def _intrinsic(b: ir.IRBuilder, name: str, *args: ir.Value) -> ir.Value:
    fn = b.module.declare_intrinsic(name, [F64], ir.FunctionType(F64, [F64] * len(args)))
    return b.call(fn, list(args))


def _fma(b, x, y, z):
    return _intrinsic(b, "llvm.fma", x, y, z)


def _horner(b, x, coeffs):
    """``coeffs[0] + coeffs[1] x + ...`` by Horner's rule with fused multiply-adds."""
    acc = _c(coeffs[-1])
    for a in reversed(coeffs[:-1]):
        acc = _fma(b, acc, x, _c(a))
    return acc


def _bits(b, x):
    return b.bitcast(x, I64)


def _double(b, i):
    return b.bitcast(i, F64)


def _f64_bits(v: float) -> int:
    """The bit pattern of double ``v`` as a non-negative integer."""
    return int.from_bytes(struct.pack("<d", v), "little")


def _pow2(b, n):
    """2^n as a double for an i64 ``n`` in [-1022, 1023]."""
    return _double(b, b.shl(b.add(n, _i(1023)), _i(52)))


def _lt(b, x, y):
    return b.fcmp_ordered("<", x, y)


def _gt(b, x, y):
    return b.fcmp_ordered(">", x, y)


def _eq(b, x, y):
    return b.fcmp_ordered("==", x, y)


def _isnan(b, x):
    return b.fcmp_unordered("uno", x, x)


def _two_sum(b, x, y):
    """(s, e) with s = fl(x + y) and s + e = x + y exactly (Knuth)."""
    s = b.fadd(x, y)
    bb = b.fsub(s, x)
    e = b.fadd(b.fsub(x, b.fsub(s, bb)), b.fsub(y, bb))
    return s, e


def _fast_two_sum(b, x, y):
    """(s, e) with s + e = x + y exactly, given |x| >= |y| (Dekker)."""
    s = b.fadd(x, y)
    return s, b.fsub(y, b.fsub(s, x))


def _reduce_exponent(b, x):
    """(m, k) with x = m 2^k, m in [sqrt(2)/2, sqrt(2)), k an i64, for finite x > 0 normal."""
    tmp = b.sub(_bits(b, x), _i(SQRT1_2_BITS))
    k = b.ashr(tmp, _i(52))
    m = _double(b, b.sub(_bits(b, x), b.and_(tmp, _i(EXP_MASK))))
    return m, k


# ----------------------------------------------------------------------------------------------
# The functions. Each takes doubles and returns a double; see the module docstring for sources.


def _exp_core(b, x, lo=None):
    """exp(x + lo) for x already clamped to [-746, 710] (or NaN), |lo| <= 2^-40 |x| or None.

    Range reduction (Cody-Waite): n = round(x / ln 2) via the 1.5*2^52 shift (exact for the
    clamped range), r = x - n LN2_HI exactly, then r - n LN2_LO (+ lo) kept as a double-double
    (rr, rc). exp(r) = (1 + rr) + (rr^2 P(rr) + rc) with P the Taylor series 1/2! .. 1/13!
    (truncation error < 2^-62 on |r| <= 0.35) and 1 + rr an exact two-sum, so the result carries
    one final rounding plus ~2^-57 (exact cases such as 3.0**2 come out exact). Scaling by 2^n in two steps 2^floor(n/2) * 2^(n - floor(n/2)): the first
    product is exact, so overflow to inf and gradual underflow to subnormals/zero come from one
    correctly placed rounding.
    """
    kd = _fma(b, x, _c(LOG2E), _c(SHIFT))
    nf = b.fsub(kd, _c(SHIFT))
    n = b.sub(_bits(b, kd), _bits(b, _c(SHIFT)))
    hi = _fma(b, nf, _c(-LN2_HI), x)  # exact
    corr = b.fmul(nf, _c(LN2_LO))
    if lo is not None:
        corr = b.fsub(corr, lo)
    rr = b.fsub(hi, corr)
    rc = b.fsub(b.fsub(hi, rr), corr)  # rr + rc = hi - corr (|hi| >= |corr| unless hi ~ 0)
    q = _horner(b, rr, INV_FACT[2:])
    one, one_e = _fast_two_sum(b, _c(1.0), rr)  # 1 + rr exactly
    e = b.fadd(one, b.fadd(one_e, _fma(b, b.fmul(rr, rr), q, rc)))
    n1 = b.ashr(n, _i(1))
    e = b.fmul(b.fmul(e, _pow2(b, n1)), _pow2(b, b.sub(n, n1)))
    return e


#: ln 2's rounding error as a double: ln 2 = LN2 + LN2_TAIL to ~2^-107.
LN2_TAIL = float(_LN2 - Fraction(math.log(2.0)))


# exp2 (:func:`codegen.mathlib_hyp._exp2`) uses _exp's scheme below; imported above MATH.


def _clamp(b, x, lo, hi):
    """x limited to [lo, hi]; NaN passes through (ordered compares are false)."""
    x = b.select(_gt(b, x, _c(hi)), _c(hi), x)
    return b.select(_lt(b, x, _c(lo)), _c(lo), x)


#: exp's reduction by ln2/2 (:func:`_exp`): LN2_HALF_HI is ln 2 / 2 rounded to 41 significant
#: bits, so n LN2_HALF_HI is exact for |n| < 2^12 (the clamped range has |n| <= 2153) and
#: x - n LN2_HALF_HI is exact too; LN2_HALF_LO (~2^-43) is the rest.
LN2_HALF_HI = float(Fraction(round(_LN2 / 2 * 2**42), 2**42))
LN2_HALF_LO = float(_LN2 / 2 - Fraction(LN2_HALF_HI))
TWO_LOG2E = float(2 / _LN2)
#: sqrt 2 = SQRT2_HI (1 + SQRT2_TAIL) to ~2^-106 (the table 2^(j/2), j = 0, 1, of :func:`_exp`)
SQRT2_HI = math.sqrt(2.0)  # correctly rounded (IEEE sqrt)
_SQRT2 = Fraction(Decimal(2).sqrt(Context(prec=50)))
SQRT2_TAIL = float((_SQRT2 - Fraction(SQRT2_HI)) / Fraction(SQRT2_HI))
#: exp(r) = 1 + r + r^2 Q(r) on |r| <= ln2/4: a degree-7 Q fitted here to e^r by the Remez
#: exchange (60-digit mpmath, relative error of 1 + r + r^2 Q(r)); with the coefficients rounded
#: to double the relative error is < 2^-54.9 (tests/test_exp_table.py). A degree-8 Q (2^-60.8)
#: costs one more FMA per element: measured 0.80 instead of 0.95 ulp, 3-5% slower.
EXP_Q = [0.499999999999986, 0.16666666666666538, 0.041666666671799274, 0.00833333333379984,
         0.0013888883605997452, 0.0001984126503931278, 2.4822282544961552e-05,
         2.7576131467136165e-06]  # fmt: skip
#: The shift of :func:`_exp`: 1.5*2^52 + 4092, so the low bits of bits(kd) are m = n + 4092 > 0
#: (the integer work below uses bits 0..13 of m only, where the two agree).
EXP_SHIFT = SHIFT + 4092


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


def _log_parts(b, x):
    """(dk, f, s, hfsq, R) of FDLIBM's log reduction of finite x > 0 (subnormals scaled by 2^54):
    x = 2^k (1 + f), 1 + f in [sqrt(2)/2, sqrt(2)), s = f / (2 + f), R = R(s^2) from ``LG``."""
    sub = _lt(b, x, _c(MIN_NORMAL))
    xs = b.select(sub, b.fmul(x, _c(2.0**54)), x)
    m, k = _reduce_exponent(b, xs)
    dk = b.fadd(b.sitofp(k, F64), b.select(sub, _c(-54.0), _c(0.0)))
    return (dk, *_log_kernel(b, b.fsub(m, _c(1.0))))


def _log_kernel(b, f):
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
    dk, f, s, hfsq, r = _log_parts(b, x)
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
    f, s, hfsq, r = _log_kernel(b, b.fsub(m, _c(1.0)))
    res = b.fadd(b.fmul(s, b.fadd(hfsq, r)), b.fadd(b.fmul(dk, _c(LN2_LO)), c))
    res = b.fadd(b.fadd(b.fsub(res, hfsq), f), b.fmul(dk, _c(LN2_HI)))
    res = b.select(_eq(b, x, _c(math.inf)), x, res)
    res = b.select(_lt(b, x, _c(-1.0)), _c(math.nan), res)
    res = b.select(_eq(b, x, _c(-1.0)), _c(-math.inf), res)
    res = b.select(_eq(b, x, _c(0.0)), x, res)
    return b.select(_isnan(b, x), x, res)


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


def _reduce_pio2(b, x):
    """(q, rh, rl): q = nearest integer to x 2/pi (a double), x - q pi/2 = rh + rl.

    q is rounded from x * (2/pi) as a double-double, so it is the nearest integer for |x| <=
    2^50. The remainder uses pi/2 = P0 + P1 + P2 + P3 (~212 bits) with exact products by fma
    (q P = h + l): x - h0 is exact (Sterbenz), the next terms are summed with error-free
    two-sums, the smallest ones in plain double. Accurate to ~2^-100 |x| absolute for
    |x| <= 2^50 (a four-part Cody-Waite reduction); beyond, :func:`_reduce_pio2_large`."""
    qh = b.fmul(x, _c(TWO_OVER_PI[0]))
    q0 = _intrinsic(b, "llvm.roundeven", qh)
    d = b.fadd(_fma(b, x, _c(TWO_OVER_PI[0]), b.fneg(q0)), b.fmul(x, _c(TWO_OVER_PI[1])))
    q = b.fadd(q0, _intrinsic(b, "llvm.roundeven", d))
    h0 = b.fmul(q, _c(PIO2[0]))
    l0 = _fma(b, q, _c(PIO2[0]), b.fneg(h0))
    h1 = b.fmul(q, _c(PIO2[1]))
    l1 = _fma(b, q, _c(PIO2[1]), b.fneg(h1))
    h2 = b.fmul(q, _c(PIO2[2]))
    s = b.fsub(x, h0)  # exact
    y0, e0 = _two_sum(b, s, b.fneg(h1))
    y1, e1 = _two_sum(b, y0, b.fneg(l0))
    tail = b.fsub(b.fsub(b.fadd(e0, e1), l1), b.fadd(h2, b.fmul(q, _c(PIO2[3]))))
    rh, rl = _fast_two_sum(b, y1, tail)
    return q, rh, rl


def _trig_table_row(b, x):
    """Pointer to the row of :data:`TRIG_TABLE` for the exponent of x (clamped to the table, so
    any x, NaN and inf included, reads inside it). The table is one internal constant per
    module, defined on first use."""
    name = "tapejit.math.two_over_pi"
    table = b.module.globals.get(name)
    if table is None:
        ty = ir.ArrayType(F64, len(TRIG_TABLE))
        table = ir.GlobalVariable(b.module, ty, name=name)
        table.linkage = "internal"
        table.global_constant = True
        table.unnamed_addr = True
        table.initializer = ir.Constant(ty, TRIG_TABLE)
    row = b.sub(b.and_(b.lshr(_bits(b, x), _i(52)), _i(0x7FF)), _i(1023 + 50))  # e - 50
    row = b.select(b.icmp_signed("<", row, _i(0)), _i(0), row)
    last = len(TRIG_TABLE) // 4 - 1
    row = b.select(b.icmp_signed(">", row, _i(last)), _i(last), row)
    return b.gep(table, [_i(0), b.shl(row, _i(2))], inbounds=True)


def _reduce_pio2_large(b, x):
    """(q, rh, rl) as :func:`_reduce_pio2` for |x| > 2^50 (Payne-Hanek: the bits of 2/pi that
    matter for the exponent of x, from a table).

    x = M 2^k with M an integer (|M| in [2^52, 2^53), signed like x) and k = e - 52, so
    x 2/pi = M (2^k 2/pi) = M T(k) (mod 4), T(k) = t0 + t1 + t2 + t3 from :data:`TRIG_TABLE`.
    The products M ti (i < 3) are exact two-products hi + lo; multiples of 4 are dropped from
    M t0 exactly, the integer part n of the leading sum is split off exactly, and the fraction
    f = x 2/pi - n (mod 4) in [-1/2, 1/2] (up to 2^-46) is summed with error-free two-sums down
    to the terms below 2^-97, then as a double-double times pi/2 (rh + rl). The absolute error
    of f is ~2^-148, so even the closest double to a multiple of pi/2 (6381956970095103 2^797,
    |f| ~ 2^-61) keeps ~2^-85 relative accuracy. Ideas from FDLIBM's ``__kernel_rem_pio2``
    and SLEEF's ``rempi`` (a table row per exponent); the exact-grid formulation is ours."""
    bits = _bits(b, x)
    mag = _double(b, b.or_(b.and_(bits, _i(0x000FFFFFFFFFFFFF)), _i(1075 << 52)))  # 2^52 + frac
    m = _intrinsic(b, "llvm.copysign", mag, x)
    row = _trig_table_row(b, x)
    t = [b.load(b.gep(row, [_i(j)], inbounds=True)) for j in range(4)]
    h0, h1, h2 = (b.fmul(m, tj) for tj in t[:3])
    l0, l1, l2 = (_fma(b, m, tj, b.fneg(hj)) for tj, hj in zip(t[:3], (h0, h1, h2)))
    r0 = _fma(b, _intrinsic(b, "llvm.roundeven", b.fmul(h0, _c(0.25))), _c(-4.0), h0)  # exact
    a = b.fadd(r0, l0)  # exact: multiples of 2^-50 below 6 in magnitude
    s, se = _two_sum(b, a, h1)
    n = _intrinsic(b, "llvm.roundeven", s)
    f0 = b.fsub(s, n)  # exact
    s1, e1 = _two_sum(b, se, l1)
    s2, e2 = _two_sum(b, s1, h2)
    s3, e3 = _two_sum(b, f0, s2)
    lo = b.fadd(e3, b.fadd(e2, b.fadd(e1, b.fadd(l2, b.fmul(m, t[3])))))
    fh, fl = _fast_two_sum(b, s3, lo)
    rh = b.fmul(fh, _c(PIO2[0]))
    rl = _fma(b, fh, _c(PIO2[0]), b.fneg(rh))
    rl = b.fadd(rl, _fma(b, fh, _c(PIO2[1]), b.fmul(fl, _c(PIO2[0]))))
    rh, rl = _fast_two_sum(b, rh, rl)
    return n, rh, rl


def _sin_kernel(b, x, y):
    """sin(x + y), |x| <= ~pi/4, |y| tiny (FDLIBM k_sin.c form)."""
    z = b.fmul(x, x)
    w = b.fmul(z, z)
    r = b.fadd(_horner(b, z, SIN_C[1:4]), b.fmul(b.fmul(z, w), _horner(b, z, SIN_C[4:])))
    v = b.fmul(z, x)
    inner = b.fsub(b.fmul(z, b.fsub(b.fmul(_c(0.5), y), b.fmul(v, r))), y)
    return b.fsub(x, b.fsub(inner, b.fmul(v, _c(SIN_C[0]))))


def _cos_kernel(b, x, y):
    """cos(x + y), |x| <= ~pi/4, |y| tiny (FDLIBM k_cos.c form)."""
    z = b.fmul(x, x)
    w = b.fmul(z, z)
    r = b.fadd(b.fmul(z, _horner(b, z, COS_C[:3])), b.fmul(b.fmul(w, w), _horner(b, z, COS_C[3:])))
    hz = b.fmul(_c(0.5), z)
    one_m = b.fsub(_c(1.0), hz)
    corr = b.fadd(b.fsub(b.fsub(_c(1.0), one_m), hz), b.fsub(b.fmul(z, r), b.fmul(x, y)))
    return b.fadd(one_m, corr)


def _sincos_eval(b, x, cos: bool, q, rh, rl):
    """sin or cos of x = q pi/2 + rh + rl: both kernels, selected by the quadrant q mod 4
    (computed in double: q - 4 floor(q/4)); sin(±0) = ±0, ±inf and NaN give NaN."""
    sn = _sin_kernel(b, rh, rl)
    cs = _cos_kernel(b, rh, rl)
    quad = b.fsub(q, b.fmul(_c(4.0), _intrinsic(b, "llvm.floor", b.fmul(q, _c(0.25)))))
    if cos:
        quad = b.fadd(quad, _c(1.0))
        quad = b.select(_eq(b, quad, _c(4.0)), _c(0.0), quad)
    odd = b.or_(_eq(b, quad, _c(1.0)), _eq(b, quad, _c(3.0)))
    res = b.select(odd, cs, sn)
    res = b.select(b.fcmp_ordered(">=", quad, _c(2.0)), b.fneg(res), res)
    if not cos:
        res = b.select(_eq(b, x, _c(0.0)), x, res)
    ok = b.fcmp_ordered("<", _intrinsic(b, "llvm.fabs", x), _c(math.inf))
    return b.select(ok, res, _c(math.nan))


def _sincos(b, x, cos: bool):
    """sin or cos for every double: |x| <= 2^50 (TRIG_MAX) by :func:`_reduce_pio2` in line, larger
    |x| (and ±inf, which give NaN) by a call to the cold path :func:`_sincos_large`, taken
    only when |x| > 2^50 (a branch; in a vectorised loop the call goes to the vector variant,
    which returns at once unless a lane needs it). One accuracy bound for all finite x."""
    q, rh, rl = _reduce_pio2(b, x)
    res = _sincos_eval(b, x, cos, q, rh, rl)
    return cold_path(b, x, res, TRIG_MAX, _sincos_large(b.module, cos))


def cold_path(b, x, res, limit: float, large: ir.Function):
    """``res`` (the in-line result), or ``large(x)`` where |x| > ``limit`` (and for ±inf,
    NaN): a branch to a call of the cold path, which a vectorised loop takes only when a lane
    needs it."""
    big = _gt(b, _intrinsic(b, "llvm.fabs", x), _c(limit))
    head, cold, join = b.block, b.append_basic_block("large"), b.append_basic_block("join")
    b.cbranch(big, cold, join)
    b.position_at_end(cold)
    value = b.call(large, [x])
    b.branch(join)
    b.position_at_end(join)
    out = b.phi(F64)
    out.add_incoming(res, head)
    out.add_incoming(value, cold)
    return out


#: vector widths of the cold path's variants (the loop vectoriser picks one of them)
TRIG_LANES = (2, 4, 8, 16)


def _sincos_large(module: ir.Module, cos: bool) -> ir.Function:
    """``tapejit.math.<sin|cos>.large``: the function for |x| > 2^50 (:func:`_reduce_pio2_large`)
    and ±inf (NaN), defined once per module with vector variants ``.large.v<N>`` registered
    through the ``vector-function-abi-variant`` attribute (so a loop that calls it still
    vectorises) and kept by ``llvm.compiler.used`` until the vectoriser has run. A variant
    tests its lanes and returns at once if none has |x| > 2^50; otherwise it calls the scalar
    function for those lanes. Marked ``memory(none)`` (it only reads the constant table)."""
    name = f"tapejit.math.{'cos' if cos else 'sin'}.large"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    fn = _internal(module, name, F64, [F64])
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    x = fn.args[0]
    b.ret(_sincos_eval(b, x, cos, *_reduce_pio2_large(b, x)))
    variants = [_lanewise(module, fn, n) for n in TRIG_LANES]
    mapping = ",".join(f"_ZGV_LLVM_N{n}v_{name}({v.name})" for n, v in zip(TRIG_LANES, variants))
    # llvmlite's attribute set only accepts its known names: add the string attribute directly
    set.add(fn.attributes, f'"vector-function-abi-variant"="{mapping}"')
    _compiler_used(module, variants)
    return fn


def _internal(module, name, ret, args) -> ir.Function:
    fn = ir.Function(module, ir.FunctionType(ret, args), name=name)
    fn.linkage = "internal"
    for attr in ("nounwind", "noinline", "memory(none)", "willreturn", "nosync"):
        set.add(fn.attributes, attr)  # memory(none), willreturn, nosync: unknown to llvmlite
    return fn


def _lanewise(module, scalar: ir.Function, n: int, limit: float = TRIG_MAX) -> ir.Function:
    """``<scalar>.v<n>``: the scalar function applied to the lanes with |x| > ``limit`` (those
    with a NaN or inf included); the other lanes return x unchanged (the caller ignores them)."""
    vec = ir.VectorType(F64, n)
    fn = _internal(module, f"{scalar.name}.v{n}", vec, [vec])
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    x = fn.args[0]
    lim = ir.Constant(vec, [limit] * n)
    need = b.or_(b.fcmp_ordered(">", x, lim), b.fcmp_ordered("<", x, b.fneg(lim)))
    mask = b.bitcast(need, ir.IntType(n))
    entry, loop = b.block, fn.append_basic_block("lane")
    call, nxt, done = (fn.append_basic_block(s) for s in ("call", "next", "done"))
    b.cbranch(b.icmp_unsigned("!=", mask, ir.Constant(ir.IntType(n), 0)), loop, done)
    b.position_at_end(loop)  # for i in range(n): if need[i]: acc[i] = scalar(x[i])
    i, acc = b.phi(ir.IntType(32)), b.phi(vec)
    i.add_incoming(ir.Constant(ir.IntType(32), 0), entry)
    acc.add_incoming(x, entry)
    b.cbranch(b.extract_element(need, i), call, nxt)
    b.position_at_end(call)
    upd = b.insert_element(acc, b.call(scalar, [b.extract_element(x, i)]), i)
    b.branch(nxt)
    b.position_at_end(nxt)
    new = b.phi(vec)
    new.add_incoming(acc, loop)
    new.add_incoming(upd, call)
    i1 = b.add(i, ir.Constant(ir.IntType(32), 1))
    i.add_incoming(i1, nxt)
    acc.add_incoming(new, nxt)
    b.cbranch(b.icmp_unsigned("<", i1, ir.Constant(ir.IntType(32), n)), loop, done)
    b.position_at_end(done)
    out = b.phi(vec)
    out.add_incoming(x, entry)
    out.add_incoming(new, nxt)
    b.ret(out)
    return fn


def _compiler_used(module: ir.Module, fns: list[ir.Function]) -> None:
    """Append ``fns`` to the module's ``llvm.compiler.used`` (created on first use)."""
    ptr = ir.IntType(8).as_pointer()
    gv = module.globals.get("llvm.compiler.used")
    old = [] if gv is None else list(gv.initializer.constant)
    refs = old + [f.bitcast(ptr) for f in fns]
    ty = ir.ArrayType(ptr, len(refs))
    if gv is None:
        gv = ir.GlobalVariable(module, ty, name="llvm.compiler.used")
        gv.linkage = "appending"
        gv.section = "llvm.metadata"
    gv.value_type = ty  # the array grows with each op that registers variants
    gv.initializer = ir.Constant(ty, refs)


def _sin(b, x):
    """sin(x); see :func:`_sincos`."""
    return _sincos(b, x, cos=False)


def _cos(b, x):
    """cos(x); see :func:`_sincos`."""
    return _sincos(b, x, cos=True)


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


# ----------------------------------------------------------------------------------------------
# The table and the call-site interface.


@dataclass(frozen=True)
class Math:
    """One row of :data:`MATH`: either an IR ``body`` (emitted once per module as
    ``tapejit.math.<op>``) or a native ``intrinsic`` (emitted in place).

    A ``body`` row states its accuracy contract, which ``tests/test_mathlib.py`` checks on
    2^20 points per domain: at most ``ulp`` whole ulps from numpy and ``ulp_ld`` (fractional)
    ulps from an x86 long-double evaluation, on each of its ``domains`` — ``(label, sampling,
    lo, hi)`` with sampling ``"uniform"`` on [lo, hi], ``"log"`` (magnitudes 10^lo..10^hi) or
    ``"-log"`` (the same, negative)."""

    arity: int
    body: Callable[..., ir.Value] | None = None
    intrinsic: str | None = None
    ulp: int | None = None
    ulp_ld: float | None = None
    domains: tuple[tuple[str, str, float, float], ...] = ()


from .trig import _arccos, _arcsin, _tan  # noqa: E402  (builds on the helpers above)
from .hyp import _cbrt, _cosh, _exp2, _sinh  # noqa: E402  (builds on the helpers above)
from .log import _arccosh, _arcsinh, _arctanh, _log2, _log10  # noqa: E402  (as above)

#: op -> implementation. lower.py builds its EMIT rows from these keys.
MATH: dict[Op, Math] = {
    Op.EXP:     Math(1, body=_exp, ulp=1, ulp_ld=1.0, domains=(
        ("[-745, 710]", "uniform", -745.2, 709.8), ("[-1, 1]", "uniform", -1, 1),
        ("subnormal results", "uniform", -745.2, -708))),
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
    Op.EXPM1:   Math(1, body=_expm1, ulp=1, ulp_ld=0.9, domains=(
        ("[-1, 1]", "uniform", -1, 1), ("[-60, 709.7]", "uniform", -60, 709.7),
        ("|x| in 1e-20..1e-3", "-log", -20, -3))),
    Op.SIN:     Math(1, body=_sin, ulp=1, ulp_ld=0.9, domains=(
        ("[-10, 10]", "uniform", -10, 10), ("[-1e5, 1e5]", "uniform", -1e5, 1e5),
        ("1e5..1e15", "log", 5, 15))),
    Op.COS:     Math(1, body=_cos, ulp=1, ulp_ld=0.9, domains=(
        ("[-10, 10]", "uniform", -10, 10), ("[-1e5, 1e5]", "uniform", -1e5, 1e5),
        ("1e5..1e15", "-log", 5, 15))),
    Op.TANH:    Math(1, body=_tanh, ulp=2, ulp_ld=0.7, domains=(
        ("[-20, 20]", "uniform", -20, 20), ("[-0.6, 0.6]", "uniform", -0.6, 0.6))),
    # pow's domains are two-argument samplers, named here and defined in tests/test_mathlib.py
    Op.POW:     Math(2, body=_pow, ulp=1, ulp_ld=0.9, domains=(
        ("x in [0,10], y in [-10,10]", "pow", 0, 0), ("results near 2^+-1023", "pow", 0, 0),
        ("x near 1, |y| <= 7e4", "pow", 0, 0), ("negative x, integer y", "pow", 0, 0),
        ("subnormal x and results", "pow", 0, 0))),
    Op.TAN:     Math(1, body=_tan, ulp=1, ulp_ld=0.8, domains=(
        ("[-pi/4, pi/4]", "uniform", -0.7854, 0.7854), ("[-10, 10]", "uniform", -10, 10),
        ("[-1e5, 1e5]", "uniform", -1e5, 1e5), ("1e-300..1e-1", "log", -300, -1),
        ("-1e5..-1e300", "-log", 5, 300))),
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
    # erf/erfc: ``ulp_ld`` is against mpmath (40 digits), the real contract; the whole-ulp
    # reference is scipy's, itself up to 12 ulp off near |x| = 1 (Cephes computes erfc there
    # as 1 - erf) and ~500 ulp off for erfc near x = 23 (where this one is within 1 ulp)
    Op.ERF:     Math(1, body=_erf, ulp=4, ulp_ld=1.5, domains=(
        ("[-1, 1]", "uniform", -1, 1), ("[-6, 6]", "uniform", -6, 6),
        ("1e-300..1", "log", -300, 0))),
    Op.ERFC:    Math(1, body=_erfc, ulp=1024, ulp_ld=2.0, domains=(
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
    Op.SQRT:    Math(1, intrinsic="llvm.sqrt"),
    Op.FLOOR:   Math(1, intrinsic="llvm.floor"),
    Op.CEIL:    Math(1, intrinsic="llvm.ceil"),
    Op.RINT:    Math(1, intrinsic="llvm.rint"),  # round half to even, as numpy
    Op.TRUNC:   Math(1, intrinsic="llvm.trunc"),
    Op.ABS:     Math(1, intrinsic="llvm.fabs"),
    Op.MAXIMUM: Math(2, intrinsic="llvm.maximum"),
    Op.MINIMUM: Math(2, intrinsic="llvm.minimum"),
}  # fmt: skip


def function(module: ir.Module, op: Op, inline: bool = True) -> ir.Function:
    """The module's function ``tapejit.math.<op>`` (``alwaysinline``), or with ``inline=False``
    ``tapejit.math.<op>.ool`` (``noinline``), defined on first use."""
    name = f"tapejit.math.{op}" + ("" if inline else ".ool")
    fn = module.globals.get(name)
    if fn is None:
        row = MATH[op]
        fn = ir.Function(module, ir.FunctionType(F64, [F64] * row.arity), name=name)
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        fn.attributes.add("alwaysinline" if inline else "noinline")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        b.ret(row.body(b, *fn.args))
    return fn


def call(builder: ir.IRBuilder, op: Op, args: list[ir.Value], inline: bool = True) -> ir.Value:
    """Emit ``op(*args)`` on doubles using the row of :data:`MATH`.

    ``inline=True`` for loop bodies (the call is inlined before vectorisation), ``inline=False``
    for straight-line scalar code (a call to one out-of-line copy per module)."""
    row = MATH[op]
    if row.intrinsic is not None:
        return _intrinsic(builder, row.intrinsic, *args)
    return builder.call(function(builder.module, op, inline), list(args))
