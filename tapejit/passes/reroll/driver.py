"""Re-rolling: Python element loops, unrolled by tracing, rebuilt as ``loop`` nodes.

A Python ``for`` loop over the elements of an array arrives in the trace unrolled: one copy of
the loop body per iteration, chained through what the loop carries::

    e = 0.0
    for i in range(len(x) - 1):
        d = x[i + 1] - x[i]
        e = e + np.exp(-d * d)          # add(e_{k-1}, term_k): an add *chain*

    y = np.zeros_like(x)
    for i in range(len(x)):
        y[i] = x[i] * x[i]              # scatter(y_{k-1}, upd_k){k}: a scatter chain

so the graph, the passes, LLVM and the machine code all grow with the trip count. (Finding
the chains and runs is :mod:`tapejit.passes.reroll.match`; this module builds the loops.) This pass
(run on the trace, before reverse mode; :func:`reroll`) finds such chains and rebuilds each run
of at least :data:`MIN_RUN` consecutive *isomorphic* iterations as one ``loop`` node — a
:class:`tapejit.core.ops.LoopSpec` with a body sub-graph, exactly what :func:`tapejit.fori_loop` and
:func:`tapejit.scan` build (loop-invariant code hoisted, the reverse-mode split made), so reverse
mode, the passes and codegen handle it unchanged.

**Chains.** A chain is a path ``c_0 -> c_1 -> ... -> c_m`` of nodes of one type, each an
operand of the next (the accumulator of ``scatter``/``scatter_add``): the carry of a loop, from
its initial value to its result. It is found by the longest path of same-typed nodes behind
each node (the carry's path goes back through every iteration, a term's stays within one). An
iteration spans ``p`` chain nodes (``e = e * 0.5 + t`` spans a ``mul`` and an ``add``;
``e = e + a + b`` two ``add``s): each period up to :data:`MAX_PERIOD` at which the chain's ops
repeat is tried, and each phase; iteration ``k`` computes ``c_{(k+1)p}`` from its carry
``c_{kp}``.

**Iterations.** Iteration ``k``'s sub-graph is what it computes above its carry. A template is
built by walking iterations ``s``, ``s+1`` and ``s+2`` in parallel (commutative operands in
either order, by backtracking: hash-consing orders them by digest, not as the user wrote them);
every further iteration is walked against it. The walk stops at *leaves*:

* ``carry`` — the previous chain node;
* ``same`` — the very same node in every iteration (a value computed before the loop, an input,
  a constant): a loop *param*;
* ``xs`` — ``index`` of one (same) array whose integer index is affine in the iteration number,
  ``x[a + b*k]`` (``x[i]``, ``x[i+1]``, ``x[n-1-i]``, ``x[2*i]``, ``x[i, 0]``, ``x[i, :]``; one
  varying axis): the loop reads it as a scanned sequence, the strided slice
  ``x[a : a+b*T : b]`` (moved to the front axis) built outside the loop — or, when its row
  (an integer on the array's first axis) moves other than by a step (``x[idx[e]]`` of a numpy
  ``idx``, ``p[nbr[k], 0]``), the rows each iteration reads, taken through a table of them
  (:func:`tapejit.core.ops_table.take`; tried where the affine template gives no run);
* ``block`` — a slice of one array whose start moves by a step, ``x[a + b*k : a + b*k + L : s]``
  (``p[3*i : 3*i + 3]``, a vertex's weights ``params[v*P : v*P + n]``): scanned as the rows of
  a ``window`` (:mod:`tapejit.core.ops_window`) — or, when the blocks of one array lie in tiles of
  ``b`` rows laid end to end, as a view of the array (``(T, b)``), each block a slice of its
  tile (:func:`_tiles`);
* ``hist`` — in a graph model's vertex loop (:mod:`tapejit.passes.reroll.history`), the output
  of an earlier iteration, a ``-0.0`` pad, or a value from before the loop: a *history* input
  of the loop (:class:`tapejit.core.ops.History`) reading the loop's stacked outputs at a row per
  iteration (or its operand, for pads and values from before);
* ``iconst`` — a scalar constant that is an integer affine in ``k`` (``i`` used as a number):
  computed in the body from the iteration index (exactly: integers below 2**52);
* ``cseq`` — any other scalar constant that differs between iterations (``mu[i]`` of a numpy
  table, ``0.9**i``): the iterations' numbers become a constant input of the trace, scanned
  by the loop (exactly the unrolled trace's numbers, the sign of a zero included; a sum of
  terms made from them is reassociated like any other, see :data:`REDUCE`);
* ``rmw`` — in a scatter chain, a read of the carry at the very position the iteration writes
  (``y[i] = y[i] * v``; ``y[i] += v`` is traced as a ``scatter_add``, :func:`tapejit.core.ops.scatter`):
  it reads the initial array there.

Everything else must match node for node (op, attributes, type). A run is cut where an
iteration does not match, where an index is not affine, and where an iteration touches a node a
scalar *guard* depends on (Python control flow on a traced value: those iterations stay
unrolled, so the guard keeps checking exactly what it checked). Runs shorter than
:data:`MIN_RUN` stay unrolled.

**Guards.** A loop's per-iteration guards (``max(x[i], 0.0)``, ``if x[i] > 0:``) are rolled
first, a run of them into one vector guard computed on the scanned sequences and checked
element by element under the unrolled guards' numbers (:mod:`tapejit.passes.reroll.guards`);
the iterations then no longer touch a guard's nodes and re-roll as any other.

**Loops built.**

* sum mode (:data:`REDUCE`, on by default): a scalar sum ``e = e + term`` (``- term``, several
  terms an iteration) whose terms do not read ``e`` and are elementwise ops on scalar element
  reads, params and constants becomes ``e_0 + sum(terms)``, the terms computed for all
  iterations at once on the scanned sequences (fused vector kernels, a vectorised reduction:
  reassociated like ``np.sum``, so it may differ from the unrolled left-to-right sum in the last
  bits);
* carry mode (any other chain, e.g. ``p = p * f``, ``h = tanh(W h + x[i])``, ``y[0] += v``, and
  sums with ``REDUCE = False``): a sequential loop over ``T`` iterations carrying ``c`` — the
  same operations in the same order as the unrolled code, so the same values (gradients: the
  cotangents an input gets from several reads — rows read through a table where a row
  repeats, an input read both in and after the loop — may be summed in another order than
  the unrolled reverse pass sums them, so their last bits may differ);
* map mode (a ``scatter``/``scatter_add`` chain writing ``y[a + b*k]``, ``b != 0``, whose update
  does not read the carry except at the written position): a loop with no carry returning the
  updates as stacked ``ys``, written into the initial array by one strided ``scatter``
  (distinct positions, so the order of the writes does not matter); additions at rows from a
  table (``f[conn[e, 0]] += t``) are one :func:`tapejit.core.ops_table.add_at`, in the iterations'
  order. An iteration may write
  several positions (``r[i, 0] = a; r[i, 1] = b``: the earlier writes are ``write`` nodes of
  the template, their positions affine like the root's): one ``ys`` and one strided write per
  stage, when all the positions written are distinct — or, with :data:`REDUCE`, when every
  write adds (``f[e] -= t; f[e + 1] += t``, :func:`tapejit.core.ops.scatter`): each element gets the
  same terms in another order (:func:`_stages`).

A first iteration that tracing simplified (``0.0 * 0.5`` and ``1.0 * t`` fold) does not match
and stays unrolled; the loop starts from its result.

**Carries read by another chain.** ``y[i] = 0.9 * y[i-1] + x[i]`` traces to a chain of the
stored values (the read of ``y[i-1]`` is the value just stored, :func:`tapejit.core.ops.index`) and a
scatter chain that stores each of them. The values' loop also returns its carries stacked, each
read of an intermediate carry becomes a row of them, and another round of the pass
(:data:`ROUNDS`) finds the stores a map of those rows.

Not re-rolled (left as they are): chains whose iterations read other elements of the carried
array (``y[i] = y[i-2] + ...``), non-affine indices (``x[i*i]``, ``x[idx[i]]`` with a numpy
``idx``), two varying axes (``x[i, i]``), several accumulators
that feed each other through more than the stored value (the one that reads the other stays
unrolled), iterations whose guards did not roll (a guard on a loop-carried value, two guards
an iteration, see :mod:`tapejit.passes.reroll.guards`), and
loops over fewer than :data:`MIN_RUN` iterations — except a run of at least
:data:`MIN_SHORT_RUN` whose body is that of a run of :data:`MIN_RUN` or more in the same trace
(the short rows at the end of a triangular nest ``for j in range(i + 1, n)``: their loops share
the long rows' kernel functions, where unrolled they were straight-line code, most of the
nest's compile time). Nested Python loops: the innermost loop is re-rolled first; a round that
re-rolls many loops asks for another (:data:`ROUNDS`), in which the outer loop's chain of row
sums is one chain like any other.

**Rows of different lengths.** A sum whose terms differ in the lengths of their rows
(``d = pos[i + 1:] - pos[i]``, and a pair loop's rows once their inner loops are sums) is not
a run of this matcher (types differ); :func:`tapejit.passes.reroll.ragged.ragged_sum` rebuilds
it as one sum over a ragged layout (``window``, :mod:`tapejit.core.ops_window`).
"""

