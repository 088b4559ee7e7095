"""Rows of different lengths (tapejit/core/ops_window.py, codegen/lower/window.py,
tapejit/passes/reroll/ragged.py): the ``window`` and ``window_add`` primitives against their
numpy references, natively and as each other's adjoint; triangular element loops (the
Lennard-Jones rows and pair-loop forms, growing rows, sliding windows, per-row factors, sums
over the ragged axis) re-rolled into one flat computation — against the unrolled trace
(interpreter), compiled against central differences — with a kernel count that does not grow
with the number of rows; and loops the pass must leave as they are."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import tapejit as tj
from tapejit.ad import autodiff
from tapejit.core import interpret, ir, ops
from tapejit.frontend.loops import loop_source
from tapejit.frontend import tracing
from tapejit.core.ir import Graph, Type
from tapejit.core.ops import Op
from tapejit.core.ops_window import layout_size, positions, window, window_add
from tapejit.passes.reroll import driver as rr
from tapejit.runtime.variant import compile_graph

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from pair_potential import lj_pairs, lj_rows  # noqa: E402  (the models as examples/ writes them)

RNG = np.random.default_rng(57)


# -- the primitives ----------------------------------------------------------------------------

LAYOUTS = [
    (9, 9, -1, 1, 1, 1),  # pos[k+1:] over the rows of a triangle
    (9, 9, -1, 0, 1, 0),  # pos[k] spread over its row
    (6, 1, 1, 0, 0, 1),  # growing rows x[:k+1]
    (7, 4, 0, 0, 1, 1),  # sliding windows x[k:k+4]
    (5, 2, 2, 3, 1, 2),  # growing rows, every other element
    (4, 3, -1, 0, 2, 0),  # one row of x per layout row, every second row
]


def brute(attrs):
    T, L0, dL, a, c, d = attrs
    return [a + c * k + d * m for k in range(T) for m in range(L0 + dL * k)]


@pytest.mark.parametrize("attrs", LAYOUTS)
def test_positions_are_the_definition(attrs):
    assert positions(attrs).tolist() == brute(attrs)
    assert layout_size(*attrs[:3]) == len(brute(attrs))


def test_bounds_check_agrees_with_the_positions():
    """The type rule's corner check accepts a window exactly when every row it reads is in
    range (brute force over small layouts)."""
    x = ops.input_node(0, "x", Type((6,)))
    for T in (1, 2, 4):
        for L0 in (0, 1, 3):
            for dL in (-1, 0, 1):
                if L0 + dL * (T - 1) < 0:
                    continue
                for a in (-1, 0, 2):
                    for c in (-1, 0, 1):
                        for d in (0, 1, 2):
                            attrs = (T, L0, dL, a, c, d)
                            rows = brute(attrs)
                            ok = all(0 <= r < 6 for r in rows)
                            try:
                                window(x, attrs)
                                built = True
                            except ValueError as e:
                                assert "reads rows" in str(e)
                                built = False
                            assert built == ok, attrs


def test_bad_layouts_are_refused_with_a_message():
    x = ops.input_node(0, "x", Type((6, 2)))
    with pytest.raises(ValueError, match="lengths >= 0"):
        window(x, (3, 1, -1, 0, 1, 1))
    with pytest.raises(ValueError, match="six integer"):
        window(x, (3, 1, 0, 0, 1))
    with pytest.raises(ValueError, match="the updates must be"):
        window_add(x, ops.const(0.0, (4, 2)), (3, 1, 0, 0, 1, 1))


@pytest.mark.parametrize("attrs", LAYOUTS)
@pytest.mark.parametrize("rest", [(), (3,), (2, 2)])
def test_window_and_window_add_natively_match_numpy(attrs, rest):
    M = max(brute(attrs)) + 2
    P = layout_size(*attrs[:3])
    x_in = ops.input_node(0, "x", Type((M, *rest)))
    u_in = ops.input_node(1, "u", Type((P, *rest)))
    w = window(ops.mul(x_in, x_in), attrs)
    added = window_add(ops.mul(x_in, ops.const(0.5)), ops.mul(u_in, u_in), attrs)
    g = Graph("g", (x_in, u_in), ("active", "active"),
              (ops.reduce(Op.REDUCE_SUM, ops.mul(w, u_in)),
               ops.reduce(Op.REDUCE_SUM, ops.mul(added, added))))  # fmt: skip
    ir.verify(g)
    x, u = RNG.normal(size=(M, *rest)), RNG.normal(size=(P, *rest))
    rows = positions(attrs)
    want_w = (x * x)[rows]
    want_add = 0.5 * x
    np.add.at(want_add, rows, u * u)
    ref = interpret.evaluate(g, [x, u])
    np.testing.assert_allclose(ref[0], np.sum(want_w * u), rtol=1e-13)
    np.testing.assert_allclose(ref[1], np.sum(want_add * want_add), rtol=1e-13)
    for out in range(2):  # native value and gradient of each output against the interpreter
        one = g.replace(outputs=(g.outputs[out],))
        value, (gx, gu) = compile_graph(one).value_and_grad(x, u)
        np.testing.assert_allclose(value, ref[out], rtol=1e-12)
        want = interpret.evaluate(autodiff.vjp_graph(one, None), [x, u])
        np.testing.assert_allclose(gx, want[1], rtol=1e-11, atol=1e-13)
        np.testing.assert_allclose(gu, want[2], rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("attrs", LAYOUTS)
def test_window_add_is_the_adjoint_of_window(attrs):
    M = max(brute(attrs)) + 1
    P = layout_size(*attrs[:3])
    x, w = RNG.normal(size=(M, 2)), RNG.normal(size=(P, 2))
    (wx,) = interpret.evaluate(
        Graph("f", (xi := ops.input_node(0, "x", Type((M, 2))),),
              ("active",), (window(xi, attrs),)), [x])  # fmt: skip
    ui = ops.input_node(0, "u", Type((P, 2)))
    (back,) = interpret.evaluate(
        Graph("b", (ui,), ("active",), (window_add(ops.const(0.0, (M, 2)), ui, attrs),)), [w]
    )
    assert np.isclose(np.sum(wx * w), np.sum(x * back), rtol=1e-13)


# -- re-rolling --------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def unrolled_tracing(monkeypatch):
    monkeypatch.setattr(rr, "ENABLED", True)
    monkeypatch.setattr(rr, "REDUCE", True)


def check(f, *xs, capture=False):
    """``f`` traced unrolled (or with loops captured) and re-rolled: the same values and
    gradients as the unrolled trace (interpreter), compiled against central differences.
    Returns the re-rolling statistics and the re-rolled trace."""
    argnums = list(range(len(xs)))
    saved = loop_source.ENABLED, loop_source.CONVERT
    # captured as written, not converted (conversion takes nests from capture)
    loop_source.ENABLED, loop_source.CONVERT = capture, False
    loop_source._rewritten_code.cache_clear()
    try:
        g = tracing.trace(f, list(xs), argnums)
    finally:
        loop_source.ENABLED, loop_source.CONVERT = saved
        loop_source._rewritten_code.cache_clear()
    r, stats = rr.reroll(g)
    want, got = interpret.evaluate(g, list(xs)), interpret.evaluate(r, list(xs))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-13)
    gw = interpret.evaluate(autodiff.vjp_graph(g, None), list(xs))
    gg = interpret.evaluate(autodiff.vjp_graph(r, None), list(xs))
    for a, b in zip(gw[1:], gg[1:]):
        np.testing.assert_allclose(b, a, rtol=1e-11, atol=1e-13)
    grad = tj.compile(f, *xs, argnums=tuple(argnums), cache=False)
    val, gs = grad.value_and_grad(*xs)
    gs = gs if isinstance(gs, tuple) else (gs,)
    np.testing.assert_allclose(val, want[0], rtol=1e-12, atol=1e-13)
    for k, x in enumerate(xs):
        d = RNG.normal(size=np.shape(x))
        h = 1e-6
        plus, minus = list(xs), list(xs)
        plus[k], minus[k] = x + h * d, x - h * d
        fd = (f(*plus) - f(*minus)) / (2 * h)
        np.testing.assert_allclose(np.sum(gs[k] * d), fd, rtol=1e-6, atol=1e-8)
    return stats, r


def windows(g: Graph) -> list:
    return [n for n in g.nodes if n.op == Op.WINDOW]


def lattice(n):
    side = int(np.ceil(n ** (1 / 3)))
    grid = np.stack(np.meshgrid(*[np.arange(side)] * 3, indexing="ij"), -1).reshape(-1, 3)
    return grid[:n] * 1.5 + 0.1 * RNG.random((n, 3))


@pytest.mark.parametrize("n", [20, 45])
def test_lennard_jones_rows_form_is_one_flat_sum(n):
    stats, r = check(lj_rows, lattice(n))
    assert stats["iterations"] == n - 1 and stats["loops"] == 1
    assert {w.attrs[:3] for w in windows(r)} == {(n - 1, n - 1, -1)}
    assert not any(x.op == Op.INDEX and x.args[0].op == Op.INPUT and x.shape == (n - 2, 3)
                   for x in r.nodes)  # fmt: skip  (no row of the unrolled loop is left)


@pytest.mark.parametrize("capture", [False, True])
def test_lennard_jones_pair_loop_is_one_flat_sum(capture):
    n = 40
    stats, r = check(lj_pairs, lattice(n), capture=capture)
    layouts = {w.attrs[:3] for w in windows(r)}
    assert len(layouts) == 1
    T, L0, dL = layouts.pop()
    # the rows re-rolled as sums first (captured: a nest, built from its second row on)
    assert dL == -1 and L0 == n - 1 - capture and T >= n - 1 - 16


def test_kernels_do_not_grow_with_the_rows():
    counts = set()
    for n in (24, 48, 96):
        grad = tj.compile(lj_rows, lattice(n), cache=False)
        counts.add((grad.stats["kernels"], grad.stats["reroll"]["loops"]))
    assert len(counts) == 1, counts


def growing(x):
    e = 0.0
    for i in range(len(x)):
        e = e + np.sum(np.sin(x[: i + 1]) * x[i])
    return e


def sliding(x):
    e = 0.0
    for i in range(len(x) - 4):
        w = x[i : i + 4]
        e = e + np.sum(w * w) * x[i + 2] ** 2
    return e


def per_row_factor(x, w):
    e = 0.0
    for i in range(len(x) - 1):
        d = x[i + 1 :] - x[i]
        e = e + w[i] * np.sum(np.exp(-d * d))
    return e


def column_sums(p):
    e = 0.0
    for i in range(len(p) - 1):
        s = np.sum(p[i + 1 :] * p[i], axis=0)  # (3,): a sum over the ragged axis
        e = e + np.sum(s * s)
    return e


def reversed_rows(x):
    e = 0.0
    for i in range(len(x) - 2, -1, -1):
        e = e + np.sum(np.tanh(x[i + 1 :] - x[i]))
    return e


@pytest.mark.parametrize(
    "f, shape, layout",
    [
        (growing, (30,), (29, 1, 1)),  # (the last row reads all of x: no slice, unrolled)
        (sliding, (34,), (30, 4, 0)),
        (column_sums, (25, 3), (24, 24, -1)),
        (reversed_rows, (25,), (24, 1, 1)),
    ],
)
def test_ragged_loop_shapes(f, shape, layout):
    stats, r = check(f, RNG.normal(size=shape))
    assert {w.attrs[:3] for w in windows(r)} == {layout}, stats


def test_a_per_row_factor_from_another_input():
    x, w = RNG.normal(size=30), RNG.normal(size=30)
    stats, r = check(per_row_factor, x, w)
    assert {v.attrs[:3] for v in windows(r)} == {(29, 29, -1)}


def every_other(x):
    e = 0.0
    for i in range(len(x) - 1):
        e = e + np.sum(x[i + 1 :: 2] * x[i])  # lengths ceil((n-1-i)/2): not affine in i
    return e


def branchy(x):
    e = 0.0
    for i in range(len(x) - 1):
        s = np.sum(x[i + 1 :] - x[i])
        if s > 0:  # a guard on each row's value: those rows stay as traced
            e = e + s
        else:
            e = e - 0.5 * s
    return e


def test_loops_left_as_they_are_stay_exact():
    stats, r = check(branchy, RNG.normal(size=30))
    assert not windows(r)


def test_lengths_that_move_every_other_row_are_two_sums():
    """``x[i + 1::2]``: the lengths ``ceil((n-1-i)/2)`` move by one every second row, so the
    even rows and the odd rows are each a ragged sum (ragged_groups)."""
    stats, r = check(every_other, RNG.normal(size=30))
    assert len({w.attrs[:3] for w in windows(r)}) == 2


def test_native_gradient_of_the_pair_loop_matches_the_hand_gradient():
    pos = lattice(70)
    grad = tj.compile(lj_pairs, pos, cache=False)
    d = pos[None, :, :] - pos[:, None, :]
    r2 = np.einsum("ijk,ijk->ij", d, d)
    np.fill_diagonal(r2, np.inf)
    s = 1.0 / r2**3
    f = -12.0 * s * (2.0 * s - 1.0) / r2
    want = 2.0 * np.einsum("ij,ijk->jk", f, d)
    np.testing.assert_allclose(grad(pos), want, rtol=1e-10, atol=1e-12 * np.abs(want).max())
    assert grad.stats["kernels"] < 60  # (unrolled: hundreds, one per row and stage)


# -- found in review: each re-rolls (or is left) with the unrolled trace's values ---------------


def signed_zeros(x, w):
    e = 0.0
    for i in range(len(x) - 1):
        z = np.full_like(x[i + 1 :], 0.0 if i % 2 == 0 else -0.0)  # -0.0 is not 0.0
        e = e + np.sum(np.arctan(1.0 / (z * w[i + 1 :] + 1e-300)))
    return e


def row_scalar_times_rows(p):
    e = 0.0
    for i in range(p.shape[0] - 1):
        e = e + np.sum(np.sin(p[i + 1 :]) * p[i, 0])  # (L, 3) times a per-row scalar
    return e


def row_times_row_scalar(p):
    e = 0.0
    for i in range(p.shape[0] - 1):
        e = e + np.sum(np.sum(p[i + 1 :], axis=0) * p[i] * p[i, 1])  # (3,) times a scalar
    return e


def masked_rows(p):
    m = p[:, 0] > 0.0  # a shared bool array, sliced by rows
    e = 0.0
    for i in range(p.shape[0] - 1):
        e = e + np.sum(np.where(m[i + 1 :], np.sin(p[i + 1 :, 1]), p[i + 1 :, 2]))
    return e


def test_signed_zero_constants_are_not_one_template():
    """Rows alternate a 0.0 and a -0.0 constant: never one template (a wrong value once), but
    every second row is (two ragged sums, each with its own constant)."""
    x, w = RNG.normal(size=24), RNG.normal(size=24)
    _, r = check(signed_zeros, x, w)
    consts = {n.attrs[0] for n in r.nodes if n.op == Op.CONST and n.shape and n.attrs[0] == 0.0}
    assert -1.0 in {np.copysign(1.0, c) for c in consts}  # the -0.0 rows kept their constant
    assert len({w.attrs[:3] for w in windows(r)}) == 2


@pytest.mark.parametrize("f", [row_scalar_times_rows, row_times_row_scalar, masked_rows])
def test_per_row_scalars_and_masks(f):
    stats, r = check(f, RNG.normal(size=(24, 3)))
    if f is not masked_rows:
        assert windows(r), stats


def test_sixteen_rows_are_enough():
    stats, r = check(lj_rows, lattice(17))
    assert stats["ragged"] == 1 and stats["iterations"] == 16


def morse_pairs(pos):
    n = len(pos)
    e = 0.0
    for i in range(n - 1):
        for j in range(i + 1, n):
            r = np.sqrt(np.sum((pos[i] - pos[j]) ** 2))  # a term that reduces a row
            e += (1.0 - np.exp(-1.5 * (r - 1.2))) ** 2
    return e


@pytest.mark.parametrize("capture", [False, True])
def test_terms_that_reduce_a_row_are_sums_then_rows(capture):
    """Each inner loop's terms reduce a 3-vector: a sum of vectorised terms (not a loop per
    row), so the rows then re-roll as one ragged sum."""
    stats, r = check(morse_pairs, lattice(40), capture=capture)
    assert len({w.attrs[:3] for w in windows(r)}) == 1
    assert not any(x.op == Op.LOOP for x in r.nodes)


def dot_pairs(pos, w):
    n = len(pos)
    e = 0.0
    for i in range(n - 1):
        for j in range(i + 1, n):
            d = pos[j] - pos[i]
            r2 = np.dot(d, d)  # a (1, 3) @ (3,) product per pair
            e = e + np.exp(-r2) * np.dot(w, d) ** 2  # and a shared vector times the row
    return e


def matrix_rows(x, m):
    e = 0.0
    for i in range(len(x)):
        v = m @ x[i]  # a shared matrix times each row
        e = e + np.sum(np.tanh(v) * x[i, :2])
    return e


@pytest.mark.parametrize("capture", [False, True])
def test_products_in_terms_are_vectorised(capture):
    stats, r = check(dot_pairs, lattice(30), RNG.normal(size=3), capture=capture)
    assert windows(r) and not any(x.op == Op.LOOP for x in r.nodes)
    stats, r = check(matrix_rows, RNG.normal(size=(40, 3)), RNG.normal(size=(2, 3)),
                     capture=capture)  # fmt: skip
    assert not any(x.op == Op.LOOP for x in r.nodes)


def all_pairs(x):
    e = 0.0
    for i in range(len(x)):
        for j in range(len(x)):
            if i != j:
                e = e + np.exp(-((x[j] - x[i]) ** 2))
    return e


def test_rows_before_and_after_the_diagonal_are_two_ragged_sums():
    """Traced unrolled, each row of a loop over all j != i is a sum before the diagonal and
    one after it, alternating in the chain: regrouped (ragged_groups), each kind one sum."""
    stats, r = check(all_pairs, RNG.normal(size=40))
    layouts = {w.attrs[:3] for w in windows(r)}
    assert any(dL > 0 for _, _, dL in layouts) and any(dL < 0 for _, _, dL in layouts), layouts
