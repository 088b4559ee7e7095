"""codegen.mathlib: accuracy, special values and vectorisation of the IR math functions.

Every function is compiled twice into one module, through the project's own target set-up
(``codegen.target``: host TargetMachine, O3 with loop/SLP vectorisation): as a loop kernel
``void k_<op>(double *x, double *y, double *out, i64 n)`` calling ``mathlib.call(inline=True)``
(the loop-body path of codegen/lower/driver.py) and as scalar code ``double s_<op>(double x, double y)``
calling ``mathlib.call(inline=False)`` (the straight-line path).

Accuracy is measured on >= 10^6 points per range in two ways:

* against numpy, as the integer distance in ulps between the two doubles (numpy 2.x uses its own
  SIMD / glibc routines, themselves not always correctly rounded);
* against an x86 ``long double`` evaluation (64-bit significand) of the same function, as a
  fractional error in ulps of the double result (the reference's own error is ~2^-11 ulp).

The bounds in :data:`RANGES` are what the implementation guarantees (module docstring of
codegen/mathlib/core.py); the measured maxima are a little below them.
"""

from __future__ import annotations

import ctypes
import re

import llvmlite.binding as llvm
import llvmlite.ir as ir
import numpy as np
import pytest

from tapejit.codegen.mathlib import core as mathlib
from tapejit.codegen import target

F64 = ir.DoubleType()
I64 = ir.IntType(64)
OPS = [op for op, row in mathlib.MATH.items() if row.body is not None]
N = 1 << 20  # points per accuracy range
LD = np.longdouble
HAS_LD = np.finfo(LD).nmant >= 63  # x86 extended precision


# ----------------------------------------------------------------------------------------------
# Compiling the kernels.


def _loop_kernel(module: ir.Module, op: str) -> None:
    p = F64.as_pointer()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [p, p, p, I64]), name=f"k_{op}")
    for a in fn.args[:3]:
        a.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    pre, head = b.block, fn.append_basic_block("loop")
    body, done = fn.append_basic_block("body"), fn.append_basic_block("done")
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64)
    i.add_incoming(I64(0), pre)
    b.cbranch(b.icmp_signed("<", i, fn.args[3]), body, done)
    b.position_at_end(body)
    args = [b.load(b.gep(fn.args[k], [i], inbounds=True)) for k in range(mathlib.MATH[op].arity)]
    b.store(mathlib.call(b, op, args, inline=True), b.gep(fn.args[2], [i], inbounds=True))
    i.add_incoming(b.add(i, I64(1), flags=("nuw", "nsw")), b.block)
    b.branch(head)
    b.position_at_end(done)
    b.ret_void()


def _scalar(module: ir.Module, op: str, name: str, calls: int) -> None:
    """``name(x, y)``: op applied ``calls`` times in straight-line code (inline=False)."""
    fn = ir.Function(module, ir.FunctionType(F64, [F64, F64]), name=name)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    arity = mathlib.MATH[op].arity
    v = mathlib.call(b, op, list(fn.args[:arity]), inline=False)
    for _ in range(calls - 1):
        v = b.fadd(v, mathlib.call(b, op, [fn.args[1], fn.args[0]][:arity], inline=False))
    b.ret(v)


class Compiled:
    """The module of the kernels of ``ops`` (default: every math op), optimised and JIT-compiled
    for the host."""

    def __init__(self, ops=None):
        ops = OPS if ops is None else ops
        module = ir.Module(name="test_mathlib")
        for op in ops:
            _loop_kernel(module, op)
            _scalar(module, op, f"s_{op}", 1)
            _scalar(module, op, f"s2_{op}", 2)
        target.initialise()
        tm = target.target_machine()
        module.triple = target.host()[0]
        module.data_layout = str(tm.target_data)
        mod = llvm.parse_assembly(str(module))
        mod.verify()
        target.optimise(mod, tm)
        self.llvm_ir = str(mod)
        self.engine = llvm.create_mcjit_compiler(mod, tm)  # owns mod and tm; keep it alive
        self.engine.finalize_object()
        kty = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 3, ctypes.c_int64)
        sty = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double, ctypes.c_double)
        addr = self.engine.get_function_address
        self.loops = {op: kty(addr(f"k_{op}")) for op in ops}
        self.scalars = {op: sty(addr(f"s_{op}")) for op in ops}

    def __call__(self, op: str, x, y=None) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float64)
        y = x if y is None else np.ascontiguousarray(np.broadcast_to(y, x.shape), dtype=np.float64)
        out = np.empty_like(x)
        self.loops[op](x.ctypes.data, y.ctypes.data, out.ctypes.data, x.size)
        return out

    def function_ir(self, name: str) -> str:
        """The optimised IR of function ``name`` (its ``define`` up to the closing brace)."""
        m = re.search(
            r"^define [^\n]*@\"?" + re.escape(name) + r"\"?\(.*?^}",
            self.llvm_ir,
            re.DOTALL | re.MULTILINE,
        )
        assert m, f"no function {name} in the optimised IR"
        return m.group(0)


