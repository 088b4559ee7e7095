"""Loop fusion and adjoint fusion: group the nodes of a graph into loop kernels.

The joint forward+backward graph is scheduled as one sequence of :class:`~tapejit.core.program.Kernel`\\ s
(straight-line code, then at most one loop). There is no separate "backward pass": a backward
elementwise op lands in the earliest loop over its iteration space whose inputs are ready, which
is often a forward loop — that is *adjoint fusion*, and it falls out of the same rule as ordinary
loop fusion.

Placement (greedy, in topological order, each node as early as its operands allow):

* a scalar, or a *point* op touching O(1) elements (``x[i]``, ``acc[i] += u``), goes into the
  straight-line code before the loop of the first kernel where its operands are ready;
* an elementwise op, a gather (``index``/``transpose``/``broadcast_to``, ``take`` at a table's
  positions) or a full reduction goes
  into the first loop over its iteration space at or after the kernel where its operands are
  ready. An operand computed in the same loop is read in the same iteration, so the chain needs
  no temporary; a reduction's result, or a gathered operand, is ready only after its loop;
* a ``window_add`` (a *sink*) goes into the first loop over its updates' positions (and
  their ragged layout) at or after the kernel where its accumulator is complete: each
  iteration adds its update into the result, ready after the loop — the scatter-adds of a
  pair loop's cotangents in the pass that computes them, no per-pair array;
* other ops (``matmul``, partial reductions, scatters of arrays) get a loop nest of their own;
* ``reshape`` of an array, and indexing that selects one contiguous block (``p[a:b]``,
  ``m[i]``), compute nothing: they alias their operand (a view at an element offset).

Reuse or recompute: a value computed in one loop and read elementwise by a later loop is either
kept in memory (a store, later a load, a buffer) or recomputed in the later loop. The cost rule:
recompute when the summed cost (``tapejit.core.ops.OpDef.cost``) of the nodes to recompute is at most
:data:`RECOMPUTE_BUDGET` (the cost of the store and the reload, in units of an add). So
``x + 1`` is recomputed and ``exp(...)`` is reused — for any op, not as a special case. The costs
are rough reciprocal-throughput ratios of a vectorised loop on x86-64 (Agner Fog's instruction
tables for add/mul/div/sqrt; a polynomial exp/log is ~15-25 such ops).

A value must live in memory (be *materialised*) when it is an output, is read by a gather, a point
op, an own-loop op or a reshape, or is read by a loop other than its own and not recomputed.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from ..core import ops
from ..core.ir import DTYPES, Graph, Node
from ..core.program import Kernel
from ..core.ops import Op

#: Recompute a value in a later loop when its recomputation costs at most this much.
RECOMPUTE_BUDGET = 2

#: Whether a ``window_add`` is a *sink* of the loop over its updates' positions (each
#: iteration adds its update into the result, which is ready after the loop), rather than a
#: loop of its own reading the updates back from memory.
FUSE_SINKS = True

#: Most nodes one fused loop takes. Independent work over one space (say, the weight slices of
#: every layer) would otherwise pile into one loop whose size grows with the model; capped, it
#: becomes a run of identical loops that codegen emits once (compile time stays linear).
MAX_BODY = 64

_EW_GROUPS = ("unary", "binary", "compare", "logical", "select", "cast")
#: Ops that can be views of their operand's buffer (see :func:`classify`: ``alias``).
_ALIASES = (Op.RESHAPE, Op.INDEX)


def op_cost(n: Node) -> int:
    return 0 if n.op == Op.CONST else ops.OPS[n.op].cost


def classify(n: Node) -> str:
    """How ``n`` is scheduled: ``leaf``, ``scalar``, ``point``, ``body``, ``gather``,
    ``reduce``, ``sink``, ``alias`` or ``op`` (see the module docstring). Nodes are immutable, so the
    answer is kept on the node (its ``_sched`` slot)."""
    c = n._sched
    if c is None:
        c = _classify(n)
        object.__setattr__(n, "_sched", c)
    return c


def _classify(n: Node) -> str:
    if n.op in ops.LEAF:
        return "leaf"
    group = ops.OPS[n.op].group
    if group in _EW_GROUPS:
        return "scalar" if n.shape == () else "body"
    if n.op == Op.RESHAPE:
        x = n.args[0]
        if x.shape == ():
            return "body"  # a scalar viewed as a 1-element array
        return "point" if n.shape == () else "alias"
    if n.op == Op.BROADCAST_TO:
        return "body" if n.args[0].shape == () else "gather"
    if (
        n.op == Op.INDEX
        and n.shape != ()
        and ops.index_view_offset(n.args[0].shape, n.attrs) is not None
    ):
        return "alias"  # a contiguous block: a view at an offset, no copy
    if n.op == Op.WINDOW_ADD and FUSE_SINKS and n.args[1].shape != ():
        return "sink"  # its updates added into its result in the loop that computes them
    if n.op in (Op.INDEX, Op.TRANSPOSE, Op.WINDOW):
        return "point" if n.shape == () else "gather"
    if n.op == Op.TAKE:  # rows at a table's positions, read in the loop that uses them
        return "gather"
    if group == "reduce":
        return "reduce" if n.shape == () else "op"
    if n.op in ops.SCATTER:
        return "point" if n.args[1].shape == () else "op"
    return "op"


def space_of(n: Node, cls: str) -> tuple[int, ...]:
    if cls == "sink":
        return n.args[1].shape  # the updates' positions
    return n.args[0].shape if cls == "reduce" else n.shape


def reads_elementwise(user_cls: str) -> bool:
    """Whether a node of this class reads its array operands at its own loop index."""
    return user_cls in ("body", "reduce")


def alias_offset(n: Node) -> int:
    """Element offset of alias ``n`` in its operand's buffer (0 for a reshape)."""
    return ops.index_view_offset(n.args[0].shape, n.attrs) if n.op == Op.INDEX else 0


