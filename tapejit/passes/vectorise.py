"""A loop whose iterations are independent, as array code: ``loop -> gathers, a kernel, sums
and scatter-adds``.

A loop converted from the source (:mod:`tapejit.frontend.convert`) whose carries are only
*accumulated* — ``e = e + term(i)`` (a sum), ``F[a] += f(i)`` / ``F[a] -= f(i)`` (a scatter-add
at a position computed in the iteration), or left alone — with every term computed from the
counter and loop-invariant values only, computes the same thing as one array program over the
whole iteration space: each value of the body with a leading axis of length ``n`` (the
*batched* body, as ``jax.vmap`` batches a function), the sums ``reduce_sum`` over that axis, the
scatter-adds one ``add_at`` with every iteration's positions. That program is what the rest of
the pipeline fuses and vectorises best (gathers, one elementwise kernel, scatter-adds — the
re-rolling pass's result for an unrolled trace), and its reverse mode needs no residual stack.

Only the order of the additions changes (a sum is reassociated, and scatter-adds into one
position are added link by link of the body, each over all iterations): the rounding of a
reduction, as for any ``np.sum``. A loop with another kind of carry (a recurrence), a term that
reads a carry, or an op without a batching rule here stays a loop: :func:`vectorise` returns
``None``.
"""

from __future__ import annotations

from ..core import ops
from ..core.ops_table import add_at, put, take
from ..core.ir import Node
from ..core.ops import Op

#: Ops batched by rebuilding them on batched operands (numpy broadcasting aligns the batch
#: axis: every batched operand has it in front, an unbatched one broadcasts over it).
_ELEMENTWISE = frozenset(ops.ELEMENTWISE) | {Op.CAST, Op.STOP_GRADIENT}


class _NoRule(Exception):
    pass


#: The largest value (elements) an iteration may compute and still be batched: a body's small
#: vectors and matrices are; a body that is itself a loop over rows (values of a row's length)
#: stays a loop, whose reverse sweep recomputes it (the batched values would be n x row).
MAX_ROW = 64

