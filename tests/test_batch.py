"""Batched calls (grad.batch) and raw access (grad.address) against per-row single calls."""

from __future__ import annotations

import numpy as np
import pytest

import tapejit as tj
from tapejit.codegen import entry

RNG = np.random.default_rng(11)


def eam(x):
    rho = np.sum(np.exp(-3.0 * (x + 1.0)))
    return rho**2 + rho**3 + 0.25 * rho**4


def model(w, s):
    return np.sum(np.tanh(w) * s) + s * s


@pytest.fixture(scope="module")
def g():
    return tj.compile(eam, RNG.random(20))


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("m", [0, 1, 7, 100])
def test_batch_matches_single_calls(g, m, threads):
    X = RNG.random((m, 20))
    values = np.empty(m)
    G = g.batch(X, values=values, threads=threads)
    assert G.shape == (m, 20)
    for r in range(m):
        np.testing.assert_array_equal(G[r], g(X[r]))
        assert values[r] == pytest.approx(eam(X[r]), rel=1e-13)


def test_batch_tuple_argnums_with_scalar_argument():
    g2 = tj.compile(model, RNG.random(4), 0.3, argnums=(0, 1))
    W, S = RNG.random((9, 4)), RNG.random(9)
    gw, gs = np.empty((9, 4)), np.empty(9)
    res = g2.batch(W, S, out=(gw, gs), threads=2)
    assert res[0] is gw and res[1] is gs
    np.testing.assert_allclose(gw, (1 - np.tanh(W) ** 2) * S[:, None], rtol=1e-14)
    np.testing.assert_allclose(gs, np.tanh(W).sum(axis=1) + 2 * S, rtol=1e-14)


@pytest.mark.parametrize(
    "call,exc,text",
    [
        (lambda g, X: g.batch(X[:, :10]), ValueError, r"argument 0 must have shape \(m, 20\)"),
        (lambda g, X: g.batch(X[0]), ValueError, "argument 0 must have shape"),
        (lambda g, X: g.batch(X.T.copy().T), ValueError, "C-contiguous"),
        (lambda g, X: g.batch(list(X)), TypeError, "got list"),
        (lambda g, X: g.batch(X.astype(complex)), TypeError, "float64"),
        (lambda g, X: g.batch(X, X), TypeError, "takes 1 batched"),
        (lambda g, X: g.batch(X, out=np.empty((5, 20))), ValueError, "out must have shape"),
        (lambda g, X: g.batch(X, out=X), ValueError, "overlaps"),
        (lambda g, X: g.batch(X, values=np.empty(3)), ValueError, "values must have shape"),
        (lambda g, X: g.batch(X, threads=0), ValueError, "threads"),
    ],
)
def test_batch_errors(g, call, exc, text):
    X = RNG.random((6, 20))
    with pytest.raises(exc, match=text):
        call(g, X)


def test_batch_converts_exact_dtypes(g):
    X = RNG.integers(0, 3, (4, 20)).astype(np.int16)
    np.testing.assert_array_equal(g.batch(X), g.batch(X.astype(np.float64)))


def test_address_is_callable_with_the_documented_signature(g):
    x = RNG.random(20)
    gx, value = np.empty(20), np.empty(1)
    ws = np.zeros(max(g.workspace_bytes, 64) + 64, dtype=np.uint8)
    ws = ws[(-ws.ctypes.data) % 64 :]
    fn = entry.ffi.cast("int32_t(*)(double *, double *, double *, void *)", g.address)
    assert g.constants == ()
    p = entry.ffi.from_buffer
    status = fn(p("double[]", x), p("double[]", value), p("double[]", gx), p(ws))
    assert status == 0
    np.testing.assert_array_equal(gx, g(x))
    assert value[0] == pytest.approx(eam(x), rel=1e-13)


def test_address_from_numba():
    """The documented route for numba: a ctypes prototype of the address, called in @njit code
    (numba is optional; skipped when it is not installed)."""
    numba = pytest.importorskip("numba")
    import ctypes

    x = RNG.random(20)
    g = tj.compile(eam, x)
    assert g.workspace_bytes == 0  # so the workspace pointer may be NULL
    proto = ctypes.CFUNCTYPE(ctypes.c_int32, *[ctypes.c_void_p] * 4)
    fn = proto(g.address)

    @numba.njit
    def many(X, G, value):
        for r in range(X.shape[0]):
            fn(X[r].ctypes.data, value.ctypes.data, G[r].ctypes.data, 0)

    X, G, value = RNG.random((5, 20)), np.empty((5, 20)), np.empty(1)
    many(X, G, value)
    np.testing.assert_array_equal(G, g.batch(X))
