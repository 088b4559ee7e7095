"""Graphviz DOT text for the IR stages: what ``tapejit dump ... --format dot`` prints.

Text generation only: this module imports nothing but :mod:`tapejit.core.ir` and the op names of
:mod:`tapejit.core.ops`, and needs no Graphviz to run (``--format svg|png`` hands the text to the
optional ``graphviz`` package).

:func:`graph_to_dot` draws a :class:`~tapejit.core.ir.Graph` (the ``trace``, ``grad`` and ``opt``
stages): one DOT node per IR node, labelled as the text form names it (``%k = op {attrs}``,
attributes shortened, then the type), an edge from each operand to its user, the graph's inputs
as ellipses, its results (``return k``) and guards as nodes of their own. A ``loop`` node's body
(and a ``while_loop``'s condition) is drawn as a cluster next to it, recursively, so nested loops
are nested clusters; a dashed edge leads from the loop node into it.

:func:`program_to_dot` draws a :class:`~tapejit.core.program.Program` (the ``plan`` stage) the same way,
and groups the nodes each loop kernel computes in a cluster::

    subgraph cluster_k3 { label="kernel 3: loop [100]"; ... }

(a kernel's straight-line ``pre`` nodes stay outside its cluster, marked ``kernel 3, before
the loop``; nodes that are views of others — no code — are dotted). A loop node's kernel holds
the clusters of the body's and the condition's own programs, whose kernels are clusters again,
so what was fused — at every depth — can be seen. Top-level kernel clusters are named
``cluster_k<j>``; nested ones ``cluster_<scope>_k<j>``. Node names are the text form's, so a
picture and ``tapejit dump --stage plan`` can be read side by side.
"""

from __future__ import annotations

from typing import Any

from ..core.ir import Graph, Node, _fmt_attr, format_graph, guard_size, outcomes_text
from ..core.program import Program, Slot
from ..core.ops import Op

#: Attribute text longer than this is cut (labels stay readable; the text form has it all).
ATTR_CHARS = 40

_HEADER = (
    '  graph [compound=true, rankdir=TB, fontname="monospace", fontsize=11, labelloc=t];',
    '  node [shape=box, fontname="monospace", fontsize=10];',
    "  edge [arrowsize=0.6];",
)


def quote(text: str) -> str:
    """``text`` as a DOT string literal (newlines become centred line breaks)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def loop_summary(spec: Any) -> str:
    """A loop node's attribute (:class:`tapejit.core.ops.LoopSpec`) in a few words: ``while`` for
    a loop with a condition, ``backward`` for the reverse-mode loop autodiff makes, the
    number of iterations (``<= n`` when it may stop early), the carries and scanned inputs."""
    n = getattr(spec, "max_steps", None)
    if n is None:
        return _short(_fmt_attr(spec))
    body = getattr(spec, "body", None)
    kind = []
    if getattr(spec, "cond", None) is not None:
        kind.append("while")
    if body is not None and str(getattr(body, "name", "")).endswith(".vjp"):
        kind.append("backward")
    bounded = getattr(spec, "cond", None) is not None or getattr(spec, "dynamic", False)
    parts = [f"{'<= ' if bounded else ''}{n} steps"]
    if getattr(spec, "reverse", False):
        parts.append("reversed")
    c = getattr(spec, "n_carry", 0)
    parts.append(f"{c} carr{'y' if c == 1 else 'ies'}")
    xs = getattr(spec, "n_xs", 0)
    if xs:
        parts.append(f"{xs} scanned")
    return " ".join([*kind, "loop"]) + ": " + ", ".join(parts)


def _short(text: str) -> str:
    return text if len(text) <= ATTR_CHARS else text[: ATTR_CHARS - 3] + "..."


def _attrs(n: Node) -> str:
    if not n.attrs:
        return ""
    if n.op == Op.LOOP:
        return " {" + loop_summary(n.attrs[0]) + "}"
    return " {" + _short(", ".join(_fmt_attr(a) for a in n.attrs)) + "}"


def slot_text(slot: Slot | None, names: dict[int, str]) -> str:
    """Where the memory plan puts a value, as the plan stage prints it (``""`` for none)."""
    if slot is None:
        return ""
    if slot.kind == "alias":
        of = names.get(id(slot.of), "?")
        return f"-> alias of {of}" + (f"+{slot.index}" if slot.index else "")
    return "-> " + {"arg": f"arg[{slot.index}]", "out": f"out[{slot.index}]"}.get(
        slot.kind, f"ws+{slot.index}"
    )


class _Writer:
    """Accumulates DOT lines; hands out unique node and cluster ids."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.count = 0
        self.depth = 1

    def new_id(self) -> str:
        self.count += 1
        return f"n{self.count}"

    def emit(self, line: str) -> None:
        self.lines.append("  " * self.depth + line)

    def open_cluster(self, name: str, label: str, style: str = "rounded") -> None:
        self.emit(f"subgraph {name} {{")
        self.depth += 1
        self.emit(f"label={quote(label)}; style={quote(style)};")

    def close(self) -> None:
        self.depth -= 1
        self.emit("}")


