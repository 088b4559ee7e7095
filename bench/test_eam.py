"""The seed model (001): the EAM embedding-energy gradient, tapejit against hand-written
references — numpy, fused C (gcc -O3 -march=native, with and without -ffast-math) and numba —
from Python, in a native loop (no Python in the timing) and batched over rows.

    f(x) = rho^2 + rho^3 + rho^4 / 4,   rho = sum_i exp(-3 (x_i + 1))
    g_i  = -3 e_i (2 rho + 3 rho^2 + rho^3),   e_i = exp(-3 (x_i + 1))

Every timed implementation is first checked against the numpy formula (max relative error 1e-12
per entry; 1e-11 for -ffast-math C and numba fastmath, which reassociate the sum).
"""

from __future__ import annotations

import numpy as np
import pytest
from benchutil import C_FLAGS, FAST_MATH, assert_close, tag

import tapejit as tj

SIZES = [100, 1_000, 10_000, 100_000]
ROWS, COLS = 10_000, 100
RTOL, RTOL_FAST = 1e-12, 1e-11
PY = "EAM gradient, one call from Python (µs per call)"
NATIVE = "EAM gradient in a native C loop of K calls, no Python (ns per element)"
BATCH = "EAM gradient batched, 10⁴ rows × 100 (µs per row)"

C_SOURCE = r"""
#include <math.h>
#include <stdint.h>

/* The hand-written fused gradient: loop 1 stores e_i in g and sums rho, loop 2 scales g. */
double eam_grad(const double *restrict x, double *restrict g, int64_t n) {
    double rho = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double e = exp(-3.0 * (x[i] + 1.0));
        g[i] = e;
        rho += e;
    }
    double c = -3.0 * (2.0 * rho + 3.0 * rho * rho + rho * rho * rho);
    for (int64_t i = 0; i < n; i++) g[i] *= c;
    return rho * rho + rho * rho * rho + 0.25 * rho * rho * rho * rho;
}

void eam_grad_rows(const double *restrict X, double *restrict G, int64_t m, int64_t n) {
    for (int64_t r = 0; r < m; r++) eam_grad(X + r * n, G + r * n, n);
}
"""
C_CDEF = """
double eam_grad(const double *x, double *g, int64_t n);
void eam_grad_rows(const double *X, double *G, int64_t m, int64_t n);
"""

# Loops K calls of a kernel behind a function pointer (so nothing is inlined or hoisted).
DRIVER_SOURCE = r"""
#include <stdint.h>
typedef double (*c_kernel)(const double *, double *, int64_t);
typedef int32_t (*tj_kernel)(const double *, double *, double *, void *);

double loop_c(void *f, const double *x, double *g, int64_t n, int64_t k) {
    double s = 0.0;
    for (int64_t i = 0; i < k; i++) s += ((c_kernel)f)(x, g, n);
    return s;
}

int32_t loop_tapejit(void *f, const double *x, double *value, double *g, void *ws, int64_t k) {
    int32_t status = 0;
    for (int64_t i = 0; i < k; i++) status |= ((tj_kernel)f)(x, value, g, ws);
    return status;
}
"""
DRIVER_CDEF = """
double loop_c(void *f, const double *x, double *g, int64_t n, int64_t k);
int32_t loop_tapejit(void *f, const double *x, double *value, double *g, void *ws, int64_t k);
"""
C_BUILDS = {"C -O3": C_FLAGS, "C -O3 fast-math": FAST_MATH}


def eam(x):
    rho = np.sum(np.exp(-3.0 * (x + 1.0)))
    return rho**2 + rho**3 + 0.25 * rho**4


def eam_grad_numpy(x, out):
    """The hand-written numpy gradient."""
    np.exp(-3.0 * (x + 1.0), out=out)
    rho = out.sum()
    out *= -3.0 * (2 * rho + 3 * rho**2 + rho**3)
    return out


