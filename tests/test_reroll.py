"""Re-rolling unrolled Python element loops (tapejit/passes/reroll/driver.py): the re-rolled trace
against the unrolled one (values and gradients by the IR interpreter, the oracle), compiled
gradients against central differences, which loop shapes are re-rolled and which are left
unrolled, and compiled code that stops growing with the trip count."""

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

RNG = np.random.default_rng(5)


@pytest.fixture(autouse=True, params=[True, False], ids=["sums", "loops"])
def reduce(request, monkeypatch):
    """Every test with the pass on in tj.compile, and with sums as reductions (the default)
    and as sequential loops (exact); loops traced unrolled (not captured while tracing,
    tests/test_loop_capture.py): this pass is what is tested."""
    monkeypatch.setattr(rr, "ENABLED", True)
    monkeypatch.setattr(loop_source, "ENABLED", False)
    monkeypatch.setattr(rr, "REDUCE", request.param)
    return request.param


def traced(f, *xs):
    return tracing.trace(f, list(xs), list(range(len(xs))))


def loops(g) -> int:
    return sum(n.op == Op.LOOP for n in g.nodes)


def against_unrolled(f, *xs, iterations=None, n_loops=None):
    """Re-roll ``f``'s trace; its values and gradients equal the unrolled trace's (interpreter)
    and the compiled gradient matches central differences. Returns the pass's statistics."""
    g = traced(f, *xs)
    r, stats = rr.reroll(g)
    if iterations is not None:
        assert stats["iterations"] == iterations, stats
    if n_loops is not None:
        assert stats["loops"] == n_loops, stats
        assert loops(r) - loops(g) == n_loops - stats["reductions"]
    want = interpret.evaluate(g, list(xs))
    got = interpret.evaluate(r, list(xs))
    for a, b in zip(want, got):
        np.testing.assert_allclose(b, a, rtol=1e-13, atol=1e-13)
    gw = interpret.evaluate(autodiff.vjp_graph(g, None), list(xs))
    gg = interpret.evaluate(autodiff.vjp_graph(r, None), list(xs))
    for a, b in zip(gw, gg):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)
    # compiled (with the pass, as tj.compile runs it) against central differences
    grad = tj.compile(f, *xs, argnums=tuple(range(len(xs))), cache=False)
    val, gs = grad.value_and_grad(*xs)
    np.testing.assert_allclose(val, want[0], rtol=1e-12, atol=1e-12)
    gs = gs if isinstance(gs, tuple) else (gs,)
    assert grad.stats["reroll"]["loops"] == stats["loops"]
    for k, x in enumerate(xs):
        d = RNG.normal(size=np.shape(x))
        h = 1e-6
        plus = list(xs)
        minus = list(xs)
        plus[k] = x + h * d
        minus[k] = x - h * d
        fd = (f(*plus) - f(*minus)) / (2 * h)
        np.testing.assert_allclose(np.sum(gs[k] * d), fd, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(gs[k], gw[1 + k], rtol=1e-10, atol=1e-12)
    return stats


# -- loop-carried scalars ------------------------------------------------------------------------


def chain_energy(x):
    s = 0.0
    for i in range(len(x) - 1):
        d = x[i + 1] - x[i]
        s = s + np.exp(-d * d) + 0.5 * d
    return s


def test_neighbour_energy_one_loop():
    against_unrolled(chain_energy, RNG.random(30), iterations=29, n_loops=1)


def test_product_accumulator():
    def f(x):
        p = 1.0
        for i in range(len(x)):
            p = p * (1.0 + 0.1 * np.sin(x[i]))
        return p

    # the first iteration traces as 1.0 * t_0 = t_0 (folded): it stays as it is, the loop
    # starts from it
    against_unrolled(f, RNG.random(24), iterations=23, n_loops=1)


def test_decaying_accumulator_with_iteration_number():
    def f(x):  # the fuzzer's pyloop: a carry through mul then add, i used as a number
        v = 0.0
        for i in range(len(x)):
            v = v * 0.5 + np.sin(x[i]) * (i + 1.0)
        return v

    against_unrolled(f, RNG.random(25), iterations=24, n_loops=1)  # 0.0 * 0.5 folds in the first


def test_carry_inside_nonlinearity():
    def f(x):
        h = 0.3
        for i in range(len(x)):
            h = np.tanh(0.9 * h + x[i])
        return h * h

    against_unrolled(f, RNG.random(24), iterations=23, n_loops=1)  # 0.9 * 0.3 folds in the first


def test_reversed_and_strided_ranges():
    def rev(x):
        e = 0.0
        for i in reversed(range(len(x))):
            e = e * 0.9 + x[i] ** 2
        return e

    def strided(x):
        e = 0.0
        for i in range(1, len(x) - 1, 3):
            e = e + x[i] * x[i + 1]
        return e

    against_unrolled(rev, RNG.random(20), iterations=19, n_loops=1)  # 0.0 * 0.9 folds in the first
    against_unrolled(strided, RNG.random(60), iterations=20, n_loops=1)


def test_two_dimensional_reads_and_params():
    def f(pos, w):
        e = 0.0
        c = np.sum(w)  # computed before the loop: a loop-invariant param
        for i in range(pos.shape[0]):
            e = e + c * (pos[i, 0] - pos[i, 1]) ** 2 + w[1] * pos[i, 1]
        return e

    against_unrolled(f, RNG.random((20, 2)), RNG.random(3), iterations=20, n_loops=1)


def test_array_carry_rows():
    def f(x):  # x: (n, 3); the carry is a row vector
        h = np.zeros(3) + x[0]
        for i in range(1, x.shape[0]):
            h = np.tanh(h * 0.5 + x[i, :])
        return np.sum(h * h)

    against_unrolled(f, RNG.random((20, 3)), iterations=19, n_loops=1)


def test_body_that_differs_on_the_last_iteration():
    def f(x):
        e = 0.0
        n = len(x)
        for i in range(n):
            if i == n - 1:  # a Python-level (static) condition
                e = e + np.cos(x[i])
            else:
                e = e + np.sin(x[i]) * x[i]
        return e

    stats = against_unrolled(f, RNG.random(20))
    assert stats["loops"] == 1 and stats["iterations"] == 19


def test_two_loops_one_after_the_other():
    def f(x):
        e = 0.0
        for i in range(len(x)):
            e = e + np.sin(x[i])
        for i in range(len(x) - 1):
            e = e + x[i] * x[i + 1]
        return e

    against_unrolled(f, RNG.random(20), iterations=39, n_loops=2)


def test_short_loops_stay_unrolled():
    def f(x):
        e = 0.0
        for i in range(len(x)):
            e = e + np.sin(x[i])
        return e

    against_unrolled(f, RNG.random(rr.MIN_RUN - 1), iterations=0, n_loops=0)
    against_unrolled(f, RNG.random(rr.MIN_RUN), iterations=rr.MIN_RUN, n_loops=1)


# -- numbers that vary per iteration: a constant table ------------------------------------------

TABLE = RNG.uniform(-1.0, 1.0, 40)
SIGNED_ZEROS = np.array([0.0, -0.0] * 20)


def test_numbers_per_iteration_are_read_from_a_table():
    """A number that differs between iterations and is not the loop index (a numpy table read
    at the index, a factor Python computes) becomes a constant input of the loop, read per
    iteration: exactly the numbers of the unrolled trace, the sign of a zero included."""

    def log_density(x):
        lp = 0.0
        for i in range(len(x)):
            z = (x[i] - TABLE[i]) / (1.5 + TABLE[i])
            lp = lp - 0.5 * z * z
        return lp

    def geometric(x):
        p = 1.0
        for i in range(len(x)):
            p = p * (1.0 + 0.9**i * np.sin(x[i]))
        return p

    def signs(x):
        e = 0.0
        for i in range(len(x)):
            e = e + np.arctan2(SIGNED_ZEROS[i], x[i] - 2.0)  # +pi or -pi
        return e * e + np.sum(x)

    def weighted_map(x):
        y = np.zeros_like(x)
        for i in range(len(x)):
            y[i] = x[i] * TABLE[i]
        return np.sum(y * y)

    for f in (log_density, geometric, signs, weighted_map):
        stats = against_unrolled(f, RNG.random(40), n_loops=1)
        assert stats["iterations"] >= 38, (f.__name__, stats)
    g, _ = rr.reroll(traced(signs, RNG.random(40)))
    # arctan2(+-0, -2) = +-pi: 20 of each cancel; lost signs would give (40 pi)^2
    assert abs(interpret.evaluate(g, [np.zeros(40)])[0]) < 1e-9


# -- non-affine indices and guards stay unrolled ------------------------------------------------


def test_non_affine_indices_read_through_a_table():
    """x[idx[i]] of a numpy idx and x[i * i]: the rows each iteration reads become a table
    (take); short loops stay unrolled."""
    idx = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7])
    long_idx = RNG.integers(0, 30, 60)

    def gathered_long(x):
        e = 0.0
        for i in range(len(long_idx)):
            e = e + np.sin(x[int(long_idx[i])]) * x[i % 30]
        return e

    def quadratic_long(x):
        e = 1.0
        for i in range(20):
            e = e * 0.5 + np.tanh(x[i * i])  # a carry: a sequential loop reading a table
        return e

    def rows(p):  # a table of rows of a 2-D array, one column each
        e = 0.0
        for i in range(len(long_idx)):
            e = e + p[int(long_idx[i]), 1] * p[int(long_idx[-1 - i]), 0]
        return e

    stats = against_unrolled(gathered_long, RNG.random(30))
    assert stats["iterations"] >= 50, stats  # x[i % 30] wraps around: two runs
    stats = against_unrolled(quadratic_long, RNG.random(400), n_loops=1)
    assert stats["iterations"] >= 18, stats
    stats = against_unrolled(rows, RNG.random((30, 2)))
    assert stats["iterations"] >= 58, stats

    def squares(x):
        e = 0.0
        for i in range(4):
            e = e + x[i * i]
        for i in range(4):
            e = e + x[i * i + 1]
        return e

    def gathered(x):
        e = 0.0
        for i in range(len(idx)):
            e = e + np.sin(x[int(idx[i])])
        return e

    against_unrolled(squares, RNG.random(17), iterations=0, n_loops=0)
    against_unrolled(gathered, RNG.random(10), iterations=0, n_loops=0)

    def quadratic(x):
        e = 0.0
        for i in range(10):
            e = e + x[i * i]
        return e

    against_unrolled(quadratic, RNG.random(100), iterations=0, n_loops=0)


