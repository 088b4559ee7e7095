"""numpy's shape, assembly and structure functions as compositions: ``concatenate`` & co. write
each part into its block of a new array (one in-place ``scatter`` per part), views are reshapes,
transposes and basic indexing, and integer-array / boolean-mask indexing gathers one basic read
per selected element (its adjoint is one O(1) scatter-add per index, repeated indices
accumulating as ``np.add.at``; never a dense one-hot array). Index arrays must be known when
tracing."""

from __future__ import annotations

import itertools
import operator
from typing import Any

import numpy as np

from ...core import ops
from .np_common import _axis, _float_dtype, _like, _no_kwargs, _no_out, _reduce, _t, _zeros
from ...core.ops import Op
from ..errors import _fail
from ..indexing import _setitem
from ..trace_state import _UNSET
from ..tracer import Tracer, _copy, _reshape, _transpose, _where


def _expand_dims(a, axis):
    a = _t(a)
    axes = (axis,) if np.ndim(axis) == 0 else tuple(axis)
    nd = a.ndim + len(axes)
    axes = sorted(_axis(k, nd) for k in axes)
    it = iter(a.shape)
    return _reshape(a, tuple(1 if i in axes else next(it) for i in range(nd)))


def _squeeze(a, axis=None):
    a = _t(a)
    if axis is None:
        return _reshape(a, tuple(d for d in a.shape if d != 1))
    axes = {_axis(k, a.ndim) for k in ((axis,) if np.ndim(axis) == 0 else axis)}
    if any(a.shape[k] != 1 for k in axes):
        raise _fail("cannot select an axis to squeeze out which has size not equal to one")
    return _reshape(a, tuple(d for i, d in enumerate(a.shape) if i not in axes))


def _swapaxes(a, axis1, axis2):
    a = _t(a)
    perm = list(range(a.ndim))
    i, j = _axis(axis1, a.ndim), _axis(axis2, a.ndim)
    perm[i], perm[j] = perm[j], perm[i]
    return _transpose(a, perm)


