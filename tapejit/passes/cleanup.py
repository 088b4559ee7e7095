"""Common-subexpression elimination and dead-node elimination: ``Graph -> Graph``.

CSE: nodes are interned, so rebuilding a graph merges every pair of equal nodes; what interning
alone misses is commutativity. :func:`cse` puts the operands of commutative ops in a canonical
order — by a structural digest of each operand's expression, so the order (and the generated
code, and the on-disk cache key) is the same in every run and process — and rebuilds, so
``a*b`` and ``b*a`` become one node.

DCE: nodes that no output depends on are never in a graph (``Graph.nodes`` is what the outputs
reach). What can go dead are *captured constants* no node reads any more (after folding):
:func:`dce` drops them and their bindings. Runtime arguments stay: they are the signature.
"""

from __future__ import annotations

import hashlib

from ..ir import Graph, Node
from .rewrite import Rewriter

#: Ops whose operands may be swapped.
COMMUTATIVE = frozenset({"add", "mul", "maximum", "minimum", "eq", "ne", "and", "or"})


def structural_key(n: Node, memo: dict[int, tuple[Node, bytes]]) -> bytes:
    """A digest of ``n``'s whole expression (op, attributes, type, operands' digests; inputs by
    position and name): equal for equal expressions, in every run and every process."""
    stack = [n]
    while stack:
        m = stack[-1]
        if id(m) in memo:
            stack.pop()
            continue
        todo = [a for a in m.args if id(a) not in memo]
        if todo:
            stack.extend(todo)
            continue
        stack.pop()
        h = hashlib.blake2b(digest_size=16)
        h.update(f"{m.op}|{m.attrs!r}|{m.type}|".encode())
        for a in m.args:
            h.update(memo[id(a)][1])
        memo[id(m)] = (m, h.digest())
    return memo[id(n)][1]


def cse(g: Graph) -> tuple[Graph, dict]:
    """Canonical operand order for commutative ops, then re-intern; see the module docstring."""
    keys: dict[int, tuple[Node, bytes]] = {}

    def rule(n: Node, rw: Rewriter) -> Node | None:
        if n.op in COMMUTATIVE:
            x, y = n.args
            if structural_key(y, keys) < structural_key(x, keys):
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
