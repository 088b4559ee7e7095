"""The fast call path: ``METH_FASTCALL`` entry points JIT-compiled next to the kernel.

``grad(x, out=g)`` through cffi costs ~0.45 µs of ABI overhead plus Python-level validation. The
*trampolines* built here are CPython builtin functions, written in LLVM IR, that check the call
and read numpy's data pointers themselves, then call the kernel — ~0.03 µs. Each implements::

    PyObject *tj_fast(PyObject *slow, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)

and takes the fast path only when *everything* is exactly as compiled for: ``nargs`` positional
arguments and either no keyword or one, ``out`` (the interned string); every array argument an
exact ``numpy.ndarray`` with the canonical float64 descriptor, the compiled ``ndim`` and shape,
flags C-contiguous and aligned; a scalar argument a Python ``float`` (or such a 0-d array);
``out`` an exact ndarray (or, for a tuple ``argnums``, an exact tuple of them) that is also
writeable, with no output overlapping an argument or another output. Without ``out`` the
trampoline allocates the gradient itself (``numpy.empty`` of the compiled shape through
``PyObject_Vectorcall``; a Python float for a scalar argument; a tuple for a tuple ``argnums``).
``NAME`` returns the gradient; ``NAME_vg`` returns ``(value, gradient)``.

Kernels whose work estimate passes :data:`GIL_RELEASE_WORK` run without the GIL, in one of
:data:`SLOTS` workspaces taken with a compare-and-swap (the value goes to the trampoline's stack);
otherwise the GIL is held throughout and one workspace suffices.

Anything else — a wrong shape, a list, a subclass, an error status, every workspace taken — is
forwarded unchanged to ``slow`` (``PyObject_Vectorcall``), the Python implementation, which
validates from scratch and either computes the result or raises the clear error. So the fast path
can only ever accept calls the slow path would accept, and errors stay Python exceptions. Any
object allocated before a fallback is released first.

The object layouts used (``PyObject``, ``PyFloatObject``, ``PyTupleObject``, numpy's
``PyArrayObject_fields``) are the public ABI; :func:`layout_ok` re-checks every offset against live
objects at import, and when anything differs the fast path is simply not used.
"""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import llvmlite.ir as ir
import numpy as np

I8P = ir.IntType(8).as_pointer()
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F64 = ir.DoubleType()

# Byte offsets (64-bit CPython / numpy ABI), verified by layout_ok().
OB_TYPE = 8
FLOAT_VALUE = 16
TUPLE_SIZE = 16
TUPLE_ITEMS = 24
ARR_DATA, ARR_ND, ARR_DIMS, ARR_DESCR, ARR_FLAGS = 16, 24, 32, 56, 64
NPY_C_CONTIGUOUS, NPY_ALIGNED, NPY_WRITEABLE = 0x0001, 0x0100, 0x0400
METH_FASTCALL_KEYWORDS = 0x0080 | 0x0002

_api = ctypes.pythonapi
_OUT = sys.intern("out")


def _addr(obj) -> int:
    return ctypes.cast(obj, ctypes.c_void_p).value


def _read(base: int, off: int, ctype=ctypes.c_void_p):
    return ctype.from_address(base + off).value


def layout_ok() -> bool:
    """Whether the object layouts this module assumes hold in this process."""
    if sys.implementation.name != "cpython" or ctypes.sizeof(ctypes.c_void_p) != 8:
        return False
    try:
        a = np.zeros((3, 5))
        t = (a, 1.5)
        f = 2.5
        return (
            _read(id(a), OB_TYPE) == id(np.ndarray)
            and _read(id(a), ARR_DATA) == a.ctypes.data
            and _read(id(a), ARR_ND, ctypes.c_int) == 2
            and ctypes.c_int64.from_address(_read(id(a), ARR_DIMS) + 8).value == 5
            and _read(id(a), ARR_DESCR) == id(np.dtype(np.float64))
            and _read(id(a), ARR_FLAGS, ctypes.c_int) & NPY_C_CONTIGUOUS
            and not _read(id(a[:, ::2]), ARR_FLAGS, ctypes.c_int) & NPY_C_CONTIGUOUS
            and _read(id(f), FLOAT_VALUE, ctypes.c_double) == 2.5
            and _read(id(t), TUPLE_SIZE, ctypes.c_ssize_t) == 2
            and _read(id(t), TUPLE_ITEMS) == id(a)
        )
    except Exception:  # noqa: BLE001 - any surprise means: do not use the fast path
        return False


