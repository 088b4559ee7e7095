"""Structured control flow: ``fori_loop``, ``scan``, ``while_loop`` and ``checkpoint``.

A Python ``for`` loop over traced values is *unrolled* into the graph: fine for a few
iterations, but the graph, the compile time and the machine code grow with the trip count, and
a trip count that depends on the input needs a guard and a recompile. These functions keep the
body as a *sub-graph* instead — one ``loop`` node (:class:`tapejit.core.ops.LoopSpec`) — which codegen
lowers to a native loop calling the body's code once per iteration. JAX's ``lax`` loops are the
model for the semantics (``jax.lax.fori_loop``, ``scan``, ``while_loop``), with two
differences: ``while_loop`` takes a static bound ``max_steps`` (so that its gradient can be
taken), and ``scan`` returns ``ys`` stacked to the full length.

Reverse mode (:func:`tapejit.ad.autodiff.loop_vjp`): the forward loop stores, per iteration, the
values the backward pass needs (a residual stack in the workspace, sized by the static bound);
the backward loop runs in reverse for exactly as many iterations as the forward loop ran — so a
``while_loop`` that stops after 8 of ``max_steps=1024`` iterations does 8 iterations of backward
work. :func:`checkpoint` stores only the carries and recomputes the rest of each iteration.

Carries (``init`` and what the body returns) are a float64 array or scalar, or a tuple/list of
them (nested tuples and lists are fine); their shapes may not change from one iteration to the
next. Outside tracing the functions run as plain Python loops on numpy values, with the same
semantics. Inside a body, Python control flow on traced values raises :class:`TracingError`
(use :func:`tapejit.where`); values of the enclosing function may be used freely (they become
loop-invariant inputs of the body), but values computed in a body must leave it through the
carry or ``ys``.
"""

from __future__ import annotations

import operator
from typing import Any, Callable

import numpy as np

from .errors import TracingError, _IndexOutOfRange, _fail
from .trace_state import BodyTrace, _current, _state, _values, max_steps_check
from .tracer import Tracer, _build, _wrap, add_fixed, dynamic_length, lift
from ..ad import autodiff
from ..passes import vectorise as loop_vectorise
from . import dynamic_index
from ..core import ops
from ..core.ir import Graph, Node, Type, substitute
from ..core.ops import Op


def checkpoint(fn: Callable) -> Callable:
    """Mark a loop body for recomputation in reverse mode (``scan(checkpoint(step), ...)``).

    The backward pass then stores only each iteration's carry and recomputes the body's
    intermediate values from it: memory per iteration is the size of the carry rather than of
    everything the body's VJP reads, for about one more evaluation of the body per iteration
    (Griewank & Walther, *Evaluating Derivatives*, ch. 12; ``jax.checkpoint``). Called on its
    own, the wrapped function behaves exactly like ``fn``.
    """

    def wrapped(*args, **kwargs):
        return fn(*args, **kwargs)

    wrapped.__name__ = getattr(fn, "__name__", "body")
    wrapped.__doc__ = getattr(fn, "__doc__", None)
    wrapped._tapejit_checkpoint = True  # type: ignore[attr-defined]
    return wrapped


# ----------------------------------------------------------------------------------------------
# Carry structures: a leaf, or nested tuples/lists of leaves


def _flatten(tree: Any) -> tuple[list, Any]:
    if isinstance(tree, (tuple, list)):
        leaves, shapes = [], []
        for t in tree:
            ls, s = _flatten(t)
            leaves += ls
            shapes.append(s)
        return leaves, (type(tree), shapes)
    return [tree], None


def _unflatten(structure: Any, leaves: list) -> Any:
    return _build_tree(structure, iter(leaves))


def _build_tree(s: Any, it) -> Any:
    """(A function of its own: a closure over the iterator would be a reference cycle keeping
    the leaves alive until the collector runs.)"""
    if s is None:
        return next(it)
    kind, parts = s
    return kind([_build_tree(p, it) for p in parts])


def _tracing() -> bool:
    return bool(_current)


def _static_int(v: Any, what: str) -> int:
    if isinstance(v, Tracer):
        return operator.index(int(v))  # guarded in the enclosing trace
    try:
        return operator.index(v)
    except TypeError:
        raise TypeError(f"{what} must be an int, got {type(v).__name__}") from None


