"""Products whose contraction has length 1 (outer products, a vector scaled by a 1-vector):
same values and gradients as numpy in every form, and under an add (reverse mode's weight
gradients accumulated in a loop, ``acc + outer(d, h)``) the simplifier makes them elementwise,
so the accumulation is one fused loop (simplify's ``accumulate-outer`` rule)."""

import sys
from pathlib import Path

import numpy as np
import pytest

import tapejit as tj
from tapejit.core import ops

RNG = np.random.default_rng(11)

SHAPES = [((5, 1), (1, 4)), ((1,), (1, 4)), ((5, 1), (1,)), ((1,), (1,)), ((1, 1), (1, 1))]


@pytest.mark.parametrize("sa,sb", SHAPES, ids=lambda s: str(s))
def test_length_one_contractions_match_numpy(sa, sb):
    a, b = RNG.standard_normal(sa), RNG.standard_normal(sb)
    w = RNG.standard_normal(np.shape(a @ b))

    def f(x, y):
        return np.sum((x @ y) * w) + np.sum(np.tanh(x @ y))

    value, (ga, gb) = tj.compile(f, a, b, argnums=(0, 1), cache=False).value_and_grad(a, b)
    assert value == pytest.approx(f(a, b), rel=1e-14)  # sums may be reassociated
    sech2 = 1.0 - np.tanh(a @ b) ** 2
    dz = w + sech2  # d f / d (a @ b)
    want_a = np.reshape(dz, (np.size(a), -1)) @ np.reshape(b, (1, -1)).T
    want_b = np.reshape(a, (-1, 1)).T @ np.reshape(dz, (np.size(a), -1))
    np.testing.assert_allclose(ga, np.reshape(want_a, sa), rtol=1e-13)
    np.testing.assert_allclose(gb, np.reshape(want_b, sb), rtol=1e-13)


def test_an_accumulated_outer_product_becomes_elementwise():
    from tapejit.core.ir import Graph, Node, Type
    from tapejit.passes.simplify import simplify

    a = Node("input", (), (0, "a"), Type((5, 1)))
    b = Node("input", (), (1, "b"), Type((1, 4)))
    acc = Node("input", (), (2, "acc"), Type((5, 4)))
    alone = ops.matmul(a, b)
    g = Graph("g", (a, b, acc), ("active",) * 3, (ops.add(acc, ops.matmul(a, b)), alone))
    out, stats = simplify(g)
    assert stats["rules"].get("accumulate-outer") == 1
    ops_used = {n.op for n in out.nodes}
    assert out.outputs[1].op == ops.Op.MATMUL  # written on its own: a product kernel
    assert out.outputs[0].op == ops.Op.ADD
    assert any(x.op == ops.Op.MUL for x in out.outputs[0].args) and ops.Op.MUL in ops_used


def test_rnn_backward_body_accumulates_outer_products_elementwise():
    """The RNN's reverse loop: da^T W and the product feeding a reshape remain; the outer
    products that accumulate dW and dU and the scaled vector added to the carry's cotangent
    fuse into elementwise loops."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    from rnn_scan import D, H, bptt, rnn_loss

    p = RNG.normal(size=H * H + H * D + H) * 0.25
    seq = RNG.normal(size=(7, D + 1))
    grad = tj.compile(rnn_loss, p, seq, dynamic_argnums=1, cache=False)
    np.testing.assert_allclose(grad(p, seq), bptt(p, seq)[1], rtol=1e-10, atol=1e-13)
    plan = grad.ir("plan")
    body = plan.split("graph body.vjp")[1].split("program body.vjp")[0]
    assert body.count("= matmul") == 2, body
