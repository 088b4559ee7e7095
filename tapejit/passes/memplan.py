"""Schedule and memory plan: ``Graph -> Program``.

:func:`plan` fuses the graph into kernels (:mod:`.fusion`), then gives every value that must live
in memory a :class:`~tapejit.core.program.Slot`:

* inputs are read in place (``arg``); ``reshape`` of an array and a contiguous slice alias
  their operand (``alias``, at an element offset);
* *liveness*: each kernel step has a time (each straight-line node its own, a whole fused loop
  one); a buffer is live from the step that writes it to the last step that reads it (through
  aliases too), outputs to the end;
* *in-place reuse*: a fused loop writes a value into the buffer of an operand it reads at the
  same element when that operand dies in this loop and no gather in the loop reads it (every
  iteration loads its operands before it stores); a scatter-add updates its accumulator in place
  when the accumulator dies there, and so does a loop's sink (``window_add``) when nothing else
  in the loop reads the accumulator. Values sharing a buffer form one *buffer class*;
* a buffer class holding an output lives in the caller's output array (``out``): gradients are
  written straight there — unless the class is written before the last guard is checked (a
  failed guard must leave the outputs untouched). Those, outputs that are inputs, and outputs
  returned twice are copied at the end;
* every other class gets an offset in the one workspace by linear scan over the schedule
  (a freed block is reused by a later class that fits, best fit first). Offsets are 64-byte
  aligned and the total is a compile-time constant; generated code never allocates.

``Program.stats`` has ``kernels`` (loops, including end copies and non-in-place scatter copies),
``workspace_bytes`` and ``work``: the plan's operation count per call — for each kernel, trip
count x nodes per iteration, plus one per straight-line node (a matmul counts m*n*k, a copy its
size). It counts IR work, so asymptotic claims are testable without timing.
"""

from __future__ import annotations

import bisect
import heapq
import math

from ..core import ops
from ..core.ir import Graph, Node
from ..core.program import LoopPlan, Program, Slot
from ..core.ops import Op
from .fusion import Schedule, alias_offset, alias_root, classify, fuse
from .pipeline import optimise

ALIGN = 64
END = math.inf


class _Classes:
    """Union-find over node ids: values that share one buffer."""

    def __init__(self):
        self.parent: dict[int, int] = {}

    def find(self, i: int) -> int:
        self.parent.setdefault(i, i)
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a: int, b: int) -> None:
        self.parent[self.find(a)] = self.find(b)


def _times(sched: Schedule) -> tuple[dict[int, float], list[tuple[float, Node, str]]]:
    """Definition time of every scheduled node, and (time, node, stage) for every computation."""
    t = 0
    define: dict[int, float] = {}
    steps: list[tuple[float, Node, str]] = []
    for k in sched.kernels:
        for n in k.pre:
            t += 1
            define.setdefault(id(n), t)
            steps.append((t, n, "pre"))
        if k.body:
            t += 1
            for n in k.body:
                define.setdefault(id(n), t)
                steps.append((t, n, "body"))
        if k.op is not None:
            t += 1
            define[id(k.op)] = t
            steps.append((t, k.op, "op"))
    return define, steps


