"""A loop body's small arrays as scalars: ``F = Ds @ DmInv[e]; J = det(F)`` as nine products.

An element loop of a finite-element or constitutive model computes with small arrays — the
deformation gradient ``F`` (3 x 3), its edge matrix built with ``np.stack``, ``F.T @ F``, a
cofactor ``det``/``inv``, a force 3-vector — once per element. Batched over the elements
(:mod:`tapejit.passes.vectorise`), each of those becomes an ``(n, 3, 3)`` array: scatters that
assemble it, a broadcast product and a reduction for each ``@``, transposes — a kernel and a
pass over memory each. A hand-written C loop keeps the nine entries in registers.

:func:`scalarise` rewrites a body so that every small value (at most :data:`MAX_PARTS`
elements) computed by an op below is a list of scalar nodes, one per element in C order —
and the batched body is then one-dimensional elementwise code over the elements, which fusion
makes one loop (the plan of a model written with scalars, as the 2-D neo-Hookean benchmark is):

* elementwise ops (operands broadcast element by element), ``reshape``, ``transpose``,
  ``broadcast_to``, ``index`` (static basic indexing), ``scatter``/``scatter_add`` into a small
  array, ``reduce_sum`` (added left to right), 2-D ``matmul`` (each entry a left-to-right sum
  of products) and constants.

Any other op (an inner loop, a reduction to a maximum...) and every large value is kept whole:
its small results are read element by element with ``index`` — the rows of a table gathered
for the element, ``X[conn[e]]``, as gathers from ``X``'s columns (:func:`_take_columns`) — and
a small value it reads is reassembled from its elements (scatters into zeros). Exact but for the order of the
additions inside a ``reduce_sum`` or ``matmul``, which is the left-to-right order of a
sequential reduction — the rounding of any reduction.
"""

from __future__ import annotations

import numpy as np

from ..core import ops
from ..core.ir import Graph, Node
from ..core.ops_table import take
from ..core.ops import Op

#: The most elements a value may have and still be split into scalars (a 4 x 4 matrix, a hex
#: element's 8 x 3 node coordinates; larger values stay arrays).
MAX_PARTS = 32

#: Ops whose presence on a small array makes the rewrite worth it (others are scalar code
#: already, or rows the nest machinery of :mod:`tapejit.passes.vectorise` lays out).
_MARKS = frozenset({Op.SCATTER, Op.SCATTER_ADD, Op.MATMUL, Op.TRANSPOSE, Op.REDUCE_SUM})


def _small(n: Node) -> bool:
    return 0 < n.type.size <= MAX_PARTS


def worth_it(g: Graph) -> bool:
    """Whether body ``g`` computes with small arrays (and has no inner loop: nests are laid
    out by :mod:`tapejit.passes.nest_layout`)."""
    marked = False
    for n in g.nodes:
        if n.op == Op.LOOP:
            return False
        if n.op in _MARKS and _small(n) and n.ndim >= 1 and n.type.size > 1:
            marked = True
    return marked


def _positions(shape: tuple) -> np.ndarray:
    return np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape)


def _select(pos: np.ndarray, items: tuple) -> np.ndarray:
    """``pos[items]`` for the IR's index items (ints and normalised ``(start, stop, step)``,
    whose stop may be -1 for a reversed slice: taken as a range, not as a Python slice)."""
    axis = 0
    for it in items:
        if isinstance(it, tuple):
            pos = np.take(pos, np.arange(*it, dtype=np.int64), axis=axis)
            axis += 1
        else:
            pos = np.take(pos, it, axis=axis)
    return pos


