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


class CodeLibrary:
    """Compile an ``llvmlite.ir.Module`` for the host and keep the engine alive.

    Attributes: ``llvm_ir`` (optimised LLVM IR text), ``timings`` (seconds spent parsing,
    optimising and generating machine code). ``asm`` is produced on first access.
    """

    def __init__(self, module: ir.Module):
        target.initialise()
        triple, _, _ = target.host()
        self._tm = target.target_machine()
        module.triple = triple
        module.data_layout = str(self._tm.target_data)
        t0 = time.perf_counter()
        self._mod = llvm.parse_assembly(str(module))
        self._mod.verify()
        t1 = time.perf_counter()
        target.optimise(self._mod, self._tm)
        t2 = time.perf_counter()
        self.llvm_ir = str(self._mod)
        self._asm: str | None = None
        self._engine = llvm.create_mcjit_compiler(self._mod, self._tm)
        self._engine.finalize_object()
        t3 = time.perf_counter()
        self.timings = {"llvm_parse": t1 - t0, "llvm_opt": t2 - t1, "llvm_codegen": t3 - t2}

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
            self._asm = target.target_machine().emit_assembly(self._mod)
        return self._asm
