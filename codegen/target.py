"""Target configuration — the one place where the host machine and LLVM's pipeline are chosen.

* The host CPU name and feature string (``llvm.get_host_cpu_name()``,
  ``get_host_cpu_features()``): a generic CPU name picks narrower vectors (DESIGN.md).
* The new pass manager at O3 with loop vectorisation, and SLP vectorisation (off by default in
  ``PipelineTuningOptions``) and loop unrolling for small modules only
  (:data:`LARGE_MODULE_FUNCTIONS`). Pattern from llvmlite's ``examples/newpassmanagers.py``.

An MCJIT engine takes ownership of its target machine, so :func:`target_machine` makes a fresh one
for every engine. :func:`object_machine` is the same host configuration for exported object files
(position-independent code; ``GradientFunction.export``).
"""

from __future__ import annotations

import functools
import os

import llvmlite.binding as llvm

OPT_LEVEL = 3


@functools.cache
def initialise() -> None:
    """Initialise LLVM's native target and asm printer (both required; ``llvm.initialize()`` raises)."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


@functools.cache
def host() -> tuple[str, str, str]:
    """(triple, CPU name, feature string) of this machine.

    Full-width vectors: on AVX-512 hosts LLVM's tuning for several CPU names (and generic names
    such as ``x86-64-v4``) prefers 256-bit vectors (the ``prefer-256-bit`` tuning feature, which
    sets the vectoriser's preferred width). Our kernels are long, branch-free loops where 512-bit
    vectors win (1.7x measured), so that tuning is switched off when ``+avx512f`` is present —
    the feature-string equivalent of ``prefer-vector-width=512``.

    ``$TAPEJIT_CPU_FEATURES`` (e.g. ``-avx512f``) is appended to the host's feature string: a
    way to generate, and measure, the code an AVX2-only host would get on an AVX-512 one (it is
    part of the on-disk cache key, as the whole string is).
    """
    initialise()
    features = llvm.get_host_cpu_features().flatten()
    extra = os.environ.get("TAPEJIT_CPU_FEATURES", "").strip(", ")
    if extra:
        features += "," + extra
    flags = features.split(",")
    if "+avx512f" in flags and "-avx512f" not in flags:
        features += ",-prefer-256-bit"
    return llvm.get_process_triple(), llvm.get_host_cpu_name(), features


def target_machine() -> llvm.TargetMachine:
    """A new TargetMachine for the host CPU (one per engine: the engine owns it)."""
    triple, cpu, features = host()
    target = llvm.Target.from_triple(triple)
    return target.create_target_machine(
        cpu=cpu, features=features, opt=OPT_LEVEL, reloc="default", codemodel="jitdefault", jit=True
    )


def object_machine() -> llvm.TargetMachine:
    """A new TargetMachine for ahead-of-time object files (:mod:`codegen.aot`): the host CPU and
    features as for the JIT, but position-independent code (``reloc="pic"``) with the default
    code model, so the object links into executables and shared libraries alike. The code
    uses the host's instruction set (e.g. AVX-512): it runs on CPUs that have it."""
    triple, cpu, features = host()
    target = llvm.Target.from_triple(triple)
    return target.create_target_machine(
        cpu=cpu, features=features, opt=OPT_LEVEL, reloc="pic", codemodel="default"
    )


#: Modules defining at least this many functions (kernel functions, walker, straight-line
#: chunks, entry points) are optimised without loop unrolling and without the SLP vectoriser.
#: Such a module is a large model: many small kernels (the 16-wide layers of the DAG benchmark)
#: or long scalar code split into chunks (codegen/lower/chunks.py, CHUNK_NODES). Measured:
#:
#: * unrolling cost a third of LLVM's optimisation time on the DAG model at V = 1000 (0.30 ->
#:   0.20 s) and made its steady-state gradient *slower* (232-244 us without, 293-318 us with;
#:   V = 10: 2.0 vs 3.0-3.5 us), as the vectorised 16-element loops are already two iterations;
#: * SLP vectorisation is half of the optimisation time of scalarised code (a 1000-element
#:   element loop: 2.7 s with it, 2.1 s without) and changed no measured gradient time (that
#:   model 7.1-7.3 us either way, the DAG 160-185 us).
#:
#: Small modules (EAM: 6 functions) keep both: their long loops gain from unrolling at 10^5
#: elements (~8 %).
LARGE_MODULE_FUNCTIONS = 16
#: Modules of at least this many lines of LLVM IR text are large too, however few their
#: functions: a few loop kernels with long scalar code around them (the Lennard-Jones pair loop,
#: re-rolled into 6 kernels over its rows, is 6,500 lines of glue at N = 64: SLP and unrolling
#: were 220 of its 320 ms of optimisation, for no change in its gradient's time, 5.1-5.4 us).
#: EAM's module is ~650 lines.
LARGE_MODULE_LINES = 2000


def optimise(module: llvm.ModuleRef, tm: llvm.TargetMachine, lines: int = 0) -> None:
    """Run the O3 pipeline with loop and SLP vectorisation on ``module`` in place (no loop
    unrolling and no SLP for modules of :data:`LARGE_MODULE_FUNCTIONS` functions or more, or
    of ``lines`` >= :data:`LARGE_MODULE_LINES`, the length of the IR text it was parsed from)."""
    functions = sum(1 for f in module.functions if not f.is_declaration)
    small = functions < LARGE_MODULE_FUNCTIONS and lines < LARGE_MODULE_LINES
    pto = llvm.create_pipeline_tuning_options(speed_level=OPT_LEVEL)
    pto.loop_vectorization = True
    pto.slp_vectorization = small
    pto.loop_unrolling = small
    pb = llvm.create_pass_builder(tm, pto)
    mpm = pb.getModulePassManager()
    try:
        mpm.run(module, pb)
    finally:
        _close_module_pass_manager(mpm)
        pb.close()
        pto.close()


def _close_module_pass_manager(mpm: llvm.ModulePassManager) -> None:
    """Free a module pass manager and the passes it owns.

    llvmlite 0.50's ``ModulePassManager.close()`` frees nothing: the class derives from
    ``ffi.ObjectRef`` before ``NewPassManager``, so ``ObjectRef._dispose`` (a no-op) shadows the
    one that deletes the C++ object. Every pipeline then leaked its passes with the state they
    keep between functions (GVN's value table, Reassociate's pair map, GlobalDCE's maps ...):
    ~105 KB per compile of a small function (docs/runtime.md). Delete it directly while that MRO
    is in place; a fixed llvmlite's own ``close()`` is used as is.
    """
    from llvmlite.binding import ffi

    dispose = getattr(ffi.lib, "LLVMPY_DisposeNewModulePassManger", None)
    if type(mpm)._dispose is ffi.ObjectRef._dispose and dispose is not None and not mpm.closed:
        dispose(mpm)
        mpm.detach()
    else:
        mpm.close()
