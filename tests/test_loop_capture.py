"""Python loops captured while tracing (tapejit/frontend/loops/loop_source.py, tapejit/frontend/loops/loop_capture.py): the
captured trace against the unrolled one (capturing off: values and gradients by the IR
interpreter, the oracle), compiled gradients against central differences, which loops are
captured and which are traced as written, and tracing that stops growing with the trip count."""

from __future__ import annotations

import linecache

import numpy as np
import pytest

import tapejit as tj
from tapejit.ad import autodiff
from tapejit.core import interpret
from tapejit.frontend.loops import loop_capture, loop_source
from tapejit.frontend import tracing

RNG = np.random.default_rng(11)


def traced(f, *xs, capture=True):
    saved = loop_source.ENABLED
    loop_source.ENABLED = capture
    try:
        return tracing.trace(f, list(xs), list(range(len(xs))))
    finally:
        loop_source.ENABLED = saved


def against_unrolled(f, *xs, loops=None, rtol=1e-12):
    """``f`` traced with capturing and without: equal values and gradients (interpreter), and
    the compiled gradient against central differences. Returns the captured trace."""
    g = traced(f, *xs)
    u = traced(f, *xs, capture=False)
    if loops is not None:
        assert g.captured[0] == loops, g.captured
    assert u.captured == (0, 0)
    want = interpret.evaluate(u, list(xs))
    got = interpret.evaluate(g, list(xs))
    np.testing.assert_allclose(got[0], want[0], rtol=rtol, atol=rtol)
    gw = interpret.evaluate(autodiff.vjp_graph(u, None), list(xs))
    gg = interpret.evaluate(autodiff.vjp_graph(g, None), list(xs))
    for a, b in zip(gw[1:], gg[1:]):
        np.testing.assert_allclose(b, a, rtol=rtol, atol=rtol)
    grad = tj.compile(f, *xs, argnums=tuple(range(len(xs))), cache=False)
    val, gs = grad.value_and_grad(*xs)
    np.testing.assert_allclose(val, f(*xs), rtol=1e-11, atol=1e-12)
    gs = gs if isinstance(gs, tuple) else (gs,)
    assert grad.stats["reroll"]["captured"]["loops"] == g.captured[0]
    for k, x in enumerate(xs):
        d = RNG.normal(size=np.shape(x))
        h = 1e-6
        plus, minus = list(xs), list(xs)
        plus[k], minus[k] = x + h * d, x - h * d
        fd = (f(*plus) - f(*minus)) / (2 * h)
        np.testing.assert_allclose(np.sum(gs[k] * d), fd, rtol=1e-5, atol=1e-7)
    return g


# -- captured ------------------------------------------------------------------------------------


def neighbours(x):
    s = 0.0
    for i in range(len(x) - 1):
        d = x[i + 1] - x[i]
        s = s + np.exp(-d * d) + 0.5 * d
    return s


def test_neighbour_sum_is_captured():
    g = against_unrolled(neighbours, RNG.random(40), loops=1)
    assert g.captured[1] == 39


def test_tracing_does_not_grow_with_the_trip_count():
    """The captured trace has the same nodes for 100 and 20,000 iterations."""
    small = traced(neighbours, RNG.random(100))
    big = traced(neighbours, RNG.random(20000))
    assert big.captured == (1, 19999)
    assert len(big.nodes) == len(small.nodes)


def test_carried_product_and_recurrence():
    def product(x):
        p = 1.0
        for i in range(len(x)):
            p = p * (1.0 + 0.1 * np.sin(x[i]))
        return p

    def recurrence(x, w):
        h = 0.3
        for i in range(len(x)):
            h = np.tanh(w[0] * h + x[i])
        return h

    against_unrolled(product, RNG.random(30), loops=1)
    against_unrolled(recurrence, RNG.random(25), RNG.random(2), loops=1)


MASSES = RNG.uniform(0.5, 2.0, 40)
INFS = np.array([-np.inf, 1.0, 4.0, np.inf, 9.0] * 8)
ZEROS = np.array([-0.0, 1.0, 0.0, -3.0, 0.0] * 8)