@dataclass(frozen=True)
class Spec:
    """What the trampolines accept and pass to the kernel.

    ``arg_shapes``: shape of each runtime argument; ``grad_shapes``: shape of each gradient
    output; ``tuple_out``: gradients are a tuple; ``n_consts``: captured constants the kernel
    takes after the runtime arguments; ``release_gil``: release the GIL around the kernel (for
    kernels whose work dwarfs the ~0.1 µs it costs, see :data:`GIL_RELEASE_WORK`);
    ``dynamic``: arguments of dynamic length — any number of rows from 1 to the compiled
    capacity ``arg_shapes[i][0]``; the kernel takes each one's length as a pointer to a double
    after the arguments (a longer one takes the Python path, which compiles for it).
    """

    arg_shapes: tuple[tuple[int, ...], ...]
    grad_shapes: tuple[tuple[int, ...], ...]
    tuple_out: bool
    n_consts: int
    release_gil: bool = False
    uses_workspace: bool = True
    dynamic: tuple[int, ...] = ()  # arguments whose leading axis may be 1..arg_shapes[i][0]

    @property
    def slots(self) -> int:
        """Workspaces the trampolines own: one while they hold the GIL; :data:`SLOTS` when
        they release it around a kernel that needs one (threads take a free one)."""
        return SLOTS if self.release_gil and self.uses_workspace else 1


#: Operations per call (the memory plan's ``work`` estimate) from which the fast path releases
#: the GIL around the kernel. Releasing and re-taking it costs ~0.1 µs uncontended, and a
#: thread waiting for the GIL takes it over, so below ~10^4 operations (a few µs of kernel) it
#: costs more than the parallelism gains; measured in ``bench/test_calls.py``.
GIL_RELEASE_WORK = 20_000

#: Workspaces of a trampoline that releases the GIL: that many threads run the kernel through
#: the fast path at once; a further thread takes the Python path (its own workspace).
SLOTS = 4

#: The environment table: every address the trampolines need, filled in after loading (so the
#: object code holds no process-specific address and can be cached on disk). After these: the
#: captured constants' data addresses, one shape tuple per gradient (``numpy.empty``'s
#: argument), then per workspace slot its address and a ``busy`` word (1 while a call that
#: released the GIL uses it). The value and scalar gradients go to the trampoline's stack.
ENV = (
    "ndarray", "float64", "float", "tuple", "out", "Py_IncRef", "Py_DecRef",
    "PyObject_Vectorcall", "PyFloat_FromDouble", "PyTuple_New", "PyEval_SaveThread",
    "PyEval_RestoreThread", "empty", "next", "next_vg",
)  # fmt: skip


def env_name(trampoline: str) -> str:
    return f"{trampoline}_env"


def fill_env(
    table_address: int,
    workspace_addrs: Sequence[int],
    const_addrs: Sequence[int],
    shape_tuples: Sequence[tuple],
) -> None:
    """Write this process's addresses into a loaded trampoline's environment table: one
    workspace per slot (:attr:`Spec.slots`). The caller keeps the workspaces and
    ``shape_tuples`` alive as long as the trampolines."""
    values = {
        "ndarray": id(np.ndarray),
        "float64": id(np.dtype(np.float64)),
        "float": id(float),
        "tuple": id(tuple),
        "out": id(_OUT),
        "Py_IncRef": _addr(_api.Py_IncRef),
        "Py_DecRef": _addr(_api.Py_DecRef),
        "PyObject_Vectorcall": _addr(_api.PyObject_Vectorcall),
        "PyFloat_FromDouble": _addr(_api.PyFloat_FromDouble),
        "PyTuple_New": _addr(_api.PyTuple_New),
        "PyEval_SaveThread": _addr(_api.PyEval_SaveThread),
        "PyEval_RestoreThread": _addr(_api.PyEval_RestoreThread),
        "empty": id(np.empty),
        "next": 0,
        "next_vg": 0,
    }
    words = [values[k] for k in ENV] + list(const_addrs) + [id(s) for s in shape_tuples]
    for w in workspace_addrs:
        words += [w, 0]
    (ctypes.c_uint64 * len(words)).from_address(table_address)[:] = words