def eam_grad_rows_numpy(X, out, rho):
    """The hand-written numpy gradient, vectorised over the rows of ``X``."""
    np.multiply(X, -3.0, out=out)
    out -= 3.0
    np.exp(out, out=out)
    out.sum(axis=1, out=rho)
    out *= (-3.0 * (2 * rho + 3 * rho**2 + rho**3))[:, None]
    return out


def reference(x: np.ndarray) -> np.ndarray:
    return eam_grad_numpy(x, np.empty_like(x))


@pytest.fixture(scope="module", params=SIZES, ids=lambda n: f"n={n}")
def case(request):
    """(n, x, compiled gradient, reference gradient)."""
    n = request.param
    x = np.random.default_rng(n).random(n)
    return n, x, tj.compile(eam, x), reference(x)


@pytest.fixture(scope="module")
def numba_grad():
    numba = pytest.importorskip("numba", reason="numba not installed")

    @numba.njit(fastmath=True, cache=False)
    def eam_grad_numba(x, g):
        rho = 0.0
        for i in range(x.size):
            e = np.exp(-3.0 * (x[i] + 1.0))
            g[i] = e
            rho += e
        c = -3.0 * (2.0 * rho + 3.0 * rho * rho + rho * rho * rho)
        for i in range(x.size):
            g[i] *= c

    return eam_grad_numba


def test_tapejit(benchmark, case):
    """tapejit ``grad(x, out=g)`` (the native fast-call path)."""
    n, x, grad, ref = case
    g = np.empty(n)
    grad(x, out=g)
    assert_close(g, ref, RTOL, what="tapejit")
    tag(benchmark, PY, f"n={n}", "tapejit")
    benchmark(grad, x, out=g)


def eam_element_loop(x):
    """The same model written element by element, as a scalarised model is (re-rolled into
    the vectorised model's loop: it should run as fast)."""
    rho = 0.0
    for i in range(len(x)):
        rho = rho + np.exp(-3.0 * (x[i] + 1.0))
    return rho**2 + rho**3 + 0.25 * rho**4


def test_tapejit_element_loop(benchmark, case):
    """tapejit ``grad(x, out=g)`` of the element-loop form of the model."""
    n, x, _, ref = case
    grad = tj.compile(eam_element_loop, x)
    g = np.empty(n)
    grad(x, out=g)
    assert_close(g, ref, RTOL, what="tapejit, element loop")
    tag(benchmark, PY, f"n={n}", "tapejit, element loop")
    benchmark(grad, x, out=g)


def test_numpy(benchmark, case):
    """Hand-written numpy gradient into a preallocated array."""
    n, x, _, ref = case
    g = np.empty(n)
    assert_close(eam_grad_numpy(x, g), ref, RTOL, what="numpy")
    tag(benchmark, PY, f"n={n}", "numpy (hand)")
    benchmark(eam_grad_numpy, x, g)


@pytest.mark.parametrize("build", list(C_BUILDS))
def test_c(benchmark, case, cc, build):
    """Hand-written fused C gradient through cffi, pointers created once."""
    n, x, _, ref = case
    lib = cc.build(C_SOURCE, C_CDEF, C_BUILDS[build])
    g = np.empty(n)
    px, pg = cc.ptr(x), cc.ptr(g)
    lib.eam_grad(px, pg, n)
    assert_close(g, ref, RTOL if build == "C -O3" else RTOL_FAST, what=build)
    tag(benchmark, PY, f"n={n}", build)
    benchmark(lib.eam_grad, px, pg, n)


def test_numba(benchmark, case, numba_grad):
    """numba ``@njit(fastmath=True)`` hand-written two-loop gradient."""
    n, x, _, ref = case
    g = np.empty(n)
    numba_grad(x, g)
    assert_close(g, ref, RTOL_FAST, what="numba")
    tag(benchmark, PY, f"n={n}", "numba fastmath (hand)")
    benchmark(numba_grad, x, g)


