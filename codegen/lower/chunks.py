"""Straight-line code in chunks: a long run of scalar nodes and kernel calls is split into
functions of about :data:`CHUNK_NODES` nodes, chained by tail calls, so that each function LLVM
optimises stays small. Owns the scalar registers of the function being emitted
(:class:`_Registers`: inputs loaded at the entry, values of earlier chunks reloaded from their
spill slots where they are used), the spill slots in the workspace after the memory plan's
bytes, and the split itself (:meth:`Chunks.next_chunk`, ``optnone`` for glue chunks).

:class:`Chunks` is a mixin of :class:`tapejit.codegen.lower.lowering.Lowering` (it reads the
object's ``b``, ``fn``, ``regs``, ``prog``...). Read :data:`CHUNK_NODES` and :data:`GLUE_MATH`
from this module (tests patch them here)."""

from __future__ import annotations

import llvmlite.ir as ir

from ...core.ir import Node

from .base import F64, I64

#: Straight-line code (scalar nodes and direct kernel calls) is split into functions of about
#: this many nodes, chained by tail calls; a scalar read beyond its chunk is stored to a spill
#: slot in the workspace (after the memory plan's bytes) and loaded where it is used. LLVM's
#: optimisation and code generation of one function grow faster than linearly with its size
#: (SLP vectorisation, register allocation, scheduling of one huge block): a scalarised model
#: of 1000 elements (~20k scalar nodes) took 3.1 s in one function and of 3000 elements 44 s;
#: chunked, 2.1 s and 6.4 s (with the large-module pipeline of codegen/target.py), linear in
#: the model's size, and the gradient runs as fast (7.1-7.3 us at 1000 elements, 40 KB of
#: spill slots). 250 compiled fastest of 250 / 500 / 1000 on that model.
CHUNK_NODES = 250
#: A straight-line chunk with at most this fraction of scalar arithmetic nodes is compiled
#: without optimisation (``optnone``; LLVM's fast instruction selection): it is mostly calls of
#: kernels and loops, with their pointer arithmetic, and element reads and writes, where
#: optimising gains nothing measurable at run time but costs most of a large model's LLVM time
#: (the Lennard-Jones models at N = 256: LLVM 0.65 s -> 0.33 s, the gradient 66 us either way;
#: the 1000-vertex DAG unchanged). Chunks of scalar code stay optimised: a scalarised model
#: traced unrolled has 75-94 % arithmetic per chunk (its gradient slows from 1.8 to 2.0 us
#: when chunks of up to 70 % are left unoptimised).
GLUE_MATH = 0.5


class _Registers(dict):
    """``id(node) -> ir.Value`` of the scalars of the function being emitted. A scalar input
    not read yet is loaded from its argument at the start of the entry block (so the load
    dominates every use). In a straight-line chunk after the first (:data:`CHUNK_NODES`), a
    value of an earlier chunk is loaded from its spill slot where it is used, every time: a
    load at first use kept for later uses could sit in a loop body that does not dominate
    them, and loads at the entry would keep every reloaded value live (in a register or the
    stack) through the whole chunk."""

    def __init__(self, L: "Lowering"):
        super().__init__()
        self.L = L
        self.block: ir.Block | None = None  # the basic block the cached reloads are in
        self.reloads: dict[int, ir.Value] = {}

    def __missing__(self, key: int) -> ir.Value:
        L = self.L
        b = L.b
        if key in L.scalar_inputs:
            here = b.block
            b.position_at_start(L.fn.entry_basic_block)
            i, dtype = L.scalar_inputs[key]
            v = self[key] = L._load_elem(L.fn.args[i], I64(0), dtype)
            b.position_at_end(here)
            return v
        if self.block is not b.block:  # a reload is reused within its basic block only
            self.block, self.reloads = b.block, {}
        v = self.reloads.get(key)
        if v is None:
            v = self.reloads[key] = b.load(L.spill_slot(key))
        return v


