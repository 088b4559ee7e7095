"""Lower a :class:`tapejit.core.ir.Program` to one LLVM function with ``llvmlite.ir``.

The generated function has the C signature (documented for callers in :mod:`codegen.entry`)::

    int32_t NAME(const T0 *in0, ..., const Tk *ink, double *out0, ..., double *outm, void *workspace)

with one pointer per graph input (runtime arguments, then captured constants; ``T`` is ``double``
or, for bool constants, ``uint8_t``), one per output (the value, then each gradient; a scalar
output is one ``double``), and the workspace (64-byte aligned) of the size :func:`lower`
returns: ``Program.workspace_bytes`` plus the spill slots of long straight-line code, which is
split into chained functions of :data:`CHUNK_NODES` nodes. It returns 0 on success, or k > 0
when guard k failed — before any output was written. It never calls malloc/free: all memory
is the caller's.

Each loop kernel is a call of an internal *kernel function* emitted once per structure
(:class:`Interface`: ops, wiring, types): kernels that differ only in the buffers they touch,
where they start in them, or — when a structure occurs with several — in their sizes (trip
counts, extents, strides) and f64 constants share one function, which takes the differing
values as arguments (:data:`SHARE_MIN`); long runs of calls are walked from a table
(:data:`TAPE_MIN`).

Lowering is table-driven: :data:`EMIT` gives the scalar instruction(s) of every elementwise op,
:data:`LOWER` the lowering of every other op group. Array ops stay *rolled* loops (vectorised by
LLVM); scalar nodes are straight-line code in registers. Reductions accumulate with ``reassoc`` on
the accumulating ``fadd`` only, so the loop vectoriser may reorder them (no global fast-math).
"""

from __future__ import annotations

import math
import struct
from contextlib import contextmanager
from typing import Callable

import llvmlite.ir as ir
import numpy as np

from ...core import ops
from ...core.ir import ITEMSIZE, Node, Program, type_text
from ...core.ops import Op

from ..mathlib import core as mathlib

F64 = ir.DoubleType()
I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
I8P = I8.as_pointer()
ELEM = {"f64": F64, "bool": I8}
ELEM_REG = {"f64": F64, "bool": I1}  # a scalar in a register


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))


def _i64(v: int | ir.Value) -> ir.Value:
    return I64(v) if isinstance(v, int) else v


def _math(op):
    # array nodes are loop-body code (inlined so the loop vectoriser sees the math); scalar nodes
    # are straight-line code, which calls one out-of-line copy per module (compile time)
    return lambda b, n, *xs: mathlib.call(b, op, list(xs), inline=n.shape != ())


def _sign(b, n, x):
    pos = b.select(b.fcmp_ordered(">", x, F64(0.0)), F64(1.0), x)
    return b.select(b.fcmp_ordered("<", x, F64(0.0)), F64(-1.0), pos)


def _cast(b, n, x):
    src, dst = n.args[0].dtype, n.dtype
    if src == dst:
        return x
    if dst == "f64":
        return b.uitofp(x, F64)
    return b.fcmp_unordered("!=", x, F64(0.0))  # bool(nan) is True, as in numpy


#: Scalar code of each elementwise op: (builder, node, *operand values) -> value.
EMIT: dict[Op, Callable[..., ir.Value]] = {
    Op.NEG: lambda b, n, x: b.fneg(x),
    Op.ADD: lambda b, n, x, y: b.fadd(x, y),
    Op.SUB: lambda b, n, x, y: b.fsub(x, y),
    Op.MUL: lambda b, n, x, y: b.fmul(x, y),
    Op.DIV: lambda b, n, x, y: b.fdiv(x, y),
    Op.FMOD: lambda b, n, x, y: b.frem(x, y),  # LLVM's frem is C's fmod
    Op.SIGN: _sign,
    Op.LT: lambda b, n, x, y: b.fcmp_ordered("<", x, y),
    Op.LE: lambda b, n, x, y: b.fcmp_ordered("<=", x, y),
    Op.GT: lambda b, n, x, y: b.fcmp_ordered(">", x, y),
    Op.GE: lambda b, n, x, y: b.fcmp_ordered(">=", x, y),
    Op.EQ: lambda b, n, x, y: b.fcmp_ordered("==", x, y),
    Op.NE: lambda b, n, x, y: b.fcmp_unordered("!=", x, y),
    Op.AND: lambda b, n, x, y: b.and_(x, y),
    Op.OR: lambda b, n, x, y: b.or_(x, y),
    Op.NOT: lambda b, n, x: b.xor(x, I1(1)),
    Op.WHERE: lambda b, n, c, x, y: b.select(c, x, y),
    Op.CAST: _cast,
    Op.STOP_GRADIENT: lambda b, n, x: x,  # (the passes remove it; its value is x)
    **{op: _math(op) for op in mathlib.MATH},
}

missing = set(ops.ELEMENTWISE) - set(EMIT)
assert not missing, f"elementwise ops without a lowering: {missing}"


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


