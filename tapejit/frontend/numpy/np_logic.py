"""numpy's truth tests on traced values: ``np.isclose``, ``np.allclose``, ``np.all``, ``np.any``
and the complex-type predicates, as compositions of comparisons and reductions.

``np.isclose`` follows numpy's formula (``numpy/_core/numeric.py``):
``|a - b| <= atol + rtol |b|`` where ``b`` is finite, or ``a == b`` (equal infinities), or both
NaN with ``equal_nan``; the result is a traced bool array. ``np.allclose`` is
``bool(np.all(np.isclose(...)))``, as in numpy: the ``bool()`` of a traced scalar records a
*guard*, so another input that changes the answer is re-traced, never answered wrongly.
Traced values are always real float64 (or bool), so ``np.iscomplex`` & co. are constants.
"""

from __future__ import annotations

import numpy as np

from .np_common import _no_kwargs, _no_out, _reduce, _t
from ...core.ops import Op
from ..tracer import Tracer, _where


def _truth(a) -> Tracer:
    x = _t(a)
    return x if x.node.dtype == "bool" else x != 0.0  # NaN is true, as in numpy


def _all(a, axis=None, out=None, keepdims=False, **kw) -> Tracer:
    """``np.all``: no element is false (a sum of 0/1 flags, so an empty array is all true)."""
    _no_out(out, "all")
    _no_kwargs("all", {k: v for k, v in kw.items() if not (k == "where" and v is True)})
    return _reduce(Op.REDUCE_SUM, _where(_truth(a), 0.0, 1.0), axis, keepdims) == 0.0


def _any(a, axis=None, out=None, keepdims=False, **kw) -> Tracer:
    """``np.any``: some element is true."""
    _no_out(out, "any")
    _no_kwargs("any", {k: v for k, v in kw.items() if not (k == "where" and v is True)})
    return _reduce(Op.REDUCE_SUM, _where(_truth(a), 1.0, 0.0), axis, keepdims) > 0.0


def _isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False) -> Tracer:
    x, y = _t(a), _t(b)
    x = x if x.node.dtype == "f64" else x.astype(float)
    y = y if y.node.dtype == "f64" else y.astype(float)
    close = (abs(x - y) <= atol + rtol * abs(y)) & (abs(y) < np.inf) | (x == y)
    if equal_nan:
        close = close | np.isnan(x) & np.isnan(y)
    return close


def _allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False) -> bool:
    return bool(_all(_isclose(a, b, rtol, atol, equal_nan)))


def _constant(value: bool):
    """A predicate that is ``value`` for every element of a real array."""

    def fn(x):
        shape = np.shape(x)
        return np.bool_(value) if shape == () else np.full(shape, value)

    return fn


FUNCTIONS = {
    np.all: _all,
    np.any: _any,
    np.isclose: _isclose,
    np.allclose: _allclose,
    np.iscomplex: _constant(False),
    np.isreal: _constant(True),
    np.iscomplexobj: lambda x: False,
    np.isrealobj: lambda x: True,
}
