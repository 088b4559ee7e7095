"""A numpy interpreter of the IR: the test oracle.

``evaluate(graph, args)`` runs every node with its op's numpy reference implementation
(:mod:`tapejit.core.ops`) in float64. It shares no code with ``codegen/``, so comparing the two checks
the lowering, and comparing a graph before and after a pass checks the pass.

``run_program(program, args)`` executes a :class:`~tapejit.core.program.Program` *as planned*: kernel by
kernel, with every value in memory stored at its slot in one simulated workspace (a byte array)
or in the output arrays, values without a slot only inside their loop, in-place updates really in
place. A schedule or memory plan that reads a buffer after something else overwrote it gives a
wrong answer here, independently of LLVM.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from . import ops, ops_window
from .ir import NUMPY_DTYPE, Graph, Node
from .program import Program
from .ops import Op


def _bind_args(graph: Graph, args: Sequence[Any]) -> dict[int, Any]:
    runtime = [i for i, k in enumerate(graph.kinds) if k != "const"]
    if len(args) != len(runtime):
        raise ValueError(f"{graph.name} takes {len(runtime)} arguments, got {len(args)}")
    env: dict[int, Any] = {}
    for i, a in zip(runtime, args):
        node = graph.inputs[i]
        value = np.asarray(a, dtype=NUMPY_DTYPE[node.dtype])
        if value.shape != node.shape:
            raise ValueError(f"argument {i}: expected shape {node.shape}, got {value.shape}")
        env[id(node)] = value
    for i, k in enumerate(graph.kinds):
        if k == "const":
            env[id(graph.inputs[i])] = graph.bindings[i]
    return env


def evaluate(graph: Graph | Program, args: Sequence[Any]) -> list[np.ndarray]:
    """Outputs of ``graph`` for the runtime arguments ``args`` (one per non-const input, in order).

    Const inputs take their bound (snapshotted) arrays. Returns a list of numpy values (0-d
    arrays for scalars). Raises ``ValueError`` for a wrong argument count or shape.
    """
    if isinstance(graph, Program):
        graph = graph.graph
    env = _bind_args(graph, args)
    with np.errstate(all="ignore"):
        for n in graph.nodes:
            if n.op == Op.INPUT:
                continue
            if n.op == Op.CONST:
                env[id(n)] = np.full(n.shape, n.attrs[0], dtype=NUMPY_DTYPE[n.dtype])
            else:
                value = ops.OPS[n.op].ref(n.attrs, *(env[id(a)] for a in n.args))
                env[id(n)] = np.asarray(value, dtype=NUMPY_DTYPE[n.dtype])
    return [np.array(env[id(o)]) for o in graph.outputs]


def run_program(prog: Program, args: Sequence[Any]) -> list[np.ndarray]:
    """Outputs of ``prog`` executed as planned (see the module docstring)."""
    g = prog.graph
    env = _bind_args(g, args)  # inputs and scalars
    ws = np.zeros(prog.workspace_bytes, dtype=np.uint8)
    outs = [np.zeros(o.shape, dtype=np.float64) for o in g.outputs]

    def view(n: Node) -> np.ndarray:
        s = prog.slots[id(n)]
        if s.kind == "alias":
            return view(s.of).reshape(-1)[s.index : s.index + n.type.size].reshape(n.shape)
        if s.kind == "arg":
            return env[id(g.inputs[s.index])]
        if s.kind == "out":
            return (
                outs[s.index].reshape(-1)[: n.type.size].view(NUMPY_DTYPE[n.dtype]).reshape(n.shape)
            )
        dt = np.dtype(NUMPY_DTYPE[n.dtype])
        return ws[s.index : s.index + n.type.nbytes].view(dt).reshape(n.shape)

    def read(n: Node, local: dict[int, Any]) -> Any:
        if id(n) in local:
            return local[id(n)]
        if n.op == Op.CONST:
            return np.full(n.shape, n.attrs[0], dtype=NUMPY_DTYPE[n.dtype])
        if n.shape == ():
            return env[id(n)]
        return view(n).copy()

    def compute(n: Node, local: dict[int, Any]) -> Any:
        if n.op == Op.CONST:
            return np.full(n.shape, n.attrs[0], dtype=NUMPY_DTYPE[n.dtype])
        if n.op in ops.SCATTER:
            acc, upd = n.args
            dst = view(n)
            u = read(upd, local)  # (before the fill: an update may be placed in the block)
            if _location(prog, n) != _location(prog, acc):
                dst[...] = read(acc, local)
            if n.op == Op.SCATTER:
                dst[ops._np_items(n.attrs)] = u
            else:
                dst[ops._np_items(n.attrs)] += u
            return None
        value = ops.OPS[n.op].ref(n.attrs, *(read(a, local) for a in n.args))
        return np.asarray(value, dtype=NUMPY_DTYPE[n.dtype])

    with np.errstate(all="ignore"):
        for k in prog.kernels:
            for n in k.pre:
                v = compute(n, {})
                if v is not None:
                    _put(prog, env, view, n, v)
            if k.body:
                _run_loop(prog, k, env, view, read)
            if k.op is not None:
                v = compute(k.op, {})
                if v is not None:
                    _put(prog, env, view, k.op, v)
        for i, o in prog.copies:
            outs[i][...] = view(o) if o.shape != () else env[id(o)]
        for i, o in enumerate(g.outputs):
            if o.shape == ():
                outs[i][...] = read(o, {})
    return outs


def _run_loop(prog: Program, k, env, view, read) -> None:
    """One fused loop, element by element, exactly as the generated loop orders its memory
    accesses: operands in memory are loaded at the top of each iteration, stores follow."""
    members = {id(n) for n in k.body}
    gathers = {id(n) for n in k.body
               if (n.op in ops.GATHERS and n.args[0].shape != ())
               or n.op in (Op.TAKE, Op.WINDOW)}  # fmt: skip
    acc: dict[int, Any] = {}
    sinks = {}  # id(window_add) -> the row each flat position adds into
    for n in k.body:
        if n.op == Op.WINDOW_ADD:  # the result holds the accumulator before the loop
            if n.args[0].op == Op.CONST or _location(prog, n) != _location(prog, n.args[0]):
                view(n)[...] = read(n.args[0], {})
            sinks[id(n)] = ops_window.positions(n.attrs)
    for n in k.body:
        if n.op == Op.REDUCE_SUM:
            acc[id(n)] = np.float64(0.0)
        elif n.op == Op.REDUCE_MAX:
            acc[id(n)] = np.float64(-np.inf)
    for idx in np.ndindex(*k.space):
        flat = int(np.ravel_multi_index(idx, k.space)) if k.space else 0
        local: dict[int, Any] = {}
        for n in k.body:
            if id(n) in gathers or (n.op in ops.SCALAR_SPREADS and n.args[0].shape == ()):
                continue
            for a in n.args[1:] if id(n) in sinks else n.args:  # not a sink's accumulator
                if (
                    a.shape != ()
                    and id(a) not in members
                    and a.op != Op.CONST
                    and id(a) not in local
                ):
                    local[id(a)] = view(a).reshape(-1)[flat].copy()
        for n in k.body:
            if n.op == Op.CONST:
                v = read(n, {}).reshape(-1)[0]
            elif n.op in ops.SCALAR_SPREADS and n.args[0].shape == ():
                v = read(n.args[0], local)
            elif id(n) in gathers:
                v = np.asarray(ops.OPS[n.op].ref(n.attrs, *(view(a) for a in n.args)))[idx]
            elif id(n) in sinks:  # out[row of p, ...] += upd[p, ...]
                u = local[id(n.args[1])] if id(n.args[1]) in local else \
                    read(n.args[1], {}).reshape(-1)[flat]
                view(n)[(int(sinks[id(n)][idx[0]]), *idx[1:])] += u
                continue
            elif id(n) in acc:
                x = (
                    local[id(n.args[0])]
                    if id(n.args[0]) in local
                    else read(n.args[0], {}).reshape(-1)[flat]
                )
                acc[id(n)] = acc[id(n)] + x if n.op == Op.REDUCE_SUM else np.maximum(acc[id(n)], x)
                continue
            else:
                xs = [local[id(a)] if id(a) in local else read(a, {}) for a in n.args]
                v = ops.OPS[n.op].ref(n.attrs, *xs)
            local[id(n)] = np.asarray(v, dtype=NUMPY_DTYPE[n.dtype])[()]
            if id(n) in prog.slots:
                view(n).reshape(-1)[flat] = local[id(n)]
    for i, v in acc.items():
        env[i] = np.asarray(v)


def _location(prog: Program, n: Node):
    """(slot of ``n``'s buffer, element offset of ``n`` in it), aliases resolved."""
    s, off = prog.slots.get(id(n)), 0
    while s is not None and s.kind == "alias":
        off += s.index
        s = prog.slots.get(id(s.of))
    return s, off


def _put(prog: Program, env, view, n: Node, value) -> None:
    if n.shape == ():
        env[id(n)] = value
    elif id(n) in prog.slots:
        view(n)[...] = value
