"""numpy's NaN-ignoring statistics and the index of an extremum, as compositions.

Every ``nan*`` function replaces the NaN entries by the reduction's identity with
``where(isnan(x), identity, x)`` and counts the others, so the cotangent of a NaN entry is 0
(``where`` passes the cotangent only to the selected branch), as ``jax.numpy.nan*`` give.
A slice with no number in it gives what numpy gives: 0 for ``nansum``, 1 for ``nanprod``, NaN
for ``nanmean``/``nanvar``/``nanstd``/``nanmax``/``nanmin``/``nanmedian``/``nanquantile``
(numpy warns; tapejit does not).

* ``nanmean``/``nanvar``/``nanstd`` follow numpy's algorithm (``numpy/lib/_nanfunctions_impl.py``):
  sum of the numbers over their count, deviations with the NaN entries zeroed, squared and
  summed over ``count - ddof`` (NaN where that is <= 0).
* ``nanmedian``/``nanquantile``/``nanpercentile`` sort with NaN replaced by +inf (the numbers
  first) and read the order statistics at positions that depend on each slice's count, by a
  one-hot weighting of the sorted slice (the positions are data, not trace-time constants).
  The interpolation is numpy's ``linear`` method and its ``_lerp``.
* ``argmax``/``argmin``/``nanargmax``/``nanargmin``: the first position where the slice
  reaches its extremum (numpy: the first NaN for ``argmax``), computed in the trace and
  returned as a numpy integer array of the example's indices with a *guard* that they still
  hold (as ``int(x)`` does), so other inputs recompile; the index has no derivative. An
  all-NaN slice raises, as in numpy.

``FUNCTIONS`` is merged into :data:`tapejit.frontend.numpy.numpy_api.FUNCTIONS`.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .np_common import _axis, _float_dtype, _no_out, _reduce, _t
from .np_reduce import _max, _min, _prod, _scan, _sort, _sum
from .np_shape import _expand_dims, _moveaxis, _stack
from ...core.ops import Op
from ..errors import _fail
from ..tracer import Tracer, _binary, _integer_array, _reshape, _unary, _where


def _isnan(x: Tracer) -> Tracer:
    return _binary(Op.NE, x, x)


def _filled(a, fill: float) -> tuple[Tracer, Tracer]:
    """(``a`` with NaN entries replaced by ``fill``, the mask of the numbers in ``a``)."""
    x = _t(a)
    nan = _isnan(x)
    return _where(nan, fill, x), _unary(Op.NOT, nan)


def _count(ok: Tracer, axis, keepdims) -> Tracer:
    return _reduce(Op.REDUCE_SUM, _where(ok, 1.0, 0.0), axis, keepdims)


def _no_where(name: str, where) -> None:
    if where is not True:
        raise _fail(f"numpy.{name} with where= is not supported by tapejit")


# ----------------------------------------------------------------------------------------------
# Sums, products, extrema


def _nansum(a, axis=None, dtype=None, out=None, keepdims=False, initial=np._NoValue, where=True):
    return _sum(_filled(a, 0.0)[0], axis, dtype, out, keepdims, initial, where)


def _nanprod(a, axis=None, dtype=None, out=None, keepdims=False, initial=np._NoValue, where=True):
    return _prod(_filled(a, 1.0)[0], axis, dtype, out, keepdims, initial, where)


def _nan_extremum(name: str, reduce_: Callable, fill: float) -> Callable:
    """``nanmax``/``nanmin``: the extremum of the numbers, NaN for a slice with none."""

    def fn(a, axis=None, out=None, keepdims=False, initial=np._NoValue, where=True):
        _no_out(out, name)
        _no_where(name, where)
        x, ok = _filled(a, fill)
        r = reduce_(x, axis, None, keepdims, initial)
        if initial is not np._NoValue:
            return r  # the initial value stands in for an empty slice
        return _where(_count(ok, axis, keepdims) > 0.0, r, np.nan)

    return fn


def _nancumsum(a, axis=None, dtype=None, out=None):
    _no_out(out, "nancumsum")
    _float_dtype("nancumsum", dtype)
    return _scan(_filled(a, 0.0)[0], axis, Op.ADD, 0.0)


def _nancumprod(a, axis=None, dtype=None, out=None):
    _no_out(out, "nancumprod")
    _float_dtype("nancumprod", dtype)
    return _scan(_filled(a, 1.0)[0], axis, Op.MUL, 1.0)


# ----------------------------------------------------------------------------------------------
# Moments


def _nanmean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=True):
    _no_out(out, "nanmean")
    _float_dtype("nanmean", dtype)
    _no_where("nanmean", where)
    x, ok = _filled(a, 0.0)
    return _reduce(Op.REDUCE_SUM, x, axis, keepdims) / _count(ok, axis, keepdims)


def _nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True,
            mean=np._NoValue, correction=np._NoValue):  # fmt: skip
    """numpy's nanvar: the deviations from the mean of the numbers, NaN entries zeroed, their
    squares summed over ``count - ddof``; NaN where that is <= 0."""
    _no_out(out, "nanvar")
    _float_dtype("nanvar", dtype)
    _no_where("nanvar", where)
    if mean is not np._NoValue:
        raise _fail("numpy.nanvar with mean= is not supported by tapejit")
    if correction is not np._NoValue:
        if ddof != 0:
            raise _fail("numpy.nanvar: ddof and correction can't be provided simultaneously.")
        ddof = correction
    x, ok = _filled(a, 0.0)
    cnt = _count(ok, axis, True)
    avg = _reduce(Op.REDUCE_SUM, x, axis, True) / cnt
    d = _where(ok, x - avg, 0.0)
    ssq = _reduce(Op.REDUCE_SUM, d * d, axis, keepdims)
    dof = _count(ok, axis, keepdims) - float(ddof)
    good = dof > 0.0
    return _where(good, ssq / _where(good, dof, 1.0), np.nan)


def _nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True,
            mean=np._NoValue, correction=np._NoValue):  # fmt: skip
    v = _nanvar(a, axis, dtype, out, ddof, keepdims, where=where, mean=mean,
                correction=correction)  # fmt: skip
    return _unary(Op.SQRT, v)


# ----------------------------------------------------------------------------------------------
# Order statistics


def _last_axis(a, axis) -> tuple[Tracer, int | None]:
    """``a`` with the reduced axis last (flattened for ``axis=None``), and that axis."""
    a = _t(a)
    if axis is None:
        return _reshape(a, (-1,)), None
    if np.ndim(axis) != 0:
        raise _fail("a tuple of axes is not supported here by tapejit; reshape first")
    axis = _axis(axis, a.ndim)
    return _moveaxis(a, axis, -1), axis


def _order_statistics(a, axis):
    """(the slices sorted along the last axis with NaN last, the count of numbers with a
    trailing unit axis, positions 0..n-1, the input's number of axes, axis)."""
    x, axis = _last_axis(a, axis)
    nan = _isnan(x)
    s = _sort(_where(nan, np.inf, x), -1)
    cnt = _count(_unary(Op.NOT, nan), -1, True)
    n = x.shape[-1]
    k = np.arange(n, dtype=np.float64)
    s = _where(k < cnt, s, 0.0)  # the +inf stand-ins would make 0 * inf below
    return s, cnt, k, _t(a).ndim, axis


def _pick(s, k, pos) -> Tracer:
    """``s[..., pos]`` for a whole-number position per slice (a trailing unit axis)."""
    return _reduce(Op.REDUCE_SUM, _where(_binary(Op.EQ, k, pos), s, 0.0), -1)


def _finish(r, cnt, ndim: int, axis, keepdims: bool, lead: int = 0) -> Tracer:
    """NaN for a slice with no number; the reduced axis put back as a unit axis for
    ``keepdims`` (after ``lead`` leading axes of quantiles)."""
    r = _where(_reshape(cnt, cnt.shape[:-1]) > 0.0, r, np.nan)
    if keepdims:
        if axis is None:
            r = _reshape(r, r.shape[:lead] + (1,) * ndim)
        else:
            r = _expand_dims(r, lead + axis)
    return r


def _nanmedian(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """The mean of the two middle numbers of each slice (the middle one, twice, for an odd
    count), as numpy's median."""
    _no_out(out, "nanmedian")
    s, cnt, k, ndim, axis = _order_statistics(a, axis)
    half = (cnt - 1.0) * 0.5
    lo, hi = _unary(Op.FLOOR, half), _unary(Op.CEIL, half)
    r = (_pick(s, k, lo) + _pick(s, k, hi)) * 0.5
    return _finish(r, cnt, ndim, axis, keepdims)


def _nanquantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
                 keepdims=False, *, weights=None, interpolation=None):  # fmt: skip
    """numpy's ``linear`` quantile of the numbers of each slice: virtual index ``(n - 1) q``,
    its floor and the next position (the last one at most), interpolated by numpy's
    ``_lerp``."""
    _no_out(out, "nanquantile")
    if method != "linear" or interpolation is not None or weights is not None:
        raise _fail("numpy.nanquantile: only method='linear' without weights is supported")
    qs = np.asarray(q, dtype=np.float64)
    if isinstance(q, Tracer) or qs.size == 0 or np.any((qs < 0) | (qs > 1)):
        raise _fail("numpy.nanquantile: q must be constants in [0, 1]")
    s, cnt, k, ndim, axis = _order_statistics(a, axis)
    out = []
    for qv in qs.reshape(-1):
        v = (cnt - 1.0) * float(qv)
        lo = _unary(Op.FLOOR, v)
        hi = _binary(Op.MINIMUM, lo + 1.0, cnt - 1.0)
        t = _reshape(v - lo, v.shape[:-1])
        x0, x1 = _pick(s, k, lo), _pick(s, k, hi)
        d = x1 - x0
        out.append(_where(t >= 0.5, x1 - d * (1.0 - t), x0 + d * t))
    r = out[0] if qs.ndim == 0 else _reshape(_stack(out), qs.shape + out[0].shape)
    return _finish(r, cnt, ndim, axis, keepdims, qs.ndim)


def _nanpercentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
                   keepdims=False, *, weights=None, interpolation=None):  # fmt: skip
    if isinstance(q, Tracer):
        raise _fail("numpy.nanpercentile: q must be constants in [0, 100]")
    q = np.true_divide(q, 100.0)
    return _nanquantile(a, q, axis, out, overwrite_input, method, keepdims, weights=weights,
                        interpolation=interpolation)  # fmt: skip


