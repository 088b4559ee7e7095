"""The JAX names newcomers look for: ``stop_gradient``, ``jit``, ``vmap``, and indexing at a
traced position (``x[i]`` with a loop counter). Values against numpy, gradients against float64
central differences in random directions, ``vmap`` against a Python loop over rows, and an
out-of-range traced index is an ``IndexError``, never a read of other memory."""

from __future__ import annotations

import numpy as np
import pytest

import tapejit as tj
from tapejit.frontend import dynamic_index
from tapejit.core import ops

H = 1e-6


def check_grad(g, f, x, rng, rel=1e-6, n=3):
    """``<g, v>`` against the central difference of ``f`` at ``x`` in random directions."""
    for _ in range(n):
        v = rng.standard_normal(np.shape(x))
        fd = (f(x + H * v) - f(x - H * v)) / (2 * H)
        assert np.vdot(g, v) == pytest.approx(fd, rel=rel, abs=1e-7)


# -- stop_gradient ----------------------------------------------------------------------------------


def sg_loss(x):
    return np.sum(x * tj.stop_gradient(x)) + tj.stop_gradient(np.sum(np.sin(x))) ** 2


def test_stop_gradient_is_the_value_with_a_zero_derivative():
    x = np.array([0.5, -1.0, 2.0])
    assert tj.stop_gradient(x) is x and tj.stop_gradient(2.0) == 2.0
    assert tj.jit(sg_loss)(x) == pytest.approx(np.sum(x * x) + np.sum(np.sin(x)) ** 2)
    assert np.array_equal(tj.grad(sg_loss)(x), x)  # d/dx sum(x * c) with c = x held fixed
    assert np.array_equal(tj.hessian(sg_loss)(x), np.zeros((3, 3)))
    assert np.array_equal(tj.hvp(sg_loss, x, np.ones(3)), np.zeros(3))
    y, t = tj.jvp(lambda x: tj.stop_gradient(x) * 3.0, (x,), (np.ones(3),))
    assert np.array_equal(y, 3 * x) and np.array_equal(t, np.zeros(3))
    jac = tj.jacfwd(lambda x: np.exp(tj.stop_gradient(x)) + x)(x)
    assert np.array_equal(jac, np.eye(3))


def test_stop_gradient_of_a_pytree_and_in_a_loop():
    x = np.array([1.0, 2.0])

    def f(x):
        a, b = tj.stop_gradient((x, {"k": 2 * x}))
        return np.sum(a * x) + np.sum(b["k"]) + tj.fori_loop(
            0, 3, lambda i, c: c + tj.stop_gradient(c * x[0]), 1.0
        )

    assert np.array_equal(tj.grad(f)(x), x)
    assert ops.Op.STOP_GRADIENT in ops.NONDIFFERENTIABLE


# -- jit ----------------------------------------------------------------------------------------------


def test_jit_values_and_pytrees():
    rng = np.random.default_rng(0)
    X, w = rng.standard_normal((5, 3)), rng.standard_normal(3)

    def f(params, X):
        z = np.tanh(X @ params["w"]) + params["b"]
        return {"z": z, "stats": (z.sum(), z.max())}

    jf = tj.jit(f)
    params = {"w": w, "b": 0.5}
    got = jf(params, X)
    want = f(params, X)
    assert np.allclose(got["z"], want["z"], rtol=1e-14)
    assert got["stats"][0] == pytest.approx(want["stats"][0]) and isinstance(got["stats"], tuple)
    assert len(jf.specialisations) == 1
    jf(params, X[:2])  # another shape: another specialisation
    assert len(jf.specialisations) == 2
    assert tj.jit(lambda x: x)(X) is not X and np.array_equal(tj.jit(lambda x: x)(X), X)
    assert tj.jit(np.exp)(1.0) == pytest.approx(np.e)


