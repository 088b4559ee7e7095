"""Native loops with links (:class:`tapejit.core.ops.History`, :class:`tapejit.core.ops.Accumulate`)
against the numpy reference (the ``loop`` row's ``ref``, through the interpreter).

Loop nodes are built by hand, compiled by the whole pipeline (optimise, plan, lower, LLVM) and
run once; every segment of the loop's flat result is compared to rtol 1e-12 — the same float64
operations, up to libm against numpy in ``tanh``/``sin``/``cos`` — except stored rows past the
iterations a dynamic loop ran, which are unspecified.
"""

from __future__ import annotations

import numpy as np

from tapejit.core import interpret, ops
from tapejit import passes
from tapejit.codegen.lower import lower
from tapejit.core.ir import Graph, Node, Type
from test_forward import run_native  # optimise, plan, lower, run once (NaN-filled buffers)

rng = np.random.default_rng(7)
T = 20  # max_steps


def _inputs(*types) -> list[Node]:
    return [Node("input", (), (k, f"t{k}"), Type(t)) for k, t in enumerate(types)]


def _graph(loop: Node, args: list[Node], extra: Node) -> Graph:
    """A graph returning the loop's flat result and ``extra`` (a value computed from it)."""
    kinds = ("inactive",) * len(args)
    return Graph("links", tuple(args), kinds, (loop, extra), output_names=("loop", "extra"))


def _forward_history_loop(c0, xs0, xs1, p):
    """A forward loop whose vector xs 0 reads stored vector y 0 and whose scalar xs 1 reads
    stored scalar y 1 at earlier rows, falling back to the operand where ``rows[t] < 0``."""
    i, c, x0, x1, q = _inputs((), (3,), (3,), (), (3,))
    c2 = ops.add(
        ops.mul(ops.elementwise("tanh", ops.add(ops.mul(c, q), x0)), ops.const(0.5)),
        ops.mul(i, ops.const(0.01)),
    )
    y0 = ops.elementwise("sin", ops.add(c2, x0))
    y1 = ops.add(ops.mul(ops.reduce("reduce_sum", c2), ops.const(0.1)), x1)
    body = Graph("body", (i, c, x0, x1, q), ("inactive",) * 5, (c2, y0, y1))
    rows0 = tuple(-1 if t == 0 or t % 3 == 1 else int(rng.integers(0, t)) for t in range(T))
    rows1 = tuple(-1 if t < 2 or t % 4 == 0 else t - 2 for t in range(T))
    spec = ops.LoopSpec(
        body, 1, 2, T, start=3,
        history=(ops.History(0, 0, rows0), ops.History(1, 1, rows1)),
    )  # fmt: skip
    assert any(r >= 0 for r in rows0) and any(r < 0 for r in rows0[1:])
    return spec, ops.make("loop", c0, xs0, xs1, p, attrs=(spec,))


def test_forward_history_reads_stored_rows_and_falls_back_to_the_operand():
    c0, xs0, xs1, p = _inputs((3,), (T, 3), (T,), (3,))
    spec, loop = _forward_history_loop(c0, xs0, xs1, p)
    lay = ops.loop_layout(spec)
    extra = ops.reduce("reduce_sum", ops.segment(loop, lay.ys[0]))
    g = _graph(loop, [c0, xs0, xs1, p], extra)
    args = [rng.standard_normal(3), rng.standard_normal((T, 3)), rng.standard_normal(T),
            rng.standard_normal(3)]  # fmt: skip
    want = interpret.evaluate(g, args)
    np.testing.assert_array_equal(want[0], ops.OPS[ops.Op.LOOP].ref((spec,), *args))
    got = run_native(g, args)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def _tree_sweep_loop(steps, c0, xs0, xs1, p):
    """A reverse, dynamic loop over a tree (``parent[u] < u``): iteration ``u`` adds vector
    y 0 to its parent's row, and reads at xs 0 its own row of y 0 — the sum its children gave
    it, complete since children run first — then stores scalar y 1."""
    i, c, x0, x1, q = _inputs((), (), (2,), (), (2,))
    s = ops.add(ops.mul(x0, q), ops.add(c, x1))
    y0 = ops.add(ops.mul(ops.elementwise("cos", s), ops.const(0.5)), ops.mul(i, ops.const(0.1)))
    y1 = ops.reduce("reduce_sum", ops.mul(x0, x0))
    c2 = ops.add(ops.mul(c, ops.const(0.9)), ops.reduce("reduce_sum", y0))
    body = Graph("body", (i, c, x0, x1, q), ("inactive",) * 5, (c2, y0, y1))
    parent = tuple(-1 if u == 0 else int(rng.integers(0, u)) for u in range(T))
    spec = ops.LoopSpec(
        body, 1, 2, T, reverse=True, dynamic=True,
        history=(ops.History(0, 0, tuple(range(T))),),
        accumulate=(ops.Accumulate(0, parent),),
    )  # fmt: skip
    return spec, ops.make("loop", steps, c0, xs0, xs1, p, attrs=(spec,))


def test_reverse_dynamic_accumulate_read_back_by_history():
    steps, c0, xs0, xs1, p = _inputs((), (), (T, 2), (T,), (2,))
    spec, loop = _tree_sweep_loop(steps, c0, xs0, xs1, p)
    lay = ops.loop_layout(spec)
    extra = ops.reduce("reduce_sum", ops.segment(loop, lay.ys[0]))
    g = _graph(loop, [steps, c0, xs0, xs1, p], extra)
    for n in (T, 15, 0):
        args = [float(n), rng.standard_normal(()), rng.standard_normal((T, 2)),
                rng.standard_normal(T), rng.standard_normal(2)]  # fmt: skip
        want = interpret.evaluate(g, args)
        np.testing.assert_array_equal(want[0], ops.OPS[ops.Op.LOOP].ref((spec,), *args))
        got = run_native(g, args)
        y1 = lay.ys[1]
        ran = np.r_[0 : y1.offset + n, y1.offset + y1.size : lay.size]  # stored rows that ran
        np.testing.assert_allclose(got[0][ran], want[0][ran], rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-14)
        assert got[0][lay.steps] == n


def test_two_linked_loops_in_one_program_and_a_plain_loop_emits_no_tables():
    c0, xs0, xs1, p = _inputs((3,), (T, 3), (T,), (3,))
    spec, a = _forward_history_loop(c0, xs0, xs1, p)
    spec2, b = _forward_history_loop(c0, xs0, xs1, p)  # other rows (drawn again)
    assert spec2.history != spec.history
    lay = ops.loop_layout(spec)
    extra = ops.add(
        ops.reduce("reduce_sum", ops.segment(a, lay.ys[0])),
        ops.reduce("reduce_sum", ops.segment(b, lay.ys[1])),
    )
    g = _graph(a, [c0, xs0, xs1, p], extra)
    args = [rng.standard_normal(3), rng.standard_normal((T, 3)), rng.standard_normal(T),
            rng.standard_normal(3)]  # fmt: skip
    want = interpret.evaluate(g, args)
    got = run_native(g, args)
    for x, y in zip(got, want):
        np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-14)

    plain = ops.LoopSpec(spec.body, 1, 2, T)
    loop = ops.make("loop", c0, xs0, xs1, p, attrs=(plain,))
    g = _graph(loop, [c0, xs0, xs1, p], ops.reduce("reduce_sum", loop))
    text = str(lower(passes.plan(passes.optimise(g)[0]), "plain")[0])
    assert ".rows" not in text
    got = run_native(g, args)
    want = interpret.evaluate(g, args)
    for x, y in zip(got, want):
        np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-14)