def _calls(n: int) -> int:
    """K for the native loop: about 10⁶ elements of work per timed call."""
    return max(10, 1_000_000 // n)


def test_native_tapejit(benchmark, case, cc):
    """tapejit's kernel (``grad.address``) called K times from a C loop."""
    n, x, grad, ref = case
    assert grad.constants == () and grad.workspace_bytes == 0, "driver assumes f(x, value, g, ws)"
    drv = cc.build(DRIVER_SOURCE, DRIVER_CDEF)
    g, value = np.empty(n), np.empty(1)
    fn = cc.ffi.cast("void *", grad.address)
    px, pv, pg = cc.ptr(x), cc.ptr(value), cc.ptr(g)
    k = _calls(n)
    assert drv.loop_tapejit(fn, px, pv, pg, cc.ffi.NULL, 1) == 0
    assert_close(g, ref, RTOL, what="tapejit kernel")
    assert_close(value[0], eam(x), RTOL, what="tapejit value")
    tag(benchmark, NATIVE, f"n={n}", "tapejit kernel", scale=k * n, unit="ns")
    benchmark(drv.loop_tapejit, fn, px, pv, pg, cc.ffi.NULL, k)


@pytest.mark.parametrize("build", list(C_BUILDS))
def test_native_c(benchmark, case, cc, build):
    """The hand-written C gradient called K times from the same C loop."""
    n, x, _, ref = case
    lib = cc.build(C_SOURCE, C_CDEF, C_BUILDS[build])
    drv = cc.build(DRIVER_SOURCE, DRIVER_CDEF)
    g = np.empty(n)
    fn = cc.ffi.cast("void *", lib.eam_grad)
    px, pg = cc.ptr(x), cc.ptr(g)
    k = _calls(n)
    drv.loop_c(fn, px, pg, n, 1)
    assert_close(g, ref, RTOL if build == "C -O3" else RTOL_FAST, what=build)
    tag(benchmark, NATIVE, f"n={n}", build, scale=k * n, unit="ns")
    benchmark(drv.loop_c, fn, px, pg, n, k)


@pytest.fixture(scope="module")
def rows():
    """(X, compiled gradient of one row, reference gradient of every row)."""
    X = np.random.default_rng(7).random((ROWS, COLS))
    G = np.empty_like(X)
    return X, tj.compile(eam, X[0]), eam_grad_rows_numpy(X, G, np.empty(ROWS))


@pytest.mark.parametrize("threads", [1, 2])
def test_batch_tapejit(benchmark, rows, threads):
    """tapejit ``grad.batch(X, out=G, threads=k)``."""
    X, grad, ref = rows
    G = np.empty_like(X)
    grad.batch(X, out=G, threads=threads)
    assert_close(G, ref, RTOL, what="tapejit batch")
    tag(benchmark, BATCH, "10⁴×100", f"tapejit threads={threads}", scale=ROWS)
    benchmark(grad.batch, X, out=G, threads=threads)


@pytest.mark.parametrize("build", list(C_BUILDS))
def test_batch_c(benchmark, rows, cc, build):
    """The hand-written C gradient looped over the rows inside C."""
    X, _, ref = rows
    lib = cc.build(C_SOURCE, C_CDEF, C_BUILDS[build])
    G = np.empty_like(X)
    pX, pG = cc.ptr(X), cc.ptr(G)
    lib.eam_grad_rows(pX, pG, ROWS, COLS)
    assert_close(G, ref, RTOL if build == "C -O3" else RTOL_FAST, what=build)
    tag(benchmark, BATCH, "10⁴×100", build, scale=ROWS)
    benchmark(lib.eam_grad_rows, pX, pG, ROWS, COLS)


def test_batch_numpy(benchmark, rows):
    """Hand-written numpy gradient vectorised over the rows."""
    X, _, ref = rows
    G, rho = np.empty_like(X), np.empty(ROWS)
    assert_close(eam_grad_rows_numpy(X, G, rho), ref, RTOL, what="numpy rows")
    tag(benchmark, BATCH, "10⁴×100", "numpy (hand, vectorised)", scale=ROWS)
    benchmark(eam_grad_rows_numpy, X, G, rho)