def test_recurrence_on_the_array_is_a_loop_and_a_map():
    """y[i] = f(y[i - 1], x[i]): the read of y[i - 1] is the value just stored (ops.index
    forwards it), so the values form a sequential loop; its carries, stored into y, are
    exposed as stacked outputs, and a second round makes the stores one map. Short ones stay
    unrolled."""

    def smooth(x):
        y = np.zeros_like(x)
        y[0] = x[0]
        for i in range(1, len(x)):
            y[i] = 0.5 * y[i - 1] + np.tanh(x[i])
        return np.sum(y * y)

    def euler(p):  # x' = -x^3 + p_i, explicit Euler steps stored per step
        dt = 0.05
        x = np.zeros_like(p, shape=(len(p) + 1,))
        x[0] = 1.0
        for i in range(len(p)):
            x[i + 1] = x[i] + dt * (p[i] - x[i] ** 3)
        return np.sum(x * x)

    def rows(x):  # a carried vector stored as rows
        h = np.zeros_like(x)
        w = np.array([[0.5, -0.2, 0.1], [0.3, 0.4, -0.1], [0.0, 0.2, 0.6]])
        for i in range(1, x.shape[0]):
            h[i] = np.tanh(w @ h[i - 1] + x[i])
        return np.sum(h * h)

    stats = against_unrolled(smooth, RNG.random(40), n_loops=2)
    assert stats["iterations"] >= 70
    stats = against_unrolled(euler, RNG.random(40), n_loops=2)
    assert stats["iterations"] >= 70
    stats = against_unrolled(rows, RNG.random((30, 3)), n_loops=2)
    assert stats["iterations"] >= 50
    against_unrolled(smooth, RNG.random(12), iterations=0)


