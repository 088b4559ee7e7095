"""The state of a trace in progress, one stack per thread: :class:`_Trace` (the inputs, the
captured constants snapshotted as const inputs, the guards), :class:`BodyTrace` (a loop body's
sub-trace and the enclosing values it lifts in as params), the concrete values of traced nodes
on the example input (:func:`_evaluate`, on demand), and what a trace records besides ops:
guards (:func:`_guard`), ``while_loop``'s max_steps checks, and the first conversion of a traced
value to a plain number (:func:`_conversion_error`). Makes no tracers (that is
:mod:`~tapejit.frontend.tracer`, which imports this module).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import numpy as np

from ..ad import autodiff
from ..core import ir, ops
from ..core.ir import Node, Type
from ..core.ops import Op
from .errors import TracingError, _fail, _scipy_caller, _source_line, _user_site

def _conversion_error(what: str, t: Any) -> TracingError:
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
        self.dynamic: dict[int, tuple[Node, Any]] = {}  # (node, its length's Tracer)
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

    def differentiable(self, n: Node) -> bool:
        """Whether ``n`` depends on a differentiated input of this trace (memoised; reverse
        mode's activity rule, :func:`tapejit.ad.autodiff.depends_on_active`)."""
        memo = self.__dict__.setdefault("_memo_active", {})
        return autodiff.depends_on_active(n, self.is_active_input, memo)

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
    as inputs the first time the body touches them (:func:`tapejit.frontend.tracer.add_fixed`,
    :func:`~tapejit.frontend.tracer.lift_outer` make their tracers)."""

    #: whether Python control flow on traced values may record guards (a loop body: no)
    allows_guards = False

    def __init__(self, parent: _Trace, prefix: str):
        super().__init__()
        self.parent = parent
        self.prefix = prefix
        self.level = parent.level + 1
        self.params: list[Any] = []  # the enclosing trace's Tracers, one per param input
        self.param_inputs: list[Node] = []
        self._lifted: dict[int, tuple[Node, Any]] = {}  # see tracer.lift_outer
        self.fixed = 0  # inputs before the params
        #: (first, last) value of a loop body's counter (input 0); None for a while_loop's cond
        self.counter_range: tuple[int, int] | None = None

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


def in_trace() -> bool:
    """Whether a trace is in progress on this thread (a transformation called now is nested)."""
    return bool(_current.items)


def _state() -> _Trace:
    if not _current:
        raise TracingError("tapejit tracer used outside of tracing")
    return _current[-1]


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
