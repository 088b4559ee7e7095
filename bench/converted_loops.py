"""Compile time and gradient time of loops converted from the source that used to be traced
step by step or recompiled per input: a trajectory recorded with ``list.append`` (read back
with ``traj[-1]`` and ``np.stack``), and Newton iterations left with ``break`` on a traced
condition. Prints one line per case; the figures go to bench/RESULTS.md.

    python bench/converted_loops.py [T ...]      # default T = 100 1000 10000
"""

from __future__ import annotations

import sys
import time
import timeit

import numpy as np

import tapejit as tj


def trajectory(T: int):
    def traj_energy(x):
        traj = [x]
        for t in range(T):
            y = traj[-1]
            traj.append(y + 0.01 * np.tanh(y[::-1] - 0.5 * y))
        return np.sum(np.stack(traj) ** 2)

    return traj_energy


def newton(a):
    """Cube roots by Newton's method, each stopped once its step is below 1e-13."""
    out = 0.0
    for k in range(a.shape[0]):
        y = 1.0
        for _ in range(60):
            step = (y**3 - a[k]) / (3 * y**2)
            y = y - step
            if abs(step) < 1e-13:
                break
        out = out + y
    return out


def main(steps: list[int]) -> None:
    rng = np.random.default_rng(0)
    x = rng.uniform(size=16)
    for T in steps:
        f = trajectory(T)
        t = time.perf_counter()
        g = tj.compile(f, x, cache=False)
        c = time.perf_counter() - t
        us = min(timeit.repeat(lambda: g(x), number=20, repeat=3)) / 20 * 1e6
        print(f"trajectory T={T}: compile {c:.2f} s, gradient {us:.1f} us, "
              f"converted loops {g.stats['convert']['loops']}")  # fmt: skip
    a = rng.uniform(0.5, 8.0, 50)
    t = time.perf_counter()
    g = tj.compile(newton, a, cache=False)
    c = time.perf_counter() - t
    for _ in range(20):
        g(rng.uniform(0.5, 8.0, 50))
    print(f"newton with break, 50 roots: compile {c:.2f} s, "
          f"compiles after 20 new inputs: {g._dispatcher.compiles}")  # fmt: skip


if __name__ == "__main__":
    main([int(v) for v in sys.argv[1:]] or [100, 1000, 10000])
