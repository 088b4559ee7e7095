"""Loops that append to a list (:mod:`tapejit.frontend.convert.appends`): the appended values
are a loop output stacked over the iterations and ``L[-1]`` a carry, so the body is traced once
whatever the trip count. Gradients against central differences (h = 1e-6; these smooth
recurrences agree to ~1e-7 relative, tolerance 1e-6) and against the same code run as written
(the list aliased, appends in a branch: tolerance 1e-12); errors as Python raises them."""

from __future__ import annotations

import numpy as np
import pytest

import tapejit as tj

from oracles import central

RNG = np.random.default_rng(20261207)


def test_a_trajectory_of_arrays_is_one_loop_and_np_stack_reads_its_output():
    def energy(x, T=300):
        traj = []
        y = x
        for t in range(T):
            y = y + 0.01 * np.tanh(y[::-1] - 0.5 * y)
            traj.append(y)
        path = np.stack(traj)  # (T, n)
        return np.sum(path[:, 0] ** 2) + np.sum(path * 0.1)

    x = RNG.normal(size=6)
    g = tj.compile(energy, x)
    assert g.stats["convert"]["loops"] == 1 and not g.stats["convert"]["kept"]
    assert g.stats["reroll"]["iterations"] == 0  # nothing traced per iteration
    np.testing.assert_allclose(g(x), central(energy, x), rtol=1e-6, atol=1e-8)


def test_the_last_element_is_a_carry():
    def f(x):
        outs = [x[0]]
        for v in range(1, 40):
            outs.append(np.sin(outs[-1]) * 0.9 + x[v % x.shape[0]])
        return outs[-1] * 2.0 + sum(outs) + sum(outs[5:], 1.5) * 0.5

    x = RNG.normal(size=7)
    g = tj.compile(f, x)
    assert g.stats["convert"]["loops"] == 1 and not g.stats["convert"]["kept"]
    assert g.stats["reroll"]["iterations"] == 0  # sum(outs): one reduction, not 40 additions
    np.testing.assert_allclose(g(x), central(f, x), rtol=1e-6, atol=1e-8)


def test_scalar_appends_with_np_array_and_two_lists():
    def f(x):
        es, ks = [], []
        y = x * 1.0
        for t in range(25):
            y = y - 0.05 * (y**3 - y)
            es.append(np.sum(y**2))
            ks.append(np.mean(y))
        return np.sum(np.array(es) * np.arange(25.0)) + np.dot(ks, ks)

    x = RNG.uniform(-1, 1, 5)
    g = tj.compile(f, x)
    assert g.stats["convert"]["loops"] == 1
    np.testing.assert_allclose(g(x), central(f, x), rtol=1e-6, atol=1e-8)


def test_lists_other_code_can_see_run_as_written():
    def aliased(x):
        hist = [x[0]]
        seen = hist  # another name for the list: the loop runs as written
        for i in range(12):
            hist.append(np.cos(seen[-1]) + x[i % 4])
        return sum(hist)

    def in_a_branch(x):
        kept = []
        for i in range(12):
            if i % 3 == 0:  # a data-independent number of appends, but not one per iteration
                kept.append(x[i % 4] ** 2)
        return sum(kept)

    def passed_on(x):
        out = []
        for i in range(12):
            out.append(x[i % 4] * i)
            _ = len(out)  # the body reads the list as a whole
        return sum(out)

    x = RNG.normal(size=4)
    for fn in (aliased, in_a_branch, passed_on):
        g = tj.compile(fn, x)
        np.testing.assert_allclose(g(x), central(fn, x), rtol=1e-6, atol=1e-8)


def test_sum_keeps_python_semantics_elsewhere():
    def f(x):
        parts = [x[0] * 2.0, np.ones(3) * x[1], x[2]]  # broadcasting additions
        total = sum(parts, 1.0)
        return np.sum(total) + sum([1, 2, 3]) + sum(x[k] for k in range(3))

    x = RNG.normal(size=4)
    np.testing.assert_allclose(tj.compile(f, x)(x), central(f, x), rtol=1e-6, atol=1e-8)


def test_an_empty_list_read_before_its_first_append_raises_as_python_does():
    def f(x):
        outs = []
        for i in range(10):
            outs.append(outs[-1] * x[0])
        return outs[-1]

    with pytest.raises(IndexError, match="list index out of range"):
        tj.compile(f, np.ones(3))


def test_appends_of_a_short_loop_and_of_a_loop_over_rows():
    tab = RNG.integers(0, 5, size=(9, 2))

    def f(x):
        few = [x[0]]
        for i in range(3):  # run as written (fewer than 8 iterations)
            few.append(few[-1] * x[1])
        pairs = []
        for a, b in tab:
            pairs.append(x[a] * x[b])
        return sum(few) + np.sum(np.array(pairs) ** 2)

    x = RNG.normal(size=5)
    g = tj.compile(f, x)
    np.testing.assert_allclose(g(x), central(f, x), rtol=1e-6, atol=1e-8)
