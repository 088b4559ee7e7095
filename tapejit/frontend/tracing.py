"""Tracing: run ``f`` on tracers and record the ops it performs as a :class:`~tapejit.core.ir.Graph`.

A :class:`Tracer` carries an IR node and the *concrete value* that node takes on the example
input (computed with the op's numpy reference as tracing goes). Python operators, numpy ufuncs
(``__array_ufunc__``) and numpy functions (``__array_function__``) on tracers build IR nodes, so
ordinary numpy code — including Python loops over elements — traces unchanged.

Captured numpy arrays (closed over by ``f`` or created inside it) become *const* inputs of the
graph: they are **snapshotted** (copied) when ``f`` is traced, i.e. at compile time, and passed to
native code by pointer. Mutating such an array after compiling does not change the compiled
gradient; compile again to pick up new values. Scalars (Python and numpy numbers, 0-d and size-1
arrays) become IR constants.

Python control flow on a traced scalar (``if x[0] > 0:``, ``float(x[0])``, ``int(x[0])``) follows
the example input and records a *guard* (condition, outcome, the user's file and line) that the
generated code re-checks, so a branch is never frozen silently (see :mod:`tapejit.api`). What
cannot be guarded — the truth value of a whole array, ``complex()``, ``tolist()``, a traced index,
an unsupported numpy function or ndarray method — raises :class:`TracingError` naming the user's
file and line.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
from typing import Any, Callable, Sequence

import numpy as np

from ..core import ir, ops
from . import views
from ..core.ir import Graph, Node, Type
from ..core.ops import Op

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


class TracingError(Exception):
    """``f`` did something that cannot be traced; the message names the user's file and line."""


class _UnsupportedAttribute(TracingError, AttributeError):
    """An ndarray method or attribute tapejit does not trace (``x.cumsum()``, ``x.sort()``).
    Also an ``AttributeError``, so ``hasattr``/``getattr(x, name, default)`` behave as before."""


#: Libraries whose frames are not the user's: a message names the user's line that called them.
_LIBRARIES = tuple(os.sep + name + os.sep for name in ("numpy", "scipy"))


def _is_library(path: str) -> bool:
    """Whether ``path`` (absolute) is tapejit's, numpy's or scipy's source."""
    return path.startswith(_PKG_DIR + os.sep) or any(lib in path for lib in _LIBRARIES)


def _frame_site(code, line: int) -> str:
    return f"{code.co_filename}:{line} in {code.co_name}()"


def _user_site() -> str:
    """``file:line in function`` of the innermost frame outside tapejit, numpy and scipy (the
    user's code); when scipy's code was running, its innermost frame follows in parentheses."""
    frame = sys._getframe(1)
    library = None
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not _is_library(path) and not frame.f_code.co_filename.startswith("<frozen"):
            site = _frame_site(frame.f_code, frame.f_lineno)
            return site + (f" (in {library})" if library else "")
        if library is None and not path.startswith(_PKG_DIR + os.sep) and "scipy" in path:
            library = f"scipy: {os.path.basename(path)}:{frame.f_lineno} in {frame.f_code.co_name}()"
        frame = frame.f_back
    return "<unknown location>"


def _site_of(tb) -> str:
    """``file:line in function`` of the innermost user frame of traceback ``tb``."""
    site = "<unknown location>"
    while tb is not None:
        code = tb.tb_frame.f_code
        if not _is_library(os.path.abspath(code.co_filename)):
            site = _frame_site(code, tb.tb_lineno)
        tb = tb.tb_next
    return site


def _fail(msg: str) -> TracingError:
    return TracingError(f"{_user_site()}: {msg}")


class _IndexOutOfRange(TracingError, IndexError):
    """An index numpy refuses with ``IndexError`` (out of bounds, too many indices, a mask of the
    wrong size). Also an ``IndexError``, so code that catches numpy's error behaves the same."""


def _fail_index(msg: str) -> _IndexOutOfRange:
    return _IndexOutOfRange(f"{_user_site()}: {msg}")


def _source_line() -> str:
    """The text of the user's line being traced (for hints), or ''."""
    import linecache

    frame = sys._getframe(1)
    while frame is not None:
        if not _is_library(os.path.abspath(frame.f_code.co_filename)):
            return linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
        frame = frame.f_back
    return ""


def _scipy_caller() -> str:
    """``scipy.<module>.<function>`` the user's code called, if scipy's code is running, else
    ''."""
    frame = sys._getframe(1)
    called = ""
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not _is_library(path):
            return called
        name = frame.f_code.co_name
        if os.sep + "scipy" + os.sep in path and not name.startswith(("_", "<", "wrap", "inner")):
            module = frame.f_globals.get("__name__", "scipy")
            public = ".".join(p for p in module.split(".") if not p.startswith("_"))
            called = f"{public}.{frame.f_code.co_name}"
        frame = frame.f_back
    return ""