class _Split:
    """The rewrite's state: each original node's rebuilt whole node or its elements."""

    def __init__(self):
        #: id(original node) -> its rebuilt whole node
        self.whole: dict[int, Node] = {}
        #: id(original node) -> its elements (scalar nodes, C order), for split nodes
        self.parts: dict[int, list[Node]] = {}
        self._read: dict[int, list[Node]] = {}

    def elements(self, n: Node) -> list[Node]:
        """The elements of original node ``n``: its parts, or ``index`` reads of it whole."""
        hit = self.parts.get(id(n))
        if hit is not None:
            return hit
        hit = self._read.get(id(n))
        if hit is None:
            w = self.whole_of(n)
            if w.op == Op.TAKE and w.args[0].ndim >= 2 and w.args[1].ndim == 1 and _small(w):
                hit = self._read[id(n)] = _take_columns(w)
                return hit
            if w.ndim == 0:
                hit = [w]
            else:
                hit = [ops.index(w, tuple(int(i) for i in mi)) for mi in np.ndindex(*w.shape)]
            self._read[id(n)] = hit
        return hit

    def whole_of(self, n: Node) -> Node:
        """Original node ``n`` whole: rebuilt, or reassembled from its elements (once)."""
        hit = self.whole.get(id(n))
        if hit is None:
            hit = self.whole[id(n)] = self.assemble(n, self.parts[id(n)])
        return hit

    def assemble(self, n: Node, parts: list[Node]) -> Node:
        """The whole value of ``n`` from its elements."""
        if n.ndim == 0:
            return parts[0]
        if n.type.size == 1:
            return ops.reshape(parts[0], n.shape)
        acc = ops.const(False if n.dtype == "bool" else 0.0, n.shape, n.dtype)
        for mi, p in zip(np.ndindex(*n.shape), parts):
            acc = ops.make(Op.SCATTER, acc, p, attrs=tuple(int(i) for i in mi))
        return acc

    def split(self, n: Node) -> list[Node] | None:
        """The elements of ``n`` computed from its operands' elements, or ``None`` when ``n``
        stays whole."""
        if not _small(n):
            return None
        if n.op == Op.CONST:
            return [ops.const(n.attrs[0], (), n.dtype)] * n.type.size
        if n.op == Op.INDEX:  # any operand: only the elements read are named
            (x,) = n.args
            pos = _select(_positions(x.shape), n.attrs).reshape(-1)
            if id(x) in self.parts:
                src = self.parts[id(x)]
                return [src[p] for p in pos]
            w = self.whole_of(x)
            return [ops.index(w, tuple(int(i) for i in np.unravel_index(p, x.shape))) for p in pos]
        if any(a.ndim and not _small(a) for a in n.args):
            return None
        if n.op in ops.ELEMENTWISE:
            cols = []
            for a in n.args:
                el = self.elements(a)
                pos = np.broadcast_to(_positions(a.shape), n.shape).reshape(-1)
                cols.append([el[p] for p in pos])
            return [ops.make(n.op, *row, attrs=n.attrs) for row in zip(*cols)]
        if n.op == Op.RESHAPE:
            return self.elements(n.args[0])
        if n.op == Op.TRANSPOSE:
            el = self.elements(n.args[0])
            return [el[p] for p in _positions(n.args[0].shape).transpose(n.attrs[0]).reshape(-1)]
        if n.op == Op.BROADCAST_TO:
            el = self.elements(n.args[0])
            pos = np.broadcast_to(_positions(n.args[0].shape), n.shape).reshape(-1)
            return [el[p] for p in pos]
        if n.op in (Op.SCATTER, Op.SCATTER_ADD):
            acc, upd = n.args
            region = _select(_positions(acc.shape), n.attrs)
            el_u = self.elements(upd)
            pos_u = np.broadcast_to(_positions(upd.shape), region.shape).reshape(-1)
            out = list(self.elements(acc))
            for p, q in zip(region.reshape(-1), pos_u):
                out[p] = el_u[q] if n.op == Op.SCATTER else ops.make(Op.ADD, out[p], el_u[q])
            return out
        if n.op == Op.REDUCE_SUM:
            (x,) = n.args
            axes = n.attrs[0]
            el = self.elements(x)
            moved = np.moveaxis(_positions(x.shape), axes, range(x.ndim - len(axes), x.ndim))
            groups = moved.reshape(n.type.size, -1)
            if groups.shape[1] == 0:
                return None
            return [_sum([el[p] for p in row]) for row in groups]
        if n.op == Op.MATMUL:
            a, b = n.args
            if a.ndim > 2 or b.ndim > 2 or a.ndim == 0 or b.ndim == 0:
                return None
            ea, eb = self.elements(a), self.elements(b)
            pa = _positions(a.shape).reshape(-1, a.shape[-1])            # (m, k)
            pb = _positions(b.shape).reshape(b.shape[0], -1)            # (k, p)
            return [_sum([ops.make(Op.MUL, ea[pa[i, l]], eb[pb[l, j]]) for l in range(pa.shape[1])])
                    for i in range(pa.shape[0]) for j in range(pb.shape[1])]  # fmt: skip
        return None


def _take_columns(w: Node) -> list[Node]:
    """The elements of ``w = take(x, idx)`` (rows of a table ``x`` at a few positions: an
    element's nodes ``X[conn[e]]``) as gathers from ``x``'s columns, ``x[:, k][idx]`` — the
    form of a model written with scalars (``X[a, 0]``), whose adjoint adds into each column
    (an ``add_at`` per column) instead of assembling a cotangent row by scatters."""
    x, idx = w.args
    cols = []
    for k in np.ndindex(*x.shape[1:]):
        col = ops.index(x, ((0, x.shape[0], 1), *(int(i) for i in k)))
        cols.append(take(col, idx))  # (T,)
    return [ops.index(cols[int(np.ravel_multi_index(k, x.shape[1:]))], (t,))
            for t in range(idx.shape[0]) for k in np.ndindex(*x.shape[1:])]  # fmt: skip


def _sum(terms: list[Node]) -> Node:
    acc = terms[0]
    for t in terms[1:]:
        acc = ops.make(Op.ADD, acc, t)
    return acc


def scalarise(g: Graph) -> Graph:
    """``g`` (a loop body) with its small arrays computed element by element (see the module
    docstring); the same inputs, outputs of the same types. ``g`` itself when nothing is
    split."""
    s = _Split()
    for inp in g.inputs:
        s.whole[id(inp)] = inp
    changed = False
    for n in g.nodes:  # topological
        if id(n) in s.whole or id(n) in s.parts:
            continue
        parts = s.split(n)
        if parts is not None:
            s.parts[id(n)] = parts
            changed = changed or n.ndim > 0
            continue
        args = tuple(s.whole_of(a) for a in n.args)
        same = all(x is y for x, y in zip(args, n.args))
        s.whole[id(n)] = n if same else Node(n.op, args, n.attrs, n.type)
    if not changed:
        return g
    return g.replace(outputs=tuple(s.whole_of(o) for o in g.outputs))
