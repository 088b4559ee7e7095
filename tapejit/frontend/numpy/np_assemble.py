"""Arrays assembled by numpy itself out of traced values: ``np.array([x, y])``,
``np.array([[2 * x, 1.0], ...])``, ``np.r_[x, c, 1:10]``, ``np.c_[x, c]``.

numpy builds these as *object arrays*: :meth:`Tracer.__array__ <tapejit.frontend.tracing.Tracer.__array__>`
hands it, for a traced array ``x``, an object array of :class:`Element` tracers — one scalar per
element of ``x``, each tagged with a snapshot of ``x`` and its flat (C-order) index — and for a
traced scalar the tracer itself. numpy's object loops (``np.array([x, y]) * 2``) call the
elements' operators, as for any object array; a traced op on the object array lifts it with
:func:`from_objects`, which rebuilds it as one traced array from *runs*: a maximal run of
consecutive elements of one traced array becomes one slice of it, a run of numbers one constant
array, and a run of other traced scalars one ``np.stack``. The graph therefore grows with the
number of runs, not of elements (``np.array([x, x])`` is two reshapes and a concatenation
whatever the size of ``x``). An axis order that makes fewer runs (``np.c_[x, c]`` interleaves
its columns) is tried too, and the result transposed back.

A traced array of more than :data:`MAX_ELEMENTS` elements is not expanded: the conversion raises
the tracer's conversion error, which names ``np.stack`` / ``np.concatenate``.
"""

from __future__ import annotations

import itertools
import re
import weakref
from typing import Any

import numpy as np

from ...core import ops
from .. import views
from ..registry import HOOKS
from ...core.ops import Op
from ..errors import _fail, _source_line, _user_site
from ..trace_state import _conversion_error
from .np_shape import _concatenate, _stack
from ..tracer import Tracer, _build, _reshape, _transpose, lift

#: The largest traced array :meth:`Tracer.__array__` expands into element tracers.
MAX_ELEMENTS = 10_000


class Element(Tracer):
    """Element ``flat`` (C order) of the traced array ``source``, as an object array holds it."""

    __slots__ = ("flat", "source")

    def __init__(self, source: Tracer, flat: int, index: tuple[int, ...]):
        super().__init__(ops.index(source.node, index), level=source.level)
        self.source, self.flat = source, flat


_ASARRAY = re.compile(r"\bas(any)?array\s*\(")
#: Arrays handed to ``np.asarray`` (which, in numpy, returns the array itself: later writes to
#: it show through): id(root) -> (weak reference to the root, the user's line). The object array
#: tapejit returns holds the values at that time, so a later write into the root is refused.
_SHARED: dict[int, tuple[weakref.ref, str]] = {}


def shared_with_numpy(t: Tracer) -> str | None:
    """The user's line of an ``np.asarray`` that ``t`` (a view root) was handed to, or None."""
    hit = _SHARED.get(id(t))
    return hit[1] if hit is not None and hit[0]() is t else None


def object_elements(t: Tracer, copy: bool | None = True) -> np.ndarray:
    """``t`` as numpy's object array of its elements (:class:`Element` tracers; a traced scalar
    is held as itself). Raises the conversion error above :data:`MAX_ELEMENTS` elements. With
    ``copy`` not True (``np.asarray``, which aliases in numpy), later writes into ``t`` raise."""
    shape = t.node.shape
    holder = np.empty(shape, dtype=object)
    if shape == ():
        holder[()] = t
        return holder
    if t.node.type.size > MAX_ELEMENTS:
        raise _conversion_error(
            f"a numpy array conversion (of more than {MAX_ELEMENTS} elements)", t
        )
    # a snapshot: np.array copies, and a later in-place write to t rebinds t's node
    source = Tracer(t.node, t._value, t.level)
    if copy is not True and _ASARRAY.search(_source_line()):
        # np.asarray(t) (numpy passes copy=None for it, and for np.array([t, ...])'s elements,
        # which are copied: the user's line tells them apart)
        root = views.root_of(t)
        if len(_SHARED) >= 64:  # drop the entries of arrays that no longer exist
            for key in [k for k, (ref, _) in _SHARED.items() if ref() is None]:
                del _SHARED[key]
        _SHARED[id(root)] = (weakref.ref(root), _user_site())
    cells = itertools.product(*(range(d) for d in shape))
    elements = (Element(source, k, index) for k, index in enumerate(cells))
    return np.fromiter(elements, dtype=object, count=t.node.type.size).reshape(shape)


