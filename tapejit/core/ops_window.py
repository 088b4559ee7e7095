"""Ragged windows: the primitives ``window`` and ``window_add``, with their type rules, numpy
references and derivative rules, and their ``defop`` blocks at the end (a family of the registry
:mod:`tapejit.core.ops`).

A triangular element loop ::

    for k in range(n - 1):
        d = pos[k + 1:] - pos[k]        # row k: the n-1-k atoms after atom k
        e = e + np.sum(f(d))

works on *rows of different lengths*. Re-rolled (:mod:`tapejit.passes.reroll.ragged`), all its
rows are one flat array, row after row: a **ragged layout** ``R = (T, L0, dL)`` has ``T`` rows,
row ``k`` of length ``L(k) = L0 + dL*k``, starting at flat position ``base(k) = L0*k +
dL*k*(k-1)/2``; ``P = base(T)`` positions in all. Element ``(k, m)`` (``0 <= m < L(k)``) of
the layout is at flat position ``p = base(k) + m``.

* ``window(x) {T, L0, dL, a, c, d}``: shape ``(P, *x.shape[1:])``, element ``(k, m)`` the row
  ``x[a + c*k + d*m]`` of ``x`` (shape ``(M, *rest)``). ``pos[k+1:]`` over the rows is ``a = 1,
  c = 1, d = 1``; ``pos[k]`` repeated across row ``k`` (a per-row value spread over its row) is
  ``a = 0, c = 1, d = 0``.
* ``window_add(acc, upd) {T, L0, dL, a, c, d}``: ``acc`` with ``upd[p(k, m)]`` added to row
  ``a + c*k + d*m``, in the order of ``p`` — ``numpy.add.at`` at the window's positions. With
  ``d = 0`` and ``c = 1`` it sums each row of ``upd`` into one row of ``acc`` (a segment sum).

They are ``take`` and ``add_at`` (:mod:`tapejit.core.ops_table`) at the positions the attributes give,
and they are each other's adjoint: the cotangent of a ``window`` is a ``window_add`` of it into
zeros, the cotangent of ``window_add``'s update a ``window`` of it. Both are linear, so the
tangent rules apply them to the tangents. Keeping the positions as a formula instead of a table
lets codegen loop over ``(k, m)`` directly (:mod:`tapejit.codegen.lower.window`): a nest whose
inner loop reads ``x`` at consecutive rows, vectorised as a hand-written double loop is.
"""

from __future__ import annotations

import numpy as np

from .ir import Node, Type
from .ops import Op, const, defop, make
from .ops import reshape as ops_reshape


def layout_size(T: int, L0: int, dL: int) -> int:
    """``P``, the number of positions of the ragged layout ``(T, L0, dL)``."""
    return T * L0 + dL * T * (T - 1) // 2


def row_base(k, L0: int, dL: int):
    """Flat position of row ``k``'s first element (``k`` an int or an integer array)."""
    return L0 * k + dL * k * (k - 1) // 2


def _unit_rows(x: Node) -> bool:
    """Rows of one element (``(M, 1, ...)``): windowed as the ``(M,)`` values, so that the
    loop over the window's positions is the same loop as its neighbours' over ``(P,)``."""
    return x.ndim >= 2 and all(d == 1 for d in x.shape[1:])


def window(x: Node, attrs: tuple) -> Node:
    """Rows ``x[a + c*k + d*m]`` for every ``(k, m)`` of the layout; ``attrs = (T, L0, dL, a,
    c, d)``."""
    if _unit_rows(x):
        w = make(Op.WINDOW, ops_reshape(x, (x.shape[0],)), attrs=tuple(attrs))
        return ops_reshape(w, (w.shape[0], *x.shape[1:]))
    return make(Op.WINDOW, x, attrs=tuple(attrs))


def window_add(acc: Node, upd: Node, attrs: tuple) -> Node:
    """``acc`` with ``upd[p(k, m)]`` added to row ``a + c*k + d*m``, in order of ``p``."""
    if _unit_rows(acc) and upd.ndim >= 1 and upd.type.size == upd.shape[0]:
        out = make(Op.WINDOW_ADD, ops_reshape(acc, (acc.shape[0],)),
                   ops_reshape(upd, (upd.shape[0],)), attrs=tuple(attrs))  # fmt: skip
        return ops_reshape(out, acc.shape)
    return make(Op.WINDOW_ADD, acc, upd, attrs=tuple(attrs))