class _Scope:
    """One graph being drawn: DOT ids and text-form names of its nodes."""

    def __init__(self, w: _Writer, g: Graph, prefix: str) -> None:
        self.w, self.g, self.prefix = w, g, prefix
        self.names: dict[int, str] = {}
        format_graph(g, self.names)  # the text form's numbering (%k), so the two agree
        self.ids: dict[int, str] = {}
        self.loops = 0

    def node(self, n: Node, extra: str = "", **style: str) -> None:
        """Declare node ``n`` (once) in the current cluster."""
        if id(n) in self.ids:
            return
        i = self.ids[id(n)] = self.w.new_id()
        if n.op == Op.INPUT:
            pos = next((k for k, m in enumerate(self.g.inputs) if m is n), None)
            kind = self.g.kinds[pos] if pos is not None else "input"
            label = f"{self.names.get(id(n), '%?')}\n{n.type} {kind}"
            style = {"shape": "ellipse", **style}
        else:
            label = f"{self.names.get(id(n), '%?')} = {n.op}{_attrs(n)}\n{n.type}"
            if n.op == Op.CONST:
                style = {"style": "dashed", **style}
            elif n.op == Op.LOOP:
                style = {"peripheries": "2", **style}
        if extra:
            label += "\n" + extra
        attrs = "".join(f", {k}={quote(v)}" for k, v in style.items())
        self.w.emit(f"{i} [label={quote(label)}{attrs}];")

    def edges(self) -> None:
        """An edge from every operand to its user, the results and the guards."""
        w = self.w
        for n in self.g.nodes:
            for a in n.args:
                w.emit(f"{self.ids[id(a)]} -> {self.ids[id(n)]};")
        names = self.g.output_names
        for k, o in enumerate(self.g.outputs):
            i = w.new_id()
            what = f": {names[k]}" if k < len(names) and names[k] else ""
            w.emit(f"{i} [label={quote(f'return {k}{what}')}, shape=ellipse, style=bold];")
            w.emit(f"{self.ids[id(o)]} -> {i};")
        k = 1
        for c, expected, where in self.g.guards:
            i, size = w.new_id(), guard_size(c)
            name = f"guard {k}" if c.shape == () else f"guards {k}-{k + size - 1}"
            k += size
            label = quote(f"{name}: == {outcomes_text(expected)}" + "\n" + str(where))
            w.emit(f"{i} [label={label}, shape=diamond];")
            w.emit(f"{self.ids[id(c)]} -> {i};")

    def cluster_name(self, what: str) -> str:
        self.loops += 1
        return f"cluster_{self.prefix}{what}{self.loops}"


def _sub_entry(sub: _Scope) -> str | None:
    """The DOT id a dashed edge into a sub-graph's cluster points at (its first input)."""
    for n in (*sub.g.inputs, *sub.g.nodes):
        if id(n) in sub.ids:
            return sub.ids[id(n)]
    return None


def _loop_link(w: _Writer, loop_id: str, sub: _Scope, cluster: str, label: str) -> None:
    target = _sub_entry(sub)
    if target is not None:
        w.emit(
            f"{loop_id} -> {target} [style=dashed, lhead={cluster}, label={quote(label)}, "
            "fontsize=9];"
        )


def _draw_graph(w: _Writer, g: Graph, prefix: str) -> _Scope:
    """Every node of ``g`` (and its loops' sub-graphs, as clusters) into the current scope."""
    s = _Scope(w, g, prefix)
    for n in g.inputs:
        s.node(n)
    for n in g.nodes:
        s.node(n)
        if n.op == Op.LOOP:
            _draw_loop_graphs(w, s, n)
    s.edges()
    return s


