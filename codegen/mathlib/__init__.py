"""The math library in LLVM IR: branch-free, vectorisable polynomial kernels for the
transcendental functions, one row per op with its accuracy domain and ulp bound.

``core`` is the registry — the table :data:`MATH`, the call-site interface (:func:`call`,
:func:`function`), the constants and building blocks the families share — and imports no family.
Each family imports ``core`` and adds its rows: ``exp`` (exp, expm1, tanh), ``log`` (log, log1p,
log2, log10, arcsinh, arccosh, arctanh), ``power`` (pow), ``trig`` (sin, cos, tan and their range
reductions), ``inverse_trig`` (arcsin, arccos, arctan, arctan2), ``hyp`` (exp2, sinh, cosh,
cbrt), ``special`` (erf, erfc, gammaln, digamma). This package imports the registry, then every
family once; code that emits math imports the package (``from tapejit.codegen import mathlib``)
and so sees the full table.

May import: ``tapejit.core``, ``tapejit.codegen``.

llvmlite 0.50 ships no vector math library (DESIGN.md, "Math must be our own"), so an
``llvm.exp.f64`` in a loop is scalarised into libm calls (~5 ns/element). Every function here is
instead written in ``llvmlite.ir`` as straight-line double arithmetic — ``llvm.fma.f64``, integer
operations on the bit pattern (bitcast to i64) for exponent manipulation, and ``select`` for the
special cases; no control flow — so LLVM's loop vectoriser turns a loop that calls one into 8-wide
(zmm) code. The one exception is sin/cos for |x| > 2^50 (tan: |x| > 2^30): a branch to a cold
function with vector variants (:func:`.trig._sincos_large`), which the vectoriser calls once per
vector of x.

Accuracy: the maximum error measured on 2^20 random points per range (several ranges per
function; tests/test_mathlib.py checks these bounds), in whole ulps against numpy 2.4 (its own
SIMD/glibc routines) and in fractional ulps against an x86 ``long double`` evaluation (64-bit
significand). These are sampled maxima, not proofs::

    op     vs numpy  vs long double  range covered
    exp    <= 1      0.95            all x (<= 0.96 by the bound in _exp; subnormal results 0.86)
    log    <= 1      0.81            subnormal .. max double
    log1p  <= 1      0.80            (-1, max double], tiny x
    log2   <= 1      0.68            subnormal .. max double (log, as log10)
    log10  <= 1      0.65            subnormal .. max double
    arcsinh <= 1     0.66            all x, tiny and huge (the 2^28 switch to log(2|x|))
    arccosh <= 1     0.64            [1, max double], down to the doubles next to 1
    arctanh <= 1     0.64            (-1, 1), tiny x, down to the doubles next to +-1
    expm1  <= 1      0.87            all x
    exp2   <= 1      0.77            all x, subnormal results (0.81) (hyp)
    sinh   <= 1      0.87            all x (finite up to |x| = 710.4758 as numpy's), tiny x
    cosh   <= 1      0.96            all x (likewise)
    cbrt   <= 1      0.74            all x, subnormals included
    tanh   <= 2 (*)  0.66            all x   (*) measured 1; numpy's tanh is itself 1.19 ulp off
    sin    <= 1      0.78            all finite x (|x| > 2^50 by a 2/pi table; see trig._sincos)
    cos    <= 1      0.78            all finite x
    tan    <= 1      0.75            all finite x (|x| > 2^30 on the cold path; trig)
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
  The plain exp op (:func:`.exp._exp`) instead reduces by ln2/2 against a two-entry table
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
* log2, log10, arcsinh, arccosh, arctanh (:mod:`codegen.mathlib.log`): FDLIBM's log kernel
  above (its ``Lg1..Lg7`` by Horner's rule), one reduction each: log2/log10 scale log(1 + f)
  by 1/ln 2, 1/ln 10 as double-doubles (exact products by fma, one final rounding); the
  inverse hyperbolics take the log of a double-double argument (a + sqrt(a^2 + 1),
  x + sqrt(x^2 - 1), (1 + x)/(1 - x)) whose reciprocal needs no division, so with the
  derivative's own reciprocal (shared, by CSE) a gradient has one sqrt and two divisions
  (arctanh: no sqrt) per element.
* exp2, sinh, cosh, cbrt (:mod:`codegen.mathlib.hyp`): exp2 is :func:`.exp._exp`'s scheme reduced
  in base 2 with a degree-10 polynomial fitted here (Remez, :data:`~codegen.mathlib.hyp.EXP2_Q`);
  sinh and cosh share one core (Cody-Waite reduction by ln 2, the addition theorem with
  cosh/sinh(n ln 2) exact, even and odd minimax polynomials for cosh r and sinh r fitted here by
  the Remez exchange in mpmath: :data:`~codegen.mathlib.hyp.COSH_P`,
  :data:`~codegen.mathlib.hyp.SINH_P`); cbrt starts from a bit-pattern guess of x^(-1/3) (the
  "fast inverse square root" idea, constant tuned here), two multiplication-only steps and a
  Newton step on the residual y^3 - x: no polynomial, no division.
* tan, arcsin, arccos (:mod:`codegen.mathlib.trig`): tan(r) = r + r^3 P(z)/Q(z) on |r| <= pi/4
  (a (3, 3) rational) and asin(s) = s + s z P(z) on z = s^2 <= 1/4 (degree 12), both fitted
  here by the Remez exchange in mpmath (:data:`~codegen.mathlib.trig.TAN_P`,
  :data:`~codegen.mathlib.trig.ASIN_P`); arcsin/arccos above 1/2 by the half-angle identity
  asin x = pi/2 - 2 asin(sqrt((1 - x)/2)) (the reduction of FDLIBM's ``e_asin.c``/``e_acos.c``,
  here branch-free with one polynomial for both ranges).
"""

from .core import MATH, Math, call, function
from . import exp, hyp, inverse_trig, log, power, special, trig  # noqa: F401, E402  (their rows)

__all__ = ["MATH", "Math", "call", "function"]
