"""Re-rolling, building the loops: from a run (:class:`tapejit.passes.reroll.runs._Run`) the
node that replaces its last iteration — a ``loop`` node in carry mode or map mode, or in sum
mode a vectorised sum (:func:`_build_loop`, :func:`_build_reduction`), with the sequences it
scans (strided slices, windows, tiles, rows through a table) and the strided writes of a map.
The modes and what each guarantees are documented in :mod:`tapejit.passes.reroll.driver`,
which decides which runs to build."""

from __future__ import annotations

from typing import Callable

import numpy as np

from ...ad import autodiff
from ...core import ops, ops_table, ops_window
from ...core.ir import Graph, Node, Type, substitute
from ...core.ops import Op
from .common import _block, _Fail, _scanned, _split_items, _unscanned, _write_items
from .flat import per_row_builder
from .history import fallback, history_rows
from .runs import _Run

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
    run: _Run, chain: list[Node], number: int, diff: Callable[[Node], bool],
    table: Callable[[tuple], Node] | None = None, expose: bool = False,
    pads: frozenset = frozenset(), *, reduce: bool,
) -> tuple[Node, bool, Node | None]:
    """The node that replaces ``chain[run.hi]``, whether it is a sum (no loop), and with
    ``expose`` (a sequential loop), the carries after each iteration stacked (``ys``: what
    replaces ``chain[run.lo + t]``, row ``t``, where the carries are read outside the loop).
    ``table(values)``: a constant input holding ``values`` (the numbers a ``cseq`` leaf takes,
    one per iteration); without it, a run with such a leaf fails. ``pads``: the ids of the
    ``-0.0`` pads of :func:`tapejit.passes.reroll.history.pad_history` (a ``hist`` leaf that
    reads one reads ``-0.0``). ``reduce``: :data:`tapejit.passes.reroll.driver.REDUCE`."""
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
    if not map_mode and reduce and not expose:
        total = _build_reduction(run, chain, tables, table)
        if total is not None:
            return total, True, None
    stages = _stages(run, carry_ref, chain, reduce) if map_mode else [R0]
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


def _stages(run: _Run, carry_ref: Node, chain: list[Node], reduce: bool) -> list[Node]:
    """The writes of one map iteration in order, the carried array's first: ``[y[a_k] = u]``,
    or several (``r[i, 0] = a; r[i, 1] = b``) when each writes a position of its own in every
    iteration (writes may then be done stage by stage, each stage one strided write) — or, when
    all add (``f[e] -= t; f[e + 1] += t``), in any order up to rounding (:data:`~tapejit.passes.reroll.driver.REDUCE`; the
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
        if not (reduce and all(st.op == Op.SCATTER_ADD for st in stages)):
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
    if len(seen) != T * len(stages) and not (
        reduce and all(st.op == Op.SCATTER_ADD for st in stages)
    ):
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


