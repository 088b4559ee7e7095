"""Nests of converted loops flattened into one iteration space (``_split_loops`` in
tapejit/passes/accumulation.py, ``_Batcher._inner_loop`` in tapejit/passes/vectorise.py):
``for i: for j in range(...): e += term(i, j)`` becomes gathers over the pairs ``(i, j)`` —
windows of their ragged layout where the inner bounds are affine in ``i``
(tapejit/passes/nest_layout.py), constant tables otherwise — one kernel, sums and scatter-adds
— whatever the inner bounds (``range(i + 1, n)``, ``range(i)``, a table's rows), with branches
on per-pair values, statements around the inner loop and nests three deep.

Each model is checked three ways on random inputs: its vectorised trace, the same loops kept
as loops, and the function traced as written (unrolled) agree in value and gradient through
the IR interpreter (rtol 1e-10: only sums are reassociated); the compiled gradient agrees with
float64 central differences in random directions (rtol 1e-6); and the vectorised trace has no
loop node and does not grow with the number of elements.
"""

from __future__ import annotations

import numpy as np
import pytest

import tapejit as tj
from tapejit.ad import autodiff
from tapejit.core import interpret, ops_window
from tapejit.core.ops import Op
from tapejit.frontend.convert import loops as cv_loops
from tapejit.frontend.loops import loop_source
from tapejit.frontend.tracing import trace
from tapejit.passes import vectorise
from tapejit.passes.nest_layout import Forms, Layout

RNG = np.random.default_rng(20261207)


@pytest.fixture(autouse=True)
def converted_nests(monkeypatch):
    """Every nest converted (and flattened), also those the capture would take."""
    monkeypatch.setattr(loop_source, "NEST_CAPTURE", False)
    loop_source._rewritten_code.cache_clear()
    yield
    loop_source._rewritten_code.cache_clear()
RC2 = 2.5**2


def lj_cutoff(pos):
    n = pos.shape[0]
    e = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            dx = pos[j, 0] - pos[i, 0]
            dy = pos[j, 1] - pos[i, 1]
            dz = pos[j, 2] - pos[i, 2]
            r2 = dx * dx + dy * dy + dz * dz
            if r2 < RC2:
                s = 1.0 / (r2 * r2 * r2)
                e += 4.0 * (s * s - s)
    return e


def morse_flat(x):
    n = x.shape[0] // 3
    e = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            dx = x[3 * j + 0] - x[3 * i + 0]
            dy = x[3 * j + 1] - x[3 * i + 1]
            dz = x[3 * j + 2] - x[3 * i + 2]
            r = np.sqrt(dx * dx + dy * dy + dz * dz)
            ex = np.exp(-1.6 * (r - 1.3))
            e += 0.5 * (ex * ex - 2.0 * ex)
    return e


def growing_rows(x):
    e = 0.0
    for i in range(len(x)):
        for j in range(i):
            e = e + np.cos(x[i] - x[j]) * x[j]
    return e


def all_pairs_but_the_diagonal(x):
    e = 0.0
    for i in range(len(x)):
        for j in range(len(x)):
            if i != j:
                e += np.exp(-((x[j] - x[i]) ** 2)) * x[i]
    return e


def per_row_sum_then_nonlinear(x):
    """The inner loop's sum is a value of the row (an embedding density), not only added."""
    n = len(x)
    e = 0.0
    for i in range(n):
        rho = 0.0
        for j in range(n):
            if j != i:
                rho += np.exp(-((x[i] - x[j]) ** 2))
        e += np.sqrt(rho) - 0.1 * x[i] ** 2
    return e


def statements_around_the_inner_loop(x):
    e = 0.0
    for i in range(len(x) - 1):
        a = np.sin(x[i])
        e += a * a
        for j in range(i + 1, len(x)):
            e += a * np.tanh(x[j] - x[i])
        e -= 0.5 * x[i + 1] * a
    return e


def three_deep(x):
    e = 0.0
    n = len(x)
    for i in range(n):
        for j in range(i + 1, n):
            for k in range(j + 1, n):
                e += np.cos(x[i] + 2.0 * x[j] - x[k])
    return e