class Lowering:
    """State of lowering one program: the function, builder, and where each value lives."""

    def __init__(
        self, prog: Program, name: str, module: ir.Module | None = None, chunked: bool = False
    ):
        self.prog = prog
        self.name = name
        g = prog.graph
        self.module = ir.Module(name=name) if module is None else module
        params = [ELEM[n.dtype].as_pointer() for n in g.inputs]
        params += [F64.as_pointer() for _ in g.outputs] + [I8.as_pointer()]
        self.fn = self.entry = ir.Function(self.module, ir.FunctionType(I32, params), name=name)
        self.fn.attributes.add("nounwind")
        for a in self.fn.args:
            a.add_attribute("noalias")
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        self.n_in = len(g.inputs)
        self._locations: dict[int, tuple] = {}  # see location()
        self.scalar_inputs = {id(n): (i, n.dtype) for i, n in enumerate(g.inputs) if n.shape == ()}
        self.regs: dict[int, ir.Value] = _Registers(self)
        # straight-line chunks (see CHUNK_NODES): only the top-level program, whose workspace
        # may grow; a loop body's workspace is a planned region of its parent's
        self.chunked = chunked
        self.spilled: dict[int, tuple[int, ir.Type]] = {}  # id -> (slot, LLVM type)
        self._spill_ptr: ir.Value | None = None
        self.workspace_bytes = prog.workspace_bytes
        self._spill_base = -(-prog.workspace_bytes // 64) * 64
        # sizes that are arguments of the kernel function being emitted (see Interface): empty
        # in every other function, where all sizes are constants
        self.sym: dict[tuple, ir.Value] = {}
        self.typed: dict[int, str] | frozenset[int] = frozenset()

    # -- memory -------------------------------------------------------------------------------
    def ptr(self, n: Node) -> ir.Value:
        """Typed pointer to the first element of array value ``n``."""
        s = self.prog.slots[id(n)]
        if s.kind == "arg":
            return self.fn.args[s.index]
        if s.kind == "out":
            return self.fn.args[self.n_in + s.index]
        if s.kind == "alias":
            base = self.ptr(s.of)
            return self.b.gep(base, [I64(s.index)], inbounds=True) if s.index else base
        raw = self.b.gep(self.fn.args[-1], [I64(s.index)], inbounds=True)
        return self.b.bitcast(raw, ELEM[n.dtype].as_pointer())

    def gather_source(self, n: Node) -> tuple[ir.Value, int, tuple[int, ...]]:
        """(pointer, element offset, strides) at which gather ``n`` reads its operand."""
        offset, strides = gather_affine(n)
        return self.ptr(n.args[0]), offset, strides

    def scatter_target(self, n: Node) -> tuple[ir.Value, int, tuple[int, ...]]:
        """(pointer, element offset, strides) at which scatter-add ``n`` updates its result."""
        offset, strides = ops.index_affine(n.shape, n.attrs)
        return self.ptr(n), offset, strides

    def location(self, n: Node):
        """(slot of ``n``'s buffer, element offset of ``n`` in it), aliases resolved
        (remembered: kernel keys and tape records ask for every operand of every call)."""
        hit = self._locations.get(id(n))
        if hit is not None:
            return hit
        s, off = self.prog.slots.get(id(n)), 0
        while s is not None and s.kind == "alias":
            off += s.index
            s = self.prog.slots.get(id(s.of))
        self._locations[id(n)] = (s, off)
        return s, off

    def _load_elem(self, p, idx, dtype):
        v = self.b.load(self.b.gep(p, [idx], inbounds=True))
        return self.b.trunc(v, I1) if dtype == "bool" else v

    def load(self, n: Node, idx: ir.Value | None) -> ir.Value:
        """Element ``idx`` (flat, i64) of ``n``; scalars and constants need no memory access."""
        if n.op == Op.CONST:
            v = self.sym.get(("const", id(n), 0)) if self.sym else None
            if v is not None:  # an argument of the kernel function (see Interface)
                return v
            return I1(int(n.attrs[0])) if n.dtype == "bool" else F64(n.attrs[0])
        if n.shape == ():
            return self.regs[id(n)]
        return self._load_elem(self.ptr(n), idx, n.dtype)

    def store_to(self, p: ir.Value, idx: ir.Value, v: ir.Value, dtype: str) -> None:
        if dtype == "bool":
            v = self.b.zext(v, I8)
        self.b.store(v, self.b.gep(p, [idx], inbounds=True))

    def define(self, n: Node, idx: ir.Value | None, v: ir.Value) -> None:
        """Give node ``n`` (element ``idx``) the value ``v``: a register for scalars."""
        if n.shape == ():
            self.set_reg(n, v)
        else:
            self.store_to(self.ptr(n), idx, v, n.dtype)

    # -- loops --------------------------------------------------------------------------------
    @contextmanager
    def loop(self, count: int | ir.Value, interleave: int = 0):
        """``for i in range(count)`` as a rolled loop; yields the i64 induction variable.
        ``count`` is a constant or an i64 value (a size argument of a kernel function).
        ``interleave``: ask the loop vectoriser to interleave that many vector iterations
        (:func:`tapejit.codegen.jit.loop_hints` turns the hint into ``llvm.loop`` metadata)."""
        b = self.b
        pre = b.block
        head = self.fn.append_basic_block("loop")
        body = self.fn.append_basic_block("body")
        done = self.fn.append_basic_block("done")
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64)
        i.add_incoming(I64(0), pre)
        b.cbranch(b.icmp_signed("<", i, _i64(count)), body, done)
        b.position_at_end(body)
        yield i
        nxt = b.add(i, I64(1), flags=("nuw", "nsw"))
        i.add_incoming(nxt, b.block)
        back = b.branch(head)
        if interleave:
            hint = self.module.add_metadata([ir.MetaDataString(self.module, INTERLEAVE_HINT), I32(interleave)])
            back.set_metadata("llvm.loop", hint)
        b.position_at_end(done)

    @contextmanager
    def nest(self, shape: tuple):
        """Nested loops over ``shape`` (row-major; constant or i64 extents); yields the list of
        i64 indices."""
        if not shape:
            yield []
            return
        with self.loop(shape[0]) as i:
            with self.nest(shape[1:]) as rest:
                yield [i, *rest]

    def affine(self, idx: list[ir.Value], offset, strides: tuple) -> ir.Value:
        """``offset + sum(idx[k] * strides[k])`` as an i64 value (constant or i64 offset and
        strides)."""
        b = self.b
        acc: ir.Value = _i64(offset)
        for i, s in zip(idx, strides):
            if not isinstance(s, int):
                acc = b.add(acc, b.mul(i, s, flags=("nsw",)), flags=("nsw",))
            elif s == 1:
                acc = b.add(acc, i, flags=("nsw",))
            elif s != 0:
                acc = b.add(acc, b.mul(i, I64(s), flags=("nsw",)), flags=("nsw",))
        return acc

    def flat(self, idx: list[ir.Value], shape: tuple) -> ir.Value:
        return self.affine(idx, 0, self.c_strides(shape))

    # -- sizes: constants, or arguments of a kernel function shared by several sizes ----------
    def shape(self, n: Node) -> tuple:
        """``n``'s shape, each dimension a constant or, in a kernel function whose key leaves
        it free (:class:`Interface`), the i64 argument that carries it."""
        if not self.sym:
            return n.shape
        if id(n) not in self.typed:  # its sizes are not in the key: they may differ per call
            raise AssertionError(f"kernel function reads the shape of a node its key omits: {n}")
        return tuple(self.sym.get(("shape", id(n), a), d) for a, d in enumerate(n.shape))

    def space(self, k) -> tuple:
        """The iteration space of kernel ``k`` (as :meth:`shape`)."""
        if not self.sym:
            return k.space
        return tuple(self.sym.get(("space", 0, a), d) for a, d in enumerate(k.space))

    def strides_of(self, n: Node, strides: tuple[int, ...]) -> tuple:
        """The element ``strides`` of gather or scatter ``n`` (as :meth:`shape`)."""
        if not self.sym:
            return strides
        return tuple(self.sym.get(("stride", id(n), a), s) for a, s in enumerate(strides))

    def mul_i(self, x, y):
        """``x * y`` of two sizes: a constant when both are, else an i64 value."""
        if isinstance(x, int) and isinstance(y, int):
            return x * y
        if isinstance(x, int) and x == 1:
            return y
        if isinstance(y, int) and y == 1:
            return x
        return self.b.mul(_i64(x), _i64(y), flags=("nsw",))

    def size(self, dims: tuple):
        """The product of ``dims`` (constant when they all are)."""
        acc = 1
        for d in dims:
            acc = self.mul_i(acc, d)
        return acc

    def c_strides(self, dims: tuple) -> tuple:
        """Row-major element strides of an array of extents ``dims``."""
        if all(isinstance(d, int) for d in dims):
            return _c_strides(dims)
        out, acc = [], 1
        for d in reversed(dims):
            out.append(acc)
            acc = self.mul_i(acc, d)
        return tuple(reversed(out))

    def copy_into(self, dst: ir.Value, src: Node) -> None:
        with self.loop(self.size(self.shape(src))) as i:
            self.store_to(dst, i, self.load(src, i), src.dtype)

    def accumulator(self, init: float) -> ir.Value:
        here = self.b.block
        self.b.position_at_start(self.fn.entry_basic_block)
        slot = self.b.alloca(F64)
        self.b.position_at_end(here)
        self.b.store(F64(init), slot)
        return slot

    # -- driver -------------------------------------------------------------------------------
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
                if self.chunked and weight >= CHUNK_NODES:
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
            if self.chunked and weight >= CHUNK_NODES:
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
        if self.fn is not self.entry and weight and math / weight <= GLUE_MATH:
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

    def _guard_steps(self) -> dict[int, list[tuple[Node, int, bool]]]:
        """``step -> [(condition, first status, expected)]``: where :meth:`run` checks each
        guard (steps as in :meth:`_last_reads`; -1: before the first). Guards are checked in
        the order of their numbers, each as soon as its condition and every guard numbered
        before it are known — a scalar condition after the node computing it, a vector after its
        kernel — so of several failing guards the first is reported, as the unrolled code
        and a retrace that forces outcomes (``tapejit.runtime.dispatch``) expect."""
        defined: dict[int, int] = {}
        step = 0
        for k in self.prog.kernels:
            for n in k.pre:
                defined[id(n)] = step
                step += 1
            if k.body or k.op is not None:
                for n in (*k.body, *((k.op,) if k.op is not None else ())):
                    defined[id(n)] = step
                step += 1
        checks: dict[int, list[tuple[Node, int, bool]]] = {}
        status, at = 1, -1
        for c, expected, _ in self.prog.graph.guards:
            root = self._stored(c) if c.shape else c
            if id(root) in defined:
                at = max(at, defined[id(root)])
            elif c.op not in (Op.CONST, Op.INPUT) and root.op not in (Op.CONST, Op.INPUT):
                raise AssertionError(f"no step computes the guard condition {c}")  # a bug
            checks.setdefault(at, []).append((c, status, expected))
            status += c.shape[0] if c.shape else 1
        return checks

    def check(self, cond: Node, expected: bool, status: int) -> None:
        """Guard ``status`` (a scalar condition) or guards ``status, status + 1, ...`` (a
        vector)."""
        if cond.shape == ():
            self.guard(cond, expected, status)
        else:
            self.guard_vector(cond, expected, status)

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

    def guard(self, cond: Node, expected: bool, status: int) -> None:
        """Return ``status`` now unless ``cond`` has the value the trace saw (guards are
        checked before any output is written: see the memory plan)."""
        b = self.b
        ok = self.load(cond, None)
        if not expected:
            ok = b.xor(ok, I1(1))
        fail = self.fn.append_basic_block(f"guard{status}.fail")
        cont = self.fn.append_basic_block(f"guard{status}.ok")
        b.cbranch(ok, cont, fail)
        b.position_at_end(fail)
        b.ret(I32(status))
        b.position_at_end(cont)

    def _stored(self, c: Node) -> Node:
        """The array whose memory holds array ``c`` (``c``, or the base of a view)."""
        s = self.prog.slots.get(id(c))
        while s is not None and s.kind == "alias":
            c = s.of
            s = self.prog.slots.get(id(c))
        return c

    def guard_vector(self, cond: Node, expected: bool | tuple, first: int) -> None:
        """Guards ``first``, ``first + 1``, ... — one per element of the bool vector ``cond``
        (a re-rolled loop's guards): return the status of the first element that does not have
        the value the trace saw (``expected``: one for all, or a tuple of one per element, read
        from a constant table)."""
        b = self.b
        if cond.op == Op.CONST:  # known now: the trace computed it, so it holds
            values = np.broadcast_to(np.asarray(cond.attrs[0], dtype=bool), cond.shape)
            bad = np.flatnonzero(values != np.asarray(expected, dtype=bool))
            if bad.size:
                b.ret(I32(first + int(bad[0])))
                b.position_at_end(self.fn.append_basic_block(f"guard{first}.dead"))
            return
        p = self.ptr(cond)
        table = None
        if isinstance(expected, tuple):
            ty = ir.ArrayType(I8, len(expected))
            table = ir.GlobalVariable(self.module, ty, name=f"{self.fn.name}.outcomes{first}")
            table.initializer = ty([I8(int(e)) for e in expected])
            table.global_constant = True
            table.linkage = "internal"
        fail = self.fn.append_basic_block(f"guard{first}.fail")
        with self.loop(cond.shape[0]) as i:
            v = self._load_elem(p, i, "bool")
            if table is not None:
                e = b.load(b.gep(table, [I64(0), i], inbounds=True))
                bad = b.icmp_unsigned("!=", b.zext(v, I8), e)
            else:
                bad = b.xor(v, I1(1)) if expected else v
            cont = self.fn.append_basic_block(f"guard{first}.next")
            b.cbranch(bad, fail, cont)
            b.position_at_end(cont)
        done = b.block
        b.position_at_end(fail)
        status = b.add(b.trunc(i, I32), I32(first))
        b.ret(status)
        b.position_at_end(done)

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

    def node(self, n: Node) -> None:
        """Lower one node by its group's rule (straight-line code or its own loop nest)."""
        rule = LOWER.get(ops.OPS[n.op].group)
        if rule is None:
            raise NotImplementedError(f"codegen has no lowering for op {n.op!r}")
        rule(self, n)

    def entry_alloca(self, ty: ir.Type) -> ir.Value:
        """A stack slot allocated in the entry block (so LLVM promotes it to a register)."""
        here = self.b.block
        self.b.position_at_start(self.fn.entry_basic_block)
        slot = self.b.alloca(ty)
        self.b.position_at_end(here)
        return slot

    def sub_function(self, prog: Program, key: str) -> ir.Function:
        """The function computing sub-program ``prog`` (a loop's body or condition), emitted
        into this module once per ``key``; its signature is the main function's."""
        subs = self.module.__dict__.setdefault("_tapejit_subs", {})
        fn = subs.get(key)
        if fn is None:
            name = f"{self.fn.name}.sub{len(subs)}"
            sub = Lowering(prog, name, module=self.module)
            sub.run()
            fn = subs[key] = sub.fn
            fn.linkage = "internal"
        return fn

    def _as_f64(self, n: Node) -> ir.Value:
        v = self.load(n, I64(0))
        return self.b.uitofp(v, F64) if n.dtype == "bool" else v


