"""Loops and branches converted from the source (:mod:`tapejit.frontend.convert`): gradients
against central differences and numpy references on random inputs, branches that never
recompile as the data move, masked adjoints of untaken branches, tables with repeated and
out-of-range indices, nests, and the loops that must still run as written.

Tolerances: central differences with h = 1e-6 agree to ~1e-8 relative on these smooth
models; the numpy references (same formula, other summation order) to 1e-12."""

from __future__ import annotations

import numpy as np
import pytest

import tapejit as tj
from tapejit.frontend.tracing import trace
from tapejit.core.ops import Op
from tapejit.frontend.convert import loops as cv_loops
from tapejit.frontend.convert import runtime as cv

from oracles import central

RNG = np.random.default_rng(20261128)


def _converted():
    return dict(cv._log.converted)


def _springs_table(n, S):
    conn = RNG.integers(0, n, size=(S, 2))
    conn[:, 1] = (conn[:, 0] + 1 + RNG.integers(0, n - 1, S)) % n  # no zero-length spring
    return conn, RNG.uniform(0.5, 1.5, S)


def test_table_loop_is_one_loop_and_right():
    n, S = 30, 200
    x0 = RNG.normal(size=(n, 2))
    conn, L = _springs_table(n, S)

    def energy(x):
        e = 0.0
        for s in range(conn.shape[0]):
            a = conn[s, 0]
            b = conn[s, 1]
            dx = x[a, 0] - x[b, 0]
            dy = x[a, 1] - x[b, 1]
            r = np.sqrt(dx * dx + dy * dy)
            e += 0.5 * (r - L[s]) ** 2
        return e

    before = _converted()["loops"]
    g = tj.compile(energy, x0)
    assert _converted()["loops"] > before
    d = x0[conn[:, 0]] - x0[conn[:, 1]]
    r = np.sqrt((d * d).sum(1))
    c = ((r - L) / r)[:, None] * d
    ref = np.zeros_like(x0)
    np.add.at(ref, conn[:, 0], c)
    np.add.at(ref, conn[:, 1], -c)
    np.testing.assert_allclose(g(x0), ref, rtol=1e-12, atol=1e-12)


def test_trace_size_does_not_grow_with_the_table():
    sizes = []
    for S in (50, 5000):
        conn, L = _springs_table(40, S)

        def energy(x, conn=conn, L=L):
            e = 0.0
            for s in range(len(conn)):
                i, j = conn[s]
                e += (x[i] - x[j] - L[s]) ** 2
            return e

        sizes.append(len(trace(energy, [np.zeros(40)], [0]).nodes))
    assert sizes[0] == sizes[1]


def test_scatter_add_into_zeros_with_repeated_indices():
    n = 12
    idx = np.array([0, 3, 3, 3, 5, 11, 0, 7, 7, 2, 3, 9])
    w = RNG.uniform(1, 2, idx.size)

    def f(x):
        F = np.zeros(n)
        for k in range(idx.size):
            F[idx[k]] += w[k] * x[k] ** 2
        return np.sum(F * F)

    x0 = RNG.normal(size=idx.size)
    g = tj.compile(f, x0)
    F = np.zeros(n)
    np.add.at(F, idx, w * x0**2)
    np.testing.assert_allclose(g(x0), 2 * F[idx] * w * 2 * x0, rtol=1e-13)


def test_out_of_range_table_entry_raises_index_error():
    bad = np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 40])

    def f(x):
        e = 0.0
        for k in range(bad.size):
            e += x[bad[k]] ** 2
        return e

    with pytest.raises(IndexError):
        g = tj.compile(f, np.ones(10))
        g(np.ones(10))