def rows_of_a_table(x, nb=np.arange(36).reshape(12, 3) % 10):
    """A neighbour table (12 rows of 3) read in the inner loop."""
    e = 0.0
    for i in range(nb.shape[0]):
        for k in range(nb.shape[1]):
            j = nb[i, k]
            e += (x[j] - x[i % 10]) ** 2 * x[j]
    return e


def pair_forces(pos):
    """Forces accumulated pair by pair (``F[i] += f; F[j] -= f``), then a function of them."""
    n = pos.shape[0]
    F = np.zeros_like(pos)
    for i in range(n):
        for j in range(i + 1, n):
            d = pos[j] - pos[i]
            f = np.exp(-np.dot(d, d)) * d
            F[i] += f
            F[j] -= f
    return np.sum(F * F) + np.sum(np.sin(F[:, 0]))


def forces_in_the_inner_loop_only(pos):
    n = pos.shape[0]
    g = np.zeros_like(pos)
    for i in range(n):
        for j in range(i + 1, n):
            g[j, 0] += np.sin(pos[j, 0] - pos[i, 0]) * pos[j, 1] * pos[i, 2]
    return np.sum(g * g)


def _positions(n):
    side = int(np.ceil(n ** (1 / 3)))
    grid = np.stack(np.meshgrid(*[np.arange(side)] * 3, indexing="ij"), -1).reshape(-1, 3)[:n]
    return grid * 1.2 + RNG.normal(scale=0.05, size=(n, 3))


MODELS = {
    "lj_cutoff": (lj_cutoff, lambda n: _positions(n)),
    "morse_flat": (morse_flat, lambda n: _positions(n).reshape(-1)),
    "growing_rows": (growing_rows, lambda n: RNG.normal(size=n)),
    "all_pairs_but_the_diagonal": (all_pairs_but_the_diagonal, lambda n: RNG.normal(size=n)),
    "per_row_sum_then_nonlinear": (per_row_sum_then_nonlinear, lambda n: RNG.normal(size=n)),
    "statements_around_the_inner_loop": (statements_around_the_inner_loop,
                                         lambda n: RNG.normal(size=n)),  # fmt: skip
    "three_deep": (three_deep, lambda n: RNG.normal(size=n)),
    "pair_forces": (pair_forces, lambda n: _positions(n)),
    "forces_in_the_inner_loop_only": (forces_in_the_inner_loop_only, lambda n: _positions(n)),
}


def _graphs(f, x, monkeypatch):
    """``f`` traced converted and vectorised, converted as loops, and as written."""
    out = {}
    for name, vec, conv in (("vector", True, True), ("loop", False, True), ("python", True, False)):
        monkeypatch.setattr(cv_loops, "VECTORISE", vec)
        monkeypatch.setattr(loop_source, "CONVERT", conv)
        loop_source._rewritten_code.cache_clear()
        out[name] = trace(f, [x], [0])
    loop_source._rewritten_code.cache_clear()
    return out


def _agree(graphs, x, rtol=1e-10):
    ref = interpret.evaluate(autodiff.vjp_graph(graphs["python"], None), [x])
    for name in ("vector", "loop"):
        got = interpret.evaluate(autodiff.vjp_graph(graphs[name], None), [x])
        for a, b in zip(got, ref):
            np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol, err_msg=name)


def _against_central(f, x, grad, rtol=1e-6):
    g = grad(x)
    for _ in range(3):
        d = RNG.normal(size=x.shape)
        h = 1e-6
        fd = (f(x + h * d) - f(x - h * d)) / (2 * h)
        np.testing.assert_allclose(np.sum(g * d), fd, rtol=rtol, atol=1e-8)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_flattened_nest_agrees_with_the_loops_and_the_unrolled_trace(name, monkeypatch):
    f, make = MODELS[name]
    x = make(12)
    gs = _graphs(f, x, monkeypatch)
    assert Op.LOOP not in {n.op for n in gs["vector"].nodes}, "the nest stayed a loop"
    assert Op.LOOP in {n.op for n in gs["loop"].nodes}
    _agree(gs, x)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_flattened_nest_compiled_gradient_against_central_differences(name):
    f, make = MODELS[name]
    x = make(14)
    grad = tj.compile(f, x, cache=False)
    assert grad.stats["convert"]["vectorised"] >= 1
    _against_central(f, x, grad)