#: Kernels of one key (:class:`Interface`) share a function whose differing sizes (and
#: constants) are arguments when the key occurs with at least this many different sets of
#: them; below that each set gets a function specialised to it (all sizes constant), as a key
#: that occurs with one set always does. A Python loop over slices of changing length made one
#: function per length: the row-by-row Lennard-Jones model of tests/test_kernels.py (and
#: bench/test_lj.py) compiled 380 kernel functions in 2.0-2.5 s at N = 64 and 1,532 in 14-20 s
#: at N = 256; shared, 15 functions in 0.2 s and 0.5-0.9 s, the gradient as fast (15.5 and
#: ~230 us both ways). Constant trip counts win only in tiny loops: a chain of 120 windows of
#: 2-7 elements ran 5 % faster specialised (~1 ns a call), of 20-25 elements 8 % slower, of
#: 60-65 the same; the DAG models (weight and bias gradients of 256 and 16 elements, now one
#: scatter function) time the same. So a key seen with two sets of sizes shares.
SHARE_MIN = 2

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


_COMMUTATIVE = frozenset(ops.COMMUTATIVE)
_OF_SPACE = {"f64": "f64[space]", "bool": "bool[space]"}
_F64_BYTES, _BITS = struct.Struct("<d"), struct.Struct("<q")
_SPELLINGS: dict[tuple, tuple[str, tuple[int, ...]]] = {}