def test_tables_of_numbers_run_as_written_then_re_roll():
    """A numpy table read at the index gives numbers numpy combines before tapejit sees them
    (``mu[i] ** 0.5`` of -inf is inf, ``-0.0 % 2.0`` is +0.0, ``x ** 0`` has the derivative
    0 at 0, a loop of table reads only is a float): such loops are traced as written, with
    numpy's numbers, and the re-rolling pass reads those numbers from a table."""
    mu = np.linspace(-1.0, 1.0, 40)

    def log_density(x):
        lp = 0.0
        for i in range(len(x)):
            z = (x[i] - mu[i]) / MASSES[i]
            lp = lp - 0.5 * z * z - np.log(MASSES[i])
        return lp

    def numpy_arithmetic(x):
        s = 0.0
        for i in range(len(x)):
            s = s + x[i] * np.exp(-(INFS[i] ** 0.5)) + np.arctan2(ZEROS[i] % 2.0, -1.0)
            s = s + (ZEROS[i] // 2.0) * x[i] + x[i] ** (ZEROS[i] * 0.0)
        return s

    def table_only(x):
        w = 0.0
        for i in range(len(MASSES)):
            w = w + MASSES[i]
        assert isinstance(w, float)  # a number, as in Python
        return w * np.sum(x)

    for f in (log_density, table_only):
        against_unrolled(f, RNG.random(40), loops=0)
    x = RNG.random(40)
    x[::5] = 0.0
    g = tj.compile(numpy_arithmetic, x, cache=False)
    val, grad = g.value_and_grad(x)
    assert val == pytest.approx(numpy_arithmetic(x), rel=1e-13)
    assert np.all(np.isfinite(grad))
    assert g.stats["reroll"]["loops"] >= 1 and g.stats["reroll"]["captured"]["loops"] == 0


def test_table_changed_before_the_loop_is_read_as_it_is_then():
    table = np.ones(20)

    def f(x):
        a = np.sum(x * table)  # captured here, all ones
        table[3] = 7.0
        s = 0.0
        for i in range(len(x)):
            s = s + x[i] * table[i]
        table[3] = 1.0
        return a + s

    x = RNG.random(20)
    against_unrolled(f, x, loops=0)
    grad = tj.compile(f, x, cache=False)(x)
    assert grad[3] == pytest.approx(8.0, rel=1e-14) and grad[2] == pytest.approx(2.0, rel=1e-14)


def test_tuple_assignments():
    """``a, b = e1, e2`` evaluates both before assigning either: temporaries, and carries
    that swap (``a, b = b, a * x[i]``)."""

    def springs(x):
        p = x.reshape(-1, 2)
        e = 0.0
        for i in range(p.shape[0] - 1):
            dx, dy = p[i + 1, 0] - p[i, 0], p[i + 1, 1] - p[i, 1]
            e += (np.sqrt(dx * dx + dy * dy) - 1.0) ** 2
        return e

    def two_carries(x):
        a, b = 0.0, 1.0
        for i in range(len(x)):
            a, b = a + x[i] * x[i], b * (1.0 + 0.1 * np.sin(x[i]))
        return a * b

    def swapping(x):  # carries that feed each other: as traced, with the values of Python's
        a, b = 1.0, 0.5
        for i in range(len(x)):
            a, b = b, a * np.cos(x[i]) + 0.1 * b
        return a + 2.0 * b

    def starred(x):  # not a plain tuple of values: runs as written
        a, b = 0.0, 0.0
        for i in range(len(x)):
            a, b = [*[x[i], a]]
        return a + b

    against_unrolled(springs, RNG.random(40) * 3.0, loops=1)
    against_unrolled(two_carries, RNG.random(30), loops=2)
    against_unrolled(swapping, RNG.random(30), loops=0)
    against_unrolled(starred, RNG.random(30), loops=0)


def test_augmented_assignment_and_two_carries():
    def f(x):
        a = 0.0
        b = 1.0
        for k in range(len(x)):
            a += x[k] * x[k]
            b = b + 0.5 * np.cos(x[k])
        return a * b

    against_unrolled(f, RNG.random(33), loops=2)


@pytest.mark.parametrize("rng", ["reversed", "strided", "offset"])
def test_ranges(rng):
    def reversed_(x):
        s = 0.0
        for i in range(len(x) - 1, -1, -1):
            s = s * 0.9 + x[i]
        return s

    def strided(x):
        s = 0.0
        for i in range(0, len(x) - 1, 2):
            s = s + x[i] * x[i + 1]
        return s

    def offset(x):
        s = 0.0
        for i in range(3, len(x)):
            s = s + np.sin(x[len(x) - 1 - i]) * x[i - 3]
        return s

    f = {"reversed": reversed_, "strided": strided, "offset": offset}[rng]
    against_unrolled(f, RNG.random(41), loops=1)


def test_array_carries():
    """A carried vector (a sequential loop); one written in place stays as traced."""

    def rebound(pos, w):
        f = w * 0.0
        for j in range(pos.shape[0]):
            f = f * 0.5 + np.sin(pos[j, :]) * w
        return np.sum(f * f)

    def in_place(pos, w):
        f = w * 1.0
        for j in range(pos.shape[0]):
            f += pos[j] * pos[j, 0]
        return np.sum(f * f)

    against_unrolled(rebound, RNG.random((20, 3)), RNG.random(3), loops=1)
    against_unrolled(in_place, RNG.random((20, 3)), RNG.random(3), loops=0)


@pytest.mark.usefixtures("unconverted")  # the capture of writes: conversion off
def test_writes_into_arrays():
    """y[i] = v (a map), y[j, 0] += v in a triangular nest (scatter-adds), y[1] += v (the
    same element every iteration: a carried array)."""

    def fill(x):
        y = np.zeros_like(x)
        for i in range(1, len(x)):
            y[i] = x[i] - x[i - 1]
        return np.sum(np.exp(-y * y))

    def forces(pos):
        n = pos.shape[0]
        g = np.zeros_like(pos)
        for i in range(n):
            for j in range(i + 1, n):
                g[j, 0] += np.sin(pos[j, 0] - pos[i, 0]) * pos[j, 1] * pos[i, 2]
        return np.sum(g * g)

    def same_element(x):
        y = np.zeros(3) + x[0]
        for i in range(len(x)):
            y[1] += x[i] * 2.0
        return np.sum(y * y)

    against_unrolled(fill, RNG.random(30), loops=1)
    assert against_unrolled(forces, RNG.random((20, 3))).captured[0] >= 12
    against_unrolled(same_element, RNG.random(30), loops=1)


def test_several_writes_into_one_array():
    """Components of one row (r[j, 0], r[j, 2]), and element assembly adding into positions
    the next iteration adds to as well (f[e] -= t; f[e + 1] += t): one loop each."""

    def components(pos):
        g = np.zeros_like(pos)
        for j in range(pos.shape[0]):
            g[j, 0] += np.sin(pos[j, 0])
            g[j, 2] -= pos[j, 1] * pos[j, 2]
            g[j, 1] = pos[j, 0] * 3.0
        return np.sum(g * g)

    def assembly(x):
        f = x * 0.1
        for e in range(len(x) - 1):
            h = x[e + 1] - x[e]
            t = h / (1.0 + h * h)
            f[e] -= t
            f[e + 1] += t * 0.5
        return np.sum(f * f * f)

    against_unrolled(components, RNG.random((20, 3)), loops=1)
    against_unrolled(assembly, RNG.random(30), loops=1)


def test_element_read_back_after_its_write():
    """v[i] reads u[i] just written: the value written (ops.index forwards it), so both
    arrays are maps; a read of another element of u stays as traced."""

    def two_arrays(x):
        u = np.zeros_like(x)
        v = np.zeros_like(x)
        for i in range(len(x)):
            u[i] = np.exp(-x[i] * x[i])
            v[i] = x[i] * u[i]
        return np.sum(u * v)

    def neighbour(x):
        u = np.zeros_like(x)
        v = np.zeros_like(x)
        for i in range(1, len(x)):
            u[i] = np.exp(-x[i] * x[i])
            v[i] = x[i] * u[i - 1]
        return np.sum(u * v)

    against_unrolled(two_arrays, RNG.random(30), loops=2)
    against_unrolled(neighbour, RNG.random(30), loops=0)


def test_writes_not_captured():
    """A recurrence through the written array, writes that overwrite each other, a write
    into a view, a write into the argument (an error, as unrolled)."""

    def recurrence(x):
        y = np.zeros_like(x)
        for i in range(1, len(x)):
            y[i] = y[i - 1] * 0.5 + x[i]
        return np.sum(y * y)

    def into_view(x):
        z = np.stack([x * 0.0, x * 0.0])
        y = z[1]
        for i in range(len(x)):
            y[i] = x[i] * x[i]
        return np.sum(np.sin(z))

    def overwriting(x):  # y[i + 1] is written again by the next iteration: order matters
        y = np.zeros_like(x)
        for i in range(len(x) - 1):
            y[i] = np.sin(x[i])
            y[i + 1] = x[i] * x[i + 1]
        return np.sum(y * y)

    def into_argument(x):
        for i in range(len(x)):
            x[i] = x[i] * 2.0
        return np.sum(x)

    against_unrolled(recurrence, RNG.random(30), loops=0)
    against_unrolled(overwriting, RNG.random(30), loops=0)
    against_unrolled(into_view, RNG.random(30), loops=0)
    for capture in (True, False):
        with pytest.raises(tracing.TracingError, match="argument"):
            traced(into_argument, RNG.random(30), capture=capture)


def test_off_with_the_reroll_pass(monkeypatch):
    from tapejit.passes.reroll import driver as reroll

    monkeypatch.setattr(reroll, "ENABLED", False)
    assert traced(neighbours, RNG.random(40)).captured == (0, 0)


def test_rows_of_a_matrix_and_invariants():
    c = RNG.random(3)

    def f(pos, w):
        e = 0.0
        for j in range(pos.shape[0]):
            r = pos[j, :] - w
            e = e + np.sum(r * r * c) + pos[j, 1] * c[0]
        return e

    against_unrolled(f, RNG.random((20, 3)), RNG.random(3), loops=1)


def pairs(pos):
    n = pos.shape[0]
    e = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            dx = pos[j, 0] - pos[i, 0]
            dy = pos[j, 1] - pos[i, 1]
            dz = pos[j, 2] - pos[i, 2]
            r2 = dx * dx + dy * dy + dz * dz
            s = 1.0 / (r2 * r2 * r2)
            e = e + 4.0 * (s * s - s)
    return e


@pytest.mark.usefixtures("unconverted")  # ragged nests are converted when conversion is on
def test_triangular_pair_loop():
    """A nest (tapejit/frontend/loops/loop_source.py ``_nest``, loop_capture.run_nest): the first
    ROWS_TRACED rows are traced, each capturing its inner loop; the other rows whose inner
    loop has at least MIN_TRIPS iterations are built as one sum over rows of different
    lengths; the rest (short rows) are traced."""
    n = 24
    pos = np.stack(np.meshgrid(*[np.arange(3)] * 3, indexing="ij"), -1).reshape(-1, 3)[:n]
    pos = pos * 1.5 + 0.1 * RNG.random((n, 3))
    g = against_unrolled(pairs, pos, rtol=1e-11)
    assert g.captured[0] == loop_capture.ROWS_TRACED + 1
    assert g.captured[1] == sum(n - 1 - i for i in range(n) if n - 1 - i >= loop_capture.MIN_TRIPS)
    assert sum(x.op == "window" for x in g.nodes) >= 2  # the rows built as one (ragged) sum


def test_pair_loop_traces_a_few_rows_whatever_the_size():
    """Tracing a captured nest does not grow with the atoms: the same trace size at n = 40
    and 200 (all but the short rows at the end)."""
    sizes = []
    for n in (40, 200):
        pos = np.stack(np.meshgrid(*[np.arange(6)] * 3, indexing="ij"), -1).reshape(-1, 3)[:n]
        sizes.append(len(traced(pairs, pos * 1.5 + 0.1 * RNG.random((n, 3))).nodes))
    assert sizes[0] == sizes[1], sizes


def nest_with_row_statements(x, w):
    e = 0.0
    for i in range(len(x) - 2):
        xi = x[i] * w[i]  # a per-row value, read at the outer variable
        for j in range(i + 2, len(x)):
            e = e + np.exp(-((x[j] - xi) ** 2)) * w[j]
        e = e + xi * 0.25  # a per-row term after the inner loop
    return e


def nest_with_the_row_as_a_number(x):
    e = 0.0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            e = e + np.sin(x[j] - x[i]) * i  # `i` as a number: not a nest (rows differ)
    return e


def nest_of_a_product(x):
    p = 1.0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            p = p * (1.0 + 0.01 * np.tanh(x[j] - x[i]))  # not a sum: rows as captured
    return p


def nest_of_growing_rows(x):
    e = 0.0
    for i in range(len(x)):
        for j in range(i):  # the short rows come first: traced as they are
            e = e + np.cos(x[i] - x[j])
    return e


@pytest.mark.usefixtures("unconverted")  # ragged nests are converted when conversion is on
@pytest.mark.parametrize(
    "f, nest",
    [(nest_with_the_row_as_a_number, False), (nest_of_a_product, False),
     (nest_of_growing_rows, True)],  # (growing: the rows from the 8th on, built)
)  # fmt: skip
def test_nests_built_or_not_stay_exact(f, nest):
    g = against_unrolled(f, RNG.random(26), rtol=1e-10)
    assert any(x.op == "window" for x in g.nodes) == nest


def test_a_nest_with_statements_around_its_inner_loop():
    """Straight-line code before and after the inner loop, reading the row's elements: a
    nest whose rows add two terms each (only the inner loop's sum is one per row: its
    rows are traced as they are, exact either way)."""
    x, w = RNG.random(30), RNG.random(30)
    against_unrolled(nest_with_row_statements, x, w, rtol=1e-10)


def lj_term(r2, eps=1.0):
    """A pure helper: straight-line code and a return."""
    s = 1.0 / (r2 * r2 * r2)
    return 4.0 * eps * (s * s - s)


def distance2(a, b):
    d = a - b
    return np.sum(d * d)


def pairs_with_helpers(pos):
    n = pos.shape[0]
    e = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            e = e + lj_term(distance2(pos[j, :], pos[i, :]), eps=0.5)
    return e


LOG: list = []


def logged(a):
    LOG.append(a)  # a side effect: not a pure helper
    return a * a


def branching(a):
    if a > 0.5:
        return a
    return a * a


@pytest.mark.usefixtures("unconverted")  # ragged nests are converted when conversion is on
def test_pure_helpers():
    n = 20
    pos = np.stack(np.meshgrid(*[np.arange(3)] * 3, indexing="ij"), -1).reshape(-1, 3)[:n]
    pos = pos * 1.5 + 0.1 * RNG.random((n, 3))
    g = against_unrolled(pairs_with_helpers, pos, rtol=1e-11)
    assert g.captured[0] == n - loop_capture.MIN_TRIPS  # rows of at least MIN_TRIPS pairs

    def uses(helper):
        def f(x):
            s = 0.0
            for i in range(len(x)):
                s = s + helper(x[i])
            return s

        return f

    against_unrolled(uses(logged), RNG.random(30), loops=0)
    LOG.clear()
    traced(uses(logged), RNG.random(30))
    assert len(LOG) == 30  # every call made, as Python makes them
    against_unrolled(uses(branching), RNG.random(30) * 0.4, loops=0)


def test_names_reused_by_other_loops_and_lambdas():
    """The loop variable and a temporary used again by a later loop that assigns them first,
    and by a lambda's parameter: still private to the first loop."""

    def f(x):
        s = 0.0
        for i in range(len(x)):
            d = x[i] * 2.0
            s = s + d * d
        c = tj.fori_loop(0, 3, lambda i, c: c * 0.5 + 0.1, s)
        for i in range(len(x) - 1):
            d = x[i + 1] - x[i]
            c = c + np.exp(-d * d)
        return c

    against_unrolled(f, RNG.random(30), loops=2)


def test_value_read_after_the_loop():
    """A guard on a captured carry evaluates the built loop on the example."""

    def f(x):
        s = 0.0
        for i in range(len(x)):
            s = s + x[i] * x[i]
        if s > 100.0:  # (a side effect: the branch stays a guard, not a select)
            LOG.append(s)
            return s * 2.0
        return np.sqrt(s)

    x = RNG.random(30)
    g = traced(f, x)
    assert g.captured[0] == 1 and len(g.guards) == 1
    grad = tj.compile(f, x, cache=False)
    np.testing.assert_allclose(grad(x), x / np.sqrt(np.sum(x * x)), rtol=1e-13)
    y = x * 4.0  # the other branch: a retrace or an error, never the first branch's value
    np.testing.assert_allclose(grad(y), 4.0 * y, rtol=1e-13)


# -- not captured: traced as written ---------------------------------------------------------


def _number(x):
    v = 0.0
    for i in range(len(x)):
        v = v * 0.5 + np.sin(x[i]) * (i + 1.0)
    return v


def _square_index(x):
    s = 0.0
    for i in range(5):
        s = s + x[i * i]
    for i in range(20):
        s = s + x[(i * i) % 30]
    return s


IDX = np.arange(30)[::-1].copy()


def _table_index(x):
    s = 0.0
    for i in range(30):
        s = s + x[IDX[i]] * 2.0
    return s


def _branch(x):
    s = 0.0
    for i in range(len(x)):
        if x[i] > 0.5:
            s = s + x[i]
    return s


def _temp_after(x):
    s = 0.0
    for i in range(len(x)):
        d = x[i] * 2.0
        s = s + d
    return s + d


def _var_after(x):
    s = 0.0
    for i in range(len(x)):
        s = s + x[i]
    return s * i


def helper(a):
    t = 0.0
    for _ in range(2):  # not straight-line code: not a pure helper
        t = t + a * a
    return t


def _calls_user_code(x):
    s = 0.0
    for i in range(len(x)):
        s = s + helper(x[i])
    return s


def _feeding_carries(x):
    a = 0.0
    b = 1.0
    for i in range(len(x)):
        a = a + b * x[i]
        b = b * 0.9 + x[i]
    return a + b


INTS = np.arange(30) % 7
SINGLE = RNG.random(30).astype(np.float32)


def _int_table_read(x):
    s = 0.0
    for i in range(len(x)):
        s = s + x[i] * INTS[i]
    return s


def _float32_table_read(x):  # float32 arithmetic, which a traced f64 read would not do
    s = 0.0
    for i in range(len(x)):
        s = s + x[i] * (SINGLE[i] * 0.1)
    return s


def _wraps_around_at_the_end(x):
    s = 0.0
    for i in range(len(x) - 1, -1, -1):
        s = s + x[i - 3] * x[i]  # x[-1], x[-2], x[-3] in the last iterations
    return s


def _short(x):
    s = 0.0
    for i in range(loop_capture.MIN_TRIPS - 1):
        s = s + x[i]
    return s


@pytest.mark.parametrize(
    "f",
    [_number, _square_index, _table_index, _branch, _temp_after, _var_after, _calls_user_code,
     _feeding_carries, _int_table_read, _float32_table_read, _wraps_around_at_the_end,
     _short],  # fmt: skip
    ids=lambda f: f.__name__.strip("_"),
)
def test_not_captured(f):
    against_unrolled(f, RNG.random(30), loops=0)


def test_negative_indices_in_the_first_iterations():
    """x[i - 3] reads x[-3], x[-2], x[-1] first: those iterations stay as traced, the loop
    starts after them."""

    def f(x):
        s = 0.0
        for i in range(len(x)):
            s = s + x[i - 3] * x[i]
        return s

    against_unrolled(f, RNG.random(30), loops=1)


def test_out_of_bounds_raises_as_written():
    def f(x):
        s = 0.0
        for i in range(len(x)):
            s = s + x[i + 1]
        return s

    for capture in (True, False):
        with pytest.raises(tracing.TracingError, match="out of bounds"):
            traced(f, RNG.random(30), capture=capture)


def test_source_that_is_not_the_function_is_not_used():
    """A function whose source file changed after it was defined (the source read back is
    not its code): traced as it was defined, never as the file now says."""
    name = "<tapejit test source>"
    src = "def f(x):\n    s = 0.0\n    for i in range(len(x)):\n        s = s + x[i]\n    return s\n"
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)
    env = {"np": np}
    exec(compile(src, name, "exec"), env)
    f = env["f"]
    x = RNG.random(30)
    assert traced(f, x).captured == (1, 30)
    changed = src.replace("s + x[i]", "s + 2.0 * x[i]")
    linecache.cache[name] = (len(changed), None, changed.splitlines(True), name)
    loop_source._rewritten_code.cache_clear()
    g = traced(f, x)
    assert g.captured == (0, 0)
    np.testing.assert_allclose(interpret.evaluate(g, [x])[0], np.sum(x), rtol=1e-13)
    del linecache.cache[name]