def positions(attrs: tuple) -> np.ndarray:
    """The row each flat position reads (int64, shape ``(P,)``)."""
    T, L0, dL, a, c, d = attrs
    lengths = L0 + dL * np.arange(T, dtype=np.int64)
    k = np.repeat(np.arange(T, dtype=np.int64), lengths)
    m = np.arange(k.size, dtype=np.int64) - row_base(k, L0, dL)
    return a + c * k + d * m


def _check(attrs: tuple, rows: int) -> int:
    """``P`` of a valid window over an axis of ``rows`` rows; raises ``ValueError`` else."""
    if len(attrs) != 6 or not all(isinstance(v, int) for v in attrs):
        raise ValueError(f"a window needs six integer attributes (T, L0, dL, a, c, d), got {attrs}")
    T, L0, dL, a, c, d = attrs
    if T < 1 or L0 < 0 or L0 + dL * (T - 1) < 0 or d < 0:
        raise ValueError(f"a ragged layout needs T >= 1 rows of lengths >= 0 and d >= 0: {attrs}")
    # the rows with at least one element are a range of k (L is linear in k); positions are
    # monotone in m (d >= 0) and linear in k along each end of a row, so the extremes are at
    # the four corners
    ks = [k for k in (0, T - 1) if L0 + dL * k > 0]
    if dL != 0 and len(ks) < 2:
        live = [k for k in range(T) if L0 + dL * k > 0]
        ks = [live[0], live[-1]] if live else []
    ends = [a + c * k for k in ks] + [a + c * k + d * (L0 + dL * k - 1) for k in ks]
    if ends and (min(ends) < 0 or max(ends) >= rows):
        raise ValueError(f"window {attrs} reads rows {min(ends)}..{max(ends)} of an axis of {rows}")
    return layout_size(T, L0, dL)


def _window_type(types, attrs) -> Type:
    (x,) = types
    if x.dtype != "f64" or x.shape == ():
        raise TypeError(f"window needs an f64 array, got {x}")
    return Type((_check(attrs, x.shape[0]), *x.shape[1:]))


def _window_add_type(types, attrs) -> Type:
    acc, upd = types
    if acc.dtype != "f64" or upd.dtype != "f64" or acc.shape == ():
        raise TypeError(f"window_add needs f64 arrays, got {acc} and {upd}")
    P = _check(attrs, acc.shape[0])
    if upd.shape != (P, *acc.shape[1:]):
        raise ValueError(
            f"window_add of updates {upd.shape} into {acc.shape} over a layout of {P} positions: "
            f"the updates must be ({P}, {', '.join(map(str, acc.shape[1:]))})"
        )
    return acc


def _window_ref(attrs, x):
    return np.asarray(x, dtype=np.float64)[positions(attrs)]


def _window_add_ref(attrs, acc, upd):
    out = np.array(acc, dtype=np.float64, copy=True)
    np.add.at(out, positions(attrs), upd)
    return out


def _window_vjp(g, out, x):
    return (window_add(const(0.0, x.shape), g, out.attrs),)


def _window_add_vjp(g, out, acc, upd):
    return g, window(g, out.attrs)


def _window_jvp(t, out, x):
    (tx,) = t
    return None if tx is None else window(tx, out.attrs)


def _window_add_jvp(t, out, acc, upd):
    ta, tu = t
    if tu is None:
        return ta
    return window_add(const(0.0, acc.shape) if ta is None else ta, tu, out.attrs)


# fmt: off
# window(x): rows x[a + c*k + d*m] over the positions (k, m) of a ragged layout (T rows, row k of
# L0 + dL*k); window_add(acc, upd): upd added at those rows, in order
defop(Op.WINDOW, "index", 1, _window_type, _window_ref, _window_vjp, jvp=_window_jvp)
defop(Op.WINDOW_ADD, "index", 2, _window_add_type, _window_add_ref, _window_add_vjp,
      jvp=_window_add_jvp)
# fmt: on
