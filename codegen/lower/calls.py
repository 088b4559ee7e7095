"""How kernel functions are shared and called: the :class:`Interface` of every kernel with its
size arguments chosen (:meth:`CallTables.interfaces`), one function per structure
(:meth:`CallTables.kernel_fn`: kernel dedup), and the calls — direct, or a run of pointer-only
calls as a *call tape* walked by one dispatch loop (:data:`TAPE_MIN`, :meth:`CallTables.flush`,
:meth:`CallTables.emit_walker`).

:class:`CallTables` is a mixin of the driver's
:class:`~tapejit.codegen.lower.driver.ProgramLowering`."""

from __future__ import annotations

import struct

import llvmlite.ir as ir

from ...core.ir import ITEMSIZE
from ...core.ops import Op

from .base import F64, I8, I32, I64
from .kernels import _BITS, _F64_BYTES, SHARE_MIN, Interface, KernelFunction

#: A run of at least this many consecutive kernel calls that pass only pointers (and sizes) is
#: emitted as a *call tape*: a constant table of records (kernel number, then base argument and
#: byte offset of each pointer parameter, then the value of each size argument) walked by one
#: dispatch loop. Straight-line calls cost LLVM time per call site (and code generation of one
#: large function grows faster than linearly, see DESIGN.md), so a model with thousands of
#: layers would compile in seconds; with tapes the main function's size tracks the number of
#: distinct kernels. The price is an indirect branch
#: and a few loads per call (~2 ns), so short runs — the whole of a small model — stay direct
#: calls that LLVM may inline.
TAPE_MIN = 16


