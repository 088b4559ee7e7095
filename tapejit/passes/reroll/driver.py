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
from typing import Callable

import numpy as np

from ...core import ir, ops, ops_table, ops_window
from ...core.ir import Graph, Node, Type, substitute
from ...core.ops import Op
from ...progress import log
from .guards import roll_guards
from .history import fallback, history_rows, pad_history
from .flat import per_row_builder
from .ragged import ragged_groups, ragged_sum
from .sums import partition_sum, partition_writes
from .match import (  # noqa: F401  (MIN_RUN, MIN_SHORT_RUN: the documented thresholds)
    MIN_RUN,
    MIN_SHORT_RUN,
    _Fail,
    _Run,
    _block,
    _chains,
    _find_runs,
    _periodic_part,
    _periods,
    _split_items,
)

#: Sums whose terms do not read the sum are computed as vectorised terms and one reduction
#: (:func:`_build_reduction`; reassociated as ``np.sum`` is); ``False``: a sequential loop in
#: the unrolled code's order (bit-identical values, one body call per iteration).
REDUCE = os.environ.get("TAPEJIT_REROLL_REDUCE", "1") != "0"

# ----------------------------------------------------------------------------------------------
# Building the loop


def _scanned(src: Node, items: tuple, step: tuple, T: int) -> tuple[Node, int]:
    """``src[items_k]`` for k = 0..T-1 stacked on a new front axis (a strided slice of ``src``
    moved to the front), and the position the varying axis had."""
    pattern, ints = _split_items(items)
    out, axis, j, pos = [], None, 0, 0
    for p in pattern:
        if p is None:
            a, b = ints[j], step[j]
            j += 1
            if b != 0:
                out.append((a, a + b * T, b))
                axis = pos
                pos += 1
            else:
                out.append(a)
        else:
            out.append(p)
            pos += 1
    node = ops.index(src, tuple(out))
    if axis:
        perm = (axis, *[d for d in range(node.ndim) if d != axis])
        node = ops.transpose(node, perm)
    return node, (axis or 0)


def _read_sequence(run: _Run, r: Node, T: int, table: Callable[[tuple], Node] | None) -> Node:
    """What element-read leaf ``r`` of the template reads in each of the ``T`` iterations,
    stacked on a new front axis: a strided slice (affine positions) or, for a read whose row
    moves other than affinely, the rows taken through a table of them (``take``), then the
    rest of the index."""
    first = run.first[id(r)]
    if run.tpl.kind[id(r)] == "block":  # blocks of rows, the start moving: one window
        (_, step), a = _block(first.attrs)
        (b,) = run.steps[id(r)]
        count, src = first.shape[0], first.args[0]
        w = ops_window.window(src, (T, count, 0, a, b, step))
        return ops.reshape(w, (T, count, *src.shape[1:]))
    rows = run.rows.get(id(r))
    if rows is None:
        return _scanned(first.args[0], first.attrs, run.steps[id(r)], T)[0]
    if table is None or len(rows) != T:
        raise _Fail
    src = first.args[0]
    taken = ops_table.take(src, table(tuple(float(v) for v in rows)))
    rest = first.attrs[1:]
    return ops.index(taken, ((0, T, 1), *rest)) if rest else taken


def _tiles(run: _Run, T: int) -> dict[int, tuple[tuple, int]]:
    """The block reads of a run (``p[v*P : v*P + n]``, ``p[v*P + n : (v+1)*P]``) that read
    contiguous blocks of one array moving by one step ``b``, when every iteration's blocks of
    that array lie within a *tile* of ``b`` rows that the iterations' tiles cover back to back:
    the loop then scans the tiles (a view of the array, not a copy) and each block is a slice
    of its iteration's tile. Returns block leaf id -> (tile key ``(array id, b)``, the
    block's first row in its tile)."""
    groups: dict[tuple, list[tuple[Node, int]]] = {}
    for r in run.tpl.leaves:
        if run.tpl.kind[id(r)] != "block":
            continue
        (_, step), a = _block(run.first[id(r)].attrs)
        (b,) = run.steps[id(r)]
        if step == 1 and b > 0:
            groups.setdefault((id(r.args[0]), b), []).append((r, a))
    out = {}
    for key, rs in groups.items():
        lo = min(a for _, a in rs)
        hi = max(a + r.shape[0] for r, a in rs)
        if hi - lo <= key[1] and lo + key[1] * T <= rs[0][0].args[0].shape[0]:
            out.update({id(r): (key, a - lo) for r, a in rs})
    return out


