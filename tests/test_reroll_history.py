"""Re-rolling graph models (tapejit/passes/reroll/history.py): vertex loops whose iterations read
earlier iterations' outputs (``outs[parent[v]]``), some iterations only (a Python ``if`` on a
constant table), and block reads whose start moves (``params[v*P : v*P + n]``). Each model is
checked re-rolled against its unrolled trace (values and gradients by the IR interpreter, the
oracle), compiled against central differences in random directions, and for forward mode and
Hessian-vector products against differences of the gradient."""

from __future__ import annotations

import numpy as np
import pytest

import tapejit as tj
from tapejit.ad import forward
from tapejit.core import interpret
from tapejit.frontend.loops import loop_source
from tapejit.frontend import tracing
from tapejit.core.ops import Op
from tapejit.passes.reroll import driver as rr
from test_reroll import against_unrolled as check  # trace vs re-rolled, compiled vs differences

RNG = np.random.default_rng(11)
H = 4  # vertex width
P = H * H + H  # parameters per vertex


@pytest.fixture(autouse=True)
def rerolled(monkeypatch):
    monkeypatch.setattr(rr, "ENABLED", True)
    monkeypatch.setattr(loop_source, "ENABLED", False)


def skip_table(V: int, seed: int, p: float = 0.5) -> list:
    rng = np.random.default_rng(seed)
    out = [None]
    for v in range(1, V):
        r = int(rng.integers(0, max(v - 1, 1)))
        out.append(r if v >= 2 and rng.random() < p else None)
    return out


