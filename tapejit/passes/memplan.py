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

from ..ir import Graph, Program, Slot

ALIGN = 64


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
        if n.op == "scatter_add":
            acc = n.args[0]
            s = slots.get(id(acc))
            if s is not None and s.kind == "ws" and len(users[id(acc)]) == 1 and id(acc) not in outputs:
                slots[id(n)] = Slot("alias", of=acc)
                continue
        slots[id(n)] = Slot("ws")
    copies = []
    for k, o in enumerate(g.outputs):
        s = slots.get(id(o))
        if s is not None and s.kind == "ws":
            slots[id(o)] = Slot("out", k)
        elif o.shape != ():
            copies.append((k, o))
    offset = 0
    for n in steps:
        s = slots.get(id(n))
        if s is not None and s.kind == "ws":
            slots[id(n)] = Slot("ws", offset)
            offset += -(-n.type.nbytes // ALIGN) * ALIGN
    return Program(g, steps, slots, tuple(copies), offset, {"workspace_bytes": offset})
