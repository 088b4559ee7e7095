"""Code library: owns one MCJIT engine and answers for its LLVM IR, assembly and addresses.

Modelled on numba's ``CodeLibrary`` (``numba/core/codegen.py``): the object that holds the engine
is the object the caller keeps. An MCJIT engine owns its module and target machine, and calling
generated code after the engine is collected crashes, so whoever holds a function address must
hold the :class:`CodeLibrary` too (``tapejit.api.GradientFunction`` does).
"""

from __future__ import annotations

import time

import llvmlite.binding as llvm
import llvmlite.ir as ir

from . import target
from .cache import ObjectCache, cache_key


class CodeLibrary:
    """Compile an ``llvmlite.ir.Module`` for the host and keep the engine alive.

    With an :class:`~codegen.cache.ObjectCache`, the module's machine code is looked up by
    :func:`~codegen.cache.cache_key` first: a hit loads the object file into the engine (no LLVM
    optimisation or code generation), a miss compiles, emits the object and stores it. Either
    way the engine runs the same object code, so a hit gives bit-identical results.

    Attributes: ``llvm_ir`` (optimised LLVM IR text), ``cache_hit``, ``timings`` (seconds spent
    parsing, optimising and generating machine code, or loading from the cache). ``asm`` is
    produced on first access.
    """

    def __init__(self, module: ir.Module, cache: ObjectCache | None = None, salt: str = ""):
        target.initialise()
        triple, _, _ = target.host()
        self._tm = target.target_machine()
        module.triple = triple
        module.data_layout = str(self._tm.target_data)
        text = str(module)
        self._mod: llvm.ModuleRef | None = None
        self._asm: str | None = None
        self.cache_hit = False
        key = cache_key(text, salt) if cache is not None else None
        t0 = time.perf_counter()
        entry = cache.load(key) if cache is not None else None
        if entry is not None:
            obj, self.llvm_ir = entry
            self._engine = self._load(obj)
            self.cache_hit = True
            self.timings = {"cache_load": time.perf_counter() - t0}
            return
        self._mod = llvm.parse_assembly(text)
        self._mod.verify()
        t1 = time.perf_counter()
        target.optimise(self._mod, self._tm)
        t2 = time.perf_counter()
        self.llvm_ir = str(self._mod)
        if cache is None:
            self._engine = llvm.create_mcjit_compiler(self._mod, self._tm)
            self._engine.finalize_object()
        else:
            obj = self._tm.emit_object(self._mod)
            self._engine = self._load(obj)
            cache.store(key, obj, self.llvm_ir)
        t3 = time.perf_counter()
        self.timings = {"llvm_parse": t1 - t0, "llvm_opt": t2 - t1, "llvm_codegen": t3 - t2}

    def _load(self, obj: bytes) -> llvm.ExecutionEngine:
        """An engine running the object code ``obj`` (it owns an empty module and this target
        machine)."""
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), self._tm)
        engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        engine.finalize_object()
        return engine

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

    @property
    def asm(self) -> str:
        """The host assembly of the optimised module."""
        if self._asm is None:
            mod = self._mod if self._mod is not None else llvm.parse_assembly(self.llvm_ir)
            self._asm = target.target_machine().emit_assembly(mod)
        return self._asm