def dag_model(V: int, seed: int = 0, p: float = 0.5):
    """The benchmark's graph model, small: a tanh layer per vertex, its input the previous
    vertex's output plus, at random, an earlier vertex's (``bench/dagmodel.py``)."""
    skip = skip_table(V, seed, p)

    def dag(params, x):
        outs = []
        for v in range(V):
            s = x if v == 0 else outs[v - 1]
            if skip[v] is not None:
                s = s + outs[skip[v]]
            W = params[v * P : v * P + H * H].reshape(H, H)
            b = params[v * P + H * H : (v + 1) * P]
            outs.append(np.tanh(W @ s + b))
        return np.sum(outs[-1]) + 0.1 * np.sum(outs[V // 2] ** 2)

    return dag


def parent_model(V: int, seed: int = 1):
    """Every vertex reads its previous one and a parent further back from a table. (A parent
    that is the previous vertex reads the carry twice: the chain of carries ties there, and
    such iterations stay unrolled.)"""
    rng = np.random.default_rng(seed)
    parent = [0, 0] + [int(rng.integers(0, v - 1)) for v in range(2, V)]

    def tree(params, x):
        outs = [np.tanh(x), np.tanh(x + 1.0)]
        for v in range(2, V):
            w = params[v * H : (v + 1) * H]
            outs.append(np.sin(w * outs[v - 1] + 0.5 * outs[parent[v]]))
        return np.sum(outs[-1] * outs[-2])

    return tree


def scalar_model(n: int, seed: int = 2, shared: bool = False):
    """A scalar recurrence reading a value further back: ``a[i] = f(a[i-1], a[p[i]], x[i])``.
    ``shared``: the read is scaled by a constant first (``0.4 * a[p[i]]``), which tracing
    computes once for iterations with one ``p[i]``: such iterations do not match the others
    (the chain stays partly unrolled, still exact)."""
    rng = np.random.default_rng(seed)
    back = [0, 0] + [int(rng.integers(0, i - 1)) for i in range(2, n)]

    def rec(x):
        a = [x[0], x[1]]
        for i in range(2, n):
            h = 0.4 * a[back[i]] if shared else a[back[i]]
            a.append(np.tanh(0.7 * a[i - 1] + h * x[i]))
        return a[-1] + 0.5 * a[n // 3]

    return rec


def blocks_model(n: int):
    """Block reads alone: a carried vector updated from ``p[3*i : 3*i + 3]``."""

    def f(p):
        h = np.zeros(3) + 0.1
        for i in range(n):
            h = np.tanh(h * p[3 * i : 3 * i + 3] + 0.3)
        return np.sum(h * h)

    return f


def inputs(V: int, width: int = P):
    return RNG.normal(0.0, 0.5, V * width), RNG.normal(size=H)


@pytest.mark.parametrize("V", [20, 57])
@pytest.mark.parametrize("seed", [0, 3])
def test_graph_model_with_optional_parents_is_one_loop(V, seed):
    params, x = inputs(V)
    stats = check(dag_model(V, seed), params, x)
    assert stats["loops"] == 1 and stats["history"] == 1, stats
    assert stats["iterations"] >= V - 2, stats
    grad = tj.compile(dag_model(V, seed), params, x, argnums=(0, 1), cache=False)
    assert " = loop " in grad.ir("trace") and "links=" in grad.ir("trace")
    assert grad.stats["reroll"]["history"] == 1


def test_every_vertex_reads_a_parent():
    V = 40
    params, x = RNG.normal(0.0, 0.7, V * H), RNG.normal(size=H)
    stats = check(parent_model(V), params, x)
    assert stats["loops"] == 1 and stats["history"] == 1, stats


def test_scalar_recurrence_reading_further_back():
    n = 50
    stats = check(scalar_model(n), RNG.normal(size=n))
    assert stats["loops"] == 1 and stats["history"] == 1, stats
    stats = check(scalar_model(n, shared=True), RNG.normal(size=n))
    assert stats["history"] >= 1, stats


def test_moving_blocks_are_scanned():
    n = 30
    stats = check(blocks_model(n), RNG.normal(size=3 * n))
    assert stats["loops"] == 1 and stats["iterations"] >= n - 2, stats


def test_graph_model_forward_mode_and_hvp():
    V = 24
    params, x = inputs(V)
    f = dag_model(V, 5)
    g = tracing.trace(f, [params, x], [0, 1])
    r, stats = rr.reroll(g)
    assert stats["history"] == 1
    dp, dx = RNG.standard_normal(params.shape), RNG.standard_normal(x.shape)
    want = interpret.evaluate(forward.jvp_graph(g), [params, x, dp, dx])
    got = interpret.evaluate(forward.jvp_graph(r), [params, x, dp, dx])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-13)
    _, tangent = tj.jvp(f, (params, x), (dp, dx))
    np.testing.assert_allclose(tangent, want[1], rtol=1e-11, atol=1e-12)
    hv = tj.hvp(lambda p: f(p, x), (params,), dp)
    grad = tj.compile(f, params, x, argnums=0, cache=False)
    h = 1e-6
    fd = (grad(params + h * dp, x) - grad(params - h * dp, x)) / (2 * h)
    np.testing.assert_allclose(hv, fd, rtol=1e-5, atol=1e-7)


def test_compiled_code_stops_growing():
    """The vertex loop compiles to the same functions whatever the number of vertices."""
    fns, kernels = [], []
    for V in (40, 160):
        params, x = inputs(V)
        grad = tj.compile(dag_model(V, 7), params, x, argnums=(0, 1), cache=False)
        assert grad.stats["reroll"]["loops"] == 1
        fns.append(grad.ir("llvm").count("define "))
        kernels.append(grad.stats["kernels"])
    assert fns[0] == fns[1] and kernels[0] == kernels[1], (fns, kernels)


def test_reads_inside_an_earlier_iteration_stay_unrolled():
    """A read of an earlier vertex's intermediate value (not its output) is not a history
    read: the chain stays unrolled (and correct), and no padding is left behind."""
    V = 30
    skip = skip_table(V, 4, 0.6)

    def f(p, x):
        outs, pre = [], []
        for v in range(V):
            s = x if v == 0 else outs[v - 1]
            if skip[v] is not None:
                s = s + pre[skip[v]]
            z = p[v * H : (v + 1) * H] * s
            pre.append(z)
            outs.append(np.tanh(z))
        return np.sum(outs[-1])

    p, x = RNG.normal(size=V * H), RNG.normal(size=H)
    g = tracing.trace(f, [p, x], [0, 1])
    r, stats = rr.reroll(g)
    assert stats["history"] == 0
    np.testing.assert_allclose(interpret.evaluate(r, [p, x])[0], interpret.evaluate(g, [p, x])[0])
    assert not any(n.op == Op.CONST and n.shape and str(n.attrs[0]) == "-0.0" for n in r.nodes)