@pytest.fixture(scope="module")
def lib() -> Compiled:
    return Compiled()


# ----------------------------------------------------------------------------------------------
# Measuring errors.


def _ordinal(a: np.ndarray) -> np.ndarray:
    """Doubles mapped to integers in the same order, adjacent doubles one apart (-0 == +0)."""
    i = np.asarray(a, dtype=np.float64).view(np.int64)
    return np.where(i < 0, np.int64(-(2**63)) - i, i)


def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in ulps between doubles; NaN vs NaN is 0, NaN vs a number is huge."""
    with np.errstate(over="ignore"):
        d = np.abs(_ordinal(got) - _ordinal(want))
    nan_g, nan_w = np.isnan(got), np.isnan(want)
    d = np.where(nan_g & nan_w, 0, d)
    return np.where(nan_g ^ nan_w, 2**62, d)


def ulp_error(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|got - ref| in ulps of the double nearest ``ref`` (a long double reference)."""
    spacing = np.spacing(np.abs(ref.astype(np.float64))).astype(LD)
    return np.asarray(np.abs(got.astype(LD) - ref) / spacing, dtype=np.float64)


def _ref(op: str, x: np.ndarray, y: np.ndarray | None = None, dtype=np.float64) -> np.ndarray:
    with np.errstate(all="ignore"):
        if op == "pow":
            return np.power(x.astype(dtype), y.astype(dtype))
        if op == "arctan2":
            return np.arctan2(x.astype(dtype), y.astype(dtype))
        if op in ("erf", "erfc", "gammaln", "digamma"):  # scipy's (the fractional check: mpmath)
            scipy_special = pytest.importorskip("scipy.special")
            return getattr(scipy_special, op)(x).astype(dtype)
        return getattr(np, op)(x.astype(dtype))


def _numpy_slack(op: str, x: np.ndarray, y: np.ndarray | None, want: np.ndarray) -> np.ndarray:
    """numpy's own distance, in whole ulps, from the long-double value rounded to double.

    On hosts where numpy dispatches to Intel's SVML (AVX-512 SKX: sinh, cosh, tan, cbrt, log10,
    the inverse hyperbolics) numpy itself is up to 4 ulps off; the comparison with numpy then
    allows that distance on top of the bound (the triangle inequality: our distance from the
    correctly rounded value is what the bound is about).  0 where there is no long-double
    reference or the value is not finite."""
    if not HAS_LD or op in MPMATH_REFERENCE:
        return np.zeros(want.shape, dtype=np.int64)
    with np.errstate(over="ignore"):  # a long double beyond 1.8e308 rounds to inf, as want does
        ref = _ref(op, x, y, LD).astype(np.float64)
    return np.where(np.isfinite(want) & np.isfinite(ref), ulps(want, ref), 0)


def _u(rng, lo, hi):
    return lambda: (rng.uniform(lo, hi, N), None)


def _logu(rng, lo, hi, sign=1.0):
    """Log-uniform magnitudes in [10^lo, 10^hi]."""
    return lambda: (sign * 10.0 ** rng.uniform(lo, hi, N), None)


