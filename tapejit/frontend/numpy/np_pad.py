"""``np.pad`` in every mode numpy has except ``empty`` and a callable: ``constant``, ``edge``,
``reflect``/``symmetric`` (``reflect_type`` even or odd), ``wrap``, ``linear_ramp`` and the
statistics ``maximum``/``minimum``/``mean``/``median`` (``stat_length``).

The algorithm is numpy's own (``numpy/lib/_arraypad_impl.py``), written on a traced array: a new
array of the padded shape holds the input in its middle, then each axis in turn has its two pad
areas written (basic-index ``scatter`` updates) from slices of what is already there — the
axes before it padded, the axes after it not yet. Reflections and wraps wider than the data are
written in chunks, each reading the chunk before, as numpy does, so the result is numpy's to
the bit (``reflect_type='odd'`` included). Derivatives come from the slices' and scatters'
rules: every padded element's cotangent flows to the elements it was read from.

``FUNCTIONS`` is merged into :data:`tapejit.frontend.numpy.numpy_api.FUNCTIONS`.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ...core import ops
from .np_common import _like, _no_kwargs, _t
from .np_reduce import _max, _mean_fn, _median, _min
from ..errors import _fail
from ..indexing import _setitem
from ..trace_state import _UNSET
from ..tracer import Tracer, _binary
from ...core.ops import Op

_STATS: dict[str, Callable] = {
    "maximum": lambda x, axis: _max(x, axis, None, True),
    "minimum": lambda x, axis: _min(x, axis, None, True),
    "mean": lambda x, axis: _mean_fn(x, axis, None, None, True),
    "median": lambda x, axis: _median(x, axis, None, False, True),
}

#: the keyword arguments each mode takes (numpy refuses others)
_KWARGS = {
    "constant": {"constant_values"},
    "edge": set(),
    "wrap": set(),
    "reflect": {"reflect_type"},
    "symmetric": {"reflect_type"},
    "linear_ramp": {"end_values"},
    **{m: {"stat_length"} for m in _STATS},
}


def _pairs(x, ndim: int, name: str, as_index: bool = False) -> np.ndarray:
    """numpy's ``_as_pairs``: a scalar, a pair or one pair per axis as an ``(ndim, 2)`` array."""
    if isinstance(x, dict):  # {axis: width or (before, after)}, other axes 0
        out = np.zeros((ndim, 2), dtype=object if not as_index else np.intp)
        for k, v in x.items():
            out[int(k) % ndim] = np.broadcast_to(np.asarray(v), (2,))
        x = out
    try:
        arr = np.broadcast_to(np.asarray(x, dtype=object if not as_index else None), (ndim, 2))
    except ValueError:
        raise _fail(f"numpy.pad: {name} {x!r} cannot be broadcast to ({ndim}, 2)") from None
    if as_index:
        if arr.dtype == object or arr.dtype.kind not in "iuf":
            raise _fail(f"numpy.pad: {name} must be integers")
        arr = np.round(arr).astype(np.intp)
        if np.any(arr < 0):
            raise _fail("index can't contain negative values")
    return arr


def _pad(array, pad_width, mode="constant", **kw):
    """``numpy.pad(array, pad_width, mode, **kw)`` on a traced array (see the module docstring).

    Raises :class:`~tapejit.TracingError` for ``mode='empty'`` (its values are whatever the
    memory held: write ``mode='constant'``), a callable mode, unknown modes or keywords, and
    what numpy refuses (negative widths, extending an empty axis other than with a constant).
    """
    if callable(mode):
        raise _fail("numpy.pad with a function as mode is not supported by tapejit")
    if mode == "empty":
        raise _fail(
            "numpy.pad with mode='empty' is not supported by tapejit: its pad values are "
            "undefined (whatever the memory held); use mode='constant'"
        )
    if mode not in _KWARGS:
        raise _fail(f"numpy.pad: mode {mode!r} is not supported")
    _no_kwargs("pad", {k: v for k, v in kw.items() if k not in _KWARGS[mode]})
    a = _t(array)
    pw = _pairs(pad_width, a.ndim, "pad_width", as_index=True)
    shape = tuple(int(d + lo + hi) for d, (lo, hi) in zip(a.shape, pw))
    middle = tuple(slice(int(lo), int(lo) + d) for d, (lo, _) in zip(a.shape, pw))
    cv = kw.get("constant_values", 0)
    if mode == "constant" and not isinstance(cv, Tracer) and np.ndim(cv) == 0:
        out = _like(float(cv), a, shape=shape)  # one value: the array, then the input in it
        _setitem(out, middle, a)
        return out
    if a.size == 0 and mode != "constant":
        for axis, (d, width) in enumerate(zip(a.shape, pw)):
            if d == 0 and any(width):
                raise _fail(
                    f"can't extend empty axis {axis} using modes other than 'constant' or 'empty'"
                )
    out = Tracer(ops.const(0.0, shape, a.node.dtype), _UNSET, a.level)
    if a.size:
        _setitem(out, middle, a)
    if a.size == 0 and mode != "constant":
        return out
    for axis in range(a.ndim):
        _pad_axis(out, axis, middle, tuple(int(w) for w in pw[axis]), a.shape[axis], mode, kw)
    return out


