"""The numpy surface: the ufuncs, functions and index forms that trace, each a composition of IR
primitives built through the tracer (:mod:`tapejit.tracing`).

Nothing here is a primitive: every function is written with the tracer's operations (elementwise
ops, reductions, basic indexing, reshapes, ``matmul`` and in-place writes, which are ``scatter``
updates), so its derivative comes from the primitives' rules and it is optimised and fused like
hand-written code. Where numpy has a numerically careful formulation the composition follows it
(``logaddexp`` shifts by the maximum; ``sinh`` uses ``expm1`` near zero; ``expit`` never
exponentiates a positive number); each function's docstring or comment says what it computes.

Integer-array and boolean-mask indexing (``x[idx]``, ``x[mask]``, ``np.take``) gathers one
basic-index read per selected element into a new array, so its adjoint is one scatter-add of
O(1) per index — never a dense one-hot array — and repeated indices accumulate (``np.add.at``).
Index arrays must be known when tracing (constants, not traced values).

``UFUNCS`` maps numpy ufunc names and ``FUNCTIONS`` numpy functions to their implementations; the
tracer's ``__array_ufunc__`` / ``__array_function__`` look them up, and anything missing raises a
:class:`~tapejit.tracing.TracingError` naming the numpy function.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any, Callable

import numpy as np

from . import ops
from .tracing import (
    _UNSET,
    Tracer,
    _binary,
    _copy,
    _current,
    _fail,
    _matmul,
    _mean,
    _power,
    _reduce,
    _reshape,
    _setitem,
    _transpose,
    _unary,
    _where,
    lift,
)

# ----------------------------------------------------------------------------------------------
# Helpers


def _t(x: Any) -> Tracer:
    return lift(x)


def _no_out(out, name):
    if out is not None:
        raise _fail(f"numpy.{name} with out= is not supported by tapejit; write y = ...")


def _axis(axis: Any, ndim: int, name: str = "axis") -> int:
    a = int(axis)
    if not -ndim <= a < ndim:
        raise _fail(f"{name} {a} is out of bounds for array of dimension {ndim}")
    return a % ndim


def _zeros(shape: tuple[int, ...], level: int | None = None) -> Tracer:
    return Tracer(ops.const(0.0, tuple(shape)), _UNSET, level)


def _like(value, a, dtype=None, shape=None) -> Tracer:
    """``np.zeros_like`` & co.: an array of its own, of ``a``'s shape (or ``shape``) filled
    with ``value``; float64 unless ``dtype`` is bool."""
    base = a.node.shape if isinstance(a, Tracer) else np.shape(a)
    shape = base if shape is None else ((shape,) if np.ndim(shape) == 0 else tuple(shape))
    shape = tuple(int(d) for d in shape)
    kind = "f64"
    if dtype is not None:
        dt = np.dtype(dtype)
        if dt == np.bool_:
            kind = "bool"
        elif dt.kind not in "fiu":
            raise _fail(f"arrays of dtype {dt} are not supported; traced arrays are float64")
    elif isinstance(a, Tracer):
        kind = a.node.dtype
    v = lift(value)
    if v.node.shape == () and v.node.op == "const":
        return Tracer(ops.const(v.node.attrs[0], shape, kind), _UNSET, len(_current.items))
    fill = Tracer(ops.const(0.0 if kind == "f64" else False, shape, kind), _UNSET, v.level)
    _setitem(fill, Ellipsis, v)
    return fill


# ----------------------------------------------------------------------------------------------
# Reductions and statistics


def _no_kwargs(name: str, kw: dict) -> None:
    """Raise for keyword arguments tapejit does not implement (ignoring one could silently
    change the result: ``order='F'``, ``dtype=int``, ...)."""
    if kw:
        raise _fail(f"numpy.{name} with {', '.join(sorted(kw))}= is not supported by tapejit")


def _c_order(name: str, order) -> None:
    if order not in ("C", "A", "K"):
        raise _fail(f"numpy.{name} with order={order!r} is not supported (C order only)")


def _float_dtype(name: str, dtype) -> None:
    if dtype is not None and np.dtype(dtype) != np.float64:
        raise _fail(f"numpy.{name} with dtype={dtype} is not supported (traced values are float64)")


def _masked(name: str, a, where, initial, identity: float, combine: str, has_identity=True):
    """``a`` with ``where=`` applied (masked-out elements become the reduction's ``identity``,
    so they change nothing) and a function combining ``initial=`` into every result element,
    as numpy's reductions define them. max/min have no identity (``has_identity=False``):
    numpy then requires ``initial`` with ``where``."""
    x = lift(a)
    if where is not True:
        if not has_identity and initial is np._NoValue:
            raise _fail(
                f"numpy.{name}: reduction operation does not have an identity, so to use a "
                "where mask one has to specify 'initial'"
            )
        mask = np.broadcast_to(where, x.shape) if not isinstance(where, Tracer) else where
        x = _where(mask, x, identity)
    if initial is np._NoValue:
        return x, lambda r: r
    return x, lambda r: _binary(combine, r, initial)


def _sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=np._NoValue, where=True):
    _no_out(out, "sum")
    _float_dtype("sum", dtype)
    x, finish = _masked("sum", a, where, initial, 0.0, "add")
    return finish(_reduce("reduce_sum", x, axis, keepdims))


def _max(a, axis=None, out=None, keepdims=False, initial=np._NoValue, where=True):
    _no_out(out, "max")
    x, finish = _masked("max", a, where, initial, -np.inf, "maximum", has_identity=False)
    return finish(_reduce("reduce_max", x, axis, keepdims))


def _min(a, axis=None, out=None, keepdims=False, initial=np._NoValue, where=True):
    _no_out(out, "min")
    x, finish = _masked("min", a, where, initial, np.inf, "minimum", has_identity=False)
    return finish(-_reduce("reduce_max", -x, axis, keepdims))


def _mean_fn(a, axis=None, dtype=None, out=None, keepdims=False, where=True):
    _no_out(out, "mean")
    _float_dtype("mean", dtype)
    if where is True:
        return _mean(a, axis, keepdims)
    x = lift(a)
    mask = np.broadcast_to(where, x.shape) if not isinstance(where, Tracer) else where
    count = _reduce("reduce_sum", _where(mask, 1.0, 0.0), axis, keepdims)
    return _reduce("reduce_sum", _where(mask, x, 0.0), axis, keepdims) / count


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
    return _reduce("reduce_sum", d * d, axis, keepdims) / float(max(n - ddof, 0))


def _std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kw):
    _no_kwargs("std", kw)
    return np.sqrt(_var(a, axis, dtype, out, ddof, keepdims))


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
        wsum = _reduce("reduce_sum", w, axis, keepdims)
        avg = _reduce("reduce_sum", a * w, axis, keepdims) / wsum
    return (avg, wsum) if returned else avg


def _pairwise(a: Tracer, axis: int, op: str, identity: float) -> Tracer:
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
    a, finish = _masked("prod", a, where, initial, 1.0, "mul")
    return finish(_prod_all(a, axis, keepdims))


def _prod_all(a, axis, keepdims):
    if axis is None:
        r = _pairwise(_reshape(a, (-1,)), 0, "mul", 1.0)
        return _reshape(r, (1,) * a.ndim) if keepdims else r
    axes = sorted({_axis(k, a.ndim) for k in ((axis,) if np.ndim(axis) == 0 else axis)})
    r = a
    for k in reversed(axes):
        r = _pairwise(r, k, "mul", 1.0)
    if keepdims:
        r = _reshape(r, tuple(1 if i in axes else d for i, d in enumerate(a.shape)))
    return r


def _scan(a, axis, op: str, identity: float) -> Tracer:
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


# ----------------------------------------------------------------------------------------------
# Shapes and assembly


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


def _stack(arrays, axis=0, out=None, dtype=None, casting=None):
    parts = [_t(a) for a in arrays]
    if not parts:
        raise _fail("need at least one array to stack")
    if any(p.shape != parts[0].shape for p in parts):
        raise _fail("all input arrays must have the same shape")
    axis = _axis(axis, parts[0].ndim + 1)
    return _concatenate([_expand_dims(p, axis) for p in parts], axis, out)


def _vstack(tup, dtype=None, casting=None):
    return _concatenate([_atleast(2)(a) for a in tup], 0)


def _hstack(tup, dtype=None, casting=None):
    arrs = [_atleast(1)(a) for a in tup]
    return _concatenate(arrs, 0 if arrs[0].ndim == 1 else 1)


def _column_stack(tup):
    arrs = [_t(a) for a in tup]
    arrs = [_reshape(a, (a.shape[0], 1)) if a.ndim == 1 else a for a in arrs]
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
    return _concatenate([a[pre + (slice(i, i + 1),)] for i, r in enumerate(reps) for _ in range(r)], axis)


def _pad(array, pad_width, mode="constant", constant_values=0, **kw):
    _no_kwargs("pad", kw)
    if mode != "constant":
        raise _fail(f"numpy.pad with mode={mode!r} is not supported (only 'constant')")
    a = _t(array)
    pw = np.broadcast_to(np.asarray(pad_width, dtype=int), (a.ndim, 2))
    cv = np.broadcast_to(np.asarray(constant_values, dtype=float), (a.ndim, 2))
    if np.any(cv != cv.flat[0]):
        raise _fail("numpy.pad with different constant_values per side is not supported")
    shape = tuple(int(d + lo + hi) for d, (lo, hi) in zip(a.shape, pw))
    out = _like(float(cv.flat[0]), a, shape=shape)
    _setitem(out, tuple(slice(int(lo), int(lo) + d) for d, (lo, _) in zip(a.shape, pw)), a)
    return out


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
            lo, hi = _binary("minimum", lo_in, hi_in), _binary("maximum", lo_in, hi_in)
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


def _nan_reduce(name: str, fn, fill: float):
    def reduce_(a, axis=None, *args, **kw):
        x = _t(a)
        return fn(_where(x != x, fill, x), axis, *args, **kw)

    return reduce_


# ----------------------------------------------------------------------------------------------
# Matrices


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
    return _reduce("reduce_sum", _diagonal(a, offset, axis1, axis2), -1)


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


def _dot(a, b, out=None):
    _no_out(out, "dot")
    a, b = _t(a), _t(b)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    if a.ndim <= 2 and b.ndim <= 2:
        return _matmul(a, b)
    # N-d: a sum product over the last axis of a and the second-to-last of b
    return _tensordot(a, b, ([a.ndim - 1], [b.ndim - 2 if b.ndim > 1 else 0]))


def _matmul_nd(a, b, out=None, **kw):
    _no_out(out, "matmul")
    _float_dtype("matmul", kw.pop("dtype", None))
    _no_kwargs("matmul", kw)
    a, b = _t(a), _t(b)
    if a.ndim == 0 or b.ndim == 0:
        raise _fail("matmul: Input operand does not have enough dimensions")
    if a.ndim <= 2 and b.ndim <= 2:
        return _matmul(a, b)
    a2 = _reshape(a, (1, *a.shape)) if a.ndim == 1 else a
    b2 = _reshape(b, (*b.shape, 1)) if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    a2 = _broadcast_to(a2, batch + a2.shape[-2:])
    b2 = _broadcast_to(b2, batch + b2.shape[-2:])
    rows = [_matmul(a2[idx], b2[idx]) for idx in np.ndindex(*batch)]
    r = _reshape(_stack(rows), batch + rows[0].shape)
    if a.ndim == 1:
        r = _reshape(r, r.shape[:-2] + r.shape[-1:])
    if b.ndim == 1:
        r = _reshape(r, r.shape[:-1])
    return r


def _tensordot(a, b, axes=2):
    a, b = _t(a), _t(b)
    if np.ndim(axes) == 0:
        k = int(axes)
        ax_a, ax_b = list(range(a.ndim - k, a.ndim)), list(range(k))
    else:
        ax_a, ax_b = axes
        ax_a = [ax_a] if np.ndim(ax_a) == 0 else list(ax_a)
        ax_b = [ax_b] if np.ndim(ax_b) == 0 else list(ax_b)
    ax_a = [_axis(k, a.ndim) for k in ax_a]
    ax_b = [_axis(k, b.ndim) for k in ax_b]
    if [a.shape[i] for i in ax_a] != [b.shape[i] for i in ax_b]:
        raise _fail("shape-mismatch for sum in tensordot")
    free_a = [i for i in range(a.ndim) if i not in ax_a]
    free_b = [i for i in range(b.ndim) if i not in ax_b]
    k = math.prod(a.shape[i] for i in ax_a)
    am = _reshape(_transpose(a, free_a + ax_a), (math.prod(a.shape[i] for i in free_a), k))
    bm = _reshape(_transpose(b, ax_b + free_b), (k, math.prod(b.shape[i] for i in free_b)))
    r = _matmul(am, bm)
    return _reshape(r, tuple(a.shape[i] for i in free_a) + tuple(b.shape[i] for i in free_b))


def _outer(a, b, out=None):
    _no_out(out, "outer")
    a, b = _reshape(_t(a), (-1, 1)), _reshape(_t(b), (1, -1))
    return a * b


def _inner(a, b):
    a, b = _t(a), _t(b)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    return _tensordot(a, b, ([a.ndim - 1], [b.ndim - 1]))


def _kron(a, b):
    a, b = _t(a), _t(b)
    nd = max(a.ndim, b.ndim)
    a = _reshape(a, (1,) * (nd - a.ndim) + a.shape)
    b = _reshape(b, (1,) * (nd - b.ndim) + b.shape)
    ea = _reshape(a, tuple(x for d in a.shape for x in (d, 1)))
    eb = _reshape(b, tuple(x for d in b.shape for x in (1, d)))
    return _reshape(ea * eb, tuple(p * q for p, q in zip(a.shape, b.shape)))


def _cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    a, b = _t(a), _t(b)
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = _moveaxis(a, axisa, -1), _moveaxis(b, axisb, -1)
    if a.shape[-1] not in (2, 3) or b.shape[-1] not in (2, 3):
        raise _fail("incompatible dimensions for cross product (dimension must be 2 or 3)")
    comp = lambda x, i: x[..., i] if i < x.shape[-1] else 0.0  # noqa: E731
    a0, a1, a2 = (comp(a, i) for i in range(3))
    b0, b1, b2 = (comp(b, i) for i in range(3))
    if a.shape[-1] == 2 and b.shape[-1] == 2:
        return a0 * b1 - a1 * b0
    c = _stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], -1)
    return _moveaxis(c, -1, axisc)


def _einsum(subscripts, *operands, out=None, optimize=False, **kw):
    """``np.einsum`` for explicit and implicit subscripts without ellipses: a pairwise
    contraction by :func:`_tensordot` when two operands share the summed indices, else the
    broadcast product summed over the indices that do not appear in the output."""
    _no_out(out, "einsum")
    _float_dtype("einsum", kw.pop("dtype", None))
    _no_kwargs("einsum", kw)
    if not isinstance(subscripts, str) or "." in subscripts:
        raise _fail("numpy.einsum with '...' or non-string subscripts is not supported")
    ops_ = [_t(o) for o in operands]
    spec = subscripts.replace(" ", "")
    ins, _, res = spec.partition("->")
    terms = ins.split(",")
    if len(terms) != len(ops_):
        raise _fail("numpy.einsum: more operands than subscripts or the other way round")
    if "->" not in spec:
        counts = {c: ins.count(c) for c in ins if c.isalpha()}
        res = "".join(sorted(c for c, k in counts.items() if k == 1))
    letters = sorted({c for t in terms for c in t})
    sizes: dict[str, int] = {}
    for t, o in zip(terms, ops_):
        if len(t) != o.ndim:
            raise _fail(f"numpy.einsum: operand has {o.ndim} dimensions, subscripts '{t}'")
        for c, d in zip(t, o.shape):
            if sizes.setdefault(c, d) != d and d != 1:
                raise _fail(f"numpy.einsum: size of label '{c}' does not match")
    # repeated letters within one term: take the diagonal first
    ops2, terms2 = [], []
    for t, o in zip(terms, ops_):
        while len(set(t)) != len(t):
            c = next(c for c in t if t.count(c) > 1)
            i, j = t.index(c), t.index(c, t.index(c) + 1)
            o = _moveaxis(_diagonal(o, 0, i, j), -1, i)
            t = t[:j] + t[j + 1 :]
        ops2.append(o)
        terms2.append(t)
    # the broadcast product over all letters, then a sum over those not in the result
    full = letters
    prod = None
    for t, o in zip(terms2, ops2):
        perm = sorted(range(len(t)), key=lambda k: full.index(t[k]))
        o = _transpose(o, perm) if o.ndim > 1 else o
        ts = "".join(t[k] for k in perm)
        o = _reshape(o, tuple(sizes[c] if c in ts else 1 for c in full))
        prod = o if prod is None else prod * o
    summed = tuple(k for k, c in enumerate(full) if c not in res)
    r = _reduce("reduce_sum", prod, summed) if summed else prod
    kept = [c for c in full if c in res]
    return _transpose(r, [kept.index(c) for c in res]) if r.ndim > 1 else r


# ----------------------------------------------------------------------------------------------
# Elementwise compositions

_LN2, _LN10 = math.log(2.0), math.log(10.0)


def _sinh(x):
    x = _t(x)
    return 0.5 * (np.expm1(x) - np.expm1(-x))  # exact near zero, as numpy's


def _cosh(x):
    e = np.exp(-abs(_t(x)))
    return 0.5 * (1.0 / e + e)


def _tan(x):
    x = _t(x)
    return np.sin(x) / np.cos(x)


def _arcsinh(x):
    x = _t(x)
    a = abs(x)
    # log1p(a + a^2 / (1 + sqrt(1 + a^2))) = log(a + sqrt(a^2 + 1)), accurate for small a;
    # for a > 1e150 a^2 overflows: log(2a) there
    big = a > 1e150
    safe = _where(big, 1.0, a)
    r = np.log1p(safe + safe * safe / (1.0 + np.sqrt(1.0 + safe * safe)))
    return np.sign(x) * _where(big, np.log(a) + _LN2, r)


def _arcsin(x):
    """asin(x) = atan2(x, sqrt((1 - x)(1 + x))): accurate up to |x| = 1 (the factored form keeps
    1 - x^2 exact there); NaN beyond, as numpy."""
    x = _t(x)
    return _binary("arctan2", x, np.sqrt((1.0 - x) * (1.0 + x)))


def _arccos(x):
    x = _t(x)
    return _binary("arctan2", np.sqrt((1.0 - x) * (1.0 + x)), x)


def _arccosh(x):
    x = _t(x)
    return np.log(x + np.sqrt(x * x - 1.0))


def _arctanh(x):
    x = _t(x)
    return 0.5 * np.log1p(2.0 * x / (1.0 - x))


def _exp2(x):
    return np.exp(_t(x) * _LN2)


def _log2(x):
    return np.log(_t(x)) * (1.0 / _LN2)


def _log10(x):
    return np.log(_t(x)) * (1.0 / _LN10)


def _logaddexp(a, b):
    a, b = lift(a), lift(b)
    m = _binary("maximum", a, b)
    return m + np.log1p(np.exp(-abs(a - b)))


def _logaddexp2(a, b):
    return _logaddexp(_t(a) * _LN2, _t(b) * _LN2) * (1.0 / _LN2)


def _hypot(a, b):
    """sqrt(a^2 + b^2) scaled by max(|a|, |b|) so neither overflows nor underflows."""
    a, b = abs(_t(a)), abs(_t(b))
    m = _binary("maximum", a, b)
    s = _where(m > 0.0, m, 1.0)
    q = _binary("minimum", a, b) / s
    return _where(m > 0.0, m * np.sqrt(1.0 + q * q), 0.0)


def _sinc(x):
    """sin(pi x) / (pi x), 1 at 0 (numpy's definition)."""
    x = _t(x)
    y = math.pi * _where(x == 0.0, 1e-20, x)
    return _where(x == 0.0, 1.0, np.sin(y) / y)


def _fmax(a, b):
    a, b = _t(a), _t(b)
    return _where(b != b, a, _where(a != a, b, _binary("maximum", a, b)))


def _fmin(a, b):
    a, b = _t(a), _t(b)
    return _where(b != b, a, _where(a != a, b, _binary("minimum", a, b)))


def _nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    x = _t(x)
    big = np.finfo(np.float64).max
    x = _where(x != x, nan, x)
    x = _where(x == np.inf, big if posinf is None else posinf, x)
    return _where(x == -np.inf, -big if neginf is None else neginf, x)


def _heaviside(x1, x2):
    x1 = _t(x1)
    return _where(x1 > 0.0, 1.0, _where(x1 == 0.0, x2, _where(x1 < 0.0, 0.0, x1)))


def _clip(a, a_min=None, a_max=None, out=None, **kw):
    _no_out(out, "clip")
    a_min = kw.pop("min", a_min)
    a_max = kw.pop("max", a_max)
    _no_kwargs("clip", kw)
    r = lift(a)
    if a_min is not None:
        r = _binary("maximum", r, a_min)
    if a_max is not None:
        r = _binary("minimum", r, a_max)
    return r


def _norm(x, ord=None, axis=None, keepdims=False):
    """``np.linalg.norm`` for vector norms (ord None/2, 1, inf, -inf, p) and the matrix norms
    'fro', 1, inf, -1, -inf, 'nuc' excluded (it needs singular values)."""
    x = _t(x)
    if axis is None and (x.ndim == 1 or ord is None):
        if ord is None or (x.ndim == 1 and ord == 2):
            return np.sqrt(_reduce("reduce_sum", x * x, None, keepdims))
        axis = None
    if axis is not None and np.ndim(axis) == 0:
        axis = (axis,)
    vec = (axis is None and x.ndim == 1) or (axis is not None and len(axis) == 1)
    if vec:
        ax = None if axis is None else axis[0]
        a = abs(x)
        if ord in (None, 2):
            return np.sqrt(_reduce("reduce_sum", x * x, ax, keepdims))
        if ord == np.inf:
            return _reduce("reduce_max", a, ax, keepdims)
        if ord == -np.inf:
            return -_reduce("reduce_max", -a, ax, keepdims)
        if ord == 1:
            return _reduce("reduce_sum", a, ax, keepdims)
        if ord == 0:
            return _reduce("reduce_sum", (x != 0.0).astype(float), ax, keepdims)
        p = float(ord)
        return _reduce("reduce_sum", a**p, ax, keepdims) ** (1.0 / p)
    rows, cols = (0, 1) if axis is None else (_axis(axis[0], x.ndim), _axis(axis[1], x.ndim))
    if ord in (None, "fro"):
        return np.sqrt(_reduce("reduce_sum", x * x, (rows, cols), keepdims))
    a = abs(x)
    if ord in (1, -1):
        s = _reduce("reduce_sum", a, rows, True)
        r = _reduce("reduce_max", s if ord == 1 else -s, cols, True) * (1 if ord == 1 else -1)
    elif ord in (np.inf, -np.inf):
        s = _reduce("reduce_sum", a, cols, True)
        r = _reduce("reduce_max", s if ord > 0 else -s, rows, True) * (1 if ord > 0 else -1)
    else:
        raise _fail(f"numpy.linalg.norm with ord={ord!r} for matrices is not supported")
    return r if keepdims else _squeeze(r, (rows, cols))


def _expit(x):
    """The logistic sigmoid 1 / (1 + exp(-x)), exponentiating only non-positive numbers."""
    x = _t(x)
    e = np.exp(-abs(x))
    return _where(x >= 0.0, 1.0 / (1.0 + e), e / (1.0 + e))


def _log_expit(x):
    """log(expit(x)) = -log1p(exp(-x)), stable for both signs."""
    x = _t(x)
    return _binary("minimum", x, 0.0) - np.log1p(np.exp(-abs(x)))


def _logit(p):
    p = _t(p)
    return np.log(p / (1.0 - p))


def _xlogy(x, y):
    """x * log(y), 0 where x == 0 (scipy.special.xlogy)."""
    x, y = _t(x), _t(y)
    safe = _where(x == 0.0, 1.0, y)
    return _where(x == 0.0, 0.0, x * np.log(safe))


def _xlog1py(x, y):
    x, y = _t(x), _t(y)
    safe = _where(x == 0.0, 0.0, y)
    return _where(x == 0.0, 0.0, x * np.log1p(safe))


def _remainder(a, b):
    """numpy's ``mod``/``remainder``/``%``: ``fmod`` moved to the sign of ``b`` (numpy's own
    ``npy_divmod``), exact like it."""
    a, b = _t(a), _t(b)
    m = _binary("fmod", a, b)
    wrong_side = (m != 0.0) & ((b < 0.0) != (m < 0.0))
    return _where(wrong_side, m + b, m)


def _round(a, decimals=0, out=None):
    """numpy's ``round``: half to even, by scaling with 10^decimals as numpy does."""
    _no_out(out, "round")
    a = _t(a)
    if decimals == 0:
        return _unary("rint", a)
    scale = 10.0 ** decimals
    if decimals > 0:
        return _unary("rint", a * scale) / scale
    return _unary("rint", a / (1.0 / scale)) * (1.0 / scale)


def _where_fn(c, x=None, y=None):
    if x is None or y is None:
        raise _fail("numpy.where with one argument (indices) is not supported")
    return _where(c, x, y)


def _select(condlist, choicelist, default=0):
    if len(condlist) != len(choicelist):
        raise _fail("list of cases must be same length as list of conditions")
    r = lift(default)
    for c, v in reversed(list(zip(condlist, choicelist))):
        r = _where(c, v, r)
    return r


# ----------------------------------------------------------------------------------------------
# Integer-array and boolean-mask indexing


def is_basic_key(key) -> bool:
    """Whether ``key`` is numpy basic indexing (ints, slices, ``...``) without ``None``."""
    items = key if isinstance(key, tuple) else (key,)
    return not any(
        k is None or isinstance(k, (list, np.ndarray)) or (isinstance(k, Tracer) and k.ndim)
        for k in items
    )


def _expand_key(key, ndim: int):
    """The key as a tuple with ``...`` expanded, ``None`` kept, bool masks turned into their
    integer index arrays (one per axis they cover), lists into int arrays."""
    items = key if isinstance(key, tuple) else (key,)
    out = []
    for k in items:
        if isinstance(k, Tracer):
            raise _fail(
                "indexing with a traced array (a data-dependent index or mask) is not "
                "supported; index arrays must be known when tracing (use tapejit.where for a "
                "mask that depends on the input)"
            )
        if isinstance(k, (list, np.ndarray)):
            arr = np.asarray(k)
            if arr.dtype == np.bool_:
                out.extend(np.nonzero(arr))
                continue
            if arr.size == 0:
                arr = arr.astype(np.intp)
            if arr.dtype.kind not in "iu":
                raise _fail(
                    f"arrays used as indices must be of integer (or boolean) type, got {arr.dtype}"
                )
            out.append(arr.astype(np.intp))
        else:
            out.append(k)
    used = sum(1 for k in out if k is not None and k is not Ellipsis)
    if any(k is Ellipsis for k in out):
        i = out.index(Ellipsis)
        out = out[:i] + [slice(None)] * (ndim - used) + out[i + 1 :]
    if used > ndim:
        raise _fail(f"too many indices for array: array is {ndim}-dimensional, but {used} were indexed")
    return out + [slice(None)] * (ndim - used)


def _index_plan(shape, key):
    """For an advanced or None-bearing key: (broadcast index shape B or None, list of
    (result position, basic key) for every element of B, result shape, positions)."""
    items = _expand_key(key, len(shape))
    arrays = [(i, k) for i, k in enumerate(items) if isinstance(k, np.ndarray)]
    axis_of = []
    ax = 0
    for k in items:
        axis_of.append(None if k is None else ax)
        if k is not None:
            ax += 1
    for i, k in arrays:
        d = shape[axis_of[i]]
        if k.size and (k.max() >= d or k.min() < -d):
            bad = k.max() if k.max() >= d else k.min()
            raise _fail(f"index {bad} is out of bounds for axis {axis_of[i]} with size {d}")
    return items, arrays, axis_of


def advanced_getitem(x: Tracer, key) -> Tracer:
    """``x[key]`` for keys with ``None``, integer arrays or boolean masks (numpy's advanced
    indexing: the broadcast index arrays' shape replaces the indexed axes in place when they are
    adjacent, else it comes first)."""
    items, arrays, _ = _index_plan(x.shape, key)
    if not arrays:  # only None: basic indexing, then unit axes where the Nones stood
        basic = tuple(k for k in items if k is not None)
        r = x[basic] if basic else x
        shape, it = [], iter(r.shape)
        for k in items:
            if k is None:
                shape.append(1)
            elif not isinstance(k, (int, np.integer)):
                shape.append(next(it))
        return _reshape(r, tuple(shape) + tuple(it))
    if any(k is None for k in items):
        raise _fail("None / np.newaxis together with integer-array indices is not supported")
    B = np.broadcast_shapes(*(k.shape for _, k in arrays))
    bcast = {i: np.broadcast_to(k, B) for i, k in arrays}
    pos = [i for i, _ in arrays]
    adjacent = pos == list(range(pos[0], pos[-1] + 1))
    rows = []
    for b in np.ndindex(*B):
        rows.append(x[tuple(int(bcast[i][b]) if i in bcast else k for i, k in enumerate(items))])
    rest = rows[0].shape if rows else tuple(
        len(range(*k.indices(d))) for k, d in zip(items, x.shape) if isinstance(k, slice)
    )
    if rows:
        r = _stack(rows) if len(rows) > 1 else _expand_dims(rows[0], 0)
        r = _reshape(r, B + rest)
    else:
        r = Tracer(ops.const(0.0, B + rest, x.node.dtype), _UNSET, x.level)
    if adjacent and pos[0] > 0:  # B goes where the indexed axes were
        before = sum(1 for k in items[: pos[0]] if isinstance(k, slice))
        nb = len(B)
        perm = list(range(nb, nb + before)) + list(range(nb)) + list(range(nb + before, r.ndim))
        r = _transpose(r, perm)
    return r


def advanced_setitem(y: Tracer, key, value) -> None:
    """``y[key] = value`` for advanced keys: one basic write per selected element, in numpy's
    order (with repeated indices the last write wins, as numpy's assignment does)."""
    items, arrays, _ = _index_plan(y.shape, key)
    if not arrays:  # only None: the value broadcasts to the result with its unit axes
        basic = tuple(k for k in items if k is not None)
        target = advanced_getitem(y, key).shape
        v = _t(value)
        try:
            if np.broadcast_shapes(v.shape, target) != target:
                raise ValueError
        except ValueError:
            raise _fail(
                f"could not broadcast input array from shape {v.shape} into shape {target}"
            ) from None
        region = y[basic].shape if basic else y.shape
        _setitem(y, basic if basic else Ellipsis, _reshape(_broadcast_to(v, target), region))
        return
    if any(k is None for k in items):
        raise _fail("None / np.newaxis together with integer-array indices is not supported")
    target = advanced_getitem(y, key)  # the shape numpy broadcasts the value to
    v = _t(value)
    if np.broadcast_shapes(v.shape, target.shape) != target.shape:
        raise _fail(f"shape mismatch: value array of shape {v.shape} could not be broadcast "
                    f"to indexing result of shape {target.shape}")
    v = _broadcast_to(v, target.shape)
    B = np.broadcast_shapes(*(k.shape for _, k in arrays))
    bcast = {i: np.broadcast_to(k, B) for i, k in arrays}
    pos = [i for i, _ in arrays]
    adjacent = pos == list(range(pos[0], pos[-1] + 1))
    before = sum(1 for k in items[: pos[0]] if isinstance(k, slice)) if adjacent else 0
    nb = len(B)
    if adjacent and before:  # bring B to the front, as the rows were gathered
        perm = list(range(before, before + nb)) + list(range(before)) + list(range(before + nb, v.ndim))
        v = _transpose(v, perm)
    for b in np.ndindex(*B):
        _setitem(y, tuple(int(bcast[i][b]) if i in bcast else k for i, k in enumerate(items)), v[b])


def _take(a, indices, axis=None, out=None, mode="raise"):
    _no_out(out, "take")
    a = _t(a)
    if mode != "raise":
        raise _fail(f"numpy.take with mode={mode!r} is not supported")
    if axis is None:
        return advanced_getitem(_reshape(a, (-1,)), (np.asarray(indices),)) if np.ndim(
            indices
        ) else _reshape(a, (-1,))[int(indices)]
    axis = _axis(axis, a.ndim)
    idx = np.asarray(indices)
    if idx.ndim == 0:
        return a[(slice(None),) * axis + (int(idx),)]
    return advanced_getitem(a, (slice(None),) * axis + (idx,))


def _take_along_axis(arr, indices, axis):
    arr = _t(arr)
    idx = np.asarray(indices)
    if axis is None:
        return advanced_getitem(_reshape(arr, (-1,)), (idx,))
    axis = _axis(axis, arr.ndim)
    if idx.ndim != arr.ndim:
        raise _fail("`indices` and `arr` must have the same number of dimensions")
    shape = np.broadcast_shapes(
        tuple(1 if i == axis else d for i, d in enumerate(idx.shape)),
        tuple(1 if i == axis else d for i, d in enumerate(arr.shape)),
    )
    grids = np.ogrid[tuple(slice(0, d) for d in shape)]
    key = tuple(idx if i == axis else grids[i] for i in range(arr.ndim))
    return advanced_getitem(arr, key)


# ----------------------------------------------------------------------------------------------
# The tables

def _primitive(op: ops.OpDef) -> Callable[..., Tracer]:
    return functools.partial(_unary if op.arity == 1 else _binary, op.name)


UFUNCS: dict[str, Callable[..., Tracer]] = {
    # the primitives, by the numpy names their block in tapejit/ops.py declares
    **{alias: _primitive(op) for op in ops.OPS.values() for alias in op.numpy},
    # compositions
    "power": _power,
    "float_power": _power,
    "matmul": _matmul_nd,
    "positive": lift,
    "square": lambda x: _binary("mul", x, x),
    "reciprocal": lambda x: _binary("div", 1.0, x),
    "logaddexp": _logaddexp,
    "logaddexp2": _logaddexp2,
    "sinh": _sinh,
    "cosh": _cosh,
    "tan": _tan,
    "arcsinh": _arcsinh,
    "arcsin": _arcsin,
    "arccos": _arccos,
    "arccosh": _arccosh,
    "arctanh": _arctanh,
    "exp2": _exp2,
    "log2": _log2,
    "log10": _log10,
    "hypot": _hypot,
    "deg2rad": lambda x: _t(x) * (math.pi / 180.0),
    "radians": lambda x: _t(x) * (math.pi / 180.0),
    "rad2deg": lambda x: _t(x) * (180.0 / math.pi),
    "degrees": lambda x: _t(x) * (180.0 / math.pi),
    "fmax": _fmax,
    "fmin": _fmin,
    "heaviside": _heaviside,
    "logical_xor": lambda a, b: _binary("ne", _t(a) != 0.0, _t(b) != 0.0),
    "remainder": _remainder,
    "isnan": lambda x: _t(x) != _t(x),
    "isinf": lambda x: abs(_t(x)) == np.inf,
    "isfinite": lambda x: abs(_t(x)) < np.inf,
    "signbit": lambda x: _t(x) < 0.0,
    "conjugate": lambda x: _t(x),  # real values are their own conjugate
    "cbrt": lambda x: np.sign(_t(x)) * abs(_t(x)) ** (1.0 / 3.0),
    # scipy.special's ufuncs (when scipy is installed; not a dependency)
    "expit": _expit,
    "log_expit": _log_expit,
    "logit": _logit,
    "xlogy": _xlogy,
    "xlog1py": _xlog1py,
}  # fmt: skip

def _logsumexp(a, axis=0, dtype=None, out=None, keepdims=False, **kw):
    """``np.logaddexp.reduce``: log(sum(exp(a))) shifted by the maximum (a -inf maximum, all
    terms -inf, gives -inf)."""
    _no_out(out, "logaddexp.reduce")
    _no_kwargs("logaddexp.reduce", kw)
    a = _t(a)
    m = _reduce("reduce_max", a, axis, True)
    safe = _where(abs(m) < np.inf, m, 0.0)
    r = np.log(_reduce("reduce_sum", np.exp(a - safe), axis, True)) + safe
    return r if keepdims else _squeeze(r, range(a.ndim) if axis is None else axis)


#: numpy ufunc methods other than ``__call__``: (ufunc name, method) -> implementation
UFUNC_METHODS: dict[tuple[str, str], Callable[..., Tracer]] = {
    ("add", "reduce"): lambda a, axis=0, dtype=None, out=None, keepdims=False, **kw: _sum(a, axis, dtype, out, keepdims, **kw),
    ("multiply", "reduce"): lambda a, axis=0, dtype=None, out=None, keepdims=False, **kw: _prod(a, axis, dtype, out, keepdims, **kw),
    ("maximum", "reduce"): lambda a, axis=0, dtype=None, out=None, keepdims=False, **kw: _max(a, axis, out, keepdims, **kw),
    ("minimum", "reduce"): lambda a, axis=0, dtype=None, out=None, keepdims=False, **kw: _min(a, axis, out, keepdims, **kw),
    ("logaddexp", "reduce"): _logsumexp,
    ("add", "accumulate"): lambda a, axis=0, dtype=None, out=None: _no_out(out, "add.accumulate") or _scan(a, axis, "add", 0.0),
    ("multiply", "accumulate"): lambda a, axis=0, dtype=None, out=None: _no_out(out, "multiply.accumulate") or _scan(a, axis, "mul", 1.0),
}  # fmt: skip

FUNCTIONS: dict[Callable, Callable[..., Tracer]] = {
    np.sum: _sum,
    np.max: _max,
    np.amax: _max,
    np.min: _min,
    np.amin: _min,
    np.mean: _mean_fn,
    np.var: _var,
    np.std: _std,
    np.average: _average,
    np.prod: _prod,
    np.cumsum: lambda a, axis=None, dtype=None, out=None: _no_out(out, "cumsum") or _float_dtype("cumsum", dtype) or _scan(a, axis, "add", 0.0),
    np.cumprod: lambda a, axis=None, dtype=None, out=None: _no_out(out, "cumprod") or _float_dtype("cumprod", dtype) or _scan(a, axis, "mul", 1.0),
    np.diff: _diff,
    np.dot: _dot,
    np.matmul: _matmul_nd,
    np.vdot: lambda a, b: _dot(_reshape(_t(a), (-1,)), _reshape(_t(b), (-1,))),
    np.tensordot: _tensordot,
    np.outer: _outer,
    np.inner: _inner,
    np.kron: _kron,
    np.cross: _cross,
    np.einsum: _einsum,
    np.trace: _trace,
    np.diagonal: _diagonal,
    np.diag: _diag,
    np.tril: _tril,
    np.triu: _triu,
    np.reshape: lambda a, shape=None, order="C", **kw: _c_order("reshape", order) or _reshape(a, shape if shape is not None else kw["newshape"]),
    np.transpose: lambda a, axes=None: _transpose(a, axes),
    np.where: _where_fn,
    np.select: _select,
    np.ravel: lambda a, order="C": _c_order("ravel", order) or _reshape(a, (-1,)),
    np.shape: lambda a: lift(a).shape,
    np.ndim: lambda a: lift(a).ndim,
    np.size: lambda a, axis=None: lift(a).size if axis is None else lift(a).shape[axis],
    np.linalg.norm: _norm,
    np.clip: _clip,
    np.nan_to_num: _nan_to_num,
    np.round: _round,
    np.fix: lambda x, out=None: _unary("trunc", _t(x)),
    np.around: _round,
    np.sinc: _sinc,
    np.copy: lambda a, order="K", subok=False: _copy(a),
    np.zeros_like: lambda a, dtype=None, order="K", subok=True, shape=None, **kw: _like(0.0, a, dtype, shape),
    np.ones_like: lambda a, dtype=None, order="K", subok=True, shape=None, **kw: _like(1.0, a, dtype, shape),
    np.empty_like: lambda a, dtype=None, order="K", subok=True, shape=None, **kw: _like(0.0, a, dtype, shape),
    np.full_like: lambda a, fill_value, dtype=None, order="K", subok=True, shape=None, **kw: _like(fill_value, a, dtype, shape),
    np.concatenate: _concatenate,
    np.stack: _stack,
    np.vstack: _vstack,
    np.hstack: _hstack,
    np.column_stack: _column_stack,
    np.append: _append,
    np.split: lambda a, i, axis=0: _split(a, i, axis, True),
    np.array_split: lambda a, i, axis=0: _split(a, i, axis, False),
    np.expand_dims: _expand_dims,
    np.squeeze: _squeeze,
    np.swapaxes: _swapaxes,
    np.moveaxis: _moveaxis,
    np.broadcast_to: _broadcast_to,
    np.atleast_1d: _atleast(1),
    np.atleast_2d: _atleast(2),
    np.flip: _flip,
    np.flipud: lambda m: _flip(m, 0),
    np.fliplr: lambda m: _flip(m, 1),
    np.roll: _roll,
    np.tile: _tile,
    np.repeat: _repeat,
    np.pad: _pad,
    np.take: _take,
    np.sort: _sort,
    np.rot90: _rot90,
    np.vsplit: _split_along(0),
    np.hsplit: _split_along(1),
    np.dsplit: _split_along(2),
    np.dstack: _dstack,
    np.rollaxis: _rollaxis,
    np.quantile: _quantile,
    np.percentile: lambda a, q, axis=None, out=None, **kw: _quantile(a, np.asarray(q) / 100.0, axis, out, **kw),
    np.nansum: _nan_reduce("nansum", _sum, 0.0),
    np.nanprod: _nan_reduce("nanprod", _prod, 1.0),
    np.nanmax: _nan_reduce("nanmax", _max, -np.inf),
    np.nanmin: _nan_reduce("nanmin", _min, np.inf),
    np.ptp: lambda a, axis=None, out=None, keepdims=False: _max(a, axis, out, keepdims) - _min(a, axis, None, keepdims),
    np.real: lambda val: _t(val),
    np.imag: lambda val: _t(val) * 0.0,
    np.conjugate: lambda x: _t(x),
    np.partition: _partition,
    np.median: _median,
    np.take_along_axis: _take_along_axis,
}  # fmt: skip

from .numpy_linalg import FUNCTIONS as _LINALG  # noqa: E402  (it builds on the functions above)

FUNCTIONS.update(_LINALG)


def _function_name(fn: Callable) -> str:
    module = getattr(fn, "__module__", "") or ""
    prefix = "np.linalg." if "linalg" in module else "np."
    return prefix + fn.__name__


def supported_markdown() -> str:
    """The README's list of the numpy names that trace (a test keeps README in sync; regenerate
    with ``python -c "import tapejit.numpy_api as m; print(m.supported_markdown())"``)."""
    ufuncs = sorted(n for n in UFUNCS if not n.startswith(("expit", "log_expit", "logit", "xlog")))
    special = sorted(n for n in UFUNCS if n not in ufuncs)
    functions = sorted({_function_name(f) for f in FUNCTIONS})
    methods = sorted(
        n
        for n in dir(Tracer)
        if not n.startswith("_") and hasattr(np.ndarray, n) and n not in ("T", "shape", "ndim", "size", "dtype", "tolist")
    )
    return "\n".join(
        [
            "- numpy ufuncs: " + ", ".join(f"`{n}`" for n in ufuncs),
            "- numpy functions: " + ", ".join(f"`{n}`" for n in functions),
            "- ndarray methods: " + ", ".join(f"`.{n}`" for n in methods)
            + "; attributes `.T .shape .ndim .size .dtype`",
            "- scipy.special (when scipy is installed): " + ", ".join(f"`{n}`" for n in special),
        ]
    )