def test_names_and_lines_of_the_user():
    """Errors in a captured body name the user's line."""

    def f(x):
        s = 0.0
        for i in range(len(x)):
            s = s + float(x[i])
        return s

    with pytest.raises(tracing.TracingError) as e:
        traced(f, RNG.random(30))
    assert "test_loop_capture.py" in str(e.value) and " in f()" in str(e.value)


def test_rewrite_keeps_closures_defaults_and_nested_scopes():
    scale = 3.0

    def f(x, k=2.0, *, m=0.5):
        s = 0.0
        for i in range(len(x)):
            s = s + np.square(x[i]) * scale
        return s * k + m

    rewritten = loop_capture.prepare(f)
    assert rewritten is not f
    x = RNG.random(20)
    assert rewritten(x) == pytest.approx(f(x), rel=1e-14)  # plain numpy: runs every iteration
    against_unrolled(f, x, loops=1)


# -- generated loop shapes -------------------------------------------------------------------------

_RANGES = ["range(n)", "range(1, n - 1)", "range(n - 1, -1, -1)", "range(0, n - 2, 2)",
           "range(n - 3, 2, -3)"]  # fmt: skip
_READS = ["x[i]", "x[n - 1 - i]", "x[i] * x[i + 1] if i + 1 < n else x[i]", "y[i, 1] - y[i, 0]",
          "np.sum(y[i, :] * y[n - 1 - i, :])", "x[2 * (i // 2)]"]  # fmt: skip
