"""Elementwise math throughput and per-call overhead.

Throughput: the tapejit gradient of ``sum(fn(x))`` (value and derivative of every element, in one
native call) against numpy's ``np.fn(x, out=y)`` (value only), in ns per element, for the math
functions tapejit lowers to libm or to its own vectorised code (``codegen/mathlib/core.py``). Each
gradient is first checked against the derivative written with numpy (rtol 1e-12, atol 1e-14 ×
max |derivative|).

Overhead: an almost empty gradient, ``f(x) = x[0]`` with n = 1, called from Python, against an
empty-bodied C function (``g[0] = 1``) called through cffi with cached pointers and against a
Python no-op call.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special as sc
from benchutil import assert_close, tag

import tapejit as tj

THROUGHPUT = "Elementwise math: tapejit gradient of sum(fn(x)) vs numpy np.fn(x) (ns per element)"
OVERHEAD = "Per-call overhead: gradient of f(x) = x[0], n = 1 (µs per call)"
SIZES = [10_000, 1_000_000]

#         name      model fn                   numpy value        derivative                     domain
FUNCS = {
    "exp":   (np.exp,                np.exp,                np.exp,                           (-5, 5)),
    "log":   (np.log,                np.log,                lambda x: 1 / x,                  (0.1, 10)),
    "log1p": (np.log1p,              np.log1p,              lambda x: 1 / (1 + x),            (-0.5, 10)),
    "expm1": (np.expm1,              np.expm1,              np.exp,                           (-5, 5)),
    "sin":   (np.sin,                np.sin,                np.cos,                           (-10, 10)),
    "cos":   (np.cos,                np.cos,                lambda x: -np.sin(x),             (-10, 10)),
    "tanh":  (np.tanh,               np.tanh,               lambda x: 1 - np.tanh(x) ** 2,    (-5, 5)),
    "exp2":  (np.exp2,               np.exp2,               lambda x: np.log(2) * np.exp2(x), (-5, 5)),
    "sinh":  (np.sinh,               np.sinh,               np.cosh,                          (-5, 5)),
    "cosh":  (np.cosh,               np.cosh,               np.sinh,                          (-5, 5)),
    "cbrt":  (np.cbrt,               np.cbrt,               lambda x: np.cbrt(x) / (3 * x),   (0.1, 10)),
    "sqrt":  (np.sqrt,               np.sqrt,               lambda x: 0.5 / np.sqrt(x),       (0.1, 10)),
    "arctan": (np.arctan,            np.arctan,             lambda x: 1 / (1 + x * x),        (-10, 10)),
    "tan":   (np.tan,                np.tan,                lambda x: 1 / np.cos(x) ** 2,     (-1.4, 1.4)),
    "arcsin": (np.arcsin,            np.arcsin,             lambda x: 1 / np.sqrt(1 - x * x), (-0.99, 0.99)),
    "arccos": (np.arccos,            np.arccos,             lambda x: -1 / np.sqrt(1 - x * x), (-0.99, 0.99)),
    "log2":  (np.log2,               np.log2,               lambda x: 1 / (x * np.log(2)),    (0.1, 10)),
    "log10": (np.log10,              np.log10,              lambda x: 1 / (x * np.log(10)),   (0.1, 10)),
    "arcsinh": (np.arcsinh,          np.arcsinh,            lambda x: 1 / np.sqrt(1 + x * x), (-10, 10)),
    "arccosh": (np.arccosh,          np.arccosh,            lambda x: 1 / np.sqrt((x - 1) * (x + 1)), (1, 10)),
    "arctanh": (np.arctanh,          np.arctanh,            lambda x: 1 / (1 - x * x),        (-0.99, 0.99)),
    # scipy.special's ufuncs (the "numpy" column is scipy's routine, also value only)
    "erf":   (sc.erf,                sc.erf,                lambda x: 2 / np.sqrt(np.pi) * np.exp(-x * x), (-3, 3)),
    "gammaln": (sc.gammaln,          sc.gammaln,            sc.psi,                           (0.5, 20)),
    "arctan2": (lambda x: np.arctan2(x, 0.7), lambda x, out: np.arctan2(x, 0.7, out=out),
              lambda x: 0.7 / (0.49 + x * x),                                                 (-10, 10)),
    "pow":   (lambda x: x**2.5,      lambda x, out: np.power(x, 2.5, out=out),
              lambda x: 2.5 * x**1.5,                                                         (0.1, 10)),
    # compositions of the primitives above (tapejit/frontend/numpy/np_math.py)
    "hypot": (lambda x: np.hypot(x, 0.7), lambda x, out: np.hypot(x, 0.7, out=out),
              lambda x: x / np.hypot(x, 0.7),                                                 (-10, 10)),
}  # fmt: skip


@pytest.fixture(
    scope="module",
    params=[(f, n) for f in FUNCS for n in SIZES],
    ids=lambda fn: f"{fn[0]}-n={fn[1]}",
)
def case(request):
    """(row label, n, x, fn name)."""
    name, n = request.param
    lo, hi = FUNCS[name][3]
    x = np.random.default_rng(n).uniform(lo, hi, n)
    return f"{name}, n=10^{len(str(n)) - 1}", n, x, name


def test_tapejit(benchmark, case):
    """tapejit ``grad(x, out=g)`` of ``sum(fn(x))``."""
    row, n, x, name = case
    fn, _, deriv, _ = FUNCS[name]

    def model(x):
        return np.sum(fn(x))

    grad = tj.compile(model, x)
    g = np.empty(n)
    grad(x, out=g)
    ref = deriv(x)
    assert_close(g, ref, 1e-12, 1e-14 * np.abs(ref).max(), what=f"d/dx {name}")
    tag(benchmark, THROUGHPUT, row, "tapejit gradient", scale=n, unit="ns")
    benchmark(grad, x, out=g)


def test_numpy(benchmark, case):
    """numpy ``np.fn(x, out=y)``."""
    row, n, x, name = case
    value = FUNCS[name][1]
    y = np.empty(n)
    tag(benchmark, THROUGHPUT, row, "numpy np.fn", scale=n, unit="ns")
    benchmark(value, x, out=y)


def first(x):
    return x[0]


@pytest.fixture(scope="module")
def tiny():
    x = np.array([0.5])
    return x, np.empty(1), tj.compile(first, x)


def test_overhead_tapejit(benchmark, tiny):
    """tapejit ``grad(x, out=g)`` of ``x[0]``: fast-call path + a trivial kernel."""
    x, g, grad = tiny
    grad(x, out=g)
    assert g[0] == 1.0
    tag(benchmark, OVERHEAD, "x[0], n=1", "tapejit grad(x, out=g)")
    benchmark(grad, x, out=g)


def test_overhead_tapejit_value_and_grad(benchmark, tiny):
    """tapejit ``grad.value_and_grad(x, out=g)`` (the Python path)."""
    x, g, grad = tiny
    assert grad.value_and_grad(x, out=g) == (0.5, g) and g[0] == 1.0
    tag(benchmark, OVERHEAD, "x[0], n=1", "tapejit value_and_grad(x, out=g)")
    benchmark(grad.value_and_grad, x, out=g)


def test_overhead_c(benchmark, tiny, cc):
    """A C function that writes g[0] = 1, through cffi with cached pointers."""
    x, g, _ = tiny
    lib = cc.build(
        "void unit_grad(const double *x, double *g) { g[0] = 1.0; }\n",
        "void unit_grad(const double *x, double *g);",
    )
    px, pg = cc.ptr(x), cc.ptr(g)
    g[0] = 0.0
    lib.unit_grad(px, pg)
    assert g[0] == 1.0
    tag(benchmark, OVERHEAD, "x[0], n=1", "C via cffi")
    benchmark(lib.unit_grad, px, pg)


def test_overhead_python_noop(benchmark, tiny):
    """A Python function that does nothing, called the same way (the harness's floor)."""
    x, g, _ = tiny

    def noop(x, out=None):
        pass

    tag(benchmark, OVERHEAD, "x[0], n=1", "Python no-op call")
    benchmark(noop, x, out=g)
