"""The structured-loop primitive ``loop``, whose body is a sub-graph: its type rule, numpy
reference (an evaluation of the body per iteration) and VJP rule, and its ``defop`` block — a
family of the registry :mod:`tapejit.core.ops`. Its static description (:class:`LoopSpec`, with
:class:`History` and :class:`Accumulate` links), result layout and loop-invariant code motion are
in :mod:`tapejit.core.loop_spec`; its JVP rule, which differentiates the body, is registered by
forward mode (:mod:`tapejit.ad.forward`). See :mod:`tapejit.frontend.control` for the user API
and ``docs/loops.md`` for the design. The body is never unrolled: codegen lowers it to one
function called once per iteration.
"""

from __future__ import annotations

import numpy as np

from . import ir
from .ir import Node, Type
from .loop_spec import Accumulate, History, LoopSpec, Segment, hoist_invariants, loop_layout
from .ops import OPS, Op, RuleError, add, const, defop, index, input_node, make, segment


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
                    OPS[n.op].ref(n.attrs, *(env[id(a)] for a in n.args)),
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


# loop(...): a structured loop whose body is a sub-graph; its JVP rule is forward mode's
# (tapejit.ad.forward registers it: it differentiates the body)
defop(Op.LOOP, "control", -1, _loop, _loop_ref, _loop_vjp)
