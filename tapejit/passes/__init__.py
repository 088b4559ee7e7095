"""Optimisation passes over the joint forward+backward graph, and the pipeline that runs them.

Each pass is a pure function ``Graph -> (Graph, stats)`` that never mutates its input (nodes are
immutable; a pass rebuilds). :data:`PIPELINE` lists them in order; :func:`optimise` runs it and
verifies the graph after every pass (both in :mod:`.pipeline`, which the memory plan also runs
on every loop body). The last stage, :func:`plan` (:mod:`.memplan`, on top of :mod:`.fusion`),
turns the optimised graph into a :class:`~tapejit.core.program.Program`: loop kernels, schedule,
liveness and the memory plan. Re-rolling, the fallback for loops not read from source, is the
subpackage :mod:`.reroll`.

May import: ``tapejit.core``, ``tapejit.ad``, ``tapejit.progress``.
"""

from __future__ import annotations

from ..core.ir import Graph, verify
from . import cleanup, columns, fusion, memplan, simplify
from .reroll import driver as reroll
from .memplan import plan
from .pipeline import PIPELINE, optimise


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
