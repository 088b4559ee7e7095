"""Forward mode (tapejit/ad/forward.py and the JVP rules of tapejit/core/ops.py).

* Every primitive's JVP, from the op table's case generators (tests/test_ops.py: one set of
  cases per group, so a new op is swept here too), against 4th-order central differences of
  the op's result in a random direction (t = 1e-3: rtol 1e-6, as test_ops), and the dot-product
  test ``<J v, w> = <v, J^T w>`` against reverse mode on ``sum(out * w)`` (rtol 1e-10: both
  sides are exact derivatives; only rounding differs).
* The contract of ``jvp_graph``: input order and kinds, tangent names, const inputs moved
  behind the tangent inputs with their bindings, zero tangents, guards.
* Models traced with ``tracing.trace`` and evaluated by the interpreter against central
  differences of the plain numpy function (rtol 1e-7): EAM, a vector-valued function, an
  MLP, gathers, scatters and in-place updates, ``np.linalg.solve``, every loop form.
* Forward-over-reverse: ``jvp_graph(vjp_graph(trace))`` gives Hessian-vector products, against
  central differences of the gradient (rtol 1e-6) and EAM's hand-derived Hessian.
* The compiled pipeline: a JVP graph with outputs ``(value, tangents...)`` optimised, planned,
  lowered and run natively, against the interpreter (rtol 1e-12).
"""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest

import tapejit as tj
from tapejit.ad import autodiff, forward
from tapejit.core import interpret, ops
from tapejit import passes
from tapejit.frontend import tracing
from tapejit.codegen import entry
from tapejit.codegen.jit import CodeLibrary
from tapejit.codegen.lower import lower
from tapejit.core.ir import Graph, Type

from test_ops import CASES, Case  # the op table's case generators, by group

rng = np.random.default_rng(20240917)


def central4(f, t=1e-3):
    """4th-order central difference of ``f(s)`` (scalar or array valued) at ``s = 0``."""
    return (8 * (f(t) - f(-t)) - (f(2 * t) - f(-2 * t))) / (12 * t)


def assert_close(got, want, rtol):
    want = np.asarray(want, dtype=float)
    scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * 1e-3 * scale)


# -- the op table ------------------------------------------------------------------------------


