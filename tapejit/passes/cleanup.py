"""Dead-node elimination: ``Graph -> Graph``.

There is no CSE pass: nodes are hash-consed, with the operands of commutative ops in a canonical
order (:class:`tapejit.core.ir.Node`), so every graph is already free of common subexpressions — each
rewrite re-interns what it rebuilds.

DCE: nodes that no output depends on are never in a graph (``Graph.nodes`` is what the outputs
reach). What can go dead are *captured constants* no node reads any more (after folding):
:func:`dce` drops them and their bindings. Runtime arguments stay: they are the signature.
"""

from __future__ import annotations

from ..core.ir import Graph


def dce(g: Graph) -> tuple[Graph, dict]:
    """Drop captured constants that no node uses; see the module docstring."""
    used = {id(n) for n in g.nodes}
    keep = [i for i, (n, k) in enumerate(zip(g.inputs, g.kinds)) if k != "const" or id(n) in used]
    dropped = [i for i in range(len(g.inputs)) if i not in keep]
    out = g.replace(
        inputs=tuple(g.inputs[i] for i in keep),
        kinds=tuple(g.kinds[i] for i in keep),
        bindings={j: g.bindings[i] for j, i in enumerate(keep) if g.kinds[i] == "const"},
    )
    freed = sum(g.bindings[i].nbytes for i in dropped)
    return out, {"constants_dropped": len(dropped), "constant_bytes_dropped": freed}
