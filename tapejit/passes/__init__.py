"""Optimisation passes over the joint graph, and the pipeline that runs them.

Each pass is a pure function ``Graph -> (Graph, stats)`` that never mutates its input; the last
stage, :func:`memplan.plan`, turns the optimised graph into a :class:`~tapejit.ir.Program`.
CSE needs no pass of its own yet: nodes are hash-consed, so equal subexpressions are one node.
"""

from __future__ import annotations

from typing import Callable

from ..ir import Graph, verify
from .memplan import plan

#: The pass pipeline, in order: (name, Graph -> (Graph, stats)).
PIPELINE: list[tuple[str, Callable[[Graph], tuple[Graph, dict]]]] = []


def optimise(g: Graph) -> tuple[Graph, dict]:
    """Run :data:`PIPELINE` on ``g``; returns the optimised graph and per-pass statistics."""
    stats: dict[str, dict] = {}
    for name, fn in PIPELINE:
        before = len(g.nodes)
        g, s = fn(g)
        verify(g)
        stats[name] = {"nodes_before": before, "nodes_after": len(g.nodes), **s}
    return g, stats


__all__ = ["PIPELINE", "optimise", "plan"]
