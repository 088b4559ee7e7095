"""Reverse mode: activity analysis and sparse (scatter-add) indexing adjoints, checked as work in
the IR (node counts and buffer sizes), not by timing."""

from __future__ import annotations

import numpy as np
import pytest

from tapejit.ad import autodiff
from tapejit.core import interpret
from tapejit import passes
from tapejit.frontend import tracing


def _joint(f, *args, argnums=(0,)):
    return autodiff.vjp_graph(tracing.trace(f, list(args), argnums))


def _sized(g, n):
    """Non-input nodes of g whose value has n or more elements (the O(n) work)."""
    return [x for x in g.nodes if x.op != "input" and x.type.size >= n]


@pytest.mark.parametrize("n", [1_000, 100_000])
def test_constant_element_touch_has_no_backward_work_of_size_n(n):
    c = np.ones(n)
    joint = _joint(lambda p: c[0] * p, 2.0)
    assert _sized(joint, n) == []  # neither forward nor backward touches n elements
    assert interpret.evaluate(joint, [2.0])[1] == pytest.approx(1.0)


@pytest.mark.parametrize("n", [1_000, 100_000])
def test_constant_dot_product_gets_no_cotangent(n):
    c = np.random.default_rng(0).random(n)
    proj = np.zeros(n)
    proj[0] = 1.0
    trace = tracing.trace(lambda p: (c @ proj) * p, [3.0], (0,))
    joint = autodiff.vjp_graph(trace)
    # The forward dot product is O(n); reverse mode adds no O(n) node (c and proj are inactive).
    assert len(_sized(joint, n)) == len(_sized(trace, n))
    assert float(interpret.evaluate(joint, [3.0])[1]) == pytest.approx(c[0])


def test_inactive_argument_gets_no_cotangent():
    def f(x, c):
        return c[0] * x[0]

    for m in (10, 10_000):
        joint = _joint(f, np.ones(3), np.ones(m), argnums=(0,))
        assert _sized(joint, m) == []
        active = autodiff.active_nodes(joint)
        assert id(joint.inputs[1]) not in active


def test_comparisons_cut_activity():
    def f(x):
        return np.sum(tracing.where(x > 0.5, x * x, -x))

    trace = tracing.trace(f, [np.linspace(0, 1, 5)], (0,))
    active = autodiff.active_nodes(trace)
    assert not any(n.op == "gt" and id(n) in active for n in trace.nodes)


@pytest.mark.parametrize("n", [10, 200])
def test_element_loop_adjoint_is_one_accumulator(n, monkeypatch):
    from tapejit.frontend.loops import loop_source

    monkeypatch.setattr(loop_source, "ENABLED", False)  # the unrolled loop's adjoint

    def f(x):
        s = 0.0
        for i in range(len(x)):
            s = s + np.exp(x[i]) * x[i]
        return s

    x = np.random.default_rng(1).random(n)
    joint = _joint(f, x)
    nodes = joint.nodes
    zero_fills = [m for m in nodes if m.op == "const" and m.shape == (n,)]
    scatters = [m for m in nodes if m.op in ("scatter", "scatter_add")]  # the first writes
    assert len(zero_fills) == 1 and len(scatters) == n  # one O(n) fill, then O(1) per access
    assert not any(m.op in ("broadcast_to", "add") and m.shape == (n,) for m in nodes)
    prog = passes.plan(joint)
    # All n scatter-adds update one buffer in place: the workspace holds a single n-vector.
    assert prog.workspace_bytes <= 8 * n + 64
    np.testing.assert_allclose(interpret.evaluate(joint, [x])[1], np.exp(x) * (1 + x), rtol=1e-13)
