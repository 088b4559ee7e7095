"""Tracing: run ``f`` on tracers and record the ops it performs as a :class:`~tapejit.core.ir.Graph`.

A :class:`Tracer` carries an IR node and the *concrete value* that node takes on the example
input (computed with the op's numpy reference when something asks for it). Python operators,
numpy ufuncs (``__array_ufunc__``) and numpy functions (``__array_function__``) on tracers build
IR nodes, so ordinary numpy code — including Python loops over elements — traces unchanged.

Captured numpy arrays (closed over by ``f`` or created inside it) become *const* inputs of the
graph: they are **snapshotted** (copied) when ``f`` is traced, i.e. at compile time, and passed to
native code by pointer. Mutating such an array after compiling does not change the compiled
gradient; compile again to pick up new values. Scalars (Python and numpy numbers, 0-d and size-1
arrays) become IR constants.

Python control flow on a traced scalar (``if x[0] > 0:``, ``float(x[0])``, ``int(x[0])``) follows
the example input and records a *guard* (condition, outcome, the user's file and line) that the
generated code re-checks, so a branch is never frozen silently (see :mod:`tapejit.api`). What
cannot be guarded — the truth value of a whole array, ``complex()``, ``tolist()``, an
unsupported numpy function or ndarray method — raises :class:`TracingError` naming the user's
file and line.

This module is the entry point (:func:`trace`, :func:`call_graph`, :func:`where`); the tracer is
split by concern into the modules below it, whose names it re-exports for the stages above the
front end:

==================  ==========================================================================
``errors``          :class:`TracingError`, the user's file and line a message names
``trace_state``     the trace in progress (inputs, captured constants, guards), loop bodies'
                    sub-traces, concrete values on demand
``registry``        the tables and hooks the tracer calls and the numpy surface fills
``tracer``          :class:`Tracer` and the builders of traced ops (``array_methods``: its
                    ndarray methods that the numpy surface defines)
``indexing``        basic indexing, writes into arrays and in-place operators
==================  ==========================================================================
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence

import numpy as np

from ..core import ir, ops
from ..core.ir import Graph, Type
from . import views
from .errors import TracingError, _fail, _site_of, _user_site, masked_array_error
from .convert import runtime as convert_runtime
from .loops import loop_capture
from .registry import HOOKS
from .trace_state import (
    _UNSET,
    BodyTrace,
    _current,
    _state,
    _Trace,
    _values,
    detached,
    in_trace,
    is_max_steps_site,
    max_steps_check,
)
from .tracer import Tracer, _build, _unary, _where, _wrap, dynamic_length, lift

__all__ = [  # the names the stages above the front end (and the tests) use
    "BodyTrace", "Tracer", "TracingError", "call_graph", "detached", "dynamic_length",
    "in_trace", "is_max_steps_site", "lift", "masked_array_error", "max_steps_check", "trace",
    "where", "_UNSET", "_build", "_current", "_input_type", "_state", "_unary", "_user_site",
    "_values", "_where", "_wrap",
]  # fmt: skip


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
    try:
        params = [
            p
            for p in inspect.signature(f).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        params = []
    return params[i].name if i < len(params) else f"argument {i}"


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
    if not _current.items:
        convert_runtime.start()
    _current.append(st)
    saved = dict(_values)
    _values.clear()
    for t in tracers:
        _values[id(t.node)] = (t.node, t.value)
    try:
        try:
            with HOOKS["scipy_array_api"](f):  # scipy's functions trace through the namespace
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
