"""The compile pipeline after tracing, as plain functions of the previous stage's output.

::

    trace --autodiff.vjp_graph--> grad --passes.optimise--> opt --passes.plan--> plan
          --codegen.lower--> llvm --LLVM O3--> llvm-opt --codegen--> asm

:func:`front` runs the front end (reverse mode, the passes, the memory plan) and returns every
stage it made; :func:`build` lowers the plan and compiles it into a :class:`Built` (a live code
library plus the facts a caller needs about its entry point); :func:`load_or_build` does the
same through the on-disk cache, keyed on the trace (:func:`fingerprint`), so a hit skips
everything after tracing. Nothing here keeps state between calls; the only cache is the
on-disk one the caller passes in.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .ad import autodiff
from . import passes
from .codegen import batch as _batch
from .codegen import cache as _cache
from .codegen import fastcall as _fastcall
from .codegen.cache import ObjectCache, cache_key
from .codegen.jit import CodeLibrary, embed_record
from .codegen.lower import lower
from .core.ir import Graph, digest
from .core.program import Program
from .core.ops import Op
from .progress import Progress, log
from .transforms import values_graph

#: The printable stages, in pipeline order (``grad.ir(stage)``, ``tapejit dump --stage``).
STAGES = ("trace", "grad", "opt", "plan", "llvm", "llvm-opt", "asm")

VERSION = "0.1.0"  # kept equal to tapejit.__version__ (salts the on-disk cache key)


@dataclass
class Front:
    """The front end's stages of one trace, each printable with ``str()``."""

    trace: Graph
    grad: Graph
    opt: Graph
    plan: Program
    pass_stats: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)


def front(
    trace: Graph,
    order: tuple[int, ...] | None,
    progress: Progress | None = None,
    program: bool = False,
) -> Front:
    """Reverse mode (the cotangents of the active inputs, returned in ``order`` of the runtime
    arguments; ``None``: input order), the passes and the memory plan of ``trace``. With
    ``program=True`` ``trace`` is a transformation's program (:mod:`tapejit.transforms`): it
    is not differentiated; the kernel returns its outputs."""
    t1 = time.perf_counter()
    if progress:
        progress.step("autodiff", f"{len(trace.nodes)} trace nodes")
    joint = values_graph(trace) if program else autodiff.vjp_graph(trace, order)
    t2 = time.perf_counter()
    if progress:
        progress.step("passes", f"{len(joint.nodes)} joint nodes")
    opt, pass_stats = passes.optimise(joint)
    t3 = time.perf_counter()
    if progress:
        progress.step("plan", f"{len(opt.nodes)} optimised nodes")
    prog = passes.plan(opt)
    t4 = time.perf_counter()
    timings = {"autodiff": t2 - t1, "passes": t3 - t2, "plan": t4 - t3}
    return Front(trace, joint, opt, prog, pass_stats, timings)


@dataclass
class Built:
    """A compiled gradient: its code library and the facts about its entry point that the
    pipeline found. This is what an on-disk cache entry holds.

    The kernel ``symbol`` takes ``n_inputs`` pointers (runtime arguments of ``shapes``, then
    ``consts``), the value output, ``n_outputs`` - 1 outputs of ``out_shapes`` (the gradients,
    for a gradient) and a workspace of ``stats["workspace_bytes"]``; ``symbol + "_fast"`` and ``symbol + "_batch"`` are its
    fast-call and batch entries when they were built.
    """

    symbol: str
    n_inputs: int
    n_outputs: int
    shapes: tuple[tuple[int, ...], ...]
    consts: list[np.ndarray]
    stats: dict[str, Any]
    llvm: str | bytes  # the module's text before optimisation (or zlib-compressed text)
    lib: CodeLibrary
    out_shapes: tuple[tuple[int, ...], ...] = ()

    def entry(self, trace: Graph) -> dict[str, bytes]:
        """The cache entry (object code, IR text, a JSON description)."""
        meta = {
            "symbol": self.symbol,
            "n_inputs": self.n_inputs,
            "n_outputs": self.n_outputs,
            "shapes": [list(s) for s in self.shapes],
            "out_shapes": [list(s) for s in self.out_shapes],
            "stats": self.stats,
        }
        llvm_text = _cache.text(self.llvm)
        return _cache.encode_entry(
            meta, self.lib.object, llvm_text, self.lib.llvm_ir, self.consts, trace.bindings
        )

    @classmethod
    def from_entry(cls, parts: dict[str, bytes] | None, trace: Graph) -> "Built | None":
        """The gradient stored in a cache entry, or ``None`` when there is none or it does not
        decode (then the caller compiles and replaces it)."""
        e = _cache.decode_entry(parts, trace.bindings)
        if e is None:
            return None
        try:
            m = e.meta
            shapes = tuple(tuple(int(d) for d in s) for s in m["shapes"])
            outs = tuple(tuple(int(d) for d in s) for s in m["out_shapes"])
            fields = (m["symbol"], int(m["n_inputs"]), int(m["n_outputs"]), shapes)
        except (KeyError, ValueError, TypeError):
            return None
        lib = CodeLibrary.load(e.object, e.llvm_opt)
        return cls(*fields, e.consts, m["stats"], e.llvm, lib, outs)