def set_next(table_address: int, entry: Any, vg_entry: Any) -> None:
    """Chain a trampoline pair to another specialisation's (``None``: to none). When a guard
    fails, the trampoline calls that entry with the same arguments before it falls back to the
    Python path — so inputs that alternate between specialisations are dispatched natively. The
    caller keeps ``entry``/``vg_entry`` alive while chained (the call itself holds a reference)."""
    words = (ctypes.c_uint64 * 2).from_address(table_address + 8 * ENV.index("next"))
    words[:] = [0 if entry is None else id(entry), 0 if vg_entry is None else id(vg_entry)]


_VOID_FN = ir.FunctionType(ir.VoidType(), [I8P])
_VECTORCALL = ir.FunctionType(I8P, [I8P, I8P.as_pointer(), I64, I8P])


class _Builder:
    """One trampoline function over a shared environment table."""

    def __init__(self, table: ir.GlobalVariable, module: ir.Module, kernel: ir.Function, name):
        self.table = table
        self.fn = ir.Function(module, _VECTORCALL, name=name)
        self.fn.attributes.add("nounwind")
        self.kernel = kernel
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        self.fail = self.fn.append_basic_block("slow")

    def slot(self, k: int) -> ir.Value:
        """The address of word ``k`` of the environment table."""
        return self.b.gep(self.table, [I64(0), I64(k)], inbounds=True)

    def env(self, slot: str | int, ty: ir.Type = I8P) -> ir.Value:
        """Entry ``slot`` of the environment table (an address filled in at load time)."""
        k = ENV.index(slot) if isinstance(slot, str) else slot
        return self.b.inttoptr(self.b.load(self.slot(k)), ty)

    def api(self, name: str, ret: ir.Type, *args: ir.Value) -> ir.Value:
        """Call the C-API function ``name`` (its address is in the environment table)."""
        fnty = ir.FunctionType(ret, [a.type for a in args])
        return self.b.call(self.env(name, fnty.as_pointer()), list(args))

    def field(self, obj: ir.Value, offset: int, ty: ir.Type) -> ir.Value:
        p = self.b.gep(obj, [I64(offset)], inbounds=True)
        return self.b.load(self.b.bitcast(p, ty.as_pointer()))

    def require(self, cond: ir.Value, otherwise: ir.Block | None = None) -> None:
        """Continue if ``cond``; else go to ``otherwise`` (the slow path by default)."""
        ok = self.fn.append_basic_block("ok")
        self.b.cbranch(cond, ok, otherwise or self.fail)
        self.b.position_at_end(ok)

    def is_type(self, obj: ir.Value, slot: str) -> ir.Value:
        return self.b.icmp_unsigned("==", self.field(obj, OB_TYPE, I8P), self.env(slot))

    def array(self, obj: ir.Value, shape: tuple[int, ...], flags: int) -> tuple[ir.Value, ir.Value]:
        """Check ``obj`` is an exact float64 ndarray of ``shape`` with ``flags``; returns its data
        pointer and its end address (for overlap checks)."""
        b = self.b
        self.array_header(obj, len(shape), flags)
        if shape:
            dims = self.field(obj, ARR_DIMS, I64.as_pointer())
            ok = ir.Constant(ir.IntType(1), 1)
            for k, d in enumerate(shape):
                dk = b.load(b.gep(dims, [I64(k)], inbounds=True))
                ok = b.and_(ok, b.icmp_signed("==", dk, I64(d)))
            self.require(ok)
        data = self.field(obj, ARR_DATA, I8P)
        end = b.gep(data, [I64(8 * int(np.prod(shape)))])
        return b.bitcast(data, F64.as_pointer()), end

    def local(self, ty: ir.Type) -> ir.Value:
        """A stack slot of ``ty``, allocated in the entry block (so LLVM keeps it in a
        register or a fixed frame slot)."""
        with self.b.goto_entry_block():
            return self.b.alloca(ty)

    def array_header(self, obj: ir.Value, ndim: int, flags: int) -> None:
        """Check ``obj`` is an exact ndarray with the canonical float64 descriptor, ``ndim``
        dimensions and ``flags`` set (else the slow path)."""
        b = self.b
        self.require(self.is_type(obj, "ndarray"))
        ok = b.icmp_unsigned("==", self.field(obj, ARR_DESCR, I8P), self.env("float64"))
        ok = b.and_(ok, b.icmp_signed("==", self.field(obj, ARR_ND, I32), I32(ndim)))
        got = self.field(obj, ARR_FLAGS, I32)
        ok = b.and_(ok, b.icmp_unsigned("==", b.and_(got, I32(flags)), I32(flags)))
        self.require(ok)

    def null(self, v: ir.Value) -> ir.Value:
        return self.b.icmp_unsigned("==", v, ir.Constant(I8P, None))


