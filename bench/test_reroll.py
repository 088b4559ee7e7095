"""Python element loops captured while tracing (tapejit/frontend/loops/loop_capture.py) and re-rolled
(tapejit/passes/reroll/driver.py): the element-loop model of ``examples/element_loop.py`` and the
preallocate-and-fill loop, at n = 100 / 1000 / 3000 (the element loop also at 10,000).

* compile: a cold compile (``cache=False``) and the first call, as ``tj.compile`` does it
  (captured: 6 iterations traced, the loop built), with capturing off (``TAPEJIT_CAPTURE=0``:
  every iteration traced, then re-rolled), and with re-rolling off (``TAPEJIT_REROLL=0``: the
  unrolled trace, straight-line code split into chunks);
* gradient: one call of the compiled gradient, against the hand-derived vectorised numpy
  gradient;
* a loop with a branch per element (``max(x[i], 0.2)``: one guard per element, rolled into one
  vector guard so the loop re-rolls), compile re-rolled and unrolled, and its gradient;
* a Lennard-Jones pair loop with a cutoff (``if r2 < rc2``: which pairs add depends on the
  positions; guards rolled with an outcome per pair, the terms summed by shape), compile and
  gradient against numpy over all pairs.

Run: ``python -m pytest bench/test_reroll.py --benchmark-enable --benchmark-group-by=param``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest
from benchutil import C_FLAGS, FAST_MATH, tag

import tapejit as tj
from tapejit.frontend.loops import loop_source
from tapejit.passes.reroll import driver as reroll

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from element_loop import make_model, numpy_grad  # noqa: E402

COMPILE = "Element loop (examples/element_loop.py): cold compile + first call"
GRAD = "Element loop (examples/element_loop.py): gradient call"
FILL = "Preallocate-and-fill loop y[i] = x[i]*x[i]: cold compile + first call"
SIZES = [100, 1000, 3000]
MODES = {"captured": (True, True), "re-rolled": (True, False), "unrolled": (False, False)}


def fill_model(x):
    y = np.zeros_like(x)
    for i in range(len(x)):
        y[i] = x[i] * x[i]
    return np.sum(np.sin(y))


def _cold(f, x):
    t0 = time.perf_counter()
    grad = tj.compile(f, x, cache=False)
    grad(x)
    return grad, time.perf_counter() - t0


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("n", [*SIZES, 10000])
def test_compile(benchmark, monkeypatch, n, mode):
    rolled, captured = MODES[mode]
    if n > 3000 and not captured:
        pytest.skip("minutes unrolled: the captured loop's point")
    monkeypatch.setattr(reroll, "ENABLED", rolled)
    monkeypatch.setattr(loop_source, "ENABLED", captured)
    tag(benchmark, COMPILE, f"n={n}", mode, unit="s")
    x = np.random.default_rng(0).random(n)
    grad, _ = _cold(make_model(n), x)
    np.testing.assert_allclose(grad(x), numpy_grad(x, np.empty(n)), rtol=1e-10, atol=1e-12)
    benchmark.extra_info.update(reroll=grad.stats["reroll"])
    benchmark.pedantic(_cold, (make_model(n), x), rounds=1, iterations=1)


@pytest.mark.parametrize("n", SIZES)
def test_gradient_tapejit(benchmark, n):
    tag(benchmark, GRAD, f"n={n}", "tapejit (captured)")
    x = np.random.default_rng(0).random(n)
    grad = tj.compile(make_model(n), x, cache=False)
    g = np.empty(n)
    np.testing.assert_allclose(grad(x, out=g), numpy_grad(x, np.empty(n)), rtol=1e-10, atol=1e-12)
    benchmark(grad, x, out=g)


@pytest.mark.parametrize("n", SIZES)
def test_gradient_numpy(benchmark, n):
    tag(benchmark, GRAD, f"n={n}", "numpy (vectorised, by hand)")
    x = np.random.default_rng(0).random(n)
    benchmark(numpy_grad, x, np.empty(n))


C_SOURCE = r"""
#include <math.h>
#include <stdint.h>

