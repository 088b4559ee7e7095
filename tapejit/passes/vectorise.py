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
``None``. Which carries are accumulated, and the rewrite of a nest's inner loops, is
:mod:`tapejit.passes.accumulation`'s; a flattened nest's ragged layout and its windows
:mod:`tapejit.passes.nest_layout`'s.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from ..core import ops
from ..core.ops_table import add_at, put, take
from ..core.ir import Node
from ..core.loop_spec import loop_layout
from ..core.ops import Op
from ..core.ops_window import window, window_add
from .accumulation import (_accumulation, _Body, _inner_plans, _is_zero, _replace_body,
                           _split_loops, _strip, _without_zero_adds)
from .nest_layout import Forms, Layout, window_or_take
from . import small_arrays

#: Ops batched by rebuilding them on batched operands (numpy broadcasting aligns the batch
#: axis: every batched operand has it in front, an unbatched one broadcasts over it).
_ELEMENTWISE = frozenset(ops.ELEMENTWISE) | {Op.CAST, Op.STOP_GRADIENT}


class _NoRule(Exception):
    pass


#: The largest value (elements) an iteration may compute and still be batched when the
#: batched value (``n`` times as large) would pass :data:`MAX_FLAT` elements: a body's small
#: vectors and matrices always are; a body that is itself a loop over long rows (values of a
#: row's length) over many iterations stays a loop, whose reverse sweep recomputes it. A nest
#: whose rows were batched already (a stencil's ``for i: for j:``) is batched as a whole.
MAX_ROW = 64

#: Whether loops with a traced trip count are batched (masked past the count).
DYNAMIC = False

#: The most iterations a nest of loops is flattened into (pairs ``i < j`` of a pair loop): the
#: tables of the flattened iteration space (float64 positions, captured with the code) are this
#: long — 4 Mi pairs, 32 MiB a table, about N = 2900 atoms of an all-pairs loop; a larger nest
#: stays a loop of loops.
MAX_FLAT = 1 << 22

#: Whether a flattened nest whose inner trip counts are affine in the row reads and writes
#: through windows of its ragged layout where its tables allow (:mod:`tapejit.passes.nest_layout`).
WINDOWS = True
#: Whether those windows are found from how the positions were built (affine forms, O(1))
#: before evaluating the tables (O(pairs)); off, every table is evaluated and fitted.
FORMS = True


class Constants(Protocol):
    """What batching a nest of loops needs of the enclosing trace (given by the tracer)."""

    def array(self, a: np.ndarray) -> Node:
        """A node holding the captured array ``a`` (a table of the flattened iteration space)."""

    def value(self, n: Node) -> np.ndarray | None:
        """The value of ``n`` when it is known when compiling (computed from constants and
        captured arrays only), else ``None``."""


class _Window:
    """The positions of a scatter-add link that are a window of a flattened nest's ragged
    layout (its attributes), in place of a table."""

    def __init__(self, attrs: tuple):
        self.attrs = attrs


def _add_link(acc: Node, t, r: Node, flat: bool) -> Node:
    """``add_at(acc, t, r)`` (``window_add`` when ``t`` is a :class:`_Window`); for a
    ``flat`` link, into ``acc`` viewed as one axis."""
    def add(a, u):
        return window_add(a, u, t.attrs) if isinstance(t, _Window) else add_at(a, t, u)

    if not flat:
        return add(acc, r)
    size = acc.type.size
    return ops.reshape(add(ops.reshape(acc, (size,)), ops.reshape(r, (r.type.size,))), acc.shape)