def test_jit_validates_and_recompiles_on_guards():
    def f(x):
        return x * 2.0 if x[0] > 0 else -x

    jf = tj.jit(f)
    assert np.array_equal(jf(np.array([1.0, 2.0])), [2.0, 4.0])
    assert np.array_equal(jf(np.array([-1.0, 2.0])), [1.0, -2.0])  # the guard: a recompile
    with pytest.raises(TypeError, match="argument 0"):
        jf(np.array(["a", "b"]))
    with pytest.raises(TypeError):
        tj.jit(3)


def test_jit_composes_with_grad():
    x = np.array([0.3, -0.7])
    g = lambda x: np.sum(np.sin(x) ** 2)  # noqa: E731
    assert np.allclose(tj.grad(tj.jit(g))(x), np.sin(2 * x))
    assert np.allclose(tj.jit(tj.grad(g))(x), np.sin(2 * x))


# -- vmap ---------------------------------------------------------------------------------------------


def test_vmap_against_a_python_loop():
    rng = np.random.default_rng(1)
    X, W = rng.standard_normal((6, 4)), rng.standard_normal((4, 3))

    def f(x, W):
        h = np.tanh(x @ W)
        return h, np.sum(h * h)

    got = tj.vmap(f, in_axes=(0, None))(X, W)
    rows = [f(x, W) for x in X]
    assert np.allclose(got[0], np.stack([r[0] for r in rows]), rtol=1e-14)
    assert np.allclose(got[1], [r[1] for r in rows], rtol=1e-14)
    assert np.allclose(tj.vmap(tj.vmap(lambda s: s * s + 1.0))(X), X * X + 1.0)
    with pytest.raises(ValueError, match="leading lengths"):
        tj.vmap(lambda a, b: a + b)(X, X[:2])
    with pytest.raises(ValueError, match="out_axes"):
        tj.vmap(f, out_axes=1)


def test_vmap_of_grad_and_grad_of_vmap():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((5, 3))

    def g(x):
        return np.sum(np.sin(x) * x**2)

    def dg(x):
        return np.cos(x) * x**2 + 2 * x * np.sin(x)

    G = tj.vmap(tj.grad(g))(X)  # per-row gradients
    assert np.allclose(G, dg(X), rtol=1e-12)

    def total(X):
        return np.sum(tj.vmap(g)(X) ** 2)

    per_row = np.array([g(x) for x in X])
    assert np.allclose(tj.grad(total)(X), 2 * per_row[:, None] * dg(X), rtol=1e-12)
    check_grad(tj.grad(total)(X), lambda Y: np.sum(np.array([g(y) for y in Y]) ** 2), X, rng)


# -- traced indices -------------------------------------------------------------------------------------


def test_loop_counter_reads_and_gradients():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(10)

    def f(x):
        return tj.fori_loop(0, 9, lambda i, c: c + x[i] * np.sin(x[i + 1]), 0.0)

    def ref(x):
        return sum(x[i] * np.sin(x[i + 1]) for i in range(9))

    assert tj.jit(f)(x) == pytest.approx(ref(x), rel=1e-14)
    check_grad(tj.grad(f)(x), ref, x, rng)


def test_rows_writes_and_second_order():
    rng = np.random.default_rng(4)
    A = rng.standard_normal((5, 3))

    def f(A):
        def body(i, c):
            c[i] = np.sin(A[i, :]) * A[i + 1]  # a row at a traced position
            c[i, 0] += A[i, 2] ** 2  # an element, augmented
            return c

        return np.sum(tj.fori_loop(0, 4, body, np.zeros_like(A)) ** 2)

    def ref(A):
        c = np.zeros_like(A)
        for i in range(4):
            c[i] = np.sin(A[i, :]) * A[i + 1]
            c[i, 0] += A[i, 2] ** 2
        return np.sum(c**2)

    assert tj.jit(f)(A) == pytest.approx(ref(A), rel=1e-14)
    g = tj.grad(f)(A)
    check_grad(g, ref, A, rng)
    v = rng.standard_normal(A.shape)
    fd = (tj.grad(f)(A + 1e-5 * v) - tj.grad(f)(A - 1e-5 * v)) / 2e-5
    assert np.allclose(tj.hvp(f, A, v), fd, atol=1e-6)
    assert tj.jvp(f, (A,), (v,))[1] == pytest.approx(np.vdot(g, v), rel=1e-12)


