"""Which carries of a loop body are *accumulated*, for :mod:`tapejit.passes.vectorise`.

A carry is accumulated when each iteration only adds to it — a sum ``e = e + term`` (through a
converted ``if`` that adds in one branch, too), scatter-adds ``F[a] += f`` at positions computed
in the iteration (``put`` of ``take(prev, t) ± u``, elements ``g[j, 0] += v`` of a row), rows of
its own (``y[i] = ...``) — or when it is left alone; :func:`_accumulation` says which, with the
terms. :func:`_split_loops` rewrites a body's inner loops of sums as ``init + S`` (the loop run
from zero), so that the outer loop sees terms of its counter and a nest can be flattened.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..core import ops
from ..core.ir import Graph, Node, substitute
from ..core.loop_spec import loop_layout
from ..core.ops import Op


def _strip(n: Node) -> Node:
    while n.op in (Op.RESHAPE, Op.BROADCAST_TO):
        n = n.args[0]
    return n


def _increment(upd: Node, prev: Node, table: Node) -> tuple[Node, float] | None:
    """``(u, sign)`` when ``upd`` (a ``put``'s rows) is ``take(prev, table) ± u`` up to
    reshapes: the put is then ``add_at(prev, table, ±u)`` (the same rounding: ``a - u`` is
    ``a + (-u)`` exactly)."""
    s = _strip(upd)
    if s.op not in (Op.ADD, Op.SUB):
        return None
    a, b = s.args
    for read, other, sign in ((a, b, 1.0 if s.op == Op.ADD else -1.0), (b, a, 1.0)):
        if s.op == Op.SUB and read is b:
            break
        r = _strip(read)
        if r.op == Op.TAKE and r.args[0] is prev and r.args[1] is table:
            return other, sign
    return None


class _Body:
    """The forward body of ``spec`` with dependence queries on its carry inputs."""

    def __init__(self, spec):
        self.spec = spec
        self.g = spec.body
        self.carry_in = self.g.inputs[1 : 1 + spec.n_carry]
        self._dep: dict[int, bool] = {}
        carry_ids = {id(c) for c in self.carry_in}
        for n in self.g.nodes:  # topological
            self._dep[id(n)] = id(n) in carry_ids or any(self._dep.get(id(a), False) for a in n.args)

    def reads_carry(self, n: Node) -> bool:
        return self._dep.get(id(n), False)


def _accumulation(body: _Body, k: int):
    """How carry ``k`` is updated: ``("same",)``, ``("sum", [(sign, term), ...])`` or
    ``("scatter", [(table, rows, sign, flat), ...])`` (first write first; ``flat``: the table
    holds element positions into the carry viewed flat, rows one element each, as
    ``g[j, 0] += v`` adds); ``None`` otherwise."""
    cin, out = body.carry_in[k], body.g.outputs[k]
    if out is cin:
        return ("same",)
    d = _delta(body, out, cin)
    if d is not None:
        return ("sum", [(1.0, d)])
    links, n = [], out
    while n is not cin and n.op in (Op.ADD_AT, Op.PUT) and n.type == cin.type:
        prev, table, rows = n.args
        if body.reads_carry(table):
            return None
        if n.op == Op.PUT and _strip(rows).op == Op.TAKE and _strip(rows).args[0] is prev \
                and _strip(rows).args[1] is table and rows.type == _strip(rows).type:
            pass  # a row written back as it is (``F[i] += f`` stores F[i] again): no change
        elif n.op == Op.ADD_AT:
            if body.reads_carry(rows):
                return None
            links.append((table, rows, 1.0, False))
        elif (elems := _element_increments(rows, prev, table)) is not None:
            if any(body.reads_carry(v) for _, v, _, _ in elems):
                return None
            links += elems[::-1]
        else:
            inc = _increment(rows, prev, table)
            if inc is None and prev is cin and not links and _at_counter(body, table):
                if body.reads_carry(rows):
                    return None
                return ("put", table, rows)  # y[i] = v(i): distinct rows, any order
            if inc is None or body.reads_carry(inc[0]):
                return None
            u = inc[0]
            if u.type.size != rows.type.size:
                return None
            u = ops.reshape(u, rows.shape) if u.shape != rows.shape else u
            links.append((table, u, inc[1], False))
        n = prev
    if n is cin and links:
        return ("scatter", links[::-1])
    return None


def _element_increments(rows: Node, prev: Node, table: Node) -> list | None:
    """The links ``(flat table, value, +1.0, True)`` when ``rows`` (a ``put``'s one row at
    ``table``) is that row of ``prev`` with single elements added to
    (``g[j, 0] += v; g[j, 2] -= w`` traces to ``scatter_add``s into the row read), first
    write first; ``None`` otherwise. Each becomes an addition at the element's flat position
    (``j * width + k``): the other elements are not touched (not even by ``+ 0.0``)."""
    if table.shape != (1,) or prev.ndim < 2:
        return None
    row_shape = prev.shape[1:]
    width = prev.type.size // prev.shape[0]
    out = []
    n = _strip(rows)
    while n.op == Op.SCATTER_ADD:
        items = n.attrs
        if len(items) != len(row_shape) or not all(isinstance(k, int) for k in items):
            return None
        try:
            off = int(np.ravel_multi_index(tuple(k % d for k, d in zip(items, row_shape)), row_shape))
        except ValueError:
            return None
        flat = ops.add(ops.mul(table, ops.const(float(width))), ops.const(float(off)))
        out.append((flat, ops.reshape(n.args[1], (1,)), 1.0, True))
        n = _strip(n.args[0])
    if not out or n.op != Op.TAKE or n.args[0] is not prev or n.args[1] is not table:
        return None
    return out[::-1]


def _delta(body: _Body, o: Node, cin: Node) -> Node | None:
    """``o - cin`` as a node of the body that reads no carry, when ``o`` is ``cin`` plus or
    minus such terms, also through a select on a condition that reads no carry (a converted
    ``if`` that adds to a sum in one branch) and through a branch's mask of its input;
    ``None`` otherwise. Each node is decomposed once (branches share their history)."""
    seen: set[int] = set()
    stack = [o]
    while stack:  # the nodes on carry paths below o
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if n is not cin:
            stack.extend(a for a in n.args if body.reads_carry(a))
    memo: dict[int, Node | None] = {}
    for n in body.g.nodes:  # topological: operands first
        if id(n) in seen:
            memo[id(n)] = _delta_one(body, n, cin, memo)
    return memo.get(id(o))


def _delta_one(body: _Body, o: Node, cin: Node, memo: dict) -> Node | None:
    if o is cin:
        return ops.const(0.0, cin.shape)
    if not body.reads_carry(o) or o.shape != cin.shape:
        return None
    d = lambda n: memo.get(id(n))  # noqa: E731
    if o.op in (Op.ADD, Op.SUB):
        a, b = o.args
        if body.reads_carry(a) and not body.reads_carry(b):
            da = d(a)
            if da is None:
                return None
            return ops.add(da, b) if o.op == Op.ADD else ops.sub(da, b)
        if o.op == Op.ADD and body.reads_carry(b) and not body.reads_carry(a):
            db = d(b)
            return None if db is None else ops.add(a, db)
        return None
    if o.op == Op.WHERE and o.args[2].op == Op.STOP_GRADIENT and o.args[2].args[0] is o.args[1]:
        return d(o.args[1])  # a converted branch's masked input
    if o.op == Op.WHERE and not body.reads_carry(o.args[0]):
        da, db = d(o.args[1]), d(o.args[2])
        if da is None or db is None:
            return None
        return ops.where(o.args[0], da, db)
    return None


def _inner_plans(spec) -> tuple[_Body, list] | None:
    """The body (its own inner loops split, :func:`_split_loops`) and accumulation plans of
    an inner loop ``spec`` whose carries are all sums or left alone (what
    :func:`_split_loops` and the batcher's loop rule handle), else ``None``."""
    if spec.cond is not None or spec.n_xs or spec.history or spec.accumulate or spec.reverse:
        return None
    split = _split_loops(spec.body)
    inner = _Body(spec if split is spec.body else _replace_body(spec, split))
    plans = [_accumulation(inner, k) for k in range(spec.n_carry)]
    if any(p is None or p[0] not in ("same", "sum", "scatter") for p in plans):
        return None
    return inner, plans


def _split_loops(g: Graph) -> Graph:
    """``g`` (a loop body) with each carry result of an inner loop whose carries are sums
    (``for j in ...: e += term(i, j)``) written as ``init + S``: ``init`` the carry the inner
    loop starts from, ``S`` the same loop's result started from zero. ``S`` no longer reads the
    outer loop's carries through ``init``, so the outer loop's sums see ``e + S`` (a term of
    the counter) and the nest batches as one iteration space (the batcher's loop rule). The
    additions are reassociated, as any batched sum's. Other inner loops are left as they are."""
    mapping: dict[int, Node] = {}
    zeroed: dict[int, tuple[Node, list] | None] = {}  # id(loop) -> (loop from zero, plans)
    parts: dict[int, tuple[Node, Node | None, tuple]] = {}  # id(index) -> (init, S flat, shape)
    for n in g.nodes:  # topological: a segment's index before its reshape
        if n.op == Op.RESHAPE and id(n.args[0]) in parts:
            init, part, shape = parts[id(n.args[0])]
            if n.shape == shape:  # the carry in its own shape: init + S, shapes kept
                mapping[id(n)] = init if part is None else ops.add(init, ops.reshape(part, shape))
            continue
        if n.op != Op.INDEX or n.args[0].op != Op.LOOP:
            continue
        loop = n.args[0]
        spec = loop.attrs[0]
        lead = 1 if spec.dynamic else 0
        if id(loop) not in zeroed:
            hit = _inner_plans(spec)
            if hit is None:
                zeroed[id(loop)] = None
            else:
                args = list(loop.args)
                for k in range(spec.n_carry):
                    args[lead + k] = ops.const(0.0, args[lead + k].shape)
                zeroed[id(loop)] = (ops.make(Op.LOOP, *args, attrs=loop.attrs), hit[1])
        hit = zeroed[id(loop)]
        if hit is None:
            continue
        z, plans = hit
        for k, seg in enumerate(loop_layout(spec).carries):
            if n.attrs == ((seg.offset, seg.offset + seg.size, 1),):
                init = loop.args[lead + k]
                part = None if plans[k][0] == "same" else ops.index(z, n.attrs)
                parts[id(n)] = (init, part, seg.shape)
                flat_init = ops.reshape(init, (seg.size,))
                mapping[id(n)] = flat_init if part is None else ops.add(flat_init, part)
                break
    if not mapping:
        return g
    return g.replace(outputs=substitute(g.outputs, mapping))


def _replace_body(spec, body: Graph):
    return replace(spec, body=body, vjp=None, _repr=[])


def _is_zero(n: Node) -> bool:
    """Whether ``n`` is the constant ``+0.0`` (adding it changes nothing, even to ``-0.0``
    sums: the sums it starts are added from ``+0.0`` too)."""
    return n.op == Op.CONST and n.attrs[0] == 0.0 and not np.signbit(n.attrs[0])


def _without_zero_adds(n: Node) -> Node:
    """``n`` without reshapes and additions of ``+0.0`` around it (a sum's ``0.0 + ...``)."""
    s = _strip(n)
    while s.op == Op.ADD and (_is_zero(s.args[0]) or _is_zero(s.args[1])):
        s = _strip(s.args[1] if _is_zero(s.args[0]) else s.args[0])
    return s


def _at_counter(body: _Body, table: Node) -> bool:
    """Whether a one-entry table is the counter itself (``y[i] = ...``, the position proved in
    range): every iteration then writes a row of its own."""
    t = _strip(table)
    return table.shape == (1,) and t is body.g.inputs[0]