#: Whether loops with a traced trip count are batched (masked past the count).
DYNAMIC = False


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
    ``("scatter", [(table, rows, sign), ...])`` (first write first); ``None`` otherwise."""
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
        if n.op == Op.ADD_AT:
            if body.reads_carry(rows):
                return None
            links.append((table, rows, 1.0))
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
            links.append((table, ops.reshape(u, rows.shape) if u.shape != rows.shape else u, inc[1]))
        n = prev
    if n is cin and links:
        return ("scatter", links[::-1])
    return None


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


def _at_counter(body: _Body, table: Node) -> bool:
    """Whether a one-entry table is the counter itself (``y[i] = ...``, the position proved in
    range): every iteration then writes a row of its own."""
    t = _strip(table)
    return table.shape == (1,) and t is body.g.inputs[0]


class _Batcher:
    """Values of the body with a leading axis of ``n`` iterations (``None`` when a value does
    not vary with the iteration); builds outer-trace nodes."""

    def __init__(self, body: _Body, n: int, counter: Node, params: list[Node],
                 mask: Node | None = None):  # fmt: skip
        g, spec = body.g, body.spec
        self.n = n
        self.mask = mask
        self.counter_input = g.inputs[0]
        self.start = spec.start
        self.memo: dict[int, tuple[Node, bool]] = {id(g.inputs[0]): (counter, True)}
        first = 1 + spec.n_carry + spec.n_xs
        for inp, outer in zip(g.inputs[first:], params):
            self.memo[id(inp)] = (outer, False)

    def value(self, n: Node) -> tuple[Node, bool]:
        hit = self.memo.get(id(n))
        if hit is not None:
            return hit
        stack = [n]
        while stack:  # iterative post-order (bodies can be deep chains)
            top = stack[-1]
            pending = [a for a in top.args if id(a) not in self.memo]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            if id(top) not in self.memo:
                self.memo[id(top)] = self._one(top)
        return self.memo[id(n)]

    def masked_rows(self, v: Node, batched: bool, shape: tuple, zero: bool = False) -> Node:
        """``v`` (batched: ``(n, *shape)``; else ``shape``, broadcast) with the iterations past
        a dynamic loop's count masked: zero (``zero``), or the value with a zero cotangent
        there — so a row that is never run contributes nothing, even where it is inf/NaN."""
        N = self.n
        if not batched:
            v = ops.broadcast_to(ops.reshape(v, (1, *shape)), (N, *shape))
        m = ops.reshape(self.mask, (N, *([1] * len(shape))))
        if zero:
            return ops.where(m, v, ops.const(0.0, v.shape))
        return ops.where(m, v, ops.make(Op.STOP_GRADIENT, v))

    def _one(self, n: Node) -> tuple[Node, bool]:
        if n.op == Op.INPUT:
            raise _NoRule("a carry read by a term")
        if n.op == Op.CONST:
            return n, False
        args = [self.memo[id(a)] for a in n.args]
        if not any(b for _, b in args):
            return ops.make(n.op, *(a for a, _ in args), attrs=n.attrs), False
        N = self.n
        if n.type.size > MAX_ROW:
            raise _NoRule("iterations whose values are large arrays (a loop of rows)")
        if self.mask is not None and n.op != Op.TAKE:  # an invariant float joining the rows
            args = [(self.masked_rows(a, False, a.shape), True)
                    if not b and a.dtype == "f64" and a.op != Op.CONST else (a, b)
                    for a, b in args]  # fmt: skip
        out = self._rule(n, args)
        if self.mask is not None and n.op == Op.TAKE:
            return self.masked_rows(out[0], True, n.shape), True
        return out

    def _rule(self, n: Node, args) -> tuple[Node, bool]:
        N = self.n
        if n.op in _ELEMENTWISE:
            out = (N, *n.shape)
            # an unbatched operand broadcasts over the batch axis (numpy aligns trailing axes);
            # a batched one of fewer axes than the result gets its missing ones in the middle
            fixed = []
            for x, b in args:
                if b and x.ndim < len(out):
                    x = ops.reshape(x, (N, *([1] * (len(out) - x.ndim)), *x.shape[1:]))
                fixed.append(x)
            if n.attrs:
                return ops.make(n.op, *ops._bcast(*fixed), attrs=n.attrs), True
            return ops.elementwise(n.op, *fixed), True
        x, xb = args[0]
        if n.op == Op.RESHAPE and xb:
            return ops.reshape(x, (N, *n.attrs[0])), True
        if n.op == Op.INDEX and xb:
            return ops.make(Op.INDEX, x, attrs=((0, N, 1), *n.attrs)), True
        if n.op == Op.TRANSPOSE and xb:
            return ops.transpose(x, (0, *(p + 1 for p in n.attrs[0]))), True
        if n.op in ops.REDUCE and xb and n.attrs:
            return ops.make(n.op, x, attrs=(tuple(a + 1 for a in n.attrs[0]),)), True
        if n.op == Op.BROADCAST_TO and xb:
            shape = n.attrs[0]
            s = x.shape[1:]
            x = ops.reshape(x, (N, *([1] * (len(shape) - len(s))), *s))
            return ops.broadcast_to(x, (N, *shape)), True
        if n.op == Op.TAKE:
            (src, sb), (tab, tb) = args
            if sb or not tb:
                raise _NoRule("a gather from a value computed in the iteration")
            first = self._counter_offset(n.args[1])
            if first is not None and 0 <= first and first + N <= src.shape[0]:
                # x[i + c] over the iterations: rows first, first + 1, ... — a slice, read in order
                rows = ops.index(src, ((first, first + N, 1),))
            else:
                rows = take(src, ops.reshape(tab, (N * n.args[1].shape[0],)))
            return ops.reshape(rows, (N, *n.shape)), True
        if n.op == Op.MATMUL:
            return self._matmul(n, args), True
        raise _NoRule(f"no batching rule for {n.op}")

    def _counter_offset(self, table: Node) -> int | None:
        """The first row a one-entry table reads when it is the counter plus a whole constant
        (``x[i]``, ``x[i + 1]``: consecutive rows over the iterations), else ``None``."""
        if table.shape != (1,):
            return None
        t = _strip(table)
        shift = 0.0
        if t.op == Op.ADD:
            a, b = t.args
            if b.op == Op.CONST and b.shape == ():
                t, shift = a, b.attrs[0]
            elif a.op == Op.CONST and a.shape == ():
                t, shift = b, a.attrs[0]
        if t is not self.counter_input or shift != int(shift):
            return None
        return self.start + int(shift)

    def _matmul(self, n: Node, args) -> Node:
        """``a @ b`` per iteration (``a`` 2-D, ``b`` 1-D or 2-D, as the ``matmul`` node has them)
        with either or both batched: one product over the stacked rows, or, both batched, the
        products' sums (a small contraction: a scalarised body's 3-vectors)."""
        N = self.n
        (a, ab), (b, bb) = args
        A, B = n.args
        if A.ndim != 2 or B.ndim not in (1, 2):
            raise _NoRule("matmul of other ranks")
        p, k = A.shape
        if ab and bb:
            if B.ndim == 1:  # (N, p, k) * (N, 1, k), summed over k
                prod = ops.mul(a, ops.reshape(b, (N, 1, k)))
                return ops.reduce(Op.REDUCE_SUM, prod, (2,))
            m = B.shape[1]
            prod = ops.mul(ops.reshape(a, (N, p, k, 1)), ops.reshape(b, (N, 1, k, m)))
            return ops.reduce(Op.REDUCE_SUM, prod, (2,))
        if ab:  # stacked rows times a shared matrix or vector
            flat = ops.make(Op.MATMUL, ops.reshape(a, (N * p, k)), b)
            return ops.reshape(flat, (N, *n.shape))
        # a shared matrix times stacked vectors or matrices: (b_t^T a^T)^T
        at = ops.transpose(a, (1, 0))
        if B.ndim == 1:
            return ops.make(Op.MATMUL, b, at)  # (N, k) @ (k, p)
        m = B.shape[1]
        bt = ops.reshape(ops.transpose(b, (0, 2, 1)), (N * m, k))
        prod = ops.reshape(ops.make(Op.MATMUL, bt, at), (N, m, p))
        return ops.transpose(prod, (0, 2, 1))


def vectorise(loop: Node, counter: Node) -> list[Node] | None:
    """The final carries of ``loop`` (a ``loop`` node of a counted loop without xs, ys or a
    condition) computed as array code, or ``None`` when it is not a loop of independent
    iterations (see the module docstring). The nodes are built on ``loop``'s operands;
    ``counter`` holds the counter's values, ``start, start + 1, ...`` (shape ``(n,)``)."""
    spec = loop.attrs[0]
    if spec.cond is not None or spec.n_xs or spec.history or spec.accumulate:
        return None
    if spec.reverse or spec.max_steps < 1:
        return None
    body = _Body(spec)
    plans = []
    for k in range(spec.n_carry):
        p = _accumulation(body, k)
        if p is None or (spec.dynamic and (p[0] == "put" or not DYNAMIC)):
            return None
        plans.append(p)
    N = spec.max_steps
    lead = 1 if spec.dynamic else 0
    carries = loop.args[lead : lead + spec.n_carry]
    params = list(loop.args[lead + spec.n_carry :])
    mask = None
    if spec.dynamic:  # iterations past the traced count: computed, then masked out
        t = ops.sub(counter, ops.const(float(spec.start)))
        mask = ops.make(Op.LT, t, loop.args[0])
    b = _Batcher(body, N, counter, params, mask)
    out = []
    try:
        for c0, plan in zip(carries, plans):
            if plan[0] == "same":
                out.append(c0)
            elif plan[0] == "put":
                t, tb = b.value(plan[1])
                r, rb = b.value(plan[2])
                if not tb:
                    raise _NoRule("a put at a fixed row")
                r = r if rb else ops.broadcast_to(r, (N, *plan[2].shape))
                out.append(put(c0, ops.reshape(t, (N,)), ops.reshape(r, (N, *plan[2].shape[1:]))))
            elif plan[0] == "sum":
                total = c0
                for sign, term in plan[1]:
                    v, vb = b.value(term)
                    if mask is not None:
                        v, vb = b.masked_rows(v, vb, term.shape, zero=True), True
                    s = ops.reduce(Op.REDUCE_SUM, v, (0,)) if vb else ops.mul(v, ops.const(float(N)))
                    total = ops.add(total, s) if sign > 0 else ops.sub(total, s)
                out.append(total)
            else:
                acc = c0
                for table, rows, sign in plan[1]:
                    t, tb = b.value(table)
                    r, rb = b.value(rows)
                    T = table.shape[0]
                    t = ops.reshape(t if tb else ops.broadcast_to(t, (N, T)), (N * T,))
                    r = r if rb else ops.broadcast_to(r, (N, *rows.shape))
                    if mask is not None:
                        r = b.masked_rows(r, True, rows.shape, zero=True)
                    r = ops.reshape(r, (N * T, *rows.shape[1:]))
                    if sign < 0:
                        r = ops.neg(r)
                    acc = add_at(acc, t, r)
                out.append(acc)
    except (_NoRule, ValueError, TypeError):
        return None
    return out


__all__ = ["parallel", "vectorise"]


def parallel(spec) -> bool:
    """Whether every carry of loop ``spec`` is only accumulated (sums, scatter-adds, rows of
    its own), so that its iterations are independent."""
    if spec.cond is not None or spec.n_xs or spec.history or spec.accumulate:
        return False
    body = _Body(spec)
    return all(_accumulation(body, k) is not None for k in range(spec.n_carry))