def _tile(src: Node, start: int, b: int, T: int) -> Node:
    """The tiles ``src[start + b*k : start + b*(k+1)]`` of :func:`_tiles`, ``(T, b, *rest)``:
    a view of ``src``."""
    return ops.reshape(ops.index(src, ((start, start + b * T, 1),)), (T, b, *src.shape[1:]))


def _unscanned(ys: Node, axis: int) -> Node:
    """Stacked ``ys`` (front axis) with the front axis moved back to ``axis``."""
    if not axis:
        return ys
    perm = list(range(1, ys.ndim))
    perm.insert(axis, 0)
    return ops.transpose(ys, tuple(perm))


def _write_items(items: tuple, step: tuple, T: int) -> tuple:
    pattern, ints = _split_items(items)
    out, j = [], 0
    for p in pattern:
        if p is None:
            a, b = ints[j], step[j]
            j += 1
            out.append((a, a + b * T, b) if b != 0 else a)
        else:
            out.append(p)
    return tuple(out)


class _Differentiable:
    """Whether a node depends on an active input of the trace (memoised, as tracing decides)."""

    def __init__(self, g: Graph):
        self.active = {id(n) for n, k in zip(g.inputs, g.kinds) if k == "active"}
        self.memo: dict[int, tuple[Node, bool]] = {}

    def __call__(self, n: Node) -> bool:
        return ir.depends(n, self._decide, self.memo)

    def _decide(self, m: Node) -> bool | None:
        if m.op == Op.INPUT:
            return id(m) in self.active
        if m.op in ops.NONDIFFERENTIABLE or m.op == Op.CONST:
            return False
        return None


def _build_reduction(
    run: _Run, chain: list[Node], tables: dict[int, Node], table: Callable[[tuple], Node] | None
) -> Node | None:
    """A sum instead of a loop: ``e = e + term`` (``e = e - term``; several terms an
    iteration) whose terms do not read ``e``, are scalars and are built from elementwise ops
    on scalar element reads, params and constants, becomes ``e_0 + sum(terms)`` with the
    terms computed for every iteration at once on the scanned sequences (``x[i+1] - x[i]``
    becomes ``x[1:n] - x[0:n-1]``): fused vector kernels and a vectorised reduction instead of
    one call of a scalar body per iteration. The sum is reassociated (as ``np.sum``), so it
    can differ from the unrolled code's left-to-right sum in the last bits; ``REDUCE = False``
    keeps the sequential loop. ``None`` when the iteration is not of that form."""
    tpl = run.tpl
    carry_ref = chain[tpl.s - 1]
    if carry_ref.type != Type(()) or carry_ref.dtype != "f64":
        return None
    T = run.trips
    kinds = tpl.kind
    dep: dict[int, bool] = {}

    def depends(R: Node) -> bool:  # on the carry, within the template
        if R is carry_ref:
            return True
        if kinds.get(id(R)) != "node":
            return False
        d = dep.get(id(R))
        if d is None:
            d = dep[id(R)] = any(depends(a) for a in R.args)
        return d

    terms: list[tuple[int, Node]] = []
    node = chain[tpl.s]
    while node is not carry_ref:
        if node.op not in (Op.ADD, Op.SUB) or node.type != carry_ref.type:
            return None
        a, b = node.args
        da, db = depends(a), depends(b)
        if da and not db:
            terms.append((1 if node.op == Op.ADD else -1, b))
            node = a
        elif db and not da and node.op == Op.ADD:
            terms.append((1, a))
            node = b
        else:
            return None
    vec: dict[int, Node] = {}

    rows = per_row_builder(T)

    def vectorised(R: Node) -> Node | None:
        """``R`` of every iteration at once: ``(T, *R.shape)``, or ``R`` itself when it is
        the same in every iteration; ``None`` for what cannot be (a loop, a scatter...)."""
        got = vec.get(id(R))
        if got is not None:
            return got
        kind = kinds.get(id(R))
        out: Node | None = None
        if kind == "same":
            out = R
        elif kind in ("xs", "block"):
            out = _read_sequence(run, R, T, table)
        elif kind == "cseq":
            out = tables[id(R)]
        elif kind == "node":
            args = [vectorised(a) for a in R.args]
            if any(a is None for a in args):
                return None
            if all(a is b for a, b in zip(args, R.args)):
                out = R  # the same in every iteration
            else:  # elementwise ops, broadcasts, reductions and static indexing of rows
                out = rows(R, [("same" if a is b else "k", a) for a, b in zip(args, R.args)])
        if out is not None:
            vec[id(R)] = out
        return out

    total: Node | None = None
    for sign, term in reversed(terms):
        v = vectorised(term)
        if v is None:
            return None
        if v.shape != (T,):
            v = ops.broadcast_to(v, (T,))
        if total is None:
            total = v if sign > 0 else ops.neg(v)
        else:
            total = ops.add(total, v) if sign > 0 else ops.sub(total, v)
    if total is None:
        return None
    return ops.add(run.init, ops.reduce(Op.REDUCE_SUM, total, (0,)))


