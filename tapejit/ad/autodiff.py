"""Reverse mode on the IR: activity analysis, then VJP rules in reverse topological order.

Input: a forward graph with one scalar output. Output: one *joint* graph with the same inputs whose
outputs are the primal value followed by the cotangent (gradient) of each active input.

Activity analysis (Hascoët & Pascual, "The Tapenade automatic differentiation tool", ACM TOMS
39(3), 2013, sec. 3): a node is *active* iff it depends on an active input through
differentiable ops and the output depends on it. Only active nodes receive cotangents, so
constants — however large — cost no backward work. Ops in :data:`tapejit.core.ops.NONDIFFERENTIABLE`
(comparisons, ``sign``, casts) cut the dependency: their results are piecewise constant.

Cotangents accumulate by addition. The cotangent of an indexing op is :class:`tapejit.core.ops.Sparse`:
all the sparse contributions to one operand become one chain of ``scatter_add`` nodes into a single
accumulator (one O(n) zero-fill, then O(1) per access) — never a dense one-hot array per access.
"""

from __future__ import annotations

from ..core import ir, ops
from ..core.ir import Graph, Node, Type, substitute, toposort, verify
from ..core.ops import Op

#: Views that compute (next to) nothing: a loop's backward body recomputes them from their
#: operand rather than storing them.
_VIEWS = (Op.RESHAPE, Op.INDEX)


def carries_derivative(n: Node) -> bool:
    """The activity rule: a derivative passes through ``n`` from its operands unless its op is
    nondifferentiable (comparisons, ``floor``, ``stop_gradient``...) or it is a constant."""
    return n.op not in ops.NONDIFFERENTIABLE and n.op != Op.CONST


def varied_from(nodes: list[Node], seeds: set[int]) -> set[int]:
    """``id`` of every node of ``nodes`` (in topological order) that depends on a node whose
    ``id`` is in ``seeds`` through differentiable ops, and the seeds themselves. The one
    dependency analysis of both modes (reverse mode here, forward mode in
    :mod:`tapejit.ad.forward`), for graphs and for loop bodies; :func:`depends_on_active` asks
    the same question of one node while a trace is built."""
    varied = set(seeds)
    for n in nodes:
        if carries_derivative(n) and any(id(a) in varied for a in n.args):
            varied.add(id(n))
    return varied


def depends_on_active(n: Node, is_active_input, memo: dict[int, tuple]) -> bool:
    """Whether ``n`` depends on an input for which ``is_active_input`` holds, through
    differentiable ops (the rule of :func:`varied_from`, asked of one node, memoised in
    ``memo``): the tracer's question when a value is converted to a number."""

    def decide(m: Node) -> bool | None:
        if m.op == Op.INPUT:
            return is_active_input(m)
        return None if carries_derivative(m) else False

    return ir.depends(n, decide, memo)


def active_nodes(g: Graph) -> set[int]:
    """``id`` of every node that depends on an active input through differentiable ops.

    (Every node of ``g.nodes`` reaches an output by construction, so this is the active set.)
    """
    return varied_from(g.nodes, {id(n) for n, k in zip(g.inputs, g.kinds) if k == "active"})


def _fit(ct, arg: Node):
    """Sum a dense cotangent over the axes along which a scalar operand was broadcast."""
    if isinstance(ct, ops.Sparse) or ct.shape == arg.shape:
        return ct
    if arg.shape == ():
        return ops.reduce(Op.REDUCE_SUM, ct)
    raise ops.RuleError(f"cotangent of shape {ct.shape} for an operand of shape {arg.shape}")


def _total(contribs: list, node: Node) -> Node:
    """One cotangent from dense contributions (added) and sparse ones (scatter-added). The
    first sparse one into zeros is *written* (``scatter``; ``0 + g`` is ``g`` but for the sign
    of a zero, which no cotangent's use tells apart): memory planning can then compute it
    straight into its block (:func:`tapejit.passes.memplan.plan`)."""
    dense = [c for c in contribs if isinstance(c, Node)]
    sparse = [c for c in contribs if isinstance(c, ops.Sparse)]
    acc = None
    for c in dense:
        acc = c if acc is None else ops.add(acc, c)
    zeros = None
    if sparse and acc is None:
        acc = zeros = ops.const(0.0, node.shape)
    for s in sparse:
        op = Op.SCATTER if acc is zeros else Op.SCATTER_ADD
        acc = ops.make(op, acc, s.g, attrs=s.items)
    return acc if acc is not None else ops.const(0.0, node.shape)


