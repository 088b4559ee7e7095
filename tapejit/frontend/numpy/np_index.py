"""Integer-array and boolean-mask indexing of traced arrays (numpy's advanced indexing:
``x[idx]``, ``x[mask]``, ``y[idx] = v``, ``np.take``, ``np.take_along_axis``) as compositions:
a read gathers one basic-index read per selected element into a new array, so its adjoint is one
O(1) scatter-add per index (repeated indices accumulating as ``np.add.at``), never a dense
one-hot array; a write scatters each selected element. Index arrays must be known when tracing.
Registers ``advanced_getitem`` and ``advanced_setitem`` in :mod:`tapejit.frontend.registry` (the
tracer's ``__getitem__``/``__setitem__`` call them for such keys)."""

from __future__ import annotations

import numpy as np

from ...core import ops, ops_table
from ..errors import _fail, _fail_index
from ..indexing import _setitem, write_shape
from ..registry import HOOKS
from ..trace_state import _UNSET
from ..tracer import Tracer, _build, _reshape, _transpose, _where
from .np_common import _axis, _no_out, _t
from .np_shape import _broadcast_to, _expand_dims, _stack


def _is_mask(k) -> bool:
    return isinstance(k, np.ndarray) and k.dtype == np.bool_


def _expand_key(key, shape: tuple):
    """The key as a list of one item per axis of the result's making: ``...`` expanded (found by
    identity, never ``==``), ``None`` kept, lists as int arrays, each bool mask turned into its
    integer index arrays (one per axis it covers, after numpy's check of its shape)."""
    ndim = len(shape)
    items = key if isinstance(key, tuple) else (key,)
    out = []
    for k in items:
        if isinstance(k, Tracer) and k.ndim == 0:
            raise _fail(
                "a traced position beside None or an index array is not supported (numpy "
                "would read the element it names); index with it alone, then add the axes or "
                "the array index: x[i][None], x[:, i][idx]"
            )
        if isinstance(k, Tracer):
            raise _fail(
                "indexing with a traced array here is not supported: a traced integer array "
                "is an index as the first item of the key, the rest ints and slices (x[idx], "
                "x[idx, 0]); a traced boolean mask would make the result's shape depend on "
                "the input (use tapejit.where for a mask that depends on the input)"
            )
        if isinstance(k, (list, np.ndarray)):
            arr = np.asarray(k)
            if arr.dtype == np.bool_ and arr.ndim == 0:
                raise _fail(
                    "a boolean scalar index (x[True]) is not supported; numpy would add a unit "
                    "axis (True) or an empty one (False): use None / np.newaxis"
                )
            if arr.size == 0 and arr.dtype != np.bool_:
                arr = arr.astype(np.intp)
            if arr.dtype.kind not in "iub":
                raise _fail(
                    f"arrays used as indices must be of integer (or boolean) type, got {arr.dtype}"
                )
            out.append(arr if arr.dtype == np.bool_ else arr.astype(np.intp))
        else:
            out.append(k)
    dots = [i for i, k in enumerate(out) if k is Ellipsis]
    if len(dots) > 1:
        raise _fail_index("an index can only have a single ellipsis ('...')")
    used = sum(k.ndim if _is_mask(k) else 1 for k in out if k is not None and k is not Ellipsis)
    if used > ndim:
        raise _fail_index(
            f"too many indices for array: array is {ndim}-dimensional, but {used} were indexed"
        )
    fill = [slice(None)] * (ndim - used)
    out = out[: dots[0]] + fill + out[dots[0] + 1 :] if dots else out + fill
    expanded, ax = [], 0
    for k in out:
        if not _is_mask(k):
            expanded.append(k)
            ax += k is not None
            continue
        for j, (m, d) in enumerate(zip(k.shape, shape[ax:])):
            if m != d:
                raise _fail_index(
                    f"boolean index did not match indexed array along axis {ax + j}; size of "
                    f"axis is {d} but size of corresponding boolean axis is {m}"
                )
        expanded.extend(np.nonzero(k))
        ax += k.ndim
    return expanded


def _index_plan(shape, key):
    """For an advanced or None-bearing key: (the expanded items, the (position, index array)
    pairs, the array axis each item indexes (``None`` for a ``None`` item))."""
    items = _expand_key(key, tuple(shape))
    arrays = [(i, k) for i, k in enumerate(items) if isinstance(k, np.ndarray)]
    axis_of = []
    ax = 0
    for k in items:
        axis_of.append(None if k is None else ax)
        if k is not None:
            ax += 1
    for i, k in enumerate(items):
        if isinstance(k, (int, np.integer, np.ndarray)) and not isinstance(k, bool):
            d = shape[axis_of[i]]
            k = np.asarray(k)
            if k.size and (k.max() >= d or k.min() < -d):
                bad = k.max() if k.max() >= d else k.min()
                raise _fail_index(
                    f"index {bad} is out of bounds for axis {axis_of[i]} with size {d}"
                )
    return items, arrays, axis_of


