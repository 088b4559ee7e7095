"""The lowering registry: the tables of rules and the object the rules work on.

* :data:`EMIT` — the scalar instruction(s) of every elementwise op, ``(builder, node, *operand
  values) -> value`` (rows: :mod:`.arrays`; the math ops' rows are built there from
  :data:`tapejit.codegen.mathlib.MATH`);
* :data:`LOWER` — the lowering of every other op group, ``(Lowering, node) -> None`` (rows:
  :mod:`.arrays`, :mod:`.linalg`, :mod:`.control`);
* :data:`INDEX_OPS` — ops of the ``"index"`` group with a rule of their own (rows: :mod:`.table`,
  :mod:`.window`; the others are gathers and scatters, lowered by :mod:`.arrays`);
* :class:`Lowering` — the state of lowering one program into one LLVM function (module, function,
  builder, where each value lives) and the emission primitives every rule uses: element loads and
  stores, rolled loops and nests, affine index arithmetic, sizes that may be arguments of a shared
  kernel function; registers and spill slots come from :class:`.chunks.Chunks`;
* the index helpers shared by rules and kernels: :func:`gather_affine`, the ragged-window
  addressing (:func:`ragged_nest`, :func:`window_element`), :func:`block_in_place`.

This module imports no family: each family module imports it and registers its rows, and
:mod:`tapejit.codegen.lower` imports every family once. The driver (:mod:`.driver`) extends
:class:`Lowering` with the program walk, guards and call tables."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable

import llvmlite.ir as ir

from ...core import ops
from ...core.ir import Node
from ...core.program import Program
from ...core.ops import Op

from .base import ELEM, F64, I1, I8, I32, I64, _c_strides, _i64
from .chunks import Chunks, _Registers


Rule = Callable[["Lowering", Node], None]

#: Scalar code of each elementwise op: (builder, node, *operand values) -> value.
EMIT: dict[Op, Callable[..., ir.Value]] = {}
#: The lowering of each op group other than the elementwise ones (straight-line code or its own
#: loop nest).
LOWER: dict[str, Rule] = {}
#: Ops of the ``"index"`` group that lower by a rule of their own (table- and window-indexed).
INDEX_OPS: dict[Op, Rule] = {}

#: The metadata string of an interleave hint (see :func:`tapejit.codegen.jit.loop_hints`).
INTERLEAVE_HINT = "tapejit.interleave"


class Lowering(Chunks):
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
        # straight-line chunks (see chunks.CHUNK_NODES): only the top-level program, whose workspace
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

    def _as_f64(self, n: Node) -> ir.Value:
        v = self.load(n, I64(0))
        return self.b.uitofp(v, F64) if n.dtype == "bool" else v


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


def block_in_place(L: "Lowering", n: Node) -> bool:
    """Whether spliced scatter ``n``'s update was computed into its block already (memory
    planning, :func:`tapejit.passes.memplan._place_blocks`): only the fill around it is left."""
    o = ops.splice_offset(n)
    if n.op != Op.SCATTER or o is None:
        return False
    (ps, po), (us, uo) = L.location(n), L.location(n.args[1])
    return ps is not None and us == ps and uo == po + o


# ----------------------------------------------------------------------------------------------
# Ragged windows: the loops over a layout's rows and their positions (the window ops, and
# fused loops whose body reads windows).


@contextmanager
def rows(L: Lowering, attrs: tuple):
    """``for k in range(T)``: yields ``(k, L(k), base(k))`` as i64 values."""
    T, L0, dL = attrs[:3]
    b = L.b
    with L.loop(T) as k:
        # base(k) = L0*k + dL*k*(k-1)/2, exact in i64 (k*(k-1) is even)
        tri = b.sdiv(b.mul(k, b.sub(k, I64(1)), flags=("nsw",)), I64(2))
        yield k, L.affine([k], L0, (dL,)), L.affine([k, tri], 0, (L0, dL))


@contextmanager
def ragged_nest(L: Lowering, attrs: tuple, space: tuple, hint: int = 0):
    """The loops over ``space = (P, *S)`` of a ragged layout ``attrs[:3]``: rows ``k``, their
    positions ``m`` (the vectorised loop, with the interleave ``hint``), then ``S``. Yields
    ``([p, *s], (k, m))`` with ``p = base(k) + m`` the flat position, as
    :meth:`Lowering.nest` yields ``[p, *s]``. A fused loop whose body reads windows runs in
    it, and so do the standalone ops."""
    b = L.b
    with rows(L, attrs) as (k, length, base):
        with L.loop(length, hint) as m:
            p = b.add(base, m, flags=("nsw",))
            with L.nest(tuple(space[1:])) as rest:
                yield [p, *rest], (k, m)


def row_element(L: Lowering, attrs: tuple, dims: tuple, row: tuple, rest: list):
    """Element offset, in an array of extents ``dims``, of row ``a + c*k + d*m`` of window
    position ``row = (k, m)`` and inner index ``rest``."""
    a, c, d = attrs[3:]
    return L.affine([L.affine(list(row), a, (c, d)), *rest], 0, L.c_strides(dims))


def window_element(L: Lowering, n: Node, row: tuple, rest: list):
    """Element offset in ``window`` ``n``'s operand of the element at row position ``row =
    (k, m)`` and inner index ``rest``."""
    return row_element(L, n.attrs, L.shape(n.args[0]), row, rest)