class _Batcher:
    """Values of the body with a leading axis of ``n`` iterations (``None`` when a value does
    not vary with the iteration); builds outer-trace nodes."""

    def __init__(self, body: _Body, n: int, counter: Node, params: list,
                 mask: Node | None = None, consts: Constants | None = None,
                 layout: Layout | None = None):  # fmt: skip
        g, spec = body.g, body.spec
        self.n = n
        self.mask = mask
        self.consts = consts
        #: the iterations as a ragged layout (a flattened nest's pairs), when they are one:
        #: tables affine in its rows are windows (:mod:`tapejit.passes.nest_layout`)
        self.layout = layout
        #: affine forms of the values built over the iterations (tables known without
        #: evaluating them: :class:`tapejit.passes.nest_layout.Forms`)
        self.forms = Forms(layout or Layout(n, 1, 0))
        #: id(inner loop) -> {offset of a carry: its batched value, (n, size)}
        self.loops: dict[int, dict[int, Node]] = {}
        #: (id(inner loop), offset of a carry) -> its scatter-add links over every iteration
        self.scatters: dict[tuple[int, int], list] = {}
        self.counter_input = g.inputs[0]
        self.start = spec.start
        self.memo: dict[int, tuple[Node, bool]] = {id(g.inputs[0]): (counter, True)}
        first = 1 + spec.n_carry + spec.n_xs
        for inp, outer in zip(g.inputs[first:], params):  # a pair: (node, batched)
            self.memo[id(inp)] = outer if isinstance(outer, tuple) else (outer, False)

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
        if n.op == Op.LOOP:
            return self._inner_loop(n)
        if n.op == Op.INDEX and n.args[0].op == Op.LOOP:
            part = self.loops.get(id(n.args[0]), {})
            off = n.attrs[0][0] if len(n.attrs) == 1 and isinstance(n.attrs[0], tuple) else None
            if off not in part or n.attrs[0] != (off, off + n.type.size, 1):
                raise _NoRule("a part of an inner loop's result other than a carry")
            return part[off], True
        args = [self.memo[id(a)] for a in n.args]
        if not any(b for _, b in args):
            return ops.make(n.op, *(a for a, _ in args), attrs=n.attrs), False
        N = self.n
        if n.type.size > MAX_ROW and n.type.size * N > MAX_FLAT:
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
            return ops.index(x, ((0, N, 1), *n.attrs)), True
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
            width = n.args[1].shape[0]
            if self.layout is not None and width == 1 and src.dtype == "f64" and src.ndim >= 1:
                # positions affine in the pair (3*j + k, i): a window, nothing evaluated
                attrs = self.layout.window(self.forms.of(tab), src.shape[0])
                if attrs is not None:
                    return ops.reshape(window(src, attrs), (N, *n.shape)), True
            # a table computed from constants (the clamped positions of a flattened nest):
            # one captured table, its entries checked as any table's are
            tab = self.fold(tab, rows=src.shape[0])
            first = self._counter_offset(n.args[1])
            if first is not None and 0 <= first and first + N <= src.shape[0]:
                # x[i + c] over the iterations: rows first, first + 1, ... — a slice, read in order
                rows = ops.index(src, ((first, first + N, 1),))
            else:
                flat = ops.reshape(tab, (N * width,))
                # the iterations' rows of positions as a layout: the nest's pairs, or a
                # rectangle of N rows of the table's width (u[i + 1, j] of a stencil whose
                # rows were batched already: a strided 2-D slice)
                layout = self.layout
                if layout is None and width > 1 and self.consts is not None:
                    layout = Layout(N, width, 0)
                known = None if layout is None else self.consts.value(flat)
                rows = window_or_take(src, flat, known, layout, take)
            return ops.reshape(rows, (N, *n.shape)), True
        if n.op == Op.MATMUL:
            return self._matmul(n, args), True
        if n.op in (Op.SCATTER, Op.SCATTER_ADD):
            # a small array assembled in the iteration (np.stack, F[0, :] = ...): every
            # iteration's array at once, the batch axis a leading full slice of the region
            (acc, ab), (upd, ub) = args
            if not ab:
                acc = ops.broadcast_to(ops.reshape(acc, (1, *acc.shape)), (N, *acc.shape))
            if not ub:
                upd = ops.broadcast_to(ops.reshape(upd, (1, *upd.shape)), (N, *upd.shape))
            return ops.make(n.op, acc, upd, attrs=((0, N, 1), *n.attrs)), True
        raise _NoRule(f"no batching rule for {n.op}")

    def _known(self, n: Node) -> np.ndarray | None:
        """The value of ``n`` when it is known when compiling (only asked of a batcher whose
        iterations are a ragged layout)."""
        if self.layout is None or self.consts is None:
            return None
        return self.consts.value(n)

    def fold(self, n: Node, rows: int | None = None) -> Node:
        """``n`` as a constant (a captured array) when its value is known when compiling and
        it is not a constant already: tables of a flattened nest, index checks on them. A
        table into ``rows`` rows is folded only when every entry is a row (whole, in range)."""
        if self.consts is None or n.op in (Op.CONST, Op.INPUT):
            return n
        v = self.consts.value(n)
        if v is None or v.size == 0:
            return n
        if rows is not None and not (np.all(v == np.floor(v)) and v.min() >= 0 and v.max() < rows):
            return n
        first = v.reshape(-1)[0]
        if np.all(v == first) and (n.dtype == "bool" or np.all(np.signbit(v) == np.signbit(first))):
            return ops.const(first.item(), n.shape, dtype=n.dtype)  # one value throughout
        if n.dtype != "f64":
            return n
        out = self.consts.array(v.astype(np.float64))
        form = self.forms.of(n)
        if form is not None:
            self.forms.seed(out, form)
        return out

    def scatter_link(self, link: tuple, shape: tuple) -> tuple:
        """A scatter-add link of the body (``(table, rows, sign, flat)``, one iteration's)
        into a carry of ``shape``, over every iteration: ``(positions (n * T,), rows (n * T,
        ...), sign, flat)``."""
        table, rows, sign, flat = link
        N = self.n
        t, tb = self.value(table)
        r, rb = self.value(rows)
        if self.mask is not None:
            r, rb = self.masked_rows(r, rb, rows.shape, zero=True), True
        T = table.shape[0]
        t = ops.reshape(t if tb else ops.broadcast_to(t, (N, T)), (N * T,))
        r = r if rb else ops.broadcast_to(r, (N, *rows.shape))
        bound = int(np.prod(shape)) if flat else shape[0]
        attrs = None
        if self.layout is not None and T == 1:
            attrs = self.layout.window(self.forms.of(t), bound)
            if attrs is not None:
                return _Window(attrs), ops.reshape(r, (N * T, *rows.shape[1:])), sign, flat
        t = self.fold(t, rows=bound)
        if self.layout is not None and T == 1:
            v = self._known(t)
            attrs = None if v is None else self.layout.attrs(v, bound)
        return (t if attrs is None else _Window(attrs)), ops.reshape(r, (N * T, *rows.shape[1:])), \
            sign, flat

    def scatter_part(self, term: Node) -> list | None:
        """The scatter-add links of ``term`` when it is an inner loop's scatter-added carry
        (up to reshapes and ``0.0 + ...``; see :meth:`_inner_loop`), else ``None``."""
        s = _without_zero_adds(term)
        if s.op != Op.INDEX or s.args[0].op != Op.LOOP or len(s.attrs) != 1:
            return None
        self.value(s.args[0])  # flattens the inner loop
        return self.scatters.get((id(s.args[0]), s.attrs[0][0]))

    def _rows_at(self, p: Node, t_tab: Node, P: int, layout: Layout | None) -> Node:
        """Rows ``t_tab`` of ``p`` (batched, ``(n, ...)``): of a gather ``take(src, tab)``, one
        gather ``take(src, tab[t_tab])`` — no per-row copy, and its adjoint adds into ``src``
        directly; a window of ``src`` or ``p`` where the pairs are the ragged ``layout``."""
        s = _strip(p)
        if s.op == Op.TAKE and s.args[1].shape == (self.n,) and s.type.size == p.type.size:
            src, tab = s.args
            if layout is not None and self.layout is None:
                f = self.forms.of(tab)  # rows alpha + beta*i: at pair (k, m), alpha + beta*k
                attrs = layout.window(None if f is None else (f[0], f[1], 0.0), src.shape[0])
                if attrs is not None and src.dtype == "f64":
                    return ops.reshape(window(src, attrs), (P, *p.shape[1:]))
            composed = self.fold(take(tab, t_tab))
            known = None if layout is None else self.consts.value(composed)
            rows = window_or_take(src, composed, known, layout, take)
            return ops.reshape(rows, (P, *p.shape[1:]))
        if layout is not None and p.dtype == "f64":
            return window(p, layout.segments())
        return take(p, t_tab)

    def _inner_loop(self, loop: Node) -> tuple[Node, bool]:
        """An inner loop (its carries sums, or left alone) batched over this loop's ``n``
        iterations: the nest is flattened into one iteration space of every pair ``(t, k)``,
        ``k`` below the inner trip count at iteration ``t`` — which must be known when
        compiling (a triangular ``for j in range(i + 1, n)``) — with tables of ``t`` and of the
        inner counter; the inner body is batched over that space, its params gathered from
        this loop's rows at ``t``, and each sum is added per ``t`` (``add_at`` by the ``t``
        table). Returns a placeholder; the carries' values are in :attr:`loops`."""
        spec = loop.attrs[0]
        hit = _inner_plans(spec)
        if hit is None or self.consts is None or self.mask is not None:
            raise _NoRule("an inner loop that is not a loop of sums")
        inner, plans = hit
        N = self.n
        lead = 1 if spec.dynamic else 0
        vals = [self.memo[id(a)] for a in loop.args]
        if spec.dynamic:
            steps, sb = vals[0]
            known = self.consts.value(steps)
            if known is None:
                raise _NoRule("an inner loop whose trip count is not known when compiling")
            counts = np.broadcast_to(np.asarray(known, dtype=np.float64).reshape(
                (N,) if sb else ()), (N,))  # fmt: skip
            if not np.all(np.isfinite(counts)):
                raise _NoRule("an inner trip count that is not finite")
            counts = np.clip(np.ceil(counts), 0, spec.max_steps).astype(np.int64)
        else:
            counts = np.full(N, spec.max_steps, dtype=np.int64)
        P = int(counts.sum())
        if P > MAX_FLAT:
            raise _NoRule(f"a nest of more than {MAX_FLAT} iterations")
        t_of = np.repeat(np.arange(N, dtype=np.float64), counts)
        first = np.repeat(np.cumsum(counts) - counts, counts)
        k_of = np.arange(P, dtype=np.float64) - first + spec.start
        t_tab = self.consts.array(t_of) if P else None
        layout = Layout.of(counts) if WINDOWS else None
        params = []
        for p, pb in vals[lead + spec.n_carry :]:
            params.append((self._rows_at(p, t_tab, P, layout), True) if pb and P else (p, False))
        counter = self.consts.array(k_of) if P else None
        sub = _Batcher(inner, P, counter, params, consts=self.consts, layout=layout) if P else None
        if sub is not None and layout is not None and FORMS:
            # the inner counter at pair (k, m) is start + m; the row table is k; windows of
            # this loop's values have forms when this loop is the top level
            sub.forms = Forms(layout, self.forms if self.layout is None and self.mask is None
                              else None)  # fmt: skip
            sub.forms.seed(counter, (spec.start, 0, 1))
            sub.forms.seed(t_tab, (0, 1, 0))
        parts: dict[int, Node] = {}
        for k, (plan, seg) in enumerate(zip(plans, loop_layout(spec).carries)):
            init, ib = vals[lead + k]
            shape = seg.shape
            total, links = None, []
            if plan[0] == "scatter" and sub is not None:
                links = [sub.scatter_link(link, shape) for link in plan[1]]
            elif plan[0] == "sum" and sub is not None:
                for sign, term in plan[1]:
                    inner_links = sub.scatter_part(term)
                    if inner_links is not None:  # a scatter-add of a loop nested deeper
                        links += [(t, r, sign * sg, fl) for t, r, sg, fl in inner_links]
                        continue
                    v, vb = sub.value(term)
                    if vb and layout is not None and sub.forms.of(v) == (0.0, 0.0, 0.0):
                        per = ops.const(0.0, (N, *shape))  # zero throughout (an index check)
                    elif vb and layout is not None:  # a sum per row of the layout
                        per = window_add(ops.const(0.0, (N, *shape)), v, layout.segments())
                    elif vb:
                        per = add_at(ops.const(0.0, (N, *shape)), t_tab, v)
                    else:  # the same term in every inner iteration: counts times it
                        c = self.consts.array(counts.astype(np.float64).reshape(
                            (N, *([1] * len(shape)))))  # fmt: skip
                        per = ops.mul(ops.broadcast_to(v, (N, *shape)), c)
                    if total is None:
                        total = per if sign > 0 else ops.neg(per)
                    else:
                        total = ops.add(total, per) if sign > 0 else ops.sub(total, per)
            if links:
                if total is not None or not _is_zero(init):
                    raise _NoRule("an inner loop's scatter-adds mixed with other terms")
                self.scatters[(id(loop), seg.offset)] = links  # read by scatter_part
                continue
            if total is None:
                value = init if ib else ops.broadcast_to(init, (N, *shape))
            elif _is_zero(init):
                value = total
            else:
                value = ops.add(init if ib else ops.broadcast_to(init, (N, *shape)), total)
            parts[seg.offset] = self.fold(ops.reshape(value, (N, seg.size)))
        self.loops[id(loop)] = parts
        return loop, True

    def progression(self, t: Node, rows: int) -> int | None:
        """The first row when the batched positions ``t`` (one per iteration) are known when
        compiling to be ``first, first + 1, ...`` inside ``rows`` rows (``f[i + 1] += ...``
        over a range): the rows are then a slice, not a table, else ``None``."""
        if t.type.size != self.n:
            return None
        first = None
        f = self.forms.of(t) if FORMS else None
        if f is not None and f[1:] == (1.0, 0.0):
            first = f[0]
        elif self.consts is not None:
            v = self.consts.value(t)
            if v is not None and np.all(np.ravel(v) == np.ravel(v)[0] + np.arange(self.n)):
                first = np.ravel(v)[0]
        if first is None or first != int(first) or not 0 <= first <= rows - self.n:
            return None
        return int(first)

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


