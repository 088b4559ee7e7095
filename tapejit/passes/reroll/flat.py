"""Every row of a re-rolled loop at once (:mod:`tapejit.passes.reroll.ragged` matches the rows;
:mod:`tapejit.passes.reroll.driver` builds its vectorised sums with :func:`per_row_builder`).

Each template node is rebuilt once, for all ``T`` iterations at once: a shared node is itself,
a per-iteration value of shape ``S`` becomes a ``(T, *S)`` array, a ragged one of shape
``(L(k), *S)`` (rows of a length that moves with the iteration, :class:`_Layout`) a ``(P,
*S)`` array, every row stored flat (:mod:`tapejit.core.ops_window`). Elementwise ops apply to the
rebuilt operands, a per-iteration operand of a ragged op spread over its row (``window`` with
``c = 1, d = 0``); a reduction over the ragged axis is summed by row (``window_add`` with
``c = 1, d = 0``); broadcasts, reshapes and transposes that keep the rows the first axis, and
products with a matrix shared by every row or of rows by rows (:func:`_matmul_rows`), are
built likewise. Anything else raises :class:`~tapejit.passes.reroll.match._Fail`: the caller
leaves the loop as it is.
"""

from __future__ import annotations

from ...core import ops
from ...core.ir import Node
from ...core.ops import Op
from ...core.ops_window import layout_size, window, window_add
from .common import _Fail

_ELEMENTWISE = frozenset(ops.ELEMENTWISE)


class _Layout:
    """The run's ragged layout ``(T, L0, dL)``, fixed by the first ragged value built."""

    def __init__(self, T: int):
        self.T = T
        self.L: tuple[int, int] | None = None

    def set(self, L: tuple[int, int]) -> tuple[int, int, int]:
        L0, dL = L
        if self.L is None:
            if L0 < 0 or L0 + dL * (self.T - 1) < 0:
                raise _Fail
            self.L = (L0, dL)
        elif self.L != (L0, dL):
            raise _Fail
        return self.attrs

    @property
    def attrs(self) -> tuple[int, int, int]:
        if self.L is None:
            raise _Fail
        return (self.T, *self.L)

    @property
    def P(self) -> int:
        return layout_size(*self.attrs)

    def spread(self, v: Node) -> Node:
        """Per-iteration values ``v`` (``(T, *S)``) spread over their rows: ``(P, *S)``."""
        return window(v, (*self.attrs, 0, 1, 0))

    def ragged(self, v: Node, orig: Node) -> Node:
        """Operand ``v`` (built from template node ``orig``) of a ragged op, as ``(P, *S)``."""
        if v.shape[:1] == (self.P,) and orig.ndim == v.ndim:
            return v
        if orig.ndim == 0:
            return self.spread(v)
        L0, dL = self.L or (None, None)
        if dL == 0 and v.shape[:2] == (self.T, L0):  # rows of one length: (T, L0, *S) is flat
            return ops.reshape(v, (self.P, *v.shape[2:]))
        raise _Fail


def _moves(f: tuple | None) -> bool:
    """Whether a fitted first extent moves with the iteration."""
    return f is not None and f[0] == "extent" and f[1][1] != 0


def _build(tpl: Node, shared: set[int], fit: dict, lay: _Layout) -> dict[int, tuple[str, Node]]:
    """Every iteration's nodes of ``tpl`` at once, by template node: ``("same", node)``,
    ``("k", (T, *S) array)`` or ``("r", (P, *S) array)``."""
    memo: dict[int, tuple[str, Node]] = {}
    stack = [tpl]
    while stack:
        t = stack[-1]
        if id(t) in memo:
            stack.pop()
            continue
        if id(t) in shared:
            memo[id(t)] = ("same", t)
            stack.pop()
            continue
        if t.op == Op.INDEX and id(t.args[0]) in shared:  # a read leaf
            stack.pop()
            memo[id(t)] = _read(t, fit[id(t)], lay)
            continue
        todo = [a for a in t.args if id(a) not in memo]
        if todo:
            stack.extend(todo)
            continue
        stack.pop()
        f = fit.get(id(t))
        level, node = _op(t, [memo[id(a)] for a in t.args], f, lay)
        if t.ndim and f is not None:  # the first extent moves exactly with the rows
            if level == "r" and f[1] != lay.L:
                raise _Fail
            if level == "k" and f[1][1] != 0:
                raise _Fail
        memo[id(t)] = (level, node)
    return memo


