"""The iteration space of a flattened nest as a ragged layout, its tables as windows.

:mod:`tapejit.passes.vectorise` flattens a nest ``for i in range(T): for j in range(...)`` into
one iteration space of every pair ``(i, j)``, row after row, with constant tables of the
positions each pair reads (``x[3*j + 1]``: the table ``3*j + 1`` over all pairs) and writes.
When the inner trip counts are affine in the row — ``range(i + 1, n)``, ``range(i)``,
``range(n)``: row ``k`` has ``L(k) = L0 + dL*k`` iterations — that space *is* a ragged layout
``(T, L0, dL)`` (:mod:`tapejit.core.ops_window`), and a table whose entries are affine in the
row and the position in the row, ``a + c*k + d*m``, is the ``window`` with those attributes:
``take(x, table)`` is ``window(x)``, ``add_at(acc, table, v)`` is ``window_add(acc, v)``. The
code generated for a window loops over ``(k, m)`` (:mod:`tapejit.codegen.lower.window`):
contiguous reads, no table in memory, as a hand-written double loop has it.

A table is replaced only when it equals the window's positions entry for entry (checked on the
whole table, so the replacement computes the same rows in the same order) and the window is in
bounds; any other table stays a table.
"""

from __future__ import annotations

import numpy as np

from ..core import ops_window
from ..core.ir import Node
from ..core.ops import Op


class Layout:
    """The ragged layout of a flattened two-level iteration space: ``T`` rows, row ``k`` of
    ``L0 + dL*k`` positions; :attr:`row` and :attr:`col` give each flat position's ``(k, m)``
    (int64, shape ``(P,)``)."""

    def __init__(self, T: int, L0: int, dL: int):
        self.T, self.L0, self.dL = T, L0, dL
        self.P = ops_window.layout_size(T, L0, dL)
        self._rc: tuple | None = None

    @property
    def row(self) -> np.ndarray:
        return self._positions()[0]

    @property
    def col(self) -> np.ndarray:
        return self._positions()[1]

    def _positions(self) -> tuple:
        if self._rc is None:  # built only for a table whose form is not known (O(P))
            lengths = self.L0 + self.dL * np.arange(self.T, dtype=np.int64)
            row = np.repeat(np.arange(self.T, dtype=np.int64), lengths)
            col = np.arange(row.size, dtype=np.int64) - ops_window.row_base(row, self.L0, self.dL)
            self._rc = (row, col)
        return self._rc

    def extremes(self, form: tuple) -> tuple[float, float] | None:
        """The least and the greatest of ``a + c*k + d*m`` over the positions (``None`` for
        an empty layout): at the corners of the rows that have positions, as the value is
        linear along each row and along the rows' ends."""
        a, c, d = form
        ks = [k for k in (0, self.T - 1) if self.L0 + self.dL * k > 0]
        if self.dL != 0 and len(ks) < 2:
            live = [k for k in range(self.T) if self.L0 + self.dL * k > 0]
            ks = [live[0], live[-1]] if live else []
        if not ks:
            return None
        ends = [a + c * k for k in ks] + [a + c * k + d * (self.L0 + self.dL * k - 1) for k in ks]
        return min(ends), max(ends)

    def window(self, form: tuple | None, rows: int) -> tuple | None:
        """The window attributes of positions ``a + c*k + d*m`` (``form = (a, c, d)``, see
        :class:`Forms`) when they are whole numbers, ``d >= 0`` and they fall in
        ``[0, rows)``; else ``None``. Nothing is evaluated: O(1)."""
        if form is None or not all(float(v).is_integer() for v in form):
            return None
        a, c, d = (int(v) for v in form)
        attrs = (self.T, self.L0, self.dL, a, c, d)
        try:
            ops_window._check(attrs, rows)
        except ValueError:
            return None
        return attrs

    @classmethod
    def of(cls, counts: np.ndarray) -> "Layout | None":
        """The layout of rows of ``counts`` iterations (int64, shape ``(T,)``), when the counts
        are affine in the row and the space is not empty; else ``None``."""
        T = int(counts.shape[0])
        if T < 1 or counts.sum() == 0:
            return None
        L0 = int(counts[0])
        dL = int(counts[1] - counts[0]) if T > 1 else 0
        if not np.array_equal(counts, L0 + dL * np.arange(T, dtype=np.int64)):
            return None
        return cls(T, L0, dL)

    def attrs(self, table: np.ndarray, rows: int) -> tuple | None:
        """The window attributes ``(T, L0, dL, a, c, d)`` whose positions are ``table``
        (shape ``(P,)``, whole numbers) and fall in ``[0, rows)``, or ``None`` when the table
        is not affine in ``(k, m)``."""
        v = np.asarray(table).reshape(-1)
        if v.size != self.P or self.P == 0 or not np.all(v == np.floor(v)):
            return None
        v = v.astype(np.int64)
        k, m = self.row, self.col
        # a + c*k + d*m through three entries: the first, the first of the next row that has
        # one, and two neighbours in a row (d or c is anything when there are none)
        inside = np.flatnonzero(k[1:] == k[:-1])
        d = int(v[inside[0] + 1] - v[inside[0]]) if inside.size else 0
        later = np.flatnonzero(k != k[0])
        c = 0
        if later.size:
            p = int(later[0])
            step, rem = divmod(int(v[p] - d * m[p] - v[0]), int(k[p] - k[0]))
            if rem:
                return None
            c = step
        a = int(v[0] - c * k[0])
        if d < 0 or not np.array_equal(v, a + c * k + d * m):
            return None
        attrs = (self.T, self.L0, self.dL, a, c, d)
        try:
            ops_window._check(attrs, rows)
        except ValueError:
            return None
        return attrs

    def segments(self) -> tuple:
        """The window of each position's row: ``window_add`` with it sums each row (a
        segment sum per outer iteration)."""
        return (self.T, self.L0, self.dL, 0, 1, 0)