def add_trampolines(module: ir.Module, kernel_name: str, spec: Spec, name: str) -> None:
    """Add the trampolines ``name`` (the gradient) and ``name + "_vg"`` (value and gradient) for
    kernel ``kernel_name`` to ``module``, sharing the environment table ``env_name(name)``.

    Each accepts ``f(*args)`` — it then allocates the gradient (``numpy.empty`` of the compiled
    shape; a Python float for a scalar argument; a tuple of them for a tuple ``argnums``) — or
    ``f(*args, out=out)``, and returns the gradient (``out`` itself when given), or for ``_vg``
    the tuple ``(value, gradient)``.
    """
    n_words = len(ENV) + spec.n_consts + len(spec.grad_shapes) + 2 * spec.slots
    table = ir.GlobalVariable(module, ir.ArrayType(I64, n_words), env_name(name))
    table.initializer = ir.Constant(table.value_type, None)
    kernel = module.get_global(kernel_name)
    # one copy of the program, called by both trampolines: inlined, LLVM optimised and
    # generated it twice (the GP likelihood's module, 37 kernels: 0.49 -> 0.38 s cold; a call
    # costs ~1 ns next to the trampoline's ~100 ns)
    kernel.attributes.add("noinline")
    for fname, with_value in ((name, False), (name + "_vg", True)):
        _trampoline(_Builder(table, module, kernel, fname), spec, with_value)


def _trampoline(t: _Builder, spec: Spec, with_value: bool) -> None:
    b = t.b
    slow, args, nargs, kwnames = t.fn.args
    n = len(spec.arg_shapes)
    chained = _chained(t, "next_vg" if with_value else "next")
    in_ptrs, ranges = _arguments(t, spec, args, nargs)
    given, alloc = t.fn.append_basic_block("out_given"), t.fn.append_basic_block("allocate")
    b.cbranch(t.null(kwnames), alloc, given)

    # f(*args, out=out): check out, then the kernel writes into it
    b.position_at_end(given)
    size = t.field(kwnames, TUPLE_SIZE, I64)
    first = t.field(kwnames, TUPLE_ITEMS, I8P)
    t.require(b.and_(b.icmp_signed("==", size, I64(1)), b.icmp_unsigned("==", first, t.env("out"))))
    out = b.load(b.gep(args, [I64(n)], inbounds=True))
    if spec.tuple_out:
        t.require(t.is_type(out, "tuple"))
        t.require(b.icmp_signed("==", t.field(out, TUPLE_SIZE, I64), I64(len(spec.grad_shapes))))
        items = [t.field(out, TUPLE_ITEMS + 8 * k, I8P) for k in range(len(spec.grad_shapes))]
    else:
        items = [out]
    out_ptrs, out_ranges = [], []
    for obj, shape in zip(items, spec.grad_shapes):
        p, end = t.array(obj, shape, NPY_C_CONTIGUOUS | NPY_ALIGNED | NPY_WRITEABLE)
        out_ptrs.append(p)
        out_ranges.append((b.bitcast(p, I8P), end))
    overlap = ir.Constant(ir.IntType(1), 0)  # no output may overlap an argument or an output
    for k, (o0, o1) in enumerate(out_ranges):
        for a0, a1 in ranges + out_ranges[:k]:
            both = b.and_(b.icmp_unsigned("<", o0, a1), b.icmp_unsigned("<", a0, o1))
            overlap = b.or_(overlap, both)
    t.require(b.not_(overlap))
    value = _run(t, spec, in_ptrs, out_ptrs, chained, t.fail)
    t.api("Py_IncRef", ir.VoidType(), out)
    _return(t, out, with_value, value)

    # f(*args): allocate the gradient (nothing was allocated before this point)
    b.position_at_end(alloc)
    owned, out_ptrs = [], []
    base = len(ENV) + spec.n_consts
    for k, shape in enumerate(spec.grad_shapes):
        if shape == ():  # a float result: the kernel writes a double on this stack
            out_ptrs.append(t.local(F64))
            continue
        shape_arg = b.alloca(I8P)
        b.store(t.env(base + k), shape_arg)
        vec = t.env("PyObject_Vectorcall", _VECTORCALL.as_pointer())
        obj = b.call(vec, [t.env("empty"), shape_arg, I64(1), ir.Constant(I8P, None)])
        t.require(b.not_(t.null(obj)), _release(t, owned, "nomem"))
        owned.append(obj)
        out_ptrs.append(b.bitcast(t.field(obj, ARR_DATA, I8P), F64.as_pointer()))
    on_guard = _release(t, owned, "guard", chained)
    value = _run(t, spec, in_ptrs, out_ptrs, on_guard, _release(t, owned, "busy", t.fail))
    results = []  # the objects returned, owned
    k_owned = iter(owned)
    for k, shape in enumerate(spec.grad_shapes):
        if shape == ():
            v = b.load(out_ptrs[k])
            obj = t.api("PyFloat_FromDouble", I8P, v)
            t.require(b.not_(t.null(obj)), _release(t, owned + results, "nomem"))
            results.append(obj)
        else:
            results.append(next(k_owned))
    if spec.tuple_out:
        tup = t.api("PyTuple_New", I8P, I64(len(results)))
        t.require(b.not_(t.null(tup)), _release(t, results, "nomem"))
        for k, obj in enumerate(results):
            p = b.gep(tup, [I64(TUPLE_ITEMS + 8 * k)], inbounds=True)
            b.store(obj, b.bitcast(p, I8P.as_pointer()))
        result = tup
    else:
        (result,) = results
    _return(t, result, with_value, value)

    # anything else: the Python path validates from scratch (and raises the clear error)
    b.position_at_end(t.fail)
    vectorcall = t.env("PyObject_Vectorcall", _VECTORCALL.as_pointer())
    b.ret(b.call(vectorcall, [slow, args, nargs, kwnames]))


