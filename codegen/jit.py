"""Code library: owns one MCJIT engine and answers for its LLVM IR, assembly and addresses.

Modelled on numba's ``CodeLibrary`` (``numba/core/codegen.py``): the object that holds the engine
is the object the caller keeps. An MCJIT engine owns its module and target machine, and calling
generated code after the engine is collected crashes, so whoever holds a function address must
hold the :class:`CodeLibrary` too (``tapejit.api.GradientFunction`` does).

A library comes from an ``llvmlite.ir.Module`` (:meth:`CodeLibrary.compile`: parse, optimise,
generate machine code) or from object code produced by an earlier compile
(:meth:`CodeLibrary.load`: no LLVM optimisation or code generation — what an on-disk cache hit
uses). Both run object code in an engine, so a loaded library gives bit-identical results.
"""

from __future__ import annotations

import re
import struct
import time
import zlib

import llvmlite.binding as llvm
import llvmlite.ir as ir

from . import target


def _llvm_lock():
    """llvmlite's lock around every LLVM C-API call (a private attribute: None if absent)."""
    from llvmlite.binding import ffi

    return getattr(getattr(getattr(ffi, "lib", None), "_lock", None), "_lock", None)


def _make_fork_safe() -> None:
    """A process forked while another thread is inside LLVM would inherit llvmlite's lock held
    by a thread that does not exist in the child, and hang at its first compile. Fork only
    while no thread is inside LLVM: take the lock before ``fork()`` and release it on both
    sides after (``os.register_at_fork``; CPython does the same for its own locks)."""
    import os

    lock = _llvm_lock()
    if lock is None or not hasattr(os, "register_at_fork"):
        return
    os.register_at_fork(
        before=lock.acquire, after_in_parent=lock.release, after_in_child=lock.release
    )


_make_fork_safe()


def _quiesce_at_exit() -> None:
    """At interpreter exit, wait until no other thread is inside LLVM and keep them out: a
    daemon thread still compiling when the interpreter finalises ran LLVM while the process
    tore down, and the process ended with SIGSEGV after the program's last line (seen with a
    thread compiling in a loop). atexit handlers run once the non-daemon threads are joined;
    taking llvmlite's (reentrant) lock there lets the main thread's own last calls through and
    parks any daemon thread at its next LLVM call."""
    import atexit

    lock = _llvm_lock()
    if lock is not None:
        atexit.register(lock.acquire)


_quiesce_at_exit()


def embed_record(module: ir.Module, name: str, data: bytes) -> None:
    """Add ``data`` to ``module`` as the read-only global ``name``: an 8-byte little-endian
    length, then the bytes (read back with :meth:`CodeLibrary.record`)."""
    blob = struct.pack("<Q", len(data)) + data
    ty = ir.ArrayType(ir.IntType(8), len(blob))
    gv = ir.GlobalVariable(module, ty, name=name)
    gv.initializer = ir.Constant(ty, bytearray(blob))
    gv.global_constant = True


_HINT = re.compile(r'^(![0-9]+) = !\{ !"tapejit\.interleave", i32 ([0-9]+) \}$', re.M)


def loop_hints(text: str) -> str:
    """Module text with each loop's interleave hint (``!llvm.loop`` pointing at a node ``!{
    !"tapejit.interleave", i32 K }``, which llvmlite can build) replaced by the loop ID LLVM
    reads: a distinct, self-referential node with ``llvm.loop.interleave.count`` K (which
    llvmlite's IR builder cannot express)."""
    hints = {m.group(1): m.group(2) for m in _HINT.finditer(text)}
    if not hints:
        return text
    extra, fresh = [], iter(range(10**6, 10**7))

    def loop_id(m: re.Match) -> str:
        k = next(fresh)
        extra.append(f"!{k} = distinct !{{!{k}, !{k + 5 * 10**6}}}")
        extra.append(f'!{k + 5 * 10**6} = !{{!"llvm.loop.interleave.count", i32 {hints[m.group(1)]}}}')
        return f"!llvm.loop !{k}"

    refs = re.compile(r"!llvm\.loop (" + "|".join(re.escape(h) for h in hints) + r")\b")
    text = refs.sub(loop_id, text)
    return text + "\n" + "\n".join(extra) + "\n"


