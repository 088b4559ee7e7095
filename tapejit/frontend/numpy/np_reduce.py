"""numpy's reductions and statistics as compositions: ``sum``/``max``/``min``/``mean`` with
``where=``/``initial=``, ``var``/``std``, ``prod`` (pairwise, so zeros need no division),
``cumsum``/``cumprod`` (Hillis–Steele doubling), ``diff``, ``average``, ``sort`` (a bitonic
network), ``median``/``quantile`` and ``logaddexp.reduce`` (the ``nan*`` ones are in :mod:`tapejit.frontend.numpy.np_nan`)."""

from __future__ import annotations

import math

import numpy as np

from .np_common import _axis, _float_dtype, _like, _masked, _mean, _no_kwargs, _no_out, _reduce, _t
from .np_shape import _concatenate, _expand_dims, _moveaxis, _squeeze, _stack
from ...core.ops import Op
from ..errors import _fail
from ..tracer import Tracer, _binary, _reshape, _where, lift


def _sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=np._NoValue, where=True):
    _no_out(out, "sum")
    _float_dtype("sum", dtype)
    x, finish = _masked("sum", a, where, initial, 0.0, Op.ADD)
    return finish(_reduce(Op.REDUCE_SUM, x, axis, keepdims))


def _max(a, axis=None, out=None, keepdims=False, initial=np._NoValue, where=True):
    _no_out(out, "max")
    x, finish = _masked("max", a, where, initial, -np.inf, Op.MAXIMUM, has_identity=False)
    return finish(_reduce(Op.REDUCE_MAX, x, axis, keepdims))


def _min(a, axis=None, out=None, keepdims=False, initial=np._NoValue, where=True):
    _no_out(out, "min")
    x, finish = _masked("min", a, where, initial, np.inf, Op.MINIMUM, has_identity=False)
    return finish(-_reduce(Op.REDUCE_MAX, -x, axis, keepdims))


def _mean_fn(a, axis=None, dtype=None, out=None, keepdims=False, where=True):
    _no_out(out, "mean")
    _float_dtype("mean", dtype)
    if where is True:
        return _mean(a, axis, keepdims)
    x = lift(a)
    mask = np.broadcast_to(where, x.shape) if not isinstance(where, Tracer) else where
    count = _reduce(Op.REDUCE_SUM, _where(mask, 1.0, 0.0), axis, keepdims)
    return _reduce(Op.REDUCE_SUM, _where(mask, x, 0.0), axis, keepdims) / count


def _var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kw):
    """Two-pass variance (numpy's own algorithm): mean, then the mean square deviation."""
    _no_out(out, "var")
    _float_dtype("var", dtype)
    _no_kwargs("var", kw)
    a = _t(a)
    m = _mean(a, axis, True)
    d = a - m
    axes = range(a.ndim) if axis is None else ((axis,) if np.ndim(axis) == 0 else axis)
    n = math.prod(a.shape[_axis(k, a.ndim)] for k in axes)
    return _reduce(Op.REDUCE_SUM, d * d, axis, keepdims) / float(max(n - ddof, 0))


def _std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kw):
    _no_kwargs("std", kw)
    v = _var(a, axis, dtype, out, ddof, keepdims)
    if ddof == 0 and v.size and _t(a).size == v.size:
        # one element per group: the deviation is identically 0, so is its derivative (sqrt's
        # rule would give 0 * inf = nan at 0)
        return v * 0.0
    return np.sqrt(v)