def _chained(t: _Builder, slot: str) -> ir.Block:
    """The block a failed guard goes to: call the chained specialisation's entry (see
    :func:`set_next`) with the same arguments, holding a reference to it; or, if there is none,
    the Python path."""
    b = t.b
    here = b.block
    blk = t.fn.append_basic_block("chained")
    b.position_at_end(blk)
    slow, args, nargs, kwnames = t.fn.args
    nxt = t.env(slot)
    t.require(b.not_(t.null(nxt)))
    t.api("Py_IncRef", ir.VoidType(), nxt)
    vectorcall = t.env("PyObject_Vectorcall", _VECTORCALL.as_pointer())
    r = b.call(vectorcall, [nxt, args, nargs, kwnames])
    t.api("Py_DecRef", ir.VoidType(), nxt)
    b.ret(r)
    b.position_at_end(here)
    return blk


def _arguments(t: _Builder, spec: Spec, args: ir.Value, nargs: ir.Value) -> tuple[list, list]:
    """Check the positional arguments; their data pointers and address ranges."""
    b = t.b
    t.require(b.icmp_signed("==", nargs, I64(len(spec.arg_shapes))))
    in_ptrs, ranges, lengths = [], [], []
    for i, shape in enumerate(spec.arg_shapes):
        obj = b.load(b.gep(args, [I64(i)], inbounds=True))
        if shape == ():
            is_float = t.is_type(obj, "float")
            as_float = t.fn.append_basic_block("float")
            as_array = t.fn.append_basic_block("array0d")
            join = t.fn.append_basic_block("arg")
            b.cbranch(is_float, as_float, as_array)
            b.position_at_end(as_float)
            pf = b.bitcast(b.gep(obj, [I64(FLOAT_VALUE)], inbounds=True), F64.as_pointer())
            b.branch(join)
            b.position_at_end(as_array)
            pa, _ = t.array(obj, (), NPY_ALIGNED)
            from_array = b.block
            b.branch(join)
            b.position_at_end(join)
            p = b.phi(F64.as_pointer())
            p.add_incoming(pf, as_float)
            p.add_incoming(pa, from_array)
            in_ptrs.append(p)
            p8 = b.bitcast(p, I8P)  # a 0-d array may be a view into an output, too
            ranges.append((p8, b.gep(p8, [I64(8)])))
        elif i in spec.dynamic:
            p, end, rows = _dynamic_array(t, obj, shape)
            in_ptrs.append(p)
            ranges.append((b.bitcast(p, I8P), end))
            lengths.append(rows)
        else:
            p, end = t.array(obj, shape, NPY_C_CONTIGUOUS | NPY_ALIGNED)
            in_ptrs.append(p)
            ranges.append((b.bitcast(p, I8P), end))
    for rows in lengths:  # the hidden length inputs, after the arguments (as doubles)
        slot = t.local(F64)
        b.store(b.sitofp(rows, F64), slot)
        in_ptrs.append(slot)
    return in_ptrs, ranges


