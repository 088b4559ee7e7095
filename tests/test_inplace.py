"""In-place updates of traced arrays, numpy's view semantics, and conversions that would drop a
derivative (README "In-place updates"; tapejit/frontend/views.py).

Every model here is plain numpy code: run on numpy arrays it is its own reference. Each is checked
three ways on random inputs: the compiled value against numpy's, the compiled gradient against
float64 central differences along random directions (rtol 1e-6), and against the IR interpreter
run on the joint graph (rtol 1e-12), which shares no code with codegen.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tapejit as tj
from tapejit.ad import autodiff
from tapejit.core import interpret
from tapejit.frontend import tracing

RNG = np.random.default_rng(12)


def central_difference(f, x, v, h=1e-6):
    return (f(x + h * v) - f(x - h * v)) / (2 * h)


def check(f, x, directions=3):
    """Compiled value and gradient of ``f`` at ``x`` against numpy, central differences and the
    interpreter."""
    g = tj.compile(f, x, cache=False)
    value, grad = g.value_and_grad(x)
    assert value == pytest.approx(float(f(x.copy())), rel=1e-12, abs=1e-12)
    joint = autodiff.vjp_graph(tracing.trace(f, (x,), (0,)))
    ref_value, ref_grad = interpret.evaluate(joint, [x])
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-12, atol=1e-12)
    assert value == pytest.approx(float(ref_value), rel=1e-12, abs=1e-12)
    for _ in range(directions):
        v = RNG.standard_normal(x.shape)
        fd = central_difference(lambda z: f(z.copy()), x, v)
        assert np.vdot(grad, v) == pytest.approx(fd, rel=1e-6, abs=1e-7)
    return grad


P = np.array([0.3, 0.7, 1.1])


# -- the table: each row is a correct gradient or a clear error ---------------------------
def fill_numpy_array(p):
    a = np.zeros(3)
    a[0] = p[0]  # MARK
    a[1] = p[1] * p[2]
    return np.sum(a * a)


def fill_loop_numpy_array(x):
    acc = np.zeros(len(x))
    for i in range(len(x)):
        acc[i] = np.exp(x[i])  # MARK
    return acc.sum()


def test_a_loop_filling_a_numpy_array_is_converted():
    """The loop form of ``fill_numpy_array`` is converted from the source: the array is a
    traced value the loop writes into, so the derivative is kept (no error)."""
    g = tj.compile(fill_loop_numpy_array, P, cache=False)
    np.testing.assert_allclose(g(P), np.exp(P), rtol=1e-14)


def float_of_element(p):
    return float(p[0]) ** 2 + p[1]  # MARK


def math_exp_of_element(p):
    return math.exp(p[0])  # MARK


def augmented_numpy_array(p):
    a = np.zeros(3)
    a += p  # MARK
    return np.sum(a)


def max_of_empty(p):
    return np.max(p[:0]) + np.sum(p)  # MARK


def line_of(f):
    import inspect

    lines, start = inspect.getsourcelines(f)
    return start + next(i for i, t in enumerate(lines) if "# MARK" in t)


@pytest.mark.parametrize(
    "f,patterns",
    [
        (fill_numpy_array, [r"storing a traced value into a numpy array", r"np\.zeros_like\(x"]),
        (float_of_element, [r"float\(\) of a traced value", r"drops its derivative"]),
        (math_exp_of_element, [r"math\.exp\(\) converts", r"np\.exp"]),
        (augmented_numpy_array, [r"numpy array cannot hold traced values", r"a = a \+ t"]),
        (max_of_empty, [r"zero-size array to reduction operation maximum"]),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_conversions_that_drop_a_derivative_raise_at_the_users_line(f, patterns):
    with pytest.raises(tj.TracingError) as ei:
        tj.compile(f, P, cache=False)
    msg = str(ei.value)
    assert f"test_inplace.py:{line_of(f)} in {f.__name__}()" in msg, msg
    for pat in patterns:
        assert __import__("re").search(pat, msg), (pat, msg)
    assert not tracing._current


def test_the_tables_rows_written_with_traced_arrays_are_correct():
    def fill(p):
        a = np.zeros_like(p)
        a[0] = p[0]
        a[1] = p[1] * p[2]
        return np.sum(a * a)

    np.testing.assert_allclose(check(fill, P), [0.6, 2 * 0.7 * 1.1**2, 2 * 1.1 * 0.7**2])

    def fill_loop(x):
        acc = np.zeros_like(x)
        for i in range(len(x)):
            acc[i] = np.exp(x[i])
        return acc.sum()

    x = RNG.standard_normal(7)
    np.testing.assert_allclose(check(fill_loop, x), np.exp(x), rtol=1e-12)


@pytest.mark.parametrize(
    "conversion",
    [
        lambda t: np.float64(t),
        lambda t: t.item(),
        lambda t: complex(t),
        lambda t: np.asarray(t, dtype=float),  # np.asarray(t) is an object array of tracers
        lambda t: np.array(t, dtype=float),
    ],
    ids=["np.float64", "item", "complex", "asarray", "array"],
)
def test_every_conversion_of_a_differentiated_value_raises(conversion):
    with pytest.raises(tj.TracingError, match="traced value"):
        tj.compile(lambda p: np.sum(conversion(p * 2.0)) + p[1], P, cache=False)
    if conversion(np.float64(1.0)).__class__ is not np.ndarray:  # scalar conversions
        with pytest.raises(tj.TracingError, match="traced value"):
            tj.compile(lambda p: conversion(p[0] * 2.0) + p[1], P, cache=False)


def test_arrays_of_traced_scalars_stack():
    """np.array([x0, x1]) holds the tracers in an object array; numpy's object loops trace
    through them and any traced op stacks it back into one array."""

    def f(p):
        v = np.array([p[0] * p[1], np.sin(p[2]), p[0] + 1.5])
        m = np.array([[p[0], 0.0], [p[1], p[2]]])
        return np.sum(np.exp(v) * p) + np.sum(m @ np.array([1.0, 2.0])) + np.asarray(p[0] ** 2)

    check(f, P)

    def mixed(p):
        return np.sum(np.exp(np.array([p[0], 1.5])))  # MARK: exp of the float 1.5 in an object array

    with pytest.raises(tj.TracingError, match=r"object array .* np\.stack") as ei:
        tj.compile(mixed, P, cache=False)
    assert f"test_inplace.py:{line_of(mixed)}" in str(ei.value)


def test_a_conversion_error_swallowed_by_f_still_raises():
    def f(p):
        a = np.zeros(3)
        try:
            a[0] = p[0]
        except ValueError:
            pass
        return np.sum(p * a)

    with pytest.raises(tj.TracingError, match="storing a traced value"):
        tj.compile(f, P, cache=False)


def test_print_and_format_show_the_value_and_change_nothing(capsys):
    def f(p):
        y = np.exp(p)
        print(y, f"{y[0]:.4f}", repr(y[1]))
        return np.sum(y * p)

    check(f, P)
    out = capsys.readouterr().out
    assert f"{math.exp(0.3):.4f}" in out


# -- writes into traced arrays ----------------------------------------------------------------------
def slices_and_rows(x):
    y = np.zeros_like(x, shape=(3, 4))
    y[0] = x[:4]
    y[1, 1:3] = x[4] * x[5]
    y[2, ::-2] = np.sin(x[6:8])
    y[:, 3] += x[8]
    y[-1, 0] = y[0, 0] * x[9]  # reads after a write see the write
    y[1] *= 2.0
    return np.sum(y * y) + y[1, 2]


def augmented_elements(x):
    y = x.copy()
    for i in range(1, len(x)):
        y[i] += y[i - 1] * 0.5  # a running update: each read sees the previous writes
    y[0] -= 1.0
    y[2] /= 3.0
    y[3] **= 2
    return np.sum(y**3)


def like_constructors(x):
    a = np.empty_like(x)
    a[...] = 2.0 * x
    b = np.ones_like(x)
    b[1:] = a[:-1]
    c = np.full_like(x, x[0])  # a traced fill value
    d = np.copy(x)
    d[0] = 0.0
    return np.sum(a * b * c) + np.sum(d * d)


def whole_array_augmented(x):
    y = np.exp(x)
    z = y  # another name for the same array: sees the update, as in numpy
    y += x
    y *= x
    return np.sum(z)


def scalar_augmented_rebinds(x):
    s = np.sum(x)
    t = s  # numpy scalars are immutable: t keeps the old value
    s += 1.0
    return s * t


def bool_mask_array(x):
    m = np.zeros_like(x, dtype=bool)
    m[1:3] = x[1:3] > 0.0
    return np.sum(tj.where(m, x * x, x))


MODELS = [slices_and_rows, augmented_elements, like_constructors, whole_array_augmented,
          scalar_augmented_rebinds, bool_mask_array]  # fmt: skip


@pytest.mark.parametrize("f", MODELS, ids=lambda f: f.__name__)
def test_writes_into_traced_arrays_follow_numpy(f):
    for _ in range(2):
        check(f, RNG.uniform(0.5, 1.5, 10))


def test_a_chain_of_element_writes_updates_in_place():
    """y[i] = v for every i is O(n) work, not O(n^2): each scatter updates the buffer in place."""
    from tapejit.passes import memplan

    def f(x):
        y = np.zeros_like(x)
        for i in range(len(x)):
            y[i] = x[i] * x[i]
        return np.sum(y)

    for n in (50, 200):
        x = RNG.standard_normal(n)
        g = tj.compile(f, x, cache=False)
        np.testing.assert_allclose(g(x), 2 * x, rtol=1e-12)
        work = memplan.work(g._primary.stages()["plan"])
        assert work < 40 * n, (n, work)


# -- views ------------------------------------------------------------------------------------------
def write_through_slice_view(x):
    y = x * 1.0
    v = y[1:]
    v[0] = 3.0  # y[1] is now 3.0
    v[1:] *= x[0]
    return np.sum(y * x)


def base_write_seen_by_earlier_view(x):
    y = x.reshape(2, 3) * 2.0
    row = y[1]
    col = y[:, 2]
    y[1, 2] = x[0] ** 2  # row and col see it
    y[[0, 0], [1, 1]] = x[3]  # an integer-array write: y[0, 1], twice
    y[0] += 1.0
    return np.sum(row) * np.sum(col) + row[2] * col[0]


def transposed_and_reshaped_views(x):
    y = np.exp(x).reshape(2, 3)
    t = y.T
    t[2, 0] = x[1]  # y[0, 2]
    flat = y.reshape(-1)  # a view of contiguous y
    flat[4] = 7.0 * x[2]  # y[1, 1]
    return np.sum(y * y) + t[1, 1]


def reshape_of_transposed_is_a_copy(x):
    y = x.reshape(2, 3) + 1.0
    c = y.T.reshape(-1)  # numpy must copy here: writes to c do not reach y
    c[0] = 100.0
    y[0, 0] = x[5]  # and writes to y do not reach c
    return np.sum(c * x) + np.sum(y)


def view_of_view(x):
    y = x.reshape(2, 3) * x[0]
    v = y[:, 1:]
    w = v[1]
    w[0] = -x[1]  # y[1, 1]
    v[0, 1] += w[1]  # y[0, 2] += y[1, 2]
    return np.sum(y**2) + np.sum(w)


def flatten_copies(x):
    y = x * 2.0
    f = y.flatten()
    f[0] = 9.0  # flatten always copies
    r = y.ravel()
    r[1] = x[2]  # ravel of a contiguous array is a view
    return np.sum(y * x) + np.sum(f)


VIEW_MODELS = [write_through_slice_view, base_write_seen_by_earlier_view,
               transposed_and_reshaped_views, reshape_of_transposed_is_a_copy, view_of_view,
               flatten_copies]  # fmt: skip


@pytest.mark.parametrize("f", VIEW_MODELS, ids=lambda f: f.__name__)
def test_views_share_writes_as_in_numpy(f):
    check(f, RNG.uniform(0.5, 1.5, 6))


# Random sequences of writes through random views, run once on numpy arrays (the reference) and
# once traced: every read of every alias must agree.
_VIEW_STEPS = st.sampled_from(
    [
        "v = y[1]",
        "v = y[:, 1:]",
        "v = y.T",
        "v = y[::-1, ::2]",
        "v = y.reshape(-1)",
        "v = y.T.reshape(-1)",
        "v = y[0, :]",
        "v = v[::-1]",
    ]
)
_WRITES = st.sampled_from(
    [
        "y[0, 1] = x[0] * x[1]",
        "y[1] += x[2:5]",
        "v[0] = x[3]",
        "v[...] = v * x[0]",
        "v += 1.0",
        "y *= x[4]",
        "y[:, 0] = np.sin(v.sum())",
        "acc = acc + np.sum(v * v)",
        "acc = acc + np.sum(y[1] * v[-1])",
    ]
)


@pytest.mark.slow  # 60 random view/write programs; the hand-written cases above run by default
@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.tuples(_VIEW_STEPS, _WRITES), min_size=1, max_size=6))
def test_random_writes_through_views_match_numpy(program):
    lines = ["def f(x):", "    y = x[:6].reshape(2, 3) * 1.0", "    v = y", "    acc = 0.0"]
    for view, write in program:
        lines += [f"    {view}", f"    {write}"]
    lines.append("    return acc + np.sum(y * y) + np.sum(v)")
    src = "\n".join(lines)
    env = {"np": np}
    exec(compile(src, "<view program>", "exec"), env)
    f = env["f"]
    x = RNG.uniform(0.5, 1.5, 6)
    try:
        f(x.copy())
    except ValueError:
        return  # numpy itself rejects this program (a shape mismatch): nothing to compare
    try:
        check(f, x, directions=2)
    except tj.TracingError as e:
        assert "view" not in str(e), f"{src}\n{e}"
    except AssertionError as e:
        raise AssertionError(f"{src}\n{e}") from None


# -- writes that cannot follow numpy raise ----------------------------------------------------------
def write_into_argument(x):
    x[0] = 1.0  # MARK
    return np.sum(x)


def write_into_view_of_argument(x):
    v = x[1:]
    v += 1.0  # MARK
    return np.sum(x)


def augmented_argument(x):
    x *= 2.0  # MARK
    return np.sum(x)


def broadcast_mismatch(x):
    y = x.copy()
    y[0:2] = x[:3]  # MARK
    return np.sum(y)


def traced_mask_values_write(x):
    y = x.copy()
    y[x > 1.0] = x[:2]  # MARK: as many values as the data-dependent mask selects
    return np.sum(y)


def write_into_outer_array_in_loop_body(x):
    y = x * 1.0

    def body(i, c):
        y[0] = c  # MARK
        return c + 1.0

    tj.fori_loop(0, 3, body, x[0])
    return np.sum(y)


@pytest.mark.parametrize(
    "f,pattern",
    [
        (write_into_argument, r"argument x .*\(x = x\.copy\(\)\)"),
        (write_into_view_of_argument, r"argument x"),
        (augmented_argument, r"argument x"),
        (broadcast_mismatch, r"could not broadcast input array from shape \(3,\) into shape \(2,\)"),
        (traced_mask_values_write, r"traced mask: the number of selected elements"),
        (write_into_outer_array_in_loop_body, r"enclosing function inside a loop body"),
    ],
    ids=lambda v: getattr(v, "__name__", None),
)
def test_writes_that_cannot_follow_numpy_raise(f, pattern):
    with pytest.raises(tj.TracingError, match=pattern) as ei:
        tj.compile(f, RNG.uniform(0.5, 1.5, 6), cache=False)
    assert f"test_inplace.py:{line_of(f)}" in str(ei.value)
    assert not tracing._current


def test_one_value_written_through_a_traced_mask_is_a_where():
    """``y[x > 1] = c`` (scipy's logsumexp writes so) is ``where(x > 1, c, y)`` for every input:
    the overwritten elements get no derivative, the others keep theirs; no guard."""

    def f(x):
        y = x * x
        y[x > 1.0] = 1.0
        y[(x < 0.7,)] = np.float64(-2.0)
        return np.sum(y * np.arange(6.0))

    x = RNG.uniform(0.5, 1.5, 6)
    grad = tj.compile(f, x, cache=False)
    value, g = grad.value_and_grad(x)
    assert value == pytest.approx(f(x), rel=1e-14)
    np.testing.assert_allclose(g, np.where((x > 1.0) | (x < 0.7), 0.0, 2 * x * np.arange(6.0)))
    other = RNG.uniform(0.5, 1.5, 6)
    assert grad.value_and_grad(other)[0] == pytest.approx(f(other), rel=1e-14)
    assert len(grad.specialisations) == 1


# -- blocks written into a constant ----------------------------------------------------------------


def _zeros_then_block(x):
    y = np.zeros_like(x, shape=(12,))
    y[3:7] = np.tanh(x[:4] * 2.0)  # a block of zeros overwritten: the update lands in place
    return np.sum(np.sin(y) * np.arange(12.0)) + y[5] * x[6]


def _ones_plus_block(x):
    y = np.ones_like(x, shape=(4, 3))
    y[1:3] += x[:6].reshape(2, 3) ** 2  # added into a constant other than zero
    return np.sum(y * y * x[:12].reshape(4, 3))


def _concatenated(x):
    a = np.exp(x[:3])
    b = np.matmul(x[3:7].reshape(2, 2), x[7:9])
    return np.sum(np.concatenate([a, b, -a]) ** 2 * x[:8])


def _signed_zero_block(x):
    y = np.zeros_like(x, shape=(5,))
    y[1:3] += -0.0 * x[:2]  # 0.0 + (-0.0) is +0.0: numpy's, kept
    return np.sum(np.arctan2(y, -1.0) * x[:5])


def _constant_read_then_written(x):
    u = np.exp(x[:3]) * 1.9
    c = np.zeros_like(x, shape=(6,)) + 1.5  # in memory: the product below reads it
    d = (x[:6] * np.sum(u)) @ c  # its last read before the write
    c[1:4] = u  # the write updates the constant's buffer in place: u cannot be computed there
    return np.sum(c**2 * np.arange(6.0)) + d


@pytest.mark.parametrize(
    "f",
    [_zeros_then_block, _ones_plus_block, _concatenated, _signed_zero_block,
     _constant_read_then_written],
)  # fmt: skip
def test_blocks_written_into_constants(f):
    """A scatter into a constant fills around its block and writes the block once; an update
    computed for that block alone is computed straight into it (memory planning): the values
    and gradients are numpy's."""
    check(f, RNG.normal(size=12))


def test_an_update_computed_into_its_block():
    """The cotangent of a slice of a packed parameter vector (``W = p[a:b].reshape``) is
    written by the kernel that computes it, into its block of the gradient: no copy."""
    from tapejit.runtime.variant import compile_graph  # noqa: F401  (the plan is what is checked)

    def f(p):
        W = p[:16].reshape(4, 4)
        return np.sum(np.tanh(W @ p[16:20]))

    p = RNG.normal(size=20)
    grad = tj.compile(f, p, cache=False)
    check(f, p)
    plan = grad.ir("plan")
    assert "alias of" in plan and "scatter" in plan, plan
