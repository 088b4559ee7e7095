"""Helpers shared by the modules that define the numpy surface (``np_*``, :mod:`numpy_api`):
argument normalisation, the errors for arguments tapejit does not implement, and reductions
along axes (:func:`_reduce`, :func:`_mean`: one ``reduce`` node, ``keepdims`` as a reshape)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core import ops
from ...core.ops import Op
from ..errors import _fail
from ..indexing import _setitem
from ..trace_state import _UNSET, _current
from ..tracer import Tracer, _binary, _build, _reshape, _where, lift


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
    if v.node.shape == () and v.node.op == Op.CONST:
        return Tracer(ops.const(v.node.attrs[0], shape, kind), _UNSET, len(_current.items))
    fill = Tracer(ops.const(0.0 if kind == "f64" else False, shape, kind), _UNSET, v.level)
    _setitem(fill, Ellipsis, v)
    return fill


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


def _masked(name: str, a, where, initial, identity: float, combine: Op, has_identity=True):
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


def _axes(x: Tracer, axis) -> tuple[int, ...] | None:
    if axis is None:
        return None
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    nd = lift(x).ndim
    out = []
    for a in axes:
        a = int(a)
        if not -nd <= a < nd:
            raise _fail(f"axis {a} is out of bounds for an array of dimension {nd}")
        out.append(a % nd)
    return tuple(out)


def _reduce(op, x, axis=None, keepdims=False):
    x = lift(x)
    axes = _axes(x, axis)
    if op == Op.REDUCE_MAX and any(x.shape[a] == 0 for a in (axes or range(x.ndim))):
        raise _fail(  # numpy's error: max/min of nothing has no value (sum's is 0)
            "zero-size array to reduction operation maximum/minimum which has no identity"
        )
    r = _build(lambda a: ops.reduce(op, a, axes), x)
    if keepdims:
        full = tuple(range(x.ndim)) if axes is None else axes
        r = _reshape(r, tuple(1 if i in full else d for i, d in enumerate(x.shape)))
    return r


def _mean(x, axis=None, keepdims=False):
    x = lift(x)
    axes = _axes(x, axis)
    count = x.size if axes is None else int(np.prod([x.shape[a] for a in axes]))
    return _reduce(Op.REDUCE_SUM, x, axis, keepdims) / float(count)

