"""Structured loops: the primitive ``loop``, whose body is a sub-graph (its ``defop`` block is
in :mod:`tapejit.core.ops`; see :mod:`tapejit.frontend.control` for the user API and ``docs/loops.md`` for
the design) — its static description (:class:`LoopSpec`, with :class:`History` and
:class:`Accumulate` links), the layout of its flat result, loop-invariant code motion for a
body, and its type rule, numpy reference and derivative rules. The body is never unrolled:
codegen lowers it to one function called once per iteration.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from . import ir
from . import ops as _ops  # (partially initialised here: read at call time)
from .ir import Node, Type
from .ops import Op, RuleError, _or_zero, add, const, index, input_node, make, reshape


@dataclass(frozen=True)
class LoopVJP:
    """How to differentiate a loop: the backward body and what the forward body stores.

    ``body`` (B) has inputs ``(i, ct_carry..., ct_param_acc..., residual_t..., ct_y_t..., x_t...,
    param...)`` and outputs ``(ct_carry_prev..., ct_param_acc'..., ct_x_t...)`` — cotangent
    accumulators only for the params in ``wrt_params``, ``ct_x`` only for the xs in ``wrt_xs``.
    The forward body's last ``n_residuals`` outputs are the residuals, stacked per iteration —
    but for a residual that is one of the body's ys (``shared[k] = j >= 0``: residual ``k`` is
    y ``j``), which B reads from that y's stack instead (not stored twice).
    """

    body: ir.Graph
    n_residuals: int
    wrt_xs: tuple[bool, ...]
    wrt_params: tuple[bool, ...]
    shared: tuple[int, ...] = ()


@dataclass(frozen=True)
class History:
    """A scanned input of a loop that reads the loop's own results: at iteration ``t``, xs
    number ``x`` is row ``rows[t]`` of the stacked y number ``y`` where ``rows[t] >= 0``, and row
    ``t`` of its operand (as any xs) where ``rows[t] < 0``. A graph model's vertex loop reads
    its parents' outputs so (``s = out[parent[v]]``). The row must be one the loop has written
    by then: an iteration run before ``t`` for a stored y, and, for an accumulated y (see
    :class:`Accumulate`), a row no iteration run at or after ``t`` adds to. ``rows`` has one
    entry per iteration (``max_steps``)."""

    x: int
    y: int
    rows: tuple[int, ...]


@dataclass(frozen=True)
class Accumulate:
    """A stacked y that iterations add to: it starts at zero, and iteration ``t`` adds its
    ``y_t`` to row ``rows[t]`` (nothing where ``rows[t] < 0``) instead of storing it at row
    ``t``. The reverse sweep of a loop with :class:`History` reads accumulates so: the
    cotangent of a parent's output is the sum of what its children's iterations give it."""

    y: int
    rows: tuple[int, ...]


def _runs_before(spec: LoopSpec, a: int, b: int) -> bool:
    """Whether iteration ``a`` runs before iteration ``b``."""
    return a > b if spec.reverse else a < b


def _check_links(spec: LoopSpec) -> None:
    """The rules of :class:`History` and :class:`Accumulate` (a ``ValueError`` otherwise)."""
    n_ys = len(spec.body.outputs) - spec.n_carry
    acc = {a.y: a for a in spec.accumulate}
    if len(acc) != len(spec.accumulate) or any(not 0 <= y < n_ys for y in acc):
        raise ValueError(f"a loop accumulates into ys {sorted(acc)} of its {n_ys}")
    for a in spec.accumulate:
        if len(a.rows) != spec.max_steps or any(r >= spec.max_steps for r in a.rows):
            raise ValueError("an accumulated y needs one row below max_steps per iteration")
    xs = spec.body.inputs[1 + spec.n_carry : 1 + spec.n_carry + spec.n_xs]
    ys = spec.body.outputs[spec.n_carry :]
    seen: set[int] = set()
    for h in spec.history:
        if not (0 <= h.x < spec.n_xs and 0 <= h.y < n_ys) or h.x in seen:
            raise ValueError(f"a loop's history link {h.x} <- {h.y} names no xs or y")
        seen.add(h.x)
        if xs[h.x].type != ys[h.y].type:
            raise TypeError(f"history xs {h.x} ({xs[h.x].type}) reads y {h.y} ({ys[h.y].type})")
        if len(h.rows) != spec.max_steps or any(r >= spec.max_steps for r in h.rows):
            raise ValueError("a history link needs one row below max_steps per iteration")
        a = acc.get(h.y)
        if a is None:
            bad = [t for t, r in enumerate(h.rows) if r >= 0 and not _runs_before(spec, r, t)]
        else:  # every addition to a row runs before the row is read
            last: dict[int, int] = {}
            for u, r in enumerate(a.rows):
                if r >= 0 and (r not in last or _runs_before(spec, last[r], u)):
                    last[r] = u
            bad = [t for t, r in enumerate(h.rows) if r in last and not _runs_before(spec, last[r], t)]
        if bad:
            raise ValueError(
                f"iteration {bad[0]} of a loop reads row {h.rows[bad[0]]} of y {h.y} before "
                "that row is complete"
            )


def _digest_rows(links) -> str:
    text = ";".join(f"{type(k).__name__}{getattr(k, 'x', '')}/{k.y}:{k.rows}" for k in links)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class LoopSpec:
    """The static description of a ``loop`` node (its one attribute).

    ``body``: inputs ``(i, carry..., x_t..., param...)``, outputs ``(carry'..., y_t...)``; ``i``
    is the f64 iteration index ``start + t``. ``cond`` (optional): inputs ``(carry...,
    param...)``, output a bool scalar; the loop stops before the first iteration where it is
    false. The node's arguments are ``[steps] carry_init... xs... params...`` — ``steps``
    (an f64 scalar, present when ``dynamic``) bounds the iterations run at run time; each ``x``
    has shape ``(max_steps, *x_t.shape)``. ``reverse`` runs ``t = steps-1, ..., 0``. The result
    is one flat f64 vector (see :func:`loop_layout`): the final carries, each ``y`` stacked to
    ``(max_steps, *y_t.shape)``, and the number of iterations run. Stacked entries past the
    iterations run are unspecified (zero in the reference): only residual stacks can have such
    entries (user-visible ys come from loops that always run ``max_steps`` iterations), and the
    backward loop reads exactly the iterations that ran. ``history``: xs that read the loop's
    own stacked ys (:class:`History`); ``accumulate``: stacked ys that iterations add to at
    rows of a table (:class:`Accumulate`) — the re-rolled vertex loop of a graph model and its
    reverse sweep.
    """

    body: ir.Graph
    n_carry: int
    n_xs: int
    max_steps: int
    cond: ir.Graph | None = None
    start: int = 0
    reverse: bool = False
    dynamic: bool = False
    vjp: LoopVJP | None = None
    history: tuple[History, ...] = ()
    accumulate: tuple[Accumulate, ...] = ()
    _repr: list = field(default_factory=list, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.history or self.accumulate:
            _check_links(self)

    def __repr__(self) -> str:
        # deterministic and unique per body (CSE keys, kernel keys and the cache key print it)
        if not self._repr:

            def digest(g):
                return (
                    "-"
                    if g is None
                    else hashlib.sha256(ir.format_graph(g).encode()).hexdigest()[:16]
                )

            v = self.vjp
            wrt = "".join("1" if w else "0" for w in (v.wrt_xs + v.wrt_params if v else ()))
            vjp = "-" if v is None else f"{digest(v.body)}/{v.n_residuals}/{wrt}{v.shared}"
            self._repr.append(
                f"loop(max_steps={self.max_steps}, carry={self.n_carry}, xs={self.n_xs}, "
                f"start={self.start}, reverse={self.reverse}, dynamic={self.dynamic}, "
                f"body={digest(self.body)}, cond={digest(self.cond)}, vjp={vjp}"
                + (
                    f", links={_digest_rows(self.history + self.accumulate)})"
                    if self.history or self.accumulate
                    else ")"
                )
            )
        return self._repr[0]


@dataclass(frozen=True)
class Segment:
    """A part of a loop's flat result: ``offset`` and ``size`` in elements, and its shape."""

    offset: int
    size: int
    shape: tuple[int, ...]


@dataclass(frozen=True)
class LoopLayout:
    carries: tuple[Segment, ...]
    ys: tuple[Segment, ...]  # stacked: shape (max_steps, *y_t.shape)
    steps: int  # offset of the iterations-run counter
    size: int


def loop_layout(spec: LoopSpec) -> LoopLayout:
    """Where each result of a loop lives in its flat f64 result."""
    outs = spec.body.outputs
    off, carries, ys = 0, [], []
    for o in outs[: spec.n_carry]:
        carries.append(Segment(off, o.type.size, o.shape))
        off += o.type.size
    for o in outs[spec.n_carry :]:
        shape = (spec.max_steps, *o.shape)
        ys.append(Segment(off, spec.max_steps * o.type.size, shape))
        off += spec.max_steps * o.type.size
    return LoopLayout(tuple(carries), tuple(ys), off, off + 1)


#: Ops that compute nothing (views): not worth hoisting out of a loop body on their own.
_FREE = (Op.RESHAPE,)


def hoist_invariants(
    body: ir.Graph, n_fixed: int, params: list[Node], prefix: str
) -> tuple[ir.Graph, list[Node]]:
    """Loop-invariant code motion for a loop body.

    ``body``'s inputs are ``n_fixed`` per-iteration inputs followed by one input per node of
    ``params`` (the loop's operands). A body node that depends only on params and constants
    computes the same value in every iteration: each such node that an iteration-dependent node
    (or an output) reads is rebuilt outside the loop on ``params`` and passed in as a new param.
    Returns the new body and param list (``params`` plus the hoisted nodes).
    """
    pin = body.inputs[n_fixed:]
    invariant = {id(p) for p in pin}
    nodes = body.nodes
    for n in nodes:
        if n.op == Op.CONST or (
            n.op != Op.INPUT and n.args and all(id(a) in invariant for a in n.args)
        ):
            invariant.add(id(n))
    frontier: list[Node] = []
    seen: set[int] = set()

    def visit(a: Node) -> None:
        if id(a) in invariant and a.op not in _ops.LEAF and id(a) not in seen:
            if a.op in _FREE:  # hoist what the view reads, keep the view in the body
                return visit(a.args[0])
            seen.add(id(a))
            frontier.append(a)

    for n in nodes:
        if id(n) not in invariant:
            for a in n.args:
                visit(a)
    for o in body.outputs:
        visit(o)
    if not frontier:
        return body, list(params)
    outer = ir.substitute(tuple(frontier), {id(p): q for p, q in zip(pin, params)})
    start = len(body.inputs)
    new_in = [input_node(start + k, f"{prefix}h{k}", n.type) for k, n in enumerate(frontier)]
    outs = ir.substitute(body.outputs, {id(n): m for n, m in zip(frontier, new_in)})
    inputs = body.inputs + tuple(new_in)
    g = ir.Graph(body.name, inputs, ("inactive",) * len(inputs), outs)
    return g, list(params) + list(outer)


def extend_inputs(g: ir.Graph, types: list[Type], prefix: str) -> ir.Graph:
    """``g`` with unused inputs of ``types`` appended (a sub-graph taking a loop's new params)."""
    start = len(g.inputs)
    extra = tuple(input_node(start + k, f"{prefix}e{k}", t) for k, t in enumerate(types))
    return g.replace(inputs=g.inputs + extra, kinds=g.kinds + ("inactive",) * len(extra))


def _loop(types, attrs):
    (spec,) = attrs
    body = spec.body
    want = [t.type for t in body.inputs[1:]]
    lead = 1 if spec.dynamic else 0
    if len(types) != lead + len(want):
        raise ValueError(f"loop takes {lead + len(want)} operands, got {len(types)}")
    if spec.dynamic and types[0] != Type(()):
        raise TypeError(f"the step count of a loop is an f64 scalar, got {types[0]}")
    for k, (t, w) in enumerate(zip(types[lead:], want)):
        if spec.n_carry <= k < spec.n_carry + spec.n_xs:
            w = Type((spec.max_steps, *w.shape), w.dtype)
        if t != w:
            raise TypeError(f"loop operand {k} has type {t}, the body expects {w}")
    outs = body.outputs
    if len(outs) < spec.n_carry or [o.type for o in outs[: spec.n_carry]] != want[: spec.n_carry]:
        raise TypeError("a loop body must return carries of the types it takes")
    if any(o.dtype != "f64" for o in outs) or body.inputs[0].type != Type(()):
        raise TypeError("loop bodies take an f64 index and return f64 values")
    if spec.cond is not None and spec.cond.outputs[0].type != Type((), "bool"):
        raise TypeError("a loop condition returns a bool scalar")
    return Type((loop_layout(spec).size,), "f64")


def eval_graph(g: ir.Graph, values: list) -> list:
    """The outputs of ``g`` on ``values`` (one per input, in order), by the reference
    implementations: the numpy semantics of a sub-graph."""
    env = {id(n): np.asarray(v, dtype=ir.NUMPY_DTYPE[n.dtype]) for n, v in zip(g.inputs, values)}
    with np.errstate(all="ignore"):
        for n in g.nodes:
            if id(n) in env:
                continue
            if n.op == Op.CONST:
                env[id(n)] = np.full(n.shape, n.attrs[0], dtype=ir.NUMPY_DTYPE[n.dtype])
            else:
                env[id(n)] = np.asarray(
                    _ops.OPS[n.op].ref(n.attrs, *(env[id(a)] for a in n.args)),
                    dtype=ir.NUMPY_DTYPE[n.dtype],
                )
    return [env[id(o)] for o in g.outputs]


def _loop_ref(attrs, *args):
    (spec,) = attrs
    lay = loop_layout(spec)
    lead = 1 if spec.dynamic else 0
    steps = spec.max_steps
    if spec.dynamic:
        steps = max(0, min(spec.max_steps, int(np.asarray(args[0]))))
    carries = [np.asarray(a, dtype=np.float64) for a in args[lead : lead + spec.n_carry]]
    xs = args[lead + spec.n_carry : lead + spec.n_carry + spec.n_xs]
    params = list(args[lead + spec.n_carry + spec.n_xs :])
    out = np.zeros(lay.size)
    hist = {h.x: h for h in spec.history}
    accs = {a.y: a for a in spec.accumulate}
    x_in = spec.body.inputs[1 + spec.n_carry : 1 + spec.n_carry + spec.n_xs]

    def row(seg: Segment, r: int) -> slice:
        size = seg.size // spec.max_steps
        return slice(seg.offset + r * size, seg.offset + (r + 1) * size)

    def x_t(k: int, t: int):
        h = hist.get(k)
        if h is not None and h.rows[t] >= 0:
            return out[row(lay.ys[h.y], h.rows[t])].reshape(x_in[k].shape).copy()
        return np.asarray(xs[k])[t]

    done = 0
    for t in reversed(range(steps)) if spec.reverse else range(steps):
        if spec.cond is not None and not bool(eval_graph(spec.cond, carries + params)[0]):
            break
        res = eval_graph(
            spec.body,
            [np.float64(spec.start + t), *carries, *(x_t(k, t) for k in range(len(xs))), *params],
        )
        carries = res[: spec.n_carry]
        for k, (seg, y) in enumerate(zip(lay.ys, res[spec.n_carry :])):
            a = accs.get(k)
            if a is None:
                out[row(seg, t)] = np.ravel(y)
            elif a.rows[t] >= 0:
                out[row(seg, a.rows[t])] += np.ravel(y)
        done += 1
    for seg, c in zip(lay.carries, carries):
        out[seg.offset : seg.offset + seg.size] = np.ravel(c)
    out[lay.steps] = done
    return out


def segment(x: Node, seg: Segment) -> Node:
    return reshape(index(x, ((seg.offset, seg.offset + seg.size, 1),)), seg.shape)


def _loop_vjp(g, out, *args):
    """Cotangents of a loop's operands: a reverse loop over the stored residuals, running as
    many iterations as the forward loop did (Griewank & Walther, ch. 12: the reverse sweep of a
    loop reads a stack of its iterations' states; JAX's scan transpose does the same)."""
    spec: LoopSpec = out.attrs[0]
    v = spec.vjp
    if v is None:
        raise RuleError(
            "op 'loop' has no VJP rule for this loop (a backward loop, or one built "
            "without differentiation): reverse mode over a loop's gradient — tapejit.grad "
            "nested around a function with a loop — is not supported; for second derivatives "
            "use tapejit.hessian or tapejit.hvp (forward over reverse), which are"
        )
    if spec.accumulate:
        raise RuleError("op 'loop' has no VJP rule for a loop that accumulates into its ys")
    lay = loop_layout(spec)
    n_user = len(lay.ys) - v.n_residuals
    if any(h.y >= n_user for h in spec.history):
        raise RuleError("op 'loop' has no VJP rule for a history input reading a residual stack")
    lead = 1 if spec.dynamic else 0
    xs = args[lead + spec.n_carry : lead + spec.n_carry + spec.n_xs]
    params = args[lead + spec.n_carry + spec.n_xs :]
    ct_c = [segment(g, s) for s in lay.carries]
    ct_y = [segment(g, s) for s in lay.ys[:n_user]]
    stored = iter([segment(out, s) for s in lay.ys[n_user:]])
    res = [segment(out, lay.ys[j]) if j >= 0 else next(stored) for j in v.shared] or list(stored)
    steps = index(out, (lay.steps,))
    acc0 = [const(0.0, p.shape) for p, w in zip(params, v.wrt_params) if w]
    n_acc = len(acc0)
    linked = {h.x for h in spec.history}
    plain = [x for k, x in enumerate(xs) if k not in linked]
    body, n_ys_plain = v.body, sum(w for k, w in enumerate(v.wrt_xs) if k not in linked)
    history: tuple[History, ...] = ()
    accumulate: tuple[Accumulate, ...] = ()
    extra: list[Node] = []
    if spec.history:
        body, history, accumulate = _history_vjp_body(spec, n_acc, len(res), n_user)
        extra = [ct_y[h.y] for h in spec.history]  # never read: every row is a history row
    n_fixed = 1 + spec.n_carry + n_acc + len(res) + len(ct_y) + len(plain) + len(extra)
    bbody, bparams = hoist_invariants(body, n_fixed, list(params), "v")
    bspec = LoopSpec(
        bbody,
        spec.n_carry + n_acc,
        len(res) + len(ct_y) + len(plain) + len(extra),
        spec.max_steps,
        start=spec.start,
        reverse=not spec.reverse,
        dynamic=True,
        history=history,
        accumulate=accumulate,
    )
    bwd = make(
        Op.LOOP, steps, *ct_c, *acc0, *res, *ct_y, *plain, *extra, *bparams, attrs=(bspec,)
    )
    blay = loop_layout(bspec)
    ct_init = [segment(bwd, s) for s in blay.carries[: spec.n_carry]]
    accs = iter(segment(bwd, s) for s in blay.carries[spec.n_carry :])
    ct_xs = iter(segment(bwd, s) for s in blay.ys[:n_ys_plain])
    ct_fallback = {h.x: segment(bwd, blay.ys[n_ys_plain + k]) for k, h in enumerate(spec.history)}
    return (
        *([None] * lead),
        *ct_init,
        *(
            ct_fallback[k] if k in linked else (next(ct_xs) if w else None)
            for k, w in enumerate(v.wrt_xs)
        ),
        *(next(accs) if w else None for w in v.wrt_params),
    )


def _history_vjp_body(
    spec: LoopSpec, n_acc: int, n_res: int, n_user: int
) -> tuple[ir.Graph, tuple[History, ...], tuple[Accumulate, ...]]:
    """The backward body of a loop with :class:`History` xs, and the links of its backward
    loop. An iteration's ``y_t`` that later iterations read (row ``r`` of y, read by iteration
    ``u`` with ``rows[u] = r``) gets their cotangents on top of its own: the backward loop
    *accumulates* the cotangent of each history xs into row ``rows[u]`` of a stacked y, and the
    iteration ``r`` reads row ``r`` of that (a history xs of the backward loop, the rows all its
    own), added to its ``y``'s cotangent. The history xs's operand gets the cotangent of the
    iterations that read it (``rows[t] < 0``), accumulated into row ``t``, zero elsewhere.

    The body ``v.body`` (:func:`tapejit.ad.autodiff.loop_vjp` with ``linked``) takes ``(i,
    ct_carry..., acc..., residual..., ct_y..., x_t (not linked)..., param...)``; the result
    takes ``a_t`` (one per history xs) after the ``x_t`` and returns, after ``ct_carry`` and
    ``acc``: the ``ct_x_t`` of the xs not linked (for those differentiated), then per history
    xs its cotangent twice (for its operand, for the accumulated rows)."""
    v = spec.vjp
    B = v.body
    nc = spec.n_carry
    T = spec.max_steps
    linked = {h.x for h in spec.history}
    n_plain = spec.n_xs - len(linked)
    head = 1 + nc + n_acc + n_res
    ins = B.inputs
    ct_y_in = ins[head : head + n_user]
    params = ins[head + n_user + n_plain :]
    body_ys = spec.body.outputs[nc:]
    a_in = [
        input_node(head + n_user + n_plain + k, f"vh{k}", body_ys[h.y].type)
        for k, h in enumerate(spec.history)
    ]
    start = head + n_user + n_plain + len(a_in)
    mapping: dict[int, Node] = {
        id(p): input_node(start + k, p.attrs[1], p.type) for k, p in enumerate(params)
    }
    for j, c in enumerate(ct_y_in):
        total = c
        for h, a in zip(spec.history, a_in):
            if h.y == j:
                total = add(total, a)
        if total is not c:
            mapping[id(c)] = total
    outs = B.outputs
    ct_xs = iter(outs[nc + n_acc :])
    plain_out, hist_out = [], {}
    for k, w in enumerate(v.wrt_xs):
        if k in linked:
            if not w:
                raise AssertionError("a history xs of a loop is always differentiated")
            hist_out[k] = next(ct_xs)
        elif w:
            plain_out.append(next(ct_xs))
    per_link = [hist_out[h.x] for h in spec.history]
    new_outs = ir.substitute(
        (*outs[: nc + n_acc], *plain_out, *per_link, *per_link), mapping
    )
    new_ins = (
        *ins[: head + n_user + n_plain],
        *a_in,
        *(mapping[id(p)] for p in params),
    )
    graph = ir.Graph(f"{B.name}.h", new_ins, ("inactive",) * len(new_ins), new_outs)
    n_ys_plain, m = len(plain_out), len(spec.history)
    history = tuple(
        History(n_res + n_user + n_plain + k, n_ys_plain + m + k, tuple(range(T)))
        for k in range(m)
    )
    accumulate = tuple(
        Accumulate(n_ys_plain + k, tuple(t if r < 0 else -1 for t, r in enumerate(h.rows)))
        for k, h in enumerate(spec.history)
    ) + tuple(Accumulate(n_ys_plain + m + k, h.rows) for k, h in enumerate(spec.history))
    return graph, history, accumulate


def _loop_jvp(t, out, *args):
    """Tangent of a loop's result: a loop over the JVP of the body (built by
    :func:`tapejit.ad.forward.loop_body_jvp`), which carries the tangents of the carries alongside
    the primal carries, scans the tangents of the xs that have one, takes the tangents of the
    params that have one as params, stacks the tangents of the ys, and runs under the same
    condition and step count (a ``while_loop``'s condition gets no tangent; neither does the
    step count, an integer). Any loop differentiates so, backward loops of reverse mode
    included (forward-over-reverse). The tangent loop recomputes the primal carries (it needs
    them) but not the ys; its flat result's tangent segments are scattered into the layout of
    ``out``, with zeros for the segments and step counter that have no tangent."""
    from ..ad import forward  # forward imports this module

    spec: LoopSpec = out.attrs[0]
    lead = 1 if spec.dynamic else 0
    nc, nx = spec.n_carry, spec.n_xs
    carries, xs = args[lead : lead + nc], args[lead + nc : lead + nc + nx]
    params = args[lead + nc + nx :]
    tc, tx, tp = t[lead : lead + nc], t[lead + nc : lead + nc + nx], t[lead + nc + nx :]
    jv = forward.loop_body_jvp(
        spec, tuple(c is not None for c in tc), tuple(x is not None for x in tx),
        tuple(p is not None for p in tp),
    )  # fmt: skip
    if not any(jv.carries) and not any(jv.ys):
        return None
    t_init = [_or_zero(a, c) for c, a, w in zip(carries, tc, jv.carries) if w]
    t_xs = [_or_zero(a, x) for a, x, w in zip(tx, xs, jv.xs) if w]
    t_params = [a for a in tp if a is not None]
    n_fixed = 1 + nc + len(t_init) + nx + len(t_xs)
    body, new_params = hoist_invariants(jv.body, n_fixed, [*params, *t_params], "j")
    cond = jv.cond
    extra = new_params[len(params) + len(t_params) :]
    if cond is not None and extra:
        cond = extend_inputs(cond, [p.type for p in extra], "j")
    history, accumulate = _tangent_links(spec, jv)
    jspec = LoopSpec(body, nc + len(t_init), nx + len(t_xs), spec.max_steps, cond=cond,
                     start=spec.start, reverse=spec.reverse, dynamic=spec.dynamic,
                     history=history, accumulate=accumulate)  # fmt: skip
    loop = make(Op.LOOP, *args[:lead], *carries, *t_init, *xs, *t_xs, *new_params, attrs=(jspec,))
    lay, jlay = loop_layout(spec), loop_layout(jspec)
    src = iter(jlay.carries[nc:] + jlay.ys[len(jv.keep) :])
    pieces: list[list[int]] = []  # [source offset, target offset, size], adjacent ones merged
    for seg, w in zip(lay.carries + lay.ys, jv.carries + jv.ys):
        if w:
            s = next(src)
            last = pieces[-1] if pieces else None
            if last and last[0] + last[2] == s.offset and last[1] + last[2] == seg.offset:
                last[2] += seg.size
            else:
                pieces.append([s.offset, seg.offset, seg.size])
    acc = const(0.0, out.shape)
    for a, b, n in pieces:
        acc = make(Op.SCATTER, acc, index(loop, ((a, a + n, 1),)), attrs=((b, b + n, 1),))
    return acc


def _tangent_links(spec: LoopSpec, jv) -> tuple[tuple[History, ...], tuple[Accumulate, ...]]:
    """The links of a loop's tangent loop (:func:`_loop_jvp`): its history xs read the primal
    ys it keeps (``jv.keep``, its first ys) as the loop's do, the tangents of history xs the
    tangents of those ys (after the kept ys) at the same rows; accumulated ys, kept or
    tangent, accumulate at the same rows (the tangent of a sum is the sum of the tangents)."""
    nx, keep = spec.n_xs, jv.keep
    tx_pos = {k: j for j, k in enumerate(k for k, w in enumerate(jv.xs) if w)}
    ty_pos = {y: j for j, y in enumerate(y for y, w in enumerate(jv.ys) if w)}
    history = tuple(History(h.x, keep.index(h.y), h.rows) for h in spec.history) + tuple(
        History(nx + tx_pos[h.x], len(keep) + ty_pos[h.y], h.rows)
        for h in spec.history
        if h.x in tx_pos
    )
    accumulate = tuple(
        Accumulate(keep.index(a.y), a.rows) for a in spec.accumulate if a.y in keep
    ) + tuple(
        Accumulate(len(keep) + ty_pos[a.y], a.rows) for a in spec.accumulate if a.y in ty_pos
    )
    return history, accumulate


