"""Adversarial review of rolled loops (fori_loop, scan, while_loop, checkpoint, dynamic_argnums).

Every test compares tapejit against an independent reference: the same computation run as a
plain Python loop on numpy values (the loop functions outside tracing), written unrolled and
compiled by tapejit, or float64 central differences in random directions. Tolerances: values
rel 1e-12 against numpy; gradients rel 1e-10 against an unrolled compile, rtol 1e-6 /
atol 1e-8 against central differences (h = 1e-6).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import textwrap

import numpy as np
import pytest

import tapejit as tj

RNG = np.random.default_rng(20240611)


def _dirs(shape, k=3, seed=0):
    return np.random.default_rng(seed).normal(size=(k, *shape))


def fd_check(f, args, argnums, grads, rtol=1e-6, atol=1e-8, h=1e-6):
    """Directional derivatives of numpy-evaluated f (plain Python loops) vs tapejit's grads."""
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    gs = (grads,) if isinstance(argnums, int) else tuple(grads)
    for num, g in zip(nums, gs):
        x = np.asarray(args[num], dtype=float)
        assert np.shape(g) == x.shape
        for d in _dirs(x.shape, seed=num):
            ap = list(args)
            am = list(args)
            ap[num] = x + h * d
            am[num] = x - h * d
            fd = (f(*ap) - f(*am)) / (2 * h)
            np.testing.assert_allclose(np.sum(g * d), fd, rtol=rtol, atol=atol)


def full_check(f, *args, argnums=0, unrolled=None, rtol_fd=1e-6, atol_fd=1e-8):
    """Compile f, check value against numpy evaluation of f, gradient against central
    differences and (optionally) against the unrolled compile. Returns (value, grad)."""
    g = tj.compile(f, *args, argnums=argnums, cache=False)
    value, grad = g.value_and_grad(*args)
    ref = f(*args)
    assert value == pytest.approx(float(ref), rel=1e-12, abs=1e-13)
    fd_check(f, args, argnums, grad, rtol=rtol_fd, atol=atol_fd)
    if unrolled is not None:
        assert float(unrolled(*args)) == pytest.approx(float(ref), rel=1e-12, abs=1e-13)
        u = tj.compile(unrolled, *args, argnums=argnums, cache=False)
        uv, ug = u.value_and_grad(*args)
        assert value == pytest.approx(uv, rel=1e-12, abs=1e-13)
        if isinstance(argnums, int):
            np.testing.assert_allclose(grad, ug, rtol=1e-10, atol=1e-12)
        else:
            for a, b in zip(grad, ug):
                np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    return value, grad


# =============================================================================================
# Carries
# =============================================================================================


def test_nested_tuple_list_carry_with_mixed_scalars_and_arrays():
    def f(x):
        def body(i, c):
            (a, [b, s]), t = c
            return ((a * np.cos(b), [b + 0.1 * a, s + np.sum(a * b)]), t * 0.5 + s)

        (a, [b, s]), t = tj.fori_loop(0, 5, body, ((x[:3], [x[3:], 0.0]), 1.0))
        return np.sum(a) + np.sum(b**2) + s + t

    def unrolled(x):
        a, b, s, t = x[:3], x[3:], 0.0, 1.0
        for i in range(5):
            a, b, s, t = a * np.cos(b), b + 0.1 * a, s + np.sum(a * b), t * 0.5 + s
        return np.sum(a) + np.sum(b**2) + s + t

    full_check(f, RNG.random(6), unrolled=unrolled)


def test_swapped_carries():
    """Body returns the carries permuted: the next carries must not overwrite the current ones
    before the body has read them."""

    def f(x):
        def body(i, c):
            a, b = c
            return (b, a * 1.5 + 0.1)

        a, b = tj.fori_loop(0, 5, body, (x[:2], x[2:]))
        return np.sum(a * np.arange(1, 3)) + np.sum(b**2)

    def unrolled(x):
        a, b = x[:2], x[2:]
        for i in range(5):
            a, b = b, a * 1.5 + 0.1
        return np.sum(a * np.arange(1, 3)) + np.sum(b**2)

    full_check(f, RNG.random(4), unrolled=unrolled)


def test_fibonacci_scalar_carries():
    def f(x):
        a, b = tj.fori_loop(0, 6, lambda i, c: (c[1], c[0] + c[1]), (x[0], x[1]))
        return a * b

    def unrolled(x):
        a, b = x[0], x[1]
        for _ in range(6):
            a, b = b, a + b
        return a * b

    full_check(f, RNG.random(2), unrolled=unrolled)


