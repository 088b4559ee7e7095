"""A scalarised model: a Python loop over elements, compiled to a native loop.

    python examples/element_loop.py [n]

Each iteration of the loop in ``chain_energy`` is a handful of scalar operations on two
neighbouring elements. Its body is straight-line code, so tracing runs 6 iterations and builds
the loop from them (``tapejit/frontend/loops/loop_capture.py``): the compiled gradient is one vectorised sum
and its adjoint, and compile time is the same for n = 100 and n = 10,000. (With capturing and
re-rolling off, ``TAPEJIT_REROLL=0``, the loop is traced element by element into straight-line
code, which ``codegen/lower/chunks.py`` splits into chained functions of bounded size.) The gradient
is checked against the hand-derived, vectorised numpy gradient.
"""

from __future__ import annotations

import sys
import time
import timeit

import numpy as np

import tapejit as tj


def make_model(n: int):
    """``chain_energy(x)`` for ``x`` of shape ``(n,)``: sum over neighbours of
    ``exp(-d^2) + d/2`` with ``d = x[i+1] - x[i]``, written element by element."""

    def chain_energy(x):
        s = 0.0
        for i in range(n - 1):
            d = x[i + 1] - x[i]
            s = s + np.exp(-d * d) + 0.5 * d
        return s

    return chain_energy


def numpy_grad(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The hand-derived gradient of ``chain_energy``, vectorised: ``out`` (shape ``(n,)``)."""
    d = np.diff(x)
    dd = 0.5 - 2.0 * d * np.exp(-d * d)
    out[:] = 0.0
    out[1:] += dd
    out[:-1] -= dd
    return out


def main(n: int = 1000) -> None:
    x = np.random.default_rng(0).random(n)
    g, ref = np.empty(n), numpy_grad(x, np.empty(n))
    t0 = time.perf_counter()
    grad = tj.compile(make_model(n), x, cache=False)
    grad(x, out=g)
    compile_s = time.perf_counter() - t0
    err = float(np.max(np.abs(g - ref)))
    chunks = grad.ir("llvm").count(f'define internal i32 @"tj_{grad.name}.c')
    per_call = min(timeit.repeat(lambda: grad(x, out=g), number=200, repeat=5)) / 200
    numpy_call = min(timeit.repeat(lambda: numpy_grad(x, g), number=200, repeat=5)) / 200
    captured = grad.stats["reroll"]["captured"]
    print(
        f"n = {n}: {grad.stats['nodes']['opt']} IR nodes, {captured['iterations']} iterations "
        f"captured in {captured['loops']} loop(s), code in {chunks + 1} function(s)"
    )
    print(f"compile + first call: {compile_s:.2f} s")
    print(f"gradient call: {per_call * 1e6:.1f} us (vectorised numpy: {numpy_call * 1e6:.1f} us)")
    print(f"max abs error against the hand-derived gradient: {err:.1e}")
    assert err < 1e-12
    print("gradient check: OK")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
