"""Matrix products at BLAS speed: the gradient of 0.5 |A B|^2 with respect to A (two products,
A B then (A B) B^T) against numpy doing the same two products with its OpenBLAS, one thread.
From 96^3 multiply-adds tapejit calls the same BLAS (``tapejit.codegen.blas``); below it, its
own loops."""

from __future__ import annotations

import numpy as np
import pytest
from benchutil import assert_close, tag

import tapejit as tj

TABLE = "Matrix products: gradient of 0.5 |A B|^2 wrt A, n x n (µs per call)"


def loss(A, B):
    C = A @ B
    return 0.5 * np.sum(C * C)


@pytest.mark.parametrize("n", [64, 128, 256, 512])
@pytest.mark.parametrize("impl", ["tapejit", "numpy (OpenBLAS, 1 thread)"])
def test_matmul(benchmark, n, impl):
    rng = np.random.default_rng(n)
    A, B = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    ref = (A @ B) @ B.T
    if impl == "tapejit":
        g = tj.compile(loss, A, B)
        out = np.empty_like(A)
        call = lambda: g(A, B, out=out)  # noqa: E731
    else:
        call = lambda: (A @ B) @ B.T  # noqa: E731
    assert_close(call(), ref, 1e-12, 1e-12 * np.abs(ref).max(), impl)
    tag(benchmark, TABLE, f"n={n}", impl)
    benchmark(call)