def test_guards_of_alternating_outcomes_leave_iterations_unrolled():
    """A guard per iteration whose outcome alternates: the guards roll into one vector (an
    outcome per element: tests/test_reroll_guards.py), but the iterations — 10 of each body,
    fewer than a run or a group of terms needs — stay unrolled."""

    def f(x):
        e = 0.0
        for i in range(len(x)):
            d = x[i] - 0.5
            if d > 0:  # a guard on every iteration
                e = e + d * d
            else:
                e = e - d
        return e

    x = 0.5 + RNG.uniform(0.1, 0.4, 20) * (-1.0) ** np.arange(20)
    g = traced(f, x)
    assert len(g.guards) == 20
    r, stats = rr.reroll(g)
    assert stats["loops"] == 0 and stats["guards"] == 20 and len(r.guards) == 1
    grad = tj.compile(f, x, cache=False)
    np.testing.assert_allclose(grad.value_and_grad(x)[0], f(x), rtol=1e-13)
    y = RNG.random(20)  # other branches: a retrace, still right
    d = RNG.normal(size=20)
    fd = (f(y + 1e-6 * d) - f(y - 1e-6 * d)) / 2e-6
    np.testing.assert_allclose(np.sum(grad(y) * d), fd, rtol=1e-5, atol=1e-7)


