"""Element access through a table of positions (tapejit/core/ops_table.py, codegen/lower/table.py):
``take`` and ``add_at`` against their numpy references and each other's adjoint, and
``x[idx]`` with a numpy index array traced as one ``take`` — values, gradients (central
differences), forward mode, and numpy's errors and shapes."""

from __future__ import annotations

import numpy as np
import pytest

import tapejit as tj
from tapejit.core import interpret, ir, ops
from tapejit.frontend import tracing
from tapejit.core.ir import Graph, Type
from tapejit.core.ops import Op
from tapejit.core.ops_table import add_at, table_of, take

RNG = np.random.default_rng(21)


def fd_check(f, x, grad):
    d = RNG.normal(size=x.shape)
    fd = (f(x + 1e-6 * d) - f(x - 1e-6 * d)) / 2e-6
    np.testing.assert_allclose(np.sum(grad * d), fd, rtol=1e-6, atol=1e-8)


def test_take_and_add_at_match_numpy_and_are_adjoint():
    x_in = ops.input_node(0, "x", Type((7, 3)))
    t_in = ops.input_node(1, "t", Type((9,)))
    u_in = ops.input_node(2, "u", Type((9, 3)))
    table = np.array([6, 0, 3, 3, 1, 6, 6, 2, 0], dtype=np.float64)  # repeats accumulate
    g = Graph("g", (x_in, t_in, u_in), ("active", "const", "active"),
              (take(x_in, t_in), add_at(x_in, t_in, u_in)), bindings={1: table})  # fmt: skip
    ir.verify(g)
    x, u = RNG.normal(size=(7, 3)), RNG.normal(size=(9, 3))
    got_take, got_add = interpret.evaluate(g, [x, u])
    np.testing.assert_array_equal(got_take, x[table.astype(int)])
    want = x.copy()
    np.add.at(want, table.astype(int), u)
    np.testing.assert_array_equal(got_add, want)
    # <take(x), w> == <x, add_at(0, w)>: the rules are each other's adjoint
    w = RNG.normal(size=(9, 3))
    back = interpret.evaluate(
        Graph("b", (t_in, u_in), ("const", "active"), (add_at(ops.const(0.0, (7, 3)), t_in, u_in),),
              bindings={0: table}),  # fmt: skip
        [w],
    )[0]
    assert np.isclose(np.sum(got_take * w), np.sum(x * back))


def test_type_rules_reject_mismatched_shapes():
    x = ops.input_node(0, "x", Type((5, 2)))
    t = ops.input_node(1, "t", Type((3,)))
    with pytest.raises(ValueError, match="one row of the array per position"):
        add_at(x, t, ops.const(0.0, (3, 3)))
    with pytest.raises(ValueError, match="1-D table"):
        take(x, ops.input_node(2, "t2", Type((3, 1))))


def test_table_of_counts_negative_positions_and_rejects_others():
    np.testing.assert_array_equal(table_of([0, -1, 2], 5), [0.0, 4.0, 2.0])
    with pytest.raises(IndexError, match="index 5 is out of bounds for axis 0 with size 5"):
        table_of([1, 5], 5)
    with pytest.raises(TypeError, match="integers"):
        table_of([0.5], 5)


def gather_model(idx):
    def f(x):
        return np.sum(np.sin(x[idx]) * np.cos(x))  # idx has x's length

    return f


@pytest.mark.parametrize("n", [10, 200, 3000])
def test_index_array_reads_through_one_take(n):
    idx = RNG.integers(-n, n, n)  # negative positions and repeats
    f = gather_model(idx)
    x = RNG.normal(size=n)
    g = tracing.trace(f, [x], [0])
    assert sum(nd.op == Op.TAKE for nd in g.nodes) == 1
    grad = tj.compile(f, x, cache=False)
    val, gx = grad.value_and_grad(x)
    np.testing.assert_allclose(val, f(x), rtol=1e-13)
    fd_check(f, x, gx)
    # forward mode and second order go through the rules too
    v = RNG.normal(size=n)
    _, tangent = tj.jvp(f, (x,), (v,))
    np.testing.assert_allclose(tangent, np.sum(gx * v), rtol=1e-10, atol=1e-12)


