"""Rolled loops (fori_loop, scan, while_loop, checkpoint): gradients against the same computation
unrolled in Python (compiled by tapejit, and in plain numpy), against float64 central
differences, and against the IR interpreter; work that follows the iterations actually run."""

from __future__ import annotations

import numpy as np
import pytest

import tapejit as tj
from tapejit.core import interpret

RNG = np.random.default_rng(11)


def central(f, x, h=1e-6, k=4):
    """Directional derivatives of f at x along k random directions (float64 central differences)."""
    dirs = RNG.normal(size=(k, *np.shape(x)))
    return dirs, np.array([(f(x + h * d) - f(x - h * d)) / (2 * h) for d in dirs])


def check(f, x, rtol=1e-6, atol=1e-8):
    """tapejit's gradient of f at x against central differences; returns the gradient."""
    g = tj.compile(f, x, cache=False)(x)
    dirs, fd = central(f, x)
    got = np.array([np.sum(g * d) for d in dirs])
    np.testing.assert_allclose(got, fd, rtol=rtol, atol=atol)
    return g


# -- fori_loop ------------------------------------------------------------------------------------
def fori_model(x):
    def body(i, c):
        return c * np.sin(x) + 0.1 * i * np.tanh(c)

    c = tj.fori_loop(2, 9, body, x)
    return np.sum(c * c)


def fori_unrolled(x):
    c = x
    for i in range(2, 9):
        c = c * np.sin(x) + 0.1 * i * np.tanh(c)
    return np.sum(c * c)


def test_fori_loop_matches_the_unrolled_loop_and_central_differences():
    x = RNG.random(7)
    g = check(fori_model, x)
    np.testing.assert_allclose(g, tj.compile(fori_unrolled, x, cache=False)(x), rtol=1e-12)
    assert fori_model(x) == pytest.approx(fori_unrolled(x), rel=1e-14)  # outside tracing


def test_fori_loop_is_not_unrolled():
    x = RNG.random(5)
    short = tj.compile(fori_model, x, cache=False)
    nodes = short.stats["nodes"]["trace"]
    assert nodes < tj.compile(fori_unrolled, x, cache=False).stats["nodes"]["trace"]
    assert "loop" in short.ir("trace") and "body of" in short.ir("plan")


# -- scan ---------------------------------------------------------------------------------------
H, D = 5, 3


def rnn_params(seed=0):
    r = np.random.default_rng(seed)
    return np.concatenate([r.normal(size=H * H) * 0.4, r.normal(size=H * D) * 0.4])


XS = RNG.normal(size=(12, D))
TARGET = RNG.normal(size=(12, H))


def rnn_model(wrap=lambda step: step):
    """The RNN loss with its scan body passed through ``wrap`` (e.g. tj.checkpoint)."""

    def loss_of(p):
        W, U = p[: H * H].reshape(H, H), p[H * H :].reshape(H, D)

        def step(carry, inp):
            h, loss = carry
            x_t, y_t = inp
            h = np.tanh(W @ h + U @ x_t)
            return (h, loss + np.sum((h - y_t) ** 2)), h

        (h, loss), hs = tj.scan(wrap(step), (np.zeros(H), 0.0), (XS, TARGET))
        return loss + 0.5 * np.sum(hs * hs)

    return loss_of


rnn_loss = rnn_model()


def rnn_unrolled(p):
    W, U = p[: H * H].reshape(H, H), p[H * H :].reshape(H, D)
    h, loss, total = np.zeros(H), 0.0, 0.0
    for t in range(len(XS)):
        h = np.tanh(W @ h + U @ XS[t])
        loss = loss + np.sum((h - TARGET[t]) ** 2)
        total = total + 0.5 * np.sum(h * h)
    return loss + total


def test_scan_with_tuple_carry_xs_and_ys():
    p = rnn_params()
    g = check(rnn_loss, p)
    np.testing.assert_allclose(g, tj.compile(rnn_unrolled, p, cache=False)(p), rtol=1e-11)
    assert rnn_loss(p) == pytest.approx(rnn_unrolled(p), rel=1e-13)


def test_scan_gradient_with_respect_to_xs():
    W = RNG.normal(size=(4, 4)) * 0.5

    def f(xs):
        h, _ = tj.scan(lambda h, x: (np.tanh(W @ h + x), None), np.ones(4), xs)
        return np.sum(h)

    check(f, RNG.normal(size=(6, 4)))


