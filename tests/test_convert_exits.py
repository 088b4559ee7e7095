"""``break`` and ``continue`` in converted loops (:mod:`tapejit.frontend.convert.exits`): a loop that leaves on
a traced condition is one IR loop whose iterations after the exit keep every value, so the
code compiles once however the exit moves with the data; gradients against numpy references
(the same formula, written with a mask: tolerance 1e-12) and central differences (h = 1e-6,
~1e-8 relative on these smooth pieces); the loops that must keep their own ``break``."""

from __future__ import annotations

import warnings

import numpy as np

import tapejit as tj
from tapejit.frontend.convert.exits import without_break

from oracles import central

RNG = np.random.default_rng(20261207)


def _prefix(x, limit):
    """The mask of the elements before the first one past ``limit``."""
    past = np.flatnonzero(x > limit)
    stop = past[0] if past.size else x.size
    return np.arange(x.size) < stop


def test_break_on_a_traced_value_compiles_once_as_the_exit_moves():
    def f(x):
        s = 0.0
        for i in range(x.shape[0]):
            if x[i] > 3.0:
                break
            s += x[i] ** 2
        return s

    x0 = RNG.uniform(0, 1, 40)
    with warnings.catch_warnings():
        warnings.simplefilter("error", tj.GuardWarning)
        g = tj.compile(f, x0)
        for _ in range(30):
            x = RNG.uniform(0, 3.2, 40)  # the exit moves between calls (or never comes)
            np.testing.assert_allclose(g(x), np.where(_prefix(x, 3.0), 2 * x, 0.0),
                                       rtol=1e-12, atol=0)  # fmt: skip
    assert g._dispatcher.compiles == 1
    assert g.stats["convert"]["loops"] == 1 and not g.stats["convert"]["kept"]


def test_iterations_after_the_exit_have_no_cotangent_even_where_they_are_nan():
    def f(x):
        s = 0.0
        for i in range(x.shape[0]):
            if x[i] <= 0.0:  # log of what follows would be NaN: never taken, never seen
                break
            s = s + np.log(x[i]) * (i + 1)
        return s

    x = RNG.uniform(0.5, 2.0, 12)
    x[7] = -1.0
    x[9] = 0.0
    g = tj.compile(f, x)
    ref = np.where(np.arange(12) < 7, (np.arange(12) + 1) / np.abs(x + (x == 0)), 0.0)
    np.testing.assert_array_equal(np.isfinite(g(x)), True)
    np.testing.assert_allclose(g(x), ref, rtol=1e-12)
    y = RNG.uniform(0.5, 2.0, 12)  # no exit at all: every iteration counts
    np.testing.assert_allclose(g(y), (np.arange(12) + 1) / y, rtol=1e-12)
    assert g._dispatcher.compiles == 1


def test_break_in_a_nested_branch_with_statements_after_it():
    def f(x):
        e = 0.0
        n = 0.0
        for i in range(x.shape[0]):
            e = e + x[i] ** 2
            if x[i] > 0.0:
                if e > 4.0:
                    break
                n = n + x[i]
            e = e + 0.1 * n * x[i]
        return e

    for _ in range(5):
        x = RNG.normal(0, 1.2, 15)
        g = tj.compile(f, x)
        np.testing.assert_allclose(g(x), central(f, x), rtol=1e-7, atol=1e-8)


def test_an_inner_break_leaves_only_the_inner_loop():
    W = RNG.uniform(0.5, 1.5, (6, 9))

    def f(x):
        total = 0.0
        for r in range(W.shape[0]):
            acc = 0.0
            for c in range(W.shape[1]):
                acc = acc + W[r, c] * x[c]
                if acc > 2.0:  # each row stops where its running sum passes 2
                    break
            total = total + acc**2
        return total

    for _ in range(4):
        x = RNG.uniform(0, 0.6, 9)
        g = tj.compile(f, x)
        np.testing.assert_allclose(g(x), central(f, x), rtol=1e-7, atol=1e-8)


