"""Optimisation passes over the joint forward+backward graph, and the pipeline that runs them.

Each pass is a pure function ``Graph -> (Graph, stats)`` that never mutates its input (nodes are
immutable; a pass rebuilds). :data:`PIPELINE` lists them in order; :func:`optimise` runs it and
verifies the graph after every pass. The last stage, :func:`plan` (:mod:`.memplan`, on top of
:mod:`.fusion`), turns the optimised graph into a :class:`~tapejit.core.ir.Program`: loop kernels,
schedule, liveness and the memory plan. Re-rolling, the fallback for loops not read from
source, is the subpackage :mod:`.reroll`.

May import: ``tapejit.core``, ``tapejit.ad``, ``tapejit.progress``.
"""

from __future__ import annotations

import time
from typing import Callable

from ..core.ir import Graph, verify
from . import cleanup, columns, fusion, memplan, simplify
from .reroll import driver as reroll
from .memplan import plan

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


def trace_passes(g: Graph) -> tuple[Graph, dict]:
    """The passes on the trace itself, before reverse mode (so they are part of the trace
    stage: printed by ``tapejit dump --stage trace`` and keyed by the on-disk cache): Python
    element loops re-rolled (:mod:`.reroll`), then sums over small trailing axes split into
    columns (:mod:`.columns`). Returns the graph and ``{"reroll": stats, "columns": stats}``."""
    g, rerolled = reroll.maybe_reroll(g)
    g, split = columns.split_columns(g)
    if split["reductions"]:
        verify(g)
    return g, {"reroll": rerolled, "columns": split}


__all__ = ["PIPELINE", "optimise", "plan", "trace_passes", "cleanup", "columns", "fusion",
           "memplan", "reroll", "simplify"]  # fmt: skip