def test_column_index_nested_loops_and_negative_positions():
    rng = np.random.default_rng(5)
    A = rng.standard_normal((5, 3))

    def f(A):
        def outer(i, s):
            return tj.fori_loop(0, 5, lambda j, t: t + A[j, i] * A[-1 - j, 2 - i], s)

        return tj.fori_loop(0, 3, outer, 0.0)

    assert tj.jit(f)(A) == pytest.approx(np.sum(A * A[::-1, ::-1]), rel=1e-13)
    assert np.allclose(tj.grad(f)(A), 2 * A[::-1, ::-1], rtol=1e-13)

    def s(x):  # scan: the position counted in the carry
        return np.sum(tj.scan(lambda k, xt: (k + 1.0, xt * x[-1 - k]), 0.0, x)[1])

    x = rng.standard_normal(6)
    assert tj.jit(s)(x) == pytest.approx(np.sum(x * x[::-1]), rel=1e-13)
    assert np.allclose(tj.grad(s)(x), 2 * x[::-1])


def test_a_proved_position_costs_no_check_and_an_unproved_one_is_checked():
    x = np.arange(10.0)

    def proved(x):
        return tj.fori_loop(0, 9, lambda i, c: c + x[i + 1] * x[8 - i], 0.0)

    assert not tj.compile(proved, x, cache=False).specialisations[0]["guards"]

    def carried(x):  # a position carried through a while_loop: checked at run time
        body = lambda c: (c[0] + 2.0, c[1] + x[c[0]])  # noqa: E731
        return tj.while_loop(lambda c: c[0] < 10, body, (0.0, 0.0), max_steps=20)[1]

    g = tj.compile(carried, x, cache=False)
    sites = [s["source"] for s in g.specialisations[0]["guards"]]  # (and while_loop's max_steps)
    assert sum(dynamic_index.is_index_site(s) for s in sites) == 1
    assert tj.jit(carried)(x) == pytest.approx(np.sum(x[::2]))
    assert np.array_equal(g(x), (np.arange(10) % 2 == 0).astype(float))


def test_out_of_range_raises_index_error_naming_the_line():
    x = np.arange(10.0)

    def reads_past_the_end(x):
        return tj.fori_loop(0, 10, lambda i, c: c + x[i + 1], 0.0)

    for fn in (tj.jit(reads_past_the_end), tj.grad(reads_past_the_end)):
        with pytest.raises(IndexError, match=r"test_jax_names.py:\d+ in <lambda>"):
            fn(x)

    def carried(x):
        body = lambda c: (c[0] + 3.0, c[1] + x[c[0]])  # noqa: E731  reads x[12]
        return tj.while_loop(lambda c: c[0] < 13, body, (0.0, 0.0), max_steps=20)[1]

    with pytest.raises(IndexError, match="out of range"):
        tj.grad(carried)(x)

    def writes(x):
        def body(i, c):
            c[2 * i] = x[i]  # writes c[10] at i = 5
            return c

        return np.sum(tj.fori_loop(0, 6, body, np.zeros_like(x)))

    with pytest.raises(IndexError, match="out of range"):
        tj.jit(writes)(x)

    def top_level(x, k):  # a position computed from an input, outside any loop
        return x[k * 2.0]

    jt = tj.jit(top_level)
    assert jt(x, 3.0) == 6.0
    for bad in (5.0, 2.25, -6.0):
        with pytest.raises(IndexError, match="not a whole number"):
            jt(x, bad)
    assert jt(x, -1.0) == 8.0  # negative positions count from the end, as numpy's
