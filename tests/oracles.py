"""Independent references the tests share: float64 central differences, computed with numpy
alone (no tapejit), for gradients of scalar functions."""

from __future__ import annotations

import numpy as np


def central(f, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """The gradient of scalar ``f`` at ``x`` by central differences, one coordinate at a time
    (truncation error O(h^2), rounding O(eps / h))."""
    g = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = h
        g.flat[i] = (f(x + e) - f(x - e)) / (2 * h)
    return g
