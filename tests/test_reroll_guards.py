"""A Python loop's guards re-rolled (tapejit/passes/reroll/guards.py): a run of per-iteration
guards becomes one vector guard whose elements keep the unrolled guards' numbers, so the loop
re-rolls; the re-rolled trace against the unrolled one (interpreter), compiled gradients
against central differences, failures reporting the guard the unrolled code reports, a retrace
that forces one guard's outcome, and guards that must not roll."""

from __future__ import annotations

import numpy as np
import pytest

import tapejit as tj
from tapejit.ad import autodiff
from tapejit.core import interpret, ir
from tapejit.frontend.loops import loop_source
from tapejit.frontend import tracing
from tapejit.passes.reroll import driver as rr
from tapejit.passes.reroll import guards as rg

RNG = np.random.default_rng(11)


@pytest.fixture(autouse=True)
def unrolled_tracing(monkeypatch):
    """The pass on, loops traced unrolled (not captured while tracing)."""
    monkeypatch.setattr(rr, "ENABLED", True)
    monkeypatch.setattr(loop_source, "ENABLED", False)


def traced(f, *xs, forced=None):
    return tracing.trace(f, list(xs), list(range(len(xs))), forced=forced)


def check(f, *xs, rolled=None, loops=None):
    """Re-roll ``f``'s trace: the guards keep their outcomes and sources number by number, the
    values and gradients equal the unrolled trace's (interpreter), the compiled gradient
    matches central differences. Returns the pass's statistics."""
    g = traced(f, *xs)
    r, stats = rr.reroll(g)
    if rolled is not None:
        assert stats["guards"] == rolled, stats
    if loops is not None:
        assert stats["loops"] == loops, stats
    assert [(e, w) for _, e, w in ir.flat_guards(r.guards)] == [(e, w) for _, e, w in g.guards]
    for c, e, _ in r.guards:  # each holds for the example, element by element
        assert np.all(interpret.evaluate(r.replace(outputs=(c,), guards=()), list(xs))[0] == e)
    want = interpret.evaluate(g, list(xs))
    got = interpret.evaluate(r, list(xs))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-13, atol=1e-13)
    gw = interpret.evaluate(autodiff.vjp_graph(g, None), list(xs))
    gg = interpret.evaluate(autodiff.vjp_graph(r, None), list(xs))
    for a, b in zip(gw, gg):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)
    grad = tj.compile(f, *xs, argnums=tuple(range(len(xs))), cache=False)
    val, gs = grad.value_and_grad(*xs)
    np.testing.assert_allclose(val, want[0], rtol=1e-12, atol=1e-12)
    gs = gs if isinstance(gs, tuple) else (gs,)
    for k, x in enumerate(xs):
        d = RNG.normal(size=np.shape(x))
        plus, minus = list(xs), list(xs)
        plus[k], minus[k] = x + 1e-6 * d, x - 1e-6 * d
        fd = (f(*plus) - f(*minus)) / 2e-6
        np.testing.assert_allclose(np.sum(gs[k] * d), fd, rtol=1e-5, atol=1e-7)
    return stats


def relu_energy(x):
    e = 0.0
    for i in range(len(x)):
        e = e + max(x[i], 0.0) ** 2  # Python's max: a guard per iteration
    return e


def test_python_max_in_an_element_loop_rolls():
    x = RNG.uniform(0.1, 1.0, 50)
    stats = check(relu_energy, x, rolled=50, loops=1)
    assert stats["iterations"] == 50
    r, _ = rr.reroll(traced(relu_energy, x))
    assert len(r.guards) == 1 and r.guards[0][0].shape == (50,)
    assert "guards 1-50:" in ir.format_graph(r)


@pytest.mark.parametrize("where", [0, 17, 49])
def test_a_failing_element_reports_its_own_guard_number(where):
    x = RNG.uniform(0.1, 1.0, 50)
    grad = tj.compile(relu_energy, x, cache=False, on_guard_failure="raise")
    np.testing.assert_allclose(grad(x), 2 * x, rtol=1e-15)
    y = x.copy()
    y[where] = -0.5
    with pytest.raises(tj.GuardError, match=f"guard {where + 1} at .*was compiled for the outcome False"):
        grad(y)


def test_a_failed_element_recompiles_and_is_right():
    x = RNG.uniform(0.1, 1.0, 64)
    grad = tj.compile(relu_energy, x, cache=False)
    y = x.copy()
    y[[3, 40]] = -0.25
    want = 2 * y
    want[[3, 40]] = 0.0
    np.testing.assert_allclose(grad(y), want, rtol=1e-15)
    np.testing.assert_allclose(grad(x), 2 * x, rtol=1e-15)


