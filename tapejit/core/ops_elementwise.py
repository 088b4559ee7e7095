"""The elementwise primitives — unary and binary float ops, comparisons, logic, ``where``,
``cast`` and ``stop_gradient`` — one ``defop`` block each, with the derivative helpers their
rules share. A family of the registry :mod:`tapejit.core.ops` (imported once by
``tapejit.core``).

The VJP rules follow the standard derivations (Griewank & Walther, *Evaluating Derivatives*,
2nd ed., ch. 3; HIPS autograd ``numpy_vjps.py``; JAX ``lax.py``); ties in
``maximum``/``minimum`` share the cotangent equally, as JAX does, and the JVP rules use the same
tie convention (the tangent of a tied maximum is the mean of the tied operands' tangents), so
``<J v, w> = <v, J^T w>`` holds exactly. Cotangents of scalar operands are summed by reverse
mode (see :mod:`tapejit.ad.autodiff`).
"""

from __future__ import annotations

import math

import numpy as np

from . import ir
from .ir import Node
from .ops import (
    Op,
    _or_zero,
    _tadd,
    _tdiv,
    _tmul,
    _tneg,
    add,
    const,
    defop,
    div,
    elementwise,
    is_const,
    mul,
    neg,
    power,
    sub,
    where,
)
from .typerules import _arith, _cast, _compare, _logical, _where


def _ew_ref(fn):
    return lambda attrs, *xs: fn(*xs)


# VJP helpers


def _one_minus_sq(y):
    return sub(const(1.0), mul(y, y))


def _one_plus_sq(y):
    return add(const(1.0), mul(y, y))


def _sqrt_one_minus_sq(x):
    """sqrt((1 - x)(1 + x)): 1 - x^2 without cancellation near |x| = 1."""
    return elementwise(Op.SQRT, mul(sub(const(1.0), x), add(const(1.0), x)))


#: the log family's switch to log(2|x|) (codegen/mathlib/log.py, BIG)
_LOG_BIG = 2.0**28


def _asinh_den(x):
    """sqrt(1 + x^2), |x| above 2^28 (arcsinh' = 1 / this)."""
    a = elementwise(Op.ABS, x)
    big = elementwise(Op.GT, a, const(_LOG_BIG))
    return where(big, a, elementwise(Op.SQRT, add(const(1.0), mul(x, x))))


def _acosh_den(x):
    """sqrt((x - 1)(|x| + 1)) (0 at 1, NaN below), x above 2^28 (arccosh' = 1 / this)."""
    w = mul(sub(x, const(1.0)), add(elementwise(Op.ABS, x), const(1.0)))
    return where(elementwise(Op.GT, x, const(_LOG_BIG)), x, elementwise(Op.SQRT, w))


def _atanh_den(x):
    """(1 - x)(1 + x) (arctanh' = 1 / this)."""
    return mul(sub(const(1.0), x), add(const(1.0), x))


def _max_vjp(g, out, x, y, pick):
    """Cotangents of maximum/minimum: to the selected side; ties split evenly (as JAX)."""
    half = mul(g, const(0.5))
    gx = where(elementwise(pick, x, y), g, where(elementwise(Op.EQ, x, y), half, const(0.0)))
    gy = where(elementwise(pick, y, x), g, where(elementwise(Op.EQ, x, y), half, const(0.0)))
    return gx, gy


def _pow_dx(x, y):
    """d(x**y)/dx = y * x**(y-1)."""
    return mul(y, power(x, sub(y, const(1.0)) if not is_const(y) else const(y.attrs[0] - 1)))


def _pow_dy(out, x):
    """d(x**y)/dy = log(x) * x**y, which is 0 where x**y is 0 (0**y for y > 0), not NaN."""
    return where(elementwise(Op.EQ, out, const(0.0)), const(0.0), mul(elementwise(Op.LOG, x), out))


def _pow_vjp(g, out, x, y):
    gx = mul(g, _pow_dx(x, y))
    dy = _pow_dy(out, x)
    gy = None if is_const(y) else mul(g, dy)
    return gx, gy


def _gauss(x: Node) -> Node:
    """d erf(x) / dx = 2 / sqrt(pi) * exp(-x^2)."""
    return mul(const(2.0 / math.sqrt(math.pi)), elementwise(Op.EXP, neg(mul(x, x))))