def _conversion_error(what: str, t: "Tracer") -> TracingError:
    """The error for converting traced value ``t`` to a Python/numpy number or array, with what
    to write instead, chosen from the user's line."""
    line = _source_line()
    kind = f"a traced value of shape {t.node.shape}"
    if _current and _state().differentiable(t.node):
        kind += " that depends on a differentiated argument"
    import re

    m = re.search(r"\bmath\.(\w+)\s*\(", line)
    scipy_fn = _scipy_caller()
    if scipy_fn:
        fix = (
            f"{scipy_fn} converts its input to plain numbers inside scipy's code, so it cannot "
            "run on traced values; write it with numpy (np.linalg.cholesky, np.linalg.solve, "
            "np.linalg.det, ... trace) or give it a rule with tapejit.custom_jvp"
        )
    elif m:
        fix = (
            f"math.{m.group(1)}() converts its argument to a Python float, which drops the "
            f"derivative; use the numpy function instead (np.{m.group(1)})"
        )
    elif re.search(r"\.dot\s*\(", line):
        fix = (
            "numpy.ndarray.dot (W.dot(x) with a numpy W) converts a traced argument to an "
            "array; write W @ x or np.dot(W, x) instead"
        )
    elif re.search(r"\bnp\.(as|)array\s*\(|\bnumpy\.(as|)array\s*\(", line):
        fix = (
            "np.array()/np.asarray() of traced values make a plain numpy array, which cannot "
            "hold them; use x.copy() or np.copy(x) for a copy, np.stack([a, b]) or "
            "np.concatenate to build an array from traced values, or y = np.zeros_like(x, "
            "shape=(n,)) followed by y[i] = value"
        )
    elif re.search(r"\]\s*(\+|-|\*|/)?=(?!=)", line) and what != "float()":
        fix = (
            "storing a traced value into a numpy array (created with np.zeros, np.empty, ...) "
            "converts it to a plain number; create the array from a traced value instead, "
            "e.g. y = np.zeros_like(x) or np.zeros_like(x, shape=(n,)), and then y[i] = value "
            "updates it in place with the derivative kept"
        )
    elif what == "float()" and re.search(r"\]\s*(\+|-|\*|/)?=(?!=)", line):
        fix = (
            "storing a traced value into a numpy array (created with np.zeros, np.empty, ...) "
            "converts it to a Python float, dropping its derivative; create the array from a "
            "traced value instead, e.g. y = np.zeros_like(x) or np.zeros_like(x, shape=(n,)), "
            "and then y[i] = value updates it in place with the derivative kept"
        )
    elif "out= a numpy array" in what:
        fix = (
            "not supported: a numpy array cannot hold traced values (a += t with a numpy a stores into a); "
            "write a = a + t, or create a from a traced value (a = np.zeros_like(x)), whose "
            "in-place updates keep the derivative"
        )
    elif what == "complex()":
        fix = "complex numbers are not supported"
    else:
        fix = (
            f"{what} turns it into a plain number and drops its derivative; keep it as a "
            "traced value (x[0] is already a scalar; np.float64(x), float(x), x.item() and "
            "math.* functions all convert). Python control flow on it (if x > 0:) is fine, and "
            "tapejit.where(cond, a, b) selects without a branch"
        )
    err = _fail(f"{what} of {kind}: {fix}")
    if _current and _current[0].conversion_error is None:
        # numpy replaces an error raised while it stores an element (a[0] = x) with its own
        # "setting an array element with a sequence": trace() raises this one instead
        _current[0].conversion_error = err
    return err


#: How a max_steps check's site begins (see :func:`max_steps_check`); the runtime reads it.
MAX_STEPS = "tapejit.while_loop reached max_steps"


def max_steps_check(exhausted: Node, max_steps: int) -> None:
    """Record that native code must report when a ``while_loop`` stopped at ``max_steps`` with
    its condition still true (``exhausted``): a guard whose expected outcome is False, told
    apart by its site (:data:`MAX_STEPS`), which the runtime turns into a warning or an error
    and then answers with a variant traced without the check. Only for loops at the top level
    of ``f`` (a loop body runs per iteration and cannot guard), and not when the trace was
    started with ``check_max_steps=False`` (that variant)."""
    st = _state()
    if isinstance(st, BodyTrace) or not st.check_max_steps:
        return
    st.guards.append((exhausted, False, f"{MAX_STEPS} ({max_steps}) at {_user_site()}"))


def is_max_steps_site(where: str) -> bool:
    return where.startswith(MAX_STEPS)


def _guard(cond: Node, expected: bool) -> bool:
    """Record that this trace relies on ``cond`` being ``expected`` (see Tracer.__bool__) and
    return the outcome to follow: ``expected``, unless the trace was started with this guard's
    outcome *forced* (``trace(..., forced=)``): native code evaluated the condition on this very
    input and decided the other way (a comparison sitting at a threshold, where numpy's and the
    native code's summation orders round differently), so the trace follows the native decision."""
    st = _state()
    if isinstance(st, BodyTrace) and not st.allows_guards:
        raise _fail(
            "Python control flow on a traced value inside a loop body (bool(), int(), float(), "
            "an index): the body runs once per iteration with different values, so it cannot "
            "follow one branch. Use tapejit.where(cond, a, b), or tapejit.while_loop for a "
            "data-dependent trip count"
        )
    seen, total = st.counted  # guards numbered so far (an entry may be several: a vector)
    for c, _, _ in st.guards[seen:]:
        total += ir.guard_size(c)
    st.counted = (len(st.guards), total)
    expected = st.forced.get(total + 1, bool(expected))
    if total + 1 in st.unchecked:  # kept in place (the numbering), but never fails
        cond = ops.const(expected, cond.shape, "bool")
    st.guards.append((cond, expected, _user_site()))
    return expected