def _build_loop(
    run: _Run, chain: list[Node], number: int, diff: _Differentiable,
    table: Callable[[tuple], Node] | None = None, expose: bool = False,
    pads: frozenset = frozenset(),
) -> tuple[Node, bool, Node | None]:
    """The node that replaces ``chain[run.hi]``, whether it is a sum (no loop), and with
    ``expose`` (a sequential loop), the carries after each iteration stacked (``ys``: what
    replaces ``chain[run.lo + t]``, row ``t``, where the carries are read outside the loop).
    ``table(values)``: a constant input holding ``values`` (the numbers a ``cseq`` leaf takes,
    one per iteration); without it, a run with such a leaf fails. ``pads``: the ids of the
    ``-0.0`` pads of :func:`tapejit.passes.reroll.history.pad_history` (a ``hist`` leaf that
    reads one reads ``-0.0``)."""
    from ...ad import autodiff  # autodiff imports the passes' users; import late

    tpl = run.tpl
    R0 = chain[tpl.s]
    T = run.trips
    prefix = f"r{number}"
    map_mode = tpl.root_varies
    carry_ref = chain[tpl.s - 1]
    # inputs: i, carry (carry mode), xs..., params...
    i_in = ops.input_node(0, f"{prefix}i", Type(()))
    inputs = [i_in]
    mapping: dict[int, Node] = {}
    carries: list[Node] = []
    if not map_mode:
        c_in = ops.input_node(1, f"{prefix}c0", carry_ref.type)
        inputs.append(c_in)
        mapping[id(carry_ref)] = c_in
        carries.append(run.init)
    xs: list[Node] = []
    params: list[Node] = []
    param_refs: list[Node] = []
    tables: dict[int, Node] = {}
    history: list[ops.History] = []
    position = {id(n): k for k, n in enumerate(chain)}
    tiles = _tiles(run, T)
    tile_in: dict[tuple, Node] = {}  # tile key -> the body's input of one tile
    for r in tpl.leaves:
        kind = tpl.kind[id(r)]
        if kind == "hist":  # a row of the loop's own outputs, or of the operand
            if map_mode or len(run.hist.get(id(r), ())) != T:
                raise _Fail
            rows, fb = history_rows(run.hist[id(r)], position, run.lo, pads)
            history.append(ops.History(len(xs), 0, rows))
            x_in = ops.input_node(len(inputs), f"{prefix}x{len(xs)}", r.type)
            inputs.append(x_in)
            xs.append(fallback(T, r, fb, table))
            mapping[id(r)] = x_in
            expose = True  # the outputs the history reads, stacked
        elif kind == "cseq":  # a number per iteration: a constant table, scanned
            if table is None or len(run.tables.get(id(r), ())) != T:
                raise _Fail
            node = tables[id(r)] = table(run.tables[id(r)])
            x_in = ops.input_node(len(inputs), f"{prefix}x{len(xs)}", r.type)
            inputs.append(x_in)
            xs.append(node)
            mapping[id(r)] = x_in
        elif kind == "block" and id(r) in tiles:  # a slice of the iteration's tile
            key, lo = tiles[id(r)]
            if key not in tile_in:
                src, b = r.args[0], key[1]
                tile = _tile(src, _block(run.first[id(r)].attrs)[1] - lo, b, T)
                x_in = ops.input_node(len(inputs), f"{prefix}x{len(xs)}", Type(tile.shape[1:]))
                tile_in[key] = x_in
                inputs.append(x_in)
                xs.append(tile)
            part = tile_in[key]
            if lo != 0 or r.shape[0] != part.shape[0]:
                part = ops.index(part, ((lo, lo + r.shape[0], 1),))
            mapping[id(r)] = part
        elif kind in ("xs", "block"):
            node = _read_sequence(run, r, T, table)
            x_in = ops.input_node(len(inputs), f"{prefix}x{len(xs)}", r.type)
            inputs.append(x_in)
            xs.append(node)
            mapping[id(r)] = x_in
        elif kind == "rmw":  # the initial array at the position written
            if "__root__" in run.rows:
                raise _Fail  # (positions from a table: adds only, which read nothing)
            node, _ = _scanned(run.init, run.root_first_items, run.root_step, T)
            x_in = ops.input_node(len(inputs), f"{prefix}x{len(xs)}", r.type)
            inputs.append(x_in)
            xs.append(node)
            mapping[id(r)] = x_in
        elif kind == "iconst":
            a = run.first[id(r)].attrs[0]
            (b,) = run.steps[id(r)]
            v = i_in
            if b != 1:
                v = ops.mul(v, ops.const(float(b)))
            if a != 0:
                v = ops.add(v, ops.const(float(a)))
            mapping[id(r)] = v
    for r in tpl.leaves:
        if tpl.kind[id(r)] == "same":
            if r.op == Op.CONST:
                mapping[id(r)] = r
                continue
            param_refs.append(r)
    for r in param_refs:
        p_in = ops.input_node(len(inputs), f"{prefix}p{len(params)}", r.type)
        inputs.append(p_in)
        params.append(r)
        mapping[id(r)] = p_in
    if not map_mode and REDUCE and not expose:
        total = _build_reduction(run, chain, tables, table)
        if total is not None:
            return total, True, None
    stages = _stages(run, carry_ref, chain) if map_mode else [R0]
    out_refs = [w.args[1] for w in stages] if map_mode else [R0] * (2 if expose else 1)
    if map_mode:
        stop = {**mapping, id(carry_ref): carry_ref}
        for ref in out_refs:
            if any(n is carry_ref or n in stages for n in _reachable(ref, stop)):
                raise _Fail  # the update reads the carried array elsewhere than where it writes
    outs = substitute(tuple(out_refs), mapping)
    if any(o.dtype != "f64" for o in outs):
        raise _Fail
    n_carry, n_xs = len(carries), len(xs)
    body = Graph("body", tuple(inputs), ("inactive",) * len(inputs), tuple(outs))
    body, all_params = ops.hoist_invariants(body, 1 + n_carry + n_xs, params, f"{prefix}h")
    vjp = None
    if any(diff(n) for n in carries + xs + all_params):
        linked = frozenset(h.x for h in history)
        wrt_xs = tuple(k in linked or diff(x) for k, x in enumerate(xs))
        wrt_params = tuple(diff(p) for p in all_params)
        body, vjp = autodiff.loop_vjp(
            body, n_carry, n_xs, wrt_xs, wrt_params, False, prefix=f"{prefix}b", linked=linked
        )
    spec = ops.LoopSpec(body, n_carry, n_xs, T, start=0, vjp=vjp, history=tuple(history))
    loop = ops.make(Op.LOOP, *carries, *xs, *all_params, attrs=(spec,))
    lay = ops.loop_layout(spec)
    if not map_mode:
        ys = ops.segment(loop, lay.ys[0]) if expose else None
        return ops.segment(loop, lay.carries[0]), False, ys
    acc = run.init
    for w, seg in zip(stages, lay.ys):
        key = "__root__" if w is R0 else id(w)
        if key in run.rows:  # element adds at rows from a table: add_at into the flat array
            rows = run.rows[key]
            _, ints = _split_items(run.root_first_items if w is R0 else run.first[id(w)].attrs)
            strides = [int(np.prod(acc.shape[a + 1 :])) for a in range(acc.ndim)]
            col = sum(i * st for i, st in zip(ints[1:], strides[1:]))
            flat = table(tuple(float(r * strides[0] + col) for r in rows)) if table else None
            if flat is None or len(rows) != T:
                raise _Fail
            summed = ops_table.add_at(ops.reshape(acc, (acc.type.size,)), flat, ops.segment(loop, seg))
            acc = ops.reshape(summed, acc.shape)
            continue
        first, step = _position(run, w, R0)
        ys = _unscanned(ops.segment(loop, seg), _write_axis(first, step))
        acc = ops.make(w.op, acc, ys, attrs=_write_items(first, step, T))
    return acc, False, None