def _reflection_terms(op: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(f(x), scale) for x < 0 from the reflection formula's two terms, evaluated with scipy at
    positive arguments (accurate there) and numpy: digamma(x) = psi(1 - x) - pi cot(pi x),
    gammaln(x) = log(pi / |x sin(pi x)|) - gammaln(-x); scale = the larger term's magnitude.
    Near a zero of f the terms cancel: the implementations are accurate to ~1 ulp of ``scale``
    there (:func:`test_reflection_absolute_error`), not relatively."""
    import scipy.special as sp

    t = x - np.rint(x)  # exact: pi x itself would be rounded (garbage for large |x|)
    with np.errstate(all="ignore"):
        if op == "digamma":
            a, c = sp.digamma(1.0 - x), np.pi / np.tan(np.pi * t)
        else:
            a, c = np.log(np.pi / np.abs(x * np.sin(np.pi * t))), sp.gammaln(-x)
    return a - c, np.maximum(np.abs(a), np.abs(c))


#: the documented domains for x < 0 keep the points where |f(x)| >= scale / REFLECT_MARGIN
REFLECT_MARGIN = 16.0


def _reflect_sample(rng, op: str, kind: str, lo: float, hi: float) -> np.ndarray:
    """N points x < 0 with |f(x)| >= scale(x) / REFLECT_MARGIN (rejection sampling): uniform on
    [lo, hi] (kind "reflect"), magnitudes log-uniform in 10^lo..10^hi ("reflect-log"), or at
    log-uniform distances 10^lo..10^hi from the poles -1..-50 ("reflect-poles"); the poles
    themselves (integers) are left out."""
    pytest.importorskip("scipy.special")
    out = np.empty(0)
    while out.size < N:
        if kind == "reflect-poles":
            off = rng.choice([-1.0, 1.0], 2 * N) * 10.0 ** rng.uniform(lo, hi, 2 * N)
            x = -rng.integers(1, 51, 2 * N) + off
        elif kind == "reflect-log":
            x = -(10.0 ** rng.uniform(lo, hi, 2 * N))
        else:
            x = rng.uniform(lo, hi, 2 * N)
        f, scale = _reflection_terms(op, x)
        keep = (x < 0) & (x != np.rint(x)) & (np.abs(f) * REFLECT_MARGIN >= scale)
        out = np.concatenate([out, x[keep]])
    return out[:N]


def _ranges():
    rng = np.random.default_rng(20240611)
    u = lambda lo, hi: _u(rng, lo, hi)

    def pow_mixed():
        return rng.uniform(0, 10, N), rng.uniform(-10, 10, N)

    def pow_large():  # |y log x| up to 709: results across the whole exponent range
        x = np.exp(rng.uniform(-700, 700, N))
        return x, rng.uniform(-1, 1, N) * 709 / np.abs(np.log(x))

    def pow_near_one():
        return rng.uniform(0.99, 1.01, N), rng.uniform(-7e4, 7e4, N)

    def pow_negative_base():
        return rng.uniform(-10, 10, N), rng.integers(-40, 40, N).astype(np.float64)

    def pow_subnormal():
        return np.exp(rng.uniform(-745, -690, N)), rng.uniform(0.95, 1.05, N)

    pow_samplers = {
        "x in [0,10], y in [-10,10]": pow_mixed,
        "results near 2^+-1023": pow_large,
        "x near 1, |y| <= 7e4": pow_near_one,
        "negative x, integer y": pow_negative_base,
        "subnormal x and results": pow_subnormal,
    }

    def sampler(op, label, kind, lo, hi):
        if kind == "pow":
            return pow_samplers[label]
        if kind == "atan2":  # (y, x) uniform in the square
            return lambda: (rng.uniform(lo, hi, N), rng.uniform(lo, hi, N))
        if kind == "uniform":
            return u(lo, hi)
        if kind == "near":  # c (1 +- 10^u), u in [-18, hi]: down to the doubles next to c = lo
            return lambda: (lo * (1 + rng.choice([-1.0, 1.0], N) * 10.0 ** rng.uniform(-18, hi, N)),
                            None)
        if kind.startswith("reflect"):  # x < 0 away from the zeros of the reflection formula
            return lambda: (_reflect_sample(rng, op, kind, lo, hi), None)
        return _logu(rng, lo, hi, -1.0 if kind == "-log" else 1.0)

    # (op, label, sampler, max ulps vs numpy, max ulps vs long double): the contract each
    # MATH row of codegen/mathlib/core.py states
    return [
        (op, label, sampler(op, label, kind, lo, hi), row.ulp, row.ulp_ld)
        for op, row in mathlib.MATH.items()
        if row.body is not None
        for label, kind, lo, hi in row.domains
    ]


RANGES = _ranges()


@pytest.mark.parametrize(
    "op, label, sample, bound_np, bound_ld", RANGES, ids=[f"{r[0]}:{r[1]}" for r in RANGES]
)
def test_accuracy(lib, op, label, sample, bound_np, bound_ld):
    """Max error per range: vs numpy in whole ulps, vs long double in fractional ulps."""
    x, y = sample()
    got = lib(op, x, y)
    if op not in MPMATH_WHOLE_ULP:
        want = _ref(op, x, y)
        err = ulps(got, want) - _numpy_slack(op, x, y, want)
        worst = int(np.argmax(err))
        assert err.max() <= bound_np, (op, label, x[worst], got[worst], want[worst], err.max())
    if op in MPMATH_REFERENCE:
        # no long-double erf in numpy: 2^12 of the points against mpmath at 50 digits
        pick = np.random.default_rng(1).choice(x.size, 4096, replace=False)
        e, exact = _mpmath_errors(op, x[pick], got[pick])
        worst = int(np.nanargmax(e))
        assert np.nanmax(e) <= bound_ld, (op, label, x[pick][worst], e[worst])
        if op in MPMATH_WHOLE_ULP:  # whole ulps from the correctly rounded value
            err = ulps(got[pick], np.array([float(r) for r in exact]))
            assert err.max() <= bound_np, (op, label, x[pick][int(np.argmax(err))], err.max())
    elif HAS_LD:
        ref = _ref(op, x, y, LD)
        fin = np.isfinite(want) & (want != 0)
        e = ulp_error(got[fin], ref[fin])
        assert e.max() <= bound_ld, (op, label, e.max())


#: Ops whose fractional-ulp reference is mpmath (numpy has no long-double version of them).
MPMATH_REFERENCE = ("erf", "erfc", "gammaln", "digamma")
#: ... and whose whole-ulp bound (``Math.ulp``) is against the correctly rounded value too:
#: scipy's gammaln/digamma are no reference (10^6 ulp off near gammaln's zeros 1 and 2, 10^11
#: next to digamma's negative poles, 20 at gammaln(0.9)).
MPMATH_WHOLE_ULP = ("gammaln", "digamma")


def _mpmath_fn(op: str):
    mpmath = pytest.importorskip("mpmath")

    def gammaln(v):
        if v <= 0 and v == mpmath.floor(v):
            return mpmath.inf
        return mpmath.loggamma(v) if v > 0 else mpmath.log(abs(mpmath.gamma(v)))

    def digamma(v):
        return mpmath.nan if v <= 0 and v == mpmath.floor(v) else mpmath.digamma(v)

    return {"gammaln": gammaln, "digamma": digamma}.get(op) or getattr(mpmath, op)


def _mpmath_errors(op: str, x: np.ndarray, got: np.ndarray) -> tuple[np.ndarray, list]:
    """(|got - f(x)| in ulps of the double nearest f(x), NaN where f is 0 or not finite; the
    exact values) with f evaluated by mpmath at 50 digits."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 50
    fn = _mpmath_fn(op)
    exact = [fn(mpmath.mpf(float(v))) for v in x]
    e = np.full(x.size, np.nan)
    for i, (g, r) in enumerate(zip(got, exact)):
        f = float(r) if mpmath.isfinite(r) else np.inf
        if np.isfinite(f) and f != 0:
            e[i] = abs(float((mpmath.mpf(float(g)) - r) / np.spacing(f)))
    return e, exact


SPECIAL = {
    "exp": [0.0, -0.0, np.inf, -np.inf, np.nan, 709.782712893384, 709.7827128933841,
            -708.3964185322641, -745.1332191019411, -745.1332191019412, -1000.0, 1e-300,
            -1e-300, 5e-324, 1e300, -1e300],
    "log": [0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, -5e-324, 5e-324, 2.225073858507201e-308,
            2.2250738585072014e-308, 1.0, 1.7976931348623157e308, 1 + 2**-52, 1 - 2**-53, 2.0],
    "log1p": [0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, -1.0 - 2**-52, -1 + 2**-53, -2.0,
              5e-324, -5e-324, 1e-300, 2**-53, -(2**-54), 1.7976931348623157e308, 1.0],
    "expm1": [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 1e-300, -38.0, -60.0, -1e300,
              709.782712893384, 709.7827128933841, 709.5, 1e300, 37.5],
    "tanh": [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 1e-300, 0.55, -0.55, 19.1,
             22.0, -23.0, 1e300, -1e300],
    "sin": [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 1e-300, np.pi, np.pi / 2,
            -np.pi / 4, 1e15, 2.0**50, 6381956970095103.0 * 2.0**-22, 1e22],
    "cos": [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, 1e-300, np.pi, np.pi / 2, -np.pi / 4,
            1e15, -(2.0**50), 1e22],
    "erf": [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 1e-300, 2.0**-29, 0.84375,
            -0.84374999, 1.25, 2.857142857142857, 6.0, -6.0, 28.0, 1e300],
    "erfc": [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, 1e-300, 0.25, 0.84375, -0.84374999,
             1.25, -1.25, 2.857142857142857, 6.0, -6.0, 26.0, 28.0, -28.0, 1e300],
    # gammaln/digamma: finite nonzero values against mpmath (scipy is off by up to 20 ulp at
    # gammaln(0.9), 11 at gammaln(-2.5)); the range edges of the implementation (0.9, 2, 3,
    # PSI_SPLIT, 2^-54), the zeros, values next to the poles, overflow (2.56e305)
    "gammaln": [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-300, -1e-300, 1.0, 2.0, -1.0,
                -2.5, 0.5, 8.0, 1e300, -1e300, 0.9, 0.8999999999999999, 3.0, 2.9999999999999996,
                1 + 2**-52, 1 - 2**-53, 2 + 2**-51, 2 - 2**-52, 2.0**-54, -(2.0**-54),
                -(2.0**-54) * (1 + 2**-52), 1.7976931348623157e308, 2.5e305, 2.56e305,
                -3 + 2**-51, -3 - 2**-51, -0.5, -4503599627370495.5, -(2.0**52) - 2, 1e-17, 3e-3],
    "digamma": [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-300, -1e-300, 1.0, 2.0, -1.0, -2.5, 0.5,
                10.0, 1e300, -1e300, 5e-324, -5e-324, 1e-310, 1.4616321449683622,
                1.4616321449683624, 1.461632144968362, 2.4616, 2.4615999999999998, 1 - 2**-53,
                -0.5, -3 + 2**-51, -3 - 2**-51, -4503599627370495.5, -(2.0**52) - 2,
                1.7976931348623157e308, -1e-17],
    "arctan": [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 1e-300, 0.66, 0.6600000001,
               2.414213562373095, 2.4142135623730954, 1.0, -1.0, 1e300, -1e300],
    # the log family: subnormals, powers of the base, the edges of the domains, the 2^28 switch
    # of arcsinh/arccosh to log(2|x|) and the 2^-28 one of arcsinh/arctanh to x, overflow of x^2
    "log2": [0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, -5e-324, 5e-324, 2.225073858507201e-308,
             2.2250738585072014e-308, 1.0, 1.7976931348623157e308, 1 + 2**-52, 1 - 2**-53, 2.0,
             0.5, 1024.0, 2.0**-1074, 3.0, 0.7071067811865476, 1.414213562373095],
    "log10": [0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, -5e-324, 5e-324, 2.225073858507201e-308,
              2.2250738585072014e-308, 1.0, 1.7976931348623157e308, 1 + 2**-52, 1 - 2**-53, 10.0,
              100.0, 1e22, 1e-300, 0.1, 2.0, 0.7071067811865476, 1.414213562373095],
    "arcsinh": [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 1e-300, 2.0**-28,
                2.0**-28 * (1 - 2**-53), 2.0**28, 2.0**28 * (1 + 2**-52), -(2.0**28), 1e154, 1e155,
                1e300, -1e300, 1.7976931348623157e308, 1.0, -0.5],
    "arccosh": [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, 1 + 2**-52, 1 - 2**-53, -1.0, -2.0, 0.5,
                2.0, 2.0**28, 2.0**28 * (1 + 2**-52), 1e154, 1e155, 1e300, 1.7976931348623157e308],
    "arctanh": [0.0, -0.0, np.nan, np.inf, -np.inf, 1.0, -1.0, 1 - 2**-53, -1 + 2**-53, 1 + 2**-52,
                -1 - 2**-52, 2.0, 5e-324, -5e-324, 1e-300, 2.0**-28, -(2.0**-28) * (1 - 2**-53),
                0.5, -0.5, 1e-9],
    # tan: the poles' neighbours (the closest doubles to pi/2, 3pi/2), the odd/even quadrant
    # switch at pi/4, the 2^50 switch to the 2/pi table, the double closest to a multiple of pi/2
    "tan": [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 1e-300, 1e-8, np.pi / 2,
            -np.pi / 2, 3 * np.pi / 2, np.pi / 4, np.nextafter(np.pi / 4, 1), np.pi, 1e15,
            2.0**50, -(2.0**50) * (1 + 2**-52), 6381956970095103.0 * 2.0**797, 1e22, 1e300,
            -1.7976931348623157e308],
    "arcsin": [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 1e-300, 1.0, -1.0,
               1 + 2**-52, -1 - 2**-52, 1 - 2**-53, -1 + 2**-53, 0.5, -0.5, 0.5 + 2**-53,
               0.5 - 2**-54, 2.0, 1e300],
    "arccos": [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 1e-300, 1.0, -1.0,
               1 + 2**-52, -1 - 2**-52, 1 - 2**-53, -1 + 2**-53, 0.5, -0.5, 0.5 + 2**-53,
               -0.5 - 2**-53, 2.0, -1e300],
    # exp2: the overflow edge, subnormal results down to the last rounding to 5e-324 or 0
    "exp2": [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 1e-300, 0.5, -0.5, 0.25,
             1023.0, 1023.9999999999999, 1024.0, -1022.0, -1022.5, -1074.0, -1074.5,
             -1074.4999999999999, -1075.0, 1e300, -1e300],
    # sinh/cosh: n = round(|x|/ln 2) switching 0 -> 1 (ln2/2), 26 -> 27 (where 1 +- 2^-2n stops
    # being exact), the overflow edge 710.4758600739439 (finite) and the clamp
    "sinh": [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 1e-300, -1e-300, 1e-8,
             0.34657359027997264, 0.3465735902799727, -0.3465735902799727, 0.52, 18.367,
             18.368, 18.369, 22.0, 709.78, 710.4758600739439, -710.4758600739439,
             710.475860073944, 710.5, 711.0, 1e300, -1e300],
    "cosh": [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, 1e-300, 1e-8, 0.34657359027997264,
             0.3465735902799727, -0.52, 18.367, 18.368, -18.369, 22.0, 709.78,
             710.4758600739439, -710.4758600739439, 710.475860073944, 711.0, 1e300],
    # cbrt: subnormals, the 2^-900 switch to the scaled path, exact cubes, the largest double
    "cbrt": [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 1e-310, 2.2250738585072014e-308,
             2.0**-900, 2.0**-900 * (1 - 2**-53), 1.0, -1.0, 8.0, -27.0, 0.001, 1e-300, 1e300,
             1.7976931348623157e308, -1.7976931348623157e308],
}  # fmt: skip


def _check_special(lib, op, x, y, want, bound, slack=0):
    got = lib(op, x, y)
    err = ulps(got, want) - slack
    exact = ~np.isfinite(want) | (want == 0)  # inf, NaN, zeros: bit-exact, sign included
    same = (got == want) & (np.signbit(got) == np.signbit(want)) | np.isnan(got) & np.isnan(want)
    bad = (exact & ~same) | (~exact & (err > bound))
    assert not bad.any(), list(zip(x[bad], *(() if y is None else (y[bad],)), got[bad], want[bad]))


@pytest.mark.parametrize("op", sorted(SPECIAL))
def test_special_values(lib, op):
    """±0, ±inf, NaN, overflow/underflow edges and subnormals agree with numpy: exactly for
    zeros (with their sign), infinities and NaN; within the op's bound otherwise."""
    x = np.array(SPECIAL[op])
    want = _ref(op, x)
    bound = max(r[3] for r in RANGES if r[0] == op)
    if op in MPMATH_WHOLE_ULP:  # inf/NaN/0 as scipy, the finite values against mpmath
        e, exact = _mpmath_errors(op, x, lib(op, x))
        assert np.nanmax(e) <= mathlib.MATH[op].ulp_ld, list(zip(x, e))
        want = np.where(np.isfinite(want) & (want != 0), [float(r) for r in exact], want)
    _check_special(lib, op, x, None, want, bound, _numpy_slack(op, x, None, want))
    # the out-of-line scalar copy agrees bit for bit with the vectorised loop
    scalar = np.array([lib.scalars[op](v, 0.0) for v in x])
    assert ulps(scalar, lib(op, x)).max() == 0


#: gammaln/digamma for x < 0: absolute error in ulps of the larger reflection term (the contract
#: near the zeros of the result, where the relative error is unbounded)
REFLECT_ABS_ULP = 1.0


@pytest.mark.parametrize("op", ["gammaln", "digamma"])
def test_reflection_absolute_error(lib, op):
    """x < 0 including the zeros of gammaln (two per unit interval below -2) and digamma (one per
    interval): the points next to each zero in (-20, 0) (found by bracketing, refined by mpmath)
    and random ones: |error| <= REFLECT_ABS_ULP ulp of the largest of |f(x)| and the magnitudes
    of the reflection formula's two terms (:func:`_reflection_terms`)."""
    mpmath = pytest.importorskip("mpmath")
    rng = np.random.default_rng(3)
    x = np.sort(np.concatenate([
        rng.uniform(-20, 0, 40000),
        -rng.integers(1, 20, 40000)
        + rng.choice([-1.0, 1.0], 40000) * 10.0 ** rng.uniform(-15, -0.5, 40000),
    ]))  # fmt: skip
    f, _ = _reflection_terms(op, x)
    mpmath.mp.dps = 50
    fn = _mpmath_fn(op)
    points = [rng.uniform(-20, 0, 300), -(10.0 ** rng.uniform(1, 15, 300))]
    same_cell = np.floor(x[:-1]) == np.floor(x[1:])
    change = np.flatnonzero((np.sign(f[:-1]) != np.sign(f[1:])) & same_cell)
    for i in change:  # a zero between x[i] and x[i + 1] (no pole between them)
        z = float(mpmath.findroot(fn, (mpmath.mpf(x[i]), mpmath.mpf(x[i + 1])), solver="anderson"))
        near = [z + k * np.spacing(z) for k in range(-3, 4)]
        near += [z * (1 + s * 10.0**-j) for s in (-1, 1) for j in range(4, 15, 2)]
        points.append(np.array(near))
    assert len(change) >= (30 if op == "gammaln" else 18), len(change)
    x = np.concatenate(points)
    x = x[(x < 0) & (x != np.rint(x))]
    got = lib(op, x)
    _, scale = _reflection_terms(op, x)
    exact = [fn(mpmath.mpf(float(v))) for v in x]
    scale = np.maximum(scale, np.abs(np.array([float(r) for r in exact])))  # |f| > both terms
    e = np.array([abs(float(mpmath.mpf(float(g)) - r)) for g, r in zip(got, exact)])
    e /= np.spacing(scale)
    worst = int(np.argmax(e))
    assert e.max() <= REFLECT_ABS_ULP, (op, x[worst], got[worst], e[worst])


def test_pow_special_values(lib):
    """numpy's (C99) pow special cases on the full grid of interesting values."""
    v = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, 2.5,
         -2.5, 1e308, -1e308, 1e-310, -1e-310, 1e-300, 2.0**53, -(2.0**53) - 2, 1023.0, -1075.0]  # fmt: skip
    x, y = (a.ravel() for a in np.meshgrid(np.array(v), np.array(v)))
    _check_special(lib, "pow", x, y, _ref("pow", x, y), 1)


