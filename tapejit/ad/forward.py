"""Forward mode on the IR: activity analysis, then JVP rules in topological order.

Contract of :func:`jvp_graph` — input: any :class:`~tapejit.core.ir.Graph` (inputs of kinds
``active``/``inactive``/``const``, runtime inputs before const inputs; f64 outputs of any shapes;
guards). Output: one graph computing the outputs and their directional derivatives::

    inputs   g's runtime inputs (the same nodes and kinds),
             then one tangent input per active input ("t_" + name, kind inactive, same type),
             then g's const inputs (same bindings, moved behind the tangent inputs)
    outputs  g's outputs (names as in g), then their tangents ("t_" + name); an output that
             does not depend on an active input has a zero tangent of its shape
    guards   g's guards

so ``evaluate(jvp_graph(g), [*args, *v])`` is ``(f(args), J_f(args) v)`` for the direction ``v``
over the active inputs. The graph is built with the same node builders as the forward code, so the
passes and codegen treat tangent code like any other.

Algorithm: forward accumulation (Griewank & Walther, *Evaluating Derivatives*, 2nd ed., ch. 3):
each node that depends on an active input through differentiable ops (the activity analysis of
reverse mode, :func:`tapejit.ad.autodiff.varied_from`) gets a tangent from its op's JVP rule
(:func:`tapejit.core.ops.jvp_rule`) applied to its arguments' tangents, in topological order; an
argument without a tangent has a zero one, which stays symbolic (``None``) so that no zero
is computed. A ``loop`` is differentiated by a loop over its body's JVP
(:func:`loop_body_jvp`, called by the ``loop`` rule :func:`loop_jvp`, which this module
registers into the core's table), recursively for nested loops; this covers the backward
loops of reverse mode too, so ``jvp_graph`` of ``autodiff.vjp_graph(g)`` — the
joint graph, whose primal inputs are still active — gives Hessian-vector products
(forward-over-reverse, ch. 5): its ``t_grad_*`` outputs are ``H v``.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import autodiff
from ..core import ops
from ..core.ir import Graph, Node, substitute, toposort, verify


def _fit(t: Node, n: Node) -> Node:
    """A rule's tangent as the tangent of ``n``: a scalar tangent of an array result (an
    elementwise op whose only varying operand was a broadcast scalar) is broadcast."""
    if t.shape == n.shape:
        return t
    if t.shape == ():
        return ops.broadcast_to(t, n.shape)
    raise ops.RuleError(f"op {n.op!r}: tangent of shape {t.shape} for a result of shape {n.shape}")


def sweep(nodes: list[Node], varied: set[int], seeds: dict[int, Node]) -> dict[int, Node]:
    """The forward sweep over ``nodes`` (topological order) from tangent ``seeds`` (``id`` of a
    node -> its tangent): ``id -> tangent`` of every node of ``varied`` that has a nonzero one.

    Raises :class:`tapejit.core.ops.RuleError` naming an op that lacks a JVP rule.
    """
    tangents = dict(seeds)
    for n in nodes:
        if id(n) in tangents or id(n) not in varied or n.op in ops.LEAF or n.dtype != "f64":
            continue
        ts = tuple([tangents.get(id(a)) for a in n.args])
        if all(t is None for t in ts):
            continue
        t = ops.jvp_rule(n.op)(ts, n, *n.args)
        if t is not None:
            tangents[id(n)] = _fit(t, n)
    return tangents


def _fresh(name: str, used: set[str]) -> str:
    while name in used:
        name += "_"
    used.add(name)
    return name


def jvp_graph(g: Graph) -> Graph:
    """The forward-mode graph of ``g`` (see the module docstring for the contract).

    Raises :class:`tapejit.core.ops.RuleError` naming an op that lacks a JVP rule.
    """
    n_rt = sum(k != "const" for k in g.kinds)
    if any(k != "const" for k in g.kinds[n_rt:]):
        raise ValueError(f"{g.name}: runtime inputs must come before const inputs")
    active = [n for n, k in zip(g.inputs, g.kinds) if k == "active"]
    used = {n.attrs[1] for n in g.inputs}
    t_inputs = tuple(
        ops.input_node(n_rt + k, _fresh(f"t_{n.attrs[1]}", used), n.type)
        for k, n in enumerate(active)
    )
    shift = len(active)
    mapping: dict[int, Node] = {}
    bindings = {}
    for i in range(n_rt, len(g.inputs)):  # const inputs move behind the tangent inputs
        n = g.inputs[i]
        mapping[id(n)] = ops.input_node(i + shift, n.attrs[1], n.type) if shift else n
        bindings[i + shift] = g.bindings[i]
    consts = tuple(mapping[id(n)] for n in g.inputs[n_rt:])
    conds = tuple(c for c, _, _ in g.guards)
    rebuilt = substitute(g.outputs + conds, mapping) if shift else g.outputs + conds
    outs, conds = rebuilt[: len(g.outputs)], rebuilt[len(g.outputs) :]
    nodes = toposort(outs)
    seeds = {id(n): t for n, t in zip(active, t_inputs)}
    tangents = sweep(nodes, autodiff.varied_from(nodes, set(seeds)), seeds)
    t_outs = tuple(tangents[id(o)] if id(o) in tangents else ops.const(0.0, o.shape) for o in outs)
    names = g.output_names if len(g.output_names) == len(outs) else tuple(
        f"out{k}" for k in range(len(outs))
    )  # fmt: skip
    return verify(
        Graph(
            g.name,
            g.inputs[:n_rt] + t_inputs + consts,
            g.kinds[:n_rt] + ("inactive",) * len(t_inputs) + g.kinds[n_rt:],
            outs + t_outs,
            bindings,
            names + tuple(f"t_{n}" for n in names),
            tuple((c, e, w) for c, (_, e, w) in zip(conds, g.guards)),
        )
    )


# ----------------------------------------------------------------------------------------------
# Loops


@dataclass(frozen=True)
class LoopJVP:
    """The JVP of one loop iteration (what the ``loop`` rule, :func:`loop_jvp`, runs).

    ``body``: inputs ``(i, carry..., t_carry..., x_t..., t_x_t..., param..., t_param...)``,
    outputs ``(carry'..., t_carry'..., t_y_t...)`` — tangents only for the carries of
    ``carries``, the xs and params that have one (as asked) and the ys of ``ys``; the primal
    ys are left out (the primal loop has them) but for those of ``keep`` (the ys a
    :class:`tapejit.core.ops.History` reads: the tangent loop reads them too), output after the
    tangents of the carries; the primal carries are kept (the tangents need them). ``xs``:
    which xs have a tangent (as asked, and a history xs whenever its y has one). ``cond``
    (a ``while_loop``'s): inputs ``(carry..., t_carry..., param..., t_param...)``, the same
    verdict (the tangent inputs are unused).
    """

    body: Graph
    cond: Graph | None
    carries: tuple[bool, ...]
    ys: tuple[bool, ...]
    xs: tuple[bool, ...] = ()
    keep: tuple[int, ...] = ()


class _Inputs:
    """The inputs of a rebuilt sub-graph, declared in order: primal inputs keep their names,
    tangent inputs are named ``t_`` + name."""

    def __init__(self, old: tuple[Node, ...]):
        self.nodes: list[Node] = []
        self.mapping: dict[int, Node] = {}  # old input -> its new primal input
        self.seeds: dict[int, Node] = {}  # new primal input -> its tangent input
        self.used = {n.attrs[1] for n in old}

    def _take(self, name: str, n: Node) -> Node:
        node = ops.input_node(len(self.nodes), name, n.type)
        self.nodes.append(node)
        return node

    def primal(self, ns) -> None:
        for n in ns:
            self.mapping[id(n)] = self._take(n.attrs[1], n)

    def tangent(self, ns, wanted) -> None:
        for n, w in zip(ns, wanted):
            if w:
                t = self._take(_fresh(f"t_{n.attrs[1]}", self.used), n)
                self.seeds[id(self.mapping[id(n)])] = t


def loop_body_jvp(
    spec: ops.LoopSpec,
    wrt_carries: tuple[bool, ...],
    wrt_xs: tuple[bool, ...],
    wrt_params: tuple[bool, ...],
) -> LoopJVP:
    """The JVP of ``spec``'s body for tangents of the initial carries, xs and params marked
    ``True``. A carry gets a tangent if its initial value has one or an iteration gives it one
    (a fixed point of the activity analysis over the body's carry dependencies); a y gets one
    if it depends on a varying input. A history xs (:class:`tapejit.core.ops.History`) gets one
    when its operand has one or its y does, and its y then gets one too (zero if nothing it
    depends on varies)."""
    body, nc, nx = spec.body, spec.n_carry, spec.n_xs
    ins, outs = body.inputs, body.outputs
    i_in, carries = ins[0], ins[1 : 1 + nc]
    xs, params = ins[1 + nc : 1 + nc + nx], ins[1 + nc + nx :]
    nodes = body.nodes
    links = {h.x: h for h in spec.history}
    keep = tuple(sorted({h.y for h in spec.history}))
    fixed = {id(x) for k, (x, w) in enumerate(zip(xs, wrt_xs)) if w and k not in links} | {
        id(p) for p, w in zip(params, wrt_params) if w
    }
    act = tuple(wrt_carries)
    act_x = tuple(bool(w) and k not in links for k, w in enumerate(wrt_xs))
    while True:
        seeds = {id(c) for c, w in zip(carries, act) if w}
        seeds |= {id(xs[k]) for k in links if act_x[k]}
        varied = autodiff.varied_from(nodes, fixed | seeds)
        grown = tuple(w or id(o) in varied for w, o in zip(act, outs[:nc]))
        ys_v = [id(o) in varied for o in outs[nc:]]
        grown_x = tuple(
            w or (k in links and (bool(wrt_xs[k]) or ys_v[links[k].y])) for k, w in enumerate(act_x)
        )
        if grown == act and grown_x == act_x:
            break
        act, act_x = grown, grown_x
    forced = {h.y for k, h in links.items() if act_x[k]}
    act_y = tuple(v or j in forced for j, v in enumerate(ys_v))

    new = _Inputs(ins)
    new.primal((i_in, *carries))
    new.tangent(carries, act)
    new.primal(xs)
    new.tangent(xs, act_x)
    new.primal(params)
    new.tangent(params, wrt_params)
    p_outs = substitute(outs, new.mapping)
    p_nodes = toposort(p_outs)
    tangents = sweep(p_nodes, autodiff.varied_from(p_nodes, set(new.seeds)), new.seeds)

    def tan(o: Node) -> Node:
        return tangents[id(o)] if id(o) in tangents else ops.const(0.0, o.shape)

    b_outs = (
        *p_outs[:nc],
        *(tan(o) for o, w in zip(p_outs[:nc], act) if w),
        *(p_outs[nc + y] for y in keep),
        *(tan(o) for o, w in zip(p_outs[nc:], act_y) if w),
    )
    jbody = Graph(f"{body.name}.jvp", tuple(new.nodes), ("inactive",) * len(new.nodes), b_outs)

    jcond = None
    if spec.cond is not None:
        c = spec.cond
        c_carries, c_params = c.inputs[:nc], c.inputs[nc:]
        if len(c_params) != len(params):
            raise AssertionError("a loop condition takes the carries and every param of the loop")
        cnew = _Inputs(c.inputs)
        cnew.primal(c_carries)
        cnew.tangent(c_carries, act)
        cnew.primal(c_params)
        cnew.tangent(c_params, wrt_params)
        jcond = Graph(
            c.name,
            tuple(cnew.nodes),
            ("inactive",) * len(cnew.nodes),
            substitute(c.outputs, cnew.mapping),
        )
    return LoopJVP(
        verify(jbody), None if jcond is None else verify(jcond), act, act_y, act_x, keep
    )


def loop_jvp(t, out, *args):
    """The JVP rule of ``loop`` (registered into the core's table below). The tangent of a loop's
    result is a loop over the JVP of the body (built by :func:`loop_body_jvp`), which carries the
    tangents of the carries alongside the primal carries, scans the tangents of the xs that have
    one, takes the tangents of the params that have one as params, stacks the tangents of the
    ys, and runs under the same condition and step count (a ``while_loop``'s condition gets no
    tangent; neither does the step count, an integer). Any loop differentiates so, backward
    loops of reverse mode included (forward-over-reverse). The tangent loop recomputes the
    primal carries (it needs them) but not the ys; its flat result's tangent segments are
    scattered into the layout of ``out``, with zeros for the segments and step counter that
    have no tangent."""
    spec: ops.LoopSpec = out.attrs[0]
    lead = 1 if spec.dynamic else 0
    nc, nx = spec.n_carry, spec.n_xs
    carries, xs = args[lead : lead + nc], args[lead + nc : lead + nc + nx]
    params = args[lead + nc + nx :]
    tc, tx, tp = t[lead : lead + nc], t[lead + nc : lead + nc + nx], t[lead + nc + nx :]
    jv = loop_body_jvp(
        spec, tuple(c is not None for c in tc), tuple(x is not None for x in tx),
        tuple(p is not None for p in tp),
    )  # fmt: skip
    if not any(jv.carries) and not any(jv.ys):
        return None
    t_init = [ops._or_zero(a, c) for c, a, w in zip(carries, tc, jv.carries) if w]
    t_xs = [ops._or_zero(a, x) for a, x, w in zip(tx, xs, jv.xs) if w]
    t_params = [a for a in tp if a is not None]
    n_fixed = 1 + nc + len(t_init) + nx + len(t_xs)
    body, new_params = ops.hoist_invariants(jv.body, n_fixed, [*params, *t_params], "j")
    cond = jv.cond
    extra = new_params[len(params) + len(t_params) :]
    if cond is not None and extra:
        cond = ops.extend_inputs(cond, [p.type for p in extra], "j")
    history, accumulate = _tangent_links(spec, jv)
    jspec = ops.LoopSpec(body, nc + len(t_init), nx + len(t_xs), spec.max_steps, cond=cond,
                         start=spec.start, reverse=spec.reverse, dynamic=spec.dynamic,
                         history=history, accumulate=accumulate)  # fmt: skip
    operands = (*args[:lead], *carries, *t_init, *xs, *t_xs, *new_params)
    loop = ops.make(ops.Op.LOOP, *operands, attrs=(jspec,))
    lay, jlay = ops.loop_layout(spec), ops.loop_layout(jspec)
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
    acc = ops.const(0.0, out.shape)
    for a, b, n in pieces:
        part = ops.index(loop, ((a, a + n, 1),))
        acc = ops.make(ops.Op.SCATTER, acc, part, attrs=((b, b + n, 1),))
    return acc


def _tangent_links(
    spec: ops.LoopSpec, jv: LoopJVP
) -> tuple[tuple[ops.History, ...], tuple[ops.Accumulate, ...]]:
    """The links of a loop's tangent loop (:func:`loop_jvp`): its history xs read the primal
    ys it keeps (``jv.keep``, its first ys) as the loop's do, the tangents of history xs the
    tangents of those ys (after the kept ys) at the same rows; accumulated ys, kept or
    tangent, accumulate at the same rows (the tangent of a sum is the sum of the tangents)."""
    nx, keep = spec.n_xs, jv.keep
    tx_pos = {k: j for j, k in enumerate(k for k, w in enumerate(jv.xs) if w)}
    ty_pos = {y: j for j, y in enumerate(y for y, w in enumerate(jv.ys) if w)}
    history = tuple(ops.History(h.x, keep.index(h.y), h.rows) for h in spec.history) + tuple(
        ops.History(nx + tx_pos[h.x], len(keep) + ty_pos[h.y], h.rows)
        for h in spec.history
        if h.x in tx_pos
    )
    accumulate = tuple(
        ops.Accumulate(keep.index(a.y), a.rows) for a in spec.accumulate if a.y in keep
    ) + tuple(
        ops.Accumulate(len(keep) + ty_pos[a.y], a.rows) for a in spec.accumulate if a.y in ty_pos
    )
    return history, accumulate


# forward mode owns the loop's JVP rule (it differentiates the body): registered into the core's
# table here, so the core never imports a transformation
ops.defjvp(ops.Op.LOOP, loop_jvp)