def test_same_value_for_two_carries_and_a_carry_returned_unchanged():
    def f(x):
        def step(c, x_t):
            a, b, keep = c
            n = np.tanh(a + b * x_t)
            return (n, n, keep), n  # same node twice; keep passes through; y is a carry too

        (a, b, keep), ys = tj.scan(step, (x[:2], x[2:4], x[4:]), RNG_XS)
        return np.sum(a) + 2 * np.sum(b) + np.sum(keep**2) + np.sum(ys * RNG_W)

    def unrolled(x):
        a, b, keep = x[:2], x[2:4], x[4:]
        tot = 0.0
        for t in range(len(RNG_XS)):
            n = np.tanh(a + b * RNG_XS[t])
            a, b = n, n
            tot = tot + np.sum(n * RNG_W[t])
        return np.sum(a) + 2 * np.sum(b) + np.sum(keep**2) + tot

    full_check(f, RNG.random(6), unrolled=unrolled)


RNG_XS = RNG.normal(size=(4, 2))
RNG_W = RNG.normal(size=(4, 2))


def test_carry_replaced_by_a_closed_over_param_and_by_a_constant():
    def f(x):
        def body(i, c):
            a, b, k = c
            return (x * 2.0, b * a, 3.0)  # a := param, k := constant

        a, b, k = tj.fori_loop(0, 3, body, (np.zeros(3), np.ones(3), 0.0))
        return np.sum(a * b) * k

    def unrolled(x):
        a, b, k = np.zeros(3), np.ones(3), 0.0
        for _ in range(3):
            a, b, k = x * 2.0, b * a, 3.0
        return np.sum(a * b) * k

    full_check(f, RNG.random(3) + 0.5, unrolled=unrolled)


def test_carry_init_python_float_int_bool_and_captured_array():
    k = RNG.random(3)

    def f(x):
        def body(i, c):
            a, n, flag, arr = c
            return (a * 0.9 + np.sum(x * arr), n + 1, flag * 0.5, arr * np.sin(x))

        a, n, flag, arr = tj.fori_loop(0, 4, body, (1.5, 0, True, k))
        return a + n + flag + np.sum(arr)

    def unrolled(x):
        a, n, flag, arr = 1.5, 0, 1.0, k
        for _ in range(4):
            a, n, flag, arr = a * 0.9 + np.sum(x * arr), n + 1, flag * 0.5, arr * np.sin(x)
        return a + n + flag + np.sum(arr)

    full_check(f, RNG.random(3), unrolled=unrolled)


def test_carry_is_the_active_argument_itself_and_it_is_also_a_param():
    def f(x):
        return np.sum(tj.fori_loop(0, 4, lambda i, c: c * x + 0.1, x))

    def unrolled(x):
        c = x
        for _ in range(4):
            c = c * x + 0.1
        return np.sum(c)

    full_check(f, RNG.random(3), unrolled=unrolled)


def test_2d_carry_with_matmul_and_transpose():
    W0 = RNG.normal(size=(3, 3)) * 0.5

    def f(w):
        W = w.reshape(3, 3)

        def body(i, M):
            return np.tanh(W @ M.T + W0) * 0.9

        return np.sum(tj.fori_loop(0, 4, body, np.eye(3)) ** 2)

    def unrolled(w):
        W, M = w.reshape(3, 3), np.eye(3)
        for _ in range(4):
            M = np.tanh(W @ M.T + W0) * 0.9
        return np.sum(M**2)

    full_check(f, RNG.normal(size=9), unrolled=unrolled)


# =============================================================================================
# Bodies and ys
# =============================================================================================


def test_body_uses_index_heavily():
    def f(x):
        return np.sum(tj.fori_loop(-2, 5, lambda i, c: c + np.sin(i * x) * i, x) ** 2)

    def unrolled(x):
        c = x
        for i in range(-2, 5):
            c = c + np.sin(i * x) * i
        return np.sum(c**2)

    full_check(f, RNG.random(3), unrolled=unrolled)


def test_body_ignores_carry_and_returns_constants():
    def f(x):
        c = tj.fori_loop(0, 3, lambda i, c: np.ones(3) * i, x)
        return np.sum(c * x)

    full_check(f, RNG.random(3))


def test_scan_without_xs_index_only_and_scalar_tuple_ys():
    def f(x):
        def step(c, none):
            assert none is None
            c2 = c * np.cos(x) + 0.1
            return c2, (np.sum(c2), c2 * 2.0)

        c, (s, v) = tj.scan(step, x, None, length=4)
        return np.sum(c) + np.sum(s * np.arange(4.0)) + np.sum(v**2)

    def unrolled(x):
        c, tot = x, 0.0
        for t in range(4):
            c = c * np.cos(x) + 0.1
            tot = tot + np.sum(c) * t + np.sum((c * 2.0) ** 2)
        return np.sum(c) + tot

    full_check(f, RNG.random(3), unrolled=unrolled)


def test_scan_multiple_xs_2d_and_3d_gradient_wrt_xs_and_params():
    A = RNG.normal(size=(5, 2, 3))

    def f(xs, w):
        def step(c, inp):
            a, b = inp  # a: (2, 3), b: (3,)
            c2 = np.tanh(a @ (b * w) + c)
            return c2, np.sum(a * c2.reshape(2, 1))

        c, ys = tj.scan(step, np.zeros(2), (A * xs[:, :1].reshape(5, 1, 1), xs[:, 1:]))
        return np.sum(c**2) + np.sum(ys * ys)

    def unrolled(xs, w):
        c, tot = np.zeros(2), 0.0
        for t in range(5):
            a, b = A[t] * xs[t, :1], xs[t, 1:]
            c = np.tanh(a @ (b * w) + c)
            tot = tot + np.sum(a * c.reshape(2, 1)) ** 2
        return np.sum(c**2) + tot

    xs, w = RNG.normal(size=(5, 4)), RNG.normal(size=3)
    full_check(f, xs, w, argnums=(0, 1), unrolled=unrolled)


