"""The pass pipeline: :data:`PIPELINE`, the passes in order, and :func:`optimise`, which runs it
and verifies the graph after every pass. The memory plan (:mod:`.memplan`) runs it on every loop
body it plans, so it lives below both the plan and the package.

May import: ``tapejit.core`` and the passes it lists.
"""

from __future__ import annotations

import time
from typing import Callable

from ..core.ir import Graph, verify
from . import cleanup, simplify

#: The pass pipeline, in order: (name, Graph -> (Graph, stats), when). ``when`` (given the
#: statistics so far) says whether the pass can change anything; a pass that cannot is skipped.
#: There is no CSE pass: nodes are hash-consed with commutative operands in canonical order
#: (:class:`tapejit.core.ir.Node`), so every rewrite re-interns and no graph holds two equal nodes.
PIPELINE: list[tuple[str, Callable[[Graph], tuple[Graph, dict]], Callable[[dict], bool]]] = [
    ("simplify", simplify.simplify, lambda stats: True),
    ("dce", cleanup.dce, lambda stats: True),
]


def optimise(g: Graph, pipeline=None) -> tuple[Graph, dict]:
    """Run ``pipeline`` (default :data:`PIPELINE`) on ``g``; returns the optimised graph and
    per-pass statistics: node counts before and after, seconds, and the pass's own figures."""
    stats: dict[str, dict] = {}
    for name, fn, *when in PIPELINE if pipeline is None else pipeline:
        before = len(g.nodes)
        if when and not when[0](stats):
            stats[name] = {
                "nodes_before": before,
                "nodes_after": before,
                "seconds": 0.0,
                "skipped": True,
            }
            continue
        t0 = time.perf_counter()
        g, s = fn(g)
        verify(g)
        stats[name] = {
            "nodes_before": before,
            "nodes_after": len(g.nodes),
            "seconds": time.perf_counter() - t0,
            **s,
        }
    return g, stats
