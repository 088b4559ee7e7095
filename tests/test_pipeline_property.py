"""Property test: the whole pipeline preserves value and gradient of random programs.

Hypothesis builds random elementwise/reduction/gather programs over two active vectors and a
captured constant; for each, the joint (value, gradient) graph is evaluated four ways that share
no code paths beyond the op references: the unoptimised graph, the optimised graph, the plan
executed as planned (simulated workspace), and the native code. Ops are chosen to stay finite
(bounded inputs to exp, denominators >= 1). Tolerance: rtol 1e-10, atol 1e-12 (passes
reassociate scalar factors; native reductions are reassociated for vectorisation).
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tapejit.ad import autodiff
from tapejit.core import interpret, ops
from tapejit import passes
from tapejit.runtime.variant import compile_graph
from tapejit.core.ir import Graph, Node, Type

c = ops.const

UNARY = {
    "sin": lambda a: ops.elementwise("sin", a),
    "cos": lambda a: ops.elementwise("cos", a),
    "tanh": lambda a: ops.elementwise("tanh", a),
    "neg": lambda a: ops.neg(a),
    "exp_tanh": lambda a: ops.elementwise("exp", ops.elementwise("tanh", a)),
    "soft": lambda a: ops.div(a, ops.add(c(1.0), ops.mul(a, a))),
    "sqrt1": lambda a: ops.elementwise("sqrt", ops.add(ops.mul(a, a), c(1.0))),
    "plus1": lambda a: ops.add(a, c(1.0)),
    "times1": lambda a: ops.mul(a, c(1.0)),
}
BINARY = {
    "add": ops.add,
    "sub": ops.sub,
    "mul": ops.mul,
    "max": lambda a, b: ops.elementwise("maximum", a, b),
    "select": lambda a, b: ops.where(ops.elementwise("gt", a, b), a, ops.mul(b, c(0.5))),
}

step = st.one_of(
    st.tuples(st.just("unary"), st.sampled_from(sorted(UNARY)), st.integers(0, 99)),
    st.tuples(
        st.just("binary"), st.sampled_from(sorted(BINARY)), st.integers(0, 99), st.integers(0, 99)
    ),
    st.tuples(
        st.just("scalar"), st.sampled_from(sorted(BINARY)), st.integers(0, 99), st.integers(0, 99)
    ),
    st.tuples(st.just("reduce"), st.sampled_from(["reduce_sum", "reduce_max"]), st.integers(0, 99)),
    st.tuples(st.just("reverse"), st.integers(0, 99)),
    st.tuples(st.just("element"), st.integers(0, 99), st.integers(0, 99)),
)


def build(steps, n, k):
    x = Node("input", (), (0, "x"), Type((n,)))
    y = Node("input", (), (1, "y"), Type((n,)))
    kc = Node("input", (), (2, "k"), Type((n,)))
    arrays, scalars = [x, y, kc], [c(0.5)]
    for s in steps:
        kind = s[0]
        if kind == "unary":
            arrays.append(UNARY[s[1]](arrays[s[2] % len(arrays)]))
        elif kind == "binary":
            arrays.append(BINARY[s[1]](arrays[s[2] % len(arrays)], arrays[s[3] % len(arrays)]))
        elif kind == "scalar":  # an array op with a scalar operand, or a scalar op
            a = scalars[s[3] % len(scalars)]
            if s[2] % 2:
                arrays.append(BINARY[s[1]](arrays[s[2] % len(arrays)], ops.elementwise("tanh", a)))
            else:
                scalars.append(BINARY[s[1]](a, scalars[s[2] % len(scalars)]))
        elif kind == "reduce":
            scalars.append(ops.elementwise("tanh", ops.reduce(s[1], arrays[s[2] % len(arrays)])))
        elif kind == "reverse":
            arrays.append(ops.index(arrays[s[1] % len(arrays)], ((n - 1, -1, -1),)))
        else:  # one element, as a scalar
            scalars.append(ops.index(arrays[s[1] % len(arrays)], (s[2] % n,)))
    out = ops.reduce("reduce_sum", arrays[-1])
    for s in scalars[1:]:
        out = ops.add(out, s)
    return Graph("random", (x, y, kc), ("active", "active", "const"), (out,), {2: k})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(step, min_size=1, max_size=12),
    n=st.integers(1, 9),
    seed=st.integers(0, 2**32 - 1),
)
def test_pipeline_preserves_value_and_gradient(steps, n, seed):
    rng = np.random.default_rng(seed)
    k = rng.uniform(-1, 1, n)
    trace = build(steps, n, k)
    joint = autodiff.vjp_graph(trace)
    opt, _ = passes.optimise(joint)
    prog = passes.plan(opt)
    args = [rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)]
    ref = interpret.evaluate(joint, args)
    got = {
        "optimised": interpret.evaluate(opt, args),
        "planned": interpret.run_program(prog, args),
        "native": _native(trace, args),
    }
    for name, outs in got.items():
        for r, o in zip(ref, outs):
            np.testing.assert_allclose(o, r, rtol=1e-10, atol=1e-12, err_msg=name)


def _native(trace, args):
    g = compile_graph(trace)
    value, grads = g.value_and_grad(*args)
    return [np.asarray(value), *grads]
