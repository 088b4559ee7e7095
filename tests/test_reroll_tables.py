"""Re-rolled loops that read and add through tables of positions (tapejit/passes/reroll/match.py
``_tabled``, tapejit/passes/reroll/driver.py ``_read_sequence``): element loops over a numpy index
table — gathers ``x[idx[e]]``, element assembly by connectivity ``f[conn[e, 0]] -= t`` — as one
loop reading rows with ``take`` and adding with ``add_at``. Against the unrolled trace (the
interpreter: values, gradients), compiled against central differences, and the compiled code
flat in the element count."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tapejit as tj
from tapejit.ad import autodiff
from tapejit.core import interpret
from tapejit.frontend.loops import loop_source
from tapejit.frontend import tracing
from tapejit.core.ops import Op
from tapejit.passes.reroll import driver as rr

RNG = np.random.default_rng(33)


@pytest.fixture(autouse=True, params=[True, False], ids=["sums", "loops"])
def unrolled_tracing(request, monkeypatch):
    """The pass on, loops traced unrolled, sums as reductions and as sequential loops."""
    monkeypatch.setattr(rr, "ENABLED", True)
    monkeypatch.setattr(loop_source, "ENABLED", False)
    monkeypatch.setattr(rr, "REDUCE", request.param)
    return request.param


def check(f, x, rtol=1e-12):
    """The re-rolled trace against the unrolled one, the compiled gradient against central
    differences; returns the pass's statistics and the re-rolled graph."""
    g = tracing.trace(f, [x], [0])
    r, stats = rr.reroll(g)
    want, got = interpret.evaluate(g, [x]), interpret.evaluate(r, [x])
    np.testing.assert_allclose(got[0], want[0], rtol=rtol, atol=1e-13)
    gw = interpret.evaluate(autodiff.vjp_graph(g, None), [x])
    gg = interpret.evaluate(autodiff.vjp_graph(r, None), [x])
    np.testing.assert_allclose(gg[1], gw[1], rtol=rtol, atol=1e-12)
    grad = tj.compile(f, x, cache=False)
    val, gx = grad.value_and_grad(x)
    np.testing.assert_allclose(val, want[0], rtol=rtol, atol=1e-13)
    np.testing.assert_allclose(gx, gw[1], rtol=1e-10, atol=1e-12)
    d = RNG.normal(size=x.shape)
    fd = (f(x + 1e-6 * d) - f(x - 1e-6 * d)) / 2e-6
    np.testing.assert_allclose(np.sum(gx * d), fd, rtol=1e-6, atol=1e-8)
    return stats, r


def takes(g) -> int:
    return sum(n.op == Op.TAKE for n in g.nodes)


def test_a_gather_through_an_index_table():
    n = 200
    idx = RNG.integers(0, n, n)  # repeats: their cotangents add up

    def f(x):
        e = 0.0
        for k in range(n):
            e = e + np.sin(x[idx[k]]) * x[k]
        return e

    stats, r = check(f, RNG.random(n))
    assert stats["iterations"] >= n - 2 and stats["loops"] <= 2
    assert takes(r) >= 1


def test_element_assembly_by_connectivity(unrolled_tracing):
    n, m = 60, 150
    conn = RNG.integers(0, n, (m, 2))

    def springs(x):
        f = np.zeros_like(x)
        for e in range(m):
            a, b = conn[e]
            t = np.tanh(x[b] - x[a])
            f[a] -= t  # adds at rows from a table: add_at, in element order
            f[b] += t
        return np.sum(f * f)

    stats, r = check(springs, RNG.random(n))
    if unrolled_tracing:  # sums reassociated (REDUCE): each element's adds in another order
        assert stats["iterations"] == m and stats["loops"] == 1
        assert sum(nd.op == Op.ADD_AT for nd in r.nodes) == 2
    else:  # two adds an iteration into one array: in order only unrolled
        assert stats["loops"] == 0


def test_rows_of_a_two_dimensional_array(unrolled_tracing):
    n, m = 40, 120
    nbr = RNG.integers(0, n, (m, 2))

    def bonds(p):  # a bond list: rows from two tables, three columns each
        e = 0.0
        for k in range(m):
            i, j = nbr[k]
            dx = p[j, 0] - p[i, 0]
            dy = p[j, 1] - p[i, 1]
            dz = p[j, 2] - p[i, 2]
            e = e + (np.sqrt(dx * dx + dy * dy + dz * dz + 0.5) - 1.0) ** 2
        return e

    stats, _ = check(bonds, RNG.random((n, 3)))
    assert stats["iterations"] >= m - 2

    def forces(p):  # assembled into a 2-D array, one column per write
        f = np.zeros_like(p)
        for k in range(m):
            i, j = nbr[k]
            t = np.sin(p[j, 0] - p[i, 1])
            f[i, 0] += t
            f[j, 1] -= t
        return np.sum(f**2)

    stats, _ = check(forces, RNG.random((n, 3)))
    assert stats["loops"] == (1 if unrolled_tracing else 0)


def test_one_add_an_iteration_through_a_table_keeps_its_order():
    """``f[idx[k]] += v``: one add_at, each element's adds in the unrolled order, with sums
    as reductions or not."""
    n = 30
    idx = RNG.integers(0, n, 90)

    def f(x):
        y = np.zeros_like(x)
        for k in range(len(idx)):
            y[idx[k]] += np.cos(x[k % n] * 3.0)
        return np.sum(y * y)

    stats, r = check(f, RNG.random(n))
    assert sum(nd.op == Op.ADD_AT for nd in r.nodes) >= 1


def test_a_sequential_loop_reading_a_table():
    n = 64
    order = RNG.permutation(n)

    def f(x):
        h = 0.0
        for k in range(n):
            h = np.tanh(0.7 * h + x[order[k]])  # a carry: the order of the reads matters
        return h

    stats, _ = check(f, RNG.random(n))
    assert stats["iterations"] >= n - 2


def test_writes_that_overwrite_through_a_table_stay_unrolled():
    """``y[idx[k]] = v`` (not +=): a repeated position would make the order matter."""
    n = 40
    idx = RNG.integers(0, n, 3 * n)

    def f(x):
        y = np.zeros_like(x)
        for k in range(len(idx)):
            y[idx[k]] = x[k % n] * 2.0
        return np.sum(y * x)

    stats, r = check(f, RNG.random(n))
    assert not any(nd.op == Op.ADD_AT for nd in r.nodes)


def test_compiled_code_flat_in_the_element_count(unrolled_tracing):
    if not unrolled_tracing:
        pytest.skip("two adds an iteration re-roll with sums as reductions only")
    lines = []
    for m in (100, 1000):
        conn = RNG.integers(0, 50, (m, 2))

        def springs(x, conn=conn):
            f = np.zeros_like(x)
            for e in range(len(conn)):
                a, b = conn[e]
                t = np.tanh(x[b] - x[a])
                f[a] -= t
                f[b] += t
            return np.sum(f * f)

        x = RNG.random(50)
        grad = tj.compile(springs, x, cache=False)
        # the kernels and entries; not the fast-path trampolines, which serve more
        # concurrent calls once a call has enough work to release the GIL (a runtime policy)
        parts = grad.ir("llvm").split("\ndefine ")
        kept = [p for p in parts if not re.match(r'\S+ @"[^"]*_fast(_vg)?"', p)]
        lines.append(sum(len(p.splitlines()) for p in kept))
    assert lines[0] == lines[1], lines