class _Trace:
    """State of one tracing run: the captured constants and the concrete values of nodes."""

    def __init__(self):
        self.consts: dict[int, tuple[np.ndarray, Node]] = {}
        #: small captured arrays by value (:data:`SHARED_CONST_SIZE`): one input for them all
        self.small_consts: dict[tuple, Node] = {}
        self.inputs: list[Node] = []
        self.kinds: list[str] = []
        self.bindings: dict[int, np.ndarray] = {}
        self.names: set[str] = set()
        self.guards: list[tuple[Node, bool, str]] = []
        #: id(input node) -> (node, tracer of its length) for arguments with a dynamic length
        self.dynamic: dict[int, tuple[Node, Tracer]] = {}
        #: guard number (1-based, as the native status) -> the outcome to follow (see _guard)
        self.forced: dict[int, bool] = {}
        #: guard numbers whose outcome is followed but not checked (see Dispatcher._compile_for)
        self.unchecked: set[int] = set()
        self.counted = (0, 0)  # (entries of guards, the guard numbers they take)
        #: the first conversion of a traced value that raised (see _conversion_error)
        self.conversion_error: TracingError | None = None
        #: whether while_loops record a max_steps check (see max_steps_check)
        self.check_max_steps = True
        #: [loops, iterations] of Python loops captured while tracing (see loop_capture)
        self.captured = [0, 0]
        #: (out-of-range flag, site) of traced indices checked at run time (dynamic_index)
        self.index_checks: list[tuple[Node, str]] = []

    def add_input(self, t: Type, kind: str, name: str, binding=None) -> Node:
        base, k = name, 1
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        node = ops.input_node(len(self.inputs), name, t)
        if binding is not None:
            self.bindings[len(self.inputs)] = binding
        self.inputs.append(node)
        self.kinds.append(kind)
        return node

    level = 1  # tracers made while this trace is innermost carry this level

    def capture_tracer(self, arr: np.ndarray) -> "Tracer":
        """A tracer of captured array ``arr`` (see :meth:`capture`)."""
        node = self.capture(arr)
        return Tracer(node, self.bindings[node.attrs[0]], self.level)

    def differentiable(self, n: Node) -> bool:
        """Whether ``n`` depends on a differentiated input of this trace (memoised)."""
        return ir.depends(n, self._decide_active, self.__dict__.setdefault("_memo_active", {}))

    def _decide_active(self, m: Node) -> bool | None:
        if m.op == Op.INPUT:
            return self.is_active_input(m)
        if m.op in ops.NONDIFFERENTIABLE or m.op == Op.CONST:
            return False
        return None

    def is_active_input(self, n: Node) -> bool:
        k = n.attrs[0]
        return k < len(self.inputs) and self.inputs[k] is n and self.kinds[k] == "active"

    def capture(self, arr: np.ndarray) -> Node:
        """The const input for captured array ``arr``: one per array object and value (a
        snapshot; an array changed in place since it was captured is captured again)."""
        hit = self.consts.get(id(arr))
        if hit is not None and hit[0] is arr and _unchanged(self.bindings[hit[1].attrs[0]], arr):
            return hit[1]
        snap = _as_const_array(arr)
        dtype = "bool" if snap.dtype == np.bool_ else "f64"
        key = (dtype, snap.shape, snap.tobytes()) if snap.size <= SHARED_CONST_SIZE else None
        node = self.small_consts.get(key) if key is not None else None
        if node is None:
            node = self.add_input(Type(snap.shape, dtype), "const", f"c{len(self.consts)}", snap)
            if key is not None:
                self.small_consts[key] = node
        self.consts[id(arr)] = (arr, node)  # keeps arr alive so its id is not reused
        return node


#: Captured arrays of at most this many elements with the same values (bit for bit) are one
#: const input: an array a loop body makes anew in every iteration (``np.array([1.0, 2.0,
#: 3.0])``) is then the same in every iteration, as a re-rolled loop needs it to be.
SHARED_CONST_SIZE = 64


def _unchanged(snap: np.ndarray, arr: np.ndarray) -> bool:
    """Whether ``arr`` still holds the values snapshotted in ``snap`` (bit for bit: the sign of
    a zero and the payload of a NaN count)."""
    if snap.shape != arr.shape:
        return False
    if snap.dtype == np.float64:  # as captured (float32, >f8 and ints convert exactly)
        now = np.asarray(arr, dtype=np.float64)
        return bool(np.array_equal(snap.view(np.uint64), now.view(np.uint64)))
    return bool(np.array_equal(snap, arr))


def _as_const_array(arr: np.ndarray) -> np.ndarray:
    if arr.dtype == np.bool_:
        return np.array(arr, dtype=np.bool_, order="C", copy=True)
    if arr.dtype.kind in "iu":
        out = np.array(arr, dtype=np.float64, order="C", copy=True)
        if np.any(np.abs(out) > 2**53):
            raise _fail("captured integer array has values too large for float64")
        return out
    if arr.dtype.kind == "f":
        return np.array(arr, dtype=np.float64, order="C", copy=True)
    raise _fail(f"captured array of dtype {arr.dtype} is not supported (float64, int or bool)")