# ----------------------------------------------------------------------------------------------
# Public API


def fori_loop(lower: int, upper: int, body: Callable, init: Any) -> Any:
    """``for i in range(lower, upper): carry = body(i, carry)``; returns the final carry.

    ``lower`` and ``upper`` are ints (a traced value is turned into an int with a guard); ``i``
    is a float64 scalar in the body. ``init`` (the carry) is a float64 array or number, or a
    tuple/list of them; ``body`` returns a carry of the same structure, shapes and dtypes. The
    body is traced once and compiled into a native loop, never unrolled; reverse mode stores
    what the backward loop needs per iteration (only the carries under :func:`checkpoint`).
    Outside tracing it runs as the Python loop. As ``jax.lax.fori_loop``.

    Raises :class:`tapejit.TracingError` when the body changes the carry's structure or a
    shape, or branches on a traced value (use :func:`tapejit.where`).
    """
    lo, hi = _static_int(lower, "fori_loop lower"), _static_int(upper, "fori_loop upper")
    if not _tracing():
        carry = init
        for i in range(lo, hi):
            carry = body(np.float64(i), carry)
        return carry
    if hi <= lo:
        return init
    carry, _ = _loop(
        lambda i, c, xs: (body(i, c), None),
        init,
        [],
        hi - lo,
        start=lo,
        checkpointed=_is_checkpointed(body),
        name="fori_loop",
    )
    return carry


def scan(f: Callable, init: Any, xs: Any = None, length: int | None = None) -> tuple[Any, Any]:
    """``carry, y_t = f(carry, x_t)`` for every ``x_t`` along the leading axis of ``xs``;
    returns ``(final carry, ys)`` with each ``y`` stacked along a new leading axis.

    ``xs`` is an array, a tuple/list of arrays with equal leading length, or ``None`` (then
    ``length`` iterations with ``x_t = None``). ``f`` returns ``(carry, y)``; ``y`` may be
    ``None``, an array/scalar or a tuple/list of them; ``ys`` has each ``y`` stacked along a
    new leading axis of length ``len(xs)``. float64 throughout. One native loop; its gradient
    stores per-iteration residuals (or only carries under :func:`checkpoint`) and runs the
    backward loop for the same iterations. A sequence passed as ``dynamic_argnums`` to
    :func:`tapejit.compile` may change length between calls without recompiling. As
    ``jax.lax.scan``.

    Raises ``ValueError`` for ``xs`` of unequal lengths or a ``length`` that disagrees, and
    :class:`tapejit.TracingError` for a body that changes the carry's structure or shapes.
    """
    x_leaves, x_struct = _flatten(xs) if xs is not None else ([], None)
    lengths_dyn = [dynamic_length(x) for x in x_leaves]
    if any(d is not None for d in lengths_dyn):
        return _dynamic_scan(f, init, x_leaves, x_struct, lengths_dyn)
    if xs is not None:
        lengths = {np.shape(x)[0] if np.ndim(x) else None for x in x_leaves}
        if None in lengths or len(lengths) != 1:
            raise ValueError(f"scan: every x needs the same leading length, got {lengths}")
        n = lengths.pop()
        if length is not None and length != n:
            raise ValueError(f"scan: length={length} but xs have leading length {n}")
    elif length is None:
        raise ValueError("scan: give xs or length")
    else:
        n = _static_int(length, "scan length")
    if not _tracing():
        carry, ys = init, []
        for t in range(n):
            x_t = _unflatten(x_struct, [x[t] for x in x_leaves]) if xs is not None else None
            carry, y = f(carry, x_t)
            ys.append(y)
        return carry, _stack_python(ys, n)

    def step(i, c, x_t):
        return f(c, _unflatten(x_struct, x_t) if xs is not None else None)

    return _loop(step, init, x_leaves, n, checkpointed=_is_checkpointed(f), name="scan", ys=True)