def test_rows_and_basic_indices_after_the_table():
    pos = RNG.normal(size=(50, 3))
    nbr = RNG.integers(0, 50, (20, 4))  # a neighbour list: the result has its shape first

    def f(p):
        d = p[nbr] - p[nbr[:, :1]]  # (20, 4, 3) rows, and a (20, 1) table
        z = p[nbr, 2]  # rows then a column: (20, 4)
        return np.sum(np.sum(d * d, axis=-1) * z)

    g = tracing.trace(f, [pos], [0])
    assert sum(nd.op == Op.TAKE for nd in g.nodes) == 3
    grad = tj.compile(f, pos, cache=False)
    val, gp = grad.value_and_grad(pos)
    np.testing.assert_allclose(val, f(pos), rtol=1e-13)
    fd_check(f, pos, gp)
    H = tj.hessian(f)(pos)
    e = np.zeros_like(pos)
    e[nbr[0, 0], 1] = 1.0
    col = (tj.compile(f, pos + 1e-6 * e, cache=False)(pos + 1e-6 * e) - tj.compile(
        f, pos - 1e-6 * e, cache=False)(pos - 1e-6 * e)) / 2e-6  # fmt: skip
    np.testing.assert_allclose(H[..., nbr[0, 0], 1], col, rtol=1e-5, atol=1e-6)


def test_short_and_other_keys_keep_element_reads():
    x = RNG.normal(size=(6, 4))

    def f(x):
        return np.sum(x[[0, 2, 2]] * 2.0) + np.sum(x[:, [1, 3, 0, 1, 1, 2, 3, 0, 2]])

    g = tracing.trace(f, [x], [0])
    assert not any(nd.op == Op.TAKE for nd in g.nodes)  # 3 positions; an array on axis 1
    grad = tj.compile(f, x, cache=False)
    fd_check(f, x, grad(x))


def test_out_of_bounds_index_array_is_numpys_error():
    x = RNG.normal(size=20)
    idx = np.arange(12)
    idx[5] = 20

    def f(x):
        return np.sum(x[idx])

    with pytest.raises((IndexError, tj.TracingError), match="index 20 is out of bounds"):
        tj.compile(f, x, cache=False)


def test_put_replaces_rows_at_distinct_positions():
    from tapejit.core.ops_table import put

    a_in = ops.input_node(0, "a", Type((6, 2)))
    t_in = ops.input_node(1, "t", Type((3,)))
    u_in = ops.input_node(2, "u", Type((3, 2)))
    g = Graph("g", (a_in, t_in, u_in), ("active", "const", "active"), (put(a_in, t_in, u_in),),
              bindings={1: np.array([5.0, 0.0, 2.0])})  # fmt: skip
    a, u = RNG.normal(size=(6, 2)), RNG.normal(size=(3, 2))
    want = a.copy()
    want[[5, 0, 2]] = u
    np.testing.assert_array_equal(interpret.evaluate(g, [a, u])[0], want)
    bad = g.replace(bindings={1: np.array([5.0, 0.0, 5.0])})
    with pytest.raises(ValueError, match="distinct positions"):
        interpret.evaluate(bad, [a, u])


def test_a_branch_on_values_read_through_a_table():
    """A guard evaluates the trace's values on the example: the table's own value must be
    known there (fuzzer: 'value of input c0 missing')."""
    idx = np.array([-2, 0, 0, -1, -2, 0, 0, -2, 1, -2])

    def f(x):
        v = x[idx]
        if np.sum(v) > 0.3:
            return np.sum(np.sin(v) * 2.0)
        return np.sum(v * v - 1.0)

    for x in (np.array([0.9, -0.2, 0.4]), np.array([-0.9, -0.2, -0.4])):
        grad = tj.compile(f, x, cache=False)
        fd_check(f, x, grad(x))
