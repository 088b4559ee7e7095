"""Differentiation inside a traced function: ``tj.grad(g)(x)`` called while ``f`` is traced.

The inner gradient is built as IR, not compiled: ``g`` is traced in a nested trace whose inputs
are ``g``'s arguments (those in ``argnums`` active), and whose other inputs are the values of
the enclosing trace that ``g`` closes over, lifted in as it touches them (as a loop body lifts
them, :class:`tapejit.frontend.BodyTrace`). Reverse mode (:func:`tapejit.ad.autodiff.vjp_graph`)
turns that graph into ``(value, grad...)``, which is inlined into the enclosing trace
(:func:`tapejit.frontend.call_graph`) with its inputs bound to the call's arguments and the lifted
values. The result is ordinary IR of the enclosing trace, so the enclosing differentiation
(``tj.grad`` of ``f``, ``hessian``, a further nested ``grad``) differentiates it like any other
code: derivatives of any order, through closures too, as JAX's nested ``grad`` (Baydin et al.,
"Automatic differentiation in machine learning: a survey", JMLR 18, 2018, sec. 3.1 on
perturbation confusion: each nesting level's inputs are its own, so the levels never mix).

Guards (Python ``if`` on traced values) inside ``g`` become guards of the enclosing trace.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from .errors import TracingError, _fail, _user_site
from .trace_state import BodyTrace, _current, _state, _values
from .tracer import Tracer, _build, lift
from .tracing import _input_type, call_graph
from ..ad import autodiff
from ..core import ir, ops

from ..core.ir import Graph, Type


class NestedTrace(BodyTrace):
    """The trace of a function differentiated inside another trace: its own inputs first (the
    call's arguments; those differentiated are active), then the enclosing values it uses."""

    allows_guards = True

    def is_active_input(self, n) -> bool:
        k = n.attrs[0]
        return k < len(self.inputs) and self.inputs[k] is n and self.kinds[k] == "active"


def _argnums(argnums: int | Sequence[int], n: int) -> tuple[int, ...]:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for a in nums:
        if not isinstance(a, int) or not -n <= a < n:
            raise TypeError(f"argnums {argnums!r} does not name an argument of {n}")
    return tuple(a % n for a in nums)


def _leaf(a: Any, i: int, name: str) -> tuple[Type, Any]:
    """The type and concrete value of argument ``i`` of a nested call."""
    if isinstance(a, Tracer):
        if a.node.dtype != "f64":
            a = _build(ops._float, a)
        return a.node.type, a.value
    if isinstance(a, (tuple, list, dict)) or not isinstance(
        a, (int, float, np.integer, np.floating, np.ndarray)
    ):
        raise _fail(
            f"{name}: a gradient taken inside a traced function takes arrays and numbers as "
            f"arguments, got {type(a).__name__} for argument {i} (pass the leaves separately)"
        )
    t, value = _input_type(a, i)
    return t, value if t.shape else value[()]


def grad_in_trace(
    f: Callable, args: Sequence[Any], argnums: int | Sequence[int], with_value: bool,
    has_aux: bool = False,
):  # fmt: skip
    """``tj.grad(f, argnums)(*args)`` (``with_value``: ``tj.value_and_grad``) while a trace is in
    progress: the value and gradient as traced values of that trace (see the module docstring).

    Returns what the compiled form returns — a gradient per ``argnums`` (one, or a tuple for a
    tuple ``argnums``), with the value first for ``with_value`` — as tracers. Raises
    :class:`tapejit.TracingError` naming the user's line when ``f`` does not return a scalar, for
    ``has_aux`` or pytree arguments (not supported here), or when ``f`` cannot be traced.
    """
    name = getattr(f, "__name__", "f")
    if has_aux:
        raise _fail(f"{name}: has_aux=True is not supported for a gradient inside a traced function")
    nums = _argnums(argnums, len(args))
    parent = _state()
    depth = len(_current.items)
    st = NestedTrace(parent, f"n{depth}")
    inner = []
    for i, a in enumerate(args):
        t, value = _leaf(a, i, name)
        node = st.add_input(t, "active" if i in nums else "inactive", f"{st.prefix}a{i}")
        st.fixed += 1
        _values[id(node)] = (node, value)
        inner.append(Tracer(node, value, st.level))
    saved = dict(_values)
    _current.append(st)
    try:
        result = f(*inner)
        out = lift(result) if not isinstance(result, Tracer) else result
    finally:
        _current.pop()
        _values.clear()
        _values.update(saved)
    if out.shape != () or out.node.dtype not in ("f64", "i64", "bool"):
        raise _fail(
            f"{name} must return a scalar float to be differentiated, got {out.node.type}; "
            "reduce it with .sum() or index it first"
        )
    if out.node.dtype != "f64":
        out = Tracer(ops._float(out.node), out.value, st.level)
    g = ir.verify(
        Graph(
            name, tuple(st.inputs), tuple(st.kinds), (out.node,), {}, ("value",),
            guards=tuple(st.guards),
        )
    )  # fmt: skip
    try:
        joint = autodiff.vjp_graph(g, nums)
    except ops.RuleError as e:
        raise TracingError(f"{_user_site()}: {name}: {e}") from None
    outs = call_graph(joint, *args, *st.params)
    value, grads = outs[0], tuple(outs[1:])
    grads_out = grads[0] if isinstance(argnums, int) else grads
    return (value, grads_out) if with_value else grads_out