def _total(v: Node, axis_len: int) -> Node:
    """``reduce_sum(v, 0)`` of batched ``v``; of a flattened inner loop's per-iteration sums
    (``add_at`` of a zero array of ``axis_len`` rows, up to reshapes and ``0.0 + ...``), the
    sum of what was added, without the per-iteration array."""
    s = _without_zero_adds(v)
    if (s.op in (Op.ADD_AT, Op.WINDOW_ADD) and _is_zero(_strip(s.args[0]))
            and s.shape[0] == axis_len and s.type.size == v.type.size):  # fmt: skip
        w = s.args[-1]
        total = ops.reduce(Op.REDUCE_SUM, w, (0,))
        return total if total.shape == v.shape[1:] else ops.reshape(total, v.shape[1:])
    return ops.reduce(Op.REDUCE_SUM, v, (0,))


def vectorise(loop: Node, counter: Node, consts: Constants | None = None) -> list[Node] | None:
    """The final carries of ``loop`` (a ``loop`` node of a counted loop without xs, ys or a
    condition) computed as array code, or ``None`` when it is not a loop of independent
    iterations (see the module docstring). The nodes are built on ``loop``'s operands;
    ``counter`` holds the counter's values, ``start, start + 1, ...`` (shape ``(n,)``).
    ``consts`` (the tracer's) lets a body's inner loops of sums be flattened with the outer
    loop into one iteration space (see :meth:`_Batcher._inner_loop`)."""
    spec = loop.attrs[0]
    if spec.cond is not None or spec.n_xs or spec.history or spec.accumulate:
        return None
    if spec.reverse or spec.max_steps < 1:
        return None
    if consts is not None:
        split = _split_loops(spec.body)
        if split is not spec.body:
            spec = _replace_body(spec, split)
    if small_arrays.worth_it(spec.body):  # the body's 3 x 3 matrices as nine scalars each
        flat = small_arrays.scalarise(spec.body)
        if flat is not spec.body:
            out = _vectorise_spec(loop, _replace_body(spec, flat), counter, consts)
            if out is not None:
                return out
    return _vectorise_spec(loop, spec, counter, consts)


