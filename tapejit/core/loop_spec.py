"""The static description of a structured loop — :class:`LoopSpec` (the one attribute of a
``loop`` node), its :class:`History` and :class:`Accumulate` links and the :class:`LoopVJP`
reverse mode builds for it — the layout of a loop's flat result (:func:`loop_layout`), and
loop-invariant code motion for a body (:func:`hoist_invariants`).

The ``loop`` primitive's rules are the loop family, :mod:`tapejit.core.ops_loop`; its JVP rule
is forward mode's (:mod:`tapejit.ad.forward`). :mod:`tapejit.core.ops` re-exports these names
(``ops.LoopSpec``). Imports only ``ir`` and ``opcodes``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from . import ir
from .ir import Node, Type
from .opcodes import Op, input_node


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
#: The leaves (the registry's group ``leaf``): never hoisted, a body input or a constant.
_LEAVES = (Op.INPUT, Op.CONST)


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
        if id(a) in invariant and a.op not in _LEAVES and id(a) not in seen:
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
