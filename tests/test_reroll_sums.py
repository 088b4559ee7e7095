"""Sums whose iterations take different branches, re-rolled by grouping their terms by shape
(tapejit/passes/reroll/sums.py): relu of mixed signs, a pair potential with a cutoff, a
two-branch constitutive law — against the unrolled trace (interpreter), compiled against
numpy or central differences, their guards still checking every branch; and sums that must
not be grouped."""

from __future__ import annotations

import numpy as np
import pytest

import tapejit as tj
from tapejit.ad import autodiff
from tapejit.core import interpret
from tapejit.frontend.loops import loop_source
from tapejit.frontend import tracing
from tapejit.core.ops import Op
from tapejit.passes.reroll import driver as rr
from tapejit.passes.reroll import sums as rs
from tapejit.passes.reroll.chains import _chains

RNG = np.random.default_rng(44)


@pytest.fixture(autouse=True)
def unrolled_tracing(monkeypatch):
    monkeypatch.setattr(rr, "ENABLED", True)
    monkeypatch.setattr(rr, "REDUCE", True)
    monkeypatch.setattr(loop_source, "ENABLED", False)


def check(f, x):
    g = tracing.trace(f, [x], [0])
    r, stats = rr.reroll(g)
    want, got = interpret.evaluate(g, [x]), interpret.evaluate(r, [x])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-13)
    gw = interpret.evaluate(autodiff.vjp_graph(g, None), [x])
    gg = interpret.evaluate(autodiff.vjp_graph(r, None), [x])
    np.testing.assert_allclose(gg[1], gw[1], rtol=1e-12, atol=1e-13)
    grad = tj.compile(f, x, cache=False)
    val, gx = grad.value_and_grad(x)
    np.testing.assert_allclose(val, want[0], rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(gx, gw[1], rtol=1e-10, atol=1e-12)
    return stats, r, grad


def relu_sq(x):
    e = 0.0
    for i in range(len(x)):
        e = e + max(x[i], 0.0) ** 2
    return e


def test_relu_of_mixed_signs_is_one_sum():
    x = RNG.uniform(-1, 1, 200)
    stats, r, grad = check(relu_sq, x)
    assert stats["guards"] == 200 and stats["loops"] >= 1
    assert len(r.guards) == 1
    assert sum(n.op == Op.INDEX and n.shape == () for n in r.nodes) < 10  # no element reads left
    np.testing.assert_allclose(grad(x), 2 * np.maximum(x, 0.0), rtol=1e-15)
    y = x.copy()
    k = int(np.flatnonzero(x > 0)[5])
    y[k] = -y[k]  # that element's branch flips: its guard fails, a new variant is right
    np.testing.assert_allclose(grad(y), 2 * np.maximum(y, 0.0), rtol=1e-15)


def cut_pairs(pos):
    n = pos.shape[0]
    e = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            dx = pos[j, 0] - pos[i, 0]
            dy = pos[j, 1] - pos[i, 1]
            r2 = dx * dx + dy * dy
            if r2 < 0.5:  # a cutoff: which pairs add depends on the positions
                e = e + (r2 - 0.5) ** 2 / (r2 + 0.1)
    return e


def cut_pairs_grad(pos):
    d = pos[None, :, :] - pos[:, None, :]  # d[i, j] = x_j - x_i
    r2 = np.sum(d * d, axis=-1)
    inside = (r2 < 0.5) & np.triu(np.ones(r2.shape, dtype=bool), 1)
    de = np.where(inside, 2 * (r2 - 0.5) / (r2 + 0.1) - (r2 - 0.5) ** 2 / (r2 + 0.1) ** 2, 0.0)
    w = de + de.T
    return 2 * np.einsum("ij,ijk->jk", w, d)


def test_pair_loop_with_a_cutoff_is_one_sum():
    pos = RNG.uniform(0, 2.5, (30, 2))
    stats, r, grad = check(cut_pairs, pos)
    assert stats["guards"] == 30 * 29 // 2 and stats["loops"] >= 1
    assert len(r.guards) == 1
    np.testing.assert_allclose(grad(pos), cut_pairs_grad(pos), rtol=1e-12, atol=1e-13)
    moved = pos + RNG.normal(0, 0.3, pos.shape)  # other pairs inside: guards fail, recompiled
    np.testing.assert_allclose(grad(moved), cut_pairs_grad(moved), rtol=1e-12, atol=1e-13)


def test_two_branch_law_of_mixed_elements():
    lo = RNG.uniform(0.2, 0.4, 120)  # a yield strain per element, from a numpy table

    def law(strain):
        e = 0.0
        for k in range(len(strain)):
            if strain[k] < lo[k]:  # elastic
                e = e + 0.5 * strain[k] ** 2
            else:  # plastic
                e = e + lo[k] * (strain[k] - 0.5 * lo[k])
        return e

    x = RNG.uniform(0, 0.6, 120)
    stats, r, grad = check(law, x)
    assert stats["guards"] == 120 and stats["iterations"] >= 100
    np.testing.assert_allclose(grad(x), np.where(x < lo, x, lo), rtol=1e-15)
    d = RNG.normal(size=120)
    fd = (law(x + 1e-7 * d) - law(x - 1e-7 * d)) / 2e-7
    np.testing.assert_allclose(np.sum(grad(x) * d), fd, rtol=1e-6)


def test_sums_that_are_not_grouped():
    x = RNG.uniform(-1, 1, 60)

    def reads_the_sum(x):  # a term reads the running sum: the order of additions matters
        e = 0.0
        for i in range(len(x)):
            if x[i] > 0:
                e = e + x[i] * 0.5
            else:
                e = e + np.sin(e) * x[i]
        return e

    check(reads_the_sum, x)  # grouped, the values would differ far beyond rounding
    g = tracing.trace(reads_the_sum, [x], [0])
    users: dict[int, int] = {}
    for n in g.nodes:
        for a in n.args:
            users[id(a)] = users.get(id(a), 0) + 1
    whole = max(_chains(g.nodes), key=len)
    assert rs.terms_of(whole, users) is None or rs.partition_sum(whole, users, None) is None

    def partial_sums_kept(x):  # the running sums are stored: each one is read
        e = 0.0
        out = []
        for i in range(len(x)):
            e = e + max(x[i], 0.0)
            out.append(e)
        return np.sum(np.array(out) ** 2)

    stats, r, _ = check(partial_sums_kept, x)
    assert stats["loops"] == 0  # every partial sum is an output: nothing to group


def test_filling_an_array_by_branches():
    """Writes y[e] = ... whose update depends on a branch: grouped by shape, each group written
    at a table of its (distinct) positions with put — the same array, bit for bit."""
    n = 150
    yld = RNG.uniform(0.2, 0.4, n)

    def law(strain):
        stress = strain.copy()  # not zeros: the elements no write reaches keep their values
        for e in range(5, n):
            if strain[e] < yld[e]:
                stress[e] = 200.0 * strain[e]
            else:
                stress[e] = 200.0 * yld[e] + 10.0 * (strain[e] - yld[e])
        return np.sum(stress * np.cos(strain))

    x = RNG.uniform(0, 0.6, n)
    stats, r, grad = check(law, x)
    assert stats["guards"] == n - 5 and stats["iterations"] >= n - 6
    assert sum(nd.op == Op.PUT for nd in r.nodes) == 2
    g = tracing.trace(law, [x], [0])
    exact = interpret.evaluate(g, [x])[0]
    assert interpret.evaluate(r, [x])[0] == exact  # the same array: the same sum, bit for bit

    def rows(p):  # a 2-D array, one column written per element
        out = np.zeros_like(p)
        for e in range(len(p)):
            if p[e, 0] > 0.5:
                out[e, 1] = p[e, 0] * p[e, 1]
            else:
                out[e, 1] = -p[e, 1]
        return np.sum(out**2)

    stats, r, _ = check(rows, RNG.uniform(0, 1, (80, 2)))
    assert stats["iterations"] >= 79


def test_additions_by_branches_at_repeated_positions():
    conn = RNG.integers(0, 30, (200, 2))

    def assemble(x):
        f = np.zeros_like(x)
        for e in range(len(conn)):
            a, b = conn[e]
            d = x[b] - x[a]
            if d > 0:
                f[a] += d * d
            else:
                f[a] += 0.5 * d
        return np.sum(f * f)

    stats, r, _ = check(assemble, RNG.uniform(0, 1, 30))
    assert sum(nd.op == Op.ADD_AT for nd in r.nodes) >= 1


def test_writes_that_read_the_array_are_not_grouped():
    def smooth(x):
        y = x.copy()
        for i in range(1, len(x)):
            if x[i] > 0.5:
                y[i] = 0.5 * y[i - 1] + x[i]  # reads what an earlier write stored
            else:
                y[i] = y[i - 1] - x[i]
        return np.sum(y * y)

    stats, r, _ = check(smooth, RNG.uniform(0, 1, 60))
    assert not any(nd.op == Op.PUT for nd in r.nodes)