_TRACED, _NUMBER = "traced", "number"


def _kind(v: Any) -> Any:
    """What a run is made of: an element's source node, _TRACED (another traced scalar) or
    _NUMBER (a number or a constant)."""
    if isinstance(v, Element):
        return v.source.node
    if isinstance(v, Tracer) and v.node.op != Op.CONST:
        if v.node.shape != ():
            raise _fail("an object array of traced arrays is not supported; use np.stack")
        return _TRACED
    return _NUMBER


def _runs(flat: np.ndarray) -> list[tuple[int, int]]:
    """``flat`` cut into maximal runs ``[i, j)`` that one slice, constant or stack rebuilds."""
    runs, i, n = [], 0, len(flat)
    while i < n:
        kind, j = _kind(flat[i]), i + 1
        if isinstance(kind, str):
            while j < n and _kind(flat[j]) is kind:
                j += 1
        else:
            start = flat[i].flat - i
            while j < n and isinstance(flat[j], Element) and flat[j].source.node is kind:
                if flat[j].flat != start + j:
                    break
                j += 1
        runs.append((i, j))
        i = j
    return runs


def _number(v: Any) -> Any:
    return v.node.attrs[0] if isinstance(v, Tracer) else v


def _piece(flat: np.ndarray, i: int, j: int) -> Tracer:
    """``flat[i:j]``, one run, as a 1-d traced array."""
    kind = _kind(flat[i])
    if kind is _NUMBER:
        return lift(np.array([_number(v) for v in flat[i:j]]))
    if kind is _TRACED:
        return _stack(list(flat[i:j]))
    source, start = flat[i].source, flat[i].flat
    n = source.node.type.size
    if (start, j - i) == (0, n):
        return _build(lambda a: ops.reshape(a, (n,)), source)
    return _build(lambda a: ops.index(ops.reshape(a, (n,)), ((start, start + j - i, 1),)), source)


def from_objects(arr: np.ndarray) -> Tracer:
    """An object array of traced values and numbers (see the module docstring) as one traced
    array; raises :class:`~tapejit.frontend.tracing.TracingError` if it holds a traced array."""
    if arr.size == 0:
        return lift(np.zeros(arr.shape))
    # the axis order with the fewest runs: C order, or one axis moved to the front
    orders = [tuple(range(arr.ndim))]
    orders += [(k, *(a for a in range(arr.ndim) if a != k)) for k in range(1, arr.ndim)]
    best = None
    for perm in orders:
        flat = np.transpose(arr, perm).reshape(-1)
        runs = _runs(flat)
        if best is None or len(runs) < len(best[2]):
            best = (perm, flat, runs)
        if len(runs) == 1:
            break
    perm, flat, runs = best
    pieces = [_piece(flat, i, j) for i, j in runs]
    if len(pieces) == 1:
        out = pieces[0]
    else:
        out = _concatenate(pieces)
    out = _reshape(out, tuple(arr.shape[a] for a in perm))
    if perm != orders[0]:
        out = _transpose(out, tuple(np.argsort(perm)))
    return out


# the tracer's object-array hooks (Tracer.__array__, lift of an object array, writes after
# np.asarray)
HOOKS["object_elements"] = object_elements
HOOKS["from_objects"] = from_objects
HOOKS["shared_with_numpy"] = shared_with_numpy