def plan(g: Graph, donate: dict[int, int] | None = None) -> Program:
    """Fuse, schedule and memory-plan ``g``; see the module docstring.

    ``donate`` (a loop body's plan) maps an input position to an output position whose buffer
    the caller passes as that input's too (a carry updated in place: the loop keeps one
    buffer per array carry instead of copying it in and out of every iteration). An output
    is computed in its donated input's buffer when it is a chain of element writes
    (``add_at``/``put``) on that input, each the last reader of the one before; its position
    is then listed in ``Program.donated`` and nothing else is written for it. Otherwise the
    output is planned as usual (the caller copies it)."""
    sched = fuse(g)
    nodes = g.nodes
    byid = {id(n): n for n in nodes}
    mat = sched.materialised
    define, steps = _times(sched)

    # Liveness: last read of each materialised value (reads through aliases read the root).
    last: dict[int, float] = {}
    bodies: dict[float, list[Node]] = {}
    for t, n, stage in steps:
        if stage == "body":
            bodies.setdefault(t, []).append(n)
        for a in n.args:
            r = id(alias_root(a))
            if r in mat:
                last[r] = max(last.get(r, 0), t)
    outputs = {id(alias_root(o)) for o in g.outputs if o.shape != ()}
    for r in outputs:
        last[r] = END
    for c, _, _ in g.guards:  # a vector of guards is read where generated code checks it
        if c.shape != ():
            last[id(alias_root(c))] = END

    # In-place reuse.
    classes = _Classes()
    claimed: set[int] = set()
    hazards: dict[float, set[int]] = {}
    chains = _donated_chains(g, donate or {}, mat, last, outputs, define, byid)
    for t, n, stage in steps:
        if n.op in _ROW_WRITES and id(n) in mat:
            acc, idx, upd = n.args
            r = id(alias_root(acc))
            if (
                _dies_at(r, t, last, mat, outputs, claimed)
                and id(alias_root(upd)) != r
                and id(alias_root(idx)) != r
                and _view_offset(acc) == 0
                and byid[r].type.size == acc.type.size
            ):
                classes.union(id(n), r)
                claimed.add(r)
        elif n.op in ops.SCATTER and id(n) in mat:
            acc, upd = n.args
            r = id(alias_root(acc))
            if (
                _dies_at(r, t, last, mat, outputs, claimed)
                and id(alias_root(upd)) != r
                and _view_offset(acc) == 0
                and byid[r].type.size == acc.type.size
            ):
                classes.union(id(n), r)
                claimed.add(r)
        elif n.op == Op.WINDOW_ADD and stage == "body" and id(n) in mat:
            # a sink: in place over its accumulator when the accumulator dies in this loop and
            # nothing else in the loop reads it (the loop adds at rows other than its own)
            acc, upd = n.args
            r = id(alias_root(acc))
            readers = [x for x in bodies[t] if any(id(alias_root(a)) == r for a in x.args)]
            if (
                _dies_at(r, t, last, mat, outputs, claimed)
                and readers == [n]
                and id(alias_root(upd)) != r
                and _view_offset(acc) == 0
                and byid[r].type.size == acc.type.size
            ):
                classes.union(id(n), r)
                claimed.add(r)
        elif stage == "body" and id(n) in mat and define[id(n)] == t:
            hit = hazards.get(t)
            if hit is None:
                # buffers this loop reads at other elements than its own: through a gather, or
                # through a view at an offset; writing over them in place would be a hazard
                gathered = {
                    id(alias_root(a))
                    for x in bodies[t]
                    if classify(x) in ("gather", "sink")
                    for a in x.args
                    if a.shape != ()  # the operand, and a take's table
                } | {
                    id(alias_root(a))
                    for x in bodies[t]
                    for a in x.args
                    if classify(a) == "alias" and _view_offset(a) != 0
                }
                hit = hazards[t] = (gathered, {id(x) for x in bodies[t]})
            gathered, in_body = hit
            for a in _fused_reads(n, mat, in_body):
                r = id(alias_root(a))
                if (
                    a.shape == n.shape
                    and byid[r].type.size == n.type.size
                    and byid[r].dtype == n.dtype
                    and r not in gathered
                    and _dies_at(r, t, last, mat, outputs, claimed)
                    and r not in in_body
                ):
                    classes.union(id(n), r)
                    claimed.add(r)
                    break

    # Buffer classes: extent, size, output.
    members: dict[int, list[int]] = {}
    rank = {id(n): k for k, n in enumerate(nodes)}  # ties broken by graph order, not by ids
    for i in sorted(mat, key=lambda i: (define.get(i, 0), rank.get(i, 0))):
        members.setdefault(classes.find(i), []).append(i)
    placed = _place_blocks(steps, mat, last, outputs, classes, members)
    slots: dict[int, Slot] = {}
    for i, (n, k) in enumerate(zip(g.inputs, g.kinds)):
        if n.shape != ():
            slots[id(n)] = Slot("arg", i)
    copies: list[tuple[int, Node]] = []
    out_of: dict[int, int] = {}
    donated: list[int] = []
    in_arg: dict[int, int] = {}  # buffer class -> the donated input it lives in
    for j, (i, chain) in chains.items():
        cs = {classes.find(id(n)) for n in chain}
        if len(cs) == 1 and set(members.get(next(iter(cs)), ())) == {id(n) for n in chain}:
            in_arg[cs.pop()] = i
            donated.append(j)
    # Nothing may be written to an output before the last guard is checked (a failed guard
    # leaves the caller's arrays untouched), so classes written earlier are copied at the end.
    guard_time = max((define.get(id(alias_root(c)), 0) for c, _, _ in g.guards), default=0)
    for k, o in enumerate(g.outputs):
        if o.shape == () or k in donated:
            continue
        r = id(alias_root(o))
        c = classes.find(r) if r in mat else None
        early = (
            c is not None and min(define.get(i, 0) for i in members[c]) <= guard_time and g.guards
        )
        # an output that is only part of its buffer (a view at an offset into a larger value,
        # e.g. one segment of a loop's result) cannot have the caller's array as that buffer
        partial = _view_offset(o) != 0 or byid[r].type.size != o.type.size
        if c is None or c in out_of or early or partial:
            copies.append((k, o))
        else:
            out_of[c] = k
    kept = {c: ids for c, ids in members.items() if c not in in_arg}
    offset_of, workspace = _linear_scan(kept, out_of, define, last, byid, rank)
    for c, ids in members.items():
        if c in in_arg:
            slot = Slot("arg", in_arg[c])
        else:
            slot = Slot("out", out_of[c]) if c in out_of else Slot("ws", offset_of[c])
        for i in ids:
            slots[i] = slot
    for n in nodes:
        if classify(n) == "alias":
            slots[id(n)] = Slot("alias", alias_offset(n), of=n.args[0])
    for r, (n, o) in placed.items():
        slots[r] = Slot("alias", o, of=n)

    loops, workspace = _plan_loops(nodes, workspace)
    prog = Program(g, sched.kernels, slots, tuple(copies), workspace, {}, loops,
                   donated=tuple(sorted(donated)))
    prog.stats.update(
        kernels=sched.stats["kernels"] + len(copies) + _scatter_copies(prog),
        recomputed=sched.stats["recomputed"],
        workspace_bytes=workspace,
        buffers=len(members),
        work=work(prog),
    )
    return prog