def op_graph(case: Case):
    """The graph of the case's op result (its inputs active), the case's scalar loss graph
    ``sum(out * w)``, the input values and ``w``."""
    loss, values = case.graph()
    # the case's own directions too, whichever cases ran before (see test_ops.Case.graph)
    rng.bit_generator.state = np.random.default_rng(list(repr(case).encode())).bit_generator.state
    xs = loss.inputs[: len(case.shapes)]
    out = case.build(*xs)
    g = Graph(f"op_{case.op}", xs, ("active",) * len(xs), (out,), {}, ("out",))
    if out.shape:
        w = loss.bindings[len(xs)]
    else:  # loss = out * const(w)
        w = next(a.attrs[0] for a in loss.outputs[0].args if a.op == ops.Op.CONST)
    return g, loss, values, w


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_jvp_matches_central_differences(case):
    g, _, xs, _ = op_graph(case)
    j = forward.jvp_graph(g)
    vs = [rng.standard_normal(np.shape(x)) for x in xs]
    value, tangent = interpret.evaluate(j, [*xs, *vs])
    np.testing.assert_array_equal(value, interpret.evaluate(g, xs)[0])

    def at(s):
        return interpret.evaluate(g, [x + s * v for x, v in zip(xs, vs)])[0]

    assert tangent.shape == g.outputs[0].shape
    if case.op == ops.Op.STOP_GRADIENT:  # its tangent is zero by definition, not f's slope
        np.testing.assert_array_equal(tangent, np.zeros_like(tangent))
        return
    assert_close(tangent, central4(at), rtol=1e-6)


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_dot_product_with_reverse_mode(case):
    """``<J v, w> = <v, J^T w>``: the JVP rules are the transposes of the VJP rules."""
    g, loss, xs, w = op_graph(case)
    vs = [rng.standard_normal(np.shape(x)) for x in xs]
    tangent = interpret.evaluate(forward.jvp_graph(g), [*xs, *vs])[1]
    grads = interpret.evaluate(autodiff.vjp_graph(loss), xs)[1:]
    lhs = float(np.sum(tangent * w))
    rhs = sum(float(np.sum(gr * v)) for gr, v in zip(grads, vs))
    assert lhs == pytest.approx(rhs, rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_forward_over_reverse_matches_central_differences_of_the_gradient(case):
    """The JVP rules on every op that the VJP rules emit, backward loops included: H v of the
    case's loss against 4th-order central differences of its gradient."""
    _, loss, xs, _ = op_graph(case)
    joint = autodiff.vjp_graph(loss)
    vs = [rng.standard_normal(np.shape(x)) for x in xs]
    outs = interpret.evaluate(forward.jvp_graph(joint), [*xs, *vs])
    hv = np.concatenate([np.ravel(a) for a in outs[len(joint.outputs) + 1 :]])

    def grads(s):
        moved = [x + s * v for x, v in zip(xs, vs)]
        return np.concatenate([np.ravel(a) for a in interpret.evaluate(joint, moved)[1:]])

    assert_close(hv, central4(grads), rtol=1e-6)


def _ties(op_builder, shapes) -> Graph:
    xs = [ops.input_node(k, f"x{k}", Type(s)) for k, s in enumerate(shapes)]
    return Graph("ties", tuple(xs), ("active",) * len(xs), (op_builder(*xs),), {}, ("out",))


def test_ties_share_the_tangent_as_reverse_mode_shares_the_cotangent():
    """At a tie of maximum/minimum/reduce_max the tangent is the mean of the tied operands'
    tangents — the transpose of the even split of the cotangent (so the dot-product test holds
    at ties too)."""
    x = np.array([1.0, 2.0, 2.0, 0.5])
    v = np.array([0.3, 1.0, 3.0, -2.0])
    g = _ties(lambda a: ops.reduce(ops.Op.REDUCE_MAX, a), [(4,)])
    assert interpret.evaluate(forward.jvp_graph(g), [x, v])[1] == pytest.approx(2.0)
    for op in (ops.Op.MAXIMUM, ops.Op.MINIMUM):
        g = _ties(lambda a, b, op=op: ops.elementwise(op, a, b), [(4,), (4,)])
        y = np.array([0.0, 2.0, 3.0, 0.5])
        u = np.array([5.0, -1.0, 7.0, 4.0])
        t = interpret.evaluate(forward.jvp_graph(g), [x, y, v, u])[1]
        pick = (x > y) if op == ops.Op.MAXIMUM else (x < y)
        want = np.where(pick, v, np.where(x == y, (v + u) / 2, u))
        np.testing.assert_array_equal(t, want)
        w = np.array([1.0, 2.0, 3.0, 4.0])
        xn = ops.input_node(2, "w", Type((4,)))
        loss = Graph(
            "l", (*g.inputs, xn), ("active", "active", "const"),
            (ops.reduce(ops.Op.REDUCE_SUM, ops.mul(g.outputs[0], xn)),), {2: w},
        )  # fmt: skip
        gx, gy = interpret.evaluate(autodiff.vjp_graph(loss), [x, y])[1:]
        assert np.sum(t * w) == pytest.approx(np.sum(gx * v) + np.sum(gy * u), rel=1e-14)


def test_a_missing_rule_is_an_error_naming_the_op(monkeypatch):
    monkeypatch.setitem(ops.OPS, "sin", dataclasses.replace(ops.OPS["sin"], jvp=None))
    g = tracing.trace(lambda x: np.sum(np.sin(x)), (np.ones(3),), (0,))
    with pytest.raises(ops.RuleError, match="op 'sin' has no JVP rule"):
        forward.jvp_graph(g)


# -- the contract of jvp_graph -----------------------------------------------------------------


def test_inputs_outputs_names_consts_and_guards():
    c = np.array([0.5, -1.0, 2.0])

    def f(x, y, z):
        s = np.sum(x * c)
        if s > 0.0:  # a guard (a branch that returns stays one)
            return s * 2.0 * y + np.sum(z * z)
        return s * y + np.sum(z * z)

    x, y, z = np.array([1.0, 2.0, 3.0]), 1.5, np.ones(2)
    g = tracing.trace(f, (x, y, z), (0, 2))
    before = str(g)
    j = forward.jvp_graph(g)
    assert str(g) == before  # g is untouched
    assert [n.attrs[1] for n in j.inputs] == ["x0", "x1", "x2", "t_x0", "t_x2", "c0"]
    assert j.kinds == ("active", "inactive", "active", "inactive", "inactive", "const")
    assert j.inputs[:3] == g.inputs[:3]
    assert [n.type for n in j.inputs[3:5]] == [g.inputs[0].type, g.inputs[2].type]
    assert [n.attrs[0] for n in j.inputs] == list(range(6))
    assert list(j.bindings) == [5] and np.array_equal(j.bindings[5], c)
    assert j.output_names == ("value", "t_value")
    assert len(j.guards) == len(g.guards) == 1
    assert [(e, w) for _, e, w in j.guards] == [(e, w) for _, e, w in g.guards]
    v, u = rng.standard_normal(3), rng.standard_normal(2)
    value, t = interpret.evaluate(j, [x, y, z, v, u])
    assert value == pytest.approx(f(x, y, z), rel=1e-15)
    assert t == pytest.approx(2.0 * np.sum(v * c) * y + 2.0 * np.sum(z * u), rel=1e-14)


def test_an_output_that_does_not_depend_on_an_active_input_has_a_zero_tangent():
    x = ops.input_node(0, "x", Type((3,)))
    y = ops.input_node(1, "y", Type((2, 2)))
    g = Graph(
        "g", (x, y), ("active", "inactive"),
        (ops.reduce(ops.Op.REDUCE_SUM, ops.elementwise("exp", x)), ops.mul(y, y), x),
    )  # fmt: skip
    j = forward.jvp_graph(g)
    assert j.output_names == ("out0", "out1", "out2", "t_out0", "t_out1", "t_out2")
    v = np.array([1.0, 2.0, 3.0])
    outs = interpret.evaluate(j, [np.zeros(3), np.ones((2, 2)), v])
    assert outs[3] == pytest.approx(6.0)
    np.testing.assert_array_equal(outs[4], np.zeros((2, 2)))
    np.testing.assert_array_equal(outs[5], v)  # the tangent of an active input is its direction
    # no active input: every tangent is zero, and there are no tangent inputs
    k = forward.jvp_graph(g.replace(kinds=("inactive", "inactive")))
    assert len(k.inputs) == 2
    assert all(o.op == ops.Op.CONST for o in k.outputs[3:])


def test_tangent_code_is_only_built_for_active_nodes():
    """Activity analysis: work on inactive inputs gets no tangent code."""

    def f(x, d):
        return np.sum(np.exp(x)) + np.sum(np.sin(np.cos(d)))

    g = tracing.trace(f, (np.ones(3), np.ones(4)), (0,))
    j = forward.jvp_graph(g)
    ops_of = [n.op for n in j.nodes]
    assert ops_of.count("sin") == 1 and ops_of.count("cos") == 1  # only the primal ones


# -- models ------------------------------------------------------------------------------------


def trace_any(f, args, argnums):
    """``f`` traced with every output it returns (scalar or not)."""
    if "outputs" in inspect.signature(tracing.trace).parameters:
        return tracing.trace(f, args, argnums, outputs="any")
    # a tracer without multi-output support: trace sum(f) and return the summand
    g = tracing.trace(lambda *a: np.sum(f(*a)), args, argnums)
    return g.replace(outputs=(g.outputs[0].args[0],), output_names=("value",))


def check_jvp(f, args, argnums=(0,), rtol=1e-7, h=1e-3):
    args = [np.asarray(a, dtype=float) for a in args]
    g = trace_any(f, args, argnums)
    j = forward.jvp_graph(g)
    vs = [rng.standard_normal(np.shape(args[i])) for i in argnums]
    outs = interpret.evaluate(j, [*args, *vs])
    want = f(*args)
    value, tangent = outs[0], outs[len(g.outputs)]
    assert_close(value, want, rtol=1e-12)

    def at(s):
        moved = list(args)
        for i, v in zip(argnums, vs):
            moved[i] = args[i] + s * v
        return np.asarray(f(*moved), dtype=float)

    assert tangent.shape == np.shape(want)
    assert_close(tangent, central4(at, h), rtol)
    return j


def eam(x):
    rho = np.sum(np.exp(-3.0 * (x + 1.0)))
    return rho**2 + rho**3 + 0.25 * rho**4


W1 = rng.standard_normal((5, 4)) / 2
B1 = rng.standard_normal(5) / 4
W2 = rng.standard_normal((3, 5)) / 2


def mlp(x):
    h = np.tanh(W1 @ x + B1)
    return np.sum((W2 @ h - 0.3) ** 2)


def mlp_params(w1, b1, w2, x):
    h = np.tanh(w1 @ x + b1)
    return np.sum(np.log1p((w2 @ h) ** 2))


def vector_valued(x):
    return np.stack([np.sum(x * x), np.sin(x[0]) * x[1], np.exp(x[2] - x[0]), np.prod(x)])


def indexing(x):
    y = np.zeros_like(x)
    for i in range(len(x) - 1):  # preallocate and fill
        y[i] = np.exp(-((x[i + 1] - x[i]) ** 2))
    y[1:] += 0.5 * y[:-1]
    y[[0, 2]] *= x[1]
    z = x[[0, 2, 2, 4]] * 2.0  # a gather with a repeated index
    m = x.reshape(2, 3) * 1.0
    m[:, 0] = np.cos(m[:, 1])
    return np.sum(y * y) + np.sum(z**3) + np.sum(m.T @ m)


def solve(a):
    A = a.reshape(3, 3) + 3.0 * np.eye(3)
    return np.sum(np.linalg.solve(A, np.array([1.0, -2.0, 0.5])) ** 2)


def fori(x):
    return np.sum(tj.fori_loop(1, 6, lambda i, c: c * np.cos(c) * 0.9 + 0.01 * i, x) ** 2)


def scan_xs_ys(x, xs):
    def step(c, xt):
        h = np.tanh(c * xt[0] + xt[1:] * x)
        return h, np.sum(h * xt[1:]) + c[0]

    c, ys = tj.scan(step, x * 0.5, xs)
    return np.sum(c) + np.sum(ys**2)


def while_model(x):
    c = tj.while_loop(lambda c: np.sum(c * c) > 0.1, lambda c: c * 0.8 + 0.01 * np.sin(c), x,
                      max_steps=40)  # fmt: skip
    return np.sum(c**3)


def while_params(x, p):
    """A while_loop whose condition and body close over an active value."""
    s = np.sum(p * p)
    c = tj.while_loop(lambda c: np.sum(c * c) > 0.05 * s, lambda c: c * (0.8 + 0.05 * np.tanh(p)),
                      x, max_steps=40)  # fmt: skip
    return np.sum(c**3) + np.sum(c * p)


def nested(x):
    def outer(i, v):
        return tj.fori_loop(0, 3, lambda j, w: w * np.cos(x) + 0.1 * np.sin(w), v) + 0.01 * i

    return np.sum(tj.fori_loop(0, 4, outer, x) ** 2)


def closes_over(x, p):
    s = np.sum(p * p)  # an active value the body closes over (a loop param)

    def body(i, c):
        return c * np.tanh(s + p) + x[0] * 0.1

    c, ys = tj.scan(lambda c, t: (body(0.0, c), c * s), x, None, length=4)
    return np.sum(c) + np.sum(ys)


def checkpointed_scan(x):
    c, _ = tj.scan(tj.checkpoint(lambda c, xt: (np.sin(c) * xt + c, None)), x, np.ones((3, 4)))
    return np.sum(c**2)


X4 = rng.uniform(-1, 1, 4)
MODELS = {
    "eam": (eam, [rng.random(7)], (0,)),
    "mlp": (mlp, [rng.standard_normal(4)], (0,)),
    "mlp_params": (
        mlp_params,
        [rng.standard_normal((3, 4)), rng.standard_normal(3), rng.standard_normal((2, 3)), X4],
        (0, 1, 2, 3),
    ),
    "vector_valued": (vector_valued, [rng.uniform(0.5, 1.5, 3)], (0,)),
    "indexing": (indexing, [rng.uniform(-1, 1, 6)], (0,)),
    "solve": (solve, [rng.uniform(-1, 1, 9)], (0,)),
    "fori_loop": (fori, [X4], (0,)),
    "scan_xs_ys": (scan_xs_ys, [X4, rng.uniform(-1, 1, (5, 5))], (0, 1)),
    "scan_xs_only": (scan_xs_ys, [X4, rng.uniform(-1, 1, (5, 5))], (1,)),
    "while_loop": (while_model, [rng.uniform(0.5, 1.0, 4)], (0,)),
    "while_params": (while_params, [rng.uniform(0.5, 1.0, 4), rng.uniform(0.5, 1.0, 4)], (0, 1)),
    "nested_loops": (nested, [X4], (0,)),
    "closes_over": (closes_over, [X4, rng.uniform(-1, 1, 4)], (0, 1)),
    "closes_over_param_only": (closes_over, [X4, rng.uniform(-1, 1, 4)], (1,)),
    "checkpointed_scan": (checkpointed_scan, [X4], (0,)),
}


@pytest.mark.parametrize("name", MODELS)
def test_model_jvp_matches_central_differences(name):
    f, args, argnums = MODELS[name]
    check_jvp(f, args, argnums)


def test_vector_valued_jvp_is_the_jacobian_times_v():
    x = np.array([0.7, 1.2, 0.9])
    g = trace_any(vector_valued, [x], (0,))
    j = forward.jvp_graph(g)
    jac = np.array(
        [
            [2 * x[0], 2 * x[1], 2 * x[2]],
            [np.cos(x[0]) * x[1], np.sin(x[0]), 0.0],
            [-np.exp(x[2] - x[0]), 0.0, np.exp(x[2] - x[0])],
            [x[1] * x[2], x[0] * x[2], x[0] * x[1]],
        ]
    )
    for k in range(3):
        e = np.eye(3)[k]
        np.testing.assert_allclose(interpret.evaluate(j, [x, e])[-1], jac[:, k], rtol=1e-14)


def test_loop_tangent_runs_one_loop_over_the_body_jvp():
    """A loop's tangent is one loop (not unrolled) carrying tangents next to the carries; the
    while_loop's condition keeps its verdict on the primal carries."""
    g = tracing.trace(while_model, [np.full(4, 0.9)], (0,))
    j = forward.jvp_graph(g)
    loops = [n for n in j.nodes if n.op == ops.Op.LOOP]
    assert len(loops) == 2  # the primal loop and the tangent loop
    spec = loops[1].attrs[0]
    primal = loops[0].attrs[0]
    assert spec.n_carry == 2 * primal.n_carry and spec.cond is not None
    assert spec.max_steps == primal.max_steps and spec.vjp is None
    # the tangent loop stops where the primal loop stopped (the last entry counts the steps)
    x, v = np.full(4, 0.9), rng.standard_normal(4)
    steps, tsteps = (r[-1] for r in interpret.evaluate(j.replace(outputs=tuple(loops)), [x, v]))
    assert steps == tsteps < primal.max_steps


# -- forward-over-reverse: Hessian-vector products --------------------------------------------


def check_hvp(f, args, argnums=(0,), rtol=1e-6, h=1e-3):
    args = [np.asarray(a, dtype=float) for a in args]
    g = tracing.trace(f, args, argnums)
    joint = autodiff.vjp_graph(g)
    # the joint graph's primal inputs are marked active (vjp_graph keeps the trace's kinds)
    kinds = tuple("active" if i in argnums else k for i, k in enumerate(joint.kinds))
    hj = forward.jvp_graph(joint.replace(kinds=kinds))
    vs = [rng.standard_normal(np.shape(args[i])) for i in argnums]
    outs = interpret.evaluate(hj, [*args, *vs])
    n = len(joint.outputs)
    hv = outs[n + 1 :]

    def grads_at(s):
        moved = list(args)
        for i, v in zip(argnums, vs):
            moved[i] = args[i] + s * v
        return np.concatenate([np.ravel(gr) for gr in interpret.evaluate(joint, moved)[1:]])

    assert_close(np.concatenate([np.ravel(a) for a in hv]), central4(grads_at, h), rtol)
    # the tangent of the value is <grad, v>
    grads = outs[1:n]
    assert outs[n] == pytest.approx(sum(np.sum(gr * v) for gr, v in zip(grads, vs)), rel=1e-12)
    return hj, hv, vs


HVP_MODELS = ["eam", "mlp", "mlp_params", "fori_loop", "scan_xs_ys", "while_loop", "while_params",
              "nested_loops", "closes_over", "checkpointed_scan", "indexing", "solve"]  # fmt: skip


@pytest.mark.parametrize("name", HVP_MODELS)
def test_hessian_vector_product_matches_central_differences_of_the_gradient(name):
    f, args, argnums = MODELS[name]
    check_hvp(f, args, argnums)


def test_dynamic_length_scan():
    """A scan over an argument of dynamic length (its capacity traced, the length a hidden
    input): the tangent loop runs as many iterations as the length, as the primal loop."""

    def f(p, xs):
        c, _ = tj.scan(lambda c, x: (np.tanh(c * p + x), None), np.zeros(3), xs)
        return np.sum(c**2)

    p, xs = rng.uniform(-1, 1, 3), rng.uniform(-1, 1, (5, 3))
    g = tracing.trace(f, (p, xs), (0, 1), dynamic={1: 8})
    padded = np.zeros((8, 3))
    padded[:5] = xs
    v, u = rng.standard_normal(3), rng.standard_normal((8, 3))
    j = forward.jvp_graph(g)
    names = [n.attrs[1] for n in j.inputs]
    assert names[:5] == ["x0", "x1", "len1", "t_x0", "t_x1"]  # (then a captured zeros)
    tangent = interpret.evaluate(j, [p, padded, 5.0, v, u])[1]
    assert tangent == pytest.approx(central4(lambda s: f(p + s * v, xs + s * u[:5])), rel=1e-8)

    joint = autodiff.vjp_graph(g)  # H v, against central differences of the gradient
    outs = interpret.evaluate(forward.jvp_graph(joint), [p, padded, 5.0, v, u])

    def grads(s):
        gr = interpret.evaluate(joint, [p + s * v, padded + s * u, 5.0])[1:]
        return np.concatenate([np.ravel(a) for a in gr])

    hv = np.concatenate([np.ravel(a) for a in outs[len(joint.outputs) + 1 :]])
    assert_close(hv, central4(grads), rtol=1e-6)
    assert np.all(outs[-1][5:] == 0.0)  # rows past the length get nothing


def test_eam_hessian_vector_product_matches_the_hand_formula():
    x = rng.random(9)
    _, (hv,), (v,) = check_hvp(eam, [x])
    e = np.exp(-3.0 * (x + 1.0))
    rho = e.sum()
    d1 = 2 * rho + 3 * rho**2 + rho**3  # E'(rho)
    d2 = 2 + 6 * rho + 3 * rho**2  # E''(rho)
    want = 9.0 * e * (d2 * np.dot(e, v)) + 9.0 * e * v * d1
    np.testing.assert_allclose(hv, want, rtol=1e-12)


# -- the compiled pipeline ---------------------------------------------------------------------


def run_native(g: Graph, args):
    """``g`` optimised, planned, lowered and compiled, run once on ``args`` (runtime inputs).
    The outputs and the workspace start as NaN bytes: nothing may be left unwritten, and no
    buffer may be assumed zero (also tests/test_loop_links_native.py)."""
    opt, _ = passes.optimise(g)
    prog = passes.plan(opt)
    module, ws_bytes = lower(prog, "tj_forward_test")
    lib = CodeLibrary.compile(CodeLibrary.prepare(module))
    p = prog.graph  # constant folding may have added const inputs
    fn = entry.bind(lib.address("tj_forward_test"), len(p.inputs), len(p.outputs))
    consts = [np.ascontiguousarray(p.bindings[i]) for i, k in enumerate(p.kinds) if k == "const"]
    ins = [np.ascontiguousarray(a, dtype=float) for a in args] + consts
    outs = [np.full(o.shape, np.nan) for o in g.outputs]
    raw = np.full(ws_bytes + 64, 0xFF, dtype=np.uint8)
    ws = raw[(-raw.ctypes.data) % 64 :]
    ffi = entry.ffi
    ptrs = [ffi.from_buffer(a) for a in ins + outs]
    status = fn(*ptrs, ffi.from_buffer(ws) if ws_bytes else ffi.NULL)
    assert status == 0
    return outs


def tangent_only(j: Graph, n_primal: int) -> Graph:
    """``j`` with outputs ``(scalar primal value or const 0.0, tangents...)``: the kernel
    signature of a compiled gradient, a value then arrays."""
    first = j.outputs[0] if j.outputs[0].shape == () else ops.const(0.0)
    names = ("value",) + j.output_names[n_primal:]
    return j.replace(outputs=(first, *j.outputs[n_primal:]), output_names=names)


COMPILED = ["eam", "mlp_params", "vector_valued", "indexing", "scan_xs_ys", "while_loop",
            "while_params", "nested_loops", "closes_over"]  # fmt: skip


@pytest.mark.parametrize("name", COMPILED)
def test_compiled_jvp_matches_the_interpreter(name):
    f, args, argnums = MODELS[name]
    args = [np.asarray(a, dtype=float) for a in args]
    g = trace_any(f, args, argnums)
    j = tangent_only(forward.jvp_graph(g), len(g.outputs))
    vs = [rng.standard_normal(np.shape(args[i])) for i in argnums]
    want = interpret.evaluate(j, [*args, *vs])
    got = run_native(j, [*args, *vs])
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13 * max(1.0, np.abs(b).max()))


@pytest.mark.parametrize("name", ["eam", "mlp", "fori_loop", "scan_xs_ys", "while_loop"])
def test_compiled_hessian_vector_product_matches_the_interpreter(name):
    f, args, argnums = MODELS[name]
    args = [np.asarray(a, dtype=float) for a in args]
    joint = autodiff.vjp_graph(tracing.trace(f, args, argnums))
    hj = forward.jvp_graph(joint)
    j = tangent_only(hj, len(joint.outputs))
    vs = [rng.standard_normal(np.shape(args[i])) for i in argnums]
    want = interpret.evaluate(j, [*args, *vs])
    got = run_native(j, [*args, *vs])
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-12 * max(1.0, np.abs(b).max()))


def test_compiled_jvp_of_a_vector_valued_function_returns_values_and_tangents():
    """The whole JVP graph as one kernel: outputs ``(y, J v)`` of any shapes."""
    x, v = np.array([0.3, 0.5, 0.9]), np.array([1.0, -2.0, 0.5])
    j = forward.jvp_graph(trace_any(vector_valued, [x], (0,)))
    got = run_native(j, [x, v])
    for a, b in zip(got, interpret.evaluate(j, [x, v])):
        np.testing.assert_allclose(a, b, rtol=1e-13)