def test_cutoff_branch_compiles_once_while_atoms_move():
    N, rc2 = 10, 1.6**2

    def lj(x):
        e = 0.0
        for i in range(N):
            for j in range(i + 1, N):
                dx = x[3 * i] - x[3 * j]
                dy = x[3 * i + 1] - x[3 * j + 1]
                dz = x[3 * i + 2] - x[3 * j + 2]
                r2 = dx * dx + dy * dy + dz * dz
                if r2 < rc2:
                    s6 = 1.0 / r2**3
                    e += 4.0 * (s6 * s6 - s6) - 4.0 * (1 / rc2**6 - 1 / rc2**3)
        return e

    def reference(x):
        p = x.reshape(N, 3)
        d = p[:, None, :] - p[None, :, :]
        r2 = (d * d).sum(-1) + np.eye(N)
        inside = (r2 < rc2) & ~np.eye(N, dtype=bool)
        dr2 = np.where(inside, 4.0 * (-6.0 / r2**7 + 3.0 / r2**4), 0.0)
        return (2 * dr2[:, :, None] * d).sum(1).ravel()

    grid = np.stack(np.meshgrid(*[np.arange(3.0)] * 3), -1).reshape(-1, 3)[:N] * 1.1
    x = grid.ravel() + RNG.normal(scale=0.02, size=3 * N)
    g = tj.compile(lj, x)
    def pattern(x):
        p = x.reshape(N, 3)
        return ((p[:, None] - p[None]) ** 2).sum(-1) < rc2

    flips = 0
    for _ in range(30):
        np.testing.assert_allclose(g(x), reference(x), rtol=1e-11, atol=1e-11)
        new = x + RNG.normal(scale=0.03, size=x.size)
        flips += int((pattern(new) != pattern(x)).sum())
        x = new
    assert flips > 0  # pairs crossed the cutoff: the branch pattern changed
    assert g._dispatcher.compiles == 1


def test_untaken_branch_with_inf_and_nan_contributes_zero():
    def f(x):
        s = 0.0
        for i in range(x.size):
            if x[i] > 0:
                y = np.log(x[i]) + np.sqrt(x[i])
            else:
                y = 2.0 * x[i]
            s += y
        return s

    x0 = np.array([1.5, 0.0, -2.0, 3.0, -0.0, 0.25, -1.0, 2.0, 0.0, 4.0])
    g = tj.compile(f, x0)
    got = g(x0)
    pos = np.where(x0 > 0, x0, 1.0)
    ref = np.where(x0 > 0, 1 / pos + 0.5 / np.sqrt(pos), 2.0)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, ref, rtol=1e-14)


def test_branch_in_straight_line_code_is_a_select():
    def f(x):
        r = np.sqrt(x[0] ** 2 + x[1] ** 2)
        if r > 1.0:
            v = np.log(r)
        elif r > 0.5:
            v = r - 1.0
        else:
            v = -0.5 + 0.0 * r
        return v * x[2]

    g = tj.compile(f, np.array([2.0, 0.0, 1.0]))
    for x in (np.array([2.0, 0.3, 1.2]), np.array([0.5, 0.4, -1.0]), np.array([0.1, 0.1, 3.0])):
        np.testing.assert_allclose(g(x), central(f, x), rtol=1e-7, atol=1e-9)
    assert g._dispatcher.compiles == 1


def test_time_loop_around_element_loops():
    n, T, dt, k = 10, 40, 0.05, 3.0

    def chain(state):
        x = state[:n].copy()
        v = state[n:].copy()
        for t in range(T):
            f = np.zeros(n)
            for i in range(n - 1):
                s = k * (x[i + 1] - x[i] - 1.0)
                f[i] += s
                f[i + 1] -= s
            for i in range(n):
                v[i] = v[i] + dt * f[i]
                x[i] = x[i] + dt * v[i]
        return np.sum(x * x) + 0.1 * np.sum(v * v)

    s0 = np.concatenate([np.arange(n) * 1.1, RNG.normal(scale=0.1, size=n)])
    before = _converted()["loops"]
    g = tj.compile(chain, s0)
    assert _converted()["loops"] >= before + 3
    np.testing.assert_allclose(g(s0), central(chain, s0), rtol=1e-6, atol=1e-6)


def test_continue_and_compound_conditions():
    def f(x):
        e = 0.0
        for i in range(x.size):
            if x[i] < -1.0 or x[i] > 2.0:
                continue
            w = 2.0 if 0.0 < x[i] < 1.0 else 0.5
            e += w * x[i] ** 2
        return e

    x0 = np.array([-3.0, -0.5, 0.2, 0.7, 1.5, 2.5, -1.5, 0.9, 1.9, -0.2])
    g = tj.compile(f, x0)
    ref = np.where((x0 < -1) | (x0 > 2), 0.0, 2 * np.where((x0 > 0) & (x0 < 1), 2.0, 0.5) * x0)
    np.testing.assert_allclose(g(x0), ref, rtol=1e-14)


