"""The ``"control"`` row: a ``loop`` node (:class:`tapejit.core.ops.LoopSpec`) as a rolled native
loop calling the functions of its body and condition, with the links (histories and accumulated
ys) read from constant row tables — registered into :data:`.lowering.LOWER`. The body's
function comes from the driver's ``sub_function`` (the same lowering, one function per body)."""

from __future__ import annotations

import llvmlite.ir as ir

from ...core import ops
from ...core.ir import Node

from .base import ELEM, F64, I64
from .lowering import LOWER, Lowering


def _row_of(L: Lowering, rows: tuple[int, ...], tt: ir.Value) -> ir.Value:
    """``rows[tt]`` (i64), read from a constant table emitted once per module and ``rows``."""
    tables = L.module.__dict__.setdefault("_tapejit_rows", {})
    table = tables.get(rows)
    if table is None:
        ty = ir.ArrayType(I64, len(rows))
        table = ir.GlobalVariable(L.module, ty, name=f"{L.name}.rows{len(tables)}")
        table.initializer = ty([I64(r) for r in rows])
        table.global_constant = True
        table.linkage = "internal"
        tables[rows] = table
    return L.b.load(L.b.gep(table, [I64(0), tt], inbounds=True))


def _lower_loop_node(L: Lowering, n: Node) -> None:
    """A ``loop`` node (see :class:`tapejit.core.ops.LoopSpec`) as a rolled native loop: the carries
    live in the node's result (``carry_a``); each iteration calls the body's function with
    pointers to the index, the carries, this iteration's slices of the xs and the params, and
    gets the next carries in scratch (``carry_b``, copied back) and its ys written straight into
    the stacked results; a condition is a function called before each iteration. The number of
    iterations run is stored in the result and added to the program's iteration counters.

    Links (:class:`tapejit.core.ops.History`, :class:`tapejit.core.ops.Accumulate`) read their ``rows``
    from a constant ``i64`` table in the module at ``tt``: a history xs is a pointer into the
    result where ``rows[tt] >= 0``, its operand's row ``tt`` elsewhere (a ``select``); an
    accumulated y is zeroed before the loop, written by the body to scratch (``acc_b``) and
    added to its row after the call. A loop without links emits the code it always did."""
    spec, lp = n.attrs[0], L.prog.loops[id(n)]
    lay = ops.loop_layout(spec)
    b = L.b
    lead = 1 if spec.dynamic else 0
    carries = n.args[lead : lead + spec.n_carry]
    xs = n.args[lead + spec.n_carry : lead + spec.n_carry + spec.n_xs]
    params = n.args[lead + spec.n_carry + spec.n_xs :]
    out = L.ptr(n)
    ws = L.fn.args[-1]

    def at(p: ir.Value, elems: ir.Value | int) -> ir.Value:
        return b.gep(p, [elems if isinstance(elems, ir.Value) else I64(elems)], inbounds=True)

    def scratch(off: int) -> ir.Value:
        return b.bitcast(b.gep(ws, [I64(off)], inbounds=True), F64.as_pointer())

    def pointer(a: Node) -> ir.Value:
        if a.shape != ():
            return L.ptr(a)
        slot = L.entry_alloca(ELEM[a.dtype])  # a scalar in memory, as the body's input
        L.store_to(slot, I64(0), L.load(a, None), a.dtype)
        return slot

    carry_a = [at(out, seg.offset) for seg in lay.carries]
    carry_b = [scratch(off) for off in lp.carry_b]
    for a, dst in zip(carries, carry_a):
        if a.shape == ():
            b.store(L.load(a, None), dst)
        else:
            L.copy_into(dst, a)
    x_ptrs = [L.ptr(x) for x in xs]
    p_ptrs = [pointer(p) for p in params]
    hist = {h.x: h for h in spec.history}
    accs = {a.y: (a, lp.acc_b[k]) for k, a in enumerate(spec.accumulate)}
    for y in accs:  # an accumulated y starts at zero (every row, also those no iteration adds to)
        seg = lay.ys[y]
        with L.loop(seg.size) as i:
            b.store(F64(0.0), at(out, b.add(I64(seg.offset), i)))
    limit: ir.Value = I64(spec.max_steps)
    if spec.dynamic:
        s = b.fptosi(L.load(n.args[0], None), I64)
        s = b.select(b.icmp_signed("<", s, I64(0)), I64(0), s)
        limit = b.select(b.icmp_signed(">", s, limit), limit, s)
    body_fn = L.sub_function(lp.body, f"body:{spec!r}")
    cond_fn = L.sub_function(lp.cond, f"cond:{spec!r}") if lp.cond is not None else None
    i_slot = L.entry_alloca(F64)
    count = L.entry_alloca(I64)
    b.store(I64(0), count)
    head = L.fn.append_basic_block("loopnode.head")
    step = L.fn.append_basic_block("loopnode.step")
    done = L.fn.append_basic_block("loopnode.done")
    b.branch(head)
    b.position_at_end(head)
    t = b.load(count)
    b.cbranch(b.icmp_signed("<", t, limit), step, done)
    b.position_at_end(step)
    tt = b.sub(b.sub(limit, I64(1)), t) if spec.reverse else t

    def call(fn: ir.Function, ins: list, outs: list, work: int) -> None:
        args = [*ins, *outs, b.gep(ws, [I64(work)], inbounds=True)]
        b.call(
            fn,
            [b.bitcast(v, ty) if v.type != ty else v for v, ty in zip(args, fn.function_type.args)],
        )

    if cond_fn is not None:
        cond_out = scratch(lp.cond_out)
        call(cond_fn, [*carry_a, *p_ptrs], [cond_out], lp.cond_ws)
        go = L.fn.append_basic_block("loopnode.go")
        b.cbranch(b.fcmp_unordered("!=", b.load(cond_out), F64(0.0)), go, done)
        b.position_at_end(go)
    b.store(b.sitofp(b.add(tt, I64(spec.start)), F64), i_slot)
    x_t = [at(p, b.mul(tt, I64(x.type.size // spec.max_steps))) for p, x in zip(x_ptrs, xs)]
    for k, h in hist.items():  # rows[tt] >= 0: that row of the loop's own stacked y
        seg = lay.ys[h.y]
        r = _row_of(L, h.rows, tt)
        own = b.gep(out, [b.add(I64(seg.offset), b.mul(r, I64(seg.size // spec.max_steps)))])
        x_t[k] = b.select(b.icmp_signed(">=", r, I64(0)), own, x_t[k])
    ys = [
        scratch(accs[y][1])
        if y in accs
        else at(out, b.add(I64(seg.offset), b.mul(tt, I64(seg.size // spec.max_steps))))
        for y, seg in enumerate(lay.ys)
    ]
    donated = set(lp.body.donated)  # carries the body updates in place: one buffer
    outs = [a if k in donated else c for k, (a, c) in enumerate(zip(carry_a, carry_b))]
    call(body_fn, [i_slot, *carry_a, *x_t, *p_ptrs], [*outs, *ys], lp.body_ws)
    for k, (seg, src, dst) in enumerate(zip(lay.carries, carry_b, carry_a)):
        if k in donated:
            continue
        with L.loop(seg.size) as i:
            b.store(b.load(at(src, i)), at(dst, i))
    for y, (a, _) in accs.items():  # rows[tt] >= 0: add y_t to that row
        seg, size = lay.ys[y], lay.ys[y].size // spec.max_steps
        r = _row_of(L, a.rows, tt)
        add = L.fn.append_basic_block("loopnode.acc")
        cont = L.fn.append_basic_block("loopnode.acc.done")
        b.cbranch(b.icmp_signed(">=", r, I64(0)), add, cont)
        b.position_at_end(add)
        row = at(out, b.add(I64(seg.offset), b.mul(r, I64(size))))
        with L.loop(size) as i:
            p = at(row, i)
            b.store(b.fadd(b.load(p), b.load(at(ys[y], i))), p)
        b.branch(cont)
        b.position_at_end(cont)
    b.store(b.add(t, I64(1)), count)
    b.branch(head)
    b.position_at_end(done)
    ran = b.load(count)
    b.store(b.sitofp(ran, F64), at(out, lay.steps))
    counters = L.__dict__.get("counters")
    if counters is not None and id(n) in counters:
        p = b.gep(counters[0], [I64(0), I64(counters[id(n)])], inbounds=True)
        b.store(b.add(b.load(p), ran), p)


LOWER["control"] = _lower_loop_node