def _position(run: _Run, w: Node, root: Node) -> tuple[tuple, tuple]:
    """Where write ``w`` of the template (the root or an earlier ``write``) writes in the
    loop's first iteration, and how its integers move per iteration."""
    if w is root:
        return run.root_first_items, run.root_step
    return run.first[id(w)].attrs, run.steps[id(w)]


def _stages(run: _Run, carry_ref: Node, chain: list[Node]) -> list[Node]:
    """The writes of one map iteration in order, the carried array's first: ``[y[a_k] = u]``,
    or several (``r[i, 0] = a; r[i, 1] = b``) when each writes a position of its own in every
    iteration (writes may then be done stage by stage, each stage one strided write) — or, when
    all add (``f[e] -= t; f[e + 1] += t``), in any order up to rounding (:data:`REDUCE`; the
    sums then round like a reassociated sum)."""
    tpl, T = run.tpl, run.trips
    w, stages = chain[tpl.s], []
    while True:
        stages.append(w)
        w = w.args[0]
        if w is carry_ref:
            break
        if tpl.kind.get(id(w)) != "write":
            raise _Fail  # the iteration changes the array in some other way too (y[0] = ...)
    stages.reverse()
    writes = {id(r) for r in tpl.leaves if tpl.kind[id(r)] == "write"}
    if writes != {id(w) for w in stages[:-1]}:
        raise _Fail  # a moving write elsewhere than into the carried array (z[i] = ...)
    if len(stages) == 1:
        return stages
    if any(tpl.kind[id(r)] == "rmw" for r in tpl.leaves):
        raise _Fail
    pattern = _split_items(stages[0].attrs)[0]
    if run.rows.keys() & ({"__root__"} | {id(w) for w in stages[:-1]}):
        # adds at rows from a table: in any order up to rounding, as with REDUCE
        if not (REDUCE and all(st.op == Op.SCATTER_ADD for st in stages)):
            raise _Fail
        if any(_split_items(st.attrs)[0] != pattern for st in stages):
            raise _Fail
        return stages
    seen: set[tuple] = set()
    for st in stages:
        first, step = _position(run, st, stages[-1])
        p, ints = _split_items(first)
        if p != pattern or any(it is not None for it in p):
            raise _Fail  # element writes at positions of one form only
        for k in range(T):
            seen.add(tuple(a + b * k for a, b in zip(ints, step)))
    if len(seen) != T * len(stages) and not (REDUCE and all(st.op == Op.SCATTER_ADD for st in stages)):
        raise _Fail  # writes that overwrite each other: their order matters
    return stages