def build(
    stages: Front,
    symbol: str,
    tuple_result: bool,
    entries: bool,
    keep_object: bool,
    progress: Progress | None = None,
    dynamic: tuple[int, ...] = (),
) -> Built:
    """Lower ``stages.plan`` to LLVM as function ``symbol`` and compile it.

    ``tuple_result``: the outputs after the value are returned as a tuple.
    ``entries``: also build the fast-call trampolines (when this CPython's layout allows it) and,
    unless some arguments have a dynamic length (``dynamic``: their positions), the batch
    entry. ``keep_object``: keep the object code (for the on-disk cache).
    """
    if progress:
        progress.step("lower", f"{len(stages.plan.kernels)} kernels")
    t0 = time.perf_counter()
    prog = stages.plan
    module, workspace_bytes = lower(prog, symbol)
    g = prog.graph
    runtime = [n for n, k in zip(g.inputs, g.kinds) if k != "const"]
    consts = [np.ascontiguousarray(g.bindings[i]) for i, k in enumerate(g.kinds) if k == "const"]
    if list(g.kinds[len(runtime) :]) != ["const"] * len(consts):
        raise AssertionError("graph inputs must list runtime arguments before constants")
    shapes = tuple(n.shape for n in runtime)
    grad_shapes = tuple(n.shape for n in g.outputs[1:])
    fast = {}
    if entries:
        if _fastcall.layout_ok():
            release = prog.stats["work"] >= _fastcall.GIL_RELEASE_WORK
            spec = _fastcall.Spec(
                shapes[: len(shapes) - len(dynamic)],  # (the hidden lengths are not arguments)
                grad_shapes,
                tuple_result,
                len(consts),
                release,
                workspace_bytes > 0,
                dynamic,
            )
            _fastcall.add_trampolines(module, symbol, spec, symbol + "_fast")
            fast = {"fast_slots": spec.slots, "releases_gil": release}
    if entries and not dynamic:
        _batch.add_batch_entry(
            module,
            symbol,
            [max(1, int(np.prod(s))) for s in shapes],
            len(consts),
            [max(1, int(np.prod(s))) for s in grad_shapes],
            symbol + "_batch",
        )
    record = abi(
        shapes, consts, grad_shapes, workspace_bytes, fast.get("fast_slots", 0), tuple_result,
        dynamic, entries and not dynamic,
    )
    embed_record(module, symbol + ABI_SUFFIX, record)
    text = CodeLibrary.prepare(module)
    stages.timings["lower"] = time.perf_counter() - t0
    if progress:
        progress.step("llvm", f"{len(module.functions)} LLVM functions")
    lib = CodeLibrary.compile(text, emit_object=keep_object)
    stats = {
        "nodes": {
            "trace": len(stages.trace.nodes),
            "grad": len(stages.grad.nodes),
            "opt": len(stages.opt.nodes),
        },
        "passes": stages.pass_stats,
        "workspace_bytes": workspace_bytes,
        "kernels": prog.stats["kernels"],
        "work": prog.stats["work"],
        "buffers": prog.stats["buffers"],
        "recomputed": prog.stats["recomputed"],
        "loops": sum(n.op == Op.LOOP for n in prog.graph.nodes),
        **fast,
    }
    return Built(
        symbol, len(g.inputs), len(g.outputs), shapes, consts, stats, text, lib, grad_shapes
    )


#: The kernel's calling convention (:func:`abi`) is the module's constant ``symbol + ABI_SUFFIX``.
ABI_SUFFIX = ".abi"


