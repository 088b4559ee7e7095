"""Shapes and static indexing: ``broadcast_to``, ``reshape``, ``transpose`` (views) and
``index``, ``scatter_add``, ``scatter`` (a gather and the two writes at a static index set),
with their numpy references and derivative rules, one ``defop`` block each. A family of the
registry :mod:`tapejit.core.ops`. An ``index`` returns a :class:`~tapejit.core.ops.Sparse`
cotangent, which reverse mode applies as a scatter-add into one accumulator per operand.
"""

from __future__ import annotations

import numpy as np

from .ops import (
    Op,
    Sparse,
    _or_zero,
    broadcast_to,
    const,
    defop,
    index,
    make,
    reduce,
    reshape,
    transpose,
)
from .typerules import (
    _broadcast_to,
    _index,
    _np_items,
    _reshape,
    _scatter,
    _scatter_add,
    _transpose,
)


def _scatter_ref(attrs, acc, upd):
    out = np.array(acc, dtype=np.float64, copy=True)
    out[_np_items(attrs)] += upd
    return out


def _scatter_set_ref(attrs, acc, upd):
    out = np.array(acc, copy=True)
    out[_np_items(attrs)] = upd
    return out


def _broadcast_vjp(g, out, x):
    lead = out.ndim - x.ndim
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(x.shape) if d == 1 and out.shape[lead + i] != 1
    )
    return (reshape(reduce(Op.REDUCE_SUM, g, axes), x.shape),)


def _scatter_add_jvp(t, out, acc, upd):
    ta, tu = t
    if tu is None:
        return ta
    return make(Op.SCATTER_ADD, _or_zero(ta, acc), tu, attrs=out.attrs)


def _scatter_jvp(t, out, acc, upd):
    """acc[items] = upd: the tangent of acc with the overwritten elements' tangents replaced."""
    ta, tu = t
    return make(Op.SCATTER, _or_zero(ta, acc), _or_zero(tu, upd), attrs=out.attrs)


# fmt: off
defop(Op.BROADCAST_TO, "shape", 1, _broadcast_to, lambda a, x: np.broadcast_to(x, a[0]),
      _broadcast_vjp, jvp=lambda t, out, x: broadcast_to(t[0], out.shape))
defop(Op.RESHAPE, "shape", 1, _reshape, lambda a, x: np.reshape(x, a[0]),
      lambda g, out, x: (reshape(g, x.shape),), jvp=lambda t, out, x: reshape(t[0], out.shape))
defop(Op.TRANSPOSE, "shape", 1, _transpose, lambda a, x: np.transpose(x, a[0]),
      lambda g, out, x: (transpose(g, tuple(np.argsort(out.attrs[0]).tolist())),),
      jvp=lambda t, out, x: transpose(t[0], out.attrs[0]))
defop(Op.INDEX, "index", 1, _index, lambda a, x: np.asarray(x)[_np_items(a)],
      lambda g, out, x: (Sparse(g, out.attrs),), jvp=lambda t, out, x: index(t[0], out.attrs))
defop(Op.SCATTER_ADD, "index", 2, _scatter_add, _scatter_ref,
      lambda g, out, acc, upd: (g, index(g, out.attrs)), jvp=_scatter_add_jvp)
# acc[items] = upd: the overwritten elements of acc get no cotangent
defop(Op.SCATTER, "index", 2, _scatter, _scatter_set_ref,
      lambda g, out, acc, upd: (make(Op.SCATTER, g, const(0.0, upd.shape), attrs=out.attrs),
                                index(g, out.attrs)),
      jvp=_scatter_jvp)
# fmt: on
