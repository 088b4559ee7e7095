"""Sums over small trailing axes split into columns (tapejit/passes/columns.py): the split graph
gives the unsplit graph's values and gradients (the interpreter as oracle; the compiled gradient
against central differences), on every form the pass pushes a column through, and leaves what
it cannot push through as it was."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import tapejit as tj
from tapejit.ad import autodiff
from tapejit.core import interpret
from tapejit.frontend import tracing
from tapejit.passes import columns

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from pair_potential import lattice, lj_rows  # noqa: E402  (the model as examples/ writes it)

RNG = np.random.default_rng(7)


def check(f, x, split: int):
    """``f``'s trace split into columns: ``split`` reductions rewritten, the same value and
    gradient as the unsplit trace, and the compiled gradient (which runs the pass) matches
    central differences in a random direction."""
    g = tracing.trace(f, [x], [0])
    r, stats = columns.split_columns(g)
    assert stats["reductions"] == split, stats
    want = interpret.evaluate(autodiff.vjp_graph(g, None), [x])
    got = interpret.evaluate(autodiff.vjp_graph(r, None), [x])
    for a, b in zip(want, got):
        np.testing.assert_allclose(b, a, rtol=1e-13, atol=1e-13)
    grad = tj.compile(f, x, cache=False)
    assert grad.stats["columns"]["reductions"] == split
    val, gr = grad.value_and_grad(x)
    np.testing.assert_allclose(val, want[0], rtol=1e-13)
    d = RNG.normal(size=x.shape)
    h = 1e-6
    fd = (f(x + h * d) - f(x - h * d)) / (2 * h)
    np.testing.assert_allclose(np.sum(gr * d), fd, rtol=1e-6, atol=1e-8)


def test_lj_rows_every_row_split():
    x = lattice(12) + RNG.normal(0, 0.02, (12, 3))
    check(lj_rows, x, split=11)


def row_norms(x):  # a row vector broadcast against the rows, a norm, a where
    c = x[0]
    d = x[1:] - c
    r = np.sqrt(np.sum(d * d, axis=1))
    return np.sum(np.where(r > 1.0, r, r * r))


def unit_axis(x):  # a (n, 1) column spread across the 3 columns, and a constant
    w = np.sum(x, axis=1, keepdims=True)
    return np.sum(np.sum((x - w) * 2.0 + 1.0, axis=1) ** 2)


def strided_views(x):  # every other row, reversed rows, a view of a view
    a = x[::2]
    b = x[::-1][: a.shape[0]]
    return np.sum(np.sum(a * b[::1], axis=-1) ** 2)


def four_columns(x):
    q = x.reshape(-1, 4)
    return np.sum(np.exp(-np.sum(q * q, axis=1)))


def three_d(x):  # (2, m, 3): the last axis split, the others kept
    y = x.reshape(2, -1, 3)
    return np.sum(np.tanh(np.sum(y * y[::-1], axis=2)))


@pytest.mark.parametrize(
    "f, shape, split",
    [
        (row_norms, (9, 3), 1),
        (unit_axis, (7, 3), 1),  # the keepdims sum is a plain sum: left as it is
        (strided_views, (10, 2), 1),
        (four_columns, (6, 4), 1),
        (three_d, (2 * 5 * 3,), 1),
    ],
    ids=lambda v: getattr(v, "__name__", str(v)),
)
def test_forms_a_column_is_pushed_through(f, shape, split):
    check(f, RNG.normal(size=shape), split)


def through_a_matmul(x):  # a matmul under the sum: computed as it is, read by columns
    return np.sum(np.sum((x @ np.arange(9.0).reshape(3, 3)) * x, axis=1) ** 2)


def test_values_not_pushed_through_are_read_by_columns():
    check(through_a_matmul, RNG.normal(size=(5, 3)), split=1)


def five_columns(x):  # wider than MAX_COLUMNS
    return np.sum(np.sum(x * x, axis=1) ** 2)


def leading_axis(x):
    return np.sum(np.sum(x * x, axis=0) ** 2)


def plain_sum(x):  # no elementwise work under the sum: nothing to fuse into
    return np.sum(np.sum(x, axis=1) ** 2)


@pytest.mark.parametrize(
    "f, shape",
    [(five_columns, (4, 5)), (leading_axis, (3, 4)), (plain_sum, (4, 3))],
    ids=lambda v: getattr(v, "__name__", str(v)),
)
def test_what_is_not_split_stays_as_it_was(f, shape):
    check(f, RNG.normal(size=shape), split=0)
