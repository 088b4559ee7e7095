"""The tracer: :class:`Tracer`, a traced value (an IR node and, on demand, its concrete value on
the example input), and the builders every traced op goes through (:func:`lift`, :func:`_build`,
the elementwise, reshape and transpose builders, with the hot paths of scalarised code).

Python operators on tracers build IR nodes here; what the tracer does not define it looks up at
call time in :mod:`~tapejit.frontend.registry`: numpy's ufuncs and functions (``__array_ufunc__``,
``__array_function__`` and the ndarray methods), indexing and in-place writes
(:mod:`~tapejit.frontend.indexing`), the numpy surface's object arrays and the array API
namespace. Python control flow on a traced scalar (``bool``, ``float``, ``int``, an index)
records a guard (:func:`~tapejit.frontend.trace_state._guard`).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..core import ir, ops
from ..core.ir import Node, Type
from ..core.ops import Op
from . import views
from .array_methods import ArrayMethods
from .errors import _fail, _source_line
from .registry import FUNCTIONS, HOOKS
from .trace_state import (
    _UNSET,
    BodyTrace,
    _conversion_error,
    _current,
    _evaluate,
    _guard,
    _state,
    _Trace,
    _values,
)


class Tracer(ArrayMethods):
    """A traced value: an IR ``node`` and its concrete ``value`` on the example input.

    The value of an op's result is computed only when something asks for it — a guard (Python
    control flow on it), ``float()``, a loop's example carry — by evaluating the op's numpy
    reference on its arguments' values (:func:`_evaluate`). Most traced ops are never asked:
    a model without guards traces without running numpy at all (half of the tracing time when
    every op was evaluated eagerly)."""

    __slots__ = ("node", "_value", "level", "_view", "_views", "__weakref__")
    __array_priority__ = 1000

    def __init__(self, node: Node, value: Any = _UNSET, level: int | None = None):
        self.node = node
        self._value = value
        self.level = len(_current) if level is None else level  # nesting depth of its trace
        #: what this array is a numpy *view* of (see :mod:`tapejit.frontend.views`): ``None`` for an
        #: array of its own, a :class:`_ViewOf` record, or a :class:`_ReadOnly` marker for the
        #: function's arguments (writing into them would modify the caller's arrays)
        self._view: Any = None
        self._views: list | None = None  # weak references to the live views of this array

    @property
    def value(self) -> Any:
        v = self._value
        if v is _UNSET:
            v = self._value = _evaluate(self.node)
        return v

    # -- numpy-like attributes --------------------------------------------------------------
    shape = property(lambda self: _check_static(self) or self.node.shape)
    ndim = property(lambda self: self.node.type.ndim)
    size = property(lambda self: self.node.type.size)
    dtype = property(lambda self: np.dtype(ir.NUMPY_DTYPE[self.node.dtype]))
    T = property(lambda self: _transpose(self))

    def __repr__(self) -> str:
        return f"Tracer({self.node.type}, value={self.value!r})"

    def __format__(self, spec: str) -> str:
        # print(f"{x:.3f}") shows the example's value and records nothing (no guard)
        v = np.asarray(self.value)
        return format(v.reshape(-1)[0].item() if v.size == 1 else str(v), spec)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a traced scalar")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a traced scalar")
        return (self[i] for i in range(self.shape[0]))

    # -- operators --------------------------------------------------------------------------
    def __add__(self, o):
        return _binary(Op.ADD, self, o)

    def __radd__(self, o):
        return _binary(Op.ADD, o, self)

    def __sub__(self, o):
        return _binary(Op.SUB, self, o)

    def __rsub__(self, o):
        return _binary(Op.SUB, o, self)

    def __mul__(self, o):
        return _binary(Op.MUL, self, o)

    def __rmul__(self, o):
        return _binary(Op.MUL, o, self)

    def __truediv__(self, o):
        return _binary(Op.DIV, self, o)

    def __rtruediv__(self, o):
        return _binary(Op.DIV, o, self)

    def __pow__(self, o):
        return _power(self, o)

    def __rpow__(self, o):
        return _power(o, self)

    def __matmul__(self, o):
        if o.__class__ is Tracer and self.node.type.ndim <= 2 and o.node.type.ndim <= 2:
            return _matmul(self, o)  # the common case, without np.matmul's N-d handling
        return FUNCTIONS[np.matmul](self, o)

    def __neg__(self):
        return _unary(Op.NEG, self)

    def __pos__(self):
        return self

    def __abs__(self):
        return _unary(Op.ABS, self)

    def __lt__(self, o):
        return _binary(Op.LT, self, o)

    def __le__(self, o):
        return _binary(Op.LE, self, o)

    def __gt__(self, o):
        return _binary(Op.GT, self, o)

    def __ge__(self, o):
        return _binary(Op.GE, self, o)

    def __eq__(self, o):
        return _binary(Op.EQ, self, o)  # type: ignore[override]

    def __ne__(self, o):
        return _binary(Op.NE, self, o)  # type: ignore[override]

    def __and__(self, o):
        return _binary(Op.AND, self, o)

    def __rand__(self, o):
        return _binary(Op.AND, o, self)

    def __or__(self, o):
        return _binary(Op.OR, self, o)

    def __ror__(self, o):
        return _binary(Op.OR, o, self)

    def __invert__(self):
        return _unary(Op.NOT, self)

    def __getitem__(self, key):
        if key.__class__ is tuple:
            t = _element(self, key)
            if t is not None:
                return t
        if key.__class__ in (int, slice) or is_basic_key(key):
            return HOOKS["getitem"](self, key)
        return HOOKS["advanced_getitem"](self, key)

    def __setitem__(self, key, value):
        if is_basic_key(key):
            return HOOKS["setitem"](self, key, value)
        HOOKS["advanced_setitem"](self, key, value)

    __hash__ = None  # type: ignore[assignment]

    # -- Python control flow on traced values -------------------------------------------------
    def _control_flow(self, what: str):
        raise _fail(
            f"{what} of a traced value: Python control flow on traced values is not supported "
            "(the compiled gradient would silently follow one branch). Use tapejit.where(cond, a, b) "
            "for a branch-free select."
        )

    # Python control flow on a traced value takes the branch the example input takes and
    # records a *guard*: the condition and its outcome. The generated code re-checks every guard
    # and reports a failure before writing any output; the runtime then retraces (see api.py).
    def _scalar_node(self, what: str) -> Node:
        if self.node.type.size != 1:
            raise _fail(
                f"{what} of a traced array of shape {self.shape} is ambiguous (as in numpy); "
                "reduce it first (e.g. x.sum() > 0), or use tapejit.where for elementwise choices"
            )
        return ops.reshape(self.node, ())

    def __bool__(self):
        x = self._scalar_node("bool()")
        value = bool(np.asarray(self.value).reshape(-1)[0])
        cond = x if x.dtype == "bool" else ops.make(Op.NE, x, ops.const(0.0))
        return _guard(cond, value)

    def __float__(self):
        x = ops._float(self._scalar_node("float()"))
        self._no_derivative_lost("float()")
        value = float(np.asarray(self.value).reshape(-1)[0])
        if value != value:  # NaN: the guard is "x is NaN"
            _guard(ops.make(Op.NE, x, x), True)
        else:
            _guard(ops.make(Op.EQ, x, ops.const(value)), True)
        return value

    def _no_derivative_lost(self, what: str) -> None:
        """Raise if this value depends on a differentiated input: converting it to a Python or
        numpy number would drop its derivative (a guard keeps a branch right, not a gradient)."""
        st = _state()
        if st.differentiable(self.node):
            raise _conversion_error(what, self)

    def __int__(self):
        x = ops._float(self._scalar_node("int()"))
        raw = float(np.asarray(self.value).reshape(-1)[0])
        if not np.isfinite(raw):
            raise _fail(f"int() of a traced value that is {raw}")
        k = int(raw)  # truncation toward zero, as Python and numpy
        lo = (
            ops.make(Op.GT, x, ops.const(k - 1.0))
            if k <= 0
            else ops.make(Op.GE, x, ops.const(float(k)))
        )
        hi = (
            ops.make(Op.LT, x, ops.const(k + 1.0))
            if k >= 0
            else ops.make(Op.LE, x, ops.const(float(k)))
        )
        _guard(ops.make(Op.AND, lo, hi), True)
        return k

    def __index__(self):
        raw = np.asarray(self.value).reshape(-1)
        if self.node.dtype == "f64" and not (raw.size == 1 and float(raw[0]).is_integer()):
            raise _fail(
                "only integer scalar values can be used as an index (as in numpy); "
                "use int(x) to truncate"
            )
        x = ops._float(self._scalar_node("operator.index()"))
        k = int(raw[0])
        _guard(ops.make(Op.EQ, x, ops.const(float(k))), True)
        return k

    def __complex__(self):
        raise _conversion_error("complex()", self)

    def __array__(self, dtype=None, copy=None):
        if (dtype is None or np.dtype(dtype) == object) and not (
            self.node.shape and ".dot(" in _source_line().replace(" ", "")
        ):
            # np.array([x, y]), np.r_[x, c]: numpy builds an object array of traced scalars (the
            # elements of a traced array, see tapejit.frontend.numpy.np_assemble); numpy's object loops call
            # their operators (and methods named after ufuncs, see __getattr__), and lift()
            # rebuilds it as one traced array. Not for W.dot(x) with a numpy W: ndarray.dot
            # would multiply element by element (an object matmul); the error says W @ x.
            return HOOKS["object_elements"](self, copy)
        if dtype is not None and np.dtype(dtype).kind in "iu":
            return _integer_array(self, np.dtype(dtype))
        raise _conversion_error("a numpy array conversion", self)

    # -- methods ----------------------------------------------------------------------------
    def reshape(self, *shape):
        return _reshape(self, shape[0] if len(shape) == 1 else shape)

    def ravel(self):
        return _reshape(self, (-1,))

    def flatten(self, order="C"):
        return _copy(_reshape(self, (-1,)))  # numpy's flatten always copies

    def transpose(self, *axes):
        return _transpose(self, (axes[0] if len(axes) == 1 else axes) or None)

    def astype(self, dtype):
        return _astype(self, dtype)

    def item(self):
        if self.node.dtype == "f64":
            self._no_derivative_lost(".item()")
            return self.__float__()
        return self.__bool__()

    def tolist(self):
        self._control_flow("tolist()")

    def copy(self, order="C"):
        return _copy(self)


def lift(x: Any) -> Tracer:
    """``x`` as a tracer: tracers pass through; scalars become constants; arrays are captured."""
    if isinstance(x, Tracer):
        depth = len(_current.items)
        if x.level == depth or x.node.op == Op.CONST or not depth:
            return x
        if x.level > depth:
            raise _fail(
                "a value computed inside a loop body is used outside the loop; return it from "
                "the body (as part of the carry, or as a scan output) instead"
            )
        _check_static(x)
        return lift_outer(_state(), x)  # a value of an enclosing trace, used in a loop body
    if isinstance(x, (bool, np.bool_)):
        return Tracer(ops.const(bool(x), dtype="bool"), np.bool_(x))
    if isinstance(x, (int, float, np.integer, np.floating)):
        return Tracer(ops.const(float(x)), np.float64(x))
    if isinstance(x, np.ndarray):
        if x.dtype == object:
            return _from_objects(x)
        if x.ndim == 0:
            return lift(x[()])
        return capture_tracer(_state(), x)
    if isinstance(x, (list, tuple)):
        return lift(np.asarray(x))
    raise _fail(f"cannot use a value of type {type(x).__name__} in a traced computation")


def _from_objects(arr: np.ndarray) -> Tracer:
    """An object array (``np.array([x, y])`` of traced values and numbers) as one traced array
    (see :mod:`tapejit.frontend.numpy.np_assemble`)."""
    return HOOKS["from_objects"](arr)


def capture_tracer(st: _Trace, arr: np.ndarray) -> Tracer:
    """A tracer of captured array ``arr`` in trace ``st`` (its const input, see
    :meth:`_Trace.capture`; in a loop body, lifted in from the outermost trace)."""
    if isinstance(st, BodyTrace):
        return lift_outer(st, capture_tracer(st.parent, arr))
    node = st.capture(arr)
    return Tracer(node, st.bindings[node.attrs[0]], st.level)


def add_fixed(st: BodyTrace, t: Type, name: str, value: Any) -> Tracer:
    """A fixed input of loop body ``st`` (its index, a carry, a per-iteration slice) with the
    example ``value``, as a tracer of the body."""
    node = st.add_input(t, "inactive", f"{st.prefix}{name}")
    st.fixed += 1
    _values[id(node)] = (node, value)
    return Tracer(node, value, st.level)


def lift_outer(st: BodyTrace, x: Tracer) -> Tracer:
    """``x``, a value of a trace enclosing body ``st``, as a param input of ``st`` (one per
    value, lifted through every body in between)."""
    hit = st._lifted.get(id(x.node))
    if hit is not None and hit[0] is x.node:
        return hit[1]
    outer = x if x.level == st.level - 1 else lift_outer(st.parent, x)  # type: ignore[arg-type]
    node = st.add_input(x.node.type, "inactive", f"{st.prefix}p{len(st.params)}")
    t = Tracer(node, x.value, st.level)
    _values[id(node)] = (node, x.value)
    st.params.append(outer)
    st.param_inputs.append(node)
    st._lifted[id(x.node)] = (x.node, t)
    return t


def _wrap(node: Node) -> Tracer:
    """Tracer for a node built by an ops builder (its value is computed on demand)."""
    return Tracer(node)


def _build(fn: Callable[..., Node], *xs: Any, **kw) -> Tracer:
    # the per-op path of tracing: thread-local tables read once, no wrapper calls
    items, table = _current.items, _values.table
    depth = len(items)
    ts = [x if x.__class__ is Tracer and x.level == depth else lift(x) for x in xs]
    if items and items[0].dynamic:
        for t in ts:
            _check_static(t)
    for t in ts:
        if t._value is not _UNSET:  # a leaf or an evaluated value: evaluation may need it
            table.setdefault(id(t.node), (t.node, t._value))
    try:
        node = fn(*[t.node for t in ts], **kw)
    except (ValueError, TypeError, IndexError) as e:
        raise _fail(str(e)) from None
    return Tracer(node, _UNSET, depth)


def _unary(op, x):
    return _build(lambda a: ops.elementwise(op, a), x)


#: The arithmetic of scalarised code (``dx = pos[j, 0] - pos[i, 0]``, ``s * s - s``) and of
#: loops over small vectors (``h = np.sin(h) * 0.9 + x``), which :func:`_binary` builds without
#: the general path (numpy broadcasting, casts, the type rule) when the operands are float64
#: tracers of one shape and Python floats: the node the general path builds, 2-3x faster
#: (tracing a Python element loop, one trip through its body per element, is most of its
#: compile time).
_SCALAR_ARITH = {op: str(op) for op in (Op.ADD, Op.SUB, Op.MUL, Op.DIV)}  # -> the node's name
_SCALAR_OF = {d: Type((), d) for d in ir.DTYPES}
_INDEX = str(Op.INDEX)


def _binary(op, x, y):
    if op in _SCALAR_ARITH:
        t = _fast_arith(op, x, y)
        if t is not None:
            return t
    return _build(lambda a, b: ops.elementwise(op, a, b), x, y)


def _fast_arith(op, x, y) -> Tracer | None:
    """``op(x, y)`` for float64 tracers of the current trace and one shape, or one such tracer
    and a Python float; ``None`` for anything else (and for a product with the constant 1,
    which the general path folds)."""
    items = _current.items
    depth = len(items)
    if items and items[0].dynamic:
        return None
    xs = []
    t = None
    for v in (x, y):
        if v.__class__ is Tracer:
            n = v.node
            tp = n.type
            if v.level != depth or tp.dtype != "f64" or n.op == Op.CONST:
                return None
            if t is None:
                t = tp
            elif tp is not t and tp.shape != t.shape:
                return None
            if v._value is not _UNSET:
                _values.table.setdefault(id(n), (n, v._value))
        elif v.__class__ is float:
            if op == Op.MUL and v == 1.0:
                return None
            n = ops.const(v)
            _values.table.setdefault(id(n), (n, np.float64(v)))
        else:
            return None
        xs.append(n)
    if t is None:
        return None
    node = Node(_SCALAR_ARITH[op], xs, (), t)
    ir.mark_verified(node)
    return Tracer(node, _UNSET, depth)


def _power(x, y):
    return _build(ops.power, x, y)


def _matmul(x, y):
    return _build(ops.matmul, x, y)


def _where(c, a, b):
    return _build(ops.where, c, a, b)


def _reshape(x, shape):
    x = lift(x)
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)
    try:
        shape = np.empty(x.shape, dtype=np.bool_).reshape(shape).shape
    except ValueError as e:
        raise _fail(str(e)) from None
    return _as_view(x, _build(lambda a: ops.reshape(a, shape), x), (Op.RESHAPE, shape))


def _transpose(x, axes=None):
    x = lift(x)
    perm = (
        tuple(reversed(range(x.ndim))) if axes is None else tuple(int(a) % x.ndim for a in axes)
    )
    return _as_view(x, _build(lambda a: ops.transpose(a, perm), x), (Op.TRANSPOSE, perm))


def _integer_array(x: Tracer, dt: np.dtype) -> np.ndarray:
    """``x`` cast to integers (``np.int64(x)``, ``x.astype(int)``, ``np.array(x, dtype=int)``):
    the example's integers, a concrete array, with a guard that ``trunc(x)`` still equals them
    — so another input with other integer parts recompiles, as for ``int(x)``. The cast is
    piecewise constant: its derivative is 0 wherever it exists, and none is dropped."""
    raw = np.asarray(x.value, dtype=np.float64)
    if not np.all(np.isfinite(raw)):
        raise _fail(f"a cast to {dt} of a traced value that is not finite")
    k = np.trunc(raw)
    lo, hi = np.iinfo(dt).min, np.iinfo(dt).max
    if k.size and (k.min() < lo or k.max() > hi):
        raise _fail(f"a cast to {dt} of a traced value outside its range")
    same = _binary(Op.EQ, _build(lambda a: ops.elementwise(Op.TRUNC, ops._float(a)), x), k)
    if same.node.shape != ():
        same = FUNCTIONS[np.all](same)
    _guard(same.node, True)
    return np.asarray(k.astype(dt))  # an ndarray also for a 0-d value (__array__ must give one)


def _astype(x, dtype):
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        return _integer_array(lift(x), dt)
    if dt == np.float64:
        return _build(lambda a: ops._float(a), x)
    if dt == np.bool_:
        return _binary(Op.NE, x, 0.0)
    raise _fail(f"astype({dt}) is not supported; traced values are float64 or bool")


def is_basic_key(key) -> bool:
    """Whether ``key`` is numpy basic indexing (ints, slices, ``...``) without ``None``."""
    items = key if isinstance(key, tuple) else (key,)
    return not any(
        k is None or isinstance(k, (list, np.ndarray)) or (isinstance(k, Tracer) and k.ndim)
        for k in items
    )


def _element(x: Tracer, key: tuple) -> Tracer | None:
    """``x[i, j, ...]`` with a non-negative Python int in bounds for every axis (one element of
    an array: a scalar, no view) as the general path (:func:`tapejit.frontend.indexing._getitem`) builds it, without its
    key normalisation; ``None`` for any other key. The scalarised code's other hot path."""
    shape = x.node.type.shape
    if len(key) != len(shape):
        return None
    for k, d in zip(key, shape):
        if k.__class__ is not int or not 0 <= k < d:
            return None
    items = _current.items
    if x.level != len(items) or (items and items[0].dynamic):
        return None
    if x._value is not _UNSET:
        _values.table.setdefault(id(x.node), (x.node, x._value))
    node = Node(_INDEX, (x.node,), key, _SCALAR_OF[x.node.type.dtype])  # = ops.index's node
    ir.mark_verified(node)
    return Tracer(node, _UNSET, x.level)