#: Element writes through a table (``acc`` with rows replaced or added to): in place when
#: ``acc`` dies there.
_ROW_WRITES = (Op.ADD_AT, Op.PUT)


def _donated_chains(g: Graph, donate: dict[int, int], mat, last, outputs, define, byid):
    """For each donated ``input -> output`` pair whose output is a chain of row writes on the
    input, each link the last reader of the one before (and the input read last by the first),
    ``output position -> (input position, chain nodes)``; the chain's links are then claimed
    for in-place reuse by the caller's loop (they are in ``mat``)."""
    found: dict[int, tuple[int, list[Node]]] = {}
    for i, j in donate.items():
        inp, o = g.inputs[i], g.outputs[j]
        if o.shape == () or o.type != inp.type or sum(x is o for x in g.outputs) != 1:
            continue
        chain, n = [], o
        while n.op in _ROW_WRITES and id(n) in mat and n.type == inp.type:
            chain.append(n)
            n = n.args[0]
        if n is not inp or not chain:
            continue
        ok = True
        prev: Node = inp
        for link in reversed(chain):  # first write first
            t = define.get(id(link))
            reader = last.get(id(prev)) if prev is not inp else _last_read(g, inp, define)
            if t is None or reader != t or id(link.args[1]) == id(prev) or link.args[2] is prev:
                ok = False
                break
            prev = link
        if ok and not any(id(c) in outputs for c in chain[1:]):
            found[j] = (i, chain)
    return found