def test_forcing_one_outcome_keeps_the_numbers():
    """A retrace that follows native code at guard 31 (tapejit.runtime.dispatch): the guards
    roll into one vector with an outcome per element, and every number keeps its guard's."""
    x = RNG.uniform(0.1, 1.0, 60)
    g = traced(relu_energy, x, forced={31: True})
    assert g.guards[30][1] is True and all(e is False for k, (_, e, _) in enumerate(g.guards) if k != 30)
    r, stats = rr.reroll(g)
    assert stats["guards"] == 60
    assert [c.shape for c, _, _ in r.guards] == [(60,)]
    assert [e for _, e, _ in ir.flat_guards(r.guards)] == [e for _, e, _ in g.guards]
    assert "== [1 True, 59 False]" in ir.format_graph(r)


def between(x):
    e = 0.0
    for i in range(len(x)):
        if -1.0 < x[i] < 2.0:  # two guards an iteration: their numbers interleave
            e = e + x[i] ** 2
    return e


def test_two_guards_of_different_outcomes_an_iteration_roll():
    def either(x):
        e = 0.0
        for i in range(len(x)):
            if x[i] > 5.0 or x[i] > 0.0:  # False, then True
                e = e + x[i] ** 2
        return e

    check(either, RNG.uniform(0.1, 1, 30), rolled=60, loops=1)


def test_two_guards_an_iteration_roll_interleaved():
    x = RNG.uniform(0.1, 1, 30)
    check(between, x, rolled=60, loops=1)
    r, _ = rr.reroll(traced(between, x))
    assert [c.shape for c, _, _ in r.guards] == [(60,)]
    grad = tj.compile(between, x, cache=False, on_guard_failure="raise")
    for value, number in ((3.0, 2 * 7 + 2), (-2.0, 2 * 7 + 1)):  # x[7] < 2 fails; -1 < x[7] fails
        y = x.copy()
        y[7] = value
        with pytest.raises(tj.GuardError, match=f"guard {number} at "):
            grad(y)


def test_mixed_outcomes_roll_with_an_outcome_per_element():
    """relu of inputs of both signs: one vector guard with each element's outcome; the
    iterations that add (the positive ones, at positions no step describes) re-roll reading
    their elements through a table."""
    x = np.concatenate([RNG.uniform(0.1, 1, 30), -RNG.uniform(0.1, 1, 25), RNG.uniform(0.1, 1, 5)])
    RNG.shuffle(x)
    stats = check(relu_energy, x, rolled=60)
    r, _ = rr.reroll(traced(relu_energy, x))
    assert [c.shape for c, _, _ in r.guards] == [(60,)]
    assert stats["loops"] >= 1
    grad = tj.compile(relu_energy, x, cache=False, on_guard_failure="raise")
    np.testing.assert_allclose(grad(x), 2 * np.maximum(x, 0.0), rtol=1e-15)
    k = int(np.flatnonzero(x < 0)[3])
    y = x.copy()
    y[k] = 0.5  # a negative element turned positive: its own guard fails
    with pytest.raises(tj.GuardError, match=f"guard {k + 1} at .*outcome True"):
        grad(y)


def test_shapes_of_guarded_loops():
    def clipped(x, lo):  # a threshold per element from a numpy table
        e = 0.0
        for i in range(len(x)):
            if x[i] > lo[i]:
                e = e + (x[i] - lo[i]) ** 2
        return e

    lo = RNG.uniform(-1.0, -0.5, 40)
    check(lambda x: clipped(x, lo), RNG.uniform(0.1, 1, 40), rolled=40, loops=1)

    def reversed_strided(x):
        e = 1.0
        for i in range(len(x) - 1, 0, -2):
            d = x[i] - x[i - 1]
            if d * d < 4.0:  # an expression of two reads
                e = e * 0.5 + np.sin(d)
        return e

    check(reversed_strided, RNG.uniform(0.1, 1, 80), rolled=40, loops=1)

    def stored(x):  # a map: y[i] = ... with a guard
        y = np.zeros_like(x)
        for i in range(len(x)):
            y[i] = x[i] if x[i] > 0.0 else 0.1 * x[i]
        return np.sum(y * y)

    check(stored, RNG.uniform(0.1, 1, 32), rolled=32, loops=1)

    def rows(p):  # element reads of a 2-D array, the guard on a row's norm
        e = 0.0
        for i in range(len(p)):
            r2 = p[i, 0] ** 2 + p[i, 1] ** 2
            if r2 < 9.0:
                e = e + 1.0 / r2
        return e

    check(rows, RNG.uniform(0.5, 1.5, (30, 2)), rolled=30, loops=1)


