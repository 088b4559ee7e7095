"""Ahead-of-time object code: a program lowered with its captured constants embedded, behind one
exported C entry point (``GradientFunction.export``; the files and the C contract are documented
in :mod:`tapejit.runtime.export`).

:func:`object_code` lowers a :class:`tapejit.core.program.Program` with :func:`codegen.lower.lower` as an
internal kernel and adds the one global function ``NAME``::

    int32_t NAME(const double *arg0, ..., [int64_t len0, ...,]
                 double *value, double *grad0, ..., void *workspace);

which calls the kernel with every captured constant (read-only globals of the object, 64-byte
aligned, bit for bit the arrays the trace captured) after the runtime arguments. Arguments of
dynamic length (``dynamic_argnums``) take their row count as an ``int64_t`` after the pointers;
the wrapper returns :data:`BAD_LENGTH` before any work when one is outside ``[1, capacity]``.

Everything else in the module — the kernel, its straight-line chunks and loop kernels, the math
library, call tapes, loop counters — gets internal linkage, so objects exported from different
gradients link into one program without clashing, and the object's only undefined symbols are
libc/libm ones LLVM may call (``memset``, ``memcpy``, ``fmod`` ...). The module is optimised
with the JIT's O3 pipeline and compiled for the host CPU as position-independent code
(:func:`codegen.target.object_machine`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import llvmlite.binding as llvm
import llvmlite.ir as ir
import numpy as np

from ..core.program import Program

from . import target
from .lower import counters_symbol, lower
from .lower.base import ELEM, F64, I8, I32, I64

#: The wrapper's status when a dynamic length is outside ``[1, capacity]`` (guards are 1, 2 ...).
BAD_LENGTH = -1


@dataclass(frozen=True)
class ObjectCode:
    """An exported entry point: ``data`` (the relocatable object file's bytes), the
    ``workspace_bytes`` it needs per concurrent call, ``constants_bytes`` embedded, and the
    optimised LLVM IR text (``llvm_ir``)."""

    data: bytes
    workspace_bytes: int
    constants_bytes: int
    llvm_ir: str


def constants_of(prog: Program) -> list[np.ndarray]:
    """The captured constants ``prog``'s kernel takes after its runtime inputs, in order, as the
    C-contiguous arrays of the element type the kernel reads (float64, or uint8 for bool)."""
    g = prog.graph
    out = []
    for i, (n, k) in enumerate(zip(g.inputs, g.kinds)):
        if k == "const":
            dtype = np.float64 if n.dtype == "f64" else np.uint8
            out.append(np.ascontiguousarray(np.asarray(g.bindings[i]).astype(dtype, copy=False)))
    return out


def _drop_loop_counters(module: ir.Module, symbol: str) -> None:
    """Remove the updates of the loop-iteration counters (``grad.loop_iterations``, a Python
    diagnostic nobody can read from C): they are the only global state the kernel writes, and
    concurrent calls would race on them. Without their stores LLVM deletes the loads, the
    additions and the global."""
    try:
        counters = module.get_global(symbol)
    except KeyError:
        return
    for fn in module.functions:
        geps = {
            id(i)
            for block in fn.blocks
            for i in block.instructions
            if isinstance(i, ir.GEPInstr) and i.pointer is counters
        }
        for block in fn.blocks:
            block.instructions[:] = [
                i
                for i in block.instructions
                if not (
                    isinstance(i, ir.StoreInstr)
                    and (i.operands[1] is counters or id(i.operands[1]) in geps)
                )
            ]


def _module(
    prog: Program, name: str, n_args: int, capacities: Sequence[int]
) -> tuple[ir.Module, int, int]:
    """The LLVM module of :func:`object_code` (not yet optimised), its workspace bytes and
    constants bytes."""
    g = prog.graph
    kernel_name = f"{name}.kernel"
    module, workspace_bytes = lower(prog, kernel_name)
    n_runtime = sum(1 for k in g.kinds if k != "const")
    if n_runtime != n_args + len(capacities) or list(g.kinds[n_runtime:]) != ["const"] * (
        len(g.kinds) - n_runtime
    ):
        raise AssertionError(
            "program inputs must be the arguments, then one length per dynamic argument, "
            "then the constants"
        )
    _drop_loop_counters(module, counters_symbol(kernel_name))
    for gv in module.global_values:  # llvm.* globals (llvm.compiler.used) keep their linkage
        if not getattr(gv, "is_declaration", False) and not gv.name.startswith("llvm."):
            gv.linkage = "internal"
    kernel = module.get_global(kernel_name)

    consts = []
    for k, a in enumerate(constants_of(prog)):
        data = a.tobytes()
        ty = ir.ArrayType(I8, len(data))
        gv = ir.GlobalVariable(module, ty, name=f"{name}.const{k}")
        gv.linkage = "private"
        gv.global_constant = True
        gv.unnamed_addr = True
        gv.align = 64
        gv.initializer = ir.Constant(ty, bytearray(data))
        consts.append(gv)

    ins = g.inputs
    params = [ELEM[n.dtype].as_pointer() for n in ins[:n_args]]
    params += [I64] * len(capacities)
    params += [F64.as_pointer() for _ in g.outputs] + [I8.as_pointer()]
    fn = ir.Function(module, ir.FunctionType(I32, params), name=name)
    fn.attributes.add("nounwind")
    args = list(fn.args)
    names = [f"arg{i}" for i in range(n_args)] + [f"len{j}" for j in range(len(capacities))]
    names += ["value"] + [f"grad{j}" for j in range(len(g.outputs) - 1)] + ["workspace"]
    for a, nm in zip(args, names):
        a.name = nm
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    call_args = list(args[:n_args])
    lengths = args[n_args : n_args + len(capacities)]
    if capacities:
        ok = None
        for n, cap in zip(lengths, capacities):
            good = b.and_(b.icmp_signed(">=", n, I64(1)), b.icmp_signed("<=", n, I64(cap)))
            ok = good if ok is None else b.and_(ok, good)
        bad = fn.append_basic_block("bad_length")
        run = fn.append_basic_block("run")
        b.cbranch(ok, run, bad)
        b.position_at_end(bad)
        b.ret(I32(BAD_LENGTH))
        b.position_at_end(run)
        for n in lengths:
            slot = b.alloca(F64)
            b.store(b.sitofp(n, F64), slot)
            call_args.append(slot)
    for gv, n in zip(consts, ins[n_runtime:]):
        call_args.append(b.bitcast(gv, ELEM[n.dtype].as_pointer()))
    call_args += args[n_args + len(capacities) :]
    b.ret(b.call(kernel, call_args))
    constants_bytes = sum(gv.type.pointee.count for gv in consts)
    return module, workspace_bytes, constants_bytes


def object_code(
    prog: Program, name: str, n_args: int, capacities: Sequence[int] = ()
) -> ObjectCode:
    """``prog`` compiled to a relocatable, position-independent object file for the host whose
    only global symbol is the entry ``name`` (see the module docstring).

    ``n_args``: the runtime arguments (one pointer each); ``capacities``: the row capacity of
    each dynamic-length argument, in the order of their hidden length inputs (which follow
    the arguments in ``prog``'s graph).
    """
    module, workspace_bytes, constants_bytes = _module(prog, name, n_args, capacities)
    target.initialise()
    tm = target.object_machine()
    module.triple = target.host()[0]
    module.data_layout = str(tm.target_data)
    text = str(module)
    mod = llvm.parse_assembly(text)
    mod.verify()
    target.optimise(mod, tm, lines=text.count("\n"))
    return ObjectCode(tm.emit_object(mod), workspace_bytes, constants_bytes, str(mod))