def _last_read(g: Graph, inp: Node, define) -> float | None:
    """The time of the last step that reads input ``inp`` (directly or through a view)."""
    t = None
    for n in g.nodes:
        if any(alias_root(a) is inp for a in n.args):
            d = define.get(id(n))
            if d is None:
                return None  # read inside a fused loop's body: not a single step
            t = d if t is None else max(t, d)
    return t


def _fused_reads(n: Node, mat, in_body: set[int]) -> list[Node]:
    """The values a loop's materialised node ``n`` reads at its own element: its operands, and
    through elementwise values of the same loop (``id`` in ``in_body``) kept in registers,
    theirs (``out = (a * s) * t`` may write over ``a``'s buffer as ``out = a * s`` may); nearest
    first."""
    reads, queue, seen = [], list(n.args), set()
    for a in queue:  # breadth first: the queue grows while it is read
        if id(a) in seen:
            continue
        seen.add(id(a))
        reads.append(a)
        if (
            id(a) not in mat
            and id(a) in in_body
            and a.op in ops.ELEMENTWISE
            and a.shape == n.shape
        ):
            queue.extend(a.args)
    return reads


def _place_blocks(steps, mat, last, outputs, classes, members) -> dict[int, tuple[Node, int]]:
    """Updates computed straight into their block of a result: a ``scatter`` of a block into a
    constant (codegen fills the result around the block, ``codegen/lower/driver.py``) whose update is
    a value of its own (a buffer no other value shares, read last by the scatter, not an
    output, the whole of its buffer) is computed into the block — the scatter then only fills
    around it. The update's buffer joins the scatter's class (live from the update's
    definition on). Returns update id -> (scatter, element offset of the block)."""
    placed: dict[int, tuple[Node, int]] = {}
    for t, n, _stage in steps:
        o = ops.splice_offset(n)
        if n.op != Op.SCATTER or o is None or id(n) not in mat:
            continue
        if id(alias_root(n.args[0])) in mat:
            continue  # the constant is in memory (another reader): the scatter updates it
        u = n.args[1]
        r = alias_root(u)
        c = classes.find(id(r))
        if (
            id(r) not in mat
            or id(r) in outputs
            or id(r) in placed
            or r.dtype != n.dtype
            or _view_offset(u) != 0
            or r.type.size != u.type.size
            or last.get(id(r)) != t
            or members.get(c) != [id(r)]
        ):
            continue
        del members[c]
        members[classes.find(id(n))].append(id(r))
        placed[id(r)] = (n, o)
    return placed


def _plan_loops(nodes: list[Node], top: int) -> tuple[dict[int, LoopPlan], int]:
    """Plan the body and condition of every ``loop`` node as programs of their own (optimised
    by the same pipeline) and give each loop its scratch (next carries, accumulated ys before
    they are added, the sub-programs' workspaces) after the workspace's other buffers (a loop's
    scratch is live only while it runs; it is not shared between loops — simple, and small
    next to the residual stacks, which are the loop's result and planned as usual)."""
    loops: dict[int, LoopPlan] = {}
    planned: dict[int, Program] = {}

    def sub(g: Graph | None, donate: dict[int, int] | None = None) -> Program | None:
        if g is None:
            return None
        if id(g) not in planned:
            planned[id(g)] = plan(optimise(g)[0], donate)
        return planned[id(g)]

    for n in nodes:
        if n.op != Op.LOOP:
            continue
        spec = n.attrs[0]
        donate = {1 + k: k for k in range(spec.n_carry)
                  if spec.body.inputs[1 + k].shape != ()}  # fmt: skip
        body, cond = sub(spec.body, donate), sub(spec.cond)
        carry_b = []
        for c in spec.body.outputs[: spec.n_carry]:
            carry_b.append(top)
            top += _round(c.type.nbytes)
        acc_b = []  # an accumulated y_t, before it is added to its row
        for a in spec.accumulate:
            acc_b.append(top)
            top += _round(spec.body.outputs[spec.n_carry + a.y].type.nbytes)
        body_ws = top
        top += _round(body.workspace_bytes)
        cond_ws = top
        top += _round(cond.workspace_bytes) if cond is not None else 0
        cond_out = top
        top += ALIGN
        loops[id(n)] = LoopPlan(
            body, cond, tuple(carry_b), body_ws, cond_ws, cond_out, tuple(acc_b)
        )
    return loops, top