def test_enumerate_zip_and_rows():
    tri = RNG.integers(0, 9, size=(16, 3))
    w = RNG.uniform(size=16)

    def f(x):
        e = 0.0
        for t, (i, j, k) in enumerate(tri):
            e += w[t] * (x[i] * x[j] - x[k]) ** 2
        for row, wt in zip(tri, w):
            e += wt * x[row[0]] ** 3
        return e

    x0 = RNG.normal(size=9)
    g = tj.compile(f, x0)
    np.testing.assert_allclose(g(x0), central(f, x0), rtol=1e-7, atol=1e-8)


def test_loops_over_python_values_run_as_written():
    def f(x):
        pairs = []
        for i in range(len(x)):
            for j in range(i + 1, len(x)):
                pairs.append((i, j))
        e = 0.0
        for i, j in pairs:
            e += (x[i] - x[j]) ** 2
        return e

    x0 = RNG.normal(size=9)
    g = tj.compile(f, x0)
    np.testing.assert_allclose(g(x0), central(f, x0), rtol=1e-7, atol=1e-8)
    assert any("list" in why for _, why in cv.fallbacks())


def test_nest_of_depth_three_with_traced_inner_bounds():
    def f(x):
        e = 0.0
        for a in range(3):
            for i in range(x.size):
                for j in range(i + 1, x.size):
                    e += (a + 1.0) * np.cos(x[i] - x[j])
        return e

    x0 = RNG.normal(size=10)
    g = tj.compile(f, x0)
    np.testing.assert_allclose(g(x0), central(f, x0), rtol=1e-7, atol=1e-8)


def test_helper_called_in_a_converted_body():
    def pair(r2):
        return 1.0 / r2**6 - 1.0 / r2**3

    def f(x):
        e = 0.0
        for i in range(x.size - 1):
            e += pair(1.0 + (x[i + 1] - x[i]) ** 2)
        return e

    x0 = RNG.normal(size=12)
    g = tj.compile(f, x0)
    np.testing.assert_allclose(g(x0), central(f, x0), rtol=1e-6, atol=1e-8)


# -- vectorised loops against the loop they replace, and against the loop as written ----------


def _graphs(f, *xs, monkeypatch):
    """``f`` traced converted and vectorised, converted as a loop, and as written."""
    from tapejit.frontend.loops import loop_source

    out = {}
    for name, vec, conv in (("vector", True, True), ("loop", False, True), ("python", True, False)):
        monkeypatch.setattr(cv_loops, "VECTORISE", vec)
        monkeypatch.setattr(loop_source, "CONVERT", conv)
        loop_source._rewritten_code.cache_clear()
        out[name] = trace(f, list(xs), list(range(len(xs))))
    loop_source._rewritten_code.cache_clear()
    return out


def _ops(g):
    return {n.op for n in g.nodes}


def _agree(graphs, xs, rtol=1e-11):
    from tapejit.ad import autodiff
    from tapejit.core import interpret

    ref = interpret.evaluate(autodiff.vjp_graph(graphs["python"], None), list(xs))
    for name in ("vector", "loop"):
        got = interpret.evaluate(autodiff.vjp_graph(graphs[name], None), list(xs))
        for a, b in zip(got, ref):
            np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol, err_msg=name)


def _bonds(x, conn, k0):
    e = 0.0
    F = np.zeros_like(x)  # (np.zeros(len(x)) too, but not in the trace as written)
    for s in range(conn.shape[0]):
        a, b = conn[s]
        d = x[a] - x[b]
        e += k0[s] * d * d
        F[a] -= 2 * k0[s] * d
        F[b] += 2 * k0[s] * d
    return e + 0.01 * np.sum(F * F)


def _rows(x, m):
    e = 0.0
    for i in range(len(x)):
        v = m @ x[i]
        if v[0] > 0:
            e += np.sum(np.tanh(v) * x[i, :2])
        else:
            e -= v[1] ** 2
    return e


def _shared_row_dot(pos, w):
    e = 0.0
    for i in range(len(pos) - 1):
        d = pos[i + 1] - pos[i]
        e += np.exp(-np.dot(d, d)) * np.dot(w, d) ** 2 + np.sum(np.outer(d, w) @ d)
    return e