from __future__ import annotations

import os
import time

import numpy as np

from ...ad import autodiff
from ...core import ir, ops
from ...core.ir import Graph, Node, Type
from ...core.ops import Op
from ...progress import log
from .build import _build_loop
from .chains import _chains, _periodic_part, _periods
from .common import MIN_RUN, MIN_SHORT_RUN, _block, _Fail, _replace_all, _split_items
from .guards import roll_guards
from .history import pad_history
from .ragged import ragged_groups, ragged_sum
from .runs import _find_runs
from .sums import partition_sum, partition_writes

__all__ = ["ENABLED", "MIN_RUN", "MIN_SHORT_RUN", "REDUCE", "ROUNDS", "extend", "maybe_reroll",
           "reroll"]  # fmt: skip

#: Sums whose terms do not read the sum are computed as vectorised terms and one reduction
#: (:func:`_build_reduction`; reassociated as ``np.sum`` is); ``False``: a sequential loop in
#: the unrolled code's order (bit-identical values, one body call per iteration).
REDUCE = os.environ.get("TAPEJIT_REROLL_REDUCE", "1") != "0"

class _Activity:
    """Whether a node depends on an active input of the trace through differentiable ops: the
    graph's :func:`tapejit.ad.autodiff.active_nodes`, extended by
    :func:`tapejit.ad.autodiff.varied_from` to the nodes the pass builds on the graph (a
    loop's scanned sequences, its hoisted parameters) as they are asked about."""

    def __init__(self, g: Graph):
        self.seen = {id(n): n for n in g.nodes}  # (kept alive, so an id stays its node's)
        self.active = autodiff.active_nodes(g)

    def __call__(self, n: Node) -> bool:
        if id(n) not in self.seen:
            order = ir.toposort((n,), stop=self.seen)
            new = [m for m in order if id(m) not in self.seen]
            seeds = {id(m) for m in order if id(m) in self.active}
            self.active |= autodiff.varied_from(new, seeds)
            self.seen.update((id(m), m) for m in new)
        return id(n) in self.active


