"""The reductions ``reduce_sum`` and ``reduce_max`` over static axes: their numpy references and
derivative rules, one ``defop`` block each. A family of the registry :mod:`tapejit.core.ops`.
Ties in ``reduce_max`` share the cotangent equally (as JAX); the tangent is the mean of the tied
maxima's tangents, the same convention transposed.
"""

from __future__ import annotations

import math

import numpy as np

from .ops import Op, broadcast_to, defop, div, elementwise, make, mul, reduce, reshape
from .typerules import _reduce


def _reduce_max_ref(attrs, x):
    return np.max(x, axis=attrs[0])


def _keepdims(shape, axes):
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


def _reduce_sum_vjp(g, out, x):
    (axes,) = out.attrs
    return (broadcast_to(reshape(g, _keepdims(x.shape, axes)), x.shape),)


def _argmax_mask(out, x):
    """``(keepdims shape, 0/1 mask of the maxima of x, their count per reduced slice)`` of a
    ``reduce_max`` node ``out``: how both of its rules share among tied maxima."""
    (axes,) = out.attrs
    keep = _keepdims(x.shape, axes)
    eq = elementwise(Op.EQ, x, broadcast_to(reshape(out, keep), x.shape))
    mask = make(Op.CAST, eq, attrs=("f64",))
    return keep, mask, reduce(Op.REDUCE_SUM, mask, axes)


def _reduce_max_vjp(g, out, x):
    keep, mask, count = _argmax_mask(out, x)
    share = broadcast_to(reshape(div(g, count), keep), x.shape)
    # share * indicator (as JAX): where the maximum is NaN no element equals it, count is 0 and
    # the gradient is NaN (0 * inf), not a silent 0
    return (mul(share, mask),)


def _reduce_max_jvp(t, out, x):
    """The mean of the tangents of the tied maxima of each reduced slice."""
    _, mask, count = _argmax_mask(out, x)
    return div(reduce(Op.REDUCE_SUM, mul(t[0], mask), out.attrs[0]), count)


# fmt: off
defop(Op.REDUCE_SUM, "reduce", 1, _reduce, lambda a, x: np.sum(x, axis=a[0]), _reduce_sum_vjp,
      identity=0.0, jvp=lambda t, out, x: reduce(Op.REDUCE_SUM, t[0], out.attrs[0]))
defop(Op.REDUCE_MAX, "reduce", 1, _reduce, _reduce_max_ref, _reduce_max_vjp, identity=-math.inf,
      jvp=_reduce_max_jvp)
# fmt: on
