"""Seed 000: gradients of ``f(p) = c[0] * p`` and ``f(p) = (c @ proj) * p`` with captured
constants ``c = ones(n)``, ``proj = e_0``. The passes fold the constant part away, so tapejit's
gradient call should cost the same for n = 10³ and 10⁶; the reference is numpy evaluating the
forward expression (which reads all of ``c`` for the dot product).

Checked first: the gradient is exactly 1 and the value equals numpy's forward value.
"""

from __future__ import annotations

import numpy as np
import pytest
from benchutil import assert_close, tag

import tapejit as tj

TABLE = "Captured constants (seed 000): gradient call vs numpy forward (µs per call)"
SIZES = [1_000, 1_000_000]


def models(n: int) -> dict:
    """name → (model, numpy forward), over captured c = ones(n), proj = e_0."""
    c = np.ones(n)
    proj = np.zeros(n)
    proj[0] = 1.0

    def first(p):
        return c[0] * p

    def dot(p):
        return (c @ proj) * p

    return {"c[0]*p": (first, lambda p: c[0] * p), "(c @ e₀)*p": (dot, lambda p: (c @ proj) * p)}


@pytest.fixture(
    scope="module",
    params=[(m, n) for m in ("c[0]*p", "(c @ e₀)*p") for n in SIZES],
    ids=lambda mn: f"{mn[0]} n={mn[1]}",
)
def case(request):
    """(row label, compiled gradient, numpy forward, p)."""
    name, n = request.param
    model, forward = models(n)[name]
    p = np.array(2.0)
    grad = tj.compile(model, p)
    return f"{name}, n=10^{len(str(n)) - 1}", grad, forward, p


def test_tapejit(benchmark, case):
    """tapejit ``grad(p, out=g)``: should not grow with n."""
    row, grad, forward, p = case
    g = np.empty(())
    value, _ = grad.value_and_grad(p, out=g)
    assert_close(g, 1.0, 0.0, what="gradient")
    assert_close(value, forward(p), 1e-15, what="value")
    tag(benchmark, TABLE, row, "tapejit grad(p, out=g)")
    benchmark.extra_info["constants_bytes"] = grad.stats["constants_bytes"]
    benchmark(grad, p, out=g)


def test_numpy_forward(benchmark, case):
    """numpy evaluating the forward expression (the reference)."""
    row, _, forward, p = case
    tag(benchmark, TABLE, row, "numpy forward")
    benchmark(forward, p)