def alias_root(n: Node) -> Node:
    """The node whose buffer ``n`` lives in (through reshapes and contiguous slices)."""
    while n.op in _ALIASES and classify(n) == "alias":
        n = n.args[0]
    return n


@dataclass
class _Kernel:
    pre: list[Node] = field(default_factory=list)
    space: tuple[int, ...] | None = None
    body: list[Node] = field(default_factory=list)
    op: Node | None = None


@dataclass
class Schedule:
    """The result of fusion: kernels, where each node is computed, and what must be in memory."""

    graph: Graph
    kernels: tuple[Kernel, ...]
    home: dict[int, tuple[int, str]]  # id(node) -> (kernel index, "pre" | "body" | "op")
    materialised: set[int]  # ids of (non-input) nodes that must live in memory
    stats: dict


def _must_materialise(g: Graph, cls: dict[int, str]) -> set[int]:
    must: set[int] = set()
    for o in g.outputs:
        if o.shape != ():
            must.add(id(alias_root(o)))
    for c, _, _ in g.guards:  # a vector of guards: checked element by element in memory
        if c.shape != ():
            must.add(id(alias_root(c)))
    for n in g.nodes:
        c = cls[id(n)]
        if c in ("leaf", "scalar", "body", "reduce"):
            continue
        if c == "sink":  # the accumulator is copied (or updated in place) before the loop;
            if n.args[0].op != Op.CONST:  # a constant one is a fill of the result there
                must.add(id(alias_root(n.args[0])))
            continue
        for k, a in enumerate(n.args):
            if k == 0 and n.op in ops.SCATTER and a.op == Op.CONST:
                continue  # a constant written into: codegen fills the result around the write
            if a.shape != ():
                must.add(id(alias_root(a)))
    return must


