"""Common-subexpression elimination and dead-node elimination: ``Graph -> Graph``.

CSE: nodes are interned, so rebuilding a graph merges every pair of equal nodes; what interning
alone misses is commutativity. :func:`cse` puts the operands of commutative ops in a canonical
order (by first appearance in topological order) and rebuilds, so ``a*b`` and ``b*a`` become one
node.

DCE: nodes that no output depends on are never in a graph (``Graph.nodes`` is what the outputs
reach). What can go dead are *captured constants* no node reads any more (after folding):
:func:`dce` drops them and their bindings. Runtime arguments stay: they are the signature.
"""

from __future__ import annotations

from ..ir import Graph, Node
from .rewrite import Rewriter

#: Ops whose operands may be swapped.
COMMUTATIVE = frozenset({"add", "mul", "maximum", "minimum", "eq", "ne", "and", "or"})


def cse(g: Graph) -> tuple[Graph, dict]:
    """Canonical operand order for commutative ops, then re-intern; see the module docstring."""
    rank: dict[int, int] = {}

    def rule(n: Node, rw: Rewriter) -> Node | None:
        for a in n.args:
            rank.setdefault(id(a), len(rank))
        rank.setdefault(id(n), len(rank))
        if n.op in COMMUTATIVE:
            x, y = n.args
            if rank[id(y)] < rank[id(x)]:
                return Node(n.op, (y, x), n.attrs, n.type)
        return None

    before = len(g.nodes)
    out = Rewriter(g).run(rule)
    return out, {"merged": before - len(out.nodes)}


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