def test_scan_gradient_wrt_xs_only_through_ys():
    def f(xs):
        _, ys = tj.scan(lambda c, x: (c + 1.0, np.sin(x) * c), 0.5, xs)
        return np.sum(ys**2)

    full_check(f, RNG.normal(size=(6, 2)))


def test_scan_xs_used_only_in_the_carry_not_in_ys():
    def f(xs):
        c, ys = tj.scan(lambda c, x: (c * x, c * 0.0 + 1.0), np.ones(2), xs)
        return np.sum(c) + np.sum(ys)

    full_check(f, RNG.random((5, 2)) + 0.5)


def test_scan_length_one_and_ys_none():
    def f(xs):
        c, ys = tj.scan(lambda c, x: (c + np.exp(x), None), np.zeros(3), xs)
        assert ys is None
        return np.sum(c**2)

    full_check(f, RNG.normal(size=(1, 3)))


# =============================================================================================
# Params
# =============================================================================================


def test_inactive_second_argument_closed_over():
    def f(x, y):
        return np.sum(tj.fori_loop(0, 4, lambda i, c: c * np.tanh(y) + x, x) ** 2)

    def unrolled(x, y):
        c = x
        for _ in range(4):
            c = c * np.tanh(y) + x
        return np.sum(c**2)

    x, y = RNG.random(3), RNG.random(3)
    full_check(f, x, y, argnums=0, unrolled=unrolled)
    full_check(f, x, y, argnums=1, unrolled=unrolled)
    full_check(f, x, y, argnums=(0, 1), unrolled=unrolled)


def test_gradients_come_back_in_argnums_order():
    g = tj.compile(
        lambda x, y: np.sum(2.0 * x + 3.0 * y), np.ones(1), np.ones(1), argnums=(1, 0), cache=False
    )
    gy, gx = g(np.ones(1), np.ones(1))
    assert gy[0] == 3.0 and gx[0] == 2.0


def test_while_loop_param_used_in_cond_and_body_and_param_only_in_cond():
    def f(x, thr):
        def cond(c):
            v, k = c
            return np.sum(v * x) < thr[0]

        def body(c):
            v, k = c
            return (v + x * x, k + 1.0)

        v, k = tj.while_loop(cond, body, (np.zeros(3), 0.0), max_steps=50)
        return np.sum(v**2) + k * thr[1]

    x, thr = np.array([0.5, 0.7, 0.9]), np.array([4.0, 0.3])
    full_check(f, x, thr, argnums=(0, 1))


def test_while_loop_trip_count_changes_with_input_both_sides():
    def f(x):
        v = tj.while_loop(lambda v: np.sum(v) < 10.0, lambda v: v * 1.3 + 0.1, x, max_steps=40)
        return np.sum(v * v)

    x = np.array([1.0, 2.0])
    g = tj.compile(f, x, cache=False)
    for s in (0.2, 0.9, 1.0, 1.7, 6.0, 20.0):  # 20.0: cond false at start
        y = x * s
        val, grad = g.value_and_grad(y)
        assert val == pytest.approx(f(y), rel=1e-12)
        fd_check(f, (y,), 0, grad)


@pytest.mark.filterwarnings("ignore::tapejit.MaxStepsWarning")  # limit 1e9: runs out on purpose
def test_while_loop_zero_iterations_exactly_max_steps_and_max_steps_one():
    def mk(ms, limit):
        def f(x):
            v = tj.while_loop(lambda v: np.sum(v) < limit, lambda v: v * 2.0 + x, x, max_steps=ms)
            return np.sum(v**2)

        return f

    x = np.array([0.5, 0.25])
    for ms, limit in ((5, -1.0), (3, 1e9), (1, 1e9), (1, -1.0), (4, 5.0)):
        f = mk(ms, limit)
        full_check(f, x)


def test_while_loop_with_python_bool_cond_result_and_int_carry():
    def f(x):
        def cond(c):
            return c[1] < 3  # compare of an int-carry (converted to f64)

        v, k = tj.while_loop(cond, lambda c: (c[0] * x, c[1] + 1), (x, 0), max_steps=10)
        return np.sum(v) + k

    full_check(f, RNG.random(3) + 0.5)


def test_bool_scalar_param_computed_outside_the_body():
    def f(x):
        m = x[0] > 0.5  # a bool scalar of the enclosing trace, used in the body

        def body(i, c):
            return tj.where(m, c * x, c + x)

        return np.sum(tj.fori_loop(0, 3, body, x))

    for x in (np.array([0.7, 0.2]), np.array([0.3, 0.4])):
        full_check(f, x)