def fuse(g: Graph) -> Schedule:
    """Place every node of ``g`` in a kernel; see the module docstring."""
    nodes = g.nodes
    order = {id(n): i for i, n in enumerate(nodes)}
    cls = {id(n): classify(n) for n in nodes}
    must = _must_materialise(g, cls)
    kernels: list[_Kernel] = []
    home: dict[int, tuple[int, str]] = {}

    def avail(a: Node, elementwise: bool) -> int:
        """First kernel index at which a user may read ``a``."""
        root = alias_root(a)
        if root is not a:
            elementwise = False  # a view is read from memory, after the loop that stores it
        a = root
        if id(a) not in home:
            return 0  # an input or an immediate constant
        k, stage = home[id(a)]
        if stage == "pre":
            return k
        if stage == "body" and elementwise and cls[id(a)] in ("body", "gather"):
            return k
        return k + 1

    # Where a node may still go, kept sorted so that placement is a binary search rather than a
    # scan over every kernel: ``free`` holds the kernels without a loop yet, ``open_[space]`` the
    # kernels with a loop over ``space`` and fewer than MAX_BODY nodes.
    free: list[int] = []
    open_: dict[tuple[int, ...], list[int]] = {}
    layouts: dict[int, tuple] = {}  # kernel -> the ragged layout of its windows

    def kernel(k: int) -> _Kernel:
        while len(kernels) <= k:
            free.append(len(kernels))
            kernels.append(_Kernel())
        return kernels[k]

    def first(sorted_ks: list[int], k: int) -> int:
        i = bisect.bisect_left(sorted_ks, k)
        return sorted_ks[i] if i < len(sorted_ks) else len(kernels)

    def take(sorted_ks: list[int], k: int) -> None:
        i = bisect.bisect_left(sorted_ks, k)
        if i < len(sorted_ks) and sorted_ks[i] == k:
            del sorted_ks[i]

    for n in nodes:
        c = cls[id(n)]
        if c == "alias" or (c == "leaf" and not (n.op == Op.CONST and id(n) in must)):
            continue
        if c == "leaf":
            c = cls[id(n)] = "body"  # a constant fill that must be in memory: a store loop
        ew = reads_elementwise(c)
        if c == "sink":  # the accumulator complete before the loop, the updates in it
            ready = max(avail(n.args[0], False), avail(n.args[1], True))
        else:
            ready = max((avail(a, ew and a.shape != ()) for a in n.args), default=0)
        if c in ("scalar", "point"):
            kernel(ready).pre.append(n)
            home[id(n)] = (ready, "pre")
            continue
        if c == "op":  # the first kernel at or after `ready` without a loop
            k = first(free, ready)
            kernel(k).op = n
            take(free, k)
            home[id(n)] = (k, "op")
            continue
        # the first kernel at or after `ready` that has no loop or an open loop over `space`
        # (a ragged window: none with a window over another layout; codegen iterates a loop
        # with windows as a nest over their layout's rows, codegen/lower/window.py)
        space = space_of(n, c)
        same = open_.setdefault(space, [])
        if n.op in (Op.WINDOW, Op.WINDOW_ADD):
            layout = n.attrs[:3]
            i = bisect.bisect_left(same, ready)
            while i < len(same) and layouts.get(same[i], layout) != layout:
                i += 1
            k = min(first(free, ready), same[i] if i < len(same) else len(kernels))
            layouts[k] = layout
        else:
            k = min(first(free, ready), first(same, ready))
        kern = kernel(k)
        if not kern.body:
            take(free, k)
            bisect.insort(same, k)
        kern.space = space
        kern.body.append(n)
        if len(kern.body) >= MAX_BODY:
            take(same, k)
        home[id(n)] = (k, "body")

    # Reuse or recompute (see the module docstring), then what must live in memory.
    members = [set(map(id, k.body)) for k in kernels]
    recomputed = 0
    for k, kern in enumerate(kernels):
        for n in list(kern.body):
            if not reads_elementwise(cls[id(n)]):
                continue
            for a in n.args:
                if a.shape == () or id(a) in members[k] or cls[id(a)] not in ("body", "gather"):
                    continue
                clone = _recompute_set(a, home, must, cls)
                if clone is not None and not _layouts_agree(kern.body, clone):
                    clone = None
                if clone is not None:
                    for c in clone:
                        if id(c) not in members[k]:
                            members[k].add(id(c))
                            kern.body.append(c)
                            recomputed += 1
        kern.body.sort(key=lambda x: order[id(x)])
        kern.body = canonical_body(kern.body)
    materialised = set(must)
    for k, kern in enumerate(kernels):
        for n in kern.body:
            for a in n.args:
                if a.shape != () and id(a) not in members[k] and cls[id(a)] != "leaf":
                    materialised.add(id(alias_root(a)))
    materialised = {i for i in materialised if cls.get(i) != "leaf" or i in home}
    frozen = tuple(
        Kernel(tuple(k.pre), k.space if k.body else None, tuple(k.body), k.op) for k in kernels
    )
    stats = {"kernels": sum(k.is_loop for k in frozen), "recomputed": recomputed}
    return Schedule(g, frozen, home, materialised, stats)


