"""Editing a graph's runtime inputs before a sweep: :func:`add_inputs` (new inputs for the
tangents or cotangents a transformation takes, placed before the captured constants) and
:func:`mark_active` (which runtime inputs a sweep differentiates). Pure functions of a
:class:`~tapejit.core.ir.Graph`; used by the transformations (:mod:`tapejit.transforms`) and by
hand-given JVP rules, whose transpose is reverse mode through the rule
(:mod:`tapejit.frontend.custom`)."""

from __future__ import annotations

from typing import Sequence

from ..core import ops
from ..core.ir import Graph, Node, Type, substitute


def add_inputs(g: Graph, types: Sequence[Type], names: Sequence[str]) -> tuple[Graph, list[Node]]:
    """``g`` with new runtime inputs (kind ``inactive``) after its runtime inputs and before its
    captured constants (which move up, bindings re-keyed); returns the graph and the new
    inputs."""
    n_rt = sum(k != "const" for k in g.kinds)
    k = len(types)
    new = [ops.input_node(n_rt + j, name, t) for j, (t, name) in enumerate(zip(types, names))]
    moved = {
        id(inp): ops.input_node(i + k, inp.attrs[1], inp.type)
        for i, inp in enumerate(g.inputs)
        if i >= n_rt
    }
    inputs = list(g.inputs[:n_rt]) + new + [moved[id(i)] for i in g.inputs[n_rt:]]
    kinds = g.kinds[:n_rt] + ("inactive",) * k + g.kinds[n_rt:]
    conds = tuple(c for c, _, _ in g.guards)
    outs = substitute(tuple(g.outputs) + conds, moved)
    guards = tuple((c, e, w) for c, (_, e, w) in zip(outs[len(g.outputs) :], g.guards))
    bindings = {i + k: v for i, v in g.bindings.items()}
    g2 = g.replace(
        inputs=tuple(inputs),
        kinds=kinds,
        outputs=outs[: len(g.outputs)],
        bindings=bindings,
        guards=guards,
    )
    return g2, new


def mark_active(g: Graph, positions: Sequence[int]) -> Graph:
    """``g`` with exactly the runtime inputs at ``positions`` active."""
    kinds = tuple(
        k if k == "const" else ("active" if i in positions else "inactive")
        for i, k in enumerate(g.kinds)
    )
    return g.replace(kinds=kinds)