def abi(
    shapes: tuple[tuple[int, ...], ...],
    consts: list[np.ndarray],
    out_shapes: tuple[tuple[int, ...], ...],
    workspace_bytes: int,
    fast_slots: int,
    tuple_result: bool,
    dynamic: tuple[int, ...],
    batch: bool,
) -> bytes:
    """The calling convention native code was compiled for, as canonical JSON: the inputs'
    shapes (hidden lengths included), each constant's shape and dtype, the outputs' shapes, the
    workspace bytes, the fast-call slots (0: no trampolines), the result kind, the dynamic
    arguments and whether a batch entry exists. :func:`build` embeds it in the machine code, so
    that a restored gradient is checked against the code before any of it runs
    (:mod:`tapejit.runtime.pickling`)."""
    record = {
        "shapes": [list(map(int, s)) for s in shapes],
        "consts": [[list(map(int, c.shape)), c.dtype.str] for c in consts],
        "out_shapes": [list(map(int, s)) for s in out_shapes],
        "workspace_bytes": int(workspace_bytes),
        "fast_slots": int(fast_slots),
        "tuple_result": bool(tuple_result),
        "dynamic": sorted(map(int, dynamic)),
        "batch": bool(batch),
    }
    return json.dumps(record, sort_keys=True, separators=(",", ":")).encode()


@functools.cache
def compiler_digest() -> str:
    """A digest of the compiler's own sources (every ``.py`` file of the ``tapejit`` package,
    ``codegen`` included), so that a cache entry written by a changed compiler — an editable
    install, the same version string — is never loaded by another. Computed once per process
    (~1 ms)."""
    h = hashlib.sha256()
    roots = [os.path.dirname(os.path.abspath(__file__)), os.path.dirname(_cache.__file__)]
    for pkg in dict.fromkeys(roots):
        for root, dirs, files in os.walk(pkg):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(root, name)
                    h.update(os.path.relpath(path, os.path.dirname(pkg)).encode() + b"\0")
                    with open(path, "rb") as fh:
                        h.update(fh.read())
    return h.hexdigest()[:16]


def fingerprint(trace: Graph, tuple_result: bool, entries: bool) -> str:
    """What decides the compiled code of ``trace``: its structure — the name, each input's and
    output's :func:`~tapejit.core.ir.digest` (a Merkle hash of the whole expression: ops, attributes,
    types, inputs by position and name), the input kinds, the guards with their outcomes and
    source lines — the bytes of every captured constant, the result kind and which entries are
    built. Equal to hashing the printed trace, at ~1/10 of the cost for a large trace."""
    h = hashlib.sha256()
    for i in sorted(trace.bindings):
        a = np.ascontiguousarray(trace.bindings[i])
        h.update(f"{i}:{a.dtype.str}:{a.shape}:".encode())
        h.update(a.reshape(-1).view(np.uint8))  # no copy; a zero-size array hashes as b""
    inputs = " ".join(f"{digest(n).hex()}:{k}" for n, k in zip(trace.inputs, trace.kinds))
    outputs = " ".join(digest(n).hex() for n in trace.outputs)
    guards = "".join(f"\nguard {digest(c).hex()} == {e} # {w}" for c, e, w in trace.guards)
    fast = entries and _fastcall.layout_ok()
    return (
        f"graph {trace.name}\ninputs {inputs}\noutputs {outputs}{guards}\n"
        f"constants {h.hexdigest()}\ntuple={tuple_result} fast={fast}"
    )


def symbol_of(trace: Graph) -> str:
    """The LLVM name of ``trace``'s kernel."""
    return f"tj_{trace.name}".replace("<", "_").replace(">", "_")


def load_or_build(
    trace: Graph,
    argnums: tuple[int, ...],
    tuple_result: bool,
    entries: bool,
    cache: ObjectCache | None,
    progress: Progress | None = None,
    program: bool = False,
    dynamic: tuple[int, ...] = (),
) -> tuple[Built, Front | None, dict[str, float], bool]:
    """``trace`` compiled, or loaded from ``cache``: ``(built, front stages or None on a cache
    hit, timings, hit)``. The cache key is :func:`fingerprint` with ``argnums``, the
    compiler's version and :func:`compiler_digest` (and, inside :func:`cache_key`, the
    toolchain and host CPU); the pipeline is deterministic, so the same trace always gives
    the same machine code."""
    timings: dict[str, float] = {}
    key = None
    if cache is not None:
        if progress:
            progress.step("cache", f"{len(trace.nodes)} trace nodes")
        t0 = time.perf_counter()
        key = cache_key(
            f"{fingerprint(trace, tuple_result, entries)}\norder={argnums} program={program}",
            f"tapejit-{VERSION}-{compiler_digest()}",
        )
        built = Built.from_entry(cache.load(key), trace)
        timings["cache_key"] = time.perf_counter() - t0
        if built is not None:
            timings.update(built.lib.timings)
            log.debug("%s: on-disk cache hit %s", trace.name, key[:12])
            return built, None, timings, True
    stages = front(trace, argnums, progress, program)
    built = build(
        stages, symbol_of(trace), tuple_result, entries, cache is not None, progress, dynamic
    )
    timings.update(stages.timings)
    timings.update(built.lib.timings)
    if cache is not None:
        cache.store(key, built.entry(trace))
    return built, stages, timings, False