_BODIES = [
    "e = e + np.exp(-({r}) ** 2)",
    "e = e * 0.75 + np.sin({r})",
    "e = np.tanh(e + {r} * c)",
    "t = {r}\n        e = e - t / (1.0 + t * t) + g * c",
    "e += abs({r}) * c\n        g = g * 0.5 + {r}",
    "out[i] = np.cos({r}) * c",
    "out[i] += ({r}) ** 3\n        e = e + ({r}) * c",
]
_SOURCES: dict[str, int] = {}


def _generated(src: str):
    """``f`` defined by ``src`` in a file of its own that inspect can read (as in a notebook)."""
    name = f"<generated capture loop {_SOURCES.setdefault(src, len(_SOURCES))}>"
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)
    env = {"np": np}
    exec(compile(src, name, "exec"), env)  # noqa: S102 - a generated test program
    return env["f"]


@pytest.mark.parametrize("body", _BODIES)
@pytest.mark.parametrize("rng", _RANGES)
@pytest.mark.parametrize("read", _READS)
def test_generated_loops(body, rng, read):
    """Loop shapes from a small grammar, captured against unrolled and finite differences;
    the loops that must be captured are (a conditional read and a loop shorter than MIN_TRIPS
    are not; ``i // 2`` is not affine)."""
    src = (
        "def f(x, y):\n"
        "    n = len(x)\n"
        "    c = np.sum(y) * 0.1\n"
        "    e = 0.25\n"
        "    g = x[0] * 0.5\n"
        "    out = np.zeros_like(x)\n"
        f"    for i in {rng}:\n"
        f"        {body.format(r=read)}\n"
        "    return e + g + np.sum(out * out)\n"
    )
    f = _generated(src)
    x, y = RNG.random(24), RNG.random((24, 2))
    g = against_unrolled(f, x, y, rtol=1e-11)
    trips = len(eval(rng, {"n": len(x)}))  # noqa: S307 - the grammar's own range
    plain = not any(s in read + body for s in (" if ", "//"))
    assert g.captured[0] >= (1 if plain and trips >= loop_capture.MIN_TRIPS else 0), src
    if not plain:
        assert g.captured == (0, 0), src