def test_atan2_special_values(lib):
    """C99's atan2 cases (signed zeros, infinities, NaN) on a grid, bit-exact where the result
    is 0, inf or NaN, within the op's bound elsewhere."""
    v = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 1e-300, -5e-324, 1e300, 2.5, -0.75]
    y, x = (a.ravel() for a in np.meshgrid(np.array(v), np.array(v)))
    _check_special(lib, "arctan2", y, x, _ref("arctan2", y, x), 2)


def test_pow_exact_cases(lib):
    """Exactly representable results come out exact: integer powers of small integers."""
    x, y = (a.ravel() for a in np.meshgrid(np.arange(-20.0, 21.0), np.arange(-4.0, 25.0)))
    want = _ref("pow", x, y)
    exact = np.abs(want) < 2.0**53
    exact &= (want == np.round(want)) | (np.abs(x) == 2)
    assert np.array_equal(lib("pow", x, y)[exact], want[exact])


def test_loop_and_scalar_agree(lib):
    """The inlined (vectorised) and out-of-line copies compute identical bits."""
    rng = np.random.default_rng(7)
    for op in OPS:
        x = rng.uniform(-30, 30, 2000) if op not in ("log", "pow") else rng.uniform(0, 30, 2000)
        y = rng.uniform(-5, 5, 2000)
        loop = lib(op, x, y)
        scalar = np.array([lib.scalars[op](a, b) for a, b in zip(x, y)])
        assert ulps(loop, scalar).max() == 0, op