def _spelling(dtype: str, dims: tuple[int, ...], first: int) -> tuple[str, tuple[int, ...]]:
    """``dims`` as a kernel key spells them when its next position is ``first`` — sizes -1, 0
    and 1 as they are, the others as ``d{first}``, ``d{first + 1}``, ... — and the axes that
    are positions (remembered: keys spell few distinct shapes; it is most of a key's cost)."""
    key = (dtype, dims, first)
    hit = _SPELLINGS.get(key)
    if hit is None:
        out, axes = [], []
        for a, d in enumerate(dims):
            if -1 <= d <= 1:
                out.append(str(d))
            else:
                out.append(f"d{first + len(axes)}")
                axes.append(a)
        text = ",".join(out)
        if len(_SPELLINGS) > 65536:
            _SPELLINGS.clear()
        hit = _SPELLINGS[key] = (f"{dtype}[{text}]" if dtype else text, tuple(axes))
    return hit


class Interface:
    """The parameters of a loop kernel as a function, and its structural key.

    Parameters: one pointer per distinct buffer the kernel reads or writes (``ptr_nodes``, a
    representative node each), the kernel's *size arguments* (see below), one value per scalar
    it reads from outside (``scalars``), and one result pointer per full reduction it computes
    (``results``). The key spells the kernel's ops, attributes, types, space and operand wiring
    in terms of these parameters, so kernels that differ only in which buffers they touch share
    one key, hence one function; where a gather starts in its operand (and a scatter in its
    result) is added to the pointer by the caller, so it is no part of the key either.

    Sizes — the extents of the iteration space and of every type the key spells, the element
    strides of gathers and scatters — and the values of f64 constants are written into the key
    as *positions* (``d0``, ``#1``, ... in order of first appearance; one per axis of the space
    and of each node, one per constant node; a type equal to the space is spelled ``[space]``)
    with their values in ``values`` (a constant's: its bits as an int64), so kernels that differ
    only in their sizes (``d = pos[i + 1:] - pos[i]`` in a Python loop: one kernel per length)
    or constants (``/ i``) share a key too. ``Lowering.interfaces`` makes the positions on
    which kernels of one key disagree arguments of the function (``free``: the positions each
    argument carries; ``size_types``: i64 for a size, double for a constant; ``sizes``: this
    kernel's values); the others stay constants in its code. Sizes -1, 0 and 1 are never
    positions: code branches on them (a broadcast axis, a matrix-vector product), so they stay
    in the key as they are. Kernels get positions only where their lowering reads every size
    through ``Lowering.shape``/``space``/``strides_of`` (fused loops, partial reductions,
    ``matmul``, scatters: every op that has a loop kernel today); in any other kernel every size
    and constant stays in the key.
    """

    # the size arguments (set by Lowering.interfaces when kernels of the key disagree): the
    # positions each one carries, its type — I64 (a size) or F64 (a constant) — and this
    # kernel's values of them (a constant's bits)
    free: tuple[tuple[int, ...], ...] = ()
    size_types: tuple[ir.Type, ...] = ()
    sizes: tuple[int, ...] = ()

    def __init__(self, L: "Lowering", k):
        self.ptr_nodes: list[Node] = []
        self.gather_offsets: list[int] = []  # element offset added to each gather's pointer
        self.scalars: list[Node] = []
        self.results: list[Node] = []
        values: list[int] = []  # the size at each position of the key
        positions: list[tuple] = []  # what each is: ("space", 0, axis), ("shape", id, axis), ...
        self.fkey: tuple = ()  # the key of its function: the key and the sizes it fixes
        bufs: dict[tuple, int] = {}
        regs: dict[int, int] = {}
        spelled: dict[int, str] = {}  # id(node) -> its type as the key spells it
        space_shape = k.space
        nodes = list(k.body) if k.body else [k.op]
        local = {id(n): i for i, n in enumerate(nodes)}
        op = k.op
        in_place = (
            op is not None and op.op in ops.SCATTER and L.location(op) == L.location(op.args[0])
        )
        poly = bool(k.body) or (
            op is not None and (op.op in ops.SCATTER or op.op in ops.REDUCE or op.op == Op.MATMUL)
        )

        def spell(what: str, ident: int, dims: tuple[int, ...], dtype: str = "") -> str:
            """``dims`` as the key spells them (``dtype[dims]`` with a ``dtype``): a new
            position for each size (called once per space, node type and strides)."""
            if not poly:
                return ",".join(map(str, dims))
            text, axes = _spelling(dtype, dims, len(values))
            for a in axes:
                values.append(dims[a])
                positions.append((what, ident, a))
            return text

        def const(a: Node) -> str:  # an f64 constant's value, as a position (its bits)
            if not poly or a.dtype != "f64":
                return repr(a.attrs[0])
            t = spelled.get(-id(a))
            if t is None:
                t = spelled[-id(a)] = f"#{len(values)}"
                values.append(_BITS.unpack(_F64_BYTES.pack(a.attrs[0]))[0])
                positions.append(("const", id(a), 0))
            return t

        def T(n: Node) -> str:  # type_text(n.type), its sizes as positions
            if n.shape == space_shape:  # in a fused loop: the space's shape (its own positions)
                return _OF_SPACE[n.dtype]
            if not poly:
                return type_text(n.type)
            t = spelled.get(id(n))
            if t is None:
                t = spelled[id(n)] = spell("shape", id(n), n.shape, n.dtype)
            return t

        def buf(n: Node) -> int:
            phys, off = L.location(n)
            key = ("buf", phys.kind, phys.index, off, n.dtype)
            if key not in bufs:
                bufs[key] = len(self.ptr_nodes)
                self.ptr_nodes.append(n)
            return bufs[key]

        def ref(a: Node) -> str:
            if id(a) in local and k.body:
                return f"b{local[id(a)]}"
            if a.op == Op.CONST:
                return f"c{const(a)}:{T(a)}"
            if a.shape == ():
                if id(a) not in regs:
                    regs[id(a)] = len(self.scalars)
                    self.scalars.append(a)
                return f"s{regs[id(a)]}:{a.dtype}"
            return f"p{buf(a)}:{T(a)}"

        self.gathers: dict[int, int] = {}  # id(gather node) -> its pointer parameter

        space = "None" if k.space is None else spell("space", 0, k.space)
        parts = [f"space=({space}) op={op is not None}"]
        for n in nodes:
            if n is op and n.op in ops.SCATTER:
                offset, strides = ops.index_affine(n.shape, n.attrs)
                line = f"{n.op}|{T(n)}|({spell('stride', id(n), strides)})|"
                if in_place:
                    # the caller passes the address of the updated block, so scatters that
                    # differ only in where the block starts share one kernel function
                    self.gathers[id(n)] = len(self.ptr_nodes)
                    self.ptr_nodes.append(n)
                    self.gather_offsets.append(offset)
                    line += ref(n.args[1]) + f">g{self.gathers[id(n)]}"
                else:
                    # it copies the accumulator into the result first: one pointer to the
                    # result (two would alias), the block's offset a size
                    line += f"@{spell('offset', id(n), (offset,))}|"
                    line += "splice|" if ops.splice_offset(n) is not None else ""
                    line += "placed|" if _block_in_place(L, n) else ""
                    line += ",".join(ref(a) for a in n.args) + f">p{buf(n)}"
                parts.append(line)
                continue
            if k.body and n.op in ops.GATHERS and n.args[0].shape != ():
                # the caller passes the operand's address plus the gather's offset, so gathers
                # that differ only in where they start share one kernel function
                offset, strides = gather_affine(n)
                self.gathers[id(n)] = len(self.ptr_nodes)
                self.ptr_nodes.append(n.args[0])
                self.gather_offsets.append(offset)
                line = (
                    f"gather|{T(n)}|({spell('stride', id(n), strides)})|{n.args[0].dtype}"
                    f"<g{self.gathers[id(n)]}"
                )
            else:
                refs = [ref(a) for a in n.args]  # in order: ref() numbers new parameters
                if n.op in _COMMUTATIVE:
                    refs.sort()  # a*b and b*a give the same bits: let them share a function
                # a scalar spread's attributes are its shape, which its type spells already
                attrs = "" if k.body and n.op in ops.SCALAR_SPREADS else repr(n.attrs)
                if n.op == Op.CONST:  # a fill
                    attrs = f"({const(n)},)"
                line = f"{n.op}|{attrs}|{T(n)}|" + ",".join(refs)
            if id(n) in L.prog.slots:
                line += f">p{buf(n)}"
            if n.shape == () and n.op in ops.REDUCE:
                line += f">r{len(self.results)}"
                self.results.append(n)
            parts.append(line)
        self.key = "\n".join(parts)
        self.values = tuple(values)
        self.positions = positions
        self.typed = spelled  # ids of the nodes whose shape the key spells (constants: -id)


