"""The math library's registry and building blocks: the table :data:`MATH` (one row per op:
its IR body or native intrinsic, arity, accuracy domains and ulp bounds), the call-site interface
(:func:`call`, :func:`function`), and what the families share — constants derived from exact
values (pi, ln 2, the 2/pi table of the large-argument reduction), emission helpers (Horner,
fma, bit-pattern access, two-sums) and the Cody-Waite exp core. It imports no family: each
family module (``exp``, ``log``, ``power``, ``trig``, ``inverse_trig``, ``hyp``, ``special``)
imports this table and adds its rows; :mod:`tapejit.codegen.mathlib` imports every family once.

Contract. :func:`call` emits ``op(*args)`` on doubles. Ops with an IR body (``exp log log1p expm1
sin cos tanh pow`` ...) are defined once per module, on first use, as an internal function
``tapejit.math.<op>``:

* ``inline=True`` (loop bodies) calls a copy marked ``alwaysinline``: O3 inlines it before the loop
  vectoriser runs, and the copy is deleted once inlined;
* ``inline=False`` (straight-line scalar code) calls ``tapejit.math.<op>.ool``, marked
  ``noinline``: one out-of-line copy per module, so scalar code stays small (compile time grows
  faster than linearly in straight-line code; DESIGN.md).

``sqrt``, ``abs``, ``maximum`` and ``minimum`` stay single instructions (``llvm.sqrt``,
``llvm.fabs``, ``llvm.maximum``/``llvm.minimum``, the last two propagate NaN as numpy does):
their rows are here.

No fast-math flags are used anywhere: the double-double steps rely on IEEE rounding of each
operation and would be destroyed by reassociation or contraction.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Context, Decimal
from fractions import Fraction

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
# Shared building blocks: the Cody-Waite exp (pow's and erf's), clamping, and the constants of
# the table-driven exp scheme that exp (:mod:`.exp`) and exp2 (:mod:`.hyp`) both use.


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


def _clamp(b, x, lo, hi):
    """x limited to [lo, hi]; NaN passes through (ordered compares are false)."""
    x = b.select(_gt(b, x, _c(hi)), _c(hi), x)
    return b.select(_lt(b, x, _c(lo)), _c(lo), x)


#: sqrt 2 = SQRT2_HI (1 + SQRT2_TAIL) to ~2^-106 (the table 2^(j/2), j = 0, 1, of :func:`_exp`)
SQRT2_HI = math.sqrt(2.0)  # correctly rounded (IEEE sqrt)
_SQRT2 = Fraction(Decimal(2).sqrt(Context(prec=50)))
SQRT2_TAIL = float((_SQRT2 - Fraction(SQRT2_HI)) / Fraction(SQRT2_HI))
#: The shift of :func:`_exp`: 1.5*2^52 + 4092, so the low bits of bits(kd) are m = n + 4092 > 0
#: (the integer work below uses bits 0..13 of m only, where the two agree).
EXP_SHIFT = SHIFT + 4092


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


#: op -> implementation, filled by the family modules (and the intrinsic rows below);
#: the lowering builds its EMIT rows from these keys.
MATH: dict[Op, Math] = {
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