def _read(t: Node, f: tuple, lay: _Layout) -> tuple[str, Node]:
    src, items = t.args[0], t.attrs
    if t.dtype != "f64":
        raise _Fail  # (windows are of f64 arrays; a bool mask's rows stay as they are)
    if f[0] == "row":
        a, b = f[1]
        if b == 0:
            raise _Fail
        return "k", ops.index(src, ((a, a + b * lay.T, b), *items[1:]))
    (a, c), L = f[1], f[2]
    attrs = (*lay.set(L), a, c, items[0][2])
    base = src if len(items) == 1 else ops.index(src, ((0, src.shape[0], 1), *items[1:]))
    return "r", window(base, attrs)


def _op(t: Node, args: list, f: tuple | None, lay: _Layout) -> tuple[str, Node]:
    op, T = t.op, lay.T
    level = "r" if any(lv == "r" for lv, _ in args) else "k"
    if op in (Op.CONST, Op.BROADCAST_TO) and _moves(f):
        lay.set(f[1])
        level = "r"

    def per_k(lv: str, a: Node, shape: tuple) -> Node:
        return a if lv == "k" else ops.broadcast_to(a, (T, *shape))

    def full(v: Node, shape: tuple) -> Node:
        """``v`` (one value per row or position: ``(T,)`` or ``(P,)``) across ``shape``."""
        if not shape:
            return v
        lead = v.shape[0]
        return ops.broadcast_to(ops.reshape(v, (lead, *(1,) * len(shape))), (lead, *shape))

    if op == Op.CONST:  # an array constant whose first extent moves with the rows
        if level != "r":
            raise _Fail
        return "r", ops.const(t.attrs[0], (lay.P, *t.shape[1:]), t.dtype)
    if op in _ELEMENTWISE:
        out = []
        for (lv, a), orig in zip(args, t.args):
            if lv == "same" and orig.ndim == 0:
                out.append(a)
            elif level == "r":
                if lv == "same":  # a shared array the size of every row (windows of one
                    L0, dL = lay.L or (None, None)  # length): the same rows in each
                    if dL != 0 or orig.shape[0] != L0:
                        raise _Fail
                    out.append(window(a, (*lay.attrs, 0, 0, 1)))
                    continue
                a = lay.ragged(a, orig)
                out.append(full(a, t.shape[1:]) if orig.ndim == 0 else a)
            elif orig.ndim == 0:  # a per-row scalar of a per-row array op
                out.append(full(per_k(lv, a, ()), t.shape))
            else:
                out.append(per_k(lv, a, orig.shape))
        return level, ops.make(op, *out, attrs=t.attrs)
    if op == Op.BROADCAST_TO:
        ((lv, u),) = args
        su, S = t.args[0].shape, t.shape[1:]
        if level == "r":
            if lv == "same":
                return "r", ops.broadcast_to(u, (lay.P, *S))
            if lv == "k":  # u is (T, *su), su aligned to the trailing axes of (L, *S)
                if len(su) == len(S) + 1:
                    if su[0] != 1:
                        raise _Fail
                    su = su[1:]
                u = lay.spread(ops.reshape(u, (T, *(1,) * (len(S) - len(su)), *su)))
            return "r", ops.broadcast_to(u, (lay.P, *S))
        u = ops.reshape(per_k(lv, u, su), (T, *(1,) * (t.ndim - len(su)), *su))
        return "k", ops.broadcast_to(u, (T, *t.shape))
    if op in (Op.REDUCE_SUM, Op.REDUCE_MAX):
        ((lv, x),) = args
        axes = t.attrs[0]
        if lv != "r":
            return "k", ops.reduce(op, per_k(lv, x, t.args[0].shape), tuple(a + 1 for a in axes))
        rest = tuple(a for a in axes if a != 0)
        y = ops.reduce(op, x, rest) if rest else x
        if 0 not in axes:
            return "r", y
        if op != Op.REDUCE_SUM:
            raise _Fail
        return "k", window_add(ops.const(0.0, (T, *y.shape[1:])), y, (*lay.attrs, 0, 1, 0))
    if op == Op.RESHAPE and level == "k":
        ((lv, x),) = args
        return "k", ops.reshape(per_k(lv, x, t.args[0].shape), (T, *t.shape))
    if op == Op.RESHAPE and t.ndim and t.args[0].ndim and t.shape[0] == t.args[0].shape[0]:
        ((lv, x),) = args  # ragged rows reshaped within each position: (L, 3) -> (L, 1, 3)
        return "r", ops.reshape(x, (lay.P, *t.shape[1:]))
    if op == Op.TRANSPOSE and (level == "k" or t.attrs[0][0] == 0):
        ((lv, x),) = args  # the rows (positions) stay the first axis
        x = per_k(lv, x, t.args[0].shape) if level == "k" else x
        perm = (0, *(p + 1 for p in t.attrs[0])) if level == "k" else t.attrs[0]
        return level, ops.transpose(x, perm)
    if op == Op.MATMUL:
        sa, sb = t.args[0].shape, t.args[1].shape
        if level == "k":
            return "k", _matmul_rows(sa, sb, t.shape, args, T, per_k)
        (la, a), (lb, b) = args
        if la != "r" or lb == "r" or len(sa) != 2:
            raise _Fail  # (only rows of a ragged matrix times a per-row or shared operand)

        def per_position(lv: str, v: Node, shape: tuple) -> Node:
            return v if lv == "k" else ops.broadcast_to(v, (lay.P, *shape))

        # each position is a row of the ragged matrix: (P, k) times b, per-row b spread
        b_lv = ("k", lay.spread(b)) if lb == "k" else (lb, b)
        return "r", _matmul_rows(sa[1:], sb, t.shape[1:], [("k", a), b_lv], lay.P, per_position)
    if op == Op.INDEX and level == "k" and (f is None or (f[0] == "row" and f[1][1] == 0)):
        ((lv, x),) = args
        return "k", ops.index(per_k(lv, x, t.args[0].shape), ((0, T, 1), *t.attrs))
    raise _Fail


