"""Rolled loops (issue: control flow): the bounded while loop of seed 003 and an RNN scan.

* ``while-mlp``: a while loop whose body is an MLP 1->256->256->1 with tanh (constant weights),
  stopping after 8 steps; gradient with respect to the initial value for ``max_steps`` in
  {8, 64, 1024}. The gradient should cost the same at every bound (JAX's grows with it).
  Reference: the same 8 steps and their backward pass written by hand in numpy.
* ``rnn``: ``h <- tanh(W h + U x_t)`` (hidden 16, input 4), loss ``sum_t (v.h_t - y_t)^2``,
  gradient with respect to all parameters, over T in {10, 100, 1000} with *one* compile (a
  dynamic-length argument). Reference: hand-written numpy backpropagation through time.

Run: ``python -m pytest bench/test_loops.py --benchmark-enable --benchmark-group-by=param``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import tapejit as tj
from benchutil import tag

WHILE = "While loop (seed 003): MLP 1-256-256-1 body, 8 steps taken, gradient"
RNN = "RNN scan, hidden 16, input 4: loss gradient, one compile for every T"

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from rnn_scan import D, H, bptt, rnn_loss  # noqa: E402

RNG = np.random.default_rng(2026)
N = 256
W1, B1 = RNG.normal(size=(N, 1)), RNG.normal(size=N) * 0.1
W2, B2 = RNG.normal(size=(N, N)) / np.sqrt(N), RNG.normal(size=N) * 0.1
W3, B3 = RNG.normal(size=(1, N)) / np.sqrt(N), RNG.normal(size=1) * 0.1
STEPS = 8


def mlp(x):
    return W3 @ np.tanh(W2 @ np.tanh(W1 @ x + B1) + B2) + B3


def while_model(max_steps):
    def f(val):
        x, _ = tj.while_loop(
            lambda c: c[1] < STEPS,
            lambda c: (mlp(c[0]), c[1] + 1.0),
            (val, 0.0),
            max_steps=max_steps,
        )
        return np.sum(x)

    return f


def while_numpy_grad(val):
    """Hand-written: 8 forward steps storing activations, then the backward pass."""
    acts = []
    x = val
    for _ in range(STEPS):
        a1 = np.tanh(W1 @ x + B1)
        a2 = np.tanh(W2 @ a1 + B2)
        acts.append((a1, a2))
        x = W3 @ a2 + B3
    g = np.ones(1)
    for a1, a2 in reversed(acts):
        d2 = (W3.T @ g) * (1.0 - a2 * a2)
        d1 = (W2.T @ d2) * (1.0 - a1 * a1)
        g = W1.T @ d1
    return g


@pytest.mark.parametrize("max_steps", [8, 64, 1024])
def test_while_mlp_tapejit(benchmark, max_steps):
    """tapejit: gradient of the bounded while loop; cost should not depend on max_steps."""
    tag(benchmark, WHILE, f"max_steps={max_steps}", "tapejit")
    val = np.array([0.3])
    grad = tj.compile(while_model(max_steps), val)
    g = np.empty(1)
    np.testing.assert_allclose(grad(val, out=g), while_numpy_grad(val), rtol=1e-10)
    benchmark.extra_info.update(max_steps=max_steps, compile_s=sum(grad.stats["timings"].values()))
    benchmark(grad, val, out=g)


@pytest.mark.parametrize("max_steps", [8, 64, 1024])
def test_while_mlp_numpy(benchmark, max_steps):
    """Reference: the hand-written numpy gradient of the same 8 steps (no bound to pay for)."""
    tag(benchmark, WHILE, f"max_steps={max_steps}", "numpy (hand)")
    benchmark(while_numpy_grad, np.array([0.3]))


@pytest.fixture(scope="module")
def rnn():
    p = RNG.normal(size=H * H + H * D + H) * 0.25
    grad = tj.compile(rnn_loss, p, RNG.normal(size=(10, D + 1)), dynamic_argnums=1)
    return p, grad


@pytest.mark.parametrize("T", [10, 100, 1000])
def test_rnn_tapejit(benchmark, rnn, T):
    """tapejit: RNN loss gradient through tj.scan over a dynamic-length sequence."""
    tag(benchmark, RNN, f"T={T}", "tapejit (tj.scan, dynamic length)")
    p, grad = rnn
    seq = RNG.normal(size=(T, D + 1))
    g = np.empty_like(p)
    grad(p, seq, out=g)
    np.testing.assert_allclose(g, bptt(p, seq)[1], rtol=1e-9, atol=1e-12)
    benchmark(grad, p, seq, out=g)
    benchmark.extra_info.update(T=T, compiles=len(grad.specialisations))
    assert len(grad.specialisations) == 1


@pytest.mark.parametrize("T", [10, 100, 1000])
def test_rnn_numpy_bptt(benchmark, T):
    """Reference: hand-written numpy backpropagation through time."""
    tag(benchmark, RNN, f"T={T}", "numpy BPTT (hand)")
    p = RNG.normal(size=H * H + H * D + H) * 0.25
    benchmark(bptt, p, RNG.normal(size=(T, D + 1)))


RNN_C = r"""
#include <math.h>
#include <stdint.h>
#include <string.h>
#define H 16
#define D 4
/* Hand-written BPTT of the RNN loss; hs and es are caller-provided scratch of T+1 rows and T. */
double rnn_grad(const double *p, const double *seq, int64_t T, double *g, double *hs, double *es) {
    const double *W = p, *U = p + H * H, *v = p + H * H + H * D;
    double *gW = g, *gU = g + H * H, *gv = g + H * H + H * D;
    memset(g, 0, sizeof(double) * (H * H + H * D + H));
    memset(hs, 0, sizeof(double) * H);
    double loss = 0.0;
    for (int64_t t = 0; t < T; t++) {
        const double *x = seq + t * (D + 1), *h = hs + t * H;
        double *hn = hs + (t + 1) * H, e = -x[D];
        for (int i = 0; i < H; i++) {
            double a = 0.0;
            for (int j = 0; j < H; j++) a += W[i * H + j] * h[j];
            for (int j = 0; j < D; j++) a += U[i * D + j] * x[j];
            hn[i] = tanh(a);
            e += v[i] * hn[i];
        }
        es[t] = e;
        loss += e * e;
    }
    double dh_next[H] = {0}, dh[H], da[H];
    for (int64_t t = T - 1; t >= 0; t--) {
        const double *x = seq + t * (D + 1), *h = hs + t * H, *hn = hs + (t + 1) * H;
        for (int i = 0; i < H; i++) {
            dh[i] = 2.0 * es[t] * v[i] + dh_next[i];
            gv[i] += 2.0 * es[t] * hn[i];
            da[i] = dh[i] * (1.0 - hn[i] * hn[i]);
        }
        for (int i = 0; i < H; i++) {
            for (int j = 0; j < H; j++) gW[i * H + j] += da[i] * h[j];
            for (int j = 0; j < D; j++) gU[i * D + j] += da[i] * x[j];
        }
        for (int j = 0; j < H; j++) {
            double s = 0.0;
            for (int i = 0; i < H; i++) s += W[i * H + j] * da[i];
            dh_next[j] = s;
        }
    }
    return loss;
}
"""
RNN_CDEF = "double rnn_grad(const double *p, const double *seq, int64_t T, double *g, double *hs, double *es);"


@pytest.mark.parametrize("T", [10, 100, 1000])
def test_rnn_c(benchmark, cc, T):
    """Reference: hand-written C BPTT (gcc -O3 -march=native -ffast-math) through cffi."""
    from benchutil import FAST_MATH

    lib = cc.build(RNN_C, RNN_CDEF, FAST_MATH)
    p = RNG.normal(size=H * H + H * D + H) * 0.25
    seq = RNG.normal(size=(T, D + 1))
    g, hs, es = np.empty_like(p), np.empty((T + 1, H)), np.empty(T)
    args = (cc.ptr(p), cc.ptr(seq), T, cc.ptr(g), cc.ptr(hs), cc.ptr(es))
    lib.rnn_grad(*args)
    np.testing.assert_allclose(g, bptt(p, seq)[1], rtol=1e-9, atol=1e-12)
    tag(benchmark, RNN, f"T={T}", "C BPTT (hand, -ffast-math)")
    benchmark(lib.rnn_grad, *args)