# -- found by review: each was a wrong value or a crash before it was fixed --------------------


def _read_after_in_outer(x):
    s = 0.0
    for k in range(2):
        d = 0.0
        for j in range(20):
            d = x[j] * 2.0
            s = s + d
        s = s + d  # the inner loop's last d, read in the loop around it
    return s


def _var_read_in_outer(x):
    s = 0.0
    for i in range(2):
        for i in range(20):  # noqa: B007, PLW2901 - the inner variable, read after
            s = s + x[i]
        s = s + 100.0 * x[i]
    return s


def _inplace_through_temp(x):
    y = x[0:3] * 1.0
    s = 0.0
    for i in range(20):
        t = y
        t += x[i : i + 3] * 0.0 + x[i]
        s = s + x[i]
    return s + np.sum(y * y)


def _caught(x):
    s = 0.0
    try:
        for i in range(100):
            s = s + x[i] * x[i]
    except Exception:  # noqa: BLE001 - the partial sum is the function's value
        pass
    return s


def _folded_carry(x):
    s = 0.0
    m = x[0] * 2.0
    for i in range(20):
        s = s + x[i] * m
        m = m * 1.0
    return s + m


def _assigned_base(x):
    s = 0.0
    for i in range(20):
        t = x * 2.0
        s = s + t[i]
    return s


def _zero_trips(x):
    for i in range(0):
        s = s + x[i]  # noqa: F821 - never runs: s is never needed
    return np.sum(x)


def _huge(x):
    s = 0.0
    for i in range(10**20):
        s = s + x[i]
        if i > 40:
            break
    return s


@pytest.mark.parametrize(
    "f", [_read_after_in_outer, _var_read_in_outer, _inplace_through_temp, _caught, _folded_carry,
          _assigned_base, _zero_trips],  # fmt: skip
    ids=lambda f: f.__name__.strip("_"),
)
def test_review_cases(f):
    against_unrolled(f, RNG.random(30), loops=0)


