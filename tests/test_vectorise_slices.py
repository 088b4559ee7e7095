"""Element loops over a range whose writes land on consecutive rows (``f[i] += t``,
``f[i + 1] -= t``, ``xn[i] = ...``): vectorised, their positions are slices — a
``window_add`` of rows of one into ``f[0:n-1]`` (a sink of the kernel computing ``t``), a
``scatter`` into a slice, the row values themselves for a write of every row — not
tables of positions (:meth:`tapejit.passes.vectorise._Batcher.progression`). Inside a time
loop this is what its body runs each step. Checked: no ``add_at``/``put`` is left in any loop
body, and the gradient agrees with the function traced as written (the IR interpreter, rtol
1e-12: only the order of additions may differ) and with central differences (rtol 1e-6)."""

from __future__ import annotations

import numpy as np

import tapejit as tj
from tapejit.ad import autodiff
from tapejit.core import interpret
from tapejit.core.ops import Op
from tapejit.frontend.loops import loop_source
from tapejit.frontend.tracing import trace

from oracles import central

RNG = np.random.default_rng(20261207)
K, B, K0, DT = 1.0, 0.25, 0.1, 0.01


def chain(state, T=30):
    n = state.shape[0] // 2
    x = np.zeros_like(state, shape=(n,))
    v = np.zeros_like(state, shape=(n,))
    for i in range(n):
        x[i] = state[i]
        v[i] = state[n + i]
    for step in range(T):
        f = np.zeros_like(state, shape=(n,))
        for i in range(n - 1):
            s = x[i + 1] - x[i]
            t = K * s + B * s * s * s
            f[i] += t
            f[i + 1] -= t
        xn = np.zeros_like(state, shape=(n,))
        vn = np.zeros_like(state, shape=(n,))
        for i in range(n):
            xn[i] = x[i] + DT * v[i]
            vn[i] = v[i] + DT * (f[i] - K0 * x[i])
        x = xn
        v = vn
    return np.sum(x * x) + 0.5 * np.sum(v[2:7] ** 2)


def partial_rows(x):
    n = x.shape[0]
    y = np.zeros_like(x, shape=(n + 4,))
    for i in range(n - 2):
        y[i + 3] = np.sin(x[i]) * x[i + 2]  # rows 3 .. n: a slice of y
    for i in range(n - 1):
        y[i + 1] += x[i] * x[i + 1]
    return np.sum(y * np.arange(1.0, n + 5))


def _ops(graph) -> set:
    seen, todo = set(), [graph]
    while todo:
        g = todo.pop()
        for n in g.nodes:
            seen.add(n.op)
            if n.op == Op.LOOP:
                spec = n.attrs[0]
                todo.append(spec.body)
    return seen


def test_writes_to_consecutive_rows_are_slices_not_tables(monkeypatch):
    for f, x in ((chain, RNG.uniform(-1, 1, 24)), (partial_rows, RNG.normal(size=12))):
        loop_source._rewritten_code.cache_clear()
        g = trace(f, [x], [0])
        used = _ops(g)
        assert not used & {Op.ADD_AT, Op.PUT}, f.__name__
        monkeypatch.setattr(loop_source, "CONVERT", False)
        loop_source._rewritten_code.cache_clear()
        ref = trace(f, [x], [0])
        monkeypatch.setattr(loop_source, "CONVERT", True)
        loop_source._rewritten_code.cache_clear()
        got = interpret.evaluate(autodiff.vjp_graph(g, None), [x])
        want = interpret.evaluate(autodiff.vjp_graph(ref, None), [x])
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(tj.compile(f, x)(x), central(f, x), rtol=1e-6, atol=1e-8)