class CodeLibrary:
    """Machine code for the host in a live engine (build it with :meth:`compile` or
    :meth:`load`).

    Attributes: ``llvm_ir`` (optimised LLVM IR text), ``object`` (the object code, when it was
    asked for or loaded), ``timings`` (seconds spent parsing, optimising and generating machine
    code, or loading). ``asm`` is produced on first access.
    """

    def __init__(
        self,
        engine: llvm.ExecutionEngine,
        tm: llvm.TargetMachine,
        llvm_ir: str | bytes,
        obj: bytes | None,
        mod: llvm.ModuleRef | None,
        timings: dict[str, float],
    ):
        self._engine, self._tm, self._mod = engine, tm, mod
        self._llvm_ir, self.object, self.timings = llvm_ir, obj, timings
        self._asm: str | None = None

    @property
    def llvm_ir(self) -> str:
        """The optimised LLVM IR text (decompressed on first access when the library was loaded
        with compressed text: most processes that load a cached library never read it)."""
        if isinstance(self._llvm_ir, bytes):
            self._llvm_ir = zlib.decompress(self._llvm_ir).decode()
        return self._llvm_ir

    @staticmethod
    def prepare(module: ir.Module) -> str:
        """Set ``module``'s triple and data layout for the host; returns its text, which holds
        no process-specific address (loop hints resolved, :func:`loop_hints`)."""
        target.initialise()
        tm = target.target_machine()
        module.triple = target.host()[0]
        module.data_layout = str(tm.target_data)
        return loop_hints(str(module))

    @classmethod
    def compile(cls, text: str, emit_object: bool = False) -> "CodeLibrary":
        """Optimise and compile the module ``text`` (from :meth:`prepare`); with
        ``emit_object`` the object code is kept in ``object`` (for a cache)."""
        target.initialise()
        tm = target.target_machine()
        t0 = time.perf_counter()
        mod = llvm.parse_assembly(text)
        mod.verify()
        t1 = time.perf_counter()
        target.optimise(mod, tm, lines=text.count("\n"))
        t2 = time.perf_counter()
        llvm_ir = str(mod)
        obj = None
        if emit_object:
            obj = tm.emit_object(mod)
            engine = cls._engine_for(obj, tm)
        else:
            engine = llvm.create_mcjit_compiler(mod, tm)
            engine.finalize_object()
        t3 = time.perf_counter()
        timings = {"llvm_parse": t1 - t0, "llvm_opt": t2 - t1, "llvm_codegen": t3 - t2}
        return cls(engine, tm, llvm_ir, obj, mod, timings)

    @classmethod
    def load(cls, obj: bytes, llvm_ir: str | bytes) -> "CodeLibrary":
        """A library running the object code ``obj`` (``llvm_ir``: its optimised IR, for
        :attr:`llvm_ir` and :attr:`asm`, as text or as zlib-compressed UTF-8)."""
        target.initialise()
        tm = target.target_machine()
        t0 = time.perf_counter()
        engine = cls._engine_for(obj, tm)
        return cls(engine, tm, llvm_ir, obj, None, {"cache_load": time.perf_counter() - t0})

    @staticmethod
    def _engine_for(obj: bytes, tm: llvm.TargetMachine) -> llvm.ExecutionEngine:
        """An engine running the object code ``obj`` (it owns an empty module and ``tm``)."""
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
        engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        engine.finalize_object()
        return engine

    def object_code(self) -> bytes:
        """The object code of this library (emitted from the optimised IR if it was not kept;
        loading it with :meth:`load` gives bit-identical machine code)."""
        if self.object is None:
            target.initialise()
            self.object = target.target_machine().emit_object(llvm.parse_assembly(self.llvm_ir))
        return self.object

    def address(self, name: str) -> int:
        """Address of the compiled function ``name`` (valid while this library lives)."""
        addr = self._engine.get_function_address(name)
        if not addr:
            raise KeyError(f"no function {name!r} in this code library")
        return addr

    def global_address(self, name: str) -> int:
        """Address of the global variable ``name`` (valid while this library lives)."""
        addr = self._engine.get_global_value_address(name)
        if not addr:
            raise KeyError(f"no global {name!r} in this code library")
        return addr

    def record(self, name: str, limit: int = 1 << 20) -> bytes:
        """The bytes of the constant ``name`` that :func:`embed_record` wrote (``KeyError`` if
        absent, ``ValueError`` if its length prefix exceeds ``limit``). Reads memory only."""
        import ctypes

        addr = self.global_address(name)
        (n,) = struct.unpack("<Q", ctypes.string_at(addr, 8))
        if n > limit:
            raise ValueError(f"the record {name!r} claims {n} bytes (at most {limit} expected)")
        return ctypes.string_at(addr + 8, n)

    @property
    def asm(self) -> str:
        """The host assembly of the optimised module."""
        if self._asm is None:
            mod = self._mod if self._mod is not None else llvm.parse_assembly(self.llvm_ir)
            self._asm = target.target_machine().emit_assembly(mod)
        return self._asm