def _pad_axis(out: Tracer, axis: int, middle: tuple, width: tuple, n: int, mode: str, kw):
    """Write the two pad areas of ``axis`` (numpy's loop body for one axis)."""
    lo, hi = width
    if lo == hi == 0:
        return
    size = out.shape[axis]

    def key(s):  # the axes before `axis` whole (padded already), the ones after not yet
        return (slice(None),) * axis + (s,) + middle[axis + 1 :]

    def read(start, stop, step=1):
        return out[key(slice(start, stop, step))]

    def write(start, stop, value):
        if stop > start:
            _setitem(out, key(slice(start, stop)), value)

    edges = (read(lo, lo + 1), read(size - hi - 1, size - hi))
    if mode == "constant":
        values = _pairs(kw.get("constant_values", 0), out.ndim, "constant_values")[axis]
        write(0, lo, values[0])
        write(size - hi, size, values[1])
    elif mode == "edge" or (mode in ("reflect", "symmetric") and n == 1):
        write(0, lo, edges[0])
        write(size - hi, size, edges[1])
    elif mode == "linear_ramp":
        ends = _pairs(kw.get("end_values", 0), out.ndim, "end_values")[axis]
        write(0, lo, _ramp(ends[0], edges[0], lo, axis, out.ndim))
        right = _ramp(ends[1], edges[1], hi, axis, out.ndim)
        write(size - hi, size, right[(slice(None),) * axis + (slice(None, None, -1),)])
    elif mode in _STATS:
        lengths = _pairs(kw.get("stat_length"), out.ndim, "stat_length")[axis]
        for side, length in enumerate(lengths):
            length = n if length is None or int(length) > n else int(length)
            if length < 0:
                raise _fail("index can't contain negative values")
            if length == 0 and mode in ("maximum", "minimum"):
                raise _fail("stat_length of 0 yields no value for padding")
            start = lo if side == 0 else size - hi - length
            stat = _STATS[mode](read(start, start + length), axis)
            if side == 0:
                write(0, lo, stat)
            else:
                write(size - hi, size, stat)
    elif mode in ("reflect", "symmetric"):
        odd = kw.get("reflect_type", "even")
        if odd not in ("even", "odd"):
            raise _fail(f"numpy.pad: reflect_type must be 'even' or 'odd', got {odd!r}")
        while lo > 0 or hi > 0:
            lo, hi = _reflect_both(read, write, size, (lo, hi), odd == "odd", n, mode == "symmetric")
    elif mode == "wrap":
        while lo > 0 or hi > 0:
            lo, hi = _wrap_both(read, write, size, (lo, hi), n)


def _ramp(end, edge: Tracer, num: int, axis: int, ndim: int) -> Tracer:
    """``np.linspace(end, edge, num, endpoint=False, axis=axis)`` as numpy computes it
    (``i * step + start``, or ``i / num * delta + start`` when a step is 0 somewhere: numpy's
    own branch, taken here by a guard on the input)."""
    if num == 0:
        return edge[(slice(None),) * axis + (slice(0, 0),)]
    i = np.arange(num, dtype=np.float64).reshape((1,) * axis + (num,) + (1,) * (ndim - axis - 1))
    delta = edge - end
    step = delta / float(num)
    if bool(np.any(_binary(Op.EQ, step, 0.0))):  # a guard: numpy's branch on the data
        return i / float(num) * delta + end
    return i * step + end


def _reflect_both(read, write, size, width, odd: bool, period: int, include_edge: bool):
    """numpy's ``_set_reflect_both``: one chunk of reflection on each side; the widths left."""
    lo, hi = width
    old = size - hi - lo
    if include_edge:
        old, offset = old // period * period, 1
    else:
        old, offset = (old - 1) // (period - 1) * (period - 1), 0
    if lo > 0:
        k = min(old, lo)
        stop = lo - offset
        chunk = read(stop + k, stop if stop >= 0 else None, -1)
        if odd:
            chunk = 2.0 * read(lo, lo + 1) - chunk
        write(lo - k, lo, chunk)
        lo -= k
    if hi > 0:
        k = min(old, hi)
        start = size - hi + offset - 2
        chunk = read(start, start - k if start - k >= 0 else None, -1)
        if odd:
            chunk = 2.0 * read(size - hi - 1, size - hi) - chunk
        write(size - hi, size - hi + k, chunk)
        hi -= k
    return lo, hi


def _wrap_both(read, write, size, width, period: int):
    """numpy's ``_set_wrap_both``: one chunk of wrapping on each side; the widths left."""
    lo, hi = width
    p = (size - hi - lo) // period * period
    new_lo = new_hi = 0
    if lo > 0:
        end = lo + p
        chunk = read(end - min(p, lo), end)
        if lo > p:
            write(lo - p, lo, chunk)
            new_lo = lo - p
        else:
            write(0, lo, chunk)
    if hi > 0:
        start = size - hi - p
        chunk = read(start, start + min(p, hi))
        if hi > p:
            write(size - hi, size - hi + p, chunk)
            new_hi = hi - p
        else:
            write(size - hi, size, chunk)
    return new_lo, new_hi


FUNCTIONS: dict[Callable, Callable] = {np.pad: _pad}