def _trigamma(x: Node) -> Node:
    """psi'(x) as a composition (only digamma's derivative needs it): the recurrence
    psi'(x) = sum_{k<10} 1/(x+k)^2 + psi'(x+10), the asymptotic series 1/y + 1/(2y^2) +
    sum_{k<=7} B_2k / y^(2k+1) at y = x + 10 (Abramowitz & Stegun 6.4.12), and the reflection
    psi'(x) = pi^2 / sin^2(pi x) - psi'(1 - x) for x < 0."""
    neg = elementwise(Op.LT, x, const(0.0))
    xr = where(neg, sub(const(1.0), x), x)
    acc = None
    for k in range(10):
        t = div(const(1.0), mul(add(xr, const(float(k))), add(xr, const(float(k)))))
        acc = t if acc is None else add(acc, t)
    y = add(xr, const(10.0))
    iy = div(const(1.0), y)
    z = mul(iy, iy)
    # sum_k B_2k / y^(2k+1) = iy^3 (1/6 - z/30 + z^2/42 - z^3/30 + 5 z^4/66 - 691 z^5/2730
    # + 7 z^6/6), z = 1/y^2 <= 1/100: the first omitted term is below 1e-19 of the result
    series = const(7.0 / 6)
    for c in (-691.0 / 2730, 5.0 / 66, -1.0 / 30, 1.0 / 42, -1.0 / 30, 1.0 / 6):
        series = add(mul(series, z), const(c))
    asym = add(add(iy, mul(const(0.5), z)), mul(mul(z, iy), series))
    pos = add(acc, asym)
    # sin^2(pi x) = sin^2(pi (x - rint x)): the reduced argument is exact, so the pole's
    # neighbourhood keeps its relative accuracy
    s = elementwise(Op.SIN, mul(const(math.pi), sub(x, elementwise(Op.RINT, x))))
    refl = sub(div(const(math.pi**2), mul(s, s)), pos)
    return where(neg, refl, pos)


def _special(name: str):
    """scipy.special's ufunc ``name`` as the reference (the interpreter's semantics); without
    scipy, numpy's vectorised ``math`` function (correctly rounded to ~1 ulp as well)."""
    try:
        import scipy.special

        return getattr(scipy.special, name)
    except ImportError:
        return np.vectorize(getattr(math, name), otypes=[np.float64])


def _atan2_vjp(g, out, y, x):
    """d atan2(y, x) = (x dy - y dx) / (x^2 + y^2)."""
    r = div(g, add(mul(x, x), mul(y, y)))
    return mul(r, x), neg(mul(r, y))


# JVP rules


def _max_jvp(t, out, x, y, pick):
    """Tangent of maximum/minimum: the selected side's; on a tie the mean of both (the VJP's
    even split, transposed)."""
    tx, ty = t
    half = mul(_tadd(tx, ty), const(0.5))
    return where(elementwise(pick, x, y), _or_zero(tx),
                 where(elementwise(Op.EQ, x, y), half, _or_zero(ty)))  # fmt: skip


def _pow_jvp(t, out, x, y):
    tx, ty = t
    return _tadd(
        None if tx is None else mul(tx, _pow_dx(x, y)),
        None if ty is None else mul(ty, _pow_dy(out, x)),
    )


def _atan2_jvp(t, out, y, x):
    """d atan2(y, x) = (x dy - y dx) / (x^2 + y^2)."""
    ty, tx = t
    return div(_tadd(_tmul(ty, x), _tneg(_tmul(tx, y))), add(mul(x, x), mul(y, y)))


def _fmod_jvp(t, out, x, y):
    tx, ty = t
    if ty is None:
        return tx
    return _tadd(tx, neg(mul(ty, elementwise(Op.RINT, div(sub(x, out), y)))))


def _where_jvp(t, out, c, a, b):
    _, ta, tb = t
    if ta is None and tb is None:
        return None
    return where(c, _or_zero(ta), _or_zero(tb))


# ----------------------------------------------------------------------------------------------
# The blocks

# fmt: off
_E = _ew_ref
_MATH_COST = 20  # a polynomial exp/log/sin...: ~15-25 vector adds per element
_LN2 = math.log(2.0)
_LN10 = math.log(10.0)

# -- elementwise unary (float -> float)
defop(Op.NEG, "unary", 1, _arith, _E(np.negative), lambda g, out, x: (neg(g),),
      numpy=("negative",), jvp=lambda t, out, x: neg(t[0]))
defop(Op.EXP, "unary", 1, _arith, _E(np.exp), lambda g, out, x: (mul(g, out),),
      numpy=("exp",), cost=_MATH_COST, jvp=lambda t, out, x: mul(t[0], out))