class KernelFunction:
    """Emits one loop kernel as an internal function ``void name(ptrs..., sizes...,
    scalars..., results...)`` — ``sizes``: the kernel's size arguments (``face.free``; i64 for
    a size, double for a constant); the loop body is lowered by the same rules as everywhere
    else, reading each size argument through ``Lowering.sym`` (``shape``, ``space``,
    ``strides_of``, ``load`` of a constant)."""

    def __init__(self, outer: "Lowering", k, face: Interface, name: str):
        n_ptr, n_size = len(face.ptr_nodes), len(face.free)
        params = [ELEM[n.dtype].as_pointer() for n in face.ptr_nodes]
        params += face.size_types
        params += [ELEM_REG[n.dtype] for n in face.scalars]
        params += [F64.as_pointer() for _ in face.results]
        self.fn = ir.Function(outer.module, ir.FunctionType(ir.VoidType(), params), name=name)
        self.fn.linkage = "internal"
        self.fn.attributes.add("nounwind")
        for a in self.fn.args[:n_ptr]:
            a.add_attribute("noalias")
        L = Lowering.__new__(Lowering)
        L.prog, L.module, L.fn, L.n_in = outer.prog, outer.module, self.fn, outer.n_in
        L._locations = outer._locations  # the same program: the same locations
        L.b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        L.sym = {
            face.positions[p]: self.fn.args[n_ptr + j] for j, ps in enumerate(face.free) for p in ps
        }
        L.typed = face.typed
        first = n_ptr + n_size
        L.regs = {id(n): self.fn.args[first + i] for i, n in enumerate(face.scalars)}
        gather_params = set(face.gathers.values())

        def where(n):
            phys, off = outer.location(n)
            return phys.kind, phys.index, off, n.dtype

        bufs = {
            where(n): self.fn.args[i]
            for i, n in enumerate(face.ptr_nodes)
            if i not in gather_params
        }
        L.ptr = lambda n: bufs[where(n)]
        L.gather_source = lambda n: (
            self.fn.args[face.gathers[id(n)]],
            0,
            L.strides_of(n, gather_affine(n)[1]),
        )

        def scatter_target(n):
            offset, strides = ops.index_affine(n.shape, n.attrs)
            if id(n) in face.gathers:  # in place: the caller passed the block's address
                return self.fn.args[face.gathers[id(n)]], 0, L.strides_of(n, strides)
            return L.ptr(n), L.sym.get(("offset", id(n), 0), offset), L.strides_of(n, strides)

        L.scatter_target = scatter_target
        if k.body:
            _lower_loop(L, k)
        else:
            L.node(k.op)
        base = first + len(face.scalars)
        for i, n in enumerate(face.results):
            L.b.store(L.regs[id(n)], self.fn.args[base + i])
        L.b.ret_void()