def test_huge_range_raises_as_written():
    with pytest.raises(tracing.TracingError, match="out of bounds"):
        traced(_huge, RNG.random(30))


class Stateful:
    """An object whose arithmetic counts its calls: it must run every iteration."""

    def __init__(self):
        self.calls = 0

    def __mul__(self, other):
        self.calls += 1
        return other * float(self.calls)


def test_objects_that_run_code_are_not_invariants():
    w = Stateful()

    def f(x):
        s = 0.0
        for i in range(len(x)):
            s = s + w * x[i]
        return s

    x = RNG.random(30)
    g = traced(f, x)
    assert g.captured == (0, 0) and w.calls == 30
    np.testing.assert_allclose(interpret.evaluate(g, [x])[0], np.sum(x * np.arange(1, 31)))


def test_shadowed_builtins_are_not_the_builtins():
    src = "def f(x):\n    s = 0.0\n    for i in range(len(x)):\n        s = s + abs(x[i])\n    return s\n"
    calls = []

    def my_abs(v):
        calls.append(v)
        return v * 2.0

    for env in ({"np": np, "abs": my_abs}, {"np": np, "__builtins__": {"abs": my_abs, "range": range, "len": len}}):
        name = f"<shadowed {len(env)}>"
        linecache.cache[name] = (len(src), None, src.splitlines(True), name)
        exec(compile(src, name, "exec"), env)  # noqa: S102 - a test program
        calls.clear()
        x = RNG.random(30)
        g = traced(env["f"], x)
        assert g.captured == (0, 0) and len(calls) == 30
        np.testing.assert_allclose(interpret.evaluate(g, [x])[0], 2.0 * np.sum(x))


# -- found by the second review ------------------------------------------------------------------

COUNTER = Stateful()
SCALE = 2.0


def scaled_by_default(a, w=COUNTER):
    return w * a


def scaled_by_global(a):
    return SCALE * a


def set_scale(v):
    global SCALE
    SCALE = v


class CountingFloat(np.float64):
    calls = 0

    def __mul__(self, other):
        CountingFloat.calls += 1
        return other * 1.0


def test_code_that_runs_is_never_a_fixed_value():
    """A helper's default, a numpy scalar subclass and a helper global changed just before the
    loop all run user code: the loop runs as written, every iteration."""
    x = RNG.random(30)

    def by_default(x):
        s = 0.0
        for i in range(len(x)):
            s = s + scaled_by_default(x[i])
        return s

    def subclass(x):
        w = CountingFloat(1.0)
        s = 0.0
        for i in range(len(x)):
            s = s + w * x[i]
        return s

    def global_changed(x):
        set_scale(COUNTER)
        s = 0.0
        for i in range(len(x)):
            s = s + scaled_by_global(x[i])
        return s

    for f in (by_default, subclass, global_changed):
        COUNTER.calls = CountingFloat.calls = 0
        try:
            assert traced(f, x).captured == (0, 0), f.__name__
        finally:
            set_scale(2.0)
        assert COUNTER.calls + CountingFloat.calls == 30, f.__name__
    # a function called by name is prepared as the traced function is: neighbours' loop is
    # captured (scaled_by_global reads a plain number again, and has no loop)
    g = traced(lambda x: scaled_by_global(x[0]) + neighbours(x), x)
    assert g.captured[0] == 1
    np.testing.assert_allclose(interpret.evaluate(g, [x])[0], 2.0 * x[0] + neighbours(x),
                               rtol=1e-12)  # fmt: skip


def _lambda_default(x):
    s = 0.0
    for i in range(3):
        s = s + x[i] * x[i]
    for i in range(len(x)):
        s = s + x[i]
    last = lambda i=i: x[i]  # noqa: E731 - the default is evaluated in f: i is read after
    return s + 10.0 * last()


def _def_default(x):
    s = 0.0
    d = 1.0
    for i in range(len(x)):
        d = x[i] * 2.0
        s = s + d
    def tail(d=d):  # noqa: E306
        return d * 3.0
    return s + tail()


def _write_reads_later_name(x):
    from math import pi as t  # bound without a name node

    y = x * 0.0
    for i in range(len(x)):
        y[i] = t * x[i]
        t = x[i] * 2.0
    return np.sum(y * y)


@pytest.mark.parametrize("f", [_lambda_default, _def_default, _write_reads_later_name],
                         ids=lambda f: f.__name__.strip("_"))  # fmt: skip
def test_second_review_cases(f):
    against_unrolled(f, RNG.random(30))


# -- found by the third review -------------------------------------------------------------------


def _fixed_then_map(x):
    y = x * 0.0
    for i in range(len(x) - 1):
        y[0] = x[i] * 2.0  # another write into the mapped array, every iteration
        y[i + 1] = x[i] * 3.0
    return np.sum(y * np.arange(1.0, 31.0))


def _rescaled_then_map(x):
    y = x * 1.0
    for i in range(len(x) - 1):
        y[:] = y * 0.5
        y[i + 1] = x[i] * 3.0
    return np.sum(y * np.arange(1.0, 31.0))


@pytest.mark.parametrize("f", [_fixed_then_map, _rescaled_then_map],
                         ids=lambda f: f.__name__.strip("_"))  # fmt: skip
@pytest.mark.parametrize("capture", [True, False], ids=["captured", "re-rolled"])
def test_map_with_other_writes(f, capture, monkeypatch):
    """A map whose iterations also change the array elsewhere is not a map (the re-rolling
    pass dropped the other write)."""
    monkeypatch.setattr(loop_source, "ENABLED", capture)
    x = RNG.random(30)
    grad = tj.compile(f, x, cache=False)
    val, g = grad.value_and_grad(x)
    assert val == pytest.approx(f(x), rel=1e-12)
    d = RNG.normal(size=30)
    fd = (f(x + 1e-6 * d) - f(x - 1e-6 * d)) / 2e-6
    assert np.sum(g * d) == pytest.approx(fd, rel=1e-6, abs=1e-8)