def _dynamic_scan(f, init, x_leaves, x_struct, lengths) -> tuple[Any, Any]:
    """A scan over arguments with a dynamic length: as many iterations as the call's length
    (the traced bound is the argument's capacity); no stacked ys, whose length is unknown."""
    if isinstance(_state(), BodyTrace):
        raise _fail(
            "scan: a scan over a dynamic-length argument must be at the top level of the "
            "compiled function, not inside another loop's body"
        )
    if any(d is None or d.node is not lengths[0].node for d in lengths):
        raise _fail(
            "scan: xs with a dynamic length must all be the same dynamic argument(s) of one length"
        )
    n = x_leaves[0].node.shape[0]

    def step(i, c, x_t):
        carry, y = f(c, _unflatten(x_struct, x_t))
        if y is not None:
            raise _fail(
                "scan over a dynamic length: the body must return (carry, None); "
                "ys would have a length unknown when compiling, so accumulate what you "
                "need in the carry"
            )
        return carry, None

    carry, _ = _loop(
        step, init, x_leaves, n, checkpointed=_is_checkpointed(f), name="scan", steps=lengths[0]
    )
    return carry, None


def while_loop(cond: Callable, body: Callable, init: Any, *, max_steps: int) -> Any:
    """``while cond(carry): carry = body(carry)``, at most ``max_steps`` times; returns the
    final carry.

    The loop stops when ``cond`` is false *or* after ``max_steps`` iterations (the static bound
    sizes the residual stack for the gradient). The gradient's cost follows the iterations
    actually run, not ``max_steps``. ``cond(carry)`` returns a scalar (bool or number);
    ``body`` returns a carry of ``init``'s structure, shapes and dtypes (float64). A top-level
    loop that runs out of ``max_steps`` with ``cond`` still true is reported at call time
    (:class:`tapejit.MaxStepsWarning`, or :class:`tapejit.MaxStepsError` with
    ``compile(..., on_max_steps="raise")``). Reverse mode of a bounded while loop follows
    Griewank & Walther, *Evaluating Derivatives* (2008), ch. 12 (tape of the iterations run).

    Raises ``ValueError`` for ``max_steps < 0`` and :class:`tapejit.TracingError` for a body or
    condition that cannot be traced.
    """
    steps = _static_int(max_steps, "max_steps")
    if steps < 0:
        raise ValueError(f"max_steps must be >= 0, got {steps}")
    if not _tracing():
        carry = init
        for _ in range(steps):
            if not bool(cond(carry)):
                break
            carry = body(carry)
        return carry
    if steps == 0:
        return init
    info: dict = {}
    carry, _ = _loop(
        lambda i, c, xs: (body(c), None),
        init,
        [],
        steps,
        cond=cond,
        checkpointed=_is_checkpointed(body),
        name="while_loop",
        info=info,
    )
    if not isinstance(_state(), BodyTrace):
        # ran all max_steps iterations and cond still holds: the Python loop would go on
        still = lift(cond(carry))
        if still.node.type.size != 1:
            raise _fail(f"while_loop: cond must return a scalar, got {still.node.type}")
        if still.node.dtype != "bool":
            still = still != 0.0
        exhausted = (info["steps_run"] == float(steps)) & still.reshape(())
        max_steps_check(exhausted.node, steps)
    return carry


def _counted_loop(step: Callable, init: Any, xs: list, n: int, k: int, **kw) -> tuple[Any, Any]:
    """:func:`_loop` of a body that records ``k`` index checks: each becomes a carry counting
    the iterations where it failed, checked after the loop (:func:`dynamic_index.check`)."""
    sites: list[str] = []

    def counted(i, c, x_t):
        inner, counts = c
        st = _state()
        before = len(st.index_checks)
        new, y = step(i, inner, x_t)
        mine = st.index_checks[before:]
        del st.index_checks[before:]
        if len(mine) != len(counts):
            raise _fail(f"{kw['name']}: the body's traced indices changed when traced again")
        sites[:] = [w for _, w in mine]
        flags = [_wrap(ops.where(bad, ops.const(1.0), ops.const(0.0))) for bad, _ in mine]
        return (new, tuple(c + f for c, f in zip(counts, flags))), y

    cond = kw.pop("cond")
    wrapped = (lambda c: cond(c[0])) if cond is not None else None
    (carry, counts), ys = _loop(
        counted, (init, (0.0,) * k), xs, n, cond=wrapped, counting=True, **kw
    )
    for count, site in zip(counts, sites):
        if count.node.op != Op.CONST:
            dynamic_index.check(ops.make(Op.GT, count.node, ops.const(0.0)), site)
        elif count.node.attrs[0] > 0:  # known when compiling (a nest's constant positions)
            where = site[len("tapejit: "):] if site.startswith("tapejit: ") else site
            raise _IndexOutOfRange(f"{where}: out of bounds in {count.node.attrs[0]:.0f} "
                                   "iterations, whatever the input")  # fmt: skip
    return carry, ys