# ----------------------------------------------------------------------------------------------
# Lowering rules, one per op group.


def _lower_elementwise(L: Lowering, n: Node) -> None:
    if n.shape == ():
        L.define(n, None, EMIT[n.op](L.b, n, *(L.load(a, None) for a in n.args)))
        return
    with L.loop(L.size(L.shape(n))) as i:
        L.define(n, i, EMIT[n.op](L.b, n, *(L.load(a, i) for a in n.args)))


def _lower_const(L: Lowering, n: Node) -> None:
    if n.shape != () and id(n) in L.prog.slots:
        with L.loop(L.size(L.shape(n))) as i:
            L.define(n, i, L.load(n, i))


def _lower_reduce(L: Lowering, n: Node) -> None:
    (x,) = n.args
    (axes,) = n.attrs
    xs = L.shape(x)
    kept = [d for i, d in enumerate(xs) if i not in axes]
    red = [d for i, d in enumerate(xs) if i in axes]
    strides = L.c_strides(xs)
    b = L.b
    with L.nest(tuple(kept)) as kidx:
        acc = L.accumulator(0.0 if n.op == Op.REDUCE_SUM else -math.inf)
        with L.nest(tuple(red)) as ridx:
            it_k, it_r = iter(kidx), iter(ridx)
            full = [next(it_r) if i in axes else next(it_k) for i in range(x.ndim)]
            v = L.load(x, L.affine(full, 0, strides))
            a = b.load(acc)
            if n.op == Op.REDUCE_SUM:
                b.store(b.fadd(a, v, flags=("reassoc",)), acc)
            else:
                b.store(mathlib.call(b, Op.MAXIMUM, [a, v]), acc)
        L.define(n, L.flat(kidx, L.shape(n)) if kidx else I64(0), b.load(acc))


def gather_affine(n: Node) -> tuple[int, tuple[int, ...]]:
    """Element offset and per-output-axis strides at which ``n`` reads its C-contiguous operand."""
    (x,) = n.args
    src = _c_strides(x.shape)
    if n.op == Op.INDEX:
        return ops.index_affine(x.shape, n.attrs)
    if n.op == Op.TRANSPOSE:
        return 0, tuple(src[p] for p in n.attrs[0])
    if n.op == Op.BROADCAST_TO:
        lead = n.ndim - x.ndim
        return 0, (0,) * lead + tuple(0 if d == 1 else s for d, s in zip(x.shape, src))
    raise NotImplementedError(n.op)


def _lower_shape(L: Lowering, n: Node) -> None:
    (x,) = n.args
    if n.op == Op.RESHAPE:
        if n.shape == ():
            L.define(n, None, L.load(x, I64(0)))
        elif x.shape == ():
            L.define(n, I64(0), L.load(x, None))
        return  # an array reshape aliases its operand (memory plan)
    offset, strides = gather_affine(n)
    if n.shape == ():
        L.define(n, None, L.load(x, I64(offset)))
        return
    with L.nest(n.shape) as idx:
        src = L.affine(idx, offset, strides) if x.shape != () else None
        L.define(n, L.flat(idx, n.shape), L.load(x, src))


def _block_in_place(L: "Lowering", n: Node) -> bool:
    """Whether spliced scatter ``n``'s update was computed into its block already (memory
    planning, :func:`tapejit.passes.memplan._place_blocks`): only the fill around it is left."""
    o = ops.splice_offset(n)
    if n.op != Op.SCATTER or o is None:
        return False
    (ps, po), (us, uo) = L.location(n), L.location(n.args[1])
    return ps is not None and us == ps and uo == po + o


def _lower_index(L: Lowering, n: Node) -> None:
    if n.op == Op.INDEX:
        return _lower_shape(L, n)
    if n.op in TABLE_OPS:
        return TABLE_OPS[n.op](L, n)
    if n.op in WINDOW_OPS:
        return WINDOW_OPS[n.op](L, n)
    acc, upd = n.args
    base, offset, strides = L.scatter_target(n)
    b = L.b
    fresh = L.location(n) != L.location(acc)
    # a constant (zeros, the start of a gradient or a concatenation) with a contiguous block
    # written: the constant around the block, and the block written once (acc[items] + upd
    # with the constant's value: no fill of the block, no load)
    spliced = fresh and ops.splice_offset(n) is not None
    if spliced:
        c = L.load(acc, None)
        start = _i64(offset)
        end = b.add(start, _i64(L.size(L.shape(upd))))
        with L.loop(start) as i:
            L.store_to(base, i, c, n.dtype)
        with L.loop(b.sub(_i64(L.size(L.shape(acc))), end)) as i:
            L.store_to(base, b.add(end, i), c, n.dtype)
        if _block_in_place(L, n):
            return
    elif fresh:  # not in place: start from a copy of acc
        L.copy_into(L.ptr(n), acc)
    us = L.shape(upd)
    with L.nest(us) as idx:
        at = L.affine(idx, offset, strides)
        u = L.load(upd, L.flat(idx, us) if idx else None)
        if n.op == Op.SCATTER:  # acc[items] = upd
            L.store_to(base, at, u, n.dtype)
        elif spliced:  # the constant + upd
            L.store_to(base, at, b.fadd(c, u), n.dtype)
        else:  # acc[items] += upd
            p = b.gep(base, [at], inbounds=True)
            b.store(b.fadd(b.load(p), u), p)


#: Vector iterations the loop vectoriser interleaves in long fused loops that evaluate
#: polynomial math (exp, log, tanh...): their Horner chains are latency-bound, and four
#: independent chains in flight hide the FMA latency. Measured on EAM (n = 10^4-10^5, one exp
#: per element): AVX2 code 1.43 -> 1.20x gcc -ffast-math with libmvec, AVX-512 code 0.84 ->
#: 0.77x (2 made AVX-512 code slower; 8 was slower than 4 on AVX2).
INTERLEAVE = 4
#: Fused loops with at least this many iterations (or a trip count known only at run time) get
#: :data:`INTERLEAVE`; shorter ones get 1 (with 4 they would skip the vector loop). Rows of 100
#: to 400 elements interleaved 4 ways, measured on EAM batches (ns per element vs gcc
#: -ffast-math with libmvec): AVX2 code 1.12 -> 0.96x at 100, 1.05 -> 0.90x at 400; AVX-512
#: code 0.89 -> 0.65x at 100 — the scalar remainder (4 of 100 elements) costs less than
#: latency-bound vectors do. (It was 1024 before these rows were measured.)
INTERLEAVE_MIN_TRIP = 64
#: The metadata string of an interleave hint (see :func:`tapejit.codegen.jit.loop_hints`).
INTERLEAVE_HINT = "tapejit.interleave"


