"""Reverse mode on the IR: activity analysis, then VJP rules in reverse topological order.

Input: a forward graph with one scalar output. Output: one *joint* graph with the same inputs whose
outputs are the primal value followed by the cotangent (gradient) of each active input.

Activity analysis (Hascoët & Pascual, "The Tapenade automatic differentiation tool", ACM TOMS
39(3), 2013, sec. 3): a node is *active* iff it depends on an active input through
differentiable ops and the output depends on it. Only active nodes receive cotangents, so
constants — however large — cost no backward work. Ops in :data:`tapejit.ops.NONDIFFERENTIABLE`
(comparisons, ``sign``, casts) cut the dependency: their results are piecewise constant.

Cotangents accumulate by addition. The cotangent of an indexing op is :class:`tapejit.ops.Sparse`:
all the sparse contributions to one operand become one chain of ``scatter_add`` nodes into a single
accumulator (one O(n) zero-fill, then O(1) per access) — never a dense one-hot array per access.
"""

from __future__ import annotations

from . import ops
from .ir import Graph, Node, verify


def active_nodes(g: Graph) -> set[int]:
    """``id`` of every node that depends on an active input through differentiable ops.

    (Every node of ``g.nodes`` reaches an output by construction, so this is the active set.)
    """
    varied: set[int] = {id(n) for n, k in zip(g.inputs, g.kinds) if k == "active"}
    for n in g.nodes:
        if n.op not in ops.NONDIFFERENTIABLE and any(id(a) in varied for a in n.args):
            varied.add(id(n))
    return varied


def _fit(ct, arg: Node):
    """Sum a dense cotangent over the axes along which a scalar operand was broadcast."""
    if isinstance(ct, ops.Sparse) or ct.shape == arg.shape:
        return ct
    if arg.shape == ():
        return ops.reduce("reduce_sum", ct)
    raise ops.RuleError(f"cotangent of shape {ct.shape} for an operand of shape {arg.shape}")


def _total(contribs: list, node: Node) -> Node:
    """One cotangent from dense contributions (added) and sparse ones (scatter-added)."""
    dense = [c for c in contribs if isinstance(c, Node)]
    sparse = [c for c in contribs if isinstance(c, ops.Sparse)]
    acc = None
    for c in dense:
        acc = c if acc is None else ops.add(acc, c)
    if sparse and acc is None:
        acc = ops.const(0.0, node.shape)
    for s in sparse:
        acc = ops.make("scatter_add", acc, s.g, attrs=s.items)
    return acc if acc is not None else ops.const(0.0, node.shape)


def vjp_graph(g: Graph) -> Graph:
    """The joint graph ``(value, grad_0, ..., grad_k)`` of ``g`` for its active inputs.

    Raises :class:`tapejit.ops.RuleError` naming an op that lacks a VJP rule.
    """
    if len(g.outputs) != 1 or g.outputs[0].shape != ():
        raise ValueError("reverse mode needs a graph with exactly one scalar output")
    (out,) = g.outputs
    active = active_nodes(g)
    contribs: dict[int, list] = {id(out): [ops.const(1.0)]}
    for n in reversed(g.nodes):
        cs = contribs.get(id(n))
        if n.op == "input" or not cs or id(n) not in active:
            continue
        del contribs[id(n)]
        cts = ops.vjp_rule(n.op)(_total(cs, n), n, *n.args)
        for arg, ct in zip(n.args, cts):
            if ct is not None and id(arg) in active:
                contribs.setdefault(id(arg), []).append(_fit(ct, arg))
    grads, names = [], []
    for n, k in zip(g.inputs, g.kinds):
        if k == "active":
            grads.append(_total(contribs.get(id(n), []), n))
            names.append(f"grad_{n.attrs[1]}")
    return verify(g.replace(outputs=(out, *grads), output_names=("value", *names)))