def _dynamic_array(t: _Builder, obj: ir.Value, shape: tuple[int, ...]) -> tuple:
    """Check ``obj`` is an exact C-contiguous aligned float64 ndarray of shape ``(rows,
    *shape[1:])`` with ``1 <= rows <= shape[0]``; returns its data pointer, end address and
    ``rows`` (i64)."""
    b = t.b
    t.array_header(obj, len(shape), NPY_C_CONTIGUOUS | NPY_ALIGNED)
    dims = t.field(obj, ARR_DIMS, I64.as_pointer())
    rows = b.load(b.gep(dims, [I64(0)], inbounds=True))
    ok = b.and_(b.icmp_signed(">=", rows, I64(1)), b.icmp_signed("<=", rows, I64(shape[0])))
    for k, d in enumerate(shape[1:], start=1):
        dk = b.load(b.gep(dims, [I64(k)], inbounds=True))
        ok = b.and_(ok, b.icmp_signed("==", dk, I64(d)))
    t.require(ok)
    data = t.field(obj, ARR_DATA, I8P)
    row_bytes = 8 * int(np.prod(shape[1:], dtype=np.int64))
    end = b.gep(data, [b.mul(rows, I64(row_bytes))])
    return b.bitcast(data, F64.as_pointer()), end, rows


def _run(
    t: _Builder, spec: Spec, in_ptrs: list, out_ptrs: list, on_guard: ir.Block, on_busy: ir.Block
) -> ir.Value:
    """Call the kernel and return the value it computed; a nonzero status goes to ``on_guard``
    (nothing was written then).

    With ``spec.release_gil`` the call runs without the GIL. A kernel with a workspace then
    takes one of :attr:`Spec.slots` slots with a compare-and-swap on its ``busy`` word; a call
    that finds every slot taken goes to ``on_busy``, whose slow path uses the thread's own
    workspace. The value output lives on this function's stack (each thread has its own).
    """
    b = t.b
    n = len(in_ptrs)  # the arguments, then the hidden lengths of dynamic ones
    kernel = t.kernel
    kty = kernel.function_type.args
    value_ptr = t.local(F64)
    status_ptr = t.local(I32)
    base = len(ENV) + spec.n_consts + len(spec.grad_shapes)

    def call(slot: int) -> None:
        kargs = list(in_ptrs)
        kargs += [t.env(len(ENV) + j, kty[n + j]) for j in range(spec.n_consts)]
        kargs.append(value_ptr)
        kargs += out_ptrs
        kargs.append(t.env(base + 2 * slot))
        kargs = [b.bitcast(v, ty) if v.type != ty else v for v, ty in zip(kargs, kty)]
        b.store(b.call(kernel, kargs), status_ptr)

    if not spec.release_gil:
        call(0)
    else:
        done = t.fn.append_basic_block("ran")
        for slot in range(spec.slots):
            busy = t.slot(base + 2 * slot + 1)
            if spec.slots > 1:
                pair = b.cmpxchg(busy, I64(0), I64(1), "acquire", "monotonic")
                taken = t.fn.append_basic_block(f"slot{slot}")
                other = t.fn.append_basic_block(f"after_slot{slot}")
                b.cbranch(b.extract_value(pair, 1), taken, other)
                b.position_at_end(taken)
            state = t.api("PyEval_SaveThread", I8P)
            call(slot)
            t.api("PyEval_RestoreThread", ir.VoidType(), state)
            if spec.slots > 1:
                b.store_atomic(I64(0), busy, "release", 8)
            b.branch(done)
            if spec.slots > 1:
                b.position_at_end(other)
        if spec.slots > 1:
            b.branch(on_busy)  # every slot taken: the Python path
        b.position_at_end(done)
    t.require(b.icmp_signed("==", b.load(status_ptr), I32(0)), on_guard)
    return b.load(value_ptr)


