"""Schedule and memory plan: ``Graph -> Program``.

The schedule is the graph's topological order. Every array value gets a :class:`~tapejit.ir.Slot`:

* inputs read the caller's arrays in place (``arg``);
* ``reshape`` of an array is free: it *aliases* its operand (all buffers are C-contiguous);
* ``scatter_add`` updates its accumulator *in place* when the accumulator dies there (its only
  user, not an output, and in the workspace) — this keeps the reverse of an element loop O(n);
* an output that would otherwise take a workspace buffer is computed straight into the caller's
  output array (``out``); other outputs are copied at the end;
* everything else takes its own 64-byte-aligned buffer in the one workspace, whose size is a
  compile-time constant. (Liveness-based reuse of workspace buffers is a later pass.)

Scalars live in registers and get no slot.
"""

from __future__ import annotations

from ..ir import Graph, Node, Program, Slot

ALIGN = 64


def _owned_root(n: Node, slots: dict, users: dict, outputs: set) -> Node | None:
    """The workspace node whose buffer ``n`` lives in, if every value on the way (``n``, its
    alias chain and the root) has exactly one user and is not an output; else ``None``.
    Such a buffer can be updated in place: nothing else will read it."""
    while True:
        s = slots.get(id(n))
        if s is None or len(users.get(id(n), ())) != 1 or id(n) in outputs:
            return None
        if s.kind == "ws":
            return n
        if s.kind != "alias":
            return None
        n = s.of


def plan(g: Graph) -> Program:
    """Schedule ``g`` and assign every array value a slot; see the module docstring."""
    steps = tuple(n for n in g.nodes if n.op != "input")
    users = g.users()
    outputs = {id(o) for o in g.outputs}
    slots: dict[int, Slot] = {}
    for i, n in enumerate(g.inputs):
        if n.shape != ():
            slots[id(n)] = Slot("arg", i)
    for n in steps:
        if n.shape == ():
            continue
        if n.op == "reshape" and n.args[0].shape != ():
            slots[id(n)] = Slot("alias", of=n.args[0])
            continue
        if n.op == "scatter_add" and _owned_root(n.args[0], slots, users, outputs) is not None:
            slots[id(n)] = Slot("alias", of=n.args[0])
            continue
        slots[id(n)] = Slot("ws")
    copies = []
    for k, o in enumerate(g.outputs):
        s = slots.get(id(o))
        if s is not None and s.kind == "ws":
            slots[id(o)] = Slot("out", k)
            continue
        root = None
        if s is not None and s.kind == "alias" and o.op == "scatter_add":
            root = _owned_root(s.of, slots, users, outputs)
        if root is not None:
            slots[id(root)] = Slot("out", k)  # the in-place chain computes straight into out
        elif o.shape != ():
            copies.append((k, o))
    offset = 0
    for n in steps:
        s = slots.get(id(n))
        if s is not None and s.kind == "ws":
            slots[id(n)] = Slot("ws", offset)
            offset += -(-n.type.nbytes // ALIGN) * ALIGN
    return Program(g, steps, slots, tuple(copies), offset, {"workspace_bytes": offset})