defop(Op.LOG, "unary", 1, _arith, _E(np.log), lambda g, out, x: (div(g, x),),
      numpy=("log",), cost=_MATH_COST, jvp=lambda t, out, x: div(t[0], x))
defop(Op.LOG1P, "unary", 1, _arith, _E(np.log1p), lambda g, out, x: (div(g, add(x, const(1.0))),),
      numpy=("log1p",), cost=_MATH_COST, jvp=lambda t, out, x: div(t[0], add(x, const(1.0))))
defop(Op.EXPM1, "unary", 1, _arith, _E(np.expm1), lambda g, out, x: (mul(g, add(out, const(1.0))),),
      numpy=("expm1",), cost=_MATH_COST, jvp=lambda t, out, x: mul(t[0], add(out, const(1.0))))
defop(Op.EXP2, "unary", 1, _arith, _E(np.exp2), lambda g, out, x: (mul(g, mul(out, const(_LN2))),),
      numpy=("exp2",), cost=_MATH_COST, jvp=lambda t, out, x: mul(t[0], mul(out, const(_LN2))))
# the log family (codegen/mathlib/log.py). Each derivative's divisor is formed exactly as the IR
# body forms its own reciprocal, so in a gradient the sqrt and the division are computed once:
# arcsinh' = 1/sqrt(1 + x^2) (1/|x| above 2^28, where x^2 may overflow); arccosh' =
# 1/sqrt((x - 1)(|x| + 1)) (inf at 1, NaN below, 1/x above 2^28); arctanh' = 1/((1 - x)(1 + x))
# (factored: exact near +-1, inf there, negative beyond)
defop(Op.LOG2, "unary", 1, _arith, _E(np.log2), lambda g, out, x: (div(g, mul(x, const(_LN2))),),
      numpy=("log2",), cost=_MATH_COST, jvp=lambda t, out, x: div(t[0], mul(x, const(_LN2))))
defop(Op.LOG10, "unary", 1, _arith, _E(np.log10),
      lambda g, out, x: (div(g, mul(x, const(_LN10))),), numpy=("log10",), cost=_MATH_COST,
      jvp=lambda t, out, x: div(t[0], mul(x, const(_LN10))))
defop(Op.ARCSINH, "unary", 1, _arith, _E(np.arcsinh), lambda g, out, x: (div(g, _asinh_den(x)),),
      numpy=("arcsinh",), cost=_MATH_COST, jvp=lambda t, out, x: div(t[0], _asinh_den(x)))
defop(Op.ARCCOSH, "unary", 1, _arith, _E(np.arccosh), lambda g, out, x: (div(g, _acosh_den(x)),),
      numpy=("arccosh",), cost=_MATH_COST, jvp=lambda t, out, x: div(t[0], _acosh_den(x)))
defop(Op.ARCTANH, "unary", 1, _arith, _E(np.arctanh), lambda g, out, x: (div(g, _atanh_den(x)),),
      numpy=("arctanh",), cost=_MATH_COST, jvp=lambda t, out, x: div(t[0], _atanh_den(x)))
# sinh' = cosh, cosh' = sinh: both IR bodies share one core (codegen/mathlib/hyp.py), computed
# once per element after inlining; cbrt' = (1/3)/cbrt^2: inf at 0, 0 at +-inf (the limits)
defop(Op.SINH, "unary", 1, _arith, _E(np.sinh),
      lambda g, out, x: (mul(g, elementwise(Op.COSH, x)),), numpy=("sinh",), cost=_MATH_COST,
      jvp=lambda t, out, x: mul(t[0], elementwise(Op.COSH, x)))
defop(Op.COSH, "unary", 1, _arith, _E(np.cosh),
      lambda g, out, x: (mul(g, elementwise(Op.SINH, x)),), numpy=("cosh",), cost=_MATH_COST,
      jvp=lambda t, out, x: mul(t[0], elementwise(Op.SINH, x)))
defop(Op.CBRT, "unary", 1, _arith, _E(np.cbrt),
      lambda g, out, x: (div(mul(g, const(1 / 3)), mul(out, out)),), numpy=("cbrt",),
      cost=_MATH_COST, jvp=lambda t, out, x: div(mul(t[0], const(1 / 3)), mul(out, out)))
defop(Op.SQRT, "unary", 1, _arith, _E(np.sqrt), lambda g, out, x: (div(mul(g, const(0.5)), out),),
      numpy=("sqrt",), cost=4, jvp=lambda t, out, x: div(mul(t[0], const(0.5)), out))