# ----------------------------------------------------------------------------------------------
# Positions of extrema


def _arg_extremum(name: str, largest: bool, skip_nan: bool) -> Callable:
    def fn(a, axis=None, out=None, *, keepdims=False):
        _no_out(out, name)
        x, ax = _last_axis(a, axis)
        if not largest:
            x = -x
        nan = _isnan(x)
        if skip_nan:
            f = _where(nan, -np.inf, x)
            m = _reduce(Op.REDUCE_MAX, f, -1, True)
            hit = _binary(Op.AND, _binary(Op.EQ, f, m), _unary(Op.NOT, nan))
        else:  # the first NaN, as numpy
            m = _reduce(Op.REDUCE_MAX, x, -1, True)
            hit = _binary(Op.OR, _binary(Op.EQ, x, m), nan)
        n = x.shape[-1]
        if n == 0:
            raise _fail(f"numpy.{name}: attempt to get {name} of an empty sequence")
        k = np.arange(n, dtype=np.float64)
        idx = -_reduce(Op.REDUCE_MAX, _where(hit, -k, -float(n)), -1)
        if np.any(np.asarray(idx.value) >= n):
            raise _fail(f"numpy.{name}: All-NaN slice encountered")
        r = _integer_array(idx, np.dtype(np.intp))
        if keepdims:
            return r.reshape((1,) * _t(a).ndim) if ax is None else np.expand_dims(r, ax)
        return r[()] if r.ndim == 0 else r

    return fn


FUNCTIONS: dict[Callable, Callable] = {
    np.nansum: _nansum,
    np.nanprod: _nanprod,
    np.nanmax: _nan_extremum("nanmax", _max, -np.inf),
    np.nanmin: _nan_extremum("nanmin", _min, np.inf),
    np.nanmean: _nanmean,
    np.nanvar: _nanvar,
    np.nanstd: _nanstd,
    np.nancumsum: _nancumsum,
    np.nancumprod: _nancumprod,
    np.nanmedian: _nanmedian,
    np.nanquantile: _nanquantile,
    np.nanpercentile: _nanpercentile,
    np.argmax: _arg_extremum("argmax", True, False),
    np.argmin: _arg_extremum("argmin", False, False),
    np.nanargmax: _arg_extremum("nanargmax", True, True),
    np.nanargmin: _arg_extremum("nanargmin", False, True),
}