def _release(t: _Builder, owned: list, label: str, then: ir.Block | None = None) -> ir.Block:
    """A block that releases the references ``owned`` and goes to ``then`` (or returns NULL:
    the exception the failing C-API call set propagates)."""
    here = t.b.block
    blk = t.fn.append_basic_block(label)
    t.b.position_at_end(blk)
    for obj in owned:
        t.api("Py_DecRef", ir.VoidType(), obj)
    if then is None:
        t.b.ret(ir.Constant(I8P, None))
    else:
        t.b.branch(then)
    t.b.position_at_end(here)
    return blk


def _return(t: _Builder, result: ir.Value, with_value: bool, value: ir.Value) -> None:
    """Return ``result`` (a new reference), or ``(value, result)`` for the ``_vg`` entry."""
    b = t.b
    if not with_value:
        b.ret(result)
        return
    value = t.api("PyFloat_FromDouble", I8P, value)
    t.require(b.not_(t.null(value)), _release(t, [result], "nomem_value"))
    tup = t.api("PyTuple_New", I8P, I64(2))
    t.require(b.not_(t.null(tup)), _release(t, [result, value], "nomem_pair"))
    for k, obj in enumerate((value, result)):
        p = b.gep(tup, [I64(TUPLE_ITEMS + 8 * k)], inbounds=True)
        b.store(obj, b.bitcast(p, I8P.as_pointer()))
    b.ret(tup)


class _MethodDef(ctypes.Structure):
    _fields_ = [
        ("ml_name", ctypes.c_char_p),
        ("ml_meth", ctypes.c_void_p),
        ("ml_flags", ctypes.c_int),
        ("ml_doc", ctypes.c_char_p),
    ]


_new_cfunction = _api.PyCFunction_NewEx
_new_cfunction.restype = ctypes.py_object
_new_cfunction.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.c_void_p]


def make_builtin(address: int, slow: Callable, name: str, keepalive: list[Any]) -> Callable:
    """A CPython builtin function calling the trampoline at ``address`` with ``slow`` as its
    fallback. ``keepalive`` receives the method definition, which must outlive the function."""
    name_b = name.encode()
    mdef = _MethodDef(name_b, address, METH_FASTCALL_KEYWORDS, None)
    keepalive.extend([mdef, name_b])
    return _new_cfunction(ctypes.addressof(mdef), slow, None)


_TP_FLAGS_OFFSET = 168  # offsetof(PyTypeObject, tp_flags) on 64-bit CPython 3.8-3.13
_HAVE_VECTORCALL = 1 << 11


def inherit_vectorcall(cls: type, equivalent_call: bool = False) -> bool:
    """Let instances of ``cls``, a Python subclass of a vectorcall type (``functools.partial``),
    be called by vectorcall as the base's instances are.

    CPython 3.12 does this itself (heap types inherit ``Py_TPFLAGS_HAVE_VECTORCALL`` when they
    keep the base's ``tp_call``); otherwise the flag is set here after checking that the word at
    the flag's offset is the type's flags. Without it a call costs ~0.15 µs more (tuple + dict).
    A ``cls`` that defines ``__call__`` (for its signature and docstring) is accepted only with
    ``equivalent_call=True``: its promise that ``__call__`` computes what the vectorcall does, as
    calls then bypass it. Returns whether instances are vectorcall-able.
    """
    base = cls.__mro__[1]
    if cls.__flags__ & _HAVE_VECTORCALL:
        return True
    if "__call__" in cls.__dict__ and not equivalent_call:
        return False
    if not base.__flags__ & _HAVE_VECTORCALL or not layout_ok():
        return False
    word = ctypes.c_ulong.from_address(id(cls) + _TP_FLAGS_OFFSET)
    if word.value != cls.__flags__:
        return False
    word.value |= _HAVE_VECTORCALL
    return bool(cls.__flags__ & _HAVE_VECTORCALL)