def _write_axis(first: tuple, step: tuple) -> int:
    """Where the varying axis of the written position sits in the written block."""
    pattern, _ = _split_items(first)
    pos, j = 0, 0
    for p in pattern:
        if p is None:
            if step[j] != 0:
                return pos
            j += 1
        else:
            pos += 1
    return 0


def _reachable(out: Node, mapping: dict[int, Node]) -> set:
    """Nodes of the reference iteration reachable from ``out`` without passing a leaf."""
    seen: dict[int, Node] = {}
    todo = [out]
    while todo:
        n = todo.pop()
        if id(n) in seen:
            continue
        seen[id(n)] = n
        if id(n) in mapping:
            continue
        todo.extend(n.args)
    return set(seen.values())


def _replace_all(g: Graph, mapping: dict[int, Node]) -> Graph:
    """``g`` with each node in ``mapping`` replaced by its image, the images themselves rebuilt
    (an image's operands may be nodes that are replaced too). Iterative."""
    memo: dict[int, Node] = {}
    roots = list(g.outputs) + [c for c, _, _ in g.guards]

    def kids(n: Node):
        img = mapping.get(id(n))
        return (img,) if img is not None else n.args

    todo = list(roots)
    while todo:
        n = todo[-1]
        if id(n) in memo:
            todo.pop()
            continue
        ks = kids(n)
        pending = [a for a in ks if id(a) not in memo]
        if pending:
            todo.extend(pending)
            continue
        todo.pop()
        img = mapping.get(id(n))
        if img is not None:
            memo[id(n)] = memo[id(img)]
            continue
        args = tuple(memo[id(a)] for a in n.args)
        memo[id(n)] = (
            n if all(a is b for a, b in zip(args, n.args)) else ir.Node(n.op, args, n.attrs, n.type)
        )
    outs = tuple(memo[id(o)] for o in g.outputs)
    guards = tuple((memo[id(c)], e, w) for c, e, w in g.guards)
    return g.replace(outputs=outs, guards=guards)


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
    node, _, _ = _build_loop(run, chain, number, diff)
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
    diff = _Differentiable(g)
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
                new, summed, ys = _build_loop(run, sub, number, diff, table, expose, pads)
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