class Chunks:
    """The chunking and spilling methods of :class:`~tapejit.codegen.lower.lowering.Lowering`."""

    def _last_reads(self, checks: dict[int, list] | None = None) -> dict[int, int]:
        """``id(scalar) -> the last step that reads it`` (outputs: past the end; a guard's
        condition: where ``checks`` checks it). Steps number the program as :meth:`run` walks
        it: each straight-line node, then each kernel's loop (its body or own-loop op) as one
        step."""
        last: dict[int, int] = {}
        step = 0
        for k in self.prog.kernels:
            for n in k.pre:
                for a in n.args:
                    if a.shape == ():
                        last[id(a)] = step
                step += 1
            if k.body or k.op is not None:
                for n in (*k.body, *((k.op,) if k.op is not None else ())):
                    for a in n.args:
                        if a.shape == ():
                            last[id(a)] = step
                step += 1
        for o in self.prog.graph.outputs:
            last[id(o)] = step
        for at, items in (checks or {}).items():
            for c, _, _ in items:
                if c.shape == ():
                    last[id(c)] = max(last.get(id(c), -1), at)
        return last

    def next_chunk(self, step: int, last_read: dict[int, int], math: float = 1.0) -> None:
        """End the current straight-line function before ``step``: store the scalars read at or
        after it to their spill slots (workspace bytes past the memory plan's), tail-call a new
        function of the same signature (internal, never inlined, so each function LLVM
        optimises stays small) and continue emitting into it. A chunk (not the entry) whose
        nodes are at most a fraction :data:`GLUE_MATH` (``math``) of scalar arithmetic is
        *glue* — kernel calls, element reads and writes — and is marked ``optnone``."""
        if self.fn is not self.entry and math <= GLUE_MATH:
            self.fn.attributes.add("optnone")
        b = self.b
        for key, v in list(self.items_defined()):
            if last_read.get(key, -1) >= step and key not in self.spilled:
                self._spill(key, v)
        self._chunk_start = step
        nxt = ir.Function(self.module, self.fn.function_type, name=f"{self.name}.c{step}")
        nxt.linkage = "internal"
        nxt.attributes.add("nounwind")
        nxt.attributes.add("noinline")
        for a in nxt.args:
            a.add_attribute("noalias")
        status = b.call(nxt, list(self.fn.args), tail=True)
        b.ret(status)
        self.fn = nxt
        self.b = ir.IRBuilder(nxt.append_basic_block("entry"))
        self.regs = _Registers(self)
        self._bases = None  # the tape base-pointer array lives in each function's frame
        self._spill_ptr = None

    def items_defined(self):
        """The scalars of the current function that were computed in it (not reloaded)."""
        return ((k, v) for k, v in self.regs.items() if k not in self.scalar_inputs)

    def set_reg(self, n: Node, v: ir.Value) -> None:
        """Scalar ``n`` is ``v``. In chunked code, a value still read :data:`CHUNK_NODES` steps
        from the current chunk's start surely outlives the chunk: it is spilled right here, so
        it need not stay live to the chunk's end (see :meth:`next_chunk`)."""
        self.regs[id(n)] = v
        if self.chunked and self._last_read.get(id(n), -1) >= self._chunk_start + CHUNK_NODES:
            self._spill(id(n), v)

    def _spill(self, key: int, v: ir.Value) -> None:
        self.spilled[key] = (len(self.spilled), v.type)
        self.b.store(v, self.spill_slot(key))
        self.workspace_bytes = max(self.workspace_bytes, self._spill_base + 8 * len(self.spilled))

    def spill_slot(self, key: int) -> ir.Value:
        """Pointer to the spill slot of scalar ``key`` (8 bytes each, after the memory plan's
        workspace), from one ``double*`` made at the function's entry."""
        if self._spill_ptr is None:
            here = self.b.block
            self.b.position_at_start(self.fn.entry_basic_block)
            raw = self.b.gep(self.fn.args[-1], [I64(self._spill_base)], inbounds=True)
            self._spill_ptr = self.b.bitcast(raw, F64.as_pointer())
            self.b.position_at_end(here)
        k, ty = self.spilled[key]  # KeyError: a scalar used before it is defined (a bug)
        p = self.b.gep(self._spill_ptr, [I64(k)], inbounds=True)
        return p if ty == F64 else self.b.bitcast(p, ty.as_pointer())

