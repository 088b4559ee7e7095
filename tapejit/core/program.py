"""The scheduled, memory-planned form of a graph that codegen lowers: a :class:`Program` is the
graph, its kernels in order (:class:`Kernel`: straight-line code and at most one loop), where each
array value lives at run time (:class:`Slot`), the workspace size, and the plans of loop nodes'
bodies (:class:`LoopPlan`). Built by :func:`tapejit.passes.memplan.plan`.

May import: :mod:`tapejit.core.ir`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .ir import Graph, Node, format_graph


@dataclass(frozen=True)
class Slot:
    """Where an array value lives at run time.

    kind ``arg``: the caller's i-th input array; ``out``: the caller's i-th output array;
    ``ws``: ``index`` bytes into the workspace; ``alias``: the memory of ``of`` (a node) from
    element ``index`` on (reshapes and contiguous slices).
    """

    kind: str
    index: int = 0
    of: Node | None = None


@dataclass(frozen=True)
class Kernel:
    """One step of a program: straight-line code, then at most one loop.

    ``pre``: nodes computed once, in order, before the loop — scalars (in registers) and *point*
    ops that touch O(1) elements of an array in memory (``x[i]``, ``acc[i] += u``).
    ``space``: the shape the loop iterates over, or ``None``. ``body``: the nodes computed per
    iteration of one fused loop, in order — elementwise ops, gathers from arrays in memory
    (``index``/``transpose``/``broadcast_to``) and full reductions into scalars; a body node with
    a slot is stored at the iteration's element, the others stay in registers.
    ``op``: instead of a fused body, one node with a loop nest of its own (``matmul``, a partial
    reduction, a scatter of an array).
    """

    pre: tuple[Node, ...] = ()
    space: tuple[int, ...] | None = None
    body: tuple[Node, ...] = ()
    op: Node | None = None

    @property
    def is_loop(self) -> bool:
        return bool(self.body) or self.op is not None


@dataclass(frozen=True)
class LoopPlan:
    """How a ``loop`` node runs: its body (and condition) as programs of their own, and where its
    scratch lives in the enclosing workspace (byte offsets): ``carry_b`` holds the next carries
    (one block per carry), ``body_ws``/``cond_ws`` the sub-programs' workspaces, ``cond_out``
    the condition's result (one f64), ``acc_b`` the body's output for each accumulated y (one
    block per entry of ``LoopSpec.accumulate``, in its order), added to its row after the call."""

    body: "Program"
    cond: "Program | None"
    carry_b: tuple[int, ...]
    body_ws: int
    cond_ws: int
    cond_out: int
    acc_b: tuple[int, ...] = ()


@dataclass(frozen=True)
class Program:
    """A graph with a schedule and a memory plan.

    ``kernels`` is the execution order (see :class:`Kernel`). ``slots`` maps ``id(node)`` to a
    :class:`Slot` for every array value that lives in memory; values without a slot live in
    registers (scalars, and array values used only inside the loop that computes them).
    ``copies`` lists ``(output index, node)`` pairs copied into the caller's output array at the
    end (an output that is an input, or a node returned twice). ``workspace_bytes`` is the
    compile-time size of the one workspace.
    """

    graph: Graph
    kernels: tuple[Kernel, ...]
    slots: dict[int, Slot]
    copies: tuple[tuple[int, Node], ...]
    workspace_bytes: int
    stats: dict[str, Any] = field(default_factory=dict, compare=False)
    #: ``id(loop node) -> LoopPlan`` for every ``loop`` node of the graph.
    loops: dict[int, LoopPlan] = field(default_factory=dict, compare=False)
    #: output positions computed in place in a donated input's buffer (a loop body's array
    #: carry updated in place, :func:`tapejit.passes.memplan.plan`): the caller passes the same
    #: buffer as that input and output, and nothing is written for the output itself
    donated: tuple[int, ...] = ()

    def __str__(self) -> str:
        names: dict[int, str] = {}
        text = format_graph(self.graph, names)
        lines = [
            f"program {self.graph.name}: {sum(k.is_loop for k in self.kernels)} loop kernels,"
            f" workspace {self.workspace_bytes} bytes"
        ]

        def where(n: Node) -> str:
            s = self.slots.get(id(n))
            if s is None:
                return ""
            return (
                " -> "
                + {
                    "arg": f"arg[{s.index}]",
                    "out": f"out[{s.index}]",
                    "ws": f"ws+{s.index}",
                    "alias": f"alias of {names.get(id(s.of), '?')}"
                    + (f"+{s.index}" if s.index else ""),
                }[s.kind]
            )

        for j, k in enumerate(self.kernels):
            lines.append(f"  kernel {j}:")
            for n in k.pre:
                lines.append(f"    {names[id(n)]} = {n.op} {str(n.type)}{where(n)}")
            if k.body:
                shape = ",".join(map(str, k.space))
                lines.append(f"    loop [{shape}]:")
                for n in k.body:
                    lines.append(f"      {names[id(n)]} = {n.op} {str(n.type)}{where(n)}")
            if k.op is not None:
                lines.append(
                    f"    {names[id(k.op)]} = {k.op.op} {str(k.op.type)}{where(k.op)} (own loop nest)"
                )
        for i, n in self.copies:
            lines.append(f"  copy {names[id(n)]} -> out[{i}]")
        for n in self.graph.nodes:
            lp = self.loops.get(id(n))
            if lp is not None:
                sub = str(lp.body).replace("\n", "\n    ")
                lines.append(
                    f"  body of {names[id(n)]} (scratch at ws+{lp.carry_b[0] if lp.carry_b else lp.body_ws}):\n    {sub}"
                )
                if lp.cond is not None:
                    sub = str(lp.cond).replace("\n", "\n    ")
                    lines.append(f"  condition of {names[id(n)]}:\n    {sub}")
        for n in self.graph.nodes:
            s = self.slots.get(id(n))
            if s is not None and s.kind == "alias":
                lines.append(f"  {names[id(n)]} = {n.op} {n.type}{where(n)}")
        return text + "\n" + "\n".join(lines)