def test_a_table_read_in_the_inner_loop(monkeypatch):
    x = RNG.normal(size=10)
    gs = _graphs(rows_of_a_table, x, monkeypatch)
    assert Op.LOOP not in {n.op for n in gs["vector"].nodes}
    _agree(gs, x)
    _against_central(rows_of_a_table, x, tj.compile(rows_of_a_table, x, cache=False))


@pytest.mark.parametrize("name", ["lj_cutoff", "morse_flat", "three_deep"])
def test_the_trace_does_not_grow_with_the_elements(name, monkeypatch):
    """The pairs are tables, the body one copy: the same number of nodes at 10 and 30."""
    f, make = MODELS[name]
    sizes = []
    for n in (10, 30):
        loop_source._rewritten_code.cache_clear()
        g = trace(f, [make(n)], [0])
        sizes.append(len(g.nodes))
    assert sizes[0] == sizes[1]


def test_the_cutoff_pattern_changing_does_not_recompile():
    """Atoms moving across the cutoff change which pairs count, not the compiled code."""
    pos = _positions(16)
    grad = tj.compile(lj_cutoff, pos, cache=False)
    for step in range(6):
        moved = pos + RNG.normal(scale=0.15, size=pos.shape)
        _against_central(lj_cutoff, moved, grad)
    assert grad._dispatcher.compiles == 1


def test_an_inner_loop_that_is_not_a_sum_stays_a_loop(monkeypatch):
    def product_rows(x):
        e = 0.0
        for i in range(len(x)):
            p = 1.0
            for j in range(i + 1, len(x)):
                p = p * (1.0 + 0.1 * np.tanh(x[j] - x[i]))
            e += p
        return e

    x = RNG.normal(size=12)
    gs = _graphs(product_rows, x, monkeypatch)
    assert Op.LOOP in {n.op for n in gs["vector"].nodes}
    _agree(gs, x)


def test_constant_positions_out_of_range_in_a_nest_raise_when_compiling():
    def late(x):
        e = 0.0
        for i in range(len(x)):
            for j in range(i, i + 12):
                e = e + x[j] * x[i]  # j reaches len(x) in the late rows
        return e

    with pytest.raises(IndexError, match=r"in late\(\).*out of bounds"):
        tj.compile(late, RNG.normal(size=20), cache=False)


# -- the pairs as a ragged layout: tables affine in the row read as windows ----------------------

AFFINE = ["lj_cutoff", "morse_flat", "growing_rows",
          "pair_forces", "forces_in_the_inner_loop_only"]


@pytest.mark.parametrize("name", AFFINE)
def test_affine_rows_are_read_through_windows_not_tables(name, monkeypatch):
    """Inner trip counts affine in the row (``range(i + 1, n)``, ``range(i)``): the pairs are a
    ragged layout, and reads at ``3*j + k`` or ``i`` are windows of it — no table of the pairs
    is captured — with the same values and gradient as through tables (the interpreter's
    ``window`` is ``take`` at the same positions: rtol 1e-13)."""
    f, make = MODELS[name]
    x = make(12)
    gs = _graphs(f, x, monkeypatch)
    ops_used = {n.op for n in gs["vector"].nodes}
    assert Op.WINDOW in ops_used
    pairs = {n.type.size for n in gs["vector"].nodes if n.op == Op.WINDOW}
    read = {id(a) for n in gs["vector"].nodes for a in n.args}
    assert not any(n.type.size in pairs and id(n) in read for n in gs["vector"].inputs[1:])
    monkeypatch.setattr(vectorise, "WINDOWS", False)
    loop_source._rewritten_code.cache_clear()
    tables = trace(f, [x], [0])
    assert Op.WINDOW not in {n.op for n in tables.nodes}
    got = interpret.evaluate(autodiff.vjp_graph(gs["vector"], None), [x])
    ref = interpret.evaluate(autodiff.vjp_graph(tables, None), [x])
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)