def _is_checkpointed(fn: Callable) -> bool:
    return bool(getattr(fn, "_tapejit_checkpoint", False))


def _stack_python(ys: list, n: int) -> Any:
    if not ys or ys[0] is None:
        return None
    leaves = [_flatten(y)[0] for y in ys]
    structure = _flatten(ys[0])[1]
    return _unflatten(
        structure, [np.stack([np.asarray(ls[k]) for ls in leaves]) for k in range(len(leaves[0]))]
    )


# ----------------------------------------------------------------------------------------------
# Building a loop node


def _trace_body(st: BodyTrace, fn: Callable, args: tuple) -> Any:
    """Run ``fn(*args)`` with ``st`` as the innermost trace; restores the concrete-value table
    (the body's example values must not leak into the enclosing trace)."""
    saved = dict(_values)
    _current.append(st)
    try:
        return fn(*args)
    finally:
        _current.pop()
        _values.clear()
        _values.update(saved)
        # params that enclosing bodies lifted in, and arrays captured, while this body was
        # traced keep their values (hoisting evaluates nodes that read them)
        for outer in _current:
            if isinstance(outer, BodyTrace):
                for _, t in outer._lifted.values():
                    _values.setdefault(id(t.node), (t.node, t.value))
            for _, node in outer.consts.values():
                _values.setdefault(id(node), (node, outer.bindings[node.attrs[0]]))


def _leaf(v: Any) -> Tracer:
    """A carry or y value as an f64 tracer (bool values are promoted, as numpy does)."""
    t = lift(v)
    if t.node.dtype != "f64":
        t = _build(ops._float, t)
    return t


def _finish(st: BodyTrace, outputs: list[Node], params: list[Tracer], name: str) -> Graph:
    """The body graph with inputs ``fixed..., params...`` in the order of ``params`` (the union
    of the params of every sub-graph of the loop): inputs it does not use are still declared."""
    mine = {id(p.node): node for p, node in zip(st.params, st.param_inputs)}
    inputs = list(st.inputs[: st.fixed])
    mapping: dict[int, Node] = {}
    for p in params:
        k = len(inputs)
        node = ops.input_node(k, f"{st.prefix}p{k - st.fixed}", p.node.type)
        inputs.append(node)
        old = mine.get(id(p.node))
        if old is not None:
            mapping[id(old)] = node
    outs = substitute(tuple(outputs), mapping)
    return Graph(name, tuple(inputs), ("inactive",) * len(inputs), outs)


class _Constants:
    """The enclosing trace's side of :class:`tapejit.passes.vectorise.Constants`: captured
    tables, and the values of nodes computed from constants only (a flattened nest's inner
    trip counts): a node reading an argument, a loop's counter or carry is not one."""

    def __init__(self):
        self._known: dict[int, tuple[Node, bool]] = {}

    def array(self, a: np.ndarray) -> Node:
        t = lift(a)
        _values.setdefault(id(t.node), (t.node, t.value))
        return t.node

    def value(self, n: Node) -> np.ndarray | None:
        if not self._constant(n):
            return None
        return np.asarray(_wrap(n).value)

    def _constant(self, n: Node) -> bool:
        # id(node) -> (node, answer): the node is held, so that a node built and dropped
        # (a reshape asked about once) cannot pass its id and its answer to a later one
        known = self._known

        def get(x: Node):
            hit = known.get(id(x))
            return None if hit is None or hit[0] is not x else hit[1]

        stack = [n]
        while stack:
            top = stack[-1]
            if get(top) is not None:
                stack.pop()
                continue
            if top.op == Op.INPUT:
                src = self._source(top)
                if src is None or src is top:
                    known[id(top)] = (top, src is top)
                    stack.pop()
                elif get(src) is not None:
                    known[id(top)] = (top, get(src))
                    stack.pop()
                else:
                    stack.append(src)
                continue
            pending = [a for a in top.args if get(a) is None]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            known[id(top)] = (top, all(get(a) for a in top.args))
        return get(n)

    @staticmethod
    def _source(n: Node) -> Node | None:
        """For an input of a trace: itself when it is a captured constant, the enclosing
        value it stands for when it is a loop body's param, else ``None``."""
        for st in reversed(_current.items):
            k = n.attrs[0]
            if k < len(st.inputs) and st.inputs[k] is n:
                if st.kinds[k] == "const":
                    return n
                if isinstance(st, BodyTrace):
                    for p, inp in zip(st.params, st.param_inputs):
                        if inp is n:
                            return p.node
                return None
        return None