def _average(a, axis=None, weights=None, returned=False, keepdims=False):
    a = _t(a)
    if weights is None:
        avg = _mean(a, axis, keepdims)
        wsum = _like(float(a.size // max(avg.size, 1)), avg)
    else:
        w = _t(weights)
        if w.shape != a.shape:
            if axis is None or w.ndim != 1:
                raise _fail("numpy.average: weights of another shape need a 1-D weights and axis")
            ax = _axis(axis, a.ndim)
            w = _reshape(w, tuple(a.shape[ax] if i == ax else 1 for i in range(a.ndim)))
            w = np.broadcast_to(w, a.shape)
        wsum = _reduce(Op.REDUCE_SUM, w, axis, keepdims)
        avg = _reduce(Op.REDUCE_SUM, a * w, axis, keepdims) / wsum
    return (avg, wsum) if returned else avg


def _pairwise(a: Tracer, axis: int, op: Op, identity: float) -> Tracer:
    """Reduce ``a`` along ``axis`` with ``op`` by halving: log2(n) vector steps (the product's
    gradient then needs no division, so zeros are exact)."""
    a = _moveaxis(a, axis, 0)
    while a.shape[0] > 1:
        n = a.shape[0]
        if n % 2:
            a = _concatenate([a, _like(identity, a, shape=(1, *a.shape[1:]))], 0)
            n += 1
        a = _binary(op, a[0:n:2], a[1:n:2])
    return _reshape(a, a.shape[1:]) if a.shape[0] == 1 else _like(identity, a, shape=a.shape[1:])


def _prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=np._NoValue, where=True):
    _no_out(out, "prod")
    _float_dtype("prod", dtype)
    a, finish = _masked("prod", a, where, initial, 1.0, Op.MUL)
    return finish(_prod_all(a, axis, keepdims))


def _prod_all(a, axis, keepdims):
    if axis is None:
        r = _pairwise(_reshape(a, (-1,)), 0, Op.MUL, 1.0)
        return _reshape(r, (1,) * a.ndim) if keepdims else r
    axes = sorted({_axis(k, a.ndim) for k in ((axis,) if np.ndim(axis) == 0 else axis)})
    r = a
    for k in reversed(axes):
        r = _pairwise(r, k, Op.MUL, 1.0)
    if keepdims:
        r = _reshape(r, tuple(1 if i in axes else d for i, d in enumerate(a.shape)))
    return r


def _scan(a, axis, op: Op, identity: float) -> Tracer:
    """Inclusive prefix ``op`` along ``axis``: Hillis–Steele doubling, log2(n) shifted steps
    (Hillis & Steele, "Data parallel algorithms", CACM 1986)."""
    a = _t(a)
    if axis is None:
        a, axis = _reshape(a, (-1,)), 0
    axis = _axis(axis, a.ndim)
    r = _moveaxis(a, axis, 0)
    n, k = r.shape[0], 1
    while k < n:
        shifted = _concatenate([_like(identity, r, shape=(k, *r.shape[1:])), r[: n - k]], 0)
        r = _binary(op, r, shifted)
        k *= 2
    return _moveaxis(r, 0, axis)


def _diff(a, n=1, axis=-1, prepend=None, append=None):
    a = _t(a)
    axis = _axis(axis, a.ndim)
    parts = [p for p in (prepend, a, append) if p is not None]
    if len(parts) > 1:
        parts = [
            _t(p)
            if np.ndim(p) == a.ndim
            else np.broadcast_to(_t(p), tuple(1 if i == axis else d for i, d in enumerate(a.shape)))
            for p in parts
        ]
        a = _concatenate(parts, axis)
    for _ in range(n):
        hi = tuple(slice(1, None) if i == axis else slice(None) for i in range(a.ndim))
        lo = tuple(slice(None, -1) if i == axis else slice(None) for i in range(a.ndim))
        a = a[hi] - a[lo]
    return a


def _sort(a, axis=-1, kind=None, order=None, stable=None):
    """Ascending sort along ``axis`` by a bitonic sorting network (Batcher, "Sorting networks and
    their applications", AFIPS 1968): log2(n)^2 / 2 vector stages of ``minimum``/``maximum`` on
    reshaped halves, so the gradient flows through the permutation (each output's cotangent to
    the input it came from; tied values share it). The length is padded to a power of two with
    +inf. NaN propagates through the comparisons (numpy sorts NaN to the end)."""
    a = _t(a)
    if axis is None:
        a, axis = _reshape(a, (-1,)), -1
    axis = _axis(axis, a.ndim)
    x = _moveaxis(a, axis, -1)
    lead, n = x.shape[:-1], x.shape[-1]
    if n <= 1:
        return a
    size = 1 << (n - 1).bit_length()
    if size != n:
        x = _concatenate([x, _like(np.inf, x, shape=lead + (size - n,))], -1)
    k = 2
    while k <= size:
        j = k // 2
        while j >= 1:
            r = _reshape(x, lead + (size // (2 * j), 2, j))
            lo_in, hi_in = r[..., 0, :], r[..., 1, :]
            lo, hi = _binary(Op.MINIMUM, lo_in, hi_in), _binary(Op.MAXIMUM, lo_in, hi_in)
            # blocks whose bit k is set sort descending (the bitonic merge's direction)
            block = np.arange(size // (2 * j)) * 2 * j
            desc = np.broadcast_to(((block & k) != 0)[:, None], (size // (2 * j), j))
            first = _where(desc, hi, lo)
            second = _where(desc, lo, hi)
            x = _reshape(_stack([first, second], -2), lead + (size,))
            j //= 2
        k *= 2
    if size != n:
        x = x[..., :n]
    return _moveaxis(x, -1, axis)


def _partition(a, kth, axis=-1, kind=None, order=None):
    """A full sort: a valid partition for every ``kth`` (numpy leaves the order within each
    side unspecified, so elements other than the ``kth`` may differ from numpy's)."""
    return _sort(a, axis)


def _median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    _no_out(out, "median")
    a = _t(a)
    if axis is None:
        a, axis = _reshape(a, (-1,)), 0
    axis = _axis(axis, a.ndim)
    s = _moveaxis(_sort(a, axis), axis, -1)
    n = s.shape[-1]
    m = s[..., n // 2] if n % 2 else 0.5 * (s[..., n // 2 - 1] + s[..., n // 2])
    return _expand_dims(m, axis) if keepdims else m


def _quantile_sorted(s, q, axis: int):
    """numpy's default ('linear') quantile of ``s`` sorted along ``axis``: q in [0, 1]."""
    n = s.shape[axis]
    qs = np.atleast_1d(np.asarray(q, dtype=float))
    out = []
    for qv in qs:
        pos = qv * (n - 1)
        lo = int(np.floor(pos))
        hi = min(lo + 1, n - 1)
        frac = pos - lo
        pre = (slice(None),) * axis
        a, b = s[pre + (lo,)], s[pre + (hi,)]
        out.append(a + (b - a) * frac if frac else a)
    return out[0] if np.ndim(q) == 0 else _stack(out)


def _quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False,
              **kw):  # fmt: skip
    _no_out(out, "quantile")
    _no_kwargs("quantile", kw)
    if method != "linear":
        raise _fail(f"numpy.quantile with method={method!r} is not supported (only 'linear')")
    if keepdims:
        raise _fail("numpy.quantile with keepdims=True is not supported")
    a = _t(a)
    if axis is None:
        a, axis = _reshape(a, (-1,)), 0
    axis = _axis(axis, a.ndim)
    return _quantile_sorted(_sort(a, axis), q, axis)


def _logsumexp(a, axis=0, dtype=None, out=None, keepdims=False, **kw):
    """``np.logaddexp.reduce``: log(sum(exp(a))) shifted by the maximum (a -inf maximum, all
    terms -inf, gives -inf)."""
    _no_out(out, "logaddexp.reduce")
    _no_kwargs("logaddexp.reduce", kw)
    a = _t(a)
    m = _reduce(Op.REDUCE_MAX, a, axis, True)
    safe = _where(abs(m) < np.inf, m, 0.0)
    r = np.log(_reduce(Op.REDUCE_SUM, np.exp(a - safe), axis, True)) + safe
    return r if keepdims else _squeeze(r, range(a.ndim) if axis is None else axis)


def _trapezoid(y, x=None, dx=1.0, axis=-1):
    """``np.trapezoid``: sum of (y[i+1] + y[i]) / 2 * dx_i along ``axis``."""
    y = _t(y)
    axis = _axis(axis, y.ndim)
    hi = tuple(slice(1, None) if i == axis else slice(None) for i in range(y.ndim))
    lo = tuple(slice(None, -1) if i == axis else slice(None) for i in range(y.ndim))
    if x is None:
        d = dx
    else:
        x = _t(x)
        d = x[1:] - x[:-1] if x.ndim == 1 else x[hi] - x[lo]
        if x.ndim == 1 and y.ndim > 1:
            d = _reshape(d, tuple(-1 if i == axis else 1 for i in range(y.ndim)))
    return _reduce(Op.REDUCE_SUM, (y[hi] + y[lo]) * d * 0.5, (axis,))


def _gradient(f, *varargs, axis=None, edge_order=1):
    """numpy.gradient with scalar (uniform) spacings: central differences inside, one-sided
    differences of ``edge_order`` 1 or 2 at the edges; a tuple for several axes."""
    f = _t(f)
    axes = (
        tuple(range(f.ndim)) if axis is None else ((axis,) if np.ndim(axis) == 0 else tuple(axis))
    )
    axes = tuple(_axis(ax, f.ndim) for ax in axes)
    if len(varargs) == 1 and len(axes) > 1:
        varargs = varargs * len(axes)
    if varargs and (len(varargs) != len(axes) or any(np.ndim(h) != 0 for h in varargs)):
        raise _fail("numpy.gradient: only scalar spacings (one, or one per axis) are supported")
    if edge_order not in (1, 2):
        raise _fail("numpy.gradient: edge_order must be 1 or 2")
    spacings = [float(h) for h in varargs] if varargs else [1.0] * len(axes)
    outs = []
    for ax, h in zip(axes, spacings):
        n = f.shape[ax]
        if n < edge_order + 1:
            raise _fail(f"numpy.gradient: axis {ax} needs at least {edge_order + 1} points")

        def sl(s, ax=ax):
            return f[(slice(None),) * ax + (s,)]

        parts = []
        if edge_order == 1:
            parts.append((sl(slice(1, 2)) - sl(slice(0, 1))) / h)
        else:
            parts.append(
                (-1.5 * sl(slice(0, 1)) + 2.0 * sl(slice(1, 2)) - 0.5 * sl(slice(2, 3))) / h
            )
        if n > 2:
            parts.append((sl(slice(2, None)) - sl(slice(None, -2))) / (2.0 * h))
        if edge_order == 1:
            parts.append((sl(slice(n - 1, n)) - sl(slice(n - 2, n - 1))) / h)
        else:
            parts.append(
                (
                    0.5 * sl(slice(n - 3, n - 2))
                    - 2.0 * sl(slice(n - 2, n - 1))
                    + 1.5 * sl(slice(n - 1, n))
                )
                / h
            )
        outs.append(_concatenate(parts, ax))
    return outs[0] if len(outs) == 1 else tuple(outs)
