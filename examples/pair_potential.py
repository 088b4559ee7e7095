"""A Lennard-Jones cluster written as a physicist writes it — a plain Python loop over atoms —
compiled to a native gradient and checked and timed against a hand-written numpy gradient.

    E = sum_{i<j} 4 (s_ij^2 - s_ij),   s_ij = 1 / r2_ij^3,   r2_ij = |x_j - x_i|^2

Iteration i of the loop works on the N-1-i atoms after atom i: N-1 rows of different lengths.
tapejit re-rolls them into one computation over all the pairs, stored row after row (a ragged
layout), compiled to a double loop over the rows and their pairs, so compile time does not
grow with N. ``lj_pairs`` is the same energy as a scalar loop over pairs: tracing runs a few
rows of the nest (each inner loop traced for a few pairs and built as a sum) and builds the
other rows from them, instead of running all N(N-1)/2 pairs; the short rows at the end run as
written. ``lj_all_pairs`` loops over every ordered pair (``if j != i``): each row is two loops,
before and after the diagonal, and the rows are built the same way.

    python examples/pair_potential.py [N]
"""

from __future__ import annotations

import sys
import time

import numpy as np

import tapejit as tj


def lj_rows(pos):
    """Lennard-Jones energy of (N, 3) positions, one row of pairs per atom."""
    e = 0.0
    for i in range(len(pos) - 1):
        d = pos[i + 1 :] - pos[i]
        r2 = np.sum(d * d, axis=1)
        inv6 = 1.0 / r2**3
        e = e + np.sum(4.0 * (inv6 * inv6 - inv6))
    return e


def lj_pairs(pos):
    """The same energy as a scalar double loop over pairs, as it would be written in C."""
    n = pos.shape[0]
    e = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            dx = pos[j, 0] - pos[i, 0]
            dy = pos[j, 1] - pos[i, 1]
            dz = pos[j, 2] - pos[i, 2]
            r2 = dx * dx + dy * dy + dz * dz
            s = 1.0 / (r2 * r2 * r2)
            e = e + 4.0 * (s * s - s)
    return e


def lj_all_pairs(pos):
    """The same energy over every ordered pair, each pair counted twice (half the term each)."""
    n = pos.shape[0]
    e = 0.0
    for i in range(n):
        for j in range(n):
            if j != i:
                d = pos[j] - pos[i]
                s = 1.0 / np.dot(d, d) ** 3
                e = e + 2.0 * (s * s - s)
    return e


def lj_grad_numpy(pos):
    """The hand-written gradient, over all pairs at once: dE/dx_j = sum_i 2 f_ij (x_j - x_i)."""
    d = pos[None, :, :] - pos[:, None, :]  # d[i, j] = x_j - x_i
    r2 = np.einsum("ijk,ijk->ij", d, d)
    np.fill_diagonal(r2, np.inf)
    s = 1.0 / r2**3
    f = -12.0 * s * (2.0 * s - 1.0) / r2
    return 2.0 * np.einsum("ij,ijk->jk", f, d)


def lattice(n: int) -> np.ndarray:
    """n atoms on a jittered cubic lattice, spacing 1.5 (no pair closer than ~1.2)."""
    side = int(np.ceil(n ** (1 / 3)))
    grid = np.stack(np.meshgrid(*[np.arange(side)] * 3, indexing="ij"), -1).reshape(-1, 3)
    return grid[:n] * 1.5 + 0.1 * np.random.default_rng(n).random((n, 3))


def main(n: int = 64) -> None:
    pos = lattice(n)
    ref = lj_grad_numpy(pos)
    k = max(10, 20000 // n)
    t2 = time.perf_counter()
    for _ in range(k):
        lj_grad_numpy(pos)
    t_np = (time.perf_counter() - t2) / k
    for model in (lj_rows, lj_pairs, lj_all_pairs):
        t0 = time.perf_counter()
        grad = tj.compile(model, pos, cache=False)
        t_compile = time.perf_counter() - t0
        err = np.abs(grad(pos) - ref).max() / np.abs(ref).max()
        print(f"{model.__name__}, N = {n}: compiled in {t_compile:.2f} s; max relative error vs "
              f"numpy {err:.1e}")
        assert err < 1e-11
        out = np.empty_like(pos)
        t1 = time.perf_counter()
        for _ in range(k):
            grad(pos, out=out)
        t_tj = (time.perf_counter() - t1) / k
        print(f"  gradient: tapejit {t_tj * 1e6:.1f} µs, hand-written numpy {t_np * 1e6:.1f} µs "
              f"({t_tj / t_np:.2f}x); the C reference is in bench/test_lj.py")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 64)