def test_vectorised_bonds_and_forces(monkeypatch):
    conn = RNG.integers(0, 20, size=(60, 2))
    k0 = RNG.uniform(1, 2, 60)
    x = RNG.normal(size=20)
    gs = _graphs(lambda x: _bonds(x, conn, k0), x, monkeypatch=monkeypatch)
    assert Op.LOOP not in _ops(gs["vector"]) and Op.LOOP in _ops(gs["loop"])
    _agree(gs, [x])


def test_vectorised_rows_with_a_branch_and_a_shared_matrix(monkeypatch):
    x, m = RNG.normal(size=(40, 3)), RNG.normal(size=(2, 3))
    gs = _graphs(_rows, x, m, monkeypatch=monkeypatch)
    assert Op.LOOP not in _ops(gs["vector"])
    _agree(gs, [x, m])


def test_vectorised_products_of_the_iteration_s_vectors(monkeypatch):
    pos, w = RNG.normal(size=(30, 3)), RNG.normal(size=3)
    gs = _graphs(_shared_row_dot, pos, w, monkeypatch=monkeypatch)
    assert Op.LOOP not in _ops(gs["vector"])
    _agree(gs, [pos, w])


def test_a_recurrence_stays_a_loop(monkeypatch):
    def f(x):
        h = 0.0
        for i in range(len(x)):
            h = np.tanh(0.5 * h + x[i])
        return h

    x = RNG.normal(size=30)
    gs = _graphs(f, x, monkeypatch=monkeypatch)
    assert Op.LOOP in _ops(gs["vector"])
    _agree(gs, [x])


def test_an_array_carry_is_updated_in_place_in_the_loop(monkeypatch):
    """A loop (not vectorised) whose body scatters into an array carry: the plan keeps one
    buffer for it (``Program.donated``), so the work per iteration does not grow with n."""
    from tapejit.passes import memplan, pipeline

    monkeypatch.setattr(cv_loops, "VECTORISE", False)

    def f(x, conn=RNG.integers(0, 500, size=(50, 2))):
        F = np.zeros(500)
        for s in range(len(conn)):
            F[conn[s, 0]] += x[s] ** 2
        return np.sum(F * F)

    g = trace(f, [RNG.normal(size=50)], [0])
    loop = next(n for n in g.nodes if n.op == Op.LOOP)
    body = memplan.plan(pipeline.optimise(loop.attrs[0].body)[0], {1: 0})
    assert body.donated == (0,)
    writes = [n for k in body.kernels for n in (*k.pre, k.op) if n is not None and n.op == Op.PUT]
    assert writes and all(memplan._in_place(body, n) for n in writes)  # no copy of the carry


def test_a_body_with_side_effects_runs_as_written():
    log = []

    def noisy(v):
        log.append(v)
        return v * v

    def f(x):
        s = 0.0
        for i in range(len(x)):
            s += noisy(x[i])
        return s

    x = RNG.normal(size=10)
    g = tj.compile(f, x)
    assert len(log) == 10
    np.testing.assert_allclose(g(x), 2 * x, rtol=1e-14)
    assert any("append" in why for _, why in cv.fallbacks())


def test_masked_batching_of_a_triangular_inner_loop(monkeypatch):
    """An inner loop over ``range(i + 1, n)`` batched over its longest trip (``DYNAMIC``):
    the rows past the count read clamped positions where the pair term is inf (r2 = 0), and
    contribute exactly nothing, to the value or to the gradient."""
    from tapejit.passes import vectorise

    monkeypatch.setattr(vectorise, "DYNAMIC", True)

    def f(x):
        e = 0.0
        for i in range(x.size):
            for j in range(i + 1, x.size):
                r2 = (x[j] - x[i]) ** 2
                e += 1.0 / (r2 * r2 * r2) - 1.0 / r2
        return e

    x = np.arange(12.0) * 1.1 + RNG.normal(scale=0.05, size=12)
    gs = _graphs(f, x, monkeypatch=monkeypatch)
    assert Op.LOOP not in _ops(gs["vector"])  # both loops batched (rows of 11 at most)
    _agree(gs, [x], rtol=1e-10)


