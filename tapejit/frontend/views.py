"""numpy's aliasing rules for traced arrays: views, in-place writes, and read-only arguments.

The IR is functional: a node never changes. A traced array (:class:`tapejit.frontend.tracing.Tracer`) is
the *mutable* thing numpy code sees, so an in-place write ``y[i] = v`` builds the functional
update ``scatter(y, v, items)`` and rebinds the tracer to it; every Python name bound to the same
tracer object sees the write, as in numpy.

numpy also shares memory between an array and its *views* (``y[1:]``, ``y[0]`` of a 2-D ``y``,
``y.T``, most reshapes). This module keeps that relation for traced arrays so that a write is seen
through every alias numpy would show it through:

* a view records its base and the step that made it (:class:`ViewOf`); the base keeps weak
  references to its live views;
* a write through a view is carried up to the root array by the inverse of each step (a
  ``scatter`` into the base for an index, the inverse permutation for a transpose, the base's
  shape for a reshape), then every live view of the root is recomputed from the root's new node;
* a ``reshape`` is a view exactly when numpy's would be: the step's strides are modelled
  (element strides of the root's C layout) and numpy decides on a stand-in array with those
  strides that owns no data;
* the function's arguments are read-only roots (:class:`ReadOnly`): numpy would modify the
  caller's array, which compiled code does not do, so a write into one (or into a view of one)
  raises naming the argument.

Writes are rare next to reads, so reads cost nothing: views are refreshed eagerly at writes.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core import ops
from ..core.ir import Node
from ..core.ops import Op


@dataclass(frozen=True)
class ReadOnly:
    """Marks a traced array the compiled function may not write into (a function argument)."""

    name: str


@dataclass(frozen=True)
class ViewOf:
    """``base``'s view made by ``step``: ``("index", items)``, ``("transpose", perm)`` or
    ``("reshape", shape)``; ``strides`` are its element strides in the root's buffer."""

    base: Any
    step: tuple
    strides: tuple[int, ...]
    offset: int


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))


def layout(t: Any) -> tuple[tuple[int, ...], int]:
    """(element strides, element offset) of traced array ``t`` in its root's buffer."""
    v = t._view
    if isinstance(v, ViewOf):
        return v.strides, v.offset
    return _c_strides(t.node.shape), 0


#: The kind of a step made by a traced position (``x[i]``, :mod:`tapejit.frontend.dynamic_index`): its
#: argument reads the row (``arg.read(node)``) and writes it back (``arg.write(node, row)``).
DYNAMIC = "dynamic-index"


def apply_step(node: Node, step: tuple) -> Node:
    kind, arg = step
    if kind == Op.INDEX:
        return ops.index(node, arg)
    if kind == DYNAMIC:
        return arg.read(node)
    if kind == Op.TRANSPOSE:
        return ops.transpose(node, arg)
    return ops.reshape(node, arg)


def _stand_in(shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    """An array with this shape and these element strides that owns no data (never read)."""
    itemsize = np.dtype(np.float64).itemsize
    return np.lib.stride_tricks.as_strided(
        np.zeros(1), shape, tuple(s * itemsize for s in strides), writeable=False
    )


def view_layout(base: Any, step: tuple, result_shape: tuple[int, ...]):
    """(strides, offset) of ``step`` applied to ``base`` if numpy returns a view, else None."""
    strides, offset = layout(base)
    kind, arg = step
    if kind == Op.INDEX:
        if not result_shape:
            return None  # all axes indexed by ints: numpy returns a scalar, a copy
        offset, out = ops.index_affine(base.node.shape, arg, strides, offset)
        return out, offset
    if kind == Op.TRANSPOSE:
        return tuple(strides[p] for p in arg), offset
    if math.prod(result_shape) == 0 or not result_shape:
        return _c_strides(result_shape), offset
    try:  # numpy's own rule: a reshape is a view when the strides allow one
        got = _stand_in(base.node.shape, strides).reshape(result_shape, copy=False)
    except ValueError:
        return None
    return tuple(s // 8 for s in got.strides), offset


def root_of(t: Any) -> Any:
    while isinstance(t._view, ViewOf):
        t = t._view.base
    return t


def record_view(base: Any, result: Any, step: tuple) -> None:
    """Make ``result`` (just built from ``base`` by ``step``) a view of ``base`` when numpy's
    result would be one. A view of a read-only root (an argument) only needs to know its root,
    to refuse writes: no layout, no registration (the common case, and the cheap one: slices
    of a parameter vector)."""
    if isinstance(root_of(base)._view, ReadOnly):
        if step[0] != Op.INDEX or result.node.shape:
            result._view = ViewOf(base, step, (), 0)
        return
    found = view_layout(base, step, result.node.shape)
    if found is None:
        return
    result._view = ViewOf(base, step, *found)
    # views of a writable root are refreshed when it is written (write() below)
    if base._views is None:
        base._views = []
    elif len(base._views) > 64 and len(base._views) & (len(base._views) - 1) == 0:
        base._views[:] = [r for r in base._views if r() is not None]
    base._views.append(weakref.ref(result))


def read_only_root(t: Any) -> ReadOnly | None:
    v = root_of(t)._view
    return v if isinstance(v, ReadOnly) else None


def _inverse(base_node: Node, step: tuple, new: Node) -> Node:
    """The base's new node after its view made by ``step`` became ``new``."""
    kind, arg = step
    if kind == Op.INDEX:
        return ops.scatter(base_node, new, arg) if arg else new
    if kind == DYNAMIC:
        return arg.write(base_node, new)
    if kind == Op.TRANSPOSE:
        return ops.transpose(new, tuple(np.argsort(arg).tolist()))
    return ops.reshape(new, base_node.shape)


def write(t: Any, new: Node, unset: Any) -> None:
    """Rebind traced array ``t`` to ``new`` (same type), carrying the write up through the
    arrays ``t`` is a view of and refreshing every live view of the root."""
    while isinstance(t._view, ViewOf):
        v = t._view
        new = _inverse(v.base.node, v.step, new)
        t = v.base
    t.node, t._value = new, unset
    _refresh(t, unset)


def _refresh(t: Any, unset: Any) -> None:
    todo = [t]
    while todo:
        base = todo.pop()
        if not base._views:
            continue
        live = []
        for ref in base._views:
            view = ref()
            if view is None or view._view is None or view._view.base is not base:
                continue
            view.node, view._value = apply_step(base.node, view._view.step), unset
            live.append(ref)
            todo.append(view)
        base._views[:] = live