def test_guards_that_must_not_roll():
    def carried(x):  # the guard reads the running sum: every outcome depends on the past
        e = 0.0
        for i in range(len(x)):
            e = e + x[i]
            if e > 1e9:
                e = e * 0.5
        return e

    stats = check(carried, RNG.uniform(0.1, 1, 30))
    assert stats["guards"] == 0 and stats["loops"] == 0


    def squares(x):  # a read that does not move affinely
        e = 0.0
        for i in range(6):
            if x[i * i] > 0.0:
                e = e + x[i * i]
        return e

    assert check(squares, RNG.uniform(0.1, 1, 30))["guards"] == 0
    x = RNG.uniform(0.1, 1, 30)
    g = traced(relu_energy, x[:10])  # fewer than MIN_RUN
    assert rr.reroll(g)[1]["guards"] == 0


def test_the_same_condition_every_iteration_is_left_alone():
    def f(x):
        s = np.sum(x)
        e = 0.0
        for i in range(len(x)):
            if s > 0.0:  # the same node: one guard per iteration, nothing moves
                e = e + x[i] ** 2
        return e

    x = RNG.uniform(0.1, 1, 20)
    g = traced(f, x)
    assert len(g.guards) == 20
    r, stats = rr.reroll(g)
    assert stats["guards"] == 0


def test_compiled_code_flat_in_the_trip_count():
    """Guarded element loops no longer grow the compiled code with the trip count: the same
    kernels and the same LLVM text size (but for the numbers in it) at n = 40 and 400."""
    kernels, lines = [], []
    for n in (40, 400):
        x = RNG.uniform(0.1, 1, n)
        grad = tj.compile(relu_energy, x, cache=False)
        np.testing.assert_allclose(grad(x), 2 * x, rtol=1e-15)
        kernels.append(grad.stats["kernels"])
        lines.append(len(grad.ir("llvm").splitlines()))
    assert kernels[0] == kernels[1] and lines[0] == lines[1], (kernels, lines)


def test_of_several_failing_guards_the_first_is_reported():
    """Guards are checked in the order of their numbers: a vector computed after a later
    scalar guard does not let that one report first (the unrolled code reports guard 1)."""

    def after(x):
        e = 0.0
        for i in range(len(x)):
            e = e + max(x[i], 0.0) ** 2  # guards 1-20, rolled
        if x[0] > 0.0:  # guard 21, computed before the vector
            e = e + x[0]
        return e

    def wrapped(x):
        e = 0.0
        for i in range(len(x)):
            if x[i] * x[(i + 1) % len(x)] > 0.0:  # guards 1-39 roll, guard 40 wraps around
                e = e + x[i] ** 2
        return e

    for f, n in ((after, 20), (wrapped, 40)):
        x = np.linspace(0.1, 1.0, n)
        grad = tj.compile(f, x, cache=False, on_guard_failure="raise")
        assert grad.stats["reroll"]["guards"] >= n - 1
        y = x.copy()
        y[0] = -1.0
        with pytest.raises(tj.GuardError, match="guard 1 at "):
            grad(y)


def test_a_failed_guard_on_a_view_leaves_the_outputs_untouched():
    """A rolled condition that is a view into an array computed before the loop: the outputs
    are written only after it is checked (tests/test_guards.py asks it of every guard)."""

    def f(X):
        m = np.any(X > 0.0, axis=1)
        e = 0.0
        for i in range(10, 60):
            if m[i]:
                e = e + X[i, 0] ** 2
        return e

    X = RNG.uniform(0.1, 1, (80, 2))
    grad = tj.compile(f, X, cache=False, on_guard_failure="raise")
    assert grad.stats["reroll"]["guards"] == 50
    Y = X.copy()
    Y[30] = -1.0
    out = np.full((80, 2), 7.0)
    with pytest.raises(tj.GuardError, match="guard 21 at "):
        grad(Y, out=out)
    assert np.all(out == 7.0)


def test_a_mask_read_through_a_table_is_left_to_its_guards():
    """A bool mask read at rows from a table (``take`` reads f64 arrays only): its guards stay
    scalar, the rest of the trace still re-rolls, and the values are right."""
    n = 60
    idx = RNG.integers(0, n, n)

    def f(x):
        m = x > 0
        e = 0.0
        for k in range(n):
            if m[idx[k]]:
                e = e + x[k]
            else:
                e = e + 2 * x[k]
        return e

    x = RNG.normal(size=n)
    g = traced(f, x)
    r, stats = rr.reroll(g)  # no exception: the pass itself works on it
    assert [e for _, e, _ in ir.flat_guards(r.guards)] == [e for _, e, _ in g.guards]
    check(f, x)