def test_bool_array_param_captured_and_computed():
    mask = np.array([True, False, True])

    def f(x):
        m2 = x > 0.5

        def body(i, c):
            return tj.where(mask, c * x, tj.where(m2, c + x, c - 0.1))

        return np.sum(tj.fori_loop(0, 3, body, x) ** 2)

    full_check(f, np.array([0.7, 0.2, 0.9]))


def test_hoisted_invariant_bool_scalar_in_body():
    """w[0] > 0 depends only on params: loop-invariant code motion hoists it out as a bool
    scalar param of the body."""

    def f(w):
        def body(i, c):
            return tj.where(w[0] > 0.0, c * w[1], c + w[1]) + i

        return tj.fori_loop(0, 3, body, 1.0) * w[2]

    full_check(f, np.array([0.4, 0.8, 1.3]))
    full_check(f, np.array([-0.4, 0.8, 1.3]))


def test_hoisted_invariant_matmul_of_active_params():
    W = RNG.normal(size=(4, 4)) * 0.3

    def f(p):
        A = p[:16].reshape(4, 4)
        b = p[16:]

        def body(i, h):
            return np.tanh((A @ W) @ h + A @ b + np.sum(A.T * A) * 0.01)

        return np.sum(tj.fori_loop(0, 5, body, np.ones(4)) ** 2)

    def unrolled(p):
        A, b, h = p[:16].reshape(4, 4), p[16:], np.ones(4)
        for _ in range(5):
            h = np.tanh((A @ W) @ h + A @ b + np.sum(A.T * A) * 0.01)
        return np.sum(h**2)

    full_check(f, RNG.normal(size=20) * 0.5, unrolled=unrolled)


# =============================================================================================
# fori bounds
# =============================================================================================


def test_fori_empty_and_reversed_ranges_return_init():
    def f(x):
        a = tj.fori_loop(3, 3, lambda i, c: c * 100.0, x)
        b = tj.fori_loop(5, 2, lambda i, c: c * 100.0, x * 2.0)
        c = tj.fori_loop(-3, -1, lambda i, c: c * i, x)  # i = -3, -2
        return np.sum(a) + np.sum(b) + np.sum(c)

    full_check(f, RNG.random(3))


def test_fori_traced_bounds_are_guarded():
    def f(x):
        n = int(x[0])
        return np.sum(tj.fori_loop(0, n, lambda i, c: c * 1.1 + 0.1, x))

    x = np.array([3.2, 0.5])
    g = tj.compile(f, x, cache=False)
    for y in (x, np.array([5.5, 0.5]), np.array([0.2, 0.5])):
        val, grad = g.value_and_grad(y)
        assert val == pytest.approx(f(y), rel=1e-12)
        fd_check(f, (y,), 0, grad)


# =============================================================================================
# Nesting and composition
# =============================================================================================


def test_scan_inside_while_inside_fori_closing_over_outer_body_values():
    XS = RNG.normal(size=(3, 2))

    def f(x):
        def fbody(i, v):
            s = np.sin(v) * 0.5  # an outer-body value used by the inner loops

            def wcond(c):
                w, k = c
                return k < 2.0

            def wbody(c):
                w, k = c

                def step(h, xt):
                    h2 = np.tanh(h * s + xt * x + i * 0.1)
                    return h2, np.sum(h2 * w)

                h, ys = tj.scan(step, w, XS)
                return (h + 0.1 * np.sum(ys), k + 1.0)

            w, _ = tj.while_loop(wcond, wbody, (v, 0.0), max_steps=4)
            return w

        return np.sum(tj.fori_loop(0, 2, fbody, x) ** 2)

    def unrolled(x):
        v = x
        for i in range(2):
            s = np.sin(v) * 0.5
            w = v
            for _ in range(2):
                h, tot = w, 0.0
                for t in range(3):
                    h = np.tanh(h * s + XS[t] * x + i * 0.1)
                    tot = tot + np.sum(h * w)
                w = h + 0.1 * tot
            v = w
        return np.sum(v**2)

    full_check(f, RNG.random(2), unrolled=unrolled)


def test_two_loops_in_sequence_and_a_loop_result_as_another_loops_param():
    def f(x):
        a = tj.fori_loop(0, 3, lambda i, c: np.sin(c) + x, x)
        b = tj.fori_loop(0, 3, lambda i, c: c * np.cos(a) + 0.2, a)
        c, ys = tj.scan(lambda c, t: (c * t + b, c), x, np.stack([a, b]) if False else RNG_XS2)
        return np.sum(b * c) + np.sum(ys)

    def unrolled(x):
        a = x
        for _ in range(3):
            a = np.sin(a) + x
        b = a
        for _ in range(3):
            b = b * np.cos(a) + 0.2
        c, tot = x, 0.0
        for t in range(len(RNG_XS2)):
            tot = tot + np.sum(c)
            c = c * RNG_XS2[t] + b
        return np.sum(b * c) + tot

    full_check(f, RNG.random(2), unrolled=unrolled)


