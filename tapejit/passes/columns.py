"""Small trailing axes as columns: ``sum(d * d, axis=-1)`` over 3-vectors as ``d0² + d1² + d2²``.

Scalarised models keep 3-vectors (positions, forces, velocities) in ``(n, 3)`` arrays and reduce
over the small axis: the Lennard-Jones rows form ::

    for i in range(n - 1):
        d = pos[i + 1:] - pos[i]                 # (n-1-i, 3)
        r2 = np.sum(d * d, axis=1)               # (n-1-i,)
        e = e + np.sum(4.0 * (r2**-6 - r2**-3))

A reduction over a trailing axis of ``k`` <= :data:`MAX_COLUMNS` elements whose operand is
elementwise arithmetic on views of arrays is rewritten here as the sum of its ``k`` columns,
each computed from column views of the same arrays: ``d[:, c] = pos[i+1:, c] - pos[i, c]``.
Everything downstream of the reduction was one-dimensional already, so the row's whole forward
and backward computation becomes one-dimensional elementwise code over the ``n-1-i`` rows —
what fusion makes into one loop with one stream per column (the scalar pair loop's plan, which
re-rolling gives that form: :mod:`tapejit.passes.reroll.driver`), instead of kernels over ``(n-1-i, 3)``
blocks, reductions over their rows and broadcasts of per-row factors back across them.

Run on the trace, before reverse mode (so the backward is the columns' backward). Exact but
for the order of the ``k`` additions, which is the left-to-right order a sequential reduction
uses. The operand's column is pushed through (:func:`_column`):

* elementwise ops (their non-scalar operands have the operand's shape; scalars pass as they are);
* ``broadcast_to`` (of a scalar, of a unit last axis, or of an array whose last axis is ``k``);
* ``index`` (basic indexing: the column is one more integer, or a shifted start, of the view);
* ``window`` of rows (:mod:`tapejit.core.ops_window`): the window of the operand's column;
* constants;

and any other value (an input, a ``reshape``, a ``matmul``...) is read by column views of it,
``v[..., c]``, as it is computed. A sum whose operand is not elementwise (a plain sum of a view)
is left as it is: there is nothing to fuse into.
"""

from __future__ import annotations

import time

from ..core import ops, ops_window
from ..core.ir import Graph, Node
from ..core.ops import Op
from .rewrite import Rewriter

#: Largest trailing axis reduced as separate columns (3-vectors, quaternions).
MAX_COLUMNS = 4

_ELEMENTWISE = frozenset(ops.ELEMENTWISE)


class _NotColumnar(Exception):
    pass


def _column(v: Node, c: int, memo: dict) -> Node:
    """``v[..., c]`` built from columns of ``v``'s operands, or :class:`_NotColumnar`."""
    key = (id(v), c)
    got = memo.get(key)
    if got is not None:
        return got
    shape = v.shape[:-1]
    op = v.op
    if op == Op.CONST:
        out = ops.const(v.attrs[0], shape, v.dtype)
    elif op in _ELEMENTWISE:
        args = [a if a.shape == () else _column(a, c, memo) for a in v.args]
        out = ops.make(op, *args, attrs=v.attrs)
    elif op == Op.BROADCAST_TO:
        (u,) = v.args
        if u.ndim < v.ndim:  # u's axes are v's last ones: its last axis is v's (or a unit one)
            if u.ndim == 0:
                return ops.broadcast_to(u, shape)
            base = _column(u, 0 if u.shape[-1] == 1 else c, memo)
        elif u.shape[-1] == 1:  # a unit last axis, spread across the columns
            base = ops.reshape(u, u.shape[:-1])
        else:
            base = _column(u, c, memo)
        out = ops.broadcast_to(base, shape)
    elif op == Op.INDEX:
        (base,) = v.args
        items = list(v.attrs)
        kept = [p for p, it in enumerate(items) if isinstance(it, tuple)]
        if len(items) < base.ndim:  # base's last axis is v's last axis, taken whole
            items += [(0, d, 1) for d in base.shape[len(items) : -1]] + [c]
        elif kept:  # the last slice makes v's last axis (integers after it drop theirs)
            start, _, step = items[kept[-1]]
            items[kept[-1]] = start + c * step
        else:
            raise _NotColumnar
        out = ops.index(base, tuple(items))
    elif op == Op.WINDOW and v.ndim == 2:  # rows of a ragged window: the window of a column
        out = ops_window.window(_column(v.args[0], c, memo), v.attrs)
    else:  # an input, or a value computed otherwise (a matmul...): read by column views
        out = ops.index(v, tuple((0, d, 1) for d in shape) + (c,))
    if out.shape != shape:  # (a view of a view collapsing differently: never expected)
        raise _NotColumnar
    memo[key] = out
    return out


def split_columns(g: Graph) -> tuple[Graph, dict]:
    """``g`` with every ``reduce_sum`` over a trailing axis of at most :data:`MAX_COLUMNS`
    elements rewritten as a sum of columns (see the module docstring), and statistics:
    ``reductions`` rewritten, node counts, seconds."""
    t0 = time.perf_counter()
    done = [0]
    memo: dict = {}

    def rule(n: Node, rw: Rewriter) -> Node | None:
        if n.op != Op.REDUCE_SUM:
            return None
        (x,) = n.args
        if x.ndim < 2 or n.attrs[0] != (x.ndim - 1,) or not 1 < x.shape[-1] <= MAX_COLUMNS:
            return None
        if x.op not in _ELEMENTWISE:
            return None  # a plain sum over a view: nothing to fuse into
        try:
            cols = [_column(x, c, memo) for c in range(x.shape[-1])]
        except _NotColumnar:
            return None
        out = cols[0]
        for col in cols[1:]:
            out = ops.add(out, col)
        done[0] += 1
        return out

    before = len(g.nodes)
    out = Rewriter(g).run(rule) if any(n.op == Op.REDUCE_SUM for n in g.nodes) else g
    stats = {"nodes_before": before, "nodes_after": len(out.nodes), "reductions": done[0],
             "seconds": time.perf_counter() - t0}  # fmt: skip
    return out, stats
