"""Issue 6, part 2: long straight-line scalar code. A *scalarised* model
(``examples/element_loop.py``) — a Python loop over the elements of ``x``, each iteration a
handful of scalar ops (``d = x[i+1] - x[i]``, ``s += exp(-d*d) + d/2``) — traces to ~15-20
scalar nodes per element, all straight-line code. Lowering splits it into chained functions of
``CHUNK_NODES`` nodes (``codegen/lower/chunks.py``) so that LLVM's superlinear cost per function stays
bounded: compile time should grow linearly in n.

Tables: cold compile + first call (``cache=False``), and the steady-state gradient against the
hand-written vectorised numpy gradient of the same function. Both gradients are checked against
each other (1e-12 relative) before anything is timed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from benchutil import assert_close, tag

import tapejit as tj

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from element_loop import make_model, numpy_grad  # noqa: E402

SIZES = [100, 300, 1000, 3000]
LATENCY = "Element loop (scalar code), compile + first call (ms)"
STEADY = "Element loop (scalar code), gradient call from Python (µs per call)"


@pytest.fixture(scope="module", params=SIZES, ids=lambda n: f"n={n}")
def case(request):
    n = request.param
    x = np.random.default_rng(n).random(n)
    return n, make_model(n), x, numpy_grad(x, np.empty(n))


def test_cold_compile(benchmark, case):
    n, f, x, ref = case
    g = np.empty(n)

    def cold():
        tj.compile(f, x, cache=False)(x, out=g)

    tag(benchmark, LATENCY, f"n={n}", "tapejit cold (cache=False)", unit="ms")
    benchmark.pedantic(cold, rounds=1 if n >= 1000 else 3, iterations=1)
    assert_close(g, ref, 1e-12, 1e-15, what="tapejit cold")


def test_steady_tapejit(benchmark, case):
    n, f, x, ref = case
    grad, g = tj.compile(f, x), np.empty(n)
    assert_close(grad(x, out=g), ref, 1e-12, 1e-15, what="tapejit")
    tag(benchmark, STEADY, f"n={n}", "tapejit")
    benchmark(grad, x, out=g)


def test_steady_numpy(benchmark, case):
    n, _, x, ref = case
    g = np.empty(n)
    assert_close(numpy_grad(x, g), ref, 1e-15, what="numpy")
    tag(benchmark, STEADY, f"n={n}", "numpy (hand, vectorised)")
    benchmark(numpy_grad, x, g)