def vjp_graph(g: Graph, order: tuple[int, ...] | None = None) -> Graph:
    """The joint graph ``(value, grad_0, ..., grad_k)`` of ``g`` for its active inputs, the
    gradients in the order of the input positions ``order`` (default: input order; ``compile``
    passes ``argnums`` as the user gave them).

    Raises :class:`tapejit.core.ops.RuleError` naming an op that lacks a VJP rule.
    """
    if len(g.outputs) != 1 or g.outputs[0].shape != ():
        raise ValueError("reverse mode needs a graph with exactly one scalar output")
    (out,) = g.outputs
    contribs = _sweep(g.nodes, active_nodes(g), {id(out): [ops.const(1.0)]})
    grads, names = [], []
    active_pos = [i for i, k in enumerate(g.kinds) if k == "active"]
    if order is not None and sorted(order) != active_pos:
        raise ValueError(f"order {order} is not a permutation of the active inputs {active_pos}")
    for i in active_pos if order is None else order:
        n = g.inputs[i]
        grads.append(_total(contribs.get(id(n), []), n))
        names.append(f"grad_{n.attrs[1]}")
    return verify(g.replace(outputs=(out, *grads), output_names=("value", *names)))


def _sweep(nodes: list[Node], varied: set[int], seeds: dict[int, list]) -> dict[int, list]:
    """The reverse sweep over ``nodes`` (topological order) from cotangent ``seeds``; returns
    the contributions left at nodes without a rule to pass them on (the inputs)."""
    contribs = {k: list(v) for k, v in seeds.items()}
    for n in reversed(nodes):
        cs = contribs.get(id(n))
        if n.op == Op.INPUT or not cs or id(n) not in varied:
            continue
        del contribs[id(n)]
        cts = ops.vjp_rule(n.op)(_total(cs, n), n, *n.args)
        for arg, ct in zip(n.args, cts):
            if ct is not None and id(arg) in varied:
                contribs.setdefault(id(arg), []).append(_fit(ct, arg))
    return contribs


def _accumulate(acc: Node, contribs: list) -> Node:
    """A loop param's accumulator ``acc`` plus an iteration's contributions. A row read at a
    traced position (``take``) contributes ``add_at(0, idx, g)``: it is added at its row of
    ``acc`` (``add_at(acc, idx, g)``, O(row) per iteration) rather than as a dense array."""
    rows = [c for c in contribs if _row_into_zeros(c)]
    rest = [c for c in contribs if not _row_into_zeros(c)]
    if rest:
        acc = ops.add(acc, _total(rest, acc))
    for r in rows:
        acc = ops.make(Op.ADD_AT, acc, r.args[1], r.args[2])
    return acc


def _row_into_zeros(c) -> bool:
    return isinstance(c, Node) and c.op == Op.ADD_AT and ops.is_const(c.args[0], 0.0)


