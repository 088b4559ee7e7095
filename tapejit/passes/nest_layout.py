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


class Layout:
    """The ragged layout of a flattened two-level iteration space: ``T`` rows, row ``k`` of
    ``L0 + dL*k`` positions; :attr:`row` and :attr:`col` give each flat position's ``(k, m)``
    (int64, shape ``(P,)``)."""

    def __init__(self, T: int, L0: int, dL: int):
        self.T, self.L0, self.dL = T, L0, dL
        lengths = L0 + dL * np.arange(T, dtype=np.int64)
        self.row = np.repeat(np.arange(T, dtype=np.int64), lengths)
        self.col = np.arange(self.row.size, dtype=np.int64) - ops_window.row_base(self.row, L0, dL)
        self.P = int(self.row.size)

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