def per_row_builder(T: int):
    """``build(node, args)``: template ``node`` of ``T`` iterations at once from its operands
    (``(level, node)`` pairs, level ``"same"`` for an operand the same in every iteration and
    ``"k"`` for one built as ``(T, *shape)``): the ``(T, *node.shape)`` array, or ``None``
    when it is not an elementwise op, a broadcast, a reduction or a static index. The sums of
    :mod:`tapejit.passes.reroll.driver` build their terms with it (terms that reduce a row: ``r =
    np.sqrt(np.sum(d ** 2))`` of a 3-vector ``d``)."""
    lay = _Layout(T)

    def build(node: Node, args: list) -> Node | None:
        try:
            level, out = _op(node, args, None, lay)
        except (_Fail, ValueError, IndexError, TypeError):
            return None
        return out if level == "k" else None

    return build


def _matmul_rows(sa: tuple, sb: tuple, out: tuple, args: list, T: int, per_k) -> Node:
    """``a @ b`` (of shapes ``sa``, ``sb``, product ``out``) of every row at once (see
    :func:`_op`): a matrix the same in every row times rows of vectors or matrices is one
    ``matmul``; rows times rows are products summed over the contracted axis (``np.dot(d,
    d)`` of 3-vectors). ``T``: the rows (or a ragged layout's positions); ``per_k(level, node,
    shape)``: an operand as ``(T, *shape)``."""
    (la, a), (lb, b) = args
    if la == "k" and lb == "same":  # (T, [m,] k) @ (k[, n])
        flat = ops.reshape(a, (T * (sa[0] if len(sa) == 2 else 1), sa[-1]))
        return ops.reshape(ops.matmul(flat, b), (T, *out))
    if la == "same" and lb == "k" and len(sb) == 1:  # (m, k) @ rows of (k,)
        return ops.matmul(b, ops.transpose(a)) if len(sa) == 2 else ops.matmul(b, a)
    a, b = per_k(la, a, sa), per_k(lb, b, sb)
    if len(sa) == 2 and len(sb) == 1 and sa[0] == 1:  # a row vector: one dot product per row
        a = ops.reshape(a, (T, sa[1]))  # (as np.dot(d, d) of a 3-vector traces)
        return ops.reshape(ops.reduce(Op.REDUCE_SUM, ops.mul(a, b), (1,)), (T, 1))
    if len(sa) == 1 and len(sb) == 2 and sb[1] == 1:
        b = ops.reshape(b, (T, sb[0]))
        return ops.reshape(ops.reduce(Op.REDUCE_SUM, ops.mul(a, b), (1,)), (T, 1))
    if len(sa) == 2 and len(sb) == 1:  # (T, m, k) * (T, 1, k), summed over k
        return ops.reduce(Op.REDUCE_SUM, ops.mul(a, _expand(b, (T, 1, sb[0]), (T, *sa))), (2,))
    if len(sa) == 1 and len(sb) == 1:  # (T, k) * (T, k), summed over k (a position's dot)
        return ops.reduce(Op.REDUCE_SUM, ops.mul(a, b), (1,))
    if len(sa) == 1 and len(sb) == 2:  # (T, k, 1) * (T, k, n), summed over k
        return ops.reduce(Op.REDUCE_SUM, ops.mul(_expand(a, (T, sa[0], 1), (T, *sb)), b), (1,))
    raise _Fail


def _expand(v: Node, unit: tuple, shape: tuple) -> Node:
    return ops.broadcast_to(ops.reshape(v, unit), shape)