def _moveaxis(a, source, destination):
    a = _t(a)
    src = [_axis(s, a.ndim) for s in ((source,) if np.ndim(source) == 0 else source)]
    dst = [_axis(d, a.ndim) for d in ((destination,) if np.ndim(destination) == 0 else destination)]
    order = [k for k in range(a.ndim) if k not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return _transpose(a, order)


def _broadcast_to(a, shape, subok=False):
    a = _t(a)
    shape = (shape,) if np.ndim(shape) == 0 else tuple(int(d) for d in shape)
    try:
        if np.broadcast_shapes(a.shape, shape) != shape:
            raise ValueError
    except ValueError:
        raise _fail(f"operands could not be broadcast from {a.shape} to {shape}") from None
    return a + _zeros(shape) if a.shape != shape else a


def _atleast(nd: int):
    def fn(*arys):
        out = []
        for a in arys:
            a = _t(a)
            if a.ndim < nd:
                shape = {0: (1,) * nd, 1: (1, *a.shape) if nd == 2 else (1, *a.shape, 1)}
                a = _reshape(a, shape.get(a.ndim, (*a.shape, 1)))
            out.append(a)
        return out[0] if len(out) == 1 else out

    return fn


def _concatenate(arrays, axis=0, out=None, dtype=None, casting=None):
    """``np.concatenate``: each part written into its block of a new array (one in-place
    ``scatter`` per part), so the adjoint of each part is a slice of the cotangent."""
    _no_out(out, "concatenate")
    parts = [_t(a) for a in arrays]
    if not parts:
        raise _fail("need at least one array to concatenate")
    if axis is None:
        parts, axis = [_reshape(p, (-1,)) for p in parts], 0
    nd = parts[0].ndim
    if nd == 0:
        raise _fail("zero-dimensional arrays cannot be concatenated")
    axis = _axis(axis, nd)
    rest = parts[0].shape[:axis] + parts[0].shape[axis + 1 :]
    for p in parts:
        if p.ndim != nd or p.shape[:axis] + p.shape[axis + 1 :] != rest:
            raise _fail(
                "all the input array dimensions except for the concatenation axis must match "
                f"exactly, got {[q.shape for q in parts]}"
            )
    total = sum(p.shape[axis] for p in parts)
    dtype = "bool" if all(p.node.dtype == "bool" for p in parts) else "f64"
    out_shape = parts[0].shape[:axis] + (total,) + parts[0].shape[axis + 1 :]
    level = max(p.level for p in parts)
    r = Tracer(ops.const(False if dtype == "bool" else 0.0, out_shape, dtype), _UNSET, level)
    at = 0
    for p in parts:
        k = p.shape[axis]
        if k:
            _setitem(r, (slice(None),) * axis + (slice(at, at + k),), p)
        at += k
    return r


def row_runs(parts: list) -> list[tuple[int, int, Any]]:
    """``parts`` (traced values) cut into maximal runs ``[i, j)`` of consecutive rows
    ``a[k], a[k + 1], ...`` of one traced array ``a`` (the rows a converted loop's appends hand
    back): ``(i, j, a[k:k + j - i])`` for each run of two or more, the others left out."""
    out, i, n = [], 0, len(parts)
    while i < n:
        node = parts[i].node
        j = i + 1
        if node.op == Op.INDEX and len(node.attrs) == 1 and isinstance(node.attrs[0], int):
            base, k = node.args[0], node.attrs[0]
            while j < n:
                m = parts[j].node
                if not (m.op == Op.INDEX and m.args[0] is base and m.attrs == (k + j - i,)):
                    break
                j += 1
            if j - i >= 2:
                rows = Tracer(base, _UNSET, parts[i].level)
                if (k, j - i) != (0, base.shape[0]):
                    rows = Tracer(ops.index(base, ((k, k + j - i, 1),)), _UNSET, parts[i].level)
                out.append((i, j, rows))
        i = j
    return out


def _stack(arrays, axis=0, out=None, dtype=None, casting=None):
    _no_out(out, "stack")
    parts = [_t(a) for a in arrays]
    if not parts:
        raise _fail("need at least one array to stack")
    if any(p.shape != parts[0].shape for p in parts):
        raise _fail("all input arrays must have the same shape")
    axis = _axis(axis, parts[0].ndim + 1)
    runs = row_runs(parts) if len(parts) > 2 else []
    if runs:  # consecutive rows of one array: a slice of it, not one piece per row
        pieces, at = [], 0
        for i, j, rows in runs:
            pieces += [_expand_dims(p, 0) for p in parts[at:i]] + [rows]
            at = j
        pieces += [_expand_dims(p, 0) for p in parts[at:]]
        whole = pieces[0] if len(pieces) == 1 else _concatenate(pieces, 0)
        if axis == 0:
            return whole
        return _moveaxis(whole, 0, axis)
    return _concatenate([_expand_dims(p, axis) for p in parts], axis, out)


def _vstack(tup, dtype=None, casting=None):
    return _concatenate([_atleast(2)(a) for a in tup], 0)


def _hstack(tup, dtype=None, casting=None):
    arrs = [_atleast(1)(a) for a in tup]
    return _concatenate(arrs, 0 if arrs[0].ndim == 1 else 1)


def _column_stack(tup):
    arrs = [_t(a) for a in tup]  # an array is a sequence of its rows, as for numpy
    arrs = [
        _reshape(a, (a.shape[0], 1)) if a.ndim == 1 else _reshape(a, (1, 1)) if a.ndim == 0 else a
        for a in arrs
    ]
    return _concatenate(arrs, 1)


def _append(arr, values, axis=None):
    if axis is None:
        return _concatenate([_reshape(_t(arr), (-1,)), _reshape(_t(values), (-1,))], 0)
    return _concatenate([arr, values], axis)


def _split(ary, indices_or_sections, axis=0, exact=True):
    a = _t(ary)
    axis = _axis(axis, a.ndim)
    n = a.shape[axis]
    if np.ndim(indices_or_sections) == 0:
        k = int(indices_or_sections)
        if exact and n % k:
            raise _fail("array split does not result in an equal division")
        q, r = divmod(n, k)
        sizes = [q + 1] * r + [q] * (k - r)
        bounds = list(itertools.accumulate([0] + sizes))
    else:
        bounds = [0] + [int(i) for i in indices_or_sections] + [n]
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        key = (slice(None),) * axis + (slice(lo, max(lo, hi)),)
        out.append(a[key])
    return out


def _flip(m, axis=None):
    m = _t(m)
    axes = range(m.ndim) if axis is None else ((axis,) if np.ndim(axis) == 0 else axis)
    axes = {_axis(k, m.ndim) for k in axes}
    return m[tuple(slice(None, None, -1) if i in axes else slice(None) for i in range(m.ndim))]


def _roll(a, shift, axis=None):
    a = _t(a)
    if axis is None:
        return _reshape(_roll(_reshape(a, (-1,)), shift, 0), a.shape)
    shifts = (shift,) if np.ndim(shift) == 0 else tuple(shift)
    axes = (axis,) if np.ndim(axis) == 0 else tuple(axis)
    if len(shifts) == 1:
        shifts = shifts * len(axes)
    for s, ax in zip(shifts, axes):
        ax = _axis(ax, a.ndim)
        n = a.shape[ax]
        if n == 0:
            continue
        s = int(s) % n
        if s:
            pre = (slice(None),) * ax
            a = _concatenate([a[pre + (slice(n - s, None),)], a[pre + (slice(0, n - s),)]], ax)
    return a


def _tile(A, reps):
    A = _t(A)
    reps = (reps,) if np.ndim(reps) == 0 else tuple(int(r) for r in reps)
    nd = max(A.ndim, len(reps))
    A = _reshape(A, (1,) * (nd - A.ndim) + A.shape)
    reps = (1,) * (nd - len(reps)) + reps
    for ax, r in enumerate(reps):
        if r != 1:
            A = _concatenate([A] * r, ax) if r else A[(slice(None),) * ax + (slice(0, 0),)]
    return A


def _repeat(a, repeats, axis=None):
    a = _t(a)
    if axis is None:
        a, axis = _reshape(a, (-1,)), 0
    axis = _axis(axis, a.ndim)
    n = a.shape[axis]
    reps = [int(repeats)] * n if np.ndim(repeats) == 0 else [int(r) for r in repeats]
    if len(reps) != n:
        raise _fail(f"operands could not be broadcast together with shape ({n},) ({len(reps)},)")
    if len(set(reps)) == 1:  # the common case: one broadcast and a reshape
        r = reps[0]
        e = _expand_dims(a, axis + 1)
        shape = e.shape[: axis + 1] + (r,) + e.shape[axis + 2 :]
        return _reshape(_broadcast_to(e, shape), a.shape[:axis] + (n * r,) + a.shape[axis + 1 :])
    pre = (slice(None),) * axis
    return _concatenate(
        [a[pre + (slice(i, i + 1),)] for i, r in enumerate(reps) for _ in range(r)], axis
    )


def _rot90(m, k=1, axes=(0, 1)):
    m = _t(m)
    a0, a1 = (_axis(a, m.ndim) for a in axes)
    k %= 4
    if k == 0:
        return _copy(m)
    if k == 2:
        return _flip(_flip(m, a0), a1)
    perm = list(range(m.ndim))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    return _transpose(_flip(m, a1), perm) if k == 1 else _flip(_transpose(m, perm), a1)


def _split_along(axis: int):
    def fn(ary, indices_or_sections):
        a = _t(ary)
        if a.ndim <= axis and axis > 0:
            raise _fail(f"this split works only on arrays of {axis + 1} or more dimensions")
        ax = 0 if (axis == 1 and a.ndim == 1) else axis  # hsplit of a 1-D array splits axis 0
        return _split(a, indices_or_sections, ax, True)

    return fn


def _dstack(tup):
    arrs = []
    for a in tup:
        a = _t(a)
        if a.ndim <= 1:
            a = _reshape(a, (1, -1, 1) if a.ndim == 1 else (1, 1, 1))
        elif a.ndim == 2:
            a = _reshape(a, (*a.shape, 1))
        arrs.append(a)
    return _concatenate(arrs, 2)


def _rollaxis(a, axis, start=0):
    a = _t(a)
    axis = _axis(axis, a.ndim)
    start = start + a.ndim if start < 0 else start
    if axis < start:
        start -= 1
    return _moveaxis(a, axis, start) if axis != start else a


def _diagonal(a, offset=0, axis1=0, axis2=1):
    a = _t(a)
    if a.ndim != 2 or (axis1, axis2) not in ((0, 1), (-2, -1), (0, -1), (-2, 1)):
        a = _moveaxis(a, (axis1, axis2), (-2, -1))
    m, n = a.shape[-2:]
    i0, j0 = (0, offset) if offset >= 0 else (-offset, 0)
    k = max(0, min(m - i0, n - j0))
    lead = a.shape[:-2]
    flat = _reshape(a, lead + (m * n,))
    start = i0 * n + j0
    sl = slice(start, start + (k - 1) * (n + 1) + 1, n + 1) if k else slice(0, 0)
    return _copy(flat[(slice(None),) * len(lead) + (sl,)])  # numpy's diagonal is read-only


def _diag(v, k=0):
    v = _t(v)
    if v.ndim == 2:
        return _diagonal(v, k)
    if v.ndim != 1:
        raise _fail("numpy.diag: input must be 1-d or 2-d")
    n = v.shape[0] + abs(k)
    out = _like(0.0, v, shape=(n * n,))
    start = k if k >= 0 else -k * n
    if v.shape[0]:
        _setitem(out, slice(start, start + (v.shape[0] - 1) * (n + 1) + 1, n + 1), v)
    return _reshape(out, (n, n))


def _trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    _no_out(out, "trace")
    return _reduce(Op.REDUCE_SUM, _diagonal(a, offset, axis1, axis2), -1)


def _tri_mask(shape, k, lower):
    m, n = shape[-2:]
    mask = np.tri(m, n, k - (0 if lower else 1), dtype=bool)
    return mask if lower else ~mask


def _tril(m, k=0):
    m = _t(m)
    return _where(np.broadcast_to(_tri_mask(m.shape, k, True), m.shape), m, 0.0)


def _triu(m, k=0):
    m = _t(m)
    return _where(np.broadcast_to(_tri_mask(m.shape, k, False), m.shape), m, 0.0)


def _meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    """``np.meshgrid``: each 1-D input reshaped along its own axis and broadcast (``xy``: the
    first two axes swapped, as numpy)."""
    if indexing not in ("xy", "ij"):
        raise _fail("numpy.meshgrid: indexing must be 'xy' or 'ij'")
    vs = [_reshape(_t(x), (-1,)) for x in xi]
    n = len(vs)
    shape = [v.shape[0] for v in vs]
    if indexing == "xy" and n > 1:
        shape[0], shape[1] = shape[1], shape[0]
    out = []
    for k, v in enumerate(vs):
        axis = k
        if indexing == "xy" and n > 1 and k < 2:
            axis = 1 - k
        r = _reshape(v, tuple(v.shape[0] if i == axis else 1 for i in range(n)))
        out.append(r if sparse else _broadcast_to(r, tuple(shape)))
    return out


def _fftshift(x, axes=None, inverse=False):
    """numpy.fft.fftshift / ifftshift: a roll by half of each axis (real arrays)."""
    x = _t(x)
    axes = (
        tuple(range(x.ndim)) if axes is None else ((axes,) if np.ndim(axes) == 0 else tuple(axes))
    )
    shifts = [
        -(x.shape[_axis(a, x.ndim)] // 2) if inverse else x.shape[_axis(a, x.ndim)] // 2
        for a in axes
    ]
    return _roll(x, shifts, axes) if axes else x


def _linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, **kw):
    """numpy.linspace of traced ``start``/``stop``: ``start + i * step`` with the last sample
    exactly ``stop`` (numpy's formula); constant ``num``, ``axis=0``."""
    _no_kwargs("linspace", kw)
    _float_dtype("linspace", dtype)
    if axis != 0:
        raise _fail("numpy.linspace: only axis=0 is supported")
    num = operator.index(num)
    if num < 0:
        raise _fail(f"numpy.linspace: number of samples, {num}, must be non-negative")
    start, stop = _t(start), _t(stop)
    shape = np.broadcast_shapes(start.shape, stop.shape)
    start, stop = _broadcast_to(start, shape), _broadcast_to(stop, shape)
    div = (num - 1) if endpoint else num
    delta = stop - start
    tail = (1,) * np.ndim(start)
    i = np.arange(num, dtype=np.float64).reshape((num,) + tail)
    if div > 0:
        step = delta / float(div)
        y = _expand_dims(start, 0) + i * _expand_dims(step, 0)
    else:
        step = delta * np.nan
        y = _expand_dims(start, 0) + i * _expand_dims(delta, 0)
    if endpoint and num > 1:
        y = _concatenate([y[:-1], _expand_dims(stop, 0)], 0)
    return (y, step) if retstep else y
