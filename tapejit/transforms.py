"""Transformations as programs: JVP, VJP, Jacobians, Hessian-vector products, Hessians.

Each transformation of a traced function ``g`` (a :class:`~tapejit.core.ir.Graph`: runtime inputs,
captured constants, any number of f64 outputs) is a *program* — a graph of the runtime inputs
(plus the tangents or cotangents the transformation takes) that returns arrays — built from the
two sweeps on the IR: reverse mode (:func:`tapejit.ad.autodiff.vjp_graph`) and forward mode
(:func:`tapejit.ad.forward.jvp_graph`). Programs go through the same passes and code generation as
gradients (:func:`tapejit.pipeline.front` with :func:`values_graph`), so a Jacobian or a Hessian
is one native function.

==========  =================================  ================================================
mode        runtime inputs                     outputs
==========  =================================  ================================================
``jvp``     ``*args, *tangents`` (one per      ``*ys, *tangents of ys`` (forward mode)
            differentiated argument, in
            argument order)
``vjp``     ``*args, *cotangents`` (one per    ``*ys, *gradients`` (reverse mode seeded with the
            output)                            cotangents)
``jacfwd``  ``*args``                          one Jacobian per output and argument, shape
                                               ``y.shape + x.shape``: forward mode over the
                                               basis of ``x``, in a native loop
``jacrev``  ``*args``                          the same by reverse mode over the basis of ``y``
``hvp``     ``*args, v``                       ``H v``: forward over reverse (one kernel)
``hessian`` ``*args``                          ``H``, shape ``x.shape + x.shape``: forward over
                                               reverse over the basis of ``x``, in a native loop
``grad_``   ``*args``                          ``value, *gradients, *aux``: the gradient of the
``aux``                                        first output, the others (``has_aux``) along
``value``   ``*args``                          ``*ys``: ``g`` itself, not differentiated
                                               (:func:`tapejit.jit`)
==========  =================================  ================================================

The basis sweeps are :func:`tapejit.scan` loops traced around an inlined copy of the one-vector
program (:func:`tapejit.frontend.tracing.call_graph`); the basis vector is made in the loop body from the
iteration counter, so no identity matrix is stored. The guards of ``g`` (Python branches on traced
values) are checked once, outside the loop.

Sources: forward and reverse accumulation, and forward over reverse for second order:
Griewank & Walther, *Evaluating Derivatives* (2nd ed., 2008), ch. 3, 4 and 5; the basis sweeps
are JAX's ``jacfwd``/``jacrev`` (``jax/_src/api.py``) as native loops.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .ad import autodiff
from .ad.graph_inputs import add_inputs, mark_active
from .core import ops
from .frontend import tracing
from .core.ir import Graph

#: The transformations :func:`program` builds (``grad`` is :func:`autodiff.vjp_graph` itself).
MODES = ("grad", "grad_aux", "jvp", "vjp", "jacfwd", "jacrev", "hvp", "hessian", "value")

#: Modes whose functions must return one scalar.
SCALAR_MODES = ("grad", "hvp", "hessian")


def values_graph(g: Graph) -> Graph:
    """The graph a kernel computes for program ``g``: no differentiation; outputs ``(0.0,
    *g.outputs)`` (the kernel's first output is a scalar value, unused by programs)."""
    kinds = tuple("const" if k == "const" else "inactive" for k in g.kinds)
    return g.replace(
        kinds=kinds,
        outputs=(ops.const(0.0), *g.outputs),
        output_names=("value", *(g.output_names or [f"out{k}" for k in range(len(g.outputs))])),
    )


def vjp_program(g: Graph, order: Sequence[int]) -> Graph:
    """Reverse mode seeded with a cotangent per output: inputs ``(*args, *cts, consts)``,
    outputs ``(*ys, *gradients in order)``."""
    g2, cts = add_inputs(g, [o.type for o in g.outputs], [f"ct{k}" for k in range(len(g.outputs))])
    total = None
    for y, ct in zip(g2.outputs, cts):
        term = ops.reduce(ops.Op.REDUCE_SUM, ops.mul(y, ct)) if y.shape else ops.mul(y, ct)
        total = term if total is None else ops.add(total, term)
    scalar = g2.replace(outputs=(total,), output_names=("value",))
    joint = autodiff.vjp_graph(scalar, tuple(order))
    return joint.replace(
        outputs=(*g2.outputs, *joint.outputs[1:]),
        output_names=tuple(f"y{k}" for k in range(len(g.outputs)))
        + tuple(joint.output_names[1:]),
    )


def jvp_program(g: Graph) -> Graph:
    """Forward mode: inputs ``(*args, *tangents of the active args, consts)``, outputs ``(*ys,
    *their tangents)``."""
    from .ad.forward import jvp_graph

    return jvp_graph(g)


def hvp_program(g: Graph, order: Sequence[int]) -> Graph:
    """Forward over reverse: inputs ``(*args, v, consts)``, output ``H v`` (``g``: one scalar
    output, one active argument)."""
    joint = autodiff.vjp_graph(g, tuple(order))
    grad_only = joint.replace(outputs=joint.outputs[1:], output_names=joint.output_names[1:])
    tangent = jvp_program(mark_active(grad_only, order))
    n = len(grad_only.outputs)
    return tangent.replace(outputs=tangent.outputs[n:], output_names=("hvp",))


def grad_aux_program(g: Graph, order: Sequence[int]) -> Graph:
    """The gradient of ``g``'s first output (a scalar) with its other outputs (``aux``) along:
    outputs ``(value, *gradients, *aux)``."""
    value = g.outputs[0]
    if value.shape != () or value.dtype != "f64":
        raise tracing.TracingError(
            f"{g.name} must return (value, aux) with a scalar float value, got {value.type}"
        )
    joint = autodiff.vjp_graph(g.replace(outputs=(value,), output_names=("value",)), tuple(order))
    aux = tuple(g.outputs[1:])
    return joint.replace(
        outputs=(*joint.outputs, *aux),
        output_names=(*joint.output_names, *(f"aux{k}" for k in range(len(aux)))),
    )


def program(mode: str, g: Graph, order: tuple[int, ...], args: Sequence[Any]) -> Graph:
    """The program of transformation ``mode`` (see the module docstring) of ``g`` (traced at
    ``args`` with the arguments ``order`` active)."""
    if mode == "value":
        return g
    if mode == "grad_aux":
        return grad_aux_program(g, order)
    if mode == "jvp":
        return jvp_program(g)
    if mode == "vjp":
        return vjp_program(g, order)
    if mode == "hvp":
        return hvp_program(g, order)
    if mode in ("jacfwd", "jacrev", "hessian"):
        return _basis_program(mode, g, order, args)
    raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")


def _basis_program(mode: str, g: Graph, order: tuple[int, ...], args: Sequence[Any]) -> Graph:
    """Jacobians and Hessians: a scan over basis vectors around the one-vector program."""
    rt = [n for n, k in zip(g.inputs, g.kinds) if k != "const"]
    if mode == "jacrev":
        inner = vjp_program(g, order)  # (*args, *cts) -> (*ys, *grads)
        sweep = [o.shape for o in g.outputs]  # one sweep per output
        n_out = len(g.outputs)
    elif mode == "jacfwd":
        inner = jvp_program(g)  # (*args, *tangents) -> (*ys, *tangents of ys)
        sweep = [rt[i].shape for i in order]  # one sweep per argument
        n_out = len(g.outputs)
    else:  # hessian: forward over reverse, one argument
        inner = hvp_program(g, order)  # (*args, v) -> (H v,)
        sweep = [rt[order[0]].shape]
        n_out = 0
    plain = inner.replace(guards=())
    nargs = len(rt)

    def program_fn(*xs):
        # the guards of g, checked once, outside the loop
        tracing.call_graph(g.replace(outputs=g.outputs[:1] or g.outputs), *xs)
        results = []
        for s, shape in enumerate(sweep):
            size = int(np.prod(shape, dtype=np.int64))
            iota = np.arange(size, dtype=np.float64)
            zeros = [np.zeros(sh) for sh in sweep]

            def body(k, _, s=s, shape=shape, iota=iota, zeros=zeros):
                e = np.where(iota == k, 1.0, 0.0).reshape(shape)
                seeds = [e if j == s else z for j, z in enumerate(zeros)]
                outs = tracing.call_graph(plain, *xs, *seeds, guards=False)
                return k + 1.0, tuple(outs[n_out:])  # tangents / gradients / H v

            _, rows = _scan(body, size)
            results.append(rows)
        return _assemble(mode, g, order, rt, sweep, results)

    return tracing.trace(program_fn, list(args[:nargs]), (), outputs="any")


def _scan(body, n: int):
    from .frontend.control import scan

    return scan(body, 0.0, None, length=n)


def _assemble(mode, g, order, rt, sweep, results) -> tuple:
    """The Jacobian blocks from the stacked sweep results (each ``(size, *shape)``)."""
    out = []
    if mode == "hessian":
        (rows,) = results  # rows[k] = H e_k: H is symmetric, so rows are its rows
        x = rt[order[0]]
        return (rows[0].reshape(x.shape + x.shape),)
    if mode == "jacfwd":
        for y in g.outputs:  # for each output, a block per argument
            for s, (i, shape) in enumerate(zip(order, sweep)):
                cols = results[s][list(g.outputs).index(y)]  # (size_x, *y.shape)
                size = cols.shape[0]
                mat = cols.reshape(size, -1).T if y.shape else cols.reshape(1, size)
                out.append(mat.reshape(y.shape + rt[i].shape))
        return tuple(out)
    for k, y in enumerate(g.outputs):  # jacrev: rows[j] = gradient of <y, e_j>
        for j, i in enumerate(order):
            rows = results[k][j]  # (size_y, *x.shape)
            out.append(rows.reshape(y.shape + rt[i].shape))
    return tuple(out)