def test_checkpointed_body_gives_the_same_gradient_with_a_smaller_stack():
    p = rnn_params(1)

    ckpt = rnn_model(tj.checkpoint)
    a, b = tj.compile(rnn_loss, p, cache=False), tj.compile(ckpt, p, cache=False)
    np.testing.assert_allclose(b(p), a(p), rtol=1e-12)

    # the stored per-iteration state: only the carries when checkpointed
    def stored(g):
        (loop,) = [n for n in g._primary.stages()["trace"].nodes if n.op == "loop"]
        v = loop.attrs[0].vjp  # residuals B reads (stored, or read from a y's stack)
        return len(v.shared) or v.n_residuals, loop.type.size

    (ra, sa), (rb, sb) = stored(a), stored(b)
    assert rb == 2 and ra > rb and sb < sa  # checkpointed: the two carries only


# -- while_loop ---------------------------------------------------------------------------------
def halving(x, max_steps):
    """Halve until the norm is below 1 (the number of steps depends on x)."""

    def cond(c):
        v, k = c
        return np.sum(v * v) > 1.0

    def body(c):
        v, k = c
        return (0.5 * v + 0.01 * np.sin(v), k + 1.0)

    v, k = tj.while_loop(cond, body, (x, 0.0), max_steps=max_steps)
    return np.sum(v**3) + k


def test_while_loop_gradient_and_work_follow_the_steps_taken():
    x = RNG.random(4) * 6.0
    steps = None
    for max_steps in (64, 1024):
        g = tj.compile(lambda x: halving(x, max_steps), x, cache=False)
        check(lambda x: halving(x, max_steps), x)
        before = g.loop_iterations
        g(x)
        fwd, bwd = np.subtract(g.loop_iterations, before)
        assert fwd == bwd > 0  # the backward loop runs the iterations the forward loop ran
        steps = fwd if steps is None else steps
        assert fwd == steps  # ... whatever the bound
    # python semantics agree
    assert halving(x, 64) == pytest.approx(
        tj.compile(lambda x: halving(x, 64), x).value_and_grad(x)[0]
    )


def test_while_loop_stops_at_max_steps():
    def f(x):
        v = tj.while_loop(lambda v: np.sum(v) < 1e9, lambda v: v * 2.0, x, max_steps=3)
        return np.sum(v)

    x = np.ones(3)
    g = tj.compile(f, x, cache=False)
    with pytest.warns(tj.MaxStepsWarning, match=r"max_steps \(3\)"):  # and it says so
        value, grad = g.value_and_grad(x)
    assert value == 24.0 and np.all(grad == 8.0)


def test_while_loop_where_the_input_changes_the_trip_count():
    x = np.array([3.0, 1.0])
    g = tj.compile(lambda x: halving(x, 100), x, cache=False)
    for scale in (0.5, 2.0, 10.0, 40.0):
        y = x * scale
        dirs, fd = central(lambda v: halving(v, 100), y)
        np.testing.assert_allclose([np.sum(g(y) * d) for d in dirs], fd, rtol=1e-6, atol=1e-8)


# -- structure ------------------------------------------------------------------------------------
def test_nested_loops_and_closed_over_captured_arrays():
    c = RNG.random(3)

    def f(x):
        def outer(i, v):
            return tj.fori_loop(0, 3, lambda j, w: w * np.cos(x) + c * 0.1, v) + 0.01 * i

        return np.sum(tj.fori_loop(0, 4, outer, x) ** 2)

    def unrolled(x):
        v = x
        for i in range(4):
            w = v
            for j in range(3):
                w = w * np.cos(x) + c * 0.1
            v = w + 0.01 * i
        return np.sum(v**2)

    x = RNG.random(3)
    g = check(f, x)
    np.testing.assert_allclose(g, tj.compile(unrolled, x, cache=False)(x), rtol=1e-12)


def test_scalar_carry_and_a_loop_with_no_active_input():
    k = RNG.random(4)

    def f(x):
        s = tj.fori_loop(0, 6, lambda i, s: s * 0.9 + np.sum(x * x), 0.0)  # scalar carry
        const = tj.fori_loop(0, 3, lambda i, c: c * 2.0, k)  # independent of x: no VJP work
        return s + np.sum(const * x)

    x = RNG.random(4)
    g = check(f, x)
    # the loop over the captured constant is folded at compile time: one forward loop and one
    # backward loop run
    assert tj.compile(f, x, cache=False).stats["loops"] == 2
    assert g.shape == (4,)


def test_interpreter_agrees_with_native_on_the_joint_graph():
    p = rnn_params(2)
    g = tj.compile(rnn_loss, p, cache=False)
    ref = interpret.evaluate(g._primary.stages()["grad"], [p])
    value, grad = g.value_and_grad(p)
    assert value == pytest.approx(float(ref[0]), rel=1e-12)
    np.testing.assert_allclose(grad, ref[1], rtol=1e-11)


