"""Graph rewriting: rebuild a graph bottom-up, letting a rule function replace each node.

Nodes are immutable and interned, so a rewrite never mutates anything: it rebuilds each node on
its (already rewritten) arguments, which re-interns it — equal subexpressions become one node
again (this is what makes CSE after rewrites free) — then applies the rule function until no
rule fires. The :class:`Rewriter` also owns the graph's inputs, so a rule can *bind* a new
captured constant (constant folding over captured arrays) and DCE can drop unused ones.
"""

from __future__ import annotations

import itertools
from typing import Callable

import numpy as np

from ..core import ops
from ..core.ir import NUMPY_DTYPE, Graph, Node, Type
from ..core.ops import Op

#: Nodes no rule rewrites.
_LEAVES = frozenset(ops.LEAF)

#: Most rule applications on one node before the rewriter stops (guards against rule cycles).
MAX_STEPS = 32

_fold_names = itertools.count()


class Rewriter:
    """Rebuild ``g`` node by node; see the module docstring.

    ``rule(node, rewriter) -> Node | None`` returns a replacement for ``node`` (whose args are
    already rewritten) or ``None``. Replacements must have the node's type.
    """

    def __init__(self, g: Graph):
        self.g = g
        self.inputs = list(g.inputs)
        self.kinds = list(g.kinds)
        self.bindings = dict(g.bindings)
        self._const_input = {
            id(n): i for i, (n, k) in enumerate(zip(g.inputs, g.kinds)) if k == "const"
        }

    # -- constants ----------------------------------------------------------------------------
    def constant(self, n: Node) -> np.ndarray | None:
        """The value of ``n`` if it is known at compile time (a ``const`` node or a captured
        array), else ``None``."""
        if n.op == Op.CONST:
            return np.full(n.shape, n.attrs[0], dtype=NUMPY_DTYPE[n.dtype])
        i = self._const_input.get(id(n))
        return None if i is None else self.bindings[i]

    def known(self, n: Node) -> bool:
        """Whether :meth:`constant` has a value for ``n`` (without building it)."""
        return n.op == Op.CONST or id(n) in self._const_input

    def bind(self, value: np.ndarray, t: Type) -> Node:
        """A new captured-constant input holding ``value`` (a C-contiguous copy of type ``t``)."""
        node = ops.input_node(len(self.inputs), f"fold{next(_fold_names)}", t)
        self._const_input[id(node)] = len(self.inputs)
        self.bindings[len(self.inputs)] = np.ascontiguousarray(value, dtype=NUMPY_DTYPE[t.dtype])
        self.inputs.append(node)
        self.kinds.append("const")
        return node

    # -- driver -------------------------------------------------------------------------------
    def run(self, rule: Callable[[Node, "Rewriter"], Node | None]) -> Graph:
        # id(node) -> (node, its rewritten form); the node is kept so that its id stays unique.
        memo: dict[int, tuple[Node, Node]] = {}

        def settle(n: Node) -> Node:
            hit = memo.get(id(n))
            if hit is not None:
                return hit[1]
            if n.op in _LEAVES:
                memo[id(n)] = (n, n)
                return n
            return finish(n, tuple([settle(a) for a in n.args]))  # recurses into new nodes only

        def finish(n: Node, args: tuple[Node, ...]) -> Node:
            m = n if args == n.args else Node(n.op, args, n.attrs, n.type)  # == is identity
            for _ in range(MAX_STEPS):
                r = rule(m, self)
                if r is None or r is m:
                    break
                if r.type != m.type:
                    raise AssertionError(f"rewrite of {m!r} changed its type to {r.type}")
                m = settle(r) if id(r) not in memo else memo[id(r)][1]
            memo[id(n)] = (n, m)
            memo.setdefault(id(m), (m, m))
            return m

        for n in self.g.nodes:  # topological: arguments are settled before their users
            if id(n) in memo:
                continue
            if n.op in _LEAVES:
                memo[id(n)] = (n, n)
            else:
                finish(n, tuple([memo[id(a)][1] for a in n.args]))
        outputs = tuple(settle(o) for o in self.g.outputs)
        guards = tuple((settle(c), e, w) for c, e, w in self.g.guards)
        return self.g.replace(
            inputs=tuple(self.inputs),
            kinds=tuple(self.kinds),
            outputs=outputs,
            bindings=self.bindings,
            guards=guards,
        )


def fit(x: Node, like: Node) -> Node:
    """``x`` broadcast to ``like``'s shape (``x`` is a scalar or already has that shape)."""
    return ops.broadcast_to(x, like.shape)