def test_newton_iterations_that_stop_on_convergence():
    def f(a):
        # cube roots by Newton's method, stopping once the step is small: a while-loop exit
        out = 0.0
        for k in range(a.shape[0]):
            y = 1.0
            for _ in range(60):
                step = (y**3 - a[k]) / (3 * y**2)
                y = y - step
                if abs(step) < 1e-13:
                    break
            out = out + y * (k + 1)
        return out

    a = RNG.uniform(0.5, 8.0, 5)
    g = tj.compile(f, a)
    ref = (np.arange(5) + 1) / (3 * np.cbrt(a) ** 2)
    np.testing.assert_allclose(g(a), ref, rtol=1e-10)
    b = RNG.uniform(0.5, 8.0, 5)
    np.testing.assert_allclose(g(b), (np.arange(5) + 1) / (3 * np.cbrt(b) ** 2), rtol=1e-10)
    assert g._dispatcher.compiles == 1


def test_break_with_element_writes_and_continue():
    def f(x):
        y = np.zeros_like(x)
        for i in range(x.shape[0]):
            if x[i] < 0.0:
                continue
            if x[i] > 2.5:
                break
            y[i] = x[i] ** 3
        return np.sum(y * np.arange(1.0, x.shape[0] + 1))

    for _ in range(5):
        x = RNG.normal(0.5, 1.5, 20)
        g = tj.compile(f, x)
        keep = _prefix(x, 2.5) & (x >= 0)
        np.testing.assert_allclose(g(x), np.where(keep, 3 * x**2 * np.arange(1, 21), 0.0),
                                   rtol=1e-12)  # fmt: skip


def test_continue_at_the_end_of_a_branch_is_converted():
    """``if c: continue`` + rest is ``if c: pass else: rest`` — the loop converts (the rewrite
    once never ran: such loops were traced iteration by iteration, with the right numbers)."""

    def f(x):
        e = 0.0
        for i in range(x.shape[0]):
            if x[i] < -1.0 or x[i] > 2.0:
                continue
            e += x[i] ** 2 * (i + 1)
        return e

    x = RNG.uniform(-3, 3, 30)
    g = tj.compile(f, x)
    assert g.stats["convert"]["loops"] == 1 and not g.stats["convert"]["kept"]
    keep = (x >= -1.0) & (x <= 2.0)
    np.testing.assert_allclose(g(x), np.where(keep, 2 * x * np.arange(1, 31), 0.0), rtol=1e-12)
    y = RNG.uniform(-3, 3, 30)
    keep = (y >= -1.0) & (y <= 2.0)
    np.testing.assert_allclose(g(y), np.where(keep, 2 * y * np.arange(1, 31), 0.0), rtol=1e-12)
    assert g._dispatcher.compiles == 1


def test_loops_that_keep_their_break_run_as_written():
    def searched(x):
        # the loop variable is read after the loop: the loop runs as written
        for i in range(x.shape[0]):
            if i * i > 20:
                break
        return x[i] ** 2

    def over_a_generator(x):
        s = 0.0
        for v in (float(t) for t in range(1000000)):  # no length: never run to its end
            if v > 3:
                break
            s = s + v * x[0]
        return s

    x = RNG.normal(size=8)
    np.testing.assert_allclose(tj.compile(searched, x)(x), np.eye(8)[5] * 2 * x[5])
    np.testing.assert_allclose(tj.compile(over_a_generator, x)(x), np.eye(8)[0] * 6.0)


def test_without_break_rewrites_every_exit():
    import ast

    src = """
for i in r:
    a = 1
    if c:
        if d:
            break
        b = 2
    else:
        break
    e = 3
"""
    loop = ast.parse(src).body[0]
    body = without_break(loop.body, "flag")
    text = ast.unparse(ast.Module(body, []))
    assert "break" not in text
    assert text.count("flag = True") == 2
    assert "if not flag:" in text  # what follows a branch that may break is guarded