def _loop(
    step: Callable,
    init: Any,
    xs: list,
    n: int,
    *,
    start: int = 0,
    cond: Callable | None = None,
    checkpointed: bool = False,
    name: str,
    ys: bool = False,
    steps: Tracer | None = None,
    info: dict | None = None,
    counting: bool = False,
    vectorise: bool | dict = False,
) -> tuple[Any, Any]:
    """Trace ``step(i, carry, [x_t...]) -> (carry, y)`` into a loop node of ``n`` iterations
    (the bound when ``cond`` is given) and return the traced ``(carry, ys)``.

    A body that records run-time index checks (:mod:`tapejit.frontend.dynamic_index`) is traced again
    with one more carry per check, counting the iterations where it failed (``counting``:
    this is that trace); each count is then checked after the loop."""
    outer = _state()
    depth = outer.level
    c_leaves, c_struct = _flatten(init)
    carries = [_leaf(c) for c in c_leaves]
    x_ts = [x if dynamic_length(x) is not None else lift(x) for x in xs]
    for x in x_ts:
        if x.node.dtype != "f64":
            raise _fail(f"{name}: xs must be float arrays, got {x.node.type}")

    # the body: (i, carry..., x_t...) + params -> (carry'..., y_t...)
    body_st = BodyTrace(outer, f"l{depth}")
    body_st.counter_range = (start, start + n - 1)
    i_t = add_fixed(body_st, Type(()), "i", np.float64(start))
    c_ts = [add_fixed(body_st, c.node.type, f"c{k}", c.value) for k, c in enumerate(carries)]

    def first_row(x: Tracer) -> np.ndarray:  # the body's example x_t (zeros for no rows)
        v = np.asarray(x.value)
        return v[0] if v.shape[0] else np.zeros(v.shape[1:])

    xt_ts = [
        add_fixed(body_st, Type(x.node.shape[1:]), f"x{k}", first_row(x)) for k, x in enumerate(x_ts)
    ]
    result = _trace_body(body_st, step, (i_t, _unflatten(c_struct, c_ts), xt_ts))
    if body_st.index_checks and not counting:
        return _counted_loop(
            step, init, xs, n, len(body_st.index_checks), start=start, cond=cond,
            checkpointed=checkpointed, name=name, ys=ys, steps=steps, info=info,
            vectorise=vectorise,
        )  # fmt: skip
    new_carry, y = result
    nc_leaves, nc_struct = _flatten(new_carry)
    if nc_struct != c_struct or len(nc_leaves) != len(carries):
        raise TracingError(f"{name}: the body must return a carry with the structure of init")
    _current.append(body_st)
    try:
        out_c = [_leaf(c) for c in nc_leaves]
        y_leaves, y_struct = _flatten(y) if y is not None else ([], None)
        out_y = [_leaf(v) for v in y_leaves]
    finally:
        _current.pop()
    for k, (a, b) in enumerate(zip(carries, out_c)):
        if a.node.type != b.node.type:
            raise TracingError(
                f"{name}: carry {k} enters the body as {a.node.type} and leaves it as "
                f"{b.node.type}; a carry keeps its shape"
            )

    cond_st = None
    if cond is not None:
        cond_st = BodyTrace(outer, f"w{depth}")
        cc_ts = [add_fixed(cond_st, c.node.type, f"c{k}", c.value) for k, c in enumerate(carries)]
        verdict = _trace_body(cond_st, cond, (_unflatten(c_struct, cc_ts),))
        _current.append(cond_st)
        try:
            v = lift(verdict)
            if v.node.type.size != 1:
                raise _fail(f"{name}: cond must return a scalar, got {v.node.type}")
            node = ops.reshape(v.node, ())
            if node.dtype != "bool":
                node = ops.make(Op.NE, ops._float(node), ops.const(0.0))
        finally:
            _current.pop()

    if n == 0:  # no iteration: the carry as given, and ys with no rows
        empty = [_wrap(ops.const(0.0, (0, *t.node.shape))) for t in out_y]
        y_out = _unflatten(y_struct, empty) if ys and y is not None else None
        return _unflatten(c_struct, carries), y_out

    # the loop's params: every enclosing value the body or the condition uses
    params: list[Tracer] = []
    seen: set[int] = set()
    for p in body_st.params + (cond_st.params if cond_st is not None else []):
        if id(p.node) not in seen:
            seen.add(id(p.node))
            params.append(p)
    body = _finish(body_st, [t.node for t in out_c + out_y], params, "body")
    cgraph = None
    if cond_st is not None:
        cgraph = _finish(cond_st, [node], params, "cond")

    n_carry, n_xs = len(carries), len(x_ts)
    # loop-invariant code motion: values of the body that depend only on params, computed once
    body, nodes = ops.hoist_invariants(
        body, 1 + n_carry + n_xs, [p.node for p in params], f"h{depth}"
    )
    for extra in nodes[len(params) :]:
        params.append(_wrap(extra))
    if cgraph is not None and len(cgraph.inputs) < n_carry + len(params):
        cgraph = ops.extend_inputs(
            cgraph, [p.node.type for p in params[len(cgraph.inputs) - n_carry :]], f"h{depth}"
        )
    lead = [steps] if steps is not None else []
    args = lead + carries + x_ts + params
    for t in args:
        _values.setdefault(id(t.node), (t.node, t.value))
    if vectorise is not False and not ys and info is None and cgraph is None:
        # independent iterations (sums and scatter-adds of terms of the counter): array code
        plain = ops.LoopSpec(body, n_carry, n_xs, n, start=start, dynamic=steps is not None)
        node = ops.make(Op.LOOP, *(t.node for t in args), attrs=(plain,))
        counter = lift(np.arange(start, start + n, dtype=np.float64))
        _values.setdefault(id(counter.node), (counter.node, counter.value))
        vec = loop_vectorise.vectorise(node, counter.node, _Constants())
        if vec is not None:
            if isinstance(vectorise, dict):  # the caller asked to be told
                vectorise["vectorised"] = True
            return _unflatten(c_struct, [_wrap(v) for v in vec]), None
        # a loop of independent iterations kept (its rows are too large to batch, or an op
        # has no batching rule): its reverse sweep recomputes each iteration from the
        # carries instead of storing everything the body's VJP reads
        checkpointed = checkpointed or loop_vectorise.parallel(plain)
    vjp = None
    if any(outer.differentiable(t.node) for t in carries + x_ts + params):
        wrt_xs = tuple(outer.differentiable(x.node) for x in x_ts)
        wrt_params = tuple(outer.differentiable(p.node) for p in params)
        body, vjp = autodiff.loop_vjp(
            body, n_carry, n_xs, wrt_xs, wrt_params, checkpointed, prefix=f"b{depth}"
        )
    spec = ops.LoopSpec(
        body, n_carry, n_xs, n, cond=cgraph, start=start, vjp=vjp, dynamic=steps is not None
    )
    make = lambda *ns: ops.make(Op.LOOP, *ns, attrs=(spec,))  # noqa: E731
    loop = _wrap(make(*(t.node for t in args)))
    lay = ops.loop_layout(spec)
    final = [_build(lambda m, s=s: ops.segment(m, s), loop) for s in lay.carries]
    if info is not None:  # the number of iterations run
        info["steps_run"] = _build(lambda m: ops.index(m, (lay.steps,)), loop)
    carry_out = _unflatten(c_struct, final)
    if not ys:
        return carry_out, None
    stacked = [_build(lambda m, s=s: ops.segment(m, s), loop) for s in lay.ys[: len(out_y)]]
    return carry_out, (_unflatten(y_struct, stacked) if y is not None else None)