def test_the_layout_of_affine_counts_and_its_windows():
    lay = Layout.of(np.array([5, 4, 3, 2, 1, 0]))
    assert (lay.T, lay.L0, lay.dL, lay.P) == (6, 5, -1, 15)
    assert Layout.of(np.array([3, 1, 2])) is None  # not affine
    assert Layout.of(np.array([0, 0])) is None  # no pairs
    for a, c, d in [(3, 3, 3), (0, 3, 0), (1, 1, 1), (7, 0, 2)]:
        attrs = (6, 5, -1, a, c, d)
        table = ops_window.positions(attrs)
        assert lay.attrs(table.astype(np.float64), rows=100) == attrs
    table = ops_window.positions((6, 5, -1, 3, 3, 3)).astype(np.float64)
    assert lay.attrs(table, rows=int(table.max())) is None  # the last row out of range
    table[4] += 1
    assert lay.attrs(table, rows=100) is None  # one entry off
    assert lay.attrs(np.arange(15) * 0.5, rows=100) is None  # not whole numbers
    assert lay.attrs(np.arange(15)[::-1].astype(np.float64), rows=100) is None  # d < 0


@pytest.mark.parametrize("name", AFFINE)
def test_windows_found_from_forms_are_those_the_tables_give(name, monkeypatch):
    """The windows found from how positions were built (affine forms, nothing evaluated) are
    the ones fitting the evaluated tables finds, and the index checks decided from the forms
    leave the same graph."""
    f, make = MODELS[name]
    x = make(13)
    graphs = []
    for forms in (True, False):
        monkeypatch.setattr(vectorise, "FORMS", forms)
        loop_source._rewritten_code.cache_clear()
        graphs.append(trace(f, [x], [0]))
    attrs = [sorted(n.attrs for n in g.nodes if n.op in (Op.WINDOW, Op.WINDOW_ADD)) for g in graphs]
    assert attrs[0] == attrs[1] and attrs[0]
    got, ref = (interpret.evaluate(autodiff.vjp_graph(g, None), [x]) for g in graphs)
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)


def test_forms_of_positions_clamps_and_checks():
    from tapejit.core import ops
    from tapejit.core.ir import Type
    from tapejit.core.opcodes import input_node

    lay = Layout(5, 4, -1)  # rows of 4, 3, 2, 1, 0 positions
    forms = Forms(lay)
    j = input_node(0, "j", Type((10,)))
    forms.seed(j, (1, 0, 1))  # j = 1 + m
    p = ops.add(ops.mul(j, ops.const(3.0)), ops.const(2.0))  # 3*j + 2: 5 .. 14
    assert forms.of(p) == (5.0, 0.0, 3.0)
    assert forms.of(ops.elementwise(Op.MINIMUM, ops.elementwise(Op.MAXIMUM, p, ops.const(0.0)), ops.const(14.0))) == (5.0, 0.0, 3.0)
    assert forms.of(ops.elementwise(Op.MINIMUM, p, ops.const(13.0))) is None  # the clamp changes 14
    assert forms.of(ops.elementwise(Op.GE, p, ops.const(15.0))) == (0.0, 0.0, 0.0)
    assert forms.of(ops.elementwise(Op.LT, p, ops.const(5.0))) == (0.0, 0.0, 0.0)
    assert forms.of(ops.elementwise(Op.LT, p, ops.const(14.0))) is None  # undecided
    assert forms.of(ops.mul(p, p)) is None  # not affine
    assert lay.window((5, 0, 3), rows=15) == (5, 4, -1, 5, 0, 3)
    assert lay.window((5, 0, 3), rows=14) is None  # out of range
    assert lay.window((5.5, 0, 3), rows=100) is None  # not whole


# -- one pass: a window_add is a sink of the loop that computes its updates ----------------------


def _plan(f, x):
    from tapejit.passes import optimise
    from tapejit.passes.memplan import plan

    joint = autodiff.vjp_graph(trace(f, [x], [0]))
    opt, _ = optimise(joint)
    return joint, plan(opt)


@pytest.mark.parametrize("name,one_pass", [("morse_flat", True), ("lj_cutoff", True),
                                           ("growing_rows", True), ("pair_forces", False)])