def test_an_array_written_in_place_and_reachable_otherwise_is_not_rebound():
    """A converted loop or branch writes into a traced array in place (its other names see the
    writes, as in Python); a numpy array written in place that has another name runs as
    written (numpy's own rules: storing a traced value into it is an error)."""
    idx = np.array([0, 3, 3, 5, 1, 2, 7, 7, 4, 6])

    def alias(x):
        F = np.zeros_like(x)
        G = F
        for k in range(idx.size):
            F[idx[k]] += x[k] ** 2
        if x[0] > -1.0:
            F[1] += 1.0
        return np.sum(G * G)

    def own(x):
        F = np.zeros_like(x)
        for k in range(idx.size):
            F[idx[k]] += x[k] ** 2
        if x[0] > -1.0:
            F[1] += 1.0
        return np.sum(F * F)

    x = RNG.normal(size=10)
    ga, go = tj.compile(alias, x), tj.compile(own, x)
    np.testing.assert_allclose(ga(x), go(x), rtol=1e-14)
    np.testing.assert_allclose(go(x), central(own, x), rtol=1e-6, atol=1e-8)
    assert go.stats["convert"]["loops"] == 1 and go.stats["convert"]["branches"] == 1
    assert ga.stats["convert"]["loops"] == 1  # a traced array: rebound in place, G sees it

    def numpy_alias(x):
        F = np.zeros(10)
        G = F
        for k in range(idx.size):
            F[idx[k]] += x[k] ** 2
        return np.sum(G * G)

    with pytest.raises(tj.TracingError, match=r"float\(\)"):
        tj.compile(numpy_alias, x)


def test_a_branch_writing_in_place_does_not_leak_into_the_other():
    """Both branches write into the same array (a constant zeros array: its mask is the array
    itself); each must start from the array as it was (found by the fuzzer)."""

    def f(x):
        t = [0]
        F = np.zeros_like(x)
        for i in range(len(x)):
            if x[i] > 0.0:
                F[t[i]] += np.sin(x[i])
            else:
                F[t[i]] -= x[i] * 0.5
        return np.sum(F * F)

    for x0 in (np.array([-1.45]), np.array([0.7])):
        g = tj.compile(f, x0, cache=False)
        value, grad = g.value_and_grad(x0)
        assert value == pytest.approx(f(x0), rel=1e-14)
        np.testing.assert_allclose(grad, central(f, x0), rtol=1e-7)