def _interleave(k, size) -> int:
    """The interleave hint of fused kernel ``k`` over ``size`` iterations: for a body that
    evaluates polynomial math, :data:`INTERLEAVE` from :data:`INTERLEAVE_MIN_TRIP` iterations
    (or a size known only at run time) and 1 below (so the vector loop runs at all); 0 (LLVM's
    choice) for other loops."""
    if not any(n.op in mathlib.MATH and mathlib.MATH[n.op].body is not None for n in k.body):
        return 0
    return 1 if isinstance(size, int) and size < INTERLEAVE_MIN_TRIP else INTERLEAVE


def _lower_loop(L: Lowering, k) -> None:
    """One fused loop over ``k.space``: every body node per iteration, operands read from memory
    loaded first (so an in-place store never clobbers a value still to be read), body values in
    registers, stored only when they have a slot; full reductions accumulate with ``reassoc``."""
    b = L.b
    body_ids = {id(n) for n in k.body}
    gathers = [
        n
        for n in k.body
        if n.op in ops.GATHERS and n.args[0].shape != ()
    ]
    accs = {}
    for n in k.body:
        if n.op in ops.REDUCE:
            accs[id(n)] = L.accumulator(0.0 if n.op == Op.REDUCE_SUM else -math.inf)
    windows = [n for n in k.body if n.op == Op.WINDOW]
    space = L.space(k)
    size = L.size(space)
    hint = _interleave(k, size)
    if windows:
        nest = ragged_nest(L, windows[0].attrs, space, hint)
    else:
        nest = L.nest(space) if gathers else L.loop(size, hint)
    with nest as idx:
        if windows:
            idx, row = idx
        if gathers or windows:
            i = L.flat(idx, space) if idx else I64(0)
        else:
            i, idx = idx, None
        vals: dict[int, ir.Value] = {}
        for n in k.body:  # loads of operands in memory come first
            if n in gathers or n.op in ops.SCALAR_SPREADS or n.op == Op.WINDOW:
                continue
            for a in n.args:
                if (
                    a.shape != ()
                    and id(a) not in body_ids
                    and id(a) not in vals
                    and a.op != Op.CONST
                ):
                    vals[id(a)] = L.load(a, i)

        def val(a: Node) -> ir.Value:
            v = vals.get(id(a))
            return v if v is not None else L.load(a, None if a.shape == () else i)

        for n in k.body:
            if n.op == Op.CONST:
                v = L.load(n, None)
            elif n.op in ops.SCALAR_SPREADS and n.args[0].shape == ():
                v = val(n.args[0])
            elif n in gathers:
                base, offset, strides = L.gather_source(n)
                v = L._load_elem(base, L.affine(idx, offset, strides), n.dtype)
            elif n.op == Op.WINDOW:
                v = L._load_elem(L.ptr(n.args[0]), window_element(L, n, row, idx[1:]), n.dtype)
            elif id(n) in accs:
                acc = accs[id(n)]
                x = val(n.args[0])
                if n.op == Op.REDUCE_SUM:
                    b.store(b.fadd(b.load(acc), x, flags=("reassoc",)), acc)
                else:
                    b.store(mathlib.call(b, Op.MAXIMUM, [b.load(acc), x]), acc)
                continue
            else:
                v = EMIT[n.op](b, n, *(val(a) for a in n.args))
            vals[id(n)] = v
            if id(n) in L.prog.slots:
                L.store_to(L.ptr(n), i, v, n.dtype)
    for n in k.body:
        if id(n) in accs:
            L.regs[id(n)] = b.load(accs[id(n)])


def _row_of(L: Lowering, rows: tuple[int, ...], tt: ir.Value) -> ir.Value:
    """``rows[tt]`` (i64), read from a constant table emitted once per module and ``rows``."""
    tables = L.module.__dict__.setdefault("_tapejit_rows", {})
    table = tables.get(rows)
    if table is None:
        ty = ir.ArrayType(I64, len(rows))
        table = ir.GlobalVariable(L.module, ty, name=f"{L.name}.rows{len(tables)}")
        table.initializer = ty([I64(r) for r in rows])
        table.global_constant = True
        table.linkage = "internal"
        tables[rows] = table
    return L.b.load(L.b.gep(table, [I64(0), tt], inbounds=True))