def test_pair_cotangents_are_added_in_the_pass_that_computes_them(name, one_pass):
    """The forward body, its adjoint and the window_adds of the cotangents are one loop over
    the pairs (no per-pair array stored and read back), so the workspace grows with the atoms,
    not the pairs; the plan executed as planned (the interpreter, element by element in the
    generated loop's order) agrees with the graph, and the compiled gradient with central
    differences. (``pair_forces`` works on rows ``pos[j] - pos[i]`` of 3: its loops over
    ``(P, 3)`` and ``(P,)`` are separate passes, so only the sinks and values are checked.)"""
    f, make = MODELS[name]
    sizes = []
    for n in (10, 40):
        x = make(n)
        joint, prog = _plan(f, x)
        sinks = [k for k in prog.kernels for m in k.body if m.op == Op.WINDOW_ADD]
        assert sinks, "no window_add fused into a loop"
        assert not any(k.op is not None and k.op.op == Op.WINDOW_ADD for k in prog.kernels)
        got = interpret.run_program(prog, [x])
        for a, b in zip(interpret.evaluate(joint, [x]), got):
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)
        sizes.append(prog.workspace_bytes)
    pairs = 40 * 39 / (10 * 9)
    if one_pass:
        assert sizes[1] < sizes[0] * pairs / 3, sizes  # ~4x the atoms, not ~17x the pairs
    x = make(14)
    _against_central(f, x, tj.compile(f, x, cache=False))


def test_a_sink_over_an_accumulator_read_elsewhere_keeps_it_intact():
    """A window_add whose accumulator is read again after the loop adds into a copy: the plan
    as planned, the native value and gradient agree with the interpreter on the graph."""
    from tapejit.core import ops
    from tapejit.core.ir import Graph, Type
    from tapejit.core.opcodes import input_node
    from tapejit.passes.memplan import plan
    from tapejit.runtime.variant import compile_graph

    attrs = (5, 4, -1, 1, 1, 1)  # rows of 4..0 positions, adding at rows 1 + k + m
    P = ops_window.layout_size(*attrs[:3])
    acc_in = input_node(0, "acc", Type((6,)))
    u_in = input_node(1, "u", Type((P,)))
    acc = ops.mul(acc_in, ops.const(2.0))
    s = ops_window.window_add(acc, ops.elementwise(Op.EXP, u_in), attrs)
    out = ops.reduce(Op.REDUCE_SUM, ops.mul(ops.add(s, acc), ops.add(s, acc)), (0,))
    g = Graph("sink", (acc_in, u_in), ("active", "active"), (out,))
    prog = plan(g)
    assert any(m.op == Op.WINDOW_ADD for k in prog.kernels for m in k.body)
    args = [RNG.normal(size=6), RNG.normal(size=P)]
    want = interpret.evaluate(g, args)[0]
    np.testing.assert_allclose(interpret.run_program(prog, args)[0], want, rtol=1e-13)
    joint = autodiff.vjp_graph(g)
    expected = interpret.evaluate(joint, args)
    value, grads = compile_graph(g).value_and_grad(*args)
    np.testing.assert_allclose(value, expected[0], rtol=1e-12)
    for got, ref in zip(grads, expected[1:]):
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)


def test_a_gather_through_a_table_and_a_window_in_one_kernel():
    """``v[tab[i % 14]] - v[j]`` over the pairs ``j > i``: one fused loop reads a table (the
    outer row's entry) and a window (the inner row): the lowering once took the table's row
    for the window's position (a ``TypeError`` from codegen, found by the long fuzz profile)."""
    tab = np.array([5, 6, 3, 8, 11, 12, 2, 4, 3, 1, 0, 7, 1, 2])

    def f(x):
        v = np.concatenate([np.ravel(x)] * 7) * 0.8
        e = 0.0
        for i in range(len(v)):
            for j in range(i + 1, len(v)):
                e += np.cos(v[tab[i % len(tab)]] - v[j]) * 0.05
        return e

    x = RNG.uniform(-1.5, 1.5, 2)
    g = tj.compile(f, x, cache=False)
    d = RNG.normal(size=2)
    h = 1e-6
    fd = (f(x + h * d) - f(x - h * d)) / (2 * h)
    np.testing.assert_allclose(g(x) @ d, fd, rtol=1e-6, atol=1e-9)
