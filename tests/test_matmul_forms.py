"""Products whose contraction has length 1 (outer products, a vector scaled by a 1-vector) are
built as elementwise products, not ``matmul`` nodes, so they fuse with their consumers — reverse
mode's weight gradients ``acc + outer(d, h)`` become one loop. Same values as numpy (one product
per element, no sum) and the same gradients."""

import sys
from pathlib import Path

import numpy as np
import pytest

import tapejit as tj
from tapejit import ops

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


def test_builder_makes_no_matmul_node_for_a_length_one_contraction():
    from tapejit.ir import Node, Type

    a = Node("input", (), (0, "a"), Type((5, 1)))
    b = Node("input", (), (1, "b"), Type((1, 4)))
    assert ops.matmul(a, b).op == ops.Op.MUL
    c = Node("input", (), (2, "c"), Type((1, 4)))
    assert ops.matmul(c, Node("input", (), (3, "d"), Type((4, 4)))).op == ops.Op.MATMUL


def test_rnn_backward_body_keeps_one_matmul():
    """The RNN's reverse loop: the products W^T da remain; the outer products that accumulate
    dW, dU and the scalar-times-vector products fuse into elementwise loops."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    from rnn_scan import D, H, bptt, rnn_loss

    p = RNG.normal(size=H * H + H * D + H) * 0.25
    seq = RNG.normal(size=(7, D + 1))
    grad = tj.compile(rnn_loss, p, seq, dynamic_argnums=1, cache=False)
    np.testing.assert_allclose(grad(p, seq), bptt(p, seq)[1], rtol=1e-10, atol=1e-13)
    plan = grad.ir("plan")
    body = plan.split("graph body.vjp")[1].split("program body.vjp")[0]
    assert body.count("= matmul") == 1, body
