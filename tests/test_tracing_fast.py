"""The tracer's fast paths for element loops (tapejit/frontend/tracer.py: ``_fast_arith`` for float64
arithmetic on operands of one shape and Python floats, ``_element`` for ``x[i, j]`` reads) build
exactly the nodes the general path builds: the same printed trace, with and without them, for
scalar code, vector code, mixed scalar and array code, Python numbers on either side, products
with 1 (which the general path folds), negative and out-of-range indices (which the fast path
leaves to the general one)."""

from __future__ import annotations

import numpy as np
import pytest

from tapejit import TracingError
from tapejit.frontend import tracer, tracing


def pair_terms(x):
    e = 0.0
    for i in range(x.shape[0]):
        for j in range(i + 1, x.shape[0]):
            d = x[j, 0] - x[i, 0]
            r = d * d + (x[j, 1] - x[i, 1]) ** 2 + 1.0
            e = e + 4.0 / r - r * 1.0 + 1.0 * r - 2 * d / 3.0
    return e


def mixed(x):
    s = x[0, 0] * x[1, 1] - x[-1, 0]  # a negative index: the general path
    v = np.sin(x[:, 0]) * s  # an array times a traced scalar
    return np.sum(v) + s / x[2, 1] + x[True + 0, 0]


def _general_only(monkeypatch):
    monkeypatch.setattr(tracer, "_fast_arith", lambda op, x, y: None)
    monkeypatch.setattr(tracer, "_element", lambda x, key: None)


def vector_steps(x):
    h = x[0]
    for _ in range(4):
        h = np.sin(h) * 0.9 + x[1] * 0.1 - 1.0 * h / (1.0 + h * h) + x[2] * x[0]
    return np.sum(h * 1.0) + np.sum(h[:2] * x[0, :2])


@pytest.mark.parametrize("f", [pair_terms, mixed, vector_steps])
def test_fast_paths_build_the_general_paths_graph(f, monkeypatch):
    x = np.random.default_rng(0).random((5, 2)) + 0.5
    fast = str(tracing.trace(f, [x], [0]))
    _general_only(monkeypatch)
    assert str(tracing.trace(f, [x], [0])) == fast


def test_an_index_out_of_bounds_still_gets_the_general_error():
    with pytest.raises(TracingError, match="out of bounds"):
        tracing.trace(lambda x: x[0, 5] * 2.0, [np.ones((2, 2))], [0])


def test_small_arrays_made_anew_are_one_const_input(unconverted):
    """An array a loop body makes in every iteration (``np.array([1.0, 2.0, 3.0])``) is one
    const input (by value, bit for bit: -0.0 is another), so the iterations are alike and
    re-roll; the values are the loop's."""
    import tapejit as tj
    from tapejit.core import interpret

    def f(x):
        e = 0.0
        for i in range(len(x) - 2):
            w = np.array([1.0, 2.0, 3.0])
            z = np.array([0.0, -0.0, 0.0]) if i % 2 else np.array([0.0, 0.0, 0.0])
            e = e + np.sum(np.sin(x[i : i + 3]) * w + z)
        return e

    x = np.random.default_rng(3).normal(size=40)
    g = tracing.trace(f, [x], [0])
    consts = [n for n, k in zip(g.inputs, g.kinds) if k == "const"]
    assert len(consts) == 3, consts  # w, and z of each sign pattern
    np.testing.assert_allclose(interpret.evaluate(g, [x])[0], f(x), rtol=1e-14)
    grad = tj.compile(f, x, cache=False)
    rolled = grad.stats["reroll"]["iterations"] + grad.stats["reroll"]["captured"]["iterations"]
    assert rolled >= 19  # 38 iterations: 19 of a loop over pairs (z alternates), or 38 of one
    assert grad.stats["nodes"]["trace"] < 60, grad.stats["nodes"]
