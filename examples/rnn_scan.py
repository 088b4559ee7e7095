"""An RNN loss over sequences of any length: one compile, a rolled native loop, exact gradients.

    python examples/rnn_scan.py

``h_t = tanh(W h_{t-1} + U x_t)``, ``loss = sum_t (v . h_t - y_t)^2`` with hidden size 16 and
input size 4. The model is written with ``tj.scan``, so the body is compiled once as a native
loop (never unrolled), and the sequence is a *dynamic-length* argument: sequences of length 10,
100 and 1000 all run through the same compiled code. The gradient is checked against a
hand-written numpy backpropagation through time, and both are timed.
"""

from __future__ import annotations

import sys
import timeit

import numpy as np

import tapejit as tj

H, D = 16, 4


def unpack(p):
    W = p[: H * H].reshape(H, H)
    U = p[H * H : H * H + H * D].reshape(H, D)
    v = p[H * H + H * D :]
    return W, U, v


def rnn_loss(p, seq):
    """``seq`` has shape (T, D + 1): the inputs x_t and, in the last column, the targets y_t."""
    W, U, v = unpack(p)

    def step(carry, row):
        h, loss = carry
        h = np.tanh(W @ h + U @ row[:D])
        e = v @ h - row[D]
        return (h, loss + e * e), None

    (_, loss), _ = tj.scan(step, (np.zeros(H), 0.0), seq)
    return loss


def bptt(p, seq):
    """Hand-written numpy gradient (backpropagation through time): ``(loss, gradient)``."""
    W, U, v = unpack(p)
    xs, ys = seq[:, :D], seq[:, D]
    T = len(seq)
    hs = np.zeros((T + 1, H))
    es = np.zeros(T)
    for t in range(T):
        hs[t + 1] = np.tanh(W @ hs[t] + U @ xs[t])
        es[t] = v @ hs[t + 1] - ys[t]
    gW, gU, gv = np.zeros_like(W), np.zeros_like(U), np.zeros_like(v)
    dh_next = np.zeros(H)
    for t in reversed(range(T)):
        dh = 2.0 * es[t] * v + dh_next
        gv += 2.0 * es[t] * hs[t + 1]
        da = dh * (1.0 - hs[t + 1] ** 2)
        gW += np.outer(da, hs[t])
        gU += np.outer(da, xs[t])
        dh_next = W.T @ da
    return float(es @ es), np.concatenate([gW.ravel(), gU.ravel(), gv])


def main() -> int:
    rng = np.random.default_rng(0)
    p = rng.normal(size=H * H + H * D + H) * 0.25
    grad = tj.compile(rnn_loss, p, rng.normal(size=(10, D + 1)), dynamic_argnums=1)
    g = np.empty_like(p)
    ok = True
    print(f"{'T':>6} {'max rel err':>12} {'tapejit us':>11} {'numpy BPTT us':>14} {'speed-up':>9}")
    for T in (10, 100, 1000):
        seq = rng.normal(size=(T, D + 1))
        value, _ = grad.value_and_grad(p, seq, out=g)
        ref_value, ref = bptt(p, seq)
        err = max(
            abs(value - ref_value) / abs(ref_value), np.max(np.abs(g - ref)) / np.max(np.abs(ref))
        )
        ok &= err < 1e-10
        n = max(3, 20000 // T)
        t_tj = min(timeit.repeat(lambda: grad(p, seq, out=g), number=n, repeat=3)) / n * 1e6
        t_np = (
            min(timeit.repeat(lambda: bptt(p, seq), number=max(1, n // 20), repeat=3))
            / max(1, n // 20)
            * 1e6
        )
        print(f"{T:>6} {err:>12.1e} {t_tj:>11.2f} {t_np:>14.1f} {t_np / t_tj:>8.1f}x")
    print(
        f"compiles: {len(grad.specialisations)} (one for every length up to "
        f"{tj.api.DYNAMIC_CAPACITY})"
    )
    print("gradient check:", "OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
