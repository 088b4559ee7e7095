"""The Lennard-Jones energy of N atoms written as Python loops — row by row (iteration i works
on a slice of N-1-i rows: re-rolled into one sum over the triangle's rows,
tapejit/passes/reroll/ragged.py), as a scalar double loop over pairs i < j (a nest captured while
tracing: tapejit/frontend/loops/loop_capture.py) and over all ordered pairs j != i (the cold-compile table) —
tapejit against hand-written gradients.

    E = sum_{i<j} 4 (s_ij^2 - s_ij),   s_ij = 1 / r2_ij^3,   r2_ij = |x_j - x_i|^2
    dE/dx_j = sum_{i != j} 2 (x_j - x_i) f_ij,   f_ij = -12 s_ij (2 s_ij - 1) / r2_ij

References: numpy over all pairs at once (an (N, N, 3) difference array; the diagonal masked)
and C (gcc -O3 -march=native, with and without -ffast-math: a double loop over i < j). Every
timed gradient is first checked against the numpy one (max error 1e-11 x max |g|; 1e-10 for
-ffast-math C, which reassociates). The cold-compile table is ``tj.compile(..., cache=False)``
plus the first call in this process.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from benchutil import C_FLAGS, FAST_MATH, assert_close, tag

import tapejit as tj

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from pair_potential import (  # noqa: E402  (the models)
    lattice,
    lj_all_pairs,
    lj_grad_numpy,
    lj_pairs,
    lj_rows,
)

SIZES = [64, 256, 1024]
RTOL, RTOL_FAST = 1e-11, 1e-10
GRAD = "LJ gradient, rows and scalar pair-loop forms, one call from Python (µs per call)"
COLD = "LJ models: cold compile + first call (ms)"
FORMS = {"rows": lj_rows, "pair loop": lj_pairs, "all pairs (j != i)": lj_all_pairs}

C_SOURCE = r"""
#include <stdint.h>

double lj_grad(const double *restrict x, double *restrict g, int64_t n) {
    double e = 0.0;
    for (int64_t k = 0; k < 3 * n; k++) g[k] = 0.0;
    for (int64_t i = 0; i < n; i++) {
        for (int64_t j = i + 1; j < n; j++) {
            double d0 = x[3 * j] - x[3 * i], d1 = x[3 * j + 1] - x[3 * i + 1];
            double d2 = x[3 * j + 2] - x[3 * i + 2];
            double r2 = d0 * d0 + d1 * d1 + d2 * d2;
            double s = 1.0 / (r2 * r2 * r2);
            e += 4.0 * (s * s - s);
            double f = 2.0 * (-12.0 * s * (2.0 * s - 1.0) / r2);
            g[3 * j] += f * d0; g[3 * j + 1] += f * d1; g[3 * j + 2] += f * d2;
            g[3 * i] -= f * d0; g[3 * i + 1] -= f * d1; g[3 * i + 2] -= f * d2;
        }
    }
    return e;
}
"""
C_CDEF = "double lj_grad(const double *x, double *g, int64_t n);"
C_BUILDS = {"C -O3": C_FLAGS, "C -O3 fast-math": FAST_MATH}


@pytest.fixture(scope="module", params=SIZES, ids=lambda n: f"N={n}")
def case(request):
    """(N, positions, compiled gradient of the rows form, reference gradient)."""
    n = request.param
    pos = lattice(n)
    return n, pos, tj.compile(lj_rows, pos), lj_grad_numpy(pos)


@pytest.fixture(scope="module", params=SIZES, ids=lambda n: f"N={n}")
def pairs(request):
    """(N, positions, compiled gradient of the scalar pair-loop form, reference gradient)."""
    n = request.param
    pos = lattice(n)
    return n, pos, tj.compile(lj_pairs, pos), lj_grad_numpy(pos)


def _check(g, ref, rtol, what):
    assert_close(g, ref, 0.0, rtol * np.max(np.abs(ref)), what=what)


def test_tapejit(benchmark, case):
    """tapejit ``grad(pos, out=g)``, rows form."""
    n, pos, grad, ref = case
    g = np.empty_like(pos)
    grad(pos, out=g)
    _check(g, ref, RTOL, "tapejit")
    tag(benchmark, GRAD, f"N={n}", "tapejit, rows")
    benchmark(grad, pos, out=g)


def test_tapejit_pair_loop(benchmark, pairs):
    """tapejit ``grad(pos, out=g)``, scalar pair-loop form (re-rolled)."""
    n, pos, grad, ref = pairs
    g = np.empty_like(pos)
    grad(pos, out=g)
    _check(g, ref, RTOL, "tapejit pair loop")
    tag(benchmark, GRAD, f"N={n}", "tapejit, pair loop")
    benchmark(grad, pos, out=g)


def test_numpy(benchmark, case):
    """Hand-written numpy gradient over all pairs."""
    n, pos, _, ref = case
    _check(lj_grad_numpy(pos), ref, RTOL, "numpy")
    tag(benchmark, GRAD, f"N={n}", "numpy (hand, all pairs)")
    benchmark(lj_grad_numpy, pos)


@pytest.mark.parametrize("build", list(C_BUILDS))
def test_c(benchmark, case, cc, build):
    """Hand-written C double loop through cffi, pointers made once."""
    n, pos, _, ref = case
    lib = cc.build(C_SOURCE, C_CDEF, C_BUILDS[build])
    g = np.empty_like(pos)
    px, pg = cc.ptr(pos), cc.ptr(g)
    e = lib.lj_grad(px, pg, n)
    _check(g, ref, RTOL if build == "C -O3" else RTOL_FAST, build)
    assert e == pytest.approx(lj_rows(pos), rel=1e-12)
    tag(benchmark, GRAD, f"N={n}", build)
    benchmark(lib.lj_grad, px, pg, n)


@pytest.mark.parametrize("form", list(FORMS))
def test_cold_first_call(benchmark, case, form):
    """``tj.compile(model, pos, cache=False)`` plus the first call, in this process."""
    n, pos, _, ref = case
    g = np.empty_like(pos)

    def cold():
        tj.compile(FORMS[form], pos, cache=False)(pos, out=g)

    tag(benchmark, COLD, f"N={n}", f"tapejit cold, {form}", unit="ms")
    benchmark.pedantic(cold, rounds=1 if n > 256 else 3, iterations=1)
    _check(g, ref, RTOL, "tapejit cold")