defop(Op.SIN, "unary", 1, _arith, _E(np.sin), lambda g, out, x: (mul(g, elementwise(Op.COS, x)),),
      numpy=("sin",), cost=_MATH_COST, jvp=lambda t, out, x: mul(t[0], elementwise(Op.COS, x)))
defop(Op.COS, "unary", 1, _arith, _E(np.cos),
      lambda g, out, x: (neg(mul(g, elementwise(Op.SIN, x))),), numpy=("cos",), cost=_MATH_COST,
      jvp=lambda t, out, x: neg(mul(t[0], elementwise(Op.SIN, x))))
defop(Op.TANH, "unary", 1, _arith, _E(np.tanh), lambda g, out, x: (mul(g, _one_minus_sq(out)),),
      numpy=("tanh",), cost=_MATH_COST, jvp=lambda t, out, x: mul(t[0], _one_minus_sq(out)))
# tan' = 1 + tan^2; arcsin' = -arccos' = 1/sqrt((1 - x)(1 + x)) (factored: exact near +-1,
# inf at +-1, NaN outside [-1, 1])
defop(Op.TAN, "unary", 1, _arith, _E(np.tan), lambda g, out, x: (mul(g, _one_plus_sq(out)),),
      numpy=("tan",), cost=_MATH_COST, jvp=lambda t, out, x: mul(t[0], _one_plus_sq(out)))
defop(Op.ARCSIN, "unary", 1, _arith, _E(np.arcsin),
      lambda g, out, x: (div(g, _sqrt_one_minus_sq(x)),), numpy=("arcsin",), cost=_MATH_COST,
      jvp=lambda t, out, x: div(t[0], _sqrt_one_minus_sq(x)))
defop(Op.ARCCOS, "unary", 1, _arith, _E(np.arccos),
      lambda g, out, x: (neg(div(g, _sqrt_one_minus_sq(x))),), numpy=("arccos",), cost=_MATH_COST,
      jvp=lambda t, out, x: neg(div(t[0], _sqrt_one_minus_sq(x))))
defop(Op.ARCTAN, "unary", 1, _arith, _E(np.arctan),
      lambda g, out, x: (div(g, add(const(1.0), mul(x, x))),), numpy=("arctan",), cost=_MATH_COST,
      jvp=lambda t, out, x: div(t[0], add(const(1.0), mul(x, x))))
# the error function and its complement (scipy.special.erf/erfc: not numpy ufuncs)
defop(Op.ERF, "unary", 1, _arith, lambda a, x: _special("erf")(x),
      lambda g, out, x: (mul(g, _gauss(x)),), cost=_MATH_COST,
      jvp=lambda t, out, x: mul(t[0], _gauss(x)))
defop(Op.ERFC, "unary", 1, _arith, lambda a, x: _special("erfc")(x),
      lambda g, out, x: (neg(mul(g, _gauss(x))),), cost=_MATH_COST,
      jvp=lambda t, out, x: neg(mul(t[0], _gauss(x))))
# log |Gamma(x)| and its derivative, digamma (scipy.special.gammaln / digamma / psi)
defop(Op.GAMMALN, "unary", 1, _arith, lambda a, x: _special("gammaln")(x),
      lambda g, out, x: (mul(g, elementwise(Op.DIGAMMA, x)),), cost=_MATH_COST,
      jvp=lambda t, out, x: mul(t[0], elementwise(Op.DIGAMMA, x)))
defop(Op.DIGAMMA, "unary", 1, _arith, lambda a, x: _special("digamma")(x),
      lambda g, out, x: (mul(g, _trigamma(x)),), cost=_MATH_COST,
      jvp=lambda t, out, x: mul(t[0], _trigamma(x)))
defop(Op.ABS, "unary", 1, _arith, _E(np.abs), lambda g, out, x: (mul(g, elementwise(Op.SIGN, x)),),
      numpy=("absolute", "fabs"), jvp=lambda t, out, x: mul(t[0], elementwise(Op.SIGN, x)))
defop(Op.SIGN, "unary", 1, _arith, _E(np.sign), None, numpy=("sign",), differentiable=False)
# rounding: piecewise constant (their derivative is 0 where it exists, as for int())
defop(Op.FLOOR, "unary", 1, _arith, _E(np.floor), None, numpy=("floor",), differentiable=False)
defop(Op.CEIL, "unary", 1, _arith, _E(np.ceil), None, numpy=("ceil",), differentiable=False)
defop(Op.RINT, "unary", 1, _arith, _E(np.rint), None, numpy=("rint",), differentiable=False)
defop(Op.TRUNC, "unary", 1, _arith, _E(np.trunc), None, numpy=("trunc",), differentiable=False)