def _layouts_agree(body, clone) -> bool:
    """Whether recomputing ``clone`` in a loop with ``body`` keeps one ragged layout (the
    ``(T, L0, dL)`` of its windows, :mod:`tapejit.core.ops_window`) in it."""
    got = {n.attrs[:3] for n in (*body, *clone) if n.op in (Op.WINDOW, Op.WINDOW_ADD)}
    return len(got) <= 1


def _recompute_set(a: Node, home, must, cls) -> list[Node] | None:
    """The nodes to recompute ``a`` in a later loop if that is within budget, else ``None``."""
    k0 = home[id(a)][0]
    todo, seen, out, cost = [a], set(), [], 0
    while todo:
        n = todo.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if (
            n.shape == ()
            or home.get(id(n)) != (k0, "body")
            or cls[id(n)] not in ("body", "gather")
            or (id(n) in must and n is not a)
        ):
            continue  # available to the later loop as it is: a scalar, input or value in memory
        if id(n) in must:
            return None
        cost += op_cost(n)
        if cost > RECOMPUTE_BUDGET:
            return None
        out.append(n)
        if cls[id(n)] == "body":
            todo.extend(x for x in n.args if x.shape != ())
    return out


_COMMUTATIVE = frozenset(ops.COMMUTATIVE)
#: Ops and dtypes as small ints: a hash of ints and tuples of them is the same in every process
#: (a str's is salted per process), so the canonical order, hence the code, is too.
_CODE = {name: i for i, name in enumerate(sorted(ops.OPS))}
_CODE.update({d: -1 - i for i, d in enumerate(DTYPES)})


def structure_hashes(body: list[Node]) -> dict[int, int]:
    """A hash of each node of a loop body (in topological order) from its op, dtype, rank and
    its operands' hashes — sorted for commutative ops — and nothing else: not its attributes
    (sizes, offsets, constants), which a kernel's key spells as positions, nor its operands'
    digests, by which hash-consing orders commutative operands. Operands from outside the body
    hash by op, dtype and rank. Two bodies that differ in those only get equal hashes; the
    hashes are the same in every process (ints only)."""
    sh: dict[int, int] = {}
    code = _CODE
    for n in body:
        ch = []
        for a in n.args:
            h = sh.get(id(a))
            if h is None:
                h = hash((-1, code[a.op], code[a.type.dtype], len(a.type.shape)))
            ch.append(h)
        if n.op in _COMMUTATIVE:
            ch.sort()
        sh[id(n)] = hash((code[n.op], code[n.type.dtype], len(n.type.shape), tuple(ch)))
    return sh


def canonical_body(body: list[Node]) -> list[Node]:
    """``body`` (topologically sorted) in a topological order that depends only on its
    structure (:func:`structure_hashes`): a depth-first walk from its roots (nodes no other
    body node reads) that emits each node after its operands, visiting the operands of a
    commutative op in order of their hashes. The bodies of one loop over different rows (the
    row-by-row Lennard-Jones model's kernels, whose commutative operands hash-consing orders
    by digests that depend on the row) then come out in one order, so their kernels share one
    key and one function (:class:`tapejit.codegen.lower.kernels.Interface`). Ties keep the given order:
    tied subtrees are alike, so either order spells one key."""
    if len(body) < 3:
        return body
    sh = structure_hashes(body)
    pos = {id(n): i for i, n in enumerate(body)}
    used = {id(a) for n in body for a in n.args if id(a) in pos}
    roots = sorted((n for n in body if id(n) not in used), key=lambda n: (sh[id(n)], pos[id(n)]))
    out: list[Node] = []
    seen: set[int] = set()
    for root in roots:
        stack = [(root, False)]
        while stack:
            n, expanded = stack.pop()
            if id(n) in seen:
                continue
            if expanded:
                seen.add(id(n))
                out.append(n)
                continue
            stack.append((n, True))
            args = [a for a in n.args if id(a) in pos and id(a) not in seen]
            if n.op in _COMMUTATIVE:
                args.sort(key=lambda a: (sh[id(a)], pos[id(a)]))
            stack.extend((a, False) for a in reversed(args))
    return out