def _lower_loop_node(L: Lowering, n: Node) -> None:
    """A ``loop`` node (see :class:`tapejit.core.ops.LoopSpec`) as a rolled native loop: the carries
    live in the node's result (``carry_a``); each iteration calls the body's function with
    pointers to the index, the carries, this iteration's slices of the xs and the params, and
    gets the next carries in scratch (``carry_b``, copied back) and its ys written straight into
    the stacked results; a condition is a function called before each iteration. The number of
    iterations run is stored in the result and added to the program's iteration counters.

    Links (:class:`tapejit.core.ops.History`, :class:`tapejit.core.ops.Accumulate`) read their ``rows``
    from a constant ``i64`` table in the module at ``tt``: a history xs is a pointer into the
    result where ``rows[tt] >= 0``, its operand's row ``tt`` elsewhere (a ``select``); an
    accumulated y is zeroed before the loop, written by the body to scratch (``acc_b``) and
    added to its row after the call. A loop without links emits the code it always did."""
    spec, lp = n.attrs[0], L.prog.loops[id(n)]
    lay = ops.loop_layout(spec)
    b = L.b
    lead = 1 if spec.dynamic else 0
    carries = n.args[lead : lead + spec.n_carry]
    xs = n.args[lead + spec.n_carry : lead + spec.n_carry + spec.n_xs]
    params = n.args[lead + spec.n_carry + spec.n_xs :]
    out = L.ptr(n)
    ws = L.fn.args[-1]

    def at(p: ir.Value, elems: ir.Value | int) -> ir.Value:
        return b.gep(p, [elems if isinstance(elems, ir.Value) else I64(elems)], inbounds=True)

    def scratch(off: int) -> ir.Value:
        return b.bitcast(b.gep(ws, [I64(off)], inbounds=True), F64.as_pointer())

    def pointer(a: Node) -> ir.Value:
        if a.shape != ():
            return L.ptr(a)
        slot = L.entry_alloca(ELEM[a.dtype])  # a scalar in memory, as the body's input
        L.store_to(slot, I64(0), L.load(a, None), a.dtype)
        return slot

    carry_a = [at(out, seg.offset) for seg in lay.carries]
    carry_b = [scratch(off) for off in lp.carry_b]
    for a, dst in zip(carries, carry_a):
        if a.shape == ():
            b.store(L.load(a, None), dst)
        else:
            L.copy_into(dst, a)
    x_ptrs = [L.ptr(x) for x in xs]
    p_ptrs = [pointer(p) for p in params]
    hist = {h.x: h for h in spec.history}
    accs = {a.y: (a, lp.acc_b[k]) for k, a in enumerate(spec.accumulate)}
    for y in accs:  # an accumulated y starts at zero (every row, also those no iteration adds to)
        seg = lay.ys[y]
        with L.loop(seg.size) as i:
            b.store(F64(0.0), at(out, b.add(I64(seg.offset), i)))
    limit: ir.Value = I64(spec.max_steps)
    if spec.dynamic:
        s = b.fptosi(L.load(n.args[0], None), I64)
        s = b.select(b.icmp_signed("<", s, I64(0)), I64(0), s)
        limit = b.select(b.icmp_signed(">", s, limit), limit, s)
    body_fn = L.sub_function(lp.body, f"body:{spec!r}")
    cond_fn = L.sub_function(lp.cond, f"cond:{spec!r}") if lp.cond is not None else None
    i_slot = L.entry_alloca(F64)
    count = L.entry_alloca(I64)
    b.store(I64(0), count)
    head = L.fn.append_basic_block("loopnode.head")
    step = L.fn.append_basic_block("loopnode.step")
    done = L.fn.append_basic_block("loopnode.done")
    b.branch(head)
    b.position_at_end(head)
    t = b.load(count)
    b.cbranch(b.icmp_signed("<", t, limit), step, done)
    b.position_at_end(step)
    tt = b.sub(b.sub(limit, I64(1)), t) if spec.reverse else t

    def call(fn: ir.Function, ins: list, outs: list, work: int) -> None:
        args = [*ins, *outs, b.gep(ws, [I64(work)], inbounds=True)]
        b.call(
            fn,
            [b.bitcast(v, ty) if v.type != ty else v for v, ty in zip(args, fn.function_type.args)],
        )

    if cond_fn is not None:
        cond_out = scratch(lp.cond_out)
        call(cond_fn, [*carry_a, *p_ptrs], [cond_out], lp.cond_ws)
        go = L.fn.append_basic_block("loopnode.go")
        b.cbranch(b.fcmp_unordered("!=", b.load(cond_out), F64(0.0)), go, done)
        b.position_at_end(go)
    b.store(b.sitofp(b.add(tt, I64(spec.start)), F64), i_slot)
    x_t = [at(p, b.mul(tt, I64(x.type.size // spec.max_steps))) for p, x in zip(x_ptrs, xs)]
    for k, h in hist.items():  # rows[tt] >= 0: that row of the loop's own stacked y
        seg = lay.ys[h.y]
        r = _row_of(L, h.rows, tt)
        own = b.gep(out, [b.add(I64(seg.offset), b.mul(r, I64(seg.size // spec.max_steps)))])
        x_t[k] = b.select(b.icmp_signed(">=", r, I64(0)), own, x_t[k])
    ys = [
        scratch(accs[y][1])
        if y in accs
        else at(out, b.add(I64(seg.offset), b.mul(tt, I64(seg.size // spec.max_steps))))
        for y, seg in enumerate(lay.ys)
    ]
    call(body_fn, [i_slot, *carry_a, *x_t, *p_ptrs], [*carry_b, *ys], lp.body_ws)
    for seg, src, dst in zip(lay.carries, carry_b, carry_a):
        with L.loop(seg.size) as i:
            b.store(b.load(at(src, i)), at(dst, i))
    for y, (a, _) in accs.items():  # rows[tt] >= 0: add y_t to that row
        seg, size = lay.ys[y], lay.ys[y].size // spec.max_steps
        r = _row_of(L, a.rows, tt)
        add = L.fn.append_basic_block("loopnode.acc")
        cont = L.fn.append_basic_block("loopnode.acc.done")
        b.cbranch(b.icmp_signed(">=", r, I64(0)), add, cont)
        b.position_at_end(add)
        row = at(out, b.add(I64(seg.offset), b.mul(r, I64(size))))
        with L.loop(size) as i:
            p = at(row, i)
            b.store(b.fadd(b.load(p), b.load(at(ys[y], i))), p)
        b.branch(cont)
        b.position_at_end(cont)
    b.store(b.add(t, I64(1)), count)
    b.branch(head)
    b.position_at_end(done)
    ran = b.load(count)
    b.store(b.sitofp(ran, F64), at(out, lay.steps))
    counters = L.__dict__.get("counters")
    if counters is not None and id(n) in counters:
        p = b.gep(counters[0], [I64(0), I64(counters[id(n)])], inbounds=True)
        b.store(b.add(b.load(p), ran), p)


from .linalg import _lower_linalg  # noqa: E402, I001  (it builds on Lowering above)
from .table import TABLE_OPS  # noqa: E402, I001  (it builds on Lowering above)
from .window import WINDOW_OPS, ragged_nest, window_element  # noqa: E402, I001

LOWER: dict[str, Callable[[Lowering, Node], None]] = {
    "unary": _lower_elementwise,
    "binary": _lower_elementwise,
    "compare": _lower_elementwise,
    "logical": _lower_elementwise,
    "select": _lower_elementwise,
    "cast": _lower_elementwise,
    "reduce": _lower_reduce,
    "shape": _lower_shape,
    "index": _lower_index,
    "linalg": _lower_linalg,
    "control": _lower_loop_node,
    "leaf": _lower_const,
}


def counters_symbol(name: str) -> str:
    """The global ``int64_t[]`` of function ``name`` counting the iterations its loop nodes ran
    (one entry per top-level loop node, in program order; cumulative over calls)."""
    return f"{name}.iterations"


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


def lower(prog: Program, name: str) -> tuple[ir.Module, int]:
    """The LLVM module holding function ``name`` that computes ``prog`` (see module
    docstring), and the workspace size it needs in bytes: the memory plan's, plus the spill
    slots of straight-line chunks (:data:`CHUNK_NODES`)."""
    L = Lowering(prog, name, chunked=True)
    loops = [n for n in prog.graph.nodes if n.op == Op.LOOP]
    if loops:
        ty = ir.ArrayType(I64, len(loops))
        g = ir.GlobalVariable(L.module, ty, name=counters_symbol(name))
        g.initializer = ir.Constant(ty, [0] * len(loops))
        L.counters = {0: g, **{id(n): k for k, n in enumerate(loops)}}
    module = L.run()
    return module, L.workspace_bytes