def _vectorise_spec(loop: Node, spec, counter: Node, consts: Constants | None) -> list[Node] | None:
    """:func:`vectorise` of ``loop`` with its spec (body) ``spec``."""
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
    b = _Batcher(body, N, counter, params, mask, consts)
    if FORMS:
        b.forms.seed(counter, (spec.start, 1, 0))
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
                r = ops.reshape(r, (N, *plan[2].shape[1:]))
                first = b.progression(t, c0.shape[0])
                if first is None:
                    out.append(put(c0, ops.reshape(t, (N,)), r))
                elif (first, N) == (0, c0.shape[0]):  # every row written, in order
                    out.append(r)
                else:  # rows first, first + 1, ...: a slice
                    out.append(ops.scatter(c0, r, ((first, first + N, 1),)))
            elif plan[0] == "sum":
                total = c0
                for sign, term in plan[1]:
                    links = b.scatter_part(term)
                    if links is not None and mask is None:  # a nest's scatter-adds
                        for t, r, sg, flat in links:
                            total = _add_link(total, t, r if sg * sign > 0 else ops.neg(r), flat)
                        continue
                    v, vb = b.value(term)
                    if mask is not None:
                        v, vb = b.masked_rows(v, vb, term.shape, zero=True), True
                    s = _total(v, N) if vb else ops.mul(v, ops.const(float(N)))
                    total = ops.add(total, s) if sign > 0 else ops.sub(total, s)
                out.append(b.fold(total))  # an index check's count of a nest: zero
            else:
                acc = c0
                for link in plan[1]:
                    t, r, sign, flat = b.scatter_link(link, c0.shape)
                    r = r if sign > 0 else ops.neg(r)
                    first = None if flat or isinstance(t, _Window) else \
                        b.progression(t, c0.shape[0])
                    if first is not None and r.shape[:1] == (N,):
                        # f[i + c] += v over a range: rows first, first + 1, ... — a window
                        # of rows of one (fused into the pass that computes v, as a sink)
                        acc = window_add(acc, r, (N, 1, 0, first, 1, 0))
                        continue
                    acc = _add_link(acc, t, r, flat)
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