def test_an_edit_that_only_flips_the_sign_of_zero_is_seen():
    name = "<tapejit test signed zero>"
    src = ("def f(x):\n    s = 0.0\n    for i in range(len(x)):\n        s = s + x[i] * x[i]\n"
           "    return s + np.arctan2(0.0, -1.0)\n")  # fmt: skip
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)
    env = {"np": np}
    exec(compile(src, name, "exec"), env)  # noqa: S102 - a test program
    x = RNG.random(30)
    assert traced(env["f"], x).captured == (1, 30)
    edited = src.replace("0.0", "-0.0")
    linecache.cache[name] = (len(edited), None, edited.splitlines(True), name)
    loop_source._rewritten_code.cache_clear()
    g = traced(env["f"], x)
    assert g.captured == (0, 0)
    np.testing.assert_allclose(interpret.evaluate(g, [x])[0], np.sum(x * x) + np.pi, rtol=1e-13)
    del linecache.cache[name]


# -- pytrees and transformations ----------------------------------------------------------------


def test_pytree_arguments_and_transformations():
    """Loops read leaves of a dict of parameters (p["w"][i], p["b"][0]); captured through
    compile with pytrees and has_aux, and through the transformations (Hessian, JVP)."""

    def loss(p, x):
        s = 0.0
        for i in range(len(x)):
            s = s + np.tanh(p["w"][i] * x[i] + p["b"][0]) ** 2
        return s

    def with_aux(p, x):
        v = loss(p, x)
        return v, {"twice": v * 2.0}

    rng = np.random.default_rng(3)
    x = rng.random(24)
    p = {"w": rng.random(24), "b": rng.random(1)}
    grad = tj.compile(loss, p, x, cache=False)
    g = grad(p, x)
    assert grad.stats["reroll"]["captured"]["loops"] == 1
    t = np.tanh(p["w"] * x + p["b"][0])
    np.testing.assert_allclose(g["w"], 2 * t * (1 - t * t) * x, rtol=1e-12)
    np.testing.assert_allclose(g["b"], [np.sum(2 * t * (1 - t * t))], rtol=1e-12)
    aux_grad = tj.compile(with_aux, p, x, has_aux=True, cache=False)
    (ga, aux) = aux_grad(p, x)
    np.testing.assert_allclose(ga["w"], g["w"], rtol=1e-13)
    assert aux["twice"] == pytest.approx(2 * loss(p, x), rel=1e-13)

    def chain(v):
        s = 0.0
        for i in range(len(v) - 1):
            s = s + np.sin(v[i]) * v[i + 1]
        return s

    v = rng.random(20)
    h = tj.hessian(chain)(v)
    want = np.zeros((20, 20))
    idx = np.arange(19)
    want[idx, idx] += -np.sin(v[:-1]) * v[1:]
    want[idx, idx + 1] += np.cos(v[:-1])
    want[idx + 1, idx] += np.cos(v[:-1])
    np.testing.assert_allclose(h, want, rtol=1e-12, atol=1e-14)
    _, tangent = tj.jvp(chain, (v,), (np.ones(20),))
    want_t = np.sum(np.cos(v[:-1]) * v[1:] + np.sin(v[:-1]))
    assert tangent == pytest.approx(want_t, rel=1e-12)


class Batches:
    """A container whose lookups hand out the next batch: code that must run as Python runs it."""

    def __init__(self, batches):
        self.batches, self.lookups = batches, 0

    def __getitem__(self, key):
        self.lookups += 1
        return self.batches[(self.lookups - 1) % 2]


def test_reads_through_containers_are_evaluated_as_python_does():
    """p["w"][i] of a container that runs code is evaluated once per iteration, never once more
    before the loop (found by review: 11 lookups and a wrong value); an error in evaluating it
    comes where Python raises it."""
    source = Batches([np.ones(10), 2.0 * np.ones(10)])

    def f(x):
        s = 0.0
        for i in range(len(x)):
            s = s + source["w"][i] * x[i]
        return s

    x = np.arange(1.0, 11.0)
    source.lookups = 0
    g = traced(f, x)
    assert source.lookups == 10 and g.captured == (0, 0)
    assert interpret.evaluate(g, [x])[0] == pytest.approx(85.0)

    p = {"w": np.ones(10)}

    def missing(x):
        s = 0.0
        for i in range(len(x)):
            t = x[i + 100]
            s = s + p["nokey"][i] * t
        return s

    for capture in (True, False):
        with pytest.raises(tracing.TracingError, match="out of bounds"):
            traced(missing, x, capture=capture)


def all_pairs(pos):
    n = pos.shape[0]
    e = 0.0
    for i in range(n):
        for j in range(n):
            if i != j:  # every ordered pair: split at the diagonal into two loops
                d = pos[j] - pos[i]
                s = 1.0 / np.dot(d, d) ** 3
                e = e + 2.0 * (s * s - s)
    return e


def all_pairs_continue(x):
    e = 0.0
    for i in range(len(x)):
        for j in range(len(x)):
            if j == i:
                continue
            e = e + np.exp(-((x[j] - x[i]) ** 2)) * x[i]
    return e


def skip_outside_the_range(x):
    e = 0.0
    for i in range(len(x)):
        for j in range(2, len(x) - 3):  # i outside [2, n-3) for some rows: nothing skipped
            if j != i:
                e = e + np.sin(x[j] * x[i])
    return e


def skip_variable_read_after(x):
    e = 0.0
    j = 0
    for i in range(len(x)):
        for j in range(len(x)):
            if i != j:
                e = e + np.cos(x[j] - x[i])
    return e + j  # the last j: the loop stays as written


@pytest.mark.usefixtures("unconverted")  # ragged nests are converted when conversion is on
@pytest.mark.parametrize("f", [all_pairs_continue, skip_outside_the_range, skip_variable_read_after])
def test_skips_of_the_diagonal(f):
    g = against_unrolled(f, RNG.random(40), rtol=1e-10)
    built = any(x.op == "window" for x in g.nodes)
    assert built == (f is not skip_variable_read_after)


