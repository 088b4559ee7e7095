"""Basic indexing of traced arrays with numpy's semantics: reads (``x[1:, 0]``, a view of ``x``:
an ``index`` node recorded as a view step), writes (``y[k] = v``, a functional ``scatter``
update that ``y`` and every view of its memory are rebound to, see
:mod:`~tapejit.frontend.views`) and numpy's in-place operators (``y += v``). A position that is
a traced value goes to :mod:`~tapejit.frontend.dynamic_index`; integer-array and mask indices to
the numpy surface (``numpy.np_index``). Registers ``getitem``, ``setitem`` and ``inplace`` in
:mod:`~tapejit.frontend.registry` (the tracer's ``__getitem__``, ``__setitem__`` and ``__iadd__``
& co. call them); the scalarised code's hot path ``x[i, j]`` stays in the tracer
(:func:`~tapejit.frontend.tracer._element`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core import ops
from ..core.ops import Op
from . import dynamic_index, views
from .errors import _fail, _fail_index
from .registry import HOOKS
from .trace_state import _UNSET, _current
from .tracer import Tracer, _as_view, _binary, _build, _check_static, _power, lift


def _normalise_key(key, shape) -> tuple:
    """numpy basic indexing -> tuple of ints and (start, stop, step) triples, or raise."""
    if not isinstance(key, tuple):
        key = (key,)
    dots = [i for i, k in enumerate(key) if k is Ellipsis]  # by identity: no == on the items
    if len(dots) > 1:
        raise _fail_index("an index can only have a single ellipsis ('...')")
    used = len(key) - len(dots)
    if used > len(shape):
        raise _fail_index(
            f"too many indices for array: array is {len(shape)}-dimensional, but {used} were "
            "indexed"
        )
    if dots:
        i = dots[0]
        key = key[:i] + (slice(None),) * (len(shape) - used) + key[i + 1 :]
    items = []
    for k, d in zip(key, shape):
        if isinstance(k, Tracer):
            raise _fail(
                "indexing with a traced value (data-dependent index) is not supported; "
                "indices must be Python ints or slices"
            )
        if isinstance(k, slice):
            items.append(k.indices(d))
        elif isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            k = int(k)
            if not -d <= k < d:
                raise _fail_index(
                    f"index {k} is out of bounds for axis {len(items)} with size {d}"
                )
            items.append(k % d)
        elif k is None:
            raise _fail("np.newaxis / None in an index is not supported; use reshape")
        else:
            raise _fail(
                f"index of type {type(k).__name__} is not supported "
                "(only ints, slices and tuples of them: basic indexing)"
            )
    while items and isinstance(items[-1], tuple) and items[-1] == (0, shape[len(items) - 1], 1):
        items.pop()  # trailing full slices are the identity
    return tuple(items)



def _getitem(x: Tracer, key) -> Tracer:
    if dynamic_index.is_dynamic(key):  # a traced position, x[i] (tapejit/frontend/dynamic_index.py)
        return dynamic_index.getitem(x, key)
    items = _normalise_key(key, x.shape)
    return _as_view(x, _build(lambda a: ops.index(a, items), x), (Op.INDEX, items))



def write_shape(shape: tuple[int, ...], region: tuple[int, ...], message: str) -> tuple[int, ...]:
    """The shape a value of ``shape`` written into ``region`` is broadcast from: numpy drops its
    leading unit axes beyond the region's rank; raises ``message`` (numpy's text) when it does
    not broadcast."""
    while len(shape) > len(region) and shape[0] == 1:
        shape = shape[1:]
    try:
        if np.broadcast_shapes(shape, region) != region:
            raise ValueError
    except ValueError:
        raise _fail(message) from None
    return shape


def _setitem(y: Tracer, key, value) -> None:
    """``y[key] = value`` with numpy's semantics, as the functional update ``scatter`` that
    ``y`` (and every view of the same memory) is rebound to."""
    ro = views.read_only_root(y)
    if ro is not None:
        raise _fail(
            f"writing into the function's argument {ro.name} (or a view of it): numpy would "
            "modify the caller's array, which the compiled function does not do. Copy it first "
            f"({ro.name} = {ro.name}.copy()) or build a new array (np.zeros_like, tapejit.where)"
        )
    shared = HOOKS["shared_with_numpy"](views.root_of(y))
    if shared is not None:
        raise _fail(
            f"writing into an array that was passed to np.asarray at {shared}: numpy's asarray "
            "returns the array itself, so its result would change too, but tapejit's holds the "
            "values it had then; use np.array(x) (a copy) there, or write before converting"
        )
    if y.level != len(_current.items):
        raise _fail(
            "writing into an array of the enclosing function inside a loop body: the body is "
            "traced once, not run per iteration; carry the array through the loop instead"
        )
    if dynamic_index.is_dynamic(key):  # a traced position, y[i] = v (tapejit/frontend/dynamic_index.py)
        return dynamic_index.setitem(y, key, value)
    items = _normalise_key(key, y.shape)
    region = ops.index_shape(y.shape, items)
    v = lift(value)
    _check_static(v)
    vnode = v.node
    if y.node.dtype == "f64":
        vnode = ops._float(vnode)
    elif vnode.dtype != "bool":
        vnode = ops.make(Op.NE, vnode, ops.const(0.0))
    shape = write_shape(
        vnode.shape, region, f"could not broadcast input array from shape {vnode.shape} into "
        f"shape {region}",
    )  # fmt: skip
    vnode = ops.broadcast_to(ops.reshape(vnode, shape), region)
    new = ops.scatter(y.node, vnode, items) if items else vnode
    views.write(y, new, _UNSET)


def _inplace(y: Tracer, op: Op, o) -> Any:
    """``y op= o``: numpy writes the result into ``y`` itself (cast to its dtype, which must
    hold the result's shape); a traced scalar is immutable, so Python rebinds the name."""
    if y.node.shape == ():
        return NotImplemented
    r = _power(y, o) if op == Op.POW else _binary(op, y, o)
    if r.node.shape != y.node.shape:
        raise _fail(
            f"non-broadcastable output operand with shape {y.node.shape} doesn't match the "
            f"broadcast shape {r.node.shape} (in-place {op})"
        )
    _setitem(y, Ellipsis, r)
    return y



HOOKS["getitem"] = _getitem
HOOKS["setitem"] = _setitem
HOOKS["inplace"] = _inplace