def _view_offset(n: Node) -> int:
    """Element offset of ``n`` in its root buffer (0 unless reached through a slice view)."""
    off = 0
    while classify(n) == "alias":
        off += alias_offset(n)
        n = n.args[0]
    return off


def _dies_at(r: int, t: float, last, mat, outputs, claimed) -> bool:
    return r in mat and r not in outputs and r not in claimed and last.get(r) == t


def _size(ids: list[int], byid) -> int:
    return max(byid[i].type.nbytes for i in ids)


def _round(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _linear_scan(members, out_of, define, last, byid, rank) -> tuple[dict[int, int], int]:
    """Workspace offset of every buffer class not in an output, and the workspace size (see the
    module docstring)."""
    todo = sorted(
        (c for c in members if c not in out_of),
        key=lambda c: min((define.get(i, 0), rank.get(i, 0)) for i in members[c]),
    )
    offsets: dict[int, int] = {}
    busy: list[tuple[float, int, int]] = []  # heap of (end time, size, offset) of blocks in use
    free: list[tuple[int, int]] = []  # sorted (size, offset) of blocks whose values are dead
    top = 0
    for c in todo:
        start = min(define.get(i, 0) for i in members[c])
        end = max(last.get(i, start) for i in members[c])
        need = _round(_size(members[c], byid))
        while busy and busy[0][0] < start:  # blocks whose last reader ran before `start`
            _, size, off = heapq.heappop(busy)
            bisect.insort(free, (size, off))
        j = bisect.bisect_left(free, (need, -1))
        if j < len(free):  # best fit: the smallest dead block that is large enough
            size, off = free.pop(j)
        else:
            size, off = need, top
            top += need
        heapq.heappush(busy, (end, size, off))
        offsets[c] = off
    return offsets, top


def _scatter_copies(prog: Program) -> int:
    """Scatter-adds that cannot update in place copy their accumulator first (a loop each)."""
    count = 0
    for k in prog.kernels:
        for n in (*k.pre, *([k.op] if k.op is not None else [])):
            if n.op in (*ops.SCATTER, *_ROW_WRITES) and not _in_place(prog, n):
                count += 1
    return count


def _in_place(prog: Program, n: Node) -> bool:
    a = prog.slots.get(id(n))
    b = prog.slots.get(id(alias_root(n.args[0])))
    return a is not None and a == b and _view_offset(n.args[0]) == 0


def work(prog: Program) -> int:
    """The plan's operation count per call (see the module docstring)."""
    total = 0
    for k in prog.kernels:
        for n in k.pre:
            total += 1
            if n.op in ops.SCATTER and not _in_place(prog, n):
                total += n.type.size
        if k.body:
            total += math.prod(k.space) * len(k.body)
        if k.op is not None:
            n = k.op
            if n.op == Op.MATMUL:
                total += math.prod(ops.matmul_dims(n.args[0].shape, n.args[1].shape))
            elif n.op in ops.SCATTER:
                total += n.args[1].type.size + (0 if _in_place(prog, n) else n.type.size)
            elif n.op in _ROW_WRITES:  # the rows written, and the copy unless in place
                total += n.args[2].type.size + (0 if _in_place(prog, n) else n.type.size)
            elif n.op == Op.LOOP:  # an upper bound: every iteration the bound allows
                lp = prog.loops[id(n)]
                per = lp.body.stats["work"] + (lp.cond.stats["work"] if lp.cond else 0)
                total += n.attrs[0].max_steps * per
            else:
                total += n.args[0].type.size
    total += sum(n.type.size for _, n in prog.copies)
    return total
