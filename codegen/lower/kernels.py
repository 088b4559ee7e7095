"""Loop kernels: the fused loop over a kernel's iteration space (:func:`lower_fused_loop`: every
body node per iteration, reductions accumulated with ``reassoc``, the interleave hint for
polynomial math), the structural key of a kernel as a function (:class:`Interface`: its
parameters, and sizes and constants as positions so that kernels differing only in them share a
function, :data:`SHARE_MIN`), and the emission of one kernel function
(:class:`KernelFunction`). Which kernels share a function and how they are called is
:mod:`.calls`'s."""

from __future__ import annotations

import math
import struct

import llvmlite.ir as ir

from ...core import ops
from ...core.ir import Node, type_text
from ...core.ops import Op

from .. import mathlib
from .base import ELEM, ELEM_REG, F64, I64
from .lowering import (EMIT, Lowering, block_in_place, gather_affine, ragged_nest, row_element,
                       window_element)

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


def _interleave(k, size) -> int:
    """The interleave hint of fused kernel ``k`` over ``size`` iterations: for a body that
    evaluates polynomial math, :data:`INTERLEAVE` from :data:`INTERLEAVE_MIN_TRIP` iterations
    (or a size known only at run time) and 1 below (so the vector loop runs at all); 0 (LLVM's
    choice) for other loops."""
    if not any(n.op in mathlib.MATH and mathlib.MATH[n.op].body is not None for n in k.body):
        return 0
    return 1 if isinstance(size, int) and size < INTERLEAVE_MIN_TRIP else INTERLEAVE


def lower_fused_loop(L: Lowering, k) -> None:
    """One fused loop over ``k.space``: every body node per iteration, operands read from memory
    loaded first (so an in-place store never clobbers a value still to be read), body values in
    registers, stored only when they have a slot; full reductions accumulate with ``reassoc``."""
    b = L.b
    body_ids = {id(n) for n in k.body}
    gathers = [
        n
        for n in k.body
        if (n.op in ops.GATHERS and n.args[0].shape != ()) or n.op == Op.TAKE
    ]
    accs = {}
    for n in k.body:
        if n.op in ops.REDUCE:
            accs[id(n)] = L.accumulator(0.0 if n.op == Op.REDUCE_SUM else -math.inf)
    windows = [n for n in k.body if n.op == Op.WINDOW]
    sinks = [n for n in k.body if n.op == Op.WINDOW_ADD]
    for n in sinks:  # the result holds the accumulator before the loop adds into it
        if n.args[0].op == Op.CONST or L.location(n) != L.location(n.args[0]):
            L.copy_into(L.ptr(n), n.args[0])
    space = L.space(k)
    size = L.size(space)
    hint = _interleave(k, size)
    if windows or sinks:
        nest = ragged_nest(L, (windows or sinks)[0].attrs, space, hint)
    else:
        nest = L.nest(space) if gathers else L.loop(size, hint)
    with nest as idx:
        if windows or sinks:
            idx, row = idx
        if gathers or windows or sinks:
            i = L.flat(idx, space) if idx else I64(0)
        else:
            i, idx = idx, None
        vals: dict[int, ir.Value] = {}
        for n in k.body:  # loads of operands in memory come first
            if n in gathers or n.op in ops.SCALAR_SPREADS or n.op == Op.WINDOW:
                continue
            for a in n.args[1:] if n.op == Op.WINDOW_ADD else n.args:  # not the accumulator
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
            elif n.op == Op.TAKE:  # x[tab[t], ...]: the row the table names at t
                x, tab = n.args
                named = b.fptosi(L.load(tab, idx[0]), I64)  # (not `row`: a window's position)
                at = L.affine([named, *idx[1:]], 0, L.c_strides(L.shape(x)))
                v = L._load_elem(L.ptr(x), at, n.dtype)
            elif n in gathers:
                base, offset, strides = L.gather_source(n)
                v = L._load_elem(base, L.affine(idx, offset, strides), n.dtype)
            elif n.op == Op.WINDOW:
                v = L._load_elem(L.ptr(n.args[0]), window_element(L, n, row, idx[1:]), n.dtype)
            elif n.op == Op.WINDOW_ADD:
                # out[a + c*k + d*m] += upd[p]; with d = 0 every position of a row adds into
                # one element, reassociated (as the standalone window_add sums a row in a
                # register) so that the row's additions can be a vector reduction
                at = row_element(L, n.attrs, L.shape(n), row, idx[1:])
                p = b.gep(L.ptr(n), [at], inbounds=True)
                flags = ("reassoc",) if n.attrs[5] == 0 else ()
                b.store(b.fadd(b.load(p), val(n.args[1]), flags=flags), p)
                continue
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
                    line += "placed|" if block_in_place(L, n) else ""
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
        L = type(outer).__new__(type(outer))  # the outer lowering's class, not initialised
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
            lower_fused_loop(L, k)
        else:
            L.node(k.op)
        base = first + len(face.scalars)
        for i, n in enumerate(face.results):
            L.b.store(L.regs[id(n)], self.fn.args[base + i])
        L.b.ret_void()