def _as_view(base: Any, result: Tracer, step: tuple) -> Tracer:
    """``result``, made from ``base`` by ``step``, as the numpy view of it that numpy's result
    would be (so writes to either are seen through the other; see :mod:`tapejit.frontend.views`)."""
    if isinstance(base, Tracer) and base.level == result.level and result.node.shape:
        if result is base:  # an identity step (x[...], x.reshape(x.shape)): a new view object
            result = Tracer(base.node, base._value, base.level)
        views.record_view(base, result, step)
    return result


def _copy(a) -> Tracer:
    """A new array with ``a``'s values that shares nothing with it (writes to it are its own)."""
    t = lift(a)
    return Tracer(t.node, t._value, t.level)


def dynamic_length(x: Any) -> "Tracer | None":
    """The traced length of ``x`` if it is an argument with a dynamic leading axis, else None."""
    if not isinstance(x, Tracer) or not _current:
        return None
    hit = _current[0].dynamic.get(id(x.node))
    return None if hit is None or hit[0] is not x.node else hit[1]


def _check_static(t: "Tracer") -> None:
    items = _current.items
    if items and items[0].dynamic and dynamic_length(t) is not None:
        raise _fail(
            "an argument with a dynamic length (dynamic_argnums) can only be passed to "
            "tapejit.scan as xs; its length is not known when compiling"
        )