def test_guard_before_the_loop_is_kept():
    def f(x):
        s = np.sum(x)
        scale = 2.0 if s > 1.0 else 0.5  # a guard outside the loop
        e = 0.0
        for i in range(len(x)):
            e = e + scale * np.sin(x[i])
        return e

    x = RNG.random(20)
    g = traced(f, x)
    r, stats = rr.reroll(g)
    assert stats["loops"] == 1 and len(r.guards) == len(g.guards) == 1
    against_unrolled(f, x)


# -- element writes ------------------------------------------------------------------------------


def test_fill_loop_is_a_map():
    def f(x):
        y = np.zeros_like(x)
        for i in range(len(x)):
            y[i] = x[i] * x[i]
        return np.sum(np.sin(y))

    against_unrolled(f, RNG.random(20), iterations=20, n_loops=1)


def test_fill_with_neighbours_reversed_and_strided():
    def f(x):
        y = np.zeros_like(x, shape=(len(x) - 1,))
        for i in range(len(x) - 1):
            y[i] = np.exp(-((x[i + 1] - x[i]) ** 2))
        z = np.zeros_like(x)
        for i in range(len(x) - 1, -1, -1):
            z[i] = np.cos(x[len(x) - 1 - i])
        w = np.zeros_like(x)
        for i in range(0, len(x), 2):
            w[i] = x[i] * 3.0
        return np.sum(y * y) + np.sum(z * x) + np.sum(w * w)

    against_unrolled(f, RNG.random(40), iterations=39 + 40 + 20, n_loops=3)


def test_accumulate_into_elements():
    def f(x):
        y = np.ones_like(x)
        for i in range(len(x)):
            y[i] += np.sin(x[i])  # read-modify-write of the element written
        g = np.zeros_like(x, shape=(2,))
        for i in range(len(x)):
            g[0] += x[i] * x[i]  # the same element every time: a carried array
        return np.sum(y * y) + g[0] * g[0]

    against_unrolled(f, RNG.random(20), iterations=40, n_loops=2)