def _advanced_positions(items, arrays) -> list[int]:
    """Where the advanced indices stand: the index arrays and, with them, the integers (numpy
    counts ``x[3, :, [1, 2]]``'s 3 as advanced, so its indexed axes are not adjacent)."""
    ints = [i for i, k in enumerate(items) if isinstance(k, (int, np.integer))]
    return sorted({i for i, _ in arrays} | set(ints))


def _placement(shape, items, arrays, axis_of):
    """numpy's layout of an advanced index's result. The gather builds it index-first: the
    broadcast index shape ``B``, then the sliced axes in key order. Returns ``(B, gathered shape,
    perm, result shape)``: the result is the gathered array transposed by ``perm`` (``B`` moved
    to where the indexed axes stood, when they are adjacent in the key — a ``None`` between them
    separates them) and reshaped to insert the unit axes of the ``None`` items."""
    B = np.broadcast_shapes(*(k.shape for _, k in arrays))
    sliced = {
        i: len(range(*k.indices(shape[axis_of[i]])))
        for i, k in enumerate(items)
        if isinstance(k, slice)
    }
    rest = tuple(sliced.values())
    pos = _advanced_positions(items, arrays)
    adjacent = pos == list(range(pos[0], pos[-1] + 1))
    first = pos[0] if adjacent else 0
    before = sum(1 for i in sliced if i < first)
    nb, ns = len(B), len(rest)
    perm = list(range(nb, nb + before)) + list(range(nb)) + list(range(nb + before, nb + ns))
    out = []
    for i, k in enumerate(items):
        if i == first:
            out.extend(B)
        if k is None:
            out.append(1)
        elif i in sliced:
            out.append(sliced[i])
    return B, B + rest, perm, tuple(out)


#: An index array of at least this many positions into the first axis reads through a table
#: (one ``take`` node, tapejit/core/ops_table.py) instead of one node per element read.
TAKE_MIN = 8


def _take_rows(x: Tracer, items: list, arrays: list) -> Tracer | None:
    """``x[idx, basic...]`` — one integer array (of at least :data:`TAKE_MIN` positions) on
    the first axis, basic indices after it — as rows taken through a table of the positions
    (the result's first axes are ``idx``'s, as numpy puts them), or ``None`` for any other
    key."""
    if len(arrays) != 1 or arrays[0][0] != 0 or x.node.dtype != "f64":
        return None
    k = arrays[0][1]
    rest = tuple(items[1:])
    if k.size < TAKE_MIN or any(isinstance(r, np.ndarray) for r in rest):
        return None
    # (through _build: the table's captured value is then known where a guard evaluates)
    rows = _build(ops_table.take, x, _t(ops_table.table_of(k, x.shape[0])))
    if rest:
        rows = rows[(slice(None), *rest)]
    return _reshape(rows, k.shape + rows.shape[1:])


def _traced_rows(x: Tracer, key) -> Tracer | None:
    """``x[idx]`` or ``x[idx, j, ...]`` (the rest basic: ints, slices) for a traced integer
    array ``idx`` — an element's nodes ``X[conn[e]]`` in a converted loop — as one read at a
    traced position per entry (:mod:`tapejit.frontend.dynamic_index`: each proved in range or
    checked when the code runs, an ``IndexError`` naming the line otherwise), stacked in the
    index's shape: numpy's result, whose shape is the index's and never depends on its values.
    ``None`` for any other key."""
    items = key if isinstance(key, tuple) else (key,)
    if not items or not isinstance(items[0], Tracer) or items[0].ndim == 0:
        return None
    idx, rest = items[0], items[1:]
    if idx.node.dtype == "bool" or any(
        isinstance(k, (Tracer, list, np.ndarray)) or k is None for k in rest
    ):
        return None
    flat = _reshape(idx, (idx.size,)) if idx.ndim != 1 else idx
    rows = [x[(flat[j], *rest)] for j in range(idx.size)]
    if not rows:
        return None
    out = _stack(rows, 0)
    return _reshape(out, (*idx.shape, *rows[0].shape)) if idx.ndim != 1 else out


def advanced_getitem(x: Tracer, key) -> Tracer:
    """``x[key]`` for keys with ``None``, integer arrays or boolean masks (numpy's advanced
    indexing: the broadcast index arrays' shape replaces the indexed axes in place when they are
    adjacent in the key, else it comes first; see :func:`_placement`). Each element of the
    broadcast index shape is one basic read; a long index array on the first axis is one
    ``take`` (:func:`_take_rows`)."""
    traced = _traced_rows(x, key)
    if traced is not None:
        return traced
    items, arrays, axis_of = _index_plan(x.shape, key)
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
    taken = _take_rows(x, items, arrays)
    if taken is not None:
        return taken
    B, gathered, perm, shape = _placement(x.shape, items, arrays, axis_of)
    basic = [(i, k) for i, k in enumerate(items) if k is not None]
    bcast = {i: np.broadcast_to(k, B) for i, k in arrays}
    rows = [
        x[tuple(int(bcast[i][b]) if i in bcast else k for i, k in basic)] for b in np.ndindex(*B)
    ]
    if rows:
        r = _stack(rows) if len(rows) > 1 else _expand_dims(rows[0], 0)
        r = _reshape(r, gathered)
    else:
        r = Tracer(ops.const(0.0, gathered, x.node.dtype), _UNSET, x.level)
    if perm != sorted(perm):
        r = _transpose(r, perm)
    return _reshape(r, shape)