@pytest.mark.usefixtures("unconverted")  # ragged nests are converted when conversion is on
def test_all_ordered_pairs_trace_a_few_rows():
    """``for i: for j: if i != j`` is two loops per row (before and after the diagonal): the
    rows where both are long are a nest, built from 5 traced rows; the trace does not grow."""
    sizes = []
    for n in (40, 120):
        pos = np.stack(np.meshgrid(*[np.arange(5)] * 3, indexing="ij"), -1).reshape(-1, 3)[:n]
        pos = pos * 1.5 + 0.1 * RNG.random((n, 3))
        g = traced(all_pairs, pos)
        sizes.append(len(g.nodes))
    assert sizes[0] == sizes[1], sizes
    against_unrolled(all_pairs, pos[:30], rtol=1e-10)


# -- nests: found in review (each was a silent wrong value or a wrong error) -------------------

MU = np.ones(40)
MU[12:] = 3.0  # the same for the rows traced, another for rows built from them
WL = [1.0] * 12 + [-2.0] * 28


def nest_reading_a_table_at_the_row(x):
    e = 0.0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            e = e + np.sin(x[j] - x[i]) * MU[i]
    return e


def nest_reading_a_list_at_the_row(x):
    e = 0.0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            e = e + np.sin(x[j] - x[i]) * WL[i]
    return e


def nest_with_a_stepped_inner_range(x):
    e = 0.0
    for i in range(len(x) - 5):
        for j in range(i, len(x), 5):  # lengths ceil((n - i) / 5): not a fixed step
            e = e + x[j - i] * x[i]
    return e


@pytest.mark.parametrize(
    "f", [nest_reading_a_table_at_the_row, nest_reading_a_list_at_the_row,
          nest_with_a_stepped_inner_range],
)  # fmt: skip
def test_nests_whose_rows_differ_otherwise_are_exact(f):
    against_unrolled(f, RNG.random(40 if f is not nest_with_a_stepped_inner_range else 80),
                     rtol=1e-10)  # fmt: skip


def nest_out_of_bounds_late(x):
    e = 0.0
    for i in range(len(x)):
        for j in range(i, i + 12):
            e = e + x[j] * x[i]  # j reaches len(x) in the late rows
    return e


def nest_with_a_huge_inner_range(x):
    e = 0.0
    for i in range(len(x)):
        for j in range(i, i + 2**64):
            e = e + x[j] * x[i]
    return e


@pytest.mark.parametrize("f", [nest_out_of_bounds_late, nest_with_a_huge_inner_range])
def test_errors_in_a_nest_name_the_users_function_and_line(f):
    with pytest.raises(tj.TracingError, match=rf"in {f.__name__}\(\).*out of bounds"):
        tj.compile(f, RNG.random(40), cache=False)


# -- loops over rows of different lengths (a slice bound moves with the loop variable) --------


def rows_form(pos):
    e = 0.0
    for i in range(len(pos) - 1):
        d = pos[i + 1 :] - pos[i]
        r2 = np.sum(d * d, axis=1)
        e = e + np.sum(np.exp(-r2))
    return e


def rows_of_a_numpy_table(x):
    e = 0.0
    for i in range(len(x) - 1):
        e = e + np.sum(np.sin(x[i + 1 :] - x[i]) * MU[i + 1 :])  # MU: not traced
    return e


def clipped_windows(x):
    e = 0.0
    for i in range(len(x)):
        e = e + np.sum(np.cos(x[i : i + 10]))  # the last rows are shorter (clipped by Python)
    return e


def rows_written(x):
    y = np.zeros_like(x)
    e = 0.0
    for i in range(len(x) - 1):
        y[i] = np.sum(x[i + 1 :])  # writes an array: not a ragged sum, traced
        e = e + y[i]
    return e


def test_rows_form_traces_a_few_rows_whatever_the_size():
    sizes = []
    for n in (30, 90):
        pos = np.stack(np.meshgrid(*[np.arange(5)] * 3, indexing="ij"), -1).reshape(-1, 3)[:n]
        g = traced(rows_form, pos * 1.5 + 0.1 * RNG.random((n, 3)))
        assert g.captured[0] == 1 and any(x.op == "window" for x in g.nodes)
        sizes.append(len(g.nodes))
    assert sizes[0] == sizes[1], sizes
    against_unrolled(rows_form, RNG.random((30, 3)), rtol=1e-10)


@pytest.mark.parametrize("f", [rows_of_a_numpy_table, clipped_windows, rows_written])
def test_row_loops_that_are_not_ragged_sums_stay_exact(f):
    against_unrolled(f, RNG.random(40), rtol=1e-10)


# -- a skip split in two loops runs exactly the loop as written (found in review) -------------


def skip_count(i, n):
    c = 0
    for j in range(n):
        if j != i:
            c = c + 1
    return c


def skip_unbound(n):
    for j in range(n):
        if j != i:  # noqa: F821  (i bound below: only read if the loop runs)
            pass
    return "done"
    i = 0  # noqa: F841


def skip_growing_list(i):
    out = [0, 0, 0, 0, 0]
    for j in range(len(out)):
        if j != i:
            out.append(j)  # len(out) changes as the loop runs
    return len(out)


def skip_bound_written(i):
    lim = [6]
    c = 0
    for j in range(lim[0]):
        if j != i:
            lim[0] += 1  # the bound read twice by a split would differ
            c = c + j
    return c, lim[0]


def skip_closures(i, n):
    fs = []
    for j in range(n):
        if j != i:
            fs.append(lambda: j)  # sees the last j
    return fs[0]()


@pytest.mark.parametrize(
    "f, args",
    [(skip_count, (2.0, 5)), (skip_count, (2.5, 5)), (skip_count, (None, 5)),
     (skip_count, (np.uint8(255), 300)), (skip_count, (np.int8(127), 200)),
     (skip_count, (7, 5)), (skip_count, (-1, 5)), (skip_unbound, (0,)), (skip_unbound, (3,)),
     (skip_growing_list, (1,)), (skip_bound_written, (2,)), (skip_closures, (4, 5))],
)  # fmt: skip
def test_a_split_skip_is_the_loop_as_written(f, args):
    def run(g):
        try:
            return g(*args)
        except Exception as e:  # noqa: BLE001 - the same error either way
            return type(e).__name__
    assert run(loop_capture.prepare(f)) == run(f)