RNG_XS2 = RNG.normal(size=(3, 2)) * 0.5


def test_identical_loops_twice_share_a_body():
    def f(x):
        body = lambda i, c: np.tanh(c * x) + i  # noqa: E731
        a = tj.fori_loop(0, 3, body, x)
        b = tj.fori_loop(0, 3, body, x * 2.0)
        return np.sum(a * b)

    def unrolled(x):
        a, b = x, x * 2.0
        for i in range(3):
            a, b = np.tanh(a * x) + i, np.tanh(b * x) + i
        return np.sum(a * b)

    full_check(f, RNG.random(3), unrolled=unrolled)


# =============================================================================================
# checkpoint
# =============================================================================================


def test_checkpoint_on_every_loop_kind():
    W = RNG.normal(size=(3, 3)) * 0.5

    def make(ck):
        wrap = tj.checkpoint if ck else (lambda fn: fn)

        def f(x):
            a = tj.fori_loop(1, 4, wrap(lambda i, c: np.tanh(W @ c * x + i)), x)
            b, ys = tj.scan(wrap(lambda c, t: (np.sin(c * t) + x, c * c)), a, RNG_XS3)
            v = tj.while_loop(
                lambda v: np.sum(v * v) < 30.0, wrap(lambda v: v * 1.5 + x), b, max_steps=20
            )
            return np.sum(v) + np.sum(ys * RNG_XS3)

        return f

    x = RNG.random(3)
    v0, g0 = full_check(make(False), x)
    v1, g1 = full_check(make(True), x)
    assert v0 == v1
    np.testing.assert_allclose(g1, g0, rtol=1e-12, atol=1e-14)


RNG_XS3 = RNG.normal(size=(4, 3))


def test_checkpointed_nested_loop():
    def f(x):
        @tj.checkpoint
        def outer(i, v):
            return tj.fori_loop(0, 2, tj.checkpoint(lambda j, w: np.sin(w * v) + x), v)

        return np.sum(tj.fori_loop(0, 3, outer, x))

    def unrolled(x):
        v = x
        for _ in range(3):
            w = v
            for _ in range(2):
                w = np.sin(w * v) + x
            v = w
        return np.sum(v)

    full_check(f, RNG.random(3), unrolled=unrolled)


# =============================================================================================
# Guards around loops
# =============================================================================================


def test_guards_before_and_after_a_loop():
    def f(x):
        y = x * 2.0 if x[0] > 0.5 else x - 1.0
        c = tj.fori_loop(0, 3, lambda i, c: np.sin(c) * y, x)
        if np.sum(c) > 0.0:
            return np.sum(c**2)
        return -np.sum(c)

    g = tj.compile(f, np.array([0.7, 0.3]), cache=False)
    for x in (
        np.array([0.7, 0.3]),
        np.array([0.2, 0.3]),
        np.array([0.7, -3.0]),
        np.array([0.2, -3.0]),
    ):
        val, grad = g.value_and_grad(x)
        assert val == pytest.approx(f(x), rel=1e-12)
        fd_check(f, (x,), 0, grad)


# =============================================================================================
# Dynamic length
# =============================================================================================

DH = 3


def dyn_model(p, xs):
    W = p[: DH * DH].reshape(DH, DH)
    u = p[DH * DH :]

    def step(c, x):
        h, s = c
        h = np.tanh(W @ h + u * x[0] - x[1])
        return (h, s + np.sum(h * h)), None

    (h, s), _ = tj.scan(step, (np.zeros(DH), 0.0), xs)
    return s + np.sum(h)


def dyn_reference(p, xs):
    W, u = p[: DH * DH].reshape(DH, DH), p[DH * DH :]
    h, s = np.zeros(DH), 0.0
    for x in xs:
        h = np.tanh(W @ h + u * x[0] - x[1])
        s = s + np.sum(h * h)
    return s + np.sum(h)


def test_dynamic_lengths_one_capacity_and_capacity_plus_one():
    p = RNG.normal(size=DH * DH + DH) * 0.5
    g = tj.compile(dyn_model, p, RNG.normal(size=(3, 2)), dynamic_argnums=1, cache=False)
    cap = tj.api.DYNAMIC_CAPACITY
    for T in (1, 2, cap, cap + 1, 7):
        xs = RNG.normal(size=(T, 2)) * 0.3
        val, grad = g.value_and_grad(p, xs)
        assert val == pytest.approx(dyn_reference(p, xs), rel=1e-11)
        fd_check(lambda q: dyn_reference(q, xs), (p,), 0, grad, rtol=1e-5, atol=1e-7)
    assert g._dispatcher.compiles == 2