def extend(chain: list[Node], chain_ids: set[int], extra: int, number: str, diff) -> Node:
    """The carry after ``chain``'s iterations and ``extra`` more of the same: the loop node (or
    sum) of a loop captured while tracing (:mod:`tapejit.frontend.loops.loop_capture`), of which only the
    iterations computing ``chain[1:]`` were traced. ``chain[k]`` is the carry after traced
    iteration ``k``; ``chain_ids``, the nodes of every carry's chain (a carry that reads
    another is not a loop of its own); ``diff(node)``, whether a node is differentiated.

    The caller vouches that every iteration traces the same (the loop's source says so):
    this checks that the traced ones match one template from some iteration to the last,
    with no integer constant varying, and that every element read and written position
    stays in bounds over all ``extra`` iterations. Raises ``_Fail`` otherwise."""
    runs = _find_runs(chain, chain_ids, set(), None, min_run=3, tables=False)
    if not runs or runs[-1].hi != len(chain) - 1:
        raise _Fail
    run = runs[-1]
    tpl = run.tpl
    if any(tpl.kind[id(r)] in ("iconst", "cseq", "hist") for r in tpl.leaves):
        raise _Fail  # a number that varies: its values in the iterations not traced are unknown
    if run.init is None or len({id(n) for n in chain}) != len(chain):
        raise _Fail  # an iteration that does not read its carry, or changes nothing
    run.extra = extra
    last = run.trips - 1

    def in_bounds(items: tuple, steps: tuple, shape: tuple) -> None:
        pattern, ints = _split_items(items)
        axes = [p for p, it in enumerate(pattern) if it is None]
        for ax, a, b in zip(axes, ints, steps):
            if not 0 <= a + b * last < shape[ax]:
                raise _Fail  # the index leaves the array (or wraps around, negative)

    for r in tpl.leaves:
        if tpl.kind[id(r)] in ("xs", "write"):
            first = run.first[id(r)]
            in_bounds(first.attrs, run.steps[id(r)], first.args[0].type.shape)
        elif tpl.kind[id(r)] == "block":  # the first and the last row of the last block
            first = run.first[id(r)]
            (_, step), a = _block(first.attrs)
            top = a + run.steps[id(r)][0] * last
            if not (0 <= top and top + step * (first.shape[0] - 1) < first.args[0].shape[0]):
                raise _Fail
    if tpl.root_varies:  # a map: the written positions
        in_bounds(run.root_first_items, run.root_step, chain[-1].type.shape)
    node, _, _ = _build_loop(run, chain, number, diff, reduce=REDUCE)
    return node


