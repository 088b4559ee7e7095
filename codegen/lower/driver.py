"""Lower a :class:`tapejit.core.program.Program` to one LLVM function with ``llvmlite.ir``.

The generated function has the C signature (documented for callers in :mod:`codegen.entry`)::

    int32_t NAME(const T0 *in0, ..., const Tk *ink, double *out0, ..., double *outm, void *workspace)

with one pointer per graph input (runtime arguments, then captured constants; ``T`` is ``double``
or, for bool constants, ``uint8_t``), one per output (the value, then each gradient; a scalar
output is one ``double``), and the workspace (64-byte aligned) of the size :func:`lower`
returns: ``Program.workspace_bytes`` plus the spill slots of long straight-line code, which is
split into chained functions of :data:`.chunks.CHUNK_NODES` nodes. It returns 0 on success, or
k > 0 when guard k failed — before any output was written. It never calls malloc/free: all
memory is the caller's.

Each loop kernel is a call of an internal *kernel function* emitted once per structure
(:class:`.kernels.Interface`: ops, wiring, types): kernels that differ only in the buffers they touch,
where they start in them, or — when a structure occurs with several — in their sizes (trip
counts, extents, strides) and f64 constants share one function, which takes the differing
values as arguments (:data:`.kernels.SHARE_MIN`); long runs of calls are walked from a table
(:data:`.calls.TAPE_MIN`).

Lowering is table-driven: :data:`~.lowering.EMIT` gives the scalar instruction(s) of every
elementwise op, :data:`~.lowering.LOWER` the lowering of every other op group (the registry,
:mod:`.lowering`; the families register their rows). This module is the driver: the walk over
the program's kernels and straight-line nodes that emits the entry function
(:class:`ProgramLowering`: :mod:`.chunks`, :mod:`.guards` and :mod:`.calls` supply its parts)
and :func:`lower`. Array ops stay *rolled* loops (vectorised by LLVM); scalar nodes are
straight-line code in registers. Reductions accumulate with ``reassoc`` on the accumulating
``fadd`` only, so the loop vectoriser may reorder them (no global fast-math).
"""

from __future__ import annotations

import llvmlite.ir as ir
import numpy as np

from ...core import ops
from ...core.program import Program
from ...core.ops import Op

from . import chunks
from .base import I32, I64
from .calls import CallTables
from .guards import Guards
from .kernels import INTERLEAVE, Interface, _interleave
from .lowering import Lowering