def window_or_take(src: Node, table: Node, values: np.ndarray | None, layout: "Layout | None",
                   take) -> Node:  # fmt: skip
    """``take(src, table)``, as ``window(src)`` when ``values`` (the table's, known when
    compiling) are a window of ``layout`` over ``src``'s rows."""
    if layout is not None and values is not None and src.dtype == "f64" and src.ndim >= 1:
        attrs = layout.attrs(values, src.shape[0])
        if attrs is not None:
            return ops_window.window(src, attrs)
    return take(src, table)


class Forms:
    """Affine forms of the values of a batcher's iteration space, found from how they were
    built, without evaluating them: ``(a, c, d)`` says the value at position ``(k, m)`` of the
    layout is ``a + c*k + d*m`` (a top-level loop's space is rows of one position, ``k`` the
    iteration and ``m = 0``). Known for the spaces' own counters and row tables (``seed``),
    numbers, and ``+ - *`` (by a number), negation, reshapes of one value per position and
    windows of such values of the loop one level out (``parent``, a top-level space) —
    what ``3*j + 1`` or ``i + 1`` traces to — and clamps into a range they do not leave
    (``minimum``/``maximum`` with a number: an index read's bounds), comparisons decided at
    every position and what selects on them (an index check's count of positions out of
    range: zero, known without evaluating it). Anything else: ``None``."""

    def __init__(self, layout: Layout, parent: "Forms | None" = None):
        self.layout = layout
        self.parent = parent
        #: id(node) -> (node, form): the node is held so that its id is not reused
        self.known: dict[int, tuple] = {}

    def seed(self, n: Node, form: tuple) -> None:
        self.known[id(n)] = (n, tuple(float(v) for v in form))

    def of(self, n: Node) -> tuple | None:
        hit = self.known.get(id(n))
        if hit is not None and hit[0] is n:
            return hit[1]
        out = self._of(n)
        self.known[id(n)] = (n, out)
        return out

    def _of(self, n: Node) -> tuple | None:
        op = n.op
        if n.shape != () and not _column(n):
            return None
        if op == Op.CONST:
            v = n.attrs[0] if n.attrs else None
            return (float(v), 0.0, 0.0) if isinstance(v, (int, float)) else None
        if op == Op.RESHAPE and n.type.size == n.args[0].type.size and _column(n) \
                and _column(n.args[0]) and n.shape[:1] == n.args[0].shape[:1]:
            return self.of(n.args[0])
        if op in (Op.ADD, Op.SUB) and n.shape == _wider(n):
            f, g = self.of(n.args[0]), self.of(n.args[1])
            if f is None or g is None:
                return None
            sign = 1.0 if op == Op.ADD else -1.0
            return tuple(x + sign * y for x, y in zip(f, g))
        if op == Op.NEG:
            f = self.of(n.args[0])
            return None if f is None else tuple(-x for x in f)
        if op == Op.MUL and n.shape == _wider(n):
            f, g = self.of(n.args[0]), self.of(n.args[1])
            if f is None or g is None:
                return None
            if f[1:] == (0.0, 0.0):
                f, g = g, f
            if g[1:] != (0.0, 0.0):
                return None  # a product of two varying values is not affine
            return tuple(x * g[0] for x in f)
        if op in (Op.MAXIMUM, Op.MINIMUM):
            # a clamp of positions into range (an index read's): the form itself where every
            # position is inside the bound already
            f, g = self.of(n.args[0]), self.of(n.args[1])
            if f is None or g is None:
                return None
            if f[1:] == (0.0, 0.0):
                f, g = g, f
            if g[1:] != (0.0, 0.0):
                return None
            span = self.layout.extremes(f)
            if span is None:
                return None
            inside = span[0] >= g[0] if op == Op.MAXIMUM else span[1] <= g[0]
            return f if inside else None
        if op in _COMPARE:
            # decided for every position by the extremes of the difference (an index check's
            # p < 0, p >= n): true is (1, 0, 0), false (0, 0, 0)
            f, g = self.of(n.args[0]), self.of(n.args[1])
            if f is None or g is None:
                return None
            span = self.layout.extremes(tuple(x - y for x, y in zip(f, g)))
            if span is None:
                return None
            lo, hi = span
            always, never = {Op.LT: (hi < 0, lo >= 0), Op.LE: (hi <= 0, lo > 0),
                             Op.GT: (lo > 0, hi <= 0), Op.GE: (lo >= 0, hi < 0)}[op]  # fmt: skip
            return (1.0, 0.0, 0.0) if always else (0.0, 0.0, 0.0) if never else None
        if op in (Op.OR, Op.AND):
            f, g = self.of(n.args[0]), self.of(n.args[1])
            if f is None or g is None or f[1:] != (0.0, 0.0) or g[1:] != (0.0, 0.0):
                return None
            a, b = bool(f[0]), bool(g[0])
            return (float(a or b if op == Op.OR else a and b), 0.0, 0.0)
        if op == Op.WHERE:
            c = self.of(n.args[0])
            if c is None or c[1:] != (0.0, 0.0):
                return None
            return self.of(n.args[1] if c[0] else n.args[2])
        if op == Op.WINDOW and self.parent is not None and _column(n.args[0]):
            f = self.parent.of(n.args[0])
            if f is None or f[2] != 0.0:
                return None
            _, _, _, a, c, d = n.attrs
            return (f[0] + f[1] * a, f[1] * c, f[1] * d)
        return None


_COMPARE = (Op.LT, Op.LE, Op.GT, Op.GE)


def _column(n: Node) -> bool:
    """One value per position of the leading axis (``(P,)``, ``(P, 1)``)."""
    return n.ndim >= 1 and n.type.size == n.shape[0]


def _wider(n: Node) -> tuple:
    """The shape of ``n``'s widest operand (a form is of values, not of broadcasts of rows)."""
    return max((a.shape for a in n.args), key=len)