def test_a_short_loop_writes_traced_values_into_a_new_numpy_array():
    """A loop too short to convert runs as written, and may still store traced values into a
    numpy array it fills (as a converted loop may): the array is traced from the start."""

    def f(x):
        F = np.zeros(3)
        for k in range(3):
            F[k] = x[k] * x[(k + 1) % 3]
        return np.sum(F * F)

    x = RNG.normal(size=3)
    g = tj.compile(f, x)
    np.testing.assert_allclose(g(x), central(f, x), rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("name", ["early_return_helper", "max_min", "moving_slice", "nested_def"])
def test_helpers_builtins_and_slices_in_converted_loops(name):
    """Forms physicists write in element loops: a pair helper that returns early past a
    cutoff (a select in the loop body), ``max``/``min`` of two values, flat positions read and
    written as 3-slices at a traced start, and a helper defined inside the function."""
    tab = RNG.integers(0, 6, size=(20, 2))

    def cut(r2):
        if r2 > 4.0:
            return 0.0
        return (4.0 - r2) ** 2

    def early_return_helper(x):
        e = 0.0
        for s in range(len(tab)):
            a, b = tab[s]
            d = x[3 * a : 3 * a + 3] - x[3 * b : 3 * b + 3]
            e += cut(np.dot(d, d))
        return e

    def max_min(x):
        e = 0.0
        for i in range(len(x)):
            e += max(x[i], 0.2) * min(x[i], 0.5) + abs(x[i])
        return e

    def moving_slice(x):
        F = np.zeros(len(x))
        for s in range(len(tab)):
            a, b = tab[s]
            d = x[3 * a : 3 * a + 3] - x[3 * b : 3 * b + 3]
            F[3 * a : 3 * a + 3] += d * 0.5
            F[3 * b : 3 * b + 3] -= d * 0.5
        return np.sum(F * F)

    def nested_def(x):
        def term(u, v):
            if u > v:
                return (u - v) ** 2
            return 0.1 * (v - u)

        e = 0.0
        for s in range(len(tab)):
            e += term(x[tab[s, 0]], x[tab[s, 1]])
        return e

    f = locals()[name]
    x = RNG.normal(size=18)
    g = tj.compile(f, x, cache=False)
    assert g.stats["convert"]["loops"] >= 1 and not g.stats["convert"]["kept"]
    value, grad = g.value_and_grad(x)
    assert value == pytest.approx(f(x), rel=1e-12)
    np.testing.assert_allclose(grad, central(f, x), rtol=1e-6, atol=1e-7)


def test_a_lambda_parameter_is_not_a_read_of_the_loop_variable():
    """``lambda i, c: ...`` after a loop over ``i`` binds its own ``i``: the loop is converted
    (found by the fuzzer: the lambda's ``i`` was taken for a read after the loop)."""

    def f(x):
        g = np.zeros(len(x))
        for i in range(len(x) - 1):
            g[i] += np.tanh(x[i + 1] - x[i])
        h = tj.fori_loop(0, 3, lambda i, c: c * 0.8 + i * 0.01, x)
        return np.sum(g * g) + np.sum(h)

    x = RNG.normal(size=12)
    g = tj.compile(f, x, cache=False)
    assert g.stats["convert"]["loops"] == 1 and not g.stats["convert"]["kept"]
    np.testing.assert_allclose(g(x), central(f, x), rtol=1e-6, atol=1e-8)


def test_a_function_calling_np_stack_is_converted():
    """``np.stack`` is numpy's, not ``inspect.stack`` (frame introspection keeps a function as
    written): a function using it still has its loops converted (found by the fuzzer)."""
    tab = np.array([8, 8, 0, 0, 0, 11, 2, 9, 4, 2, 1, 10])

    def f(x):
        v = np.stack([x, x]).ravel()
        F = np.zeros(len(v))
        for t in range(len(tab)):
            F[tab[t]] += np.sin(v[t % len(v)]) * 0.5
        return np.sum(F * F)

    x = RNG.normal(size=6)
    g = tj.compile(f, x, cache=False)
    assert g.stats["convert"]["loops"] == 1
    np.testing.assert_allclose(g(x), central(f, x), rtol=1e-6, atol=1e-8)


def test_a_list_comprehension_reading_the_loop_variable_is_converted():
    """``np.stack([X[conn[e, m]] for m in range(4)])``: a list comprehension runs where it
    stands, so its read of the loop variable is not a read after the loop, and its subscripts
    gather at the traced ``e`` as the statement's do; so does a generator expression that
    ``sum`` or ``tuple`` consumes at once. One that may run later (kept in a name) keeps the loop
    as written (correct, unrolled), with a note that says why."""
    conn = RNG.integers(0, 10, size=(40, 4))
    w = RNG.normal(size=4)

    def f(x):
        X = x.reshape(-1, 2)
        s = 0.0
        for e in range(len(conn)):
            P = np.stack([X[conn[e, m]] for m in range(4)])  # (4, 2)
            d = {m: X[conn[e, m]] for m in (0, 1)}
            s = s + np.sum(np.sin(P) * w[:, None]) + np.sum(d[0] * d[1])
        return s

    def g(x):
        s = 0.0
        for e in range(len(conn)):
            pair = np.stack(tuple(x[conn[e, m]] for m in (0, 1)))
            s = s + sum(x[conn[e, m]] ** 2 for m in range(4)) + np.prod(pair)
        return s

    def h(x):
        s = 0.0
        for e in range(len(conn)):
            later = (x[conn[e, m]] ** 2 for m in range(4))
            s = s + sum(later)
        return s

    x = RNG.normal(size=20)
    grad = tj.compile(f, x, cache=False)
    assert grad.stats["convert"]["loops"] == 1 and not grad.stats["convert"]["kept"]
    np.testing.assert_allclose(grad(x), central(f, x), rtol=1e-6, atol=1e-8)
    eager = tj.compile(g, x, cache=False)
    assert eager.stats["convert"]["loops"] == 1 and not eager.stats["convert"]["kept"]
    np.testing.assert_allclose(eager(x), central(g, x), rtol=1e-6, atol=1e-8)
    lazy = tj.compile(h, x, cache=False)
    (line, why), = lazy.stats["convert"]["kept"]
    assert "generator expression" in why and "list comprehension" in why
    np.testing.assert_allclose(lazy(x), central(h, x), rtol=1e-6, atol=1e-8)