/* The element-loop model's gradient by hand: one pass over the pairs, then the scatter. */
double chain_grad(const double *restrict x, double *restrict g, int64_t n) {
    double s = 0.0;
    for (int64_t k = 0; k < n; k++) g[k] = 0.0;
    for (int64_t i = 0; i + 1 < n; i++) {
        double d = x[i + 1] - x[i], e = exp(-d * d);
        s += e + 0.5 * d;
        double dd = 0.5 - 2.0 * d * e;
        g[i + 1] += dd;
        g[i] -= dd;
    }
    return s;
}
"""
C_CDEF = "double chain_grad(const double *x, double *g, int64_t n);"


@pytest.mark.parametrize("build", ["C -O3", "C -O3 fast-math"])
@pytest.mark.parametrize("n", SIZES)
def test_gradient_c(benchmark, cc, n, build):
    """The hand-written C gradient of the element-loop model (gcc, ``-march=native``)."""
    lib = cc.build(C_SOURCE, C_CDEF, C_FLAGS if build == "C -O3" else FAST_MATH)
    tag(benchmark, GRAD, f"n={n}", build)
    x = np.random.default_rng(0).random(n)
    g = np.empty(n)
    px, pg = cc.ptr(x), cc.ptr(g)
    lib.chain_grad(px, pg, n)
    np.testing.assert_allclose(g, numpy_grad(x, np.empty(n)), rtol=1e-10, atol=1e-12)
    benchmark(lib.chain_grad, px, pg, n)


@pytest.mark.parametrize("rolled", [True, False], ids=["reroll", "unrolled"])
@pytest.mark.parametrize("n", SIZES)
def test_fill_compile(benchmark, monkeypatch, n, rolled):
    monkeypatch.setattr(reroll, "ENABLED", rolled)
    tag(benchmark, FILL, f"n={n}", "re-rolled" if rolled else "unrolled", unit="s")
    x = np.random.default_rng(0).random(n)
    grad, _ = _cold(fill_model, x)
    want = 2 * x * np.cos(x * x)
    np.testing.assert_allclose(grad(x), want, rtol=1e-10, atol=1e-12)
    benchmark.pedantic(_cold, (fill_model, x), rounds=1, iterations=1)


GUARDED = "Element loop with a branch per element, e += max(x[i], 0.2) ** 2: cold compile + first call"
GUARDED_GRAD = "Element loop with a branch per element: gradient call"


def guarded_model(x):
    e = 0.0
    for i in range(len(x)):
        e = e + max(x[i], 0.2) ** 2  # Python's max: a guard per element (rolled into one vector)
    return e


def guarded_grad_numpy(x, out):
    np.multiply(x, 2.0, out=out)
    out[x <= 0.2] = 0.0  # max returns its first argument on a tie: x; the other: 0.2 (no gradient)
    return out


@pytest.mark.parametrize("rolled", [True, False], ids=["reroll", "unrolled"])
@pytest.mark.parametrize("n", SIZES)
def test_guarded_compile(benchmark, monkeypatch, n, rolled):
    """Every element on one side of the branch (the guards roll; mixed sides roll in
    stretches of at least 16 elements, tapejit/passes/reroll/guards.py)."""
    if n > 1000 and not rolled:
        pytest.skip("seconds unrolled")
    monkeypatch.setattr(reroll, "ENABLED", rolled)
    tag(benchmark, GUARDED, f"n={n}", "re-rolled" if rolled else "unrolled", unit="s")
    x = np.random.default_rng(0).uniform(0.3, 1.0, n)
    grad, _ = _cold(guarded_model, x)
    np.testing.assert_allclose(grad(x), guarded_grad_numpy(x, np.empty(n)), rtol=1e-14)
    benchmark.extra_info.update(reroll=grad.stats["reroll"])
    benchmark.pedantic(_cold, (guarded_model, x), rounds=1, iterations=1)


@pytest.mark.parametrize("n", SIZES)
def test_guarded_gradient(benchmark, n):
    tag(benchmark, GUARDED_GRAD, f"n={n}", "tapejit (guards rolled)")
    x = np.random.default_rng(0).uniform(0.3, 1.0, n)
    grad = tj.compile(guarded_model, x, cache=False)
    g = np.empty(n)
    np.testing.assert_allclose(grad(x, out=g), guarded_grad_numpy(x, np.empty(n)), rtol=1e-14)
    benchmark(grad, x, out=g)


@pytest.mark.parametrize("n", SIZES)
def test_guarded_gradient_numpy(benchmark, n):
    tag(benchmark, GUARDED_GRAD, f"n={n}", "numpy (vectorised, by hand)")
    x = np.random.default_rng(0).uniform(0.3, 1.0, n)
    benchmark(guarded_grad_numpy, x, np.empty(n))


CUTOFF = "LJ pair loop with a cutoff (if r2 < rc2: branches differ per pair): cold compile + first call"
CUTOFF_GRAD = "LJ pair loop with a cutoff: gradient call"
RC2 = 6.25


def lj_cutoff(pos):
    n = pos.shape[0]
    e = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            dx = pos[j, 0] - pos[i, 0]
            dy = pos[j, 1] - pos[i, 1]
            dz = pos[j, 2] - pos[i, 2]
            r2 = dx * dx + dy * dy + dz * dz
            if r2 < RC2:  # a guard per pair, rolled; the pairs inside summed by shape
                s = 1.0 / (r2 * r2 * r2)
                e = e + 4.0 * (s * s - s)
    return e


def lj_cutoff_grad_numpy(pos):
    d = pos[None, :, :] - pos[:, None, :]
    r2 = np.einsum("ijk,ijk->ij", d, d)
    np.fill_diagonal(r2, np.inf)
    s = 1.0 / r2**3
    f = np.where(r2 < RC2, -12.0 * s * (2.0 * s - 1.0) / r2, 0.0)
    return 2.0 * np.einsum("ij,ijk->jk", f, d)


@pytest.mark.parametrize("rolled", [True, False], ids=["reroll", "unrolled"])
@pytest.mark.parametrize("n", [32, 64])
def test_cutoff_compile(benchmark, monkeypatch, n, rolled):
    from pair_potential import lattice

    monkeypatch.setattr(reroll, "ENABLED", rolled)
    tag(benchmark, CUTOFF, f"N={n}", "re-rolled" if rolled else "unrolled", unit="s")
    pos = lattice(n)
    grad, _ = _cold(lj_cutoff, pos)
    ref = lj_cutoff_grad_numpy(pos)
    np.testing.assert_allclose(grad(pos), ref, rtol=0, atol=1e-12 * np.abs(ref).max())
    benchmark.extra_info.update(reroll=grad.stats["reroll"])
    benchmark.pedantic(_cold, (lj_cutoff, pos), rounds=1, iterations=1)


@pytest.mark.parametrize("n", [64, 128])
def test_cutoff_gradient(benchmark, n):
    from pair_potential import lattice

    tag(benchmark, CUTOFF_GRAD, f"N={n}", "tapejit (re-rolled)")
    pos = lattice(n)
    grad = tj.compile(lj_cutoff, pos, cache=False)
    g = np.empty_like(pos)
    ref = lj_cutoff_grad_numpy(pos)
    np.testing.assert_allclose(grad(pos, out=g), ref, rtol=0, atol=1e-12 * np.abs(ref).max())
    benchmark(grad, pos, out=g)


@pytest.mark.parametrize("n", [64, 128])
def test_cutoff_gradient_numpy(benchmark, n):
    from pair_potential import lattice

    tag(benchmark, CUTOFF_GRAD, f"N={n}", "numpy (all pairs, masked)")
    benchmark(lj_cutoff_grad_numpy, lattice(n))
