"""The fast call path: a ``METH_FASTCALL`` entry point JIT-compiled next to the kernel.

``grad(x, out=g)`` through cffi costs ~0.45 µs of ABI overhead plus Python-level validation. The
*trampoline* built here is a CPython builtin function, written in LLVM IR, that checks the call
and reads numpy's data pointers itself, then calls the kernel — ~0.03 µs. It implements::

    PyObject *tj_fast(PyObject *slow, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)

and takes the fast path only when *everything* is exactly as compiled for: ``nargs`` positional
arguments and one keyword, ``out`` (the interned string); every array argument an exact
``numpy.ndarray`` with the canonical float64 descriptor, the compiled ``ndim`` and shape, flags
C-contiguous and aligned; a scalar argument a Python ``float`` (or such a 0-d array); ``out`` an
exact ndarray (or, for a tuple ``argnums``, an exact tuple of them) that is also writeable, with
no output overlapping an argument or another output. Then it calls the kernel with a workspace
of its own (the GIL is held throughout, so one workspace suffices), and returns ``out``.

Anything else — a wrong shape, a list, a missing ``out``, a subclass, an error status — is
forwarded unchanged to ``slow`` (``PyObject_Vectorcall``), the Python implementation, which
validates from scratch and either computes the result or raises the clear error. So the fast path
can only ever accept calls the slow path would accept, and errors stay Python exceptions.

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
    """What the trampoline accepts and passes to the kernel.

    ``arg_shapes``: shape of each runtime argument; ``grad_shapes``: shape of each output array
    in ``out``; ``tuple_out``: ``out`` is a tuple; ``n_consts``: captured constants the kernel
    takes after the runtime arguments.
    """

    arg_shapes: tuple[tuple[int, ...], ...]
    grad_shapes: tuple[tuple[int, ...], ...]
    tuple_out: bool
    n_consts: int


#: The environment table: every address the trampoline needs, filled in after loading (so the
#: object code holds no process-specific address and can be cached on disk). The captured
#: constants' data addresses follow these entries.
ENV = (
    "ndarray", "float64", "float", "tuple", "out", "Py_IncRef", "PyObject_Vectorcall",
    "value", "workspace",
)  # fmt: skip


def env_name(trampoline: str) -> str:
    return f"{trampoline}_env"


def fill_env(
    table_address: int, value_addr: int, workspace_addr: int, const_addrs: Sequence[int]
) -> None:
    """Write this process's addresses into a loaded trampoline's environment table."""
    values = {
        "ndarray": id(np.ndarray),
        "float64": id(np.dtype(np.float64)),
        "float": id(float),
        "tuple": id(tuple),
        "out": id(_OUT),
        "Py_IncRef": _addr(_api.Py_IncRef),
        "PyObject_Vectorcall": _addr(_api.PyObject_Vectorcall),
        "value": value_addr,
        "workspace": workspace_addr,
    }
    words = [values[k] for k in ENV] + list(const_addrs)
    (ctypes.c_uint64 * len(words)).from_address(table_address)[:] = words


class _Builder:
    def __init__(self, module: ir.Module, kernel: ir.Function, name: str, n_consts: int):
        self.table = ir.GlobalVariable(
            module, ir.ArrayType(I64, len(ENV) + n_consts), env_name(name)
        )
        self.table.initializer = ir.Constant(self.table.value_type, None)
        self.fnty = ir.FunctionType(I8P, [I8P, I8P.as_pointer(), I64, I8P])
        self.fn = ir.Function(module, self.fnty, name=name)
        self.fn.attributes.add("nounwind")
        self.kernel = kernel
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        self.fail = self.fn.append_basic_block("slow")

    def env(self, slot: str | int, ty: ir.Type = I8P) -> ir.Value:
        """Entry ``slot`` of the environment table (an address filled in at load time)."""
        k = ENV.index(slot) if isinstance(slot, str) else slot
        p = self.b.gep(self.table, [I64(0), I64(k)], inbounds=True)
        return self.b.inttoptr(self.b.load(p), ty)

    def field(self, obj: ir.Value, offset: int, ty: ir.Type) -> ir.Value:
        p = self.b.gep(obj, [I64(offset)], inbounds=True)
        return self.b.load(self.b.bitcast(p, ty.as_pointer()))

    def require(self, cond: ir.Value) -> None:
        """Continue if ``cond``; else take the slow path."""
        ok = self.fn.append_basic_block("ok")
        self.b.cbranch(cond, ok, self.fail)
        self.b.position_at_end(ok)

    def is_type(self, obj: ir.Value, slot: str) -> ir.Value:
        return self.b.icmp_unsigned("==", self.field(obj, OB_TYPE, I8P), self.env(slot))

    def array(self, obj: ir.Value, shape: tuple[int, ...], flags: int) -> tuple[ir.Value, ir.Value]:
        """Check ``obj`` is an exact float64 ndarray of ``shape`` with ``flags``; returns its data
        pointer and its end address (for overlap checks)."""
        b = self.b
        self.require(self.is_type(obj, "ndarray"))
        ok = b.icmp_unsigned("==", self.field(obj, ARR_DESCR, I8P), self.env("float64"))
        ok = b.and_(ok, b.icmp_signed("==", self.field(obj, ARR_ND, I32), I32(len(shape))))
        got = self.field(obj, ARR_FLAGS, I32)
        ok = b.and_(ok, b.icmp_unsigned("==", b.and_(got, I32(flags)), I32(flags)))
        self.require(ok)
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


def add_trampoline(module: ir.Module, kernel_name: str, spec: Spec, name: str) -> None:
    """Add the trampoline ``name`` for kernel ``kernel_name`` to ``module`` (see module doc)."""
    kernel = module.get_global(kernel_name)
    t = _Builder(module, kernel, name, spec.n_consts)
    b = t.b
    slow, args, nargs, kwnames = t.fn.args
    n = len(spec.arg_shapes)
    t.require(b.icmp_signed("==", nargs, I64(n)))
    t.require(b.icmp_unsigned("!=", kwnames, ir.Constant(I8P, None)))
    size = t.field(kwnames, TUPLE_SIZE, I64)
    first = t.field(kwnames, TUPLE_ITEMS, I8P)
    t.require(b.and_(b.icmp_signed("==", size, I64(1)), b.icmp_unsigned("==", first, t.env("out"))))

    in_ptrs, ranges = [], []
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
        else:
            p, end = t.array(obj, shape, NPY_C_CONTIGUOUS | NPY_ALIGNED)
            in_ptrs.append(p)
            ranges.append((b.bitcast(p, I8P), end))

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
    # No output may overlap an argument or another output.
    overlap = ir.Constant(ir.IntType(1), 0)
    for k, (o0, o1) in enumerate(out_ranges):
        for a0, a1 in ranges + out_ranges[:k]:
            both = b.and_(b.icmp_unsigned("<", o0, a1), b.icmp_unsigned("<", a0, o1))
            overlap = b.or_(overlap, both)
    t.require(b.not_(overlap))

    kargs = list(in_ptrs)
    kty = kernel.function_type.args
    kargs += [t.env(len(ENV) + j, kty[n + j]) for j in range(spec.n_consts)]
    kargs.append(t.env("value", F64.as_pointer()))
    kargs += out_ptrs
    kargs.append(t.env("workspace"))
    kargs = [b.bitcast(v, ty) if v.type != ty else v for v, ty in zip(kargs, kty)]
    status = b.call(kernel, kargs)
    t.require(b.icmp_signed("==", status, I32(0)))
    incref = ir.FunctionType(ir.VoidType(), [I8P])
    b.call(t.env("Py_IncRef", incref.as_pointer()), [out])
    b.ret(out)

    b.position_at_end(t.fail)
    vty = ir.FunctionType(I8P, [I8P, I8P.as_pointer(), I64, I8P])
    vectorcall = t.env("PyObject_Vectorcall", vty.as_pointer())
    b.ret(b.call(vectorcall, [slow, args, nargs, kwnames]))


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
