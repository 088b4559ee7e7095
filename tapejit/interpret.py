"""A numpy interpreter of the IR: the test oracle.

``evaluate(graph, args)`` runs every node with its op's numpy reference implementation
(:mod:`tapejit.ops`) in float64. It shares no code with ``codegen/``, so comparing the two checks
the lowering, and comparing a graph before and after a pass checks the pass.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from . import ops
from .ir import NUMPY_DTYPE, Graph, Program


def evaluate(graph: Graph | Program, args: Sequence[Any]) -> list[np.ndarray]:
    """Outputs of ``graph`` for the runtime arguments ``args`` (one per non-const input, in order).

    Const inputs take their bound (snapshotted) arrays. Returns a list of numpy values (0-d
    arrays for scalars). Raises ``ValueError`` for a wrong argument count or shape.
    """
    if isinstance(graph, Program):
        graph = graph.graph
    runtime = [i for i, k in enumerate(graph.kinds) if k != "const"]
    if len(args) != len(runtime):
        raise ValueError(f"{graph.name} takes {len(runtime)} arguments, got {len(args)}")
    env: dict[int, Any] = {}
    for i, a in zip(runtime, args):
        node = graph.inputs[i]
        value = np.asarray(a, dtype=NUMPY_DTYPE[node.dtype])
        if value.shape != node.shape:
            raise ValueError(f"argument {i}: expected shape {node.shape}, got {value.shape}")
        env[id(node)] = value
    for i, k in enumerate(graph.kinds):
        if k == "const":
            env[id(graph.inputs[i])] = graph.bindings[i]
    with np.errstate(all="ignore"):
        for n in graph.nodes:
            if n.op == "input":
                continue
            if n.op == "const":
                env[id(n)] = np.full(n.shape, n.attrs[0], dtype=NUMPY_DTYPE[n.dtype])
            else:
                value = ops.OPS[n.op].ref(n.attrs, *(env[id(a)] for a in n.args))
                env[id(n)] = np.asarray(value, dtype=NUMPY_DTYPE[n.dtype])
    return [np.array(env[id(o)]) for o in graph.outputs]