# ----------------------------------------------------------------------------------------------
# The pass


#: Rounds of the pass at most: a round that re-rolls a sequential loop whose carries another
#: chain reads (``y[i] = 0.9 * y[i - 1] + x[i]``: the stored values are the carries) exposes
#: them, and the next round re-rolls the reading chain (a map of the stacked carries). A round
#: that re-rolls at least ``MIN_RUN`` loops (the inner loops of a nest: one sum per row of a
#: pair loop) or leaves a tail after rows of different lengths also asks for another: the
#: outer loop's chain, or the tail, is then a chain of its own.
ROUNDS = 3


def reroll(g: Graph) -> tuple[Graph, dict]:
    """``g`` with its runs of isomorphic unrolled iterations rebuilt as loops, and statistics
    (``grad.stats["reroll"]`` adds the loops captured while tracing): ``iterations`` re-rolled into ``loops`` loops (of
    which ``reductions`` became sums, see :data:`REDUCE`), ``guards`` rolled into vector
    guards, the trace's node counts before and after, and the seconds taken."""
    t0 = time.perf_counter()
    total: dict = {}
    for _ in range(ROUNDS):
        g, stats, exposed = _round(g)
        for k, v in stats.items():
            if k == "nodes_before":
                total.setdefault(k, v)
            elif k in ("iterations", "loops", "reductions", "guards", "ragged", "history"):
                total[k] = total.get(k, 0) + v
            else:
                total[k] = v
        if not exposed:
            break
    total["seconds"] = time.perf_counter() - t0
    return g, total