class ProgramLowering(CallTables, Guards, Lowering):
    """Lowering one program into its function: :meth:`run` walks the plan's kernels and
    straight-line nodes in order, emitting nodes by the rules of the registry, kernels as calls
    of shared kernel functions (direct or by call tape), guards as soon as they are known, and
    splitting straight-line code into chunks."""

    def run(self) -> ir.Module:
        self.kernel_fns: dict[str, tuple[ir.Function, list[int], object]] = {}
        self.tapes = 0
        self._bases: ir.Value | None = None
        self._walker: ir.Function | None = None
        self._cases: dict[int, int] = {}  # id(kernel function) -> its case in the walker
        self._case_fns: list[tuple[ir.Function, int]] = []
        checks = self._guard_steps()
        for c, status, expected in checks.pop(-1, ()):
            self.check(c, expected, status)
        pending: list[tuple[Interface, ir.Function, list[int]]] = []
        last_read = self._last_read = self._last_reads(checks) if self.chunked else {}
        self._chunk_start = 0
        weight = 0  # straight-line nodes and calls emitted into the current function
        math = 0  # of which scalar arithmetic (the rest: calls, element reads and writes)
        step = 0  # position in the program, numbered as in _last_reads
        faces = self.interfaces()
        for j, k in enumerate(self.prog.kernels):
            if k.pre:
                self.flush(pending)
            for n in k.pre:
                if self.chunked and weight >= chunks.CHUNK_NODES:
                    self.next_chunk(step, last_read, math / weight)
                    weight = math = 0
                self.node(n)
                for c, status, expected in checks.get(step, ()):
                    self.check(c, expected, status)
                weight += 1
                math += n.op in ops.ELEMENTWISE
                step += 1
            if not (k.body or k.op is not None):
                continue
            if self.chunked and weight >= chunks.CHUNK_NODES:
                self.flush(pending)
                self.next_chunk(step, last_read, math / weight)
                weight = math = 0
            if k.op is not None and k.op.op == Op.LOOP:  # a native loop calling its body
                self.flush(pending)
                self.node(k.op)
                weight += 1
            else:
                face = faces[j]
                fn = self.kernel_fn(face, k)
                record = self.record(face)
                if record is None:  # reads or defines registers: a call in straight-line code
                    self.flush(pending)
                    self.call_direct(face, fn)
                    weight += 1
                else:
                    pending.append((face, fn, record))
            if step in checks:
                self.flush(pending)
                for c, status, expected in checks[step]:
                    self.check(c, expected, status)
            step += 1
        self.flush(pending)
        if self.fn is not self.entry and weight and math / weight <= chunks.GLUE_MATH:
            self.fn.attributes.add("optnone")  # the last chunk (see next_chunk)
        if self._walker is not None:
            self.emit_walker()
        for fn, calls, k in self.kernel_fns.values():
            # shared by several sites: keep one copy (compile time stays linear); a long loop of
            # polynomial math (INTERLEAVE_MIN_TRIP elements or more): a call costs nothing next
            # to it, and inlined next to another inlined loop it cost LLVM 20 ms more (the
            # element-loop model: 47 -> 67 ms cold; EAM's gradient is as fast either way)
            if calls[0] > 1 or (k.body and _interleave(k, int(np.prod(k.space))) == INTERLEAVE):
                fn.attributes.add("noinline")
        g = self.prog.graph
        for k, o in enumerate(g.outputs):
            dst = self.fn.args[self.n_in + k]
            if o.shape == ():
                self.store_to(dst, I64(0), self._as_f64(o), "f64")
        for k, o in self.prog.copies:
            self.copy_into(self.fn.args[self.n_in + k], o)
        self.b.ret(I32(0))
        return self.module


    def sub_function(self, prog: Program, key: str) -> ir.Function:
        """The function computing sub-program ``prog`` (a loop's body or condition), emitted
        into this module once per ``key``; its signature is the main function's."""
        subs = self.module.__dict__.setdefault("_tapejit_subs", {})
        fn = subs.get(key)
        if fn is None:
            name = f"{self.fn.name}.sub{len(subs)}"
            sub = ProgramLowering(prog, name, module=self.module)
            sub.run()
            fn = subs[key] = sub.fn
            fn.linkage = "internal"
        return fn


def counters_symbol(name: str) -> str:
    """The global ``int64_t[]`` of function ``name`` counting the iterations its loop nodes ran
    (one entry per top-level loop node, in program order; cumulative over calls)."""
    return f"{name}.iterations"


def lower(prog: Program, name: str) -> tuple[ir.Module, int]:
    """The LLVM module holding function ``name`` that computes ``prog`` (see module
    docstring), and the workspace size it needs in bytes: the memory plan's, plus the spill
    slots of straight-line chunks (:data:`.chunks.CHUNK_NODES`)."""
    L = ProgramLowering(prog, name, chunked=True)
    loops = [n for n in prog.graph.nodes if n.op == Op.LOOP]
    if loops:
        ty = ir.ArrayType(I64, len(loops))
        g = ir.GlobalVariable(L.module, ty, name=counters_symbol(name))
        g.initializer = ir.Constant(ty, [0] * len(loops))
        L.counters = {0: g, **{id(n): k for k, n in enumerate(loops)}}
    module = L.run()
    return module, L.workspace_bytes