def test_several_writes_an_iteration(reduce):
    """Writes of one iteration into positions of their own (r[i, 0], r[i, 1]): one loop
    writing each stage at once. Additions into positions the next iteration adds to as well
    (f[e] -= t; f[e + 1] += t, element assembly): one loop when sums may be reassociated
    (the default), else left as traced. Writes that overwrite each other: left as traced."""

    def components(x):
        r = np.zeros_like(x, shape=(len(x) // 2, 2))
        for i in range(len(x) // 2):
            r[i, 0] = x[2 * i] * x[2 * i] - x[2 * i + 1]
            r[i, 1] = np.sin(x[2 * i]) * x[2 * i + 1]
        return np.sum(r * r)

    def assembly(x):
        f = x * 0.25
        for e in range(len(x) - 1):
            h = x[e + 1] - x[e]
            t = h / (1.0 + h * h)
            f[e] -= t
            f[e + 1] += t
        return np.sum(f * f * f)

    def overwriting(x):
        y = np.zeros_like(x)
        for i in range(len(x) - 1):
            y[i] = np.sin(x[i])
            y[i + 1] = x[i] * x[i + 1]
        return np.sum(y * y)

    stats = against_unrolled(components, RNG.random(40), n_loops=1)
    assert stats["iterations"] >= 18
    stats = against_unrolled(assembly, RNG.random(30), n_loops=1 if reduce else 0)
    assert stats["iterations"] >= (27 if reduce else 0)
    against_unrolled(overwriting, RNG.random(30), iterations=0, n_loops=0)


def test_moving_write_into_another_array_is_not_a_stage():
    """Found by review: a map iteration whose update writes a copy at the loop index
    (``z[i] = ...``, a one-hot ``e[i] = 1``) moved that write with the loop as if it were a
    write into the mapped array, and the loop wrote one position only. Left as traced."""

    def local_write(x):
        z0 = x * 1.0
        y = np.zeros_like(x)
        for i in range(len(x)):
            z = z0.copy()
            z[i] = x[i] * 3.0
            y[i] = np.sum(z * x)
        return np.sum(y * y)

    def one_hot(x):
        a = np.outer(x, x[::-1]) * 0.01
        y = np.zeros_like(x)
        for i in range(len(x)):
            e = np.zeros_like(x)
            e[i] = 1.0
            y[i] = np.sum((a @ e) * x)
        return np.sum(y * y)

    against_unrolled(local_write, RNG.random(20), n_loops=0)
    against_unrolled(one_hot, RNG.random(20), n_loops=0)


def test_rows_of_a_matrix_and_columns():
    def f(x):  # x: (n, 3)
        y = np.zeros_like(x)
        for i in range(x.shape[0]):
            y[i, :] = np.tanh(x[i, :]) * 2.0
        z = np.zeros_like(x, shape=(3, x.shape[0]))
        for i in range(x.shape[0]):
            z[:, i] = x[i] * x[i]
        return np.sum(y * y) + np.sum(z * np.arange(3.0)[:, None])

    against_unrolled(f, RNG.random((20, 3)), iterations=40, n_loops=2)


# -- nested loops --------------------------------------------------------------------------------


def triangle(pos):
    n = pos.shape[0]
    e = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            dx = pos[i, 0] - pos[j, 0]
            dy = pos[i, 1] - pos[j, 1]
            e = e + 1.0 / (dx * dx + dy * dy + 0.1)
    return e


def test_triangular_pair_loop_inner_loops_rerolled():
    """Every inner loop is re-rolled, the short rows at the end of the triangle too (down to
    MIN_SHORT_RUN iterations: their body is the long rows' body, so they share its kernels)."""
    n = 24
    stats = against_unrolled(triangle, RNG.random((n, 2)))
    inner = [n - 1 - i for i in range(n) if n - 1 - i >= rr.MIN_SHORT_RUN]
    # with sums as reductions the rows' sums are then one flat sum over the triangle
    # (tapejit/passes/reroll/ragged.py): one more loop, of the rows it sums
    outer = [n - 1 - i for i in range(n) if n - 1 - i >= rr.MIN_RUN]
    ragged = stats["loops"] - len(inner)
    assert ragged == (1 if rr.REDUCE else 0), stats
    assert stats["iterations"] - sum(inner) in ((0,) if not ragged else range(len(outer), n))


def reversed_triangle(pos):
    e = 0.0
    for i in reversed(range(len(pos))):
        for j in range(i + 1, len(pos)):
            d = pos[i] - pos[j]
            e = e + np.exp(-d * d)
    return e


def test_short_rows_before_the_long_ones_are_rerolled_too():
    """The short rows come first here (i from n-1 down): the pairs are re-rolled whatever the
    order — as one loop reading its rows through tables (a row of fewer than MIN_RUN
    iterations gives no affine run to start from)."""
    n = 22
    stats = against_unrolled(reversed_triangle, RNG.random(n))
    inner = [n - 1 - i for i in range(n) if n - 1 - i >= rr.MIN_SHORT_RUN]
    assert stats["iterations"] >= sum(inner) and 1 <= stats["loops"] <= len(inner), stats


def test_short_loops_with_a_body_of_their_own_stay_unrolled():
    """A short loop re-rolls only with the body of a long loop re-rolled in the same trace."""

    def f(x):
        e = 0.0
        for i in range(len(x)):  # a long loop: re-rolled
            e = e + np.sin(x[i])
        for i in range(rr.MIN_SHORT_RUN + 2):  # short, another body: stays unrolled
            e = e + np.cos(x[i]) * x[i + 1]
        return e

    against_unrolled(f, RNG.random(rr.MIN_RUN + 4), iterations=rr.MIN_RUN + 4, n_loops=1)


# -- compiled code size stops growing ------------------------------------------------------------


def _functions(grad) -> int:
    return grad.ir("llvm").count("define ")


@pytest.mark.parametrize(
    "model",
    [
        lambda n: chain_energy,
        lambda n: lambda x: _fill(x),
    ],
    ids=["chain_energy", "fill"],
)
def test_code_size_flat_in_n(model):
    sizes, fns = [], []
    for n in (40, 160, 640):
        x = RNG.random(n)
        grad = tj.compile(model(n), x, cache=False)
        assert grad.stats["reroll"]["loops"] == 1
        sizes.append(grad.stats["nodes"]["opt"])
        fns.append(_functions(grad))
    assert len(set(sizes)) == 1, sizes
    assert len(set(fns)) == 1, fns


def _fill(x):
    y = np.zeros_like(x)
    for i in range(len(x)):
        y[i] = x[i] * x[i]
    return np.sum(y * np.cos(y))


def test_switched_off(monkeypatch):
    monkeypatch.setattr(rr, "ENABLED", False)
    x = RNG.random(20)
    grad = tj.compile(chain_energy, x, cache=False)
    assert grad.stats["reroll"]["loops"] == 0
    assert " = loop " not in grad.ir("grad")


def test_stages_show_the_loop(monkeypatch):
    def f(x):
        e = 0.0
        for i in range(len(x)):
            e = np.tanh(e + x[i])
        return e

    x = RNG.random(20)
    grad = tj.compile(f, x, cache=False)
    for stage in ("trace", "grad", "opt", "plan"):  # re-rolled right after tracing
        assert " = loop " in grad.ir(stage) and "body:" in grad.ir(stage), stage
    stats = grad.stats["reroll"]
    assert stats["iterations"] == 20 and stats["loops"] == 1
    monkeypatch.setattr(rr, "ENABLED", False)
    unrolled = tj.compile(f, x, cache=False)
    assert grad.stats["nodes"]["trace"] < unrolled.stats["nodes"]["trace"]


# -- generated loop shapes -------------------------------------------------------------------------

_RANGES = ["range(n)", "range(1, n - 1)", "range(n - 1, -1, -1)", "range(0, n - 2, 2)"]
_READS = ["x[i]", "x[n - 1 - i]", "x[i] * x[i + 1] if i + 1 < n else x[i]", "y[i, 1] - y[i, 0]"]
_BODIES = [
    "e = e + np.exp(-({r}) ** 2)",
    "e = e * 0.75 + np.sin({r})",
    "e = np.tanh(e + {r} * c)",
    "e = e - ({r}) / (1.0 + ({r}) ** 2)",
    "out[i] = np.cos({r}) * c",
    "out[i] += ({r}) ** 3",
]


@pytest.mark.parametrize("body", _BODIES)
@pytest.mark.parametrize("rng", _RANGES)
@pytest.mark.parametrize("read", _READS)
def test_generated_loops(body, rng, read):
    """Loop shapes from a small grammar, each against the unrolled trace and finite
    differences (the same checks as above); a last iteration that differs (``i + 1 < n``) or
    a range shorter than MIN_RUN is left as it is, the rest re-rolled."""
    src = (
        "def f(x, y):\n"
        "    n = len(x)\n"
        "    c = np.sum(y) * 0.1\n"
        "    e = 0.25\n"
        "    out = np.zeros_like(x)\n"
        f"    for i in {rng}:\n"
        f"        {body.format(r=read)}\n"
        "    return e + np.sum(out * out)\n"
    )
    env = {"np": np}
    exec(compile(src, "<generated loop>", "exec"), env)  # noqa: S102 - a generated test program
    x, y = RNG.random(24), RNG.random((24, 2))
    stats = against_unrolled(env["f"], x, y)
    if "if" not in read and len(eval(rng, {"n": len(x)})) >= rr.MIN_RUN:
        assert stats["loops"] >= 1, src


@pytest.mark.slow  # the differential fuzzer's 150 programs again, with the pass on
def test_fuzzer_programs_through_the_pass(reduce):
    """The differential fuzzer's random programs (tests/fuzzgen.py; Python element loops,
    ``pyloop``, among them, over vectors of up to 40 elements) with the pass on: compiled
    values, gradients, JVPs and HVPs against numpy and finite differences."""
    if not reduce:
        pytest.skip("the fuzzer's loops are not sums: the same loops either way")
    fuzz = pytest.importorskip("test_fuzz")
    fuzz.test_random_programs_match_numpy_and_finite_differences()


def test_loop_index_constants_keep_the_sign_of_zero_and_may_be_infinite():
    """``-(i - 5.0)`` is -0.0 at i = 5 (arctan2 sees the sign): not an integer the loop can
    recompute from its index; an infinite constant among the iterations' does not stop the pass
    (found by review: a wrong value, then an OverflowError that left every loop unrolled)."""

    def signed_zero(x):
        e = 0.0
        for i in range(len(x)):
            c = -(i - 5.0)
            e = e + np.arctan2(c, x[i] - 2.0) * x[i]
        return e

    w = np.arange(1.0, 25.0)
    w[3] = np.inf

    def infinite(x):
        e = 0.0
        for i in range(len(x)):
            e = e + x[i] / w[i] + np.sin(x[i])
        return e

    x = RNG.random(24) + 0.5
    against_unrolled(signed_zero, x)
    stats = against_unrolled(infinite, x)
    assert "failed" not in stats