class BodyTrace(_Trace):
    """State of tracing a loop body (see :mod:`tapejit.frontend.control`): a sub-graph whose inputs are
    the loop's fixed inputs (index, carries, per-iteration slices) followed by *params* — values
    of the enclosing trace that the body uses (closed-over tracers, captured arrays), lifted in
    as inputs the first time the body touches them."""

    #: whether Python control flow on traced values may record guards (a loop body: no)
    allows_guards = False

    def __init__(self, parent: _Trace, prefix: str):
        super().__init__()
        self.parent = parent
        self.prefix = prefix
        self.level = parent.level + 1
        self.params: list[Tracer] = []  # the enclosing trace's values, one per param input
        self.param_inputs: list[Node] = []
        self._lifted: dict[int, tuple[Node, Tracer]] = {}
        self.fixed = 0  # inputs before the params
        #: (first, last) value of a loop body's counter (input 0); None for a while_loop's cond
        self.counter_range: tuple[int, int] | None = None

    def add_fixed(self, t: Type, name: str, value: Any) -> "Tracer":
        node = self.add_input(t, "inactive", f"{self.prefix}{name}")
        self.fixed += 1
        _values[id(node)] = (node, value)
        return Tracer(node, value, self.level)

    def lift_outer(self, x: "Tracer") -> "Tracer":
        """``x``, a value of an enclosing trace, as a param input of this body."""
        hit = self._lifted.get(id(x.node))
        if hit is not None and hit[0] is x.node:
            return hit[1]
        outer = x if x.level == self.level - 1 else self.parent.lift_outer(x)  # type: ignore[attr-defined]
        node = self.add_input(x.node.type, "inactive", f"{self.prefix}p{len(self.params)}")
        t = Tracer(node, x.value, self.level)
        _values[id(node)] = (node, x.value)
        self.params.append(outer)
        self.param_inputs.append(node)
        self._lifted[id(x.node)] = (x.node, t)
        return t

    def capture_tracer(self, arr: np.ndarray) -> "Tracer":
        return self.lift_outer(self.parent.capture_tracer(arr))

    def is_active_input(self, n: Node) -> bool:
        k = n.attrs[0]
        return k < len(self.inputs) and self.inputs[k] is n and k > 0  # all but the index


class _ThreadStack(threading.local):
    """The stack of traces in progress, one per thread (compiles in two threads never see each
    other's trace)."""

    def __init__(self):
        self.items: list[_Trace] = []

    def append(self, st: "_Trace") -> None:
        self.items.append(st)

    def pop(self) -> "_Trace":
        return self.items.pop()

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, k):
        return self.items[k]

    def __iter__(self):
        return iter(self.items)


class _ThreadValues(threading.local):
    """Concrete values of traced nodes by ``id`` (see :func:`_wrap`), one table per thread."""

    def __init__(self):
        self.table: dict[int, tuple[Node, Any]] = {}

    def __getitem__(self, k):
        return self.table[k]

    def __setitem__(self, k, v):
        self.table[k] = v

    def __contains__(self, k) -> bool:
        return k in self.table

    def get(self, k, default=None):
        return self.table.get(k, default)

    def setdefault(self, k, v):
        return self.table.setdefault(k, v)

    def keys(self):
        return self.table.keys()

    def clear(self) -> None:
        self.table.clear()

    def update(self, other) -> None:
        self.table.update(other)


_current = _ThreadStack()


#: A tracer's value not computed yet (see :attr:`Tracer.value`).
_UNSET: Any = object()