def _draw_loop_graphs(w: _Writer, s: _Scope, n: Node) -> None:
    spec = n.attrs[0] if n.attrs else None
    name = s.names.get(id(n), "%?")
    for what, sub in (("body", getattr(spec, "body", None)), ("cond", getattr(spec, "cond", None))):
        if not isinstance(sub, Graph):
            continue
        cluster = s.cluster_name(what)
        title = "body" if what == "body" else "condition"
        w.open_cluster(cluster, f"{title} of {name}: {sub.name}", "dashed")
        inner = _draw_graph(w, sub, cluster[len("cluster_") :] + "_")
        w.close()
        _loop_link(w, s.ids[id(n)], inner, cluster, title)


def _draw_program(w: _Writer, p: Program, prefix: str) -> _Scope:
    """The nodes of ``p``'s graph, each loop kernel's in a cluster, loop nodes' body programs
    as clusters inside their kernel's."""
    s = _Scope(w, p.graph, prefix)
    names = s.names
    for n in p.graph.inputs:
        s.node(n, slot_text(p.slots.get(id(n)), names))
    for j, k in enumerate(p.kernels):
        for n in k.pre:
            extra = " ".join(t for t in (slot_text(p.slots.get(id(n)), names),) if t)
            s.node(n, f"kernel {j}, before the loop" + (f"\n{extra}" if extra else ""))
        if not k.is_loop:
            continue
        if k.body:
            label = f"kernel {j}: loop [{','.join(map(str, k.space or ()))}]"
            members = k.body
        elif k.op.op == Op.LOOP:
            label = f"kernel {j}: {names.get(id(k.op), '%?')} = {loop_summary(k.op.attrs[0])}"
            members = (k.op,)
        else:
            label = f"kernel {j}: {k.op.op} (own loop nest)"
            members = (k.op,)
        w.open_cluster(f"cluster_{prefix}k{j}", label)
        for n in members:
            s.node(n, slot_text(p.slots.get(id(n)), names))
            if n.op == Op.LOOP and id(n) in p.loops:
                _draw_loop_programs(w, s, p, n)
        w.close()
    for n in p.graph.nodes:  # views (aliases: no code) and anything not scheduled
        slot = p.slots.get(id(n))
        style = {"style": "dotted"} if slot is not None and slot.kind == "alias" else {}
        s.node(n, slot_text(slot, names), **style)
    s.edges()
    for i, n in p.copies:
        c = w.new_id()
        w.emit(f"{c} [label={quote(f'copy -> out[{i}]')}, shape=plaintext];")
        w.emit(f"{s.ids[id(n)]} -> {c} [style=dotted];")
    return s


def _draw_loop_programs(w: _Writer, s: _Scope, p: Program, n: Node) -> None:
    lp = p.loops[id(n)]
    name = s.names.get(id(n), "%?")
    for what, sub in (("body", lp.body), ("cond", lp.cond)):
        if sub is None:
            continue
        cluster = s.cluster_name(what)
        title = "body" if what == "body" else "condition"
        w.open_cluster(
            cluster,
            f"{title} of {name}: program {sub.graph.name}, workspace {sub.workspace_bytes} bytes",
            "dashed",
        )
        inner = _draw_program(w, sub, cluster[len("cluster_") :] + "_")
        w.close()
        _loop_link(w, s.ids[id(n)], inner, cluster, title)


def _document(title: str, draw) -> str:
    w = _Writer()
    draw(w)
    head = [f"digraph {quote(title)} {{", *_HEADER, f"  label={quote(title)};"]
    return "\n".join([*head, *w.lines, "}"])


def graph_to_dot(g: Graph, title: str | None = None) -> str:
    """DOT text of graph ``g`` (see the module docstring); ``title`` labels the picture."""
    return _document(title or g.name, lambda w: _draw_graph(w, g, ""))


def program_to_dot(p: Program, title: str | None = None) -> str:
    """DOT text of program ``p``: the graph, each loop kernel a ``cluster_k<j>``."""
    loops = sum(k.is_loop for k in p.kernels)
    default = f"{p.graph.name} plan: {loops} loop kernels, workspace {p.workspace_bytes} bytes"
    return _document(title or default, lambda w: _draw_program(w, p, ""))


def to_dot(stage_object: Graph | Program, title: str | None = None) -> str:
    """DOT text of a pipeline stage's object: a graph (trace, grad, opt) or a program (plan)."""
    if isinstance(stage_object, Program):
        return program_to_dot(stage_object, title)
    if isinstance(stage_object, Graph):
        return graph_to_dot(stage_object, title)
    raise TypeError(f"no DOT form for {type(stage_object).__name__}")