def test_control_flow_inside_a_body_is_an_error():
    def f(x):
        return np.sum(tj.fori_loop(0, 3, lambda i, c: c * 2 if c[0] > 0 else c, x))

    with pytest.raises(tj.TracingError, match="inside a loop body.*tapejit.where"):
        tj.compile(f, np.ones(2))


def test_a_body_value_leaking_out_is_an_error():
    leaked = []

    def f(x):
        def body(i, c):
            leaked.append(c * 2.0)
            return c

        c = tj.fori_loop(0, 2, body, x)
        return np.sum(c + leaked[0])

    with pytest.raises(tj.TracingError, match="used outside the loop"):
        tj.compile(f, np.ones(2))


def test_a_carry_that_changes_shape_is_an_error():
    with pytest.raises(tj.TracingError, match="keeps its shape"):
        tj.compile(lambda x: np.sum(tj.fori_loop(0, 2, lambda i, c: c[:1], x)), np.ones(2))


# -- scan over a dynamic length -------------------------------------------------------------------
def rnn_dynamic(p, xs):
    W, U = p[: H * H].reshape(H, H), p[H * H :].reshape(H, D)

    def step(carry, x):
        h, loss = carry
        h = np.tanh(W @ h + U @ x)
        return (h, loss + np.sum(h * h)), None

    (h, loss), _ = tj.scan(step, (np.zeros(H), 0.0), xs)
    return loss + np.sum(h)


def rnn_dynamic_reference(p, xs):
    W, U = p[: H * H].reshape(H, H), p[H * H :].reshape(H, D)
    h, loss = np.zeros(H), 0.0
    for x in xs:
        h = np.tanh(W @ h + U @ x)
        loss += np.sum(h * h)
    return loss + np.sum(h)


def test_scan_over_lengths_10_100_1000_compiles_once():
    p = rnn_params(3)
    g = tj.compile(rnn_dynamic, p, RNG.normal(size=(10, D)), dynamic_argnums=1, cache=False)
    for T in (10, 100, 1000, 1):
        xs = RNG.normal(size=(T, D))
        value, grad = g.value_and_grad(p, xs)
        assert value == pytest.approx(rnn_dynamic_reference(p, xs), rel=1e-12)
        dirs, fd = central(lambda q: rnn_dynamic_reference(q, xs), p)
        np.testing.assert_allclose([grad @ d for d in dirs], fd, rtol=1e-6, atol=1e-7)
    assert g._dispatcher.compiles == 1 and len(g.specialisations) == 1
    assert g.loop_iterations == [1111, 1111]  # forward and backward ran 10+100+1000+1 steps


@pytest.mark.slow  # the default tier has test_loops_review's capacity + 1 case
def test_a_longer_sequence_than_the_capacity_compiles_once_more():
    p = rnn_params(4)
    g = tj.compile(rnn_dynamic, p, RNG.normal(size=(5, D)), dynamic_argnums=1, cache=False)
    xs = RNG.normal(size=(tj.api.DYNAMIC_CAPACITY + 5, D))
    assert g(p, xs) @ np.ones_like(p) == pytest.approx(
        tj.compile(rnn_dynamic_reference, p, xs, cache=False)(p, xs) @ np.ones_like(p), rel=1e-10
    )
    assert g._dispatcher.compiles == 2
    g(p, xs[:50])  # served by a variant that fits, no compile
    assert g._dispatcher.compiles == 2


def test_dynamic_length_misuse_is_a_clear_error():
    p, xs = rnn_params(5), RNG.normal(size=(8, D))
    with pytest.raises(ValueError, match="both differentiated"):
        tj.compile(rnn_dynamic, p, xs, argnums=(0, 1), dynamic_argnums=1)
    with pytest.raises(tj.TracingError, match="can only be passed to tapejit.scan"):
        tj.compile(lambda p, xs: np.sum(xs) * p[0], p, xs, dynamic_argnums=1)
    with pytest.raises(tj.TracingError, match=r"return \(carry, None\)"):
        tj.compile(
            lambda p, xs: np.sum(tj.scan(lambda c, x: (c, x * p[0]), 0.0, xs)[1]),
            p,
            xs,
            dynamic_argnums=1,
        )
    g = tj.compile(rnn_dynamic, p, xs, dynamic_argnums=1, cache=False)
    with pytest.raises(ValueError, match=r"argument 1 must have shape \(n, 3\)"):
        g(p, RNG.normal(size=(8, D + 1)))
    with pytest.raises(TypeError, match="cannot be batched"):
        g.batch(p[None], xs[None])