# -- elementwise binary
defop(Op.ADD, "binary", 2, _arith, _E(np.add), lambda g, out, x, y: (g, g), numpy=("add",),
      jvp=lambda t, out, x, y: _tadd(t[0], t[1]))
defop(Op.SUB, "binary", 2, _arith, _E(np.subtract), lambda g, out, x, y: (g, neg(g)),
      numpy=("subtract",), jvp=lambda t, out, x, y: _tadd(t[0], _tneg(t[1])))
defop(Op.MUL, "binary", 2, _arith, _E(np.multiply), lambda g, out, x, y: (mul(g, y), mul(g, x)),
      numpy=("multiply",), jvp=lambda t, out, x, y: _tadd(_tmul(t[0], y), _tmul(t[1], x)))
defop(Op.DIV, "binary", 2, _arith, _E(np.divide),
      lambda g, out, x, y: (div(g, y), neg(div(mul(g, out), y))),
      numpy=("divide", "true_divide"), cost=4,
      jvp=lambda t, out, x, y: _tadd(_tdiv(t[0], y), _tneg(_tdiv(_tmul(t[1], out), y))))
defop(Op.POW, "binary", 2, _arith, _E(np.power), _pow_vjp, cost=_MATH_COST, jvp=_pow_jvp)
defop(Op.ARCTAN2, "binary", 2, _arith, _E(np.arctan2), _atan2_vjp, numpy=("arctan2",),
      cost=_MATH_COST, jvp=_atan2_jvp)
# C's fmod (exact; the sign of x): x - trunc(x / y) * y, so d/dx = 1, d/dy = -trunc(x / y);
# trunc(x / y) is (x - fmod) / y, an integer up to rounding: rint recovers it exactly (trunc of
# the rounded quotient could land one below)
defop(Op.FMOD, "binary", 2, _arith, _E(np.fmod),
      lambda g, out, x, y: (g, neg(mul(g, elementwise(Op.RINT, div(sub(x, out), y))))),
      numpy=("fmod",), cost=8, jvp=_fmod_jvp)  # a libm call per element
defop(Op.MAXIMUM, "binary", 2, _arith, _E(np.maximum),
      lambda g, out, x, y: _max_vjp(g, out, x, y, Op.GT), numpy=("maximum",),
      jvp=lambda t, out, x, y: _max_jvp(t, out, x, y, Op.GT))
defop(Op.MINIMUM, "binary", 2, _arith, _E(np.minimum),
      lambda g, out, x, y: _max_vjp(g, out, x, y, Op.LT), numpy=("minimum",),
      jvp=lambda t, out, x, y: _max_jvp(t, out, x, y, Op.LT))

# -- comparisons and logic (bool results: no cotangent)
for _n, _fn, _np in [(Op.LT, np.less, "less"), (Op.LE, np.less_equal, "less_equal"),
                     (Op.GT, np.greater, "greater"), (Op.GE, np.greater_equal, "greater_equal"),
                     (Op.EQ, np.equal, "equal"), (Op.NE, np.not_equal, "not_equal")]:
    defop(_n, "compare", 2, _compare, _E(_fn), None, numpy=(_np,), differentiable=False)
defop(Op.AND, "logical", 2, _logical, _E(np.logical_and), None, numpy=("logical_and",),
      differentiable=False)
defop(Op.OR, "logical", 2, _logical, _E(np.logical_or), None, numpy=("logical_or",),
      differentiable=False)
defop(Op.NOT, "logical", 1, _logical, _E(np.logical_not), None, numpy=("logical_not",),
      differentiable=False)

# -- select and cast
defop(Op.WHERE, "select", 3, _where, _E(np.where),
      lambda g, out, c, a, b: (None, where(c, g, const(0.0)), where(c, const(0.0), g)),
      jvp=_where_jvp)
defop(Op.CAST, "cast", 1, _cast, lambda attrs, x: np.asarray(x).astype(ir.NUMPY_DTYPE[attrs[0]]),
      None, differentiable=False)
# stop_gradient(x): x's value; no cotangent, zero tangent (so activity analysis stops at it);
# the passes, which run after every differentiation, replace it by x
defop(Op.STOP_GRADIENT, "unary", 1, _arith, lambda attrs, x: x, None, differentiable=False)
# fmt: on