def _round(g: Graph, pad: bool = True) -> tuple[Graph, dict, bool]:
    """One round of :func:`reroll`; also whether it exposed a loop's carries (see
    :data:`ROUNDS`). Vertex-loop chains are padded first (``pad``,
    :func:`tapejit.passes.reroll.history.pad_history`); a round that then builds no loop
    reading its history is done again without the padding (which would only cost adds)."""
    t0 = time.perf_counter()
    stats = {"nodes_before": len(g.nodes), "nodes_after": len(g.nodes), "iterations": 0,
             "loops": 0, "reductions": 0, "guards": 0, "ragged": 0, "history": 0}  # fmt: skip
    g0 = g
    chains = _chains(g.nodes)
    g, padded, pads = pad_history(g, chains) if pad else (g, 0, frozenset())
    nodes = g.nodes
    if padded:  # the padded chains
        chains = _chains(nodes)
    if not chains:
        stats["seconds"] = time.perf_counter() - t0
        return g0, stats, False
    # chain nodes another chain reads directly (a sequential loop's carries, stored: y[i] = c)
    owner = {id(n): c for c, chain in enumerate(chains) for n in chain}
    read_outside: set[int] = set()
    for u in nodes:
        cu = owner.get(id(u))
        if cu is not None:
            for a in u.args:
                ca = owner.get(id(a))
                if ca is not None and ca != cu:
                    read_outside.add(id(a))
    exposed = False
    tables: list[tuple[Node, np.ndarray]] = []  # constant inputs added (cseq leaves)
    names = {n.attrs[1] for n in g.inputs}

    def table(values: tuple) -> Node:
        arr = np.array(values, dtype=np.float64)
        name, k = f"reroll_t{len(tables)}", 0
        while name in names:
            name, k = f"reroll_t{len(tables)}_{k}", k + 1
        node = ops.input_node(len(g.inputs) + len(tables), name, Type(arr.shape))
        tables.append((node, arr))
        return node

    guarded: set[int] = set()
    if g.guards:  # a loop's guards first: a run of them becomes one vector guard
        g, stats["guards"] = roll_guards(g, table)
        guarded = {id(n) for c, _, _ in g.guards if c.shape == () for n in ir.toposort((c,))}
    spine_ids = {id(n) for c in chains for n in c}
    diff = _Activity(g)
    mapping: dict[int, Node] = {}
    users: dict[int, int] = {}  # readers of each node (sums grouped by shape: reroll_sums)
    for n in g.nodes:
        for a in n.args:
            users[id(a)] = users.get(id(a), 0) + 1
    for o in (*g.outputs, *(c for c, _, _ in g.guards)):
        users[id(o)] = users.get(id(o), 0) + 1

    number = 0
    known: set = set()  # signatures of the templates of long runs (reroll_match.MIN_SHORT_RUN)
    for chain in chains:
        # iterations may span several chain nodes (e = e + a + b: two adds per iteration):
        # try each period and phase, keep the choice that re-rolls the most chain nodes
        best: tuple[int, list, list] = (0, [], [])
        worked: set[int] = set()
        for period in _periods(chain):
            if best[0] * 2 >= len(chain) or any(period % q == 0 for q in worked):
                continue  # most of it re-rolled already, or a multiple of a period that worked
            # the chain without the ends that do not repeat (the first iteration's term, what
            # uses the loop's result), and the phase that ends an iteration where it ends first
            lo, hi = _periodic_part(chain, period)
            tail = (hi - 1) % period
            for phase in [tail] + [q for q in range(period) if q != tail]:
                sub = chain[phase::period]
                mine = {id(n) for n in chain} - {id(n) for n in sub}
                runs = _find_runs(sub, spine_ids - mine, guarded, known, pads=pads)
                covered = sum(r.hi - r.lo + 1 for r in runs) * period
                if runs:
                    worked.add(period)
                if covered > best[0]:
                    best = (covered, sub, runs)
                if best[0] >= hi - lo - 2 * period:
                    break  # (nearly) all of it: no other choice can do better
            if best[0] >= hi - lo - 2 * period:
                break
        _, sub, runs = best
        if best[0] < len(chain) - MIN_RUN:  # runs leave much unrolled: by shape?
            tail, is_ragged = 0, False
            if any(n.op in (Op.SCATTER, Op.SCATTER_ADD) for n in chain[-3:]):
                grouped = partition_writes(chain, users, table, REDUCE)
            else:
                grouped = partition_sum(chain, users, table) if REDUCE else None
                ragged = ragged_sum(chain, users, guarded) if REDUCE else None
                if REDUCE and ragged is None:
                    ragged = ragged_groups(chain, users, guarded)
                # rows of different lengths (the rows of a triangle), with a tail of the chain
                # after them (the short rows a pair loop leaves unrolled) for the next round
                if ragged is not None and ragged[2] + ragged[3] > (grouped[2] if grouped else 0):
                    grouped, tail, is_ragged = ragged[:3], ragged[3], True
            if grouped is not None and grouped[2] + tail > best[0]:
                old, new, count = grouped
                mapping[id(old)] = new
                stats["loops"] += 1
                stats["reductions"] += old.op not in (Op.SCATTER, Op.SCATTER_ADD)
                stats["iterations"] += count
                if is_ragged:
                    stats["ragged"] += 1
                    exposed = exposed or tail >= MIN_RUN
                continue
        for run in runs:
            made = len(tables)
            expose = any(id(sub[k]) in read_outside for k in range(run.lo, run.hi))
            try:
                new, summed, ys = _build_loop(
                    run, sub, number, diff, table, expose, pads, reduce=REDUCE
                )
            except _Fail:
                del tables[made:]
                continue
            mapping[id(sub[run.hi])] = new
            if ys is not None:  # the carries read outside: rows of the stacked carries
                for t, k in enumerate(range(run.lo, run.hi)):
                    mapping[id(sub[k])] = ops.index(ys, (t,))
                exposed = True
            number += 1
            stats["loops"] += 1
            stats["history"] += any(run.hist.values())
            stats["reductions"] += summed
            stats["iterations"] += run.hi - run.lo + 1
    if padded and not stats["history"]:
        return _round(g0, pad=False)
    if mapping or tables:
        g = _replace_all(g, mapping)
        if tables:
            bindings = dict(g.bindings)
            for node, arr in tables:
                bindings[node.attrs[0]] = arr
            g = g.replace(
                inputs=g.inputs + tuple(n for n, _ in tables),
                kinds=g.kinds + ("const",) * len(tables),
                bindings=bindings,
            )
        ir.verify(g)
        stats["nodes_after"] = len(g.nodes)
    stats["seconds"] = time.perf_counter() - t0
    return g, stats, exposed or stats["loops"] >= MIN_RUN


#: Whether :func:`maybe_reroll` (the first of the trace passes, so part of every
#: ``tapejit.compile``) re-rolls: on by default; ``TAPEJIT_REROLL=0`` in the environment, or
#: setting this to ``False``, compiles element loops unrolled (as traced).
ENABLED = os.environ.get("TAPEJIT_REROLL", "1") not in ("", "0")


def maybe_reroll(g: Graph) -> tuple[Graph, dict]:
    """:func:`reroll` when :data:`ENABLED` (the hook in ``runtime/variant.py``). A failure of
    the pass itself (a bug) is logged and the trace compiled as it is, unrolled."""
    if not ENABLED:
        n = len(g.nodes)
        return g, {"nodes_before": n, "nodes_after": n, "seconds": 0.0, "skipped": True,
                   "iterations": 0, "loops": 0}  # fmt: skip
    try:
        return reroll(g)
    except Exception:  # noqa: BLE001 - a bug in this pass must not break compiling
        log.warning("reroll failed on %s; compiling it unrolled", g.name, exc_info=True)
        n = len(g.nodes)
        return g, {"nodes_before": n, "nodes_after": n, "seconds": 0.0, "iterations": 0,
                   "loops": 0, "failed": True}  # fmt: skip