def test_two_dynamic_arguments_in_separate_scans_and_out_with_tuple_argnums():
    def f(p, q, xs, ys):
        c, _ = tj.scan(lambda c, a: (c * np.tanh(p) + a * q, None), np.zeros(2), xs)
        d, _ = tj.scan(lambda d, b: (d * 0.5 + b * c, None), c, ys)
        return np.sum(d**2)

    def ref(p, q, xs, ys):
        c = np.zeros(2)
        for a in xs:
            c = c * np.tanh(p) + a * q
        d = c
        for b in ys:
            d = d * 0.5 + b * c
        return np.sum(d**2)

    p, q = RNG.random(2), RNG.random(2)
    g = tj.compile(
        f,
        p,
        q,
        RNG.random((4, 2)),
        RNG.random((4, 2)),
        argnums=(0, 1),
        dynamic_argnums=(2, 3),
        cache=False,
    )
    for T, U in ((1, 5), (5, 1), (9, 3)):  # different lengths for the two arguments
        xs, ys = RNG.random((T, 2)), RNG.random((U, 2))
        out = (np.empty(2), np.empty(2))
        res = g(p, q, xs, ys, out=out)
        assert res[0] is out[0] and res[1] is out[1]
        assert g.value_and_grad(p, q, xs, ys)[0] == pytest.approx(ref(p, q, xs, ys), rel=1e-12)
        fd_check(lambda a, b: ref(a, b, xs, ys), (p, q), (0, 1), out)
    assert g._dispatcher.compiles == 1


def test_scanning_two_dynamic_arguments_together_is_refused_clearly():
    # a documented limitation (inputs and targets of one sequence cannot both be dynamic xs)
    def f(p, xs, ys):
        c, _ = tj.scan(lambda c, inp: (c + inp[0] * inp[1] * p, None), np.zeros(2), (xs, ys))
        return np.sum(c)

    with pytest.raises(tj.TracingError, match="same dynamic argument"):
        tj.compile(
            f,
            RNG.random(2),
            RNG.random((4, 2)),
            RNG.random((4, 2)),
            dynamic_argnums=(1, 2),
            cache=False,
        )


def test_dynamic_argument_closed_over_in_the_body_is_a_clear_error():
    def f(p, xs):
        c, _ = tj.scan(lambda c, x: (c + x * p + xs[0], None), np.zeros(2), xs)
        return np.sum(c)

    with pytest.raises(tj.TracingError, match="dynamic"):
        tj.compile(f, RNG.random(2), RNG.random((4, 2)), dynamic_argnums=1, cache=False)


def test_dynamic_scan_nested_in_a_fori_loop_is_a_clear_error():
    """A scan over a dynamic-length argument must be at the top level (documented limitation)."""

    def f(p, xs):
        def outer(i, c):
            h, _ = tj.scan(lambda h, x: (np.tanh(h * p + x), None), c, xs)
            return h * 0.5

        return np.sum(tj.fori_loop(0, 2, outer, np.ones(2)))

    with pytest.raises(tj.TracingError, match="top level"):
        tj.compile(f, RNG.random(2), RNG.random((3, 2)), dynamic_argnums=1, cache=False)


# =============================================================================================
# Tooling: stages, CLI, cache, lazy grad, batch, threads
# =============================================================================================


def loop_model(x):
    def cond(c):
        return np.sum(c[0] ** 2) < 50.0

    v, k = tj.while_loop(
        cond, tj.checkpoint(lambda c: (c[0] * 1.4 + 0.1, c[1] + 1.0)), (x, 0.0), max_steps=30
    )
    h, ys = tj.scan(lambda h, t: (np.tanh(h + t * v), np.sum(h)), x, RNG_XS3)
    return np.sum(h) + np.sum(ys) + k + tj.fori_loop(0, 3, lambda i, c: c * x, x).sum()


def test_every_ir_stage_prints():
    x = RNG.random(3)
    g = tj.compile(loop_model, x, cache=False)
    for stage in tj.STAGES:
        assert isinstance(g.ir(stage), str) and g.ir(stage)


def test_cli_dump_and_stats_on_a_loop_model(tmp_path):
    src = tmp_path / "m.py"
    src.write_text(
        textwrap.dedent("""
        import numpy as np
        import tapejit as tj

        def model(x):
            c = tj.while_loop(lambda c: np.sum(c) < 40.0, lambda c: c * 1.5 + 0.1, x,
                              max_steps=30)
            h, ys = tj.scan(lambda h, t: (np.tanh(h * t + c), h), x, np.ones((3, 5)))
            return np.sum(h) + np.sum(ys) + tj.fori_loop(0, 2, lambda i, a: a * x, x).sum()
    """)
    )
    for cmd in (
        ["dump", f"{src}:model", "--arg", "f64[5]", "--stage", "plan"],
        ["dump", f"{src}:model", "--arg", "f64[5]", "--stage", "grad"],
        ["stats", f"{src}:model", "--arg", "f64[5]"],
    ):
        r = subprocess.run(
            [sys.executable, "-m", "tapejit.tools.cli", *cmd], capture_output=True, text=True, timeout=120
        )
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip()