# ----------------------------------------------------------------------------------------------
# Code shape: vectorised loops, one out-of-line copy for scalar code.


def _vector_width() -> int:
    features = target.host()[2].split(",")
    if "+avx512f" in features:
        return 8
    if "+avx" in features:
        return 4
    return 2


LIBM = r"@\"?(llvm\.(exp|exp2|log|log2|log10|sin|cos|pow|tanh)\.|(exp|log|log1p|expm1|sin|cos|tanh|pow)f?\b)"


@pytest.mark.parametrize("op", OPS)
def test_loop_is_vectorised(lib, op):
    """A loop calling the function vectorises to full-width vectors and calls no libm."""
    body = lib.function_ir(f"k_{op}")
    assert f"<{_vector_width()} x double>" in body, body[:2000]
    assert not re.search(LIBM, body), re.search(LIBM, body).group(0)
    calls = set(re.findall(r"call [^@]*@\"?([\w.]+)", body))
    cold = {f"tapejit.math.{op}.large", f"tapejit.math.{op}.large.v{_vector_width()}"}
    assert all(c.startswith("llvm.") or c in cold for c in calls), calls  # all else inlined


@pytest.mark.parametrize("op", OPS)
def test_scalar_code_calls_one_copy(lib, op):
    """inline=False calls ``tapejit.math.<op>.ool``; two call sites share that one copy, and
    the alwaysinline copy leaves no definition behind once inlined."""
    calls = re.findall(r"call [^@]*@\"?([\w.]+)", lib.function_ir(f"s2_{op}"))
    assert calls == [f"tapejit.math.{op}.ool"] * 2, calls
    defs = re.findall(
        rf'^define [^\n]*@"?tapejit\.math\.{op}(\.ool)?"?\(', lib.llvm_ir, re.MULTILINE
    )
    assert defs == [".ool"]
    assert not re.search(LIBM, lib.function_ir(f"tapejit.math.{op}.ool"))


def test_table_keeps_every_op():
    """lower.py builds EMIT from MATH: every op the table had keeps a row."""
    assert set(mathlib.MATH) >= {"exp", "log", "sin", "cos", "sqrt", "abs", "pow", "maximum",
                                 "minimum", "log1p", "expm1", "tanh"}  # fmt: skip


def test_reduction_constants():
    """The four-part pi/2 and the ln 2 splits are what they claim to be."""
    from fractions import Fraction

    assert abs(sum(map(Fraction, mathlib.PIO2)) - mathlib._PI / 2) < Fraction(1, 2**210)
    assert mathlib.LN2_HI.hex().endswith("00000p-1")  # 32 significant bits: n*LN2_HI exact
    assert abs(Fraction(mathlib.LN2_HI) + Fraction(mathlib.LN2_LO) - mathlib._LN2) < Fraction(
        1, 2**84
    )