class Tracer:
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

    def __mod__(self, o):
        return numpy_api.UFUNCS["remainder"](self, o)

    def __rmod__(self, o):
        return numpy_api.UFUNCS["remainder"](o, self)

    def __round__(self, ndigits=None):
        if ndigits is None:  # round(x) is an int: a guarded conversion, as int()
            return int(numpy_api.FUNCTIONS[np.round](self).__index__())
        return numpy_api.FUNCTIONS[np.round](self, ndigits)

    def __floor__(self):
        return int(numpy_api.UFUNCS["floor"](self).__index__())

    def __ceil__(self):
        return int(numpy_api.UFUNCS["ceil"](self).__index__())

    def __matmul__(self, o):
        if o.__class__ is Tracer and self.node.type.ndim <= 2 and o.node.type.ndim <= 2:
            return _matmul(self, o)  # the common case, without numpy_api's N-d handling
        return numpy_api.FUNCTIONS[np.matmul](self, o)

    def __rmatmul__(self, o):
        return numpy_api.FUNCTIONS[np.matmul](o, self)

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
        if key.__class__ in (int, slice) or numpy_api.is_basic_key(key):
            return _getitem(self, key)
        return numpy_api.advanced_getitem(self, key)

    def __setitem__(self, key, value):
        if numpy_api.is_basic_key(key):
            return _setitem(self, key, value)
        numpy_api.advanced_setitem(self, key, value)

    # numpy's in-place operators modify the array object (every alias and view sees it); a
    # traced scalar is a numpy scalar, immutable, so for it Python falls back to ``x = x + y``
    def __iadd__(self, o):
        return _inplace(self, Op.ADD, o)

    def __isub__(self, o):
        return _inplace(self, Op.SUB, o)

    def __imul__(self, o):
        return _inplace(self, Op.MUL, o)

    def __itruediv__(self, o):
        return _inplace(self, Op.DIV, o)

    def __ipow__(self, o):
        return _inplace(self, Op.POW, o)

    __hash__ = None  # type: ignore[assignment]

    def __getattr__(self, name):
        # Only reached when normal lookup fails: name ndarray methods tapejit does not trace
        # instead of a bare "'Tracer' object has no attribute" with no file and line.
        fn = None if name.startswith("_") else numpy_api.UFUNCS.get(name)
        if fn is not None and not hasattr(np.ndarray, name):
            # numpy's ufunc loops over object arrays call a method of the ufunc's name
            return functools.partial(fn, self)
        if not name.startswith("_") and hasattr(np.ndarray, name):
            raise _UnsupportedAttribute(
                f"{_user_site()}: numpy.ndarray.{name} is not supported by tapejit"
            )
        raise AttributeError(f"'Tracer' object has no attribute {name!r}")

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

    # -- the array API standard (scipy's array-API mode, see tapejit.frontend.numpy.array_api) -------------
    device = property(lambda self: "cpu")

    def __array_namespace__(self, api_version=None):
        return array_api.namespace

    def __array__(self, dtype=None, copy=None):
        if (dtype is None or np.dtype(dtype) == object) and not (
            self.node.shape and ".dot(" in _source_line().replace(" ", "")
        ):
            # np.array([x, y]), np.r_[x, c]: numpy builds an object array of traced scalars (the
            # elements of a traced array, see tapejit.frontend.numpy.np_assemble); numpy's object loops call
            # their operators (and methods named after ufuncs, see __getattr__), and lift()
            # rebuilds it as one traced array. Not for W.dot(x) with a numpy W: ndarray.dot
            # would multiply element by element (an object matmul); the error says W @ x.
            return numpy_api.object_elements(self, copy)
        if dtype is not None and np.dtype(dtype).kind in "iu":
            return _integer_array(self, np.dtype(dtype))
        raise _conversion_error("a numpy array conversion", self)

    # -- methods ----------------------------------------------------------------------------
    def sum(self, axis=None, dtype=None, out=None, keepdims=False, **kw):
        return numpy_api.FUNCTIONS[np.sum](self, axis, dtype, out, keepdims, **kw)

    def max(self, axis=None, out=None, keepdims=False, **kw):
        return numpy_api.FUNCTIONS[np.max](self, axis, out, keepdims, **kw)

    def min(self, axis=None, out=None, keepdims=False, **kw):
        return numpy_api.FUNCTIONS[np.min](self, axis, out, keepdims, **kw)

    def mean(self, axis=None, dtype=None, out=None, keepdims=False, **kw):
        return numpy_api.FUNCTIONS[np.mean](self, axis, dtype, out, keepdims, **kw)

    def dot(self, o):
        return numpy_api.FUNCTIONS[np.dot](self, o)

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

    # ndarray methods that are numpy functions (numpy_api defines them)
    def var(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
        return numpy_api.FUNCTIONS[np.var](self, axis, dtype, out, ddof, keepdims)

    def std(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
        return numpy_api.FUNCTIONS[np.std](self, axis, dtype, out, ddof, keepdims)

    def prod(self, axis=None, dtype=None, out=None, keepdims=False):
        return numpy_api.FUNCTIONS[np.prod](self, axis, dtype, out, keepdims)

    def cumsum(self, axis=None, dtype=None, out=None):
        return numpy_api.FUNCTIONS[np.cumsum](self, axis)

    def cumprod(self, axis=None, dtype=None, out=None):
        return numpy_api.FUNCTIONS[np.cumprod](self, axis)

    def diagonal(self, offset=0, axis1=0, axis2=1):
        return numpy_api.FUNCTIONS[np.diagonal](self, offset, axis1, axis2)

    def trace(self, offset=0, axis1=0, axis2=1, dtype=None, out=None):
        return numpy_api.FUNCTIONS[np.trace](self, offset, axis1, axis2, dtype, out)

    def squeeze(self, axis=None):
        return numpy_api.FUNCTIONS[np.squeeze](self, axis)

    def swapaxes(self, axis1, axis2):
        return numpy_api.FUNCTIONS[np.swapaxes](self, axis1, axis2)

    def repeat(self, repeats, axis=None):
        return numpy_api.FUNCTIONS[np.repeat](self, repeats, axis)

    def take(self, indices, axis=None, out=None, mode="raise"):
        return numpy_api.FUNCTIONS[np.take](self, indices, axis, out, mode)

    def sort(self, axis=-1, kind=None, order=None):
        _setitem(self, Ellipsis, numpy_api.FUNCTIONS[np.sort](self, axis))  # in place, as numpy

    def round(self, decimals=0, out=None):
        return numpy_api.FUNCTIONS[np.round](self, decimals, out)

    def clip(self, min=None, max=None, out=None, **kw):
        return numpy_api.FUNCTIONS[np.clip](self, min, max, out)

    def fill(self, value):
        _setitem(self, Ellipsis, value)

    # -- numpy protocols --------------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        name = ufunc.__name__
        if method != "__call__":
            fn = numpy_api.UFUNC_METHODS.get((name, method))
            if fn is None:
                raise _fail(f"numpy.{name}.{method} is not supported by tapejit")
            return fn(*inputs, **kwargs)
        if kwargs.get("out") is not None:
            if any(isinstance(o, np.ndarray) for o in kwargs["out"]):
                # a += t on a numpy array a: numpy would store the traced result in a
                raise _conversion_error(f"numpy.{name} with out= a numpy array", self)
            raise _fail(f"numpy.{name} with out= is not supported by tapejit; write y = ...")
        if kwargs.get("where", True) is not True:
            raise _fail(f"numpy.{name} with where= is not supported by tapejit")
        fn = numpy_api.UFUNCS.get(name)
        if fn is None:
            raise _fail(f"numpy.{name} is not supported by tapejit")
        return fn(*inputs)

    def __array_function__(self, func, types, args, kwargs):
        fn = numpy_api.FUNCTIONS.get(func)
        if fn is None:
            module = getattr(func, "__module__", None) or ""
            prefix = module if module.startswith("numpy.") else "numpy"  # numpy.linalg.inv
            raise _fail(f"{prefix}.{func.__name__} is not supported by tapejit")
        return fn(*args, **kwargs)


# ----------------------------------------------------------------------------------------------
# Lifting operands and building traced ops


def in_trace() -> bool:
    """Whether a trace is in progress on this thread (a transformation called now is nested)."""
    return bool(_current.items)


def _state() -> _Trace:
    if not _current:
        raise TracingError("tapejit tracer used outside of tracing")
    return _current[-1]


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
        return _state().lift_outer(x)  # a value of an enclosing trace, used in a loop body
    if isinstance(x, (bool, np.bool_)):
        return Tracer(ops.const(bool(x), dtype="bool"), np.bool_(x))
    if isinstance(x, (int, float, np.integer, np.floating)):
        return Tracer(ops.const(float(x)), np.float64(x))
    if isinstance(x, np.ndarray):
        if x.dtype == object:
            return _from_objects(x)
        if x.ndim == 0:
            return lift(x[()])
        return _state().capture_tracer(x)
    if isinstance(x, (list, tuple)):
        return lift(np.asarray(x))
    raise _fail(f"cannot use a value of type {type(x).__name__} in a traced computation")


def _from_objects(arr: np.ndarray) -> Tracer:
    """An object array (``np.array([x, y])`` of traced values and numbers) as one traced array
    (see :mod:`tapejit.frontend.numpy.np_assemble`)."""
    return numpy_api.from_objects(arr)


# Concrete values by node id, for nodes built through ops.* builders that the tracer did not
# emit itself (e.g. broadcast_to inserted by a builder): id -> (node, value); the node is kept so
# that its id cannot be reused by another node during the trace. Cleared at the end of each trace.
_values = _ThreadValues()


def _value(n: Node) -> Any:
    return _values[id(n)][1]


def _evaluate(node: Node) -> Any:
    """The concrete value of ``node`` on the example input: the op's numpy reference applied to
    its arguments' values, computing (and keeping in :data:`_values`) those not known yet.
    Iterative, and visits only nodes not evaluated yet, so tracing stays linear."""
    hit = _values.get(id(node))
    if hit is not None:
        return hit[1]
    stack = [node]
    with np.errstate(all="ignore"):  # once per call: a trace may evaluate thousands of nodes
        while stack:
            n = stack[-1]
            if id(n) in _values:
                stack.pop()
                continue
            todo = [a for a in n.args if id(a) not in _values]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            if n.op == Op.CONST:
                value = np.full(n.shape, n.attrs[0], dtype=ir.NUMPY_DTYPE[n.dtype])
            elif n.op == Op.INPUT:
                raise TracingError(f"internal: value of input {n.attrs} missing")
            else:
                value = ops.OPS[n.op].ref(n.attrs, *(_value(a) for a in n.args))
            _values[id(n)] = (n, value)
    return _value(node)


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
        same = numpy_api.FUNCTIONS[np.all](same)
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


def _element(x: Tracer, key: tuple) -> Tracer | None:
    """``x[i, j, ...]`` with a non-negative Python int in bounds for every axis (one element of
    an array: a scalar, no view) as the general path (:func:`_getitem`) builds it, without its
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


def _getitem(x: Tracer, key) -> Tracer:
    if dynamic_index.is_dynamic(key):  # a traced position, x[i] (tapejit/frontend/dynamic_index.py)
        return dynamic_index.getitem(x, key)
    items = _normalise_key(key, x.shape)
    return _as_view(x, _build(lambda a: ops.index(a, items), x), (Op.INDEX, items))


def _as_view(base: Any, result: Tracer, step: tuple) -> Tracer:
    """``result``, made from ``base`` by ``step``, as the numpy view of it that numpy's result
    would be (so writes to either are seen through the other; see :mod:`tapejit.frontend.views`)."""
    if isinstance(base, Tracer) and base.level == result.level and result.node.shape:
        if result is base:  # an identity step (x[...], x.reshape(x.shape)): a new view object
            result = Tracer(base.node, base._value, base.level)
        views.record_view(base, result, step)
    return result


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
    shared = numpy_api.shared_with_numpy(views.root_of(y))
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
    shape = vnode.shape
    while len(shape) > len(region) and shape[0] == 1:  # numpy drops leading unit axes here
        shape = shape[1:]
    try:
        if np.broadcast_shapes(shape, region) != region:
            raise ValueError
    except ValueError:
        raise _fail(
            f"could not broadcast input array from shape {vnode.shape} into shape {region}"
        ) from None
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


def _copy(a) -> Tracer:
    """A new array with ``a``'s values that shares nothing with it (writes to it are its own)."""
    t = lift(a)
    return Tracer(t.node, t._value, t.level)


def where(cond, a, b):
    """Branch-free select: ``a`` where ``cond`` is true, else ``b`` (numpy broadcasting).

    ``cond`` is a bool array or scalar (a comparison of traced values), ``a`` and ``b`` float64
    arrays or numbers; the result has their broadcast shape. Both branches are evaluated and the
    cotangent (and tangent) flows only into the selected one — as a zero into the other, and
    0 × NaN is NaN: ``where(x > 0, sqrt(x), 0)`` has a NaN gradient at ``x < 0``, where
    ``sqrt``'s derivative is NaN (write ``sqrt(where(x > 0, x, 1))`` in the unselected branch). Use this instead of Python ``if`` on traced values: it records no guard. Outside
    tracing it is ``numpy.where``.

    Raises :class:`tapejit.TracingError` for operands that do not broadcast.
    """
    if not any(isinstance(v, Tracer) for v in (cond, a, b)):
        return np.where(cond, a, b)
    return _where(cond, a, b)


# ----------------------------------------------------------------------------------------------
# Entry point


def masked_array_error(what: str) -> TypeError:
    """The error for a numpy masked array passed where an array is expected: converting it drops
    its mask (every masked element would take part), so it is refused."""
    return TypeError(
        f"{what} is a numpy masked array: tapejit would drop its mask and use every element. "
        "Pass x.filled(value) (masked elements replaced), x.compressed() (only the unmasked "
        "ones), or the data and the mask as two arguments and use tapejit.where(mask, ...)"
    )


def _input_type(value: Any, position: int) -> tuple[Type, np.ndarray]:
    if isinstance(value, np.ma.MaskedArray):
        raise masked_array_error(f"argument {position}")
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (int, float, np.integer, np.floating, np.ndarray)
    ):
        hint = (
            " (pass np.asarray(...) for an array; a tuple, dict or list of arrays is a pytree)"
            if isinstance(value, list)
            else ""
        )
        raise TypeError(
            f"argument {position}: expected a float64 array or a real number, "
            f"got {type(value).__name__}{hint}"
        )
    arr = np.asarray(value)
    if not np.can_cast(arr.dtype, np.float64, "safe") or arr.dtype == np.bool_:
        raise TypeError(f"argument {position}: expected float64 values, got dtype {arr.dtype}")
    return Type(arr.shape, "f64"), np.array(arr, dtype=np.float64)


def _param_name(f: Callable, i: int) -> str:
    """The name of ``f``'s ``i``-th positional parameter, for messages (``argument i`` if
    unknown)."""
    import inspect

    try:
        params = [
            p
            for p in inspect.signature(f).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        params = []
    return params[i].name if i < len(params) else f"argument {i}"


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


def trace(
    f: Callable,
    args: Sequence[Any],
    argnums: Sequence[int],
    dynamic: dict[int, int] | None = None,
    forced: dict[int, bool] | None = None,
    unchecked: set[int] | None = None,
    check_max_steps: bool = True,
    outputs: str = "scalar",
) -> Graph:
    """Trace ``f(*args)`` into a graph whose inputs are ``args`` (active where in ``argnums``)
    followed by the arrays ``f`` captured (const inputs, snapshotted now).

    ``dynamic`` maps the position of an argument whose leading axis may change between calls
    to its *capacity*: the input is declared with that many rows, and a hidden scalar input
    (after the arguments) carries the actual length; such an argument may only be scanned over
    (:func:`tapejit.scan`). ``forced`` maps a guard number (1-based, the native status of its
    failure) to the outcome the trace follows there instead of the example's: for a retrace
    after native code decided a comparison the other way on the same input. ``unchecked``:
    guard numbers whose outcome the trace follows but whose check it leaves out (a comparison
    that numpy and each compiled variant round differently on this input).
    ``check_max_steps=False`` records no :func:`max_steps_check`. With ``outputs="scalar"``
    ``f`` must return a scalar (shape ``()``) float (a loss); with ``outputs="any"`` it may
    return an array, a number, or a tuple/list of them (the graph's outputs, in order: a
    transformation's program, see :mod:`tapejit.transforms`). Raises
    :class:`TracingError` for anything that cannot be traced, naming the user's file and line.
    """
    name = getattr(f, "__name__", "f")
    if name == "<lambda>":
        name = "lambda"
    dynamic = dynamic or {}
    if _current.items or any(isinstance(a, Tracer) for a in args):
        raise _fail(
            f"{name} is being compiled (tapejit.compile, a transformation) inside a traced "
            "function: only tapejit.grad and tapejit.value_and_grad can be nested (their result "
            "is differentiated again, to any order); write the inner derivative with them"
        )
    st = _Trace()
    st.forced = dict(forced or {})
    st.unchecked = set(unchecked or ())
    st.check_max_steps = check_max_steps
    tracers = []
    for i, a in enumerate(args):
        t, value = _input_type(a, i)
        kind = "active" if i in argnums else "inactive"
        if i in dynamic:
            rows = dynamic[i]
            if not t.shape or t.shape[0] > rows:
                raise ValueError(f"argument {i} needs a leading axis of at most {rows} rows")
            padded = np.zeros((rows, *t.shape[1:]))
            padded[: t.shape[0]] = value
            t, value = Type((rows, *t.shape[1:])), padded
        node = st.add_input(t, kind, f"x{i}" if len(args) > 1 else "x")
        tracer = Tracer(node, value if t.shape else value[()], st.level)
        tracer._view = views.ReadOnly(_param_name(f, i))
        tracers.append(tracer)
    for i in sorted(dynamic):
        node = st.add_input(Type(()), "inactive", f"len{i}")
        length = Tracer(node, np.float64(np.shape(args[i])[0]), st.level)
        st.dynamic[id(tracers[i].node)] = (tracers[i].node, length)
    _current.append(st)
    saved = dict(_values)
    _values.clear()
    for t in tracers:
        _values[id(t.node)] = (t.node, t.value)
    try:
        try:
            with array_api.scipy_array_api():  # scipy's functions trace through the namespace
                result = loop_capture.prepare(f)(*tracers)
        except Exception as e:
            if st.conversion_error is not None and e is not st.conversion_error:
                raise st.conversion_error from e
            if isinstance(e, TypeError) and "loop of ufunc does not support" in str(e):
                raise TracingError(
                    f"{_site_of(e.__traceback__)}: {e}: a numpy ufunc was applied to an object "
                    "array (np.array([...]) of traced values mixed with plain numbers); build "
                    "it with np.stack([...]) instead, or apply the ufunc to the traced values"
                ) from None
            raise
        if st.conversion_error is not None:  # raised, then caught and ignored by f
            raise st.conversion_error
        program = outputs == "any"
        if program and isinstance(result, (list, tuple)):
            outs = [_output(r, name, program) for r in result]
        elif isinstance(result, (list, tuple, dict, str, bytes, type(None))):
            # lift() would report these as a failed array conversion at the compile() call
            raise TracingError(
                f"{name} must return a scalar float (a loss), got {type(result).__name__}"
            )
        else:
            outs = [_output(result, name, program)]
    finally:
        _current.pop()
        _values.clear()
        _values.update(saved)
    if outputs == "scalar" and (outs[0].shape != () or outs[0].node.dtype != "f64"):
        raise TracingError(
            f"{name} must return a scalar float (a loss), got {outs[0].node.type}; "
            "reduce it with .sum() or index it first"
        )
    names = ("value",) if len(outs) == 1 else tuple(f"out{k}" for k in range(len(outs)))
    return ir.verify(
        Graph(
            name,
            tuple(st.inputs),
            tuple(st.kinds),
            tuple(o.node for o in outs),
            st.bindings,
            names,
            guards=tuple(st.guards),
            captured=tuple(st.captured),
        )
    )


def _output(result: Any, name: str, program: bool) -> Tracer:
    """One result of a traced function as a tracer (a program's results as f64)."""
    if isinstance(result, (dict, str, bytes, type(None))):
        raise TracingError(f"{name} must return arrays or numbers, got {type(result).__name__}")
    out = lift(result) if not isinstance(result, Tracer) else result
    if program and out.node.dtype != "f64":
        out = _build(ops._float, out)
    return out


@contextlib.contextmanager
def detached():
    """Trace something else from inside a trace (a user's derivative rule, traced into a graph
    of its own): the traces in progress are set aside and restored afterwards."""
    saved = list(_current.items)
    _current.items.clear()
    try:
        yield
    finally:
        _current.items[:] = saved


def call_graph(g: Graph, *args: Any, guards: bool = True) -> list[Tracer]:
    """Inline ``g`` into the trace in progress: its runtime inputs bound to ``args`` (tracers,
    arrays or numbers, in input order), its const inputs to the arrays it captured; returns one
    tracer per output. ``g``'s guards become guards of this trace (``guards=False`` drops them:
    for a copy inside a loop body whose guards an outer copy already checks). How a
    transformation uses a graph it built (a JVP, a VJP) inside a traced program."""
    runtime = [k for k in g.kinds if k != "const"]
    if len(args) != len(runtime):
        raise TypeError(f"{g.name} takes {len(runtime)} inputs, got {len(args)}")
    values = list(args) + [g.bindings[i] for i, k in enumerate(g.kinds) if k == "const"]
    depth = len(_current.items)
    ts = [x if x.__class__ is Tracer and x.level == depth else lift(x) for x in values]
    mapping = {id(inp): t.node for inp, t in zip(g.inputs, ts)}
    conds = [c for c, _, _ in g.guards] if guards else []
    nodes = ir.substitute(tuple(g.outputs) + tuple(conds), mapping)
    if conds:
        st = _state()
        if isinstance(st, BodyTrace) and not st.allows_guards:
            raise _fail(f"{g.name} has guards (Python control flow) and cannot run in a loop body")
        for node, (_, expected, where) in zip(nodes[len(g.outputs) :], g.guards):
            st.guards.append((node, expected, where))
    return [Tracer(n, _UNSET, depth) for n in nodes[: len(g.outputs)]]


# The numpy surface (ufuncs and functions) is defined on top of the tracer, in its own module.
from .numpy import numpy_api  # noqa: E402
from .numpy import array_api  # noqa: E402  (the array API namespace and scipy's mode)
from .loops import loop_capture  # noqa: E402  (Python loops captured while tracing)
from . import dynamic_index  # noqa: E402  (indexing at traced positions)