def advanced_setitem(y: Tracer, key, value) -> None:
    """``y[key] = value`` for advanced keys: one basic write per selected element, in numpy's
    order (with repeated indices the last write wins, as numpy's assignment does). A traced
    boolean mask of ``y``'s shape with one value (``y[x > 1] = 0.0``) is ``where(mask, value,
    y)``: the same result for every input, with no guard."""
    mask = key[0] if isinstance(key, tuple) and len(key) == 1 else key
    if isinstance(mask, Tracer) and mask.node.dtype == "bool" and mask.shape == y.shape:
        v = _t(value)
        if v.size != 1:
            raise _fail(
                "y[mask] = values with a traced mask: the number of selected elements depends "
                "on the input; assign one value (y[mask] = 0.0), or write "
                "y = tapejit.where(mask, values, y) with values of y's shape"
            )
        _setitem(y, Ellipsis, _where(mask, _reshape(v, ()), y))
        return
    items, arrays, axis_of = _index_plan(y.shape, key)
    basic = [(i, k) for i, k in enumerate(items) if k is not None]
    if arrays:
        B, gathered, perm, target = _placement(y.shape, items, arrays, axis_of)
    else:  # only None: the value broadcasts to the result with its unit axes
        target = advanced_getitem(y, key).shape
    v = _t(value)
    vshape = write_shape(
        v.shape, target, f"shape mismatch: value array of shape {v.shape} could not be "
        f"broadcast to indexing result of shape {target}",
    )  # fmt: skip
    v = _broadcast_to(_reshape(v, vshape), target)
    if not arrays:
        keep = tuple(k for _, k in basic)
        region = y[keep].shape if keep else y.shape
        _setitem(y, keep if keep else Ellipsis, _reshape(v, region))
        return
    # back to the gathered layout: no None axes, B first
    v = _reshape(v, tuple(gathered[p] for p in perm))
    if perm != sorted(perm):
        v = _transpose(v, list(np.argsort(perm)))
    bcast = {i: np.broadcast_to(k, B) for i, k in arrays}
    for b in np.ndindex(*B):
        _setitem(y, tuple(int(bcast[i][b]) if i in bcast else k for i, k in basic), v[b])


def _take(a, indices, axis=None, out=None, mode="raise"):
    _no_out(out, "take")
    a = _t(a)
    if mode != "raise":
        raise _fail(f"numpy.take with mode={mode!r} is not supported")
    if axis is None:
        return (
            advanced_getitem(_reshape(a, (-1,)), (np.asarray(indices),))
            if np.ndim(indices)
            else _reshape(a, (-1,))[int(indices)]
        )
    axis = _axis(axis, a.ndim)
    idx = np.asarray(indices)
    if idx.ndim == 0:
        return a[(slice(None),) * axis + (int(idx),)]
    return advanced_getitem(a, (slice(None),) * axis + (idx,))


def _take_along_axis(arr, indices, axis):
    """``np.take_along_axis``: ``arr[..., indices, ...]`` at ``axis`` with an ``arange`` of each
    other axis of ``arr`` (numpy's ``_make_along_axis_idx``), so ``indices`` broadcasts against
    ``arr`` on those axes (a unit axis on either side stretches)."""
    arr = _t(arr)
    idx = np.asarray(indices)
    if idx.dtype.kind not in "iu":
        raise _fail("`indices` must be an integer array")
    if axis is None:
        if idx.ndim != 1:
            raise _fail("when axis=None, `indices` must have a single dimension.")
        return advanced_getitem(_reshape(arr, (-1,)), (idx,))
    axis = _axis(axis, arr.ndim)
    if idx.ndim != arr.ndim:
        raise _fail("`indices` and `arr` must have the same number of dimensions")
    try:
        np.broadcast_shapes(
            tuple(1 if i == axis else d for i, d in enumerate(idx.shape)),
            tuple(1 if i == axis else d for i, d in enumerate(arr.shape)),
        )
    except ValueError:
        raise _fail(
            f"take_along_axis: indices of shape {idx.shape} do not broadcast against an array "
            f"of shape {arr.shape} outside axis {axis}"
        ) from None
    ones = (1,) * arr.ndim
    key = tuple(
        idx if i == axis else np.arange(d).reshape(ones[:i] + (d,) + ones[i + 1 :])
        for i, d in enumerate(arr.shape)
    )
    return advanced_getitem(arr, key)


HOOKS["advanced_getitem"] = advanced_getitem
HOOKS["advanced_setitem"] = advanced_setitem