class CallTables:
    """The kernel-function and call-tape methods of the program lowering."""

    def interfaces(self) -> dict[int, "Interface"]:
        """The :class:`Interface` of every loop kernel (by index in the program), with its
        size arguments chosen. A position of a key (a size or an f64 constant) stays a constant
        of the kernel function when every kernel of that key has the same value there — so a
        key that occurs with one set of sizes keeps a fully specialised function, whose trip
        counts LLVM knows — and is an argument when they disagree (and the key occurs with at
        least :data:`SHARE_MIN` sets): one argument per class of such positions that are equal
        in every kernel of the key (the extents of a matmul's operands that must agree are
        one argument, and LLVM sees that they are equal)."""
        faces: dict[int, Interface] = {}
        by_key: dict[str, list[Interface]] = {}
        for j, k in enumerate(self.prog.kernels):
            if not (k.body or k.op is not None) or (k.op is not None and k.op.op == Op.LOOP):
                continue
            face = faces[j] = Interface(self, k)
            by_key.setdefault(face.key, []).append(face)
        for key, group in by_key.items():
            first = group[0].values
            if len(group) < SHARE_MIN or len({f.values for f in group}) < SHARE_MIN:
                for f in group:  # one function per set of sizes
                    f.fkey = (key, tuple(f.values))
                continue
            classes: dict[tuple, list[int]] = {}  # (kind, values in the group) -> positions
            kinds = group[0].positions
            for p in range(len(first)):
                column = tuple(f.values[p] for f in group)
                if any(v != column[0] for v in column):
                    classes.setdefault((kinds[p][0] == "const", column), []).append(p)
            free = tuple(tuple(ps) for ps in classes.values())
            types = tuple(F64 if is_const else I64 for is_const, _ in classes)
            fixed = sorted(set(range(len(first))).difference(*free))
            for f in group:
                f.free, f.size_types = free, types
                f.sizes = tuple(f.values[ps[0]] for ps in free)
                f.fkey = (key, tuple(f.values[p] for p in fixed))
        return faces

    def kernel_fn(self, face: "Interface", k) -> ir.Function:
        """The kernel function of ``k``'s structure, emitted the first time it is seen (see
        :class:`KernelFunction`)."""
        hit = self.kernel_fns.get(face.fkey)
        if hit is None:
            name = f"{self.fn.name}.k{len(self.kernel_fns)}"
            hit = self.kernel_fns[face.fkey] = (KernelFunction(self, k, face, name).fn, [0], k)
        # symbol -> the (program, kernel) pairs it computes (``tapejit dump --stage asm`` names them)
        self.module.__dict__.setdefault("_tapejit_kernels", {}).setdefault(hit[0].name, []).append(
            (self.prog, k)
        )
        return hit[0]

    def call_direct(self, face: "Interface", fn: ir.Function) -> None:
        """Call kernel function ``fn`` with the buffers, scalars and reduction results of
        ``face``, as straight-line code."""
        self.kernel_fns[face.fkey][1][0] += 1
        b = self.b
        gather_params = {i: off for i, off in zip(face.gathers.values(), face.gather_offsets)}
        args = []
        for i, (n, ty) in enumerate(zip(face.ptr_nodes, fn.function_type.args)):
            p = self.ptr(n)
            if i in gather_params:
                p = b.gep(p, [I64(gather_params[i])], inbounds=True)
            args.append(b.bitcast(p, ty))
        args += [
            I64(v) if ty == I64 else F64(_F64_BYTES.unpack(_BITS.pack(v))[0])
            for v, ty in zip(face.sizes, face.size_types)
        ]
        args += [self.load(n, None) for n in face.scalars]
        results = [self.accumulator(0.0) for _ in face.results]
        b.call(fn, args + results)
        for n, r in zip(face.results, results):
            self.set_reg(n, b.load(r))

    def record(self, face: "Interface") -> list[int] | None:
        """The call of ``face`` as a tape record ``[base, byte offset] * params + sizes`` —
        each pointer parameter as one of this function's pointer arguments plus a constant
        offset, then the value of each size argument — or ``None`` when the kernel reads or
        defines scalars in registers."""
        if face.scalars or face.results:
            return None
        gather_params = {i: off for i, off in zip(face.gathers.values(), face.gather_offsets)}
        words: list[int] = []
        for i, n in enumerate(face.ptr_nodes):
            slot, elems = self.location(n)
            elems += gather_params.get(i, 0)
            size = ITEMSIZE[n.dtype]
            if slot.kind == "arg":
                words += [slot.index, elems * size]
            elif slot.kind == "out":
                words += [self.n_in + slot.index, elems * size]
            else:
                words += [len(self.fn.args) - 1, slot.index + elems * size]
        words.extend(face.sizes)
        return words

    def flush(self, pending: list) -> None:
        """Emit the pending run of pointer-only kernel calls: as direct calls when it is short,
        else as a *call tape* (see :data:`TAPE_MIN`), then empty ``pending``."""
        if len(pending) < TAPE_MIN:
            for face, fn, _ in pending:
                self.call_direct(face, fn)
            pending.clear()
            return
        b = self.b
        if self._bases is None:  # every pointer argument as i8*, in an array indexed by tapes
            here = b.block
            b.position_at_start(self.fn.entry_basic_block)
            ptrs = [b.bitcast(a, I8.as_pointer()) for a in self.fn.args]
            self._bases = b.alloca(ir.ArrayType(I8.as_pointer(), len(ptrs)))
            for i, p in enumerate(ptrs):
                b.store(p, b.gep(self._bases, [I32(0), I32(i)], inbounds=True))
            b.position_at_end(here)
        words: list[int] = []
        for face, fn, record in pending:
            if id(fn) not in self._cases:
                self._cases[id(fn)] = len(self._case_fns)
                self._case_fns.append((fn, len(face.ptr_nodes), len(face.sizes)))
                self.kernel_fns[face.fkey][1][0] += 2  # kept out of line: the walker stays small
            words += [self._cases[id(fn)], *record]
        pending.clear()
        # the table as bytes: one constant for llvmlite to print instead of one per word
        data = bytearray(struct.pack(f"<{len(words)}q", *words))
        ty = ir.ArrayType(I8, len(data))
        table = ir.GlobalVariable(self.module, ty, name=f"{self.fn.name}.tape{self.tapes}")
        table.global_constant = False  # opaque to LLVM: no unrolling of the walk over it
        table.initializer = ir.Constant(ty, data)
        table.align = 8
        self.tapes += 1
        if self._walker is None:
            fty = ir.FunctionType(
                ir.VoidType(), [I64.as_pointer(), I64, I8.as_pointer().as_pointer()]
            )
            self._walker = ir.Function(self.module, fty, name=f"{self.fn.name}.walk")
            self._walker.linkage = "internal"
            self._walker.attributes.add("noinline")
        bases = b.gep(self._bases, [I32(0), I32(0)], inbounds=True)
        b.call(self._walker, [b.bitcast(table, I64.as_pointer()), I64(len(words)), bases])

    def emit_walker(self) -> None:
        """The body of the one function that walks every call tape of this program: a loop over
        the records of a table, dispatching on the kernel number (one case per kernel function
        called from a tape); a record's size words are the function's size arguments (a
        constant's bits, reinterpreted as a double)."""
        w = self._walker
        table, n_words, bases = w.args
        b = ir.IRBuilder(w.append_basic_block("entry"))

        def word(pos: ir.Value) -> ir.Value:
            return b.load(b.gep(table, [pos], inbounds=True))

        entry = b.block
        head = w.append_basic_block("head")
        body = w.append_basic_block("dispatch")
        latch = w.append_basic_block("next")
        bad = w.append_basic_block("bad")
        done = w.append_basic_block("done")
        b.branch(head)
        b.position_at_end(head)
        pos = b.phi(I64)
        pos.add_incoming(I64(0), entry)
        b.cbranch(b.icmp_signed("<", pos, n_words), body, done)
        b.position_at_end(bad)
        b.unreachable()
        b.position_at_end(body)
        switch = b.switch(word(pos), bad)
        step = []
        for case, (fn, arity, sizes) in enumerate(self._case_fns):
            block = w.append_basic_block(f"k{case}")
            switch.add_case(I64(case), block)
            b.position_at_end(block)
            args = []
            for j, ty in enumerate(fn.function_type.args[:arity]):
                base = word(b.add(pos, I64(1 + 2 * j)))
                off = word(b.add(pos, I64(2 + 2 * j)))
                p = b.load(b.gep(bases, [base], inbounds=True))
                args.append(b.bitcast(b.gep(p, [off], inbounds=True), ty))
            for j, ty in enumerate(fn.function_type.args[arity : arity + sizes]):
                v = word(b.add(pos, I64(1 + 2 * arity + j)))
                args.append(v if ty == I64 else b.bitcast(v, ty))  # a constant: its bits
            b.call(fn, args)
            step.append((b.add(pos, I64(1 + 2 * arity + sizes)), b.block))
            b.branch(latch)
        b.position_at_end(latch)
        nxt = b.phi(I64)
        for v, block in step:
            nxt.add_incoming(v, block)
        pos.add_incoming(nxt, latch)
        b.branch(head)
        b.position_at_end(done)
        b.ret_void()