def loop_vjp(
    body: Graph,
    n_carry: int,
    n_xs: int,
    wrt_xs: tuple[bool, ...],
    wrt_params: tuple[bool, ...],
    checkpoint: bool,
    prefix: str,
    linked: frozenset[int] = frozenset(),
) -> tuple[Graph, ops.LoopVJP]:
    """Split a loop body for reverse mode: ``(forward body with residual outputs, LoopVJP)``.

    ``body`` has inputs ``(i, carry..., x_t..., param...)`` and outputs ``(carry'..., y_t...)``.
    The backward body B (see :class:`tapejit.core.ops.LoopVJP`) is the VJP of one iteration. Which
    forward values B reads from the residual stack rather than recomputing (the choice of
    Griewank & Walther's *taping* vs *recomputation*, ch. 12):

    * default: every value of the iteration that a backward node reads and that varies from
      iteration to iteration (depends on ``i``, a carry or an ``x_t``) is stored; values that
      depend only on params and constants are recomputed (they are loop-invariant);
    * ``checkpoint``: only the carries are stored; B recomputes the iteration's forward values
      from them (less memory, about one more forward evaluation of the body per iteration).

    ``x_t`` is never stored: B reads it from the stacked ``xs`` — except for the xs in
    ``linked`` (positions among the xs: those a :class:`tapejit.core.ops.History` reads from the
    loop's own ys), which have no stack B could read: they are residuals where B reads them,
    and B takes no ``x_t`` input for them.
    """
    ins = body.inputs
    i_in, carries = ins[0], ins[1 : 1 + n_carry]
    xs, params = ins[1 + n_carry : 1 + n_carry + n_xs], ins[1 + n_carry + n_xs :]
    outs = body.outputs
    wrt = (
        list(carries)
        + [x for x, w in zip(xs, wrt_xs) if w]
        + [p for p, w in zip(params, wrt_params) if w]
    )
    nodes = body.nodes
    varied = varied_from(nodes, {id(n) for n in wrt})

    def new_input(k: int, name: str, t: Type) -> Node:
        return ops.input_node(k, f"{prefix}{name}", t)

    # B's cotangent inputs, then the reverse sweep over one iteration
    ct_out = [new_input(0, f"ct{k}", o.type) for k, o in enumerate(outs)]  # positions fixed below
    seeds: dict[int, list] = {}
    for o, ct in zip(outs, ct_out):
        if id(o) in varied:
            seeds.setdefault(id(o), []).append(ct)
    contribs = _sweep(nodes, varied, seeds)
    acc_in = [
        new_input(0, f"acc{k}", p.type) for k, (p, w) in enumerate(zip(params, wrt_params)) if w
    ]
    ct_carry = [_total(contribs.get(id(c), []), c) for c in carries]
    ct_params = [contribs.get(id(p)) for p, w in zip(params, wrt_params) if w]
    # a param this iteration does not use keeps its accumulator (no ``acc + 0.0``)
    ct_acc = [_accumulate(a, cs) if cs else a for a, cs in zip(acc_in, ct_params)]
    ct_xs = [_total(contribs.get(id(x), []), x) for x, w in zip(xs, wrt_xs) if w]
    b_outs = tuple(ct_carry + ct_acc + ct_xs)

    # residuals: forward values the backward nodes read
    forward = {id(n) for n in nodes}
    variant = {id(n) for n in [i_in, *carries, *xs]}
    for n in nodes:
        if any(id(a) in variant for a in n.args):
            variant.add(id(n))
    keep_in = {id(n) for n in [i_in, *params]} | {
        id(x) for k, x in enumerate(xs) if k not in linked
    }
    residuals: list[Node] = []
    if checkpoint:
        residuals = list(carries) + [x for k, x in enumerate(xs) if k in linked]
    else:
        wanted: set[int] = set()
        byid = {id(n): n for n in nodes}

        def want(a: Node) -> None:
            # a reshape or an index computes (next to) nothing: recompute it in B and store its
            # operand instead (x_t itself is never stored: B reads the stacked xs)
            while a.op in _VIEWS and id(a.args[0]) in forward:
                a = a.args[0]
            if id(a) in variant and id(a) not in keep_in:
                wanted.add(id(a))

        for n in toposort(b_outs):
            if id(n) in forward:
                continue
            for a in n.args:
                if id(a) in forward:
                    want(a)
        for o in b_outs:
            if id(o) in forward:
                want(byid[id(o)])
        hist = [x for k, x in enumerate(xs) if k in linked]
        order = [*carries, *hist, *(n for n in nodes if n.op != Op.INPUT)]
        residuals = [n for n in order if id(n) in wanted]

    # B's inputs, in order: i, ct_carry', acc, residual_t, ct_y_t, x_t, param
    b_inputs: list[Node] = []
    mapping: dict[int, Node] = {}

    def take(src: Node | None, name: str, t: Type) -> Node:
        node = ops.input_node(len(b_inputs), f"{prefix}{name}", t)
        b_inputs.append(node)
        if src is not None:
            mapping[id(src)] = node
        return node

    take(i_in, "i", i_in.type)
    for k, ct in enumerate(ct_out[:n_carry]):
        take(ct, f"ct{k}", ct.type)
    for k, a in enumerate(acc_in):
        take(a, f"acc{k}", a.type)
    stored = []  # what the forward body outputs per residual: f64 (a bool mask as 0/1)
    for k, r in enumerate(residuals):
        if r.dtype == "f64":
            take(r, f"r{k}", r.type)
            stored.append(r)
        else:
            slot = take(None, f"r{k}", Type(r.shape))
            mapping[id(r)] = ops.make(Op.NE, slot, ops.const(0.0))
            stored.append(ops.make(Op.CAST, r, attrs=("f64",)))
    for k, ct in enumerate(ct_out[n_carry:]):
        take(ct, f"cty{k}", ct.type)
    for k, x in enumerate(xs):
        if k not in linked:
            take(x, f"x{k}", x.type)
    for k, p in enumerate(params):
        take(p, f"p{k}", p.type)
    leaked = [c for c in carries if id(c) not in mapping]
    leaked += [x for k, x in enumerate(xs) if k in linked and id(x) not in mapping]
    # forward reshapes B reads are recomputed from their (stored or available) operands
    b_body = substitute(b_outs, mapping)
    stray = {id(c) for c in leaked} & {id(n) for n in toposort(b_body)}
    if stray:
        raise AssertionError("a carry or history xs reached the backward body unstored")
    bgraph = Graph(f"{body.name}.vjp", tuple(b_inputs), ("inactive",) * len(b_inputs), b_body)
    # a residual that is a y of the body is read from that y's stack, not stored again
    y_of = {}
    for j, o in enumerate(outs[n_carry:]):
        y_of.setdefault(id(o), j)
    shared = tuple(y_of.get(id(r), -1) if r.dtype == "f64" else -1 for r in residuals)
    stored = [s for s, j in zip(stored, shared) if j < 0]
    fwd = body.replace(outputs=outs + tuple(stored))
    return verify(fwd), ops.LoopVJP(
        verify(bgraph), len(stored), tuple(wrt_xs), tuple(wrt_params), shared
    )