def test_disk_cache_hit_is_bit_identical(tmp_path):
    x = RNG.random(3)
    a = tj.compile(loop_model, x, cache=str(tmp_path))
    va, ga = a.value_and_grad(x)
    b = tj.compile(loop_model, x, cache=str(tmp_path))
    vb, gb = b.value_and_grad(x)
    assert va == vb and np.array_equal(ga, gb)
    assert a.stats["cache"] == "miss" and b.stats["cache"] == "hit"
    assert "loop" in b.ir("plan")  # (fold names differ between compiles: not compared)
    before = b.loop_iterations
    b(x)
    after = b.loop_iterations
    assert len(after) == len(before) and all(q >= p for p, q in zip(before, after))
    fd_check(loop_model, (x,), 0, gb)


def test_lazy_grad_and_value_and_grad_with_loops():
    x = RNG.random(3)
    g = tj.grad(loop_model)
    gv = tj.value_and_grad(loop_model)
    v, gr = gv(x)
    assert v == pytest.approx(loop_model(x), rel=1e-12)
    np.testing.assert_array_equal(g(x), gr)
    fd_check(loop_model, (x,), 0, gr)


def test_batch_of_a_loop_model_matches_single_calls():
    x = RNG.random(3)
    g = tj.compile(loop_model, x, cache=False)
    X = RNG.random((6, 3)) * 1.5
    vals = np.empty(6)
    G = g.batch(X, values=vals, threads=2)
    for r in range(6):
        v, gr = g.value_and_grad(X[r])
        assert vals[r] == v
        np.testing.assert_array_equal(G[r], gr)


def test_two_threads_call_the_same_loop_gradient():
    x = RNG.random(3)
    g = tj.compile(loop_model, x, cache=False)
    inputs = [RNG.random(3) * s for s in (0.5, 1.0, 1.5, 2.0)]
    expected = [g(v).copy() for v in inputs]
    errors = []

    def worker(k):
        try:
            for _ in range(200):
                j = (k + _) % len(inputs)
                got = g(inputs[j])
                if not np.array_equal(got, expected[j]):
                    errors.append((k, j))
                    return
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors


# =============================================================================================
# Found by probing: residuals, empty scans, captured arrays in hoisted invariants
# =============================================================================================


def test_relu_style_where_on_the_carry_in_a_body():
    def f(x):
        return np.sum(tj.fori_loop(0, 3, lambda i, c: tj.where(c > 0, c * 1.5, 0.1 * c) + x, x))

    full_check(f, np.array([0.7, -0.2, 0.4]))


def test_where_on_the_index_in_a_body():
    def f(x):
        return np.sum(tj.fori_loop(0, 3, lambda i, c: tj.where(i > 0.5, c * 1.5, 0.1 * c) + x, x))

    full_check(f, np.array([0.7, -0.2, 0.4]))


def test_where_in_a_checkpointed_body_and_on_a_param():
    """The checkpointed body stores only carries (no bool residual); a mask on params is
    hoisted (array) - both work, and match the unrolled loop."""

    def f(x):
        a = tj.fori_loop(0, 3, tj.checkpoint(lambda i, c: tj.where(c > 0, c * 1.5, 0.1 * c) + x), x)
        b = tj.fori_loop(0, 3, lambda i, c: tj.where(x > 0, c * 1.5, 0.1 * c) + x, x)
        return np.sum(a) + np.sum(b * b)

    def unrolled(x):
        a, b = x, x
        for _ in range(3):
            a = tj.where(a > 0, a * 1.5, 0.1 * a) + x
            b = tj.where(x > 0, b * 1.5, 0.1 * b) + x
        return np.sum(a) + np.sum(b * b)

    full_check(f, np.array([0.7, -0.2, 0.4]), unrolled=unrolled)


def test_scan_over_an_empty_sequence_returns_init():
    def f(x):
        c, _ = tj.scan(lambda c, t: (c * t, c), x, np.zeros((0, 3)))
        return np.sum(c * c)

    full_check(f, RNG.random(3))


def test_scan_with_length_zero_returns_init():
    def f(x):
        c, _ = tj.scan(lambda c, t: (c * 2.0, c), x, None, length=0)
        return np.sum(c * c)

    full_check(f, RNG.random(3))


def test_captured_array_times_param_in_a_body():
    W = np.array([[1.0, 2.0], [0.5, -1.0]])

    def f(p):
        return np.sum(tj.fori_loop(0, 2, lambda i, h: h * 0.5 + W @ p, p))

    def unrolled(p):
        h = p
        for _ in range(2):
            h = h * 0.5 + W @ p
        return np.sum(h)

    full_check(f, np.array([0.3, 0.7]), unrolled=unrolled)


def test_views_as_xs_params_and_init_and_ys_fed_to_another_scan():
    big = RNG.normal(size=(8, 3))

    def f(x):
        c1, ys = tj.scan(lambda c, t: (np.sin(c) * t + x, c * c), x, big[2:6])
        c2, zs = tj.scan(lambda c, t: (c * 0.5 + t * x[2], np.sum(c * t)), x[::-1], ys)
        seq = np.arange(1.0, 5.0).reshape(4, 1) * x.reshape(1, 3)
        c3, ws = tj.scan(
            lambda c, t: (c * t[::-1] + 0.1, t[1:] * c[:2]), x[1:3].sum() * np.ones(3), seq[1:]
        )
        return np.sum(c2) + np.sum(zs) + np.sum(c1) + np.sum(c3) + np.sum(ws**2)

    full_check(f, np.array([0.7, -0.2, 0.4]))


