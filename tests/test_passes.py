"""Optimisation passes: every simplify rule, CSE, DCE, fusion, the memory plan and the work figure.

Every pass is checked by interpreting the graph before and after it on random inputs
(``interpret.evaluate``), and every plan by executing it as planned (``interpret.run_program``,
which simulates the workspace, so a buffer clobbered too early gives a wrong answer).
Tolerances: exact rules are compared with rtol 1e-15; reassociating rules with rtol 1e-13.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import tapejit as tj
from tapejit.codegen.lower.chunks import CHUNK_NODES
from tapejit.ad import autodiff
from tapejit.core import interpret, ops
from tapejit import passes
from tapejit.frontend import tracing
from tapejit.core.ir import Graph, Node, Type, digest
from tapejit.passes import cleanup
from tapejit.passes import simplify as simplify_mod
from tapejit.passes.memplan import plan

RNG = np.random.default_rng(20261122)


def _graph(outputs, *shapes, consts=()):
    """A graph over runtime inputs of ``shapes`` (active) and captured constants ``consts``."""
    inputs = [Node("input", (), (i, f"a{i}"), Type(tuple(s))) for i, s in enumerate(shapes)]
    cnodes = [
        Node("input", (), (len(shapes) + j, f"c{j}"), Type(np.shape(c)))
        for j, c in enumerate(consts)
    ]
    outs = outputs(*inputs, *cnodes)
    outs = outs if isinstance(outs, tuple) else (outs,)
    bindings = {len(shapes) + j: np.asarray(c, dtype=np.float64) for j, c in enumerate(consts)}
    kinds = ("active",) * len(shapes) + ("const",) * len(consts)
    return Graph("t", tuple(inputs + cnodes), kinds, outs, bindings)


def _args(g):
    return [RNG.uniform(0.5, 2.0, n.shape) for n, k in zip(g.inputs, g.kinds) if k != "const"]


def _same(g1, g2, rtol=1e-15, trials=3):
    for _ in range(trials):
        args = _args(g1)
        for a, b in zip(interpret.evaluate(g1, args), interpret.evaluate(g2, args)):
            np.testing.assert_allclose(b, a, rtol=rtol, atol=0)


def _ops_in(g):
    return [n.op for n in g.nodes]


# ----------------------------------------------------------------------------------------------
# simplify: one case per row of the rule table

c = ops.const
mk = ops.make
S = (5,)


def _bs(s, shape=S):
    return mk("broadcast_to", s, attrs=(shape,))


RULE_CASES = {
    "fold": [
        (
            lambda x: mk("mul", x, mk("add", c(2.0), c(3.0))),
            [S],
            (),
            lambda g: "add" not in _ops_in(g),
        ),
        # folding over a captured constant: c[0] becomes a scalar constant, c is then dead
        (
            lambda x, k: mk("mul", x, ops.index(k, (0,))),
            [S],
            (np.arange(1.0, 4.0),),
            lambda g: "index" not in _ops_in(g),
        ),
        (
            lambda x, k: mk("mul", x, ops.matmul(k, k)),
            [S],
            (np.arange(1.0, 4.0),),
            lambda g: "matmul" not in _ops_in(g),
        ),
    ],
    "add": [
        (lambda x: mk("add", x, c(-0.0)), [S], (), lambda g: _ops_in(g) == ["input"]),
        (lambda x: mk("add", mk("exp", x), c(0.0)), [S], (), lambda g: "add" not in _ops_in(g)),
        (lambda x, y: mk("add", x, mk("neg", y)), [S, S], (), lambda g: "sub" in _ops_in(g)),
    ],
    "sub": [
        (lambda x: mk("sub", x, c(0.0)), [S], (), lambda g: _ops_in(g) == ["input"]),
        (lambda x: mk("sub", c(-0.0), x), [S], (), lambda g: "neg" in _ops_in(g)),
        (
            lambda x, y: mk("sub", x, mk("neg", y)),
            [S, S],
            (),
            lambda g: _ops_in(g).count("add") == 1,
        ),
    ],
    "mul": [
        (lambda x: mk("mul", c(1.0), x), [S], (), lambda g: _ops_in(g) == ["input"]),
        (lambda x: mk("mul", x, c(-1.0)), [S], (), lambda g: "neg" in _ops_in(g)),
        (
            lambda x, y: mk("mul", mk("neg", x), mk("neg", y)),
            [S, S],
            (),
            lambda g: "neg" not in _ops_in(g),
        ),
    ],
    "stop-gradient": [  # after differentiation only its value is left
        (lambda x: mk("stop_gradient", x), [S], (), lambda g: _ops_in(g) == ["input"]),
    ],
    "scalar-negation": [
        (
            lambda x, t: mk("mul", mk("neg", x), t),
            [S, ()],
            (),
            lambda g: all(n.shape == () for n in g.nodes if n.op == "neg"),
        ),
    ],
    "div": [
        (lambda x: mk("div", x, c(1.0)), [S], (), lambda g: _ops_in(g) == ["input"]),
        (lambda x: mk("div", x, c(4.0)), [S], (), lambda g: "div" not in _ops_in(g)),
    ],
    "neg": [(lambda x: mk("neg", mk("neg", x)), [S], (), lambda g: _ops_in(g) == ["input"])],
    "pow": [
        (
            lambda x: mk("pow", x, mk("add", c(1.0), c(1.0))),
            [S],
            (),
            lambda g: "pow" not in _ops_in(g),
        ),
        (lambda x: mk("pow", x, c(0.5)), [S], (), lambda g: "sqrt" in _ops_in(g)),
    ],
    "where": [
        (
            lambda x, y: mk("where", mk("lt", x, y), x, x),
            [S, S],
            (),
            lambda g: _ops_in(g) == ["input"],
        ),
        (
            lambda x, y: mk("where", c(True, S, "bool"), x, y),
            [S, S],
            (),
            lambda g: "where" not in _ops_in(g),
        ),
    ],
    "scalarise": [
        (
            lambda x, s: mk("add", x, _bs(s)),
            [S, ()],
            (),
            lambda g: "broadcast_to" not in _ops_in(g),
        ),
        (
            lambda s: mk("exp", _bs(s)),
            [()],
            (),
            lambda g: [n.shape for n in g.nodes if n.op == "exp"] == [()],
        ),
    ],
    "cast": [(lambda x: mk("cast", x, attrs=("f64",)), [S], (), lambda g: _ops_in(g) == ["input"])],
    "broadcast": [
        (
            lambda s: _bs(mk("reshape", s, attrs=((1,),))),
            [()],
            (),
            lambda g: "reshape" not in _ops_in(g),
        ),
    ],
    "reshape": [
        (
            lambda x: mk("reshape", mk("reshape", x, attrs=((2, 3),)), attrs=((3, 2),)),
            [(6,)],
            (),
            lambda g: _ops_in(g).count("reshape") == 1,
        ),
    ],
    "transpose": [
        (
            lambda x: mk("transpose", mk("transpose", x, attrs=((1, 0),)), attrs=((1, 0),)),
            [(2, 3)],
            (),
            lambda g: _ops_in(g) == ["input"],
        ),
    ],
    "index": [
        (lambda s: ops.index(_bs(s), (2,)), [()], (), lambda g: _ops_in(g) == ["input"]),
        (  # reshape(u, (3, 1))[:, 0] reads all of u: u itself
            lambda u: mk("index", ops.reshape(u, (3, 1)), attrs=((0, 3, 1), 0)),
            [(3,)],
            (),
            lambda g: _ops_in(g) == ["input"],
        ),
    ],
    "reduce-sum": [
        (
            lambda s: ops.reduce("reduce_sum", _bs(s)),
            [()],
            (),
            lambda g: "reduce_sum" not in _ops_in(g),
        ),
    ],
    "reduce-max": [
        (lambda s: ops.reduce("reduce_max", _bs(s)), [()], (), lambda g: _ops_in(g) == ["input"]),
    ],
    "accumulate-outer": [  # acc + outer(a, b): elementwise, no product kernel
        (
            lambda acc, a, b: mk("add", acc, ops.matmul(a, b)),
            [(5, 4), (5, 1), (1, 4)],
            (),
            lambda g: "matmul" not in _ops_in(g),
        ),
        (
            lambda acc, a, b: mk("add", ops.matmul(a, b), acc),
            [(4,), (1,), (1, 4)],
            (),
            lambda g: "matmul" not in _ops_in(g),
        ),
    ],
    "scatter-add-whole": [  # zeros[0:n] += u over the whole array is u
        (
            lambda u: mk("scatter_add", c(-0.0, (2, 3)), u, attrs=((0, 2, 1), (0, 3, 1))),
            [(2, 3)],
            (),
            lambda g: "scatter_add" not in _ops_in(g),
        ),
        (
            lambda u: mk("scatter_add", c(-0.0, (1, 4)), u, attrs=(0, (0, 4, 1))),
            [(4,)],
            (),
            lambda g: "scatter_add" not in _ops_in(g),
        ),
    ],
    "scatter-whole": [  # c[0:n] = u over the whole array is u
        (
            lambda u: mk("scatter", c(0.0, (2, 3)), u, attrs=((0, 2, 1), (0, 3, 1))),
            [(2, 3)],
            (),
            lambda g: "scatter" not in _ops_in(g),
        ),
        (  # c[:, 0] = u of a (n, 1) array (an element's cotangent column): a reshape of u
            lambda u: mk("scatter", c(0.0, (3, 1)), u, attrs=((0, 3, 1), 0)),
            [(3,)],
            (),
            lambda g: "scatter" not in _ops_in(g),
        ),
    ],
    "custom": [  # a hand-given rule's node (tapejit.frontend.custom) is its first operand
        (
            lambda x: mk("custom", mk("exp", x), x, attrs=("rule",)),
            [S],
            (),
            lambda g: "custom" not in _ops_in(g) and "exp" in _ops_in(g),
        ),
    ],
}


def test_every_rule_has_a_case():
    assert set(RULE_CASES) == {name for name, *_ in simplify_mod.RULES}


@pytest.mark.parametrize(
    "name,case",
    [(name, case) for name, cases in RULE_CASES.items() for case in cases],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_simplify_rule(name, case):
    build, shapes, consts, check = case
    g = _graph(build, *shapes, consts=consts)
    out, stats = simplify_mod.simplify(g)
    assert stats["rules"].get(name, 0) >= 1, stats
    assert check(out), str(out)
    if name != "accumulate-outer":  # a product becomes broadcasts and a multiply
        assert len(out.nodes) <= len(g.nodes)
    rtol = 1e-13 if name == "reduce-sum" else 1e-15
    _same(g, out, rtol=rtol)


def test_simplify_keeps_ieee_special_cases_it_does_not_document():
    # x * 0 is not folded to 0: inf * 0 is nan
    g = _graph(lambda x: mk("mul", x, c(0.0)), S)
    out, _ = simplify_mod.simplify(g)
    assert "mul" in _ops_in(out)
    # x - x is not folded to 0 either: inf - inf is nan
    g = _graph(lambda x: mk("sub", x, x), S)
    out, _ = simplify_mod.simplify(g)
    assert "sub" in _ops_in(out)
    # x + 0.0, 0.0 + x, 0.0 - x and x - (-0.0) keep their op: -0.0 + 0.0 is +0.0
    for build in (
        lambda x: mk("add", x, c(0.0)),
        lambda x: mk("add", c(0.0), x),
        lambda x: mk("sub", c(0.0), x),
        lambda x: mk("sub", x, c(-0.0)),
    ):
        out, _ = simplify_mod.simplify(_graph(build, S))
        assert {"add", "sub"} & set(_ops_in(out)), str(out)
    # (x * a) * b is not x * (a * b): x * a may overflow or underflow
    g = _graph(lambda x, a, b: mk("mul", mk("mul", x, a), b), S, (), ())
    out, _ = simplify_mod.simplify(g)
    assert sum(n.op == "mul" and n.shape == S for n in out.nodes) == 2, str(out)


def test_fold_does_not_blow_up_constants():
    big = np.arange(10_000.0)
    g = _graph(
        lambda x, k: mk(
            "add",
            x,
            ops.index(
                mk(
                    "reduce_sum",
                    ops.broadcast_to(ops.reshape(k, (1, 10_000)), (10_000, 10_000)),
                    attrs=((0,),),
                ),
                (0,),
            ),
        ),
        (),
        consts=(big,),
    )
    out, _ = simplify_mod.simplify(g)
    assert all(b.size <= 10_000 for b in out.bindings.values())
    _same(g, out, rtol=1e-15)


# ----------------------------------------------------------------------------------------------
# CSE and DCE


def test_cse_at_construction_merges_commutative_operands():
    """There is no CSE pass: ``a*b`` and ``b*a`` are one node when built, in a canonical operand
    order that does not depend on which was written first."""
    g = _graph(lambda a, b: mk("add", mk("mul", a, b), mk("mul", b, a)), S, S)
    assert _ops_in(g).count("mul") == 1
    mul = next(n for n in g.nodes if n.op == "mul")
    a, b = g.inputs
    assert mk("mul", b, a) is mk("mul", a, b) is mul
    assert digest(mul.args[0]) <= digest(mul.args[1])
    assert [n.op for n in g.nodes].count("add") == 1  # add(m, m): no swap of equal operands
    out, _ = passes.optimise(g)
    _same(g, out)


def test_dce_drops_folded_constants():
    k = np.arange(1.0, 1001.0)
    g = _graph(lambda x, kk: mk("mul", x, ops.index(kk, (3,))), S, consts=(k,))
    out, _ = passes.optimise(g)
    assert "const" not in out.kinds
    assert out.bindings == {}
    stats = passes.optimise(g)[1]["dce"]
    assert stats["constants_dropped"] == 1 and stats["constant_bytes_dropped"] == k.nbytes
    _same(g, out)


# ----------------------------------------------------------------------------------------------
# Fusion, schedule and memory plan


def eam(x):
    rho = np.sum(np.exp(-3.0 * (x + 1.0)))
    return rho**2 + rho**3 + 0.25 * rho**4


def _pipeline(f, *args, argnums=0):
    nums = (argnums,) if isinstance(argnums, int) else argnums
    joint = autodiff.vjp_graph(tracing.trace(f, args, nums))
    opt, _ = passes.optimise(joint)
    return joint, opt, plan(opt)


def _check_plan(joint, prog, args, rtol=1e-13):
    ref = interpret.evaluate(joint, args)
    got = interpret.run_program(prog, args)
    for a, b in zip(ref, got):
        np.testing.assert_allclose(b, a, rtol=rtol, atol=1e-300)


@pytest.mark.parametrize("n", [1, 7, 100])
def test_eam_plan_is_two_loops_one_exp_no_workspace(n):
    x = RNG.random(n)
    joint, opt, prog = _pipeline(eam, x)
    assert prog.stats["kernels"] == 2
    assert prog.workspace_bytes == 0
    exps = sum(np.prod(k.space) for k in prog.kernels for b in k.body if b.op == "exp")
    assert exps == n  # one exp per element in the whole program
    assert not any(b.op == "exp" for k in prog.kernels for b in k.pre)
    _check_plan(joint, prog, [x])
    g = tj.compile(eam, x)
    assert g.stats["kernels"] == 2 and g.stats["workspace_bytes"] == 0
    rho = np.exp(-3 * (x + 1)).sum()
    np.testing.assert_allclose(
        g(x), -3 * np.exp(-3 * (x + 1)) * (2 * rho + 3 * rho**2 + rho**3), rtol=1e-13
    )


def test_adjoint_fuses_into_the_forward_loop():
    def f(x):
        return np.sum(np.tanh(np.sin(x) * 2.0 + x * x))

    x = RNG.random(64)
    joint, opt, prog = _pipeline(f, x)
    # The sum's cotangent is 1, so the backward loop needs nothing the forward loop reduces:
    # adjoint fusion puts both in one loop, and nothing is stored but the gradient.
    assert prog.stats["kernels"] == 1
    assert prog.workspace_bytes == 0
    (k,) = [k for k in prog.kernels if k.body]
    assert {"sin", "tanh", "cos", "reduce_sum"} <= {n.op for n in k.body}
    _check_plan(joint, prog, [x])


def test_cheap_values_are_recomputed_costly_ones_reused():
    x_in = Node("input", (), (0, "x"), Type((8,)))

    def graph(make_y):
        y = make_y(x_in)
        s = ops.reduce("reduce_sum", y)
        return Graph("t", (x_in,), ("active",), (s, mk("mul", y, s)), {})

    cheap = plan(graph(lambda x: mk("add", x, c(1.0))))
    costly = plan(graph(lambda x: mk("exp", x)))
    assert cheap.stats["recomputed"] == 1
    assert costly.stats["recomputed"] == 0
    # the recomputed value needs no memory; the reused one lives in the output (in place)
    assert cheap.stats["buffers"] == 1 and costly.stats["buffers"] == 1
    assert sum(len(k.body) for k in cheap.kernels) == 4  # add, sum | add again, mul
    for prog in (cheap, costly):
        _check_plan(prog.graph, prog, [RNG.random(8)])


def test_liveness_reuses_dead_buffers():
    # A chain of matmuls: each intermediate dies at the next one, so buffers are reused.
    m = 6

    def build(x, *ws):
        h = x
        for w in ws:
            h = ops.matmul(h, w)
        return ops.reduce("reduce_sum", h)

    g = _graph(build, (m, m), *([(m, m)] * 5))
    prog = plan(g)
    intermediates = 4 * m * m * 8
    assert 0 < prog.workspace_bytes < intermediates
    _check_plan(g, prog, _args(g))


def test_in_place_never_clobbers_a_gathered_operand():
    # y = x*2 read reversed (a gather) and elementwise in the same loop: no in-place.
    def f(x):
        y = x * 2.0
        return np.sum(np.sin(y[::-1] + y))

    x = RNG.random(9)
    joint, opt, prog = _pipeline(f, x)
    _check_plan(joint, prog, [x])
    np.testing.assert_allclose(tj.compile(f, x)(x), interpret.evaluate(joint, [x])[1], rtol=1e-13)


def test_element_loop_adjoint_updates_the_output_in_place():
    def f(x):
        s = 0.0
        for i in range(x.shape[0]):
            s = s + np.exp(x[i]) * x[i]
        return s

    x = RNG.random(30)
    joint, opt, prog = _pipeline(f, x)
    assert prog.workspace_bytes == 0
    assert prog.stats["kernels"] == 1  # the zero fill of the gradient; the rest is straight-line
    assert prog.stats["work"] < 20 * x.size
    _check_plan(joint, prog, [x])


def test_plan_stage_prints_the_kernels():
    g = tj.compile(eam, RNG.random(100))
    text = g.ir("plan")
    assert "2 loop kernels, workspace 0 bytes" in text
    assert text.count("loop [100]") == 2


# ----------------------------------------------------------------------------------------------
# Activity and sparsity as work (seed 000): per-call work must not grow with the constant's size


def _constant_touch_work(n, variant):
    cc = np.ones(n)
    proj = np.zeros(n)
    proj[0] = 1.0
    if variant == "index":
        f = lambda p: cc[0] * p  # noqa: E731
    else:
        f = lambda p: (cc @ proj) * p  # noqa: E731
    g = tj.compile(f, 1.5)
    assert g(2.0) == pytest.approx(1.0)
    return g.stats["work"], g.stats["constants_bytes"]


@pytest.mark.parametrize("variant", ["index", "matmul"])
def test_constant_touch_work_does_not_grow_with_n(variant):
    w3, b3 = _constant_touch_work(10**3, variant)
    w6, b6 = _constant_touch_work(10**6, variant)
    assert w3 == w6 < 20
    assert b3 == b6 == 0  # the captured arrays fold away entirely


def test_inactive_argument_backward_work_does_not_grow():
    def f(x, cc):
        return cc[0] * x[0]

    x = RNG.random(4)
    works = []
    for n in (10, 10**5):
        cc = RNG.random(n)
        g = tj.compile(f, x, cc)
        expected = np.zeros(4)
        expected[0] = cc[0]
        np.testing.assert_array_equal(g(x, cc), expected)
        works.append(g.stats["work"])
    assert works[0] == works[1]


# ----------------------------------------------------------------------------------------------
# Structure that keeps compile time linear: views instead of copies, one function per kernel shape


def _layered(depth, width=8):
    def f(params, x):
        h = x
        for v in range(depth):
            base = v * (width * width + width)
            w = params[base : base + width * width].reshape(width, width)
            b = params[base + width * width : base + width * width + width]
            h = np.tanh(w @ h + b)
        return np.sum(h)

    return f, RNG.normal(0, 0.3, depth * (width * width + width)), RNG.normal(0, 1, width)


def test_contiguous_slices_are_views_not_copies():
    f, p, x = _layered(3)
    joint, opt, prog = _pipeline(f, p, x, argnums=(0, 1))
    slices = [n for n in opt.nodes if n.op == "index" and n.shape != ()]
    assert slices and all(prog.slots[id(n)].kind == "alias" for n in slices)
    _check_plan(joint, prog, [p, x])


def test_identical_kernels_are_emitted_once(unconverted):
    counts = {}
    for depth in (4, 12):
        f, p, x = _layered(depth)
        g = tj.compile(f, p, x, argnums=(0, 1), cache=False)
        text = g.ir("llvm")
        counts[depth] = (
            text.count("define internal void"),
            text.count("call void"),
            g.stats["kernels"],
        )
        gp, gx = g(p, x)
        d, e, h = RNG.normal(size=p.shape), RNG.normal(size=x.shape), 1e-6
        fd = (f(p + h * d, x + h * e) - f(p - h * d, x - h * e)) / (2 * h)
        assert gp @ d + gx @ e == pytest.approx(fd, rel=1e-6, abs=1e-8)
    assert counts[12][2] > 2 * counts[4][2]  # three times the kernels run ...
    assert counts[12][0] <= counts[4][0] + 2  # ... but (about) the same kernel functions
    assert counts[12][1] <= counts[4][1] + 2  # and call sites: long runs are walked from a tape


def test_kernels_differing_in_commutative_operand_order_share_a_function():
    """``tanh(...) * s`` puts its operands in digest order, which differs from layer to layer;
    the kernel key sorts the operands of commutative ops, so the layers still share functions."""

    def model(depth, width=8):
        per = width * width + 2 * width

        def f(params, x):
            h = x
            for v in range(depth):
                w = params[v * per : v * per + width * width].reshape(width, width)
                b = params[v * per + width * width : v * per + width * width + width]
                s = params[v * per + width * width + width : (v + 1) * per]
                h = np.tanh(w @ h + b) * s
            return np.sum(h)

        return f, RNG.normal(0, 0.3, depth * per), RNG.normal(0, 1, width)

    functions = {}
    for depth in (8, 24):
        f, p, x = model(depth)
        g = tj.compile(f, p, x, argnums=(0, 1), cache=False)
        functions[depth] = g.ir("llvm").count("define internal void")
        gp, gx = g(p, x)
        d, e, h = RNG.normal(size=p.shape), RNG.normal(size=x.shape), 1e-6
        fd = (f(p + h * d, x + h * e) - f(p - h * d, x - h * e)) / (2 * h)
        assert gp @ d + gx @ e == pytest.approx(fd, rel=1e-6, abs=1e-8)
    assert functions[24] <= functions[8] + 1  # (+1: the tape walker) 22 vs 13 without sorting


# ----------------------------------------------------------------------------------------------
# Long straight-line code: split into chained functions of bounded size (the scalarised model
# of examples/element_loop.py)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import element_loop  # noqa: E402


def _function_sizes(llvm: str) -> dict[str, int]:
    sizes, name = {}, None
    for line in llvm.splitlines():
        if line.startswith("define"):
            name = line.split("@", 1)[1].split("(", 1)[0]
            sizes[name] = 0
        elif line.startswith("}"):
            name = None
        elif name is not None:
            sizes[name] += 1
    return sizes


def test_long_straight_line_code_is_split_into_bounded_functions(monkeypatch):
    """No function grows with the model: 3x the elements, 3x the chunk functions, and every
    function within a bound set by CHUNK_NODES (a straight-line node is at most a few
    instructions; in one function the model at 180 elements would be ~14,000 lines). The
    element loop is kept unrolled here (re-rolling, or capturing it while tracing, would
    turn it into one loop)."""
    from tapejit.frontend.loops import loop_source
    from tapejit.passes.reroll import driver as reroll

    monkeypatch.setattr(reroll, "ENABLED", False)
    monkeypatch.setattr(loop_source, "ENABLED", False)
    largest, chunks = {}, {}
    for n in (60, 180):
        f = element_loop.make_model(n)
        x = RNG.random(n)
        g = tj.compile(f, x, cache=False)
        ref = element_loop.numpy_grad(x, np.empty(n))
        np.testing.assert_allclose(g(x), ref, rtol=1e-13, atol=1e-15)
        value, _ = g.value_and_grad(x)
        assert value == pytest.approx(f(x), rel=1e-13)
        sizes = _function_sizes(g.ir("llvm"))
        chunks[n] = sum(".c" in name for name in sizes)
        largest[n] = max(sizes.values())
        assert g.workspace_bytes >= 8 * chunks[n]  # spill slots after the memory plan's bytes
    assert chunks[60] >= 2 and chunks[180] >= 2.5 * chunks[60]
    assert max(largest.values()) <= 8 * CHUNK_NODES


def test_glue_chunks_are_not_optimised_scalar_chunks_are(monkeypatch):
    """Chunks that are mostly kernel calls and element reads/writes (rows of a triangular
    loop) are ``optnone``; chunks of scalar arithmetic (an element loop traced unrolled)
    are optimised; the entry function always is. Gradients are right either way."""
    import re

    from tapejit.frontend.loops import loop_source
    from tapejit.passes.reroll import driver as reroll

    def optnone(g) -> tuple[int, int]:
        heads = re.findall(r"^define [^\n]*@\"?([\w.]+)\"?\(([^\n]*)$", g.ir("llvm"), re.M)
        chunks = [rest for name, rest in heads if re.search(r"\.c\d+$", name)]
        entry = [rest for name, rest in heads if not re.search(r"\.(c|k)\d+|\.math\.", name)]
        assert entry and not any("optnone" in rest for rest in entry)
        return sum("optnone" in rest for rest in chunks), len(chunks)

    def rows(pos):
        e = 0.0
        for i in range(len(pos) - 1):
            d = pos[i + 1 :] - pos[i]
            e = e + np.sum(np.exp(-np.sum(d * d, axis=1)))
        return e

    monkeypatch.setattr(reroll, "ENABLED", False)  # (re-rolled, the rows are one flat sum)
    pos = RNG.random((120, 3))
    g = tj.compile(rows, pos, cache=False)
    marked, total = optnone(g)
    assert total >= 2 and marked >= total // 2, (marked, total)
    h, d = 1e-6, RNG.normal(size=pos.shape)
    fd = (rows(pos + h * d) - rows(pos - h * d)) / (2 * h)
    assert np.sum(g(pos) * d) == pytest.approx(fd, rel=1e-6)

    monkeypatch.setattr(loop_source, "ENABLED", False)
    f = element_loop.make_model(180)
    g = tj.compile(f, RNG.random(180), cache=False)
    marked, total = optnone(g)
    assert total >= 3 and marked <= total // 4, (marked, total)


def test_guards_and_batches_work_across_chunks():
    """A guard late in chunked code returns its status through every chunk; batch rows each
    get their own workspace, spill slots included."""
    n = 80
    chain = element_loop.make_model(n)

    def f(x):
        s = chain(x)
        if x[n - 1] > 0.5:  # a guard after ~1,500 straight-line nodes (it returns: not a select)
            return s + x[n - 1] ** 2
        return s

    def fgrad(x):
        g = element_loop.numpy_grad(x, np.empty(n))
        if x[n - 1] > 0.5:
            g[n - 1] += 2 * x[n - 1]
        return g

    lo, hi = RNG.random(n) * 0.4, RNG.random(n) * 0.4
    hi[n - 1] = 0.9
    strict = tj.compile(f, lo, cache=False, on_guard_failure="raise")
    assert len(_function_sizes(strict.ir("llvm"))) > 4
    np.testing.assert_allclose(strict(lo), fgrad(lo), rtol=1e-13, atol=1e-15)
    with pytest.raises(tj.GuardError):
        strict(hi)
    g = tj.compile(f, lo, cache=False)
    np.testing.assert_allclose(g(hi), fgrad(hi), rtol=1e-13, atol=1e-15)
    rows = RNG.random((6, n)) * 0.4
    out = strict.batch(rows, threads=2)
    for r, o in zip(rows, out):
        np.testing.assert_allclose(o, fgrad(r), rtol=1e-13, atol=1e-15)


def test_element_loop_example_runs(capsys):
    element_loop.main(120)
    assert "gradient check: OK" in capsys.readouterr().out


def _tiny_chunk_models():
    """Models whose straight-line code mixes scalars, a guard, matmuls, loops and reductions."""

    def guarded(x):
        s = x[0] * x[1] + x[2] * x[3] - x[4] * x[5]
        if s > 0.1:  # a guard between scalar nodes
            return np.sqrt(s) * x[0] + np.sum(x * x)
        return s * s

    def mlp(p):
        w, b, v = p[:12].reshape(3, 4), p[12:15], p[15:18]
        h = np.tanh(w @ np.arange(1.0, 5.0) + b)
        return v @ h + p[0] * p[1] - np.exp(p[2] * 0.1)

    def looped(x):
        c = tj.fori_loop(0, 4, lambda i, c: c * 0.9 + x[0] * x[1], x[2] + x[3])
        return c * c + np.sum(x[:3]) * x[4]

    rng = np.random.default_rng(5)
    return [
        (element_loop.make_model(12), rng.random(12)),
        (guarded, rng.random(6) + 0.5),
        (mlp, rng.normal(size=18)),
        (looped, rng.random(6)),
    ]


@pytest.mark.parametrize("k", range(4))
def test_chunk_boundaries_everywhere(monkeypatch, k):
    """With a chunk every 3 straight-line nodes nearly every scalar crosses a boundary (spill
    store, reload, tail call, guard status through the chain); values, gradients and batches
    must not change. (Within rounding, not bit for bit: a reduction's ``reassoc`` lets LLVM
    order its sum differently when the code around it differs.)"""
    import tapejit.codegen.lower.chunks
    from tapejit.frontend.loops import loop_source

    monkeypatch.setattr(loop_source, "ENABLED", False)  # the element loop as straight-line code
    f, x = _tiny_chunk_models()[k]
    plain = tj.compile(f, x, cache=False)
    monkeypatch.setattr(tapejit.codegen.lower.chunks, "CHUNK_NODES", 3)
    chunked = tj.compile(f, x, cache=False, on_guard_failure="raise")
    assert chunked.ir("llvm").count(f'@"tj_{chunked.name}.c') >= 2
    v0, g0 = plain.value_and_grad(x)
    v1, g1 = chunked.value_and_grad(x)
    assert v1 == pytest.approx(v0, rel=1e-14)
    np.testing.assert_allclose(g1, g0, rtol=1e-14, atol=1e-15)
    rows = np.stack([x, x * 0.9, x * 1.1])
    np.testing.assert_allclose(chunked.batch(rows), plain.batch(rows), rtol=1e-14, atol=1e-15)
