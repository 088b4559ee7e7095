"""Derivatives given by hand: :func:`custom_vjp` and :func:`custom_jvp` (JAX's API shape).

A user writes the derivative of a sub-function as numpy code — a numerically stable
``log1pexp``, the implicit-function rule of a solve — and tapejit traces and compiles it like any
other code. While ``f`` is traced, a call of the decorated function is recorded as its primal
computation plus one ``custom`` node (:data:`tapejit.core.ops.Op.CUSTOM`) whose value is the primal
result and whose arguments are the values the rule reads; the node's VJP/JVP rule is the user's
rule, traced into a graph (:class:`Rule`) and inlined where reverse or forward mode needs it. The
passes replace the node by its value before code generation.

- ``custom_vjp``: ``f.defvjp(fwd, bwd)``; ``fwd(*args) -> (out, residuals)``, ``bwd(residuals,
  g) -> (cotangent of each argument)``. Reverse mode uses ``bwd``; forward mode differentiates
  ``fwd``'s computation of ``out``.
- ``custom_jvp``: ``f.defjvp(jvp)``; ``jvp(primals, tangents) -> (out, tangent_out)``, linear in
  the tangents. Forward mode uses it; reverse mode uses its transpose (reverse mode through the
  rule, which is exact for a rule linear in the tangents).

A rule's wrong arity or shapes raise ``TypeError``/``ValueError`` naming the rule; a rule that
branches on values (a guard) raises :class:`~tapejit.TracingError`: rules are traced once.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from typing import Any, Callable

import numpy as np

from .errors import TracingError
from .trace_state import detached
from .tracer import Tracer, _build, lift
from .tracing import trace
from ..ad import autodiff
from ..ad.graph_inputs import add_inputs, mark_active
from ..core import ops

from ..core.ir import Graph, Node, format_graph, substitute
from ..core.ops import Op


class Rule:
    """A user's derivative rule traced into a graph, stored as the ``custom`` node's attribute.

    ``graph``: the traced rule; its runtime inputs are bound, in order, to the node's operands
    ``args[1 : 1 + n_bound]`` (residuals, or primals then tangents) and then to the values the
    rule method passes; its const inputs to ``args[1 + n_bound : 1 + n_bound + n_consts]``.
    ``kind``: ``"vjp"`` (the graph maps ``(*residuals, g)`` to the primals' cotangents) or
    ``"jvp"`` (``(*primals, *tangents)`` to ``(out, tangent)``; ``transpose`` maps ``(*primals,
    g)`` to the primals' cotangents).
    """

    def __init__(self, kind: str, name: str, graph: Graph, n_bound: int, transpose: Graph | None):
        self.kind, self.name, self.graph, self.transpose = kind, name, graph, transpose
        self.n_bound = n_bound
        self.n_consts = sum(k == "const" for k in graph.kinds)
        text = format_graph(graph) + (format_graph(transpose) if transpose is not None else "")
        self._repr = f"custom_{kind}({name}, {hashlib.sha256(text.encode()).hexdigest()[:16]})"

    def __repr__(self) -> str:  # deterministic: kernel keys and the cache key print it
        return self._repr

    def _inline(self, g: Graph, operands: list[Node], consts: list[Node]) -> tuple[Node, ...]:
        rt = [n for n, k in zip(g.inputs, g.kinds) if k != "const"]
        cs = [n for n, k in zip(g.inputs, g.kinds) if k == "const"]
        mapping = {id(a): b for a, b in zip(rt, operands)}
        mapping.update({id(a): b for a, b in zip(cs, consts)})
        return substitute(tuple(g.outputs), mapping)

    def split(self, args: tuple[Node, ...]) -> tuple[list[Node], list[Node], list[Node]]:
        """``(bound operands, consts, primals)`` of a node's arguments."""
        b, c = 1 + self.n_bound, 1 + self.n_bound + self.n_consts
        return list(args[1:b]), list(args[b:c]), list(args[c:])

    def vjp(self, g: Node, out: Node, *args: Node) -> tuple:
        bound, consts, primals = self.split(args)
        if self.kind == "vjp":
            cts = self._inline(self.graph, bound + [g], consts)
        else:
            cts = self._inline(self.transpose, primals + [g], consts)
        return (None,) * (1 + len(bound) + len(consts)) + tuple(cts)

    def jvp(self, tangents: tuple, out: Node, *args: Node) -> Node | None:
        bound, consts, primals = self.split(args)
        if self.kind == "vjp":  # forward mode differentiates fwd's computation of out
            return tangents[0]
        ts = tangents[len(args) - len(primals) :]
        if all(t is None for t in ts):
            return None
        ts = [ops.const(0.0, p.shape) if t is None else t for t, p in zip(ts, primals)]
        return self._inline(self.graph, primals + ts, consts)[1]


class _InRule(threading.local):
    """The custom functions whose rule is being traced in this thread: a rule that calls its own
    function (``jvp`` returning ``f(x)``, as JAX examples do) gets the plain function."""

    def __init__(self):
        self.active: set[int] = set()


_in_rule = _InRule()


def _values(xs) -> list:
    return [np.asarray(x.value if isinstance(x, Tracer) else x, dtype=float) for x in xs]


def _trace_rule(owner: Any, name: str, fn: Callable, examples: list) -> Graph:
    _in_rule.active.add(id(owner))
    try:
        with detached():
            g = trace(fn, examples, (), outputs="any")
    finally:
        _in_rule.active.discard(id(owner))
    if g.guards:
        raise TracingError(
            f"the rule {name} branches on a traced value ({g.guards[0][2]}): rules are traced "
            "once, so write the branch with tapejit.where(cond, a, b)"
        )
    return g


def _check(name: str, what: str, got: Any, want: list) -> list:
    got = list(got) if isinstance(got, (tuple, list)) else None
    if got is None or len(got) != len(want):
        n = "a value" if got is None else len(got)
        raise TypeError(f"{name} must return {what} with {len(want)} entries (one per argument), got {n}")
    for k, (g, w) in enumerate(zip(got, want)):
        if np.shape(g) != np.shape(w):
            raise ValueError(
                f"{name} returned {what} {k} of shape {np.shape(g)}; argument {k} has shape "
                f"{np.shape(w)}"
            )
    return got


def _custom_node(rule: Rule, out: Any, bound: list, consts: list, args: tuple) -> Any:
    return _build(
        lambda *nodes: ops.make(Op.CUSTOM, *nodes, attrs=(rule,)), out, *bound, *consts, *args
    )


def _captured(g: Graph) -> list:
    return [g.bindings[i] for i, k in enumerate(g.kinds) if k == "const"]


class custom_vjp:
    """``f = custom_vjp(f); f.defvjp(fwd, bwd)``: reverse mode uses ``bwd`` for ``f`` (see the
    module docstring). Outside tracing, ``f`` runs as it is."""

    def __init__(self, fun: Callable):
        functools.update_wrapper(self, fun)
        self.fun, self.fwd, self.bwd = fun, None, None

    def defvjp(self, fwd: Callable, bwd: Callable) -> "custom_vjp":
        self.fwd, self.bwd = fwd, bwd
        return self

    def __call__(self, *args: Any) -> Any:
        if id(self) in _in_rule.active or not any(isinstance(a, Tracer) for a in args):
            return self.fun(*args)
        name = getattr(self.fun, "__name__", "f")
        if self.fwd is None:
            raise TypeError(f"custom_vjp {name}: call {name}.defvjp(fwd, bwd) before using it")
        _in_rule.active.add(id(self))  # fwd may call f itself (JAX's docs do): the plain f
        try:
            result = self.fwd(*args)
        finally:
            _in_rule.active.discard(id(self))
        if not isinstance(result, tuple) or len(result) != 2:
            raise TypeError(f"{name}'s fwd rule must return (out, residuals)")
        out, res = result
        seq = isinstance(res, (tuple, list))
        res = list(res) if seq else [res]
        out_t = lift(out)
        bwd = self.bwd

        def bwd_flat(*xs):  # the residuals as fwd returned them: a tuple, or one value
            cts = bwd(tuple(xs[:-1]) if seq else xs[0], xs[-1])
            if not isinstance(cts, (tuple, list)):
                raise TypeError(
                    f"{name}.bwd must return a tuple of cotangents (one per argument), "
                    f"got {type(cts).__name__}"
                )
            return tuple(cts)

        examples = _values(res) + [np.zeros(out_t.shape)]
        g = _trace_rule(self, f"{name}.bwd", bwd_flat, examples)
        _check(f"{name}.bwd", "cotangents", g.outputs, [np.zeros(np.shape(a)) for a in args])
        rule = Rule("vjp", name, g, len(res), None)
        return _custom_node(rule, out_t, res, _captured(g), args)


class custom_jvp:
    """``f = custom_jvp(f); f.defjvp(jvp)``: forward mode uses ``jvp`` for ``f``, reverse mode its
    transpose (see the module docstring). Outside tracing, ``f`` runs as it is."""

    def __init__(self, fun: Callable):
        functools.update_wrapper(self, fun)
        self.fun, self.rule = fun, None

    def defjvp(self, jvp: Callable) -> "custom_jvp":
        self.rule = jvp
        return self

    def __call__(self, *args: Any) -> Any:
        if id(self) in _in_rule.active or not any(isinstance(a, Tracer) for a in args):
            return self.fun(*args)
        name = getattr(self.fun, "__name__", "f")
        if self.rule is None:
            raise TypeError(f"custom_jvp {name}: call {name}.defjvp(jvp) before using it")
        out_t = lift(self.fun(*args))
        n, rule_fn = len(args), self.rule

        def jvp_flat(*xs):
            r = rule_fn(tuple(xs[:n]), tuple(xs[n:]))
            if not isinstance(r, tuple) or len(r) != 2:
                raise TypeError(f"{name}'s jvp rule must return (out, tangent_out)")
            return r

        prim = _values(args)
        g = _trace_rule(self, f"{name}.jvp", jvp_flat, prim + [np.zeros_like(p) for p in prim])
        if g.outputs[1].shape != out_t.shape:
            raise ValueError(
                f"{name}.jvp returned a tangent of shape {g.outputs[1].shape}; {name} returns "
                f"shape {out_t.shape}"
            )
        rule = Rule("jvp", name, g, 0, _transpose(g, n))
        return _custom_node(rule, out_t, [], _captured(g), args)


def _transpose(g: Graph, n: int) -> Graph:
    """From the rule ``(*x, *t) -> (out, J t)``: the graph ``(*x, ct, consts) -> J^T ct`` (reverse
    mode through the rule, with respect to the tangents, at tangents 0: exact when the rule is
    linear in them)."""
    tangent_out = g.outputs[1]
    g1, (ct,) = add_inputs(g, [tangent_out.type], ["ct"])
    prod = ops.mul(g1.outputs[1], ct)
    scalar = ops.reduce(Op.REDUCE_SUM, prod) if prod.shape else prod
    scalar_g = mark_active(g1.replace(outputs=(scalar,), output_names=("value",)), range(n, 2 * n))
    joint = autodiff.vjp_graph(scalar_g, tuple(range(n, 2 * n)))
    rt = [x for x, k in zip(joint.inputs, joint.kinds) if k != "const"]
    zero = {id(t): ops.const(0.0, t.shape) for t in rt[n : 2 * n]}
    cts = substitute(tuple(joint.outputs[1:]), zero)
    # inputs: x..., ct, consts (the tangent inputs are gone: replaced by zeros)
    keep = [i for i in range(len(joint.inputs)) if not n <= i < 2 * n]
    inputs, kinds, bindings = [], [], {}
    mapping = {}
    for new_pos, i in enumerate(keep):
        old = joint.inputs[i]
        node = ops.input_node(new_pos, old.attrs[1], old.type)
        mapping[id(old)] = node
        inputs.append(node)
        kinds.append("const" if joint.kinds[i] == "const" else "inactive")
        if i in joint.bindings:
            bindings[new_pos] = joint.bindings[i]
    outs = substitute(cts, mapping)
    return Graph(f"{g.name}_transpose", tuple(inputs), tuple(kinds), outs, bindings)


def stop_gradient(x: Any) -> Any:
    """``x`` unchanged, with a zero derivative: no cotangent flows through it in reverse mode
    and its tangent is zero in forward mode (so also in :func:`tapejit.hvp`,
    :func:`tapejit.hessian` and the Jacobians), as ``jax.lax.stop_gradient``.

    ``x`` is an array, a number, or a pytree of them (nested tuples, lists, namedtuples and
    dicts; other leaves are returned as they are). While tracing, a traced float array becomes
    one ``stop_gradient`` node (:data:`tapejit.core.ops.Op.STOP_GRADIENT`): activity analysis
    stops there, so nothing computed only from it costs backward work, and ``float()`` of it is
    guarded like a value computed from constants. Outside tracing it returns ``x``.
    """
    if isinstance(x, Tracer):
        if x.node.dtype != "f64":  # a mask or a cast result carries no derivative anyway
            return x
        return _build(lambda n: ops.make(Op.STOP_GRADIENT, n), x)
    if isinstance(x, dict):
        return type(x)((k, stop_gradient(v)) for k, v in x.items())
    if isinstance(x, tuple) and hasattr(x, "_fields"):  # a namedtuple
        return type(x)(*(stop_gradient(v) for v in x))
    if isinstance(x, (tuple, list)):
        return type(x)(stop_gradient(v) for v in x)
    return x