def test_while_inside_scan_with_a_per_step_trip_count():
    T = np.array([[2.0], [0.0], [5.0], [1.0], [9.0]])

    def f(x):
        def step(c, t):
            w, k = tj.while_loop(
                lambda s: s[1] < t[0],
                lambda s: (np.sin(s[0]) * x + c, s[1] + 1.0),
                (c, 0.0),
                max_steps=6,
            )
            return w * 0.5, k

        c, ks = tj.scan(step, x, T)
        return np.sum(c) + np.sum(ks)

    def unrolled(x):
        c, tot = x, 0.0
        for t in T:
            w, k = c, 0.0
            for _ in range(6):
                if not k < t[0]:
                    break
                w, k = np.sin(w) * x + c, k + 1.0
            c, tot = w * 0.5, tot + k
        return np.sum(c) + tot

    full_check(f, np.array([0.7, -0.2, 0.4]), unrolled=unrolled)


def test_inner_loop_depending_only_on_params_is_hoisted_correctly():
    def f(x):
        def outer(i, c):
            inner = tj.fori_loop(0, 3, lambda j, w: np.sin(w) * x + j, x)
            return c * inner * 0.5 + i

        return np.sum(tj.fori_loop(0, 3, outer, x))

    def unrolled(x):
        inner = x
        for j in range(3):
            inner = np.sin(inner) * x + j
        c = x
        for i in range(3):
            c = c * inner * 0.5 + i
        return np.sum(c)

    full_check(f, np.array([0.7, -0.2, 0.4]), unrolled=unrolled)


def test_compiling_in_two_threads_while_one_is_tracing_a_loop_body():
    inside, release = threading.Event(), threading.Event()
    results = {}

    def slow(x):
        def body(i, c):
            inside.set()
            release.wait(10)
            return np.sin(c) * x

        return np.sum(tj.fori_loop(0, 3, body, x))

    def worker():
        try:
            results["a"] = tj.compile(slow, np.ones(2), cache=False)(np.ones(2))
        except Exception as e:  # pragma: no cover - reported below
            results["a"] = e

    t = threading.Thread(target=worker)
    t.start()
    try:
        assert inside.wait(10)
        try:
            results["b"] = tj.compile(lambda x: np.sum(x * x), np.ones(2), cache=False)(np.ones(2))
        except Exception as e:
            results["b"] = e
    finally:
        release.set()
        t.join(30)
    assert not isinstance(results.get("b"), Exception), results.get("b")
    assert not isinstance(results.get("a"), Exception), results.get("a")
    np.testing.assert_allclose(results["b"], 2.0 * np.ones(2))


def test_scalar_arguments_fori_then_while_with_batch():
    def f(x, y):
        c = tj.fori_loop(0, 4, lambda i, c: np.sin(c) * x + y, x)
        v = tj.while_loop(lambda v: v < 5.0, lambda v: v * 1.7 + x, c, max_steps=20)
        return v * c

    h = 1e-6
    for an in (0, 1, (0, 1)):
        g = tj.compile(f, 0.5, 0.25, argnums=an, cache=False)
        xs = np.array([0.5, 0.9, 2.0])  # different trip counts of the while loop
        B = g.batch(xs, np.full(3, 0.25))
        for r, x in enumerate(xs):
            v, gr = g.value_and_grad(x, 0.25)
            assert v == pytest.approx(f(x, 0.25), rel=1e-12)
            fx = (f(x + h, 0.25) - f(x - h, 0.25)) / (2 * h)
            fy = (f(x, 0.25 + h) - f(x, 0.25 - h)) / (2 * h)
            want = {0: fx, 1: fy, (0, 1): (fx, fy)}[an]
            np.testing.assert_allclose(gr, want, rtol=1e-6)
            np.testing.assert_array_equal(B[r] if an != (0, 1) else (B[0][r], B[1][r]), gr)


def test_disk_cache_sees_a_changed_array_captured_only_inside_a_body(tmp_path):
    def make(k):
        def f(x):
            return np.sum(tj.fori_loop(0, 3, lambda i, c: np.sin(c) * k + x, x) ** 2)

        return f

    x = RNG.random(3)
    k1 = np.array([0.5, 0.6, 0.7])
    a = tj.compile(make(k1), x, cache=str(tmp_path))
    b = tj.compile(make(k1 * 2.0), x, cache=str(tmp_path))
    c = tj.compile(make(k1.copy()), x, cache=str(tmp_path))
    assert b.stats["cache"] == "miss" and c.stats["cache"] == "hit"
    fd_check(make(k1 * 2.0), (x,), 0, b(x))
    np.testing.assert_array_equal(a(x), c(x))
