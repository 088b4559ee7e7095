"""One compiled specialisation: its code library, native entry points, workspaces and fast path.

:func:`compile_variant` traces ``f`` at some arguments and compiles it (through the on-disk
cache) into a :class:`Variant`; :func:`compile_graph` compiles a forward graph built directly with
:mod:`tapejit.core.ops` (tools and tests that sweep the op table). A variant runs its native code
(:meth:`Variant.run`) and reports a guard failure or a too-long dynamic argument as a status
instead of handling it: that is the dispatcher's job (:mod:`tapejit.runtime.dispatch`).

Native entries of a variant (all in one code library, which the variant keeps alive — calling
code after its engine is collected crashes):

- the kernel, through cffi (``_native``): the Python call path, which releases the GIL;
- the ``METH_FASTCALL`` trampolines (:mod:`tapejit.codegen.fastcall`), when this CPython's
  object layout allows it: :attr:`Variant.entry` (what the public function's vectorcall
  reaches) and :attr:`Variant.vg_entry`; they fall back to :meth:`Variant.__call__` /
  :meth:`Variant.value_and_grad` for anything that is not exactly as compiled (a dynamic-length
  argument longer than its capacity included);
- the batch entry (:mod:`tapejit.codegen.batch`), unless an argument has a dynamic length: rows
  ``[begin, end)`` per call.
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from .. import pipeline, transforms
from ..frontend import tracing
from ..frontend.convert import runtime as convert_runtime
from ..codegen import blas as _blas
from ..codegen import entry as _entry
from ..codegen import fastcall as _fastcall
from ..codegen.cache import ObjectCache, text
from ..codegen.lower import counters_symbol
from ..core.ir import Graph, flat_guards
from .. import passes
from ..progress import Progress, log, wanted
from .options import Options, capacity_for, object_cache
from .signature import Signature


class Recovery(Protocol):
    """What a variant hands a call it cannot answer (a failed guard, a too-long argument): its
    dispatcher, :class:`tapejit.runtime.dispatch.Dispatcher` (which builds variants, so this
    module names it only by this protocol)."""

    def recover(self, failed: Variant, status: int, args: tuple, out: Any) -> tuple[float, Any]:
        """Answer the call ``failed`` could not: ``status`` a failed guard (1-based) or
        :data:`TOO_LONG`."""
        ...


_ffi = _entry.ffi
_FAST = _fastcall.layout_ok()

#: :meth:`Variant.run`'s status for a dynamic-length argument longer than the capacity.
TOO_LONG = -1


class _Workspace(threading.local):
    """Per-thread scratch: the workspace and the value output (generated code is re-entrant)."""

    def __init__(self, nbytes: int):
        raw = np.zeros(nbytes + 64, dtype=np.uint8)
        start = (-raw.ctypes.data) % 64
        self.ws = raw[start : start + nbytes] if nbytes else raw[:0]
        self.ws_ptr = _ffi.from_buffer(self.ws) if nbytes else _ffi.NULL
        self.value = np.zeros((), dtype=np.float64)
        self.value_ptr = _ffi.from_buffer(self.value)


class _Buffers:
    """A 64-byte aligned workspace owned by one caller at a time (a fast-path slot, or one
    thread of a batch, taken from a pool)."""

    def __init__(self, nbytes: int):
        raw = np.zeros(nbytes + 64, dtype=np.uint8)
        start = (-raw.ctypes.data) % 64
        self.ws = raw[start : start + max(nbytes, 1)]


@contextlib.contextmanager
def _cyclic_gc_paused():
    """Pause Python's cyclic garbage collector while compiling (refcounting still frees
    everything: IR nodes form no cycles). A compile allocates ~10^5-10^6 objects that all stay
    alive until it ends, so the collector's generational scans find nothing to free but still
    walk them: ~0.3 s of a 2 s compile of a 1000-vertex graph model. The previous state is
    restored afterwards, so a caller that disabled the collector keeps it disabled."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Variant:
    """A compiled specialisation of a gradient (see the module docstring).

    ``dispatcher``: where guard failures and too-long arguments go (``None``: they raise).
    """

    def __init__(
        self,
        built: pipeline.Built,
        trace: Graph | None,
        front: pipeline.Front | None,
        signature: Signature,
        stats: dict[str, Any],
        dispatcher: "Recovery | None",
        guards: Sequence[tuple] | None = None,
        texts: dict[str, str] | None = None,
    ):
        """``built`` bound for calls. ``trace``: the forward graph it was compiled from, or
        ``None`` for a variant restored from a pickle, which gives its ``guards`` (``(_,
        expected outcome, source line)`` per guard) and the printed stages it kept (``texts``)."""
        self.signature = signature
        self.name = signature.name
        self.dispatcher = dispatcher
        # one entry per guard number (a re-rolled loop's guards are one vector entry of the trace)
        self.guards = flat_guards(trace.guards) if trace is not None else tuple(guards or ())
        self._trace = trace
        self._front = front
        self._texts = dict(texts or {})
        self._built = built
        self.program = bool(stats.get("program"))  # a transformation's program, not a gradient
        self._symbol = built.symbol
        self._llvm = built.llvm
        self._lib = built.lib
        self._consts = built.consts
        self._const_ptrs = tuple(_ffi.from_buffer(c) for c in self._consts)
        self._native = _entry.bind(built.lib.address(built.symbol), built.n_inputs, built.n_outputs)
        _blas.bind(built.lib.global_address)  # large matrix products call the host's BLAS
        nbytes = built.stats["workspace_bytes"]
        self._tls = _Workspace(nbytes)
        self._keepalive: list[Any] = []
        self.entry: Callable = self.__call__
        self.vg_entry: Callable = self.value_and_grad
        self._env: int | None = None  # the fast path's environment table
        if _FAST and "fast_slots" in stats:
            # the fast path's workspaces (one per slot; see tapejit.codegen.fastcall)
            self._fast_buffers = [_Buffers(nbytes) for _ in range(stats["fast_slots"])]
            fast = built.symbol + "_fast"
            shapes = [tuple(s) for s in signature.grad_shapes]
            self._keepalive.append(shapes)
            self._env = self._lib.global_address(_fastcall.env_name(fast))
            _fastcall.fill_env(
                self._env,
                [w.ws.ctypes.data for w in self._fast_buffers],
                [c.ctypes.data for c in self._consts],
                shapes,
            )
            self.entry = _fastcall.make_builtin(
                self._lib.address(fast), self.__call__, self.name, self._keepalive
            )
            self.vg_entry = _fastcall.make_builtin(
                self._lib.address(fast + "_vg"),
                self.value_and_grad,
                "value_and_grad",
                self._keepalive,
            )
        n_ptrs = built.n_inputs + 1 + len(signature.grad_shapes) + 1
        self._batch_native = (
            None
            if signature.dynamic
            else _entry.bind_batch(self._lib.address(built.symbol + "_batch"), n_ptrs)
        )
        # idle batch workspaces; a batch call takes one per thread and puts them back, so
        # concurrent batch calls never share one (list.pop/extend are atomic under the GIL)
        self._batch_workspaces: list[_Buffers] = []
        # The last fully validated call with out=: (args, outs, pointers). A repeat call with the
        # same objects re-checks only what can change in place (shape, dtype, layout, writeable).
        self._last: tuple[tuple, tuple, list, tuple] | None = None
        self.stats = stats

    def link(self, nxt: "Variant | None") -> None:
        """Chain this variant's fast path to ``nxt``'s: a failed guard then tries ``nxt`` in
        native code before the Python path (:func:`tapejit.codegen.fastcall.set_next`). The
        dispatcher keeps ``nxt`` alive while it is linked."""
        if self._env is not None:
            if nxt is None or nxt._env is None:
                _fastcall.set_next(self._env, None, None)
            else:
                _fastcall.set_next(self._env, nxt.entry, nxt.vg_entry)

    # -- calling --------------------------------------------------------------------------------
    def run(self, args: tuple, out: Any) -> tuple[float, Any] | int:
        """``(value, gradient)`` computed by native code, or a status: guard ``k`` (> 0) failed,
        or :data:`TOO_LONG`. Nothing is written to ``out`` unless the result is returned.
        Raises ``TypeError``/``ValueError`` for invalid arguments (:class:`Signature`)."""
        sig = self.signature
        if sig.dynamic and sig.too_long(args):
            return TOO_LONG
        if out is not None:
            outs = sig.outs(out)
            last = self._last
            if last is not None and type(outs) is tuple and sig.same_call(args, outs, last):
                ptrs = last[2]
            else:
                ptrs = sig.pointers(args, outs)
                self._last = (args, outs, ptrs, tuple(np.shape(a) for a in args))
        else:
            outs = sig.new_outs()
            ptrs = sig.pointers(args, outs)
        tls = self._tls
        status = self._native(*ptrs[0], *self._const_ptrs, tls.value_ptr, *ptrs[1], tls.ws_ptr)
        if status != 0:
            if 0 < status <= len(self.guards):
                return status
            raise RuntimeError(f"{self.name}: native gradient returned status {status}")
        value = float(tls.value)
        return (value, out) if out is not None else (value, sig.result(outs))

    def call(self, args: tuple, out: Any) -> tuple[float, Any]:
        """:meth:`run`, with a failed guard or a too-long argument handed to the dispatcher."""
        r = self.run(args, out)
        if type(r) is tuple:
            return r
        if self.dispatcher is None:
            what = "a dynamic argument is too long" if r == TOO_LONG else f"guard {r} failed"
            raise RuntimeError(f"{self.name}: {what}, and this variant has no dispatcher")
        return self.dispatcher.recover(self, r, args, out)

    def __call__(self, *args: Any, out: Any = None) -> Any:
        """The gradient at ``args`` (the Python call path; see :class:`GradientFunction`)."""
        return self.call(args, out)[1]

    def value_and_grad(self, *args: Any, out: Any = None) -> tuple[float, Any]:
        return self.call(args, out)

    def batch(self, args: tuple, out: Any, values: np.ndarray | None, threads: int) -> Any:
        """The gradient at every row of a batch (see :meth:`GradientFunction.batch`)."""
        if self.signature.dynamic:
            raise TypeError(
                f"{self.name}.batch: a gradient with dynamic-length arguments (dynamic_argnums) "
                "cannot be batched; call it once per sequence"
            )
        sig = self.signature
        bad = not isinstance(threads, int) or isinstance(threads, bool) or threads < 1
        if bad and len(args) == len(sig.shapes):  # (a wrong count is reported first)
            raise ValueError(f"{self.name}.batch: threads must be an int >= 1, got {threads!r}")
        m, arrays, outs, values, in_ptrs, out_ptrs, vptr = sig.batch_pointers(args, out, values)
        threads = max(1, min(threads, m))
        pool = self._batch_workspaces
        mine = []
        for _ in range(threads):
            try:
                mine.append(pool.pop())
            except IndexError:
                mine.append(_Buffers(self.stats["workspace_bytes"]))
        bounds = [m * t // threads for t in range(threads + 1)]
        status = [0] * threads

        def run(t: int) -> None:
            ws = _ffi.from_buffer(mine[t].ws)
            status[t] = self._batch_native(
                *in_ptrs, *self._const_ptrs, vptr, *out_ptrs, ws, bounds[t], bounds[t + 1]
            )

        try:
            workers = [threading.Thread(target=run, args=(t,)) for t in range(1, threads)]
            for w in workers:
                w.start()
            run(0)
            for w in workers:
                w.join()
        finally:
            pool.extend(mine)
        if any(status):
            if not all(0 <= st <= len(self.guards) for st in status):
                raise RuntimeError(
                    f"{self.name}.batch: native gradient returned status {max(status)}"
                )
            # Some row takes another path than this variant was traced for: answer row by row
            # through the dispatcher, which picks or compiles the right variant for each.
            for r in range(m):
                row_out = tuple(o[r, ...] for o in outs)  # views, 0-d for a scalar gradient
                value, _ = self.call(
                    tuple(a[r] for a in arrays), row_out if sig.tuple_result else row_out[0]
                )
                values[r] = value
        return out if out is not None else (outs if sig.tuple_result else outs[0])

    # -- introspection --------------------------------------------------------------------------
    def ir(self, stage: str) -> str:
        """Printed form of a pipeline stage (:data:`tapejit.pipeline.STAGES`)."""
        if stage in ("trace", "grad", "opt", "plan") and self._trace is None:
            if stage not in self._texts:
                raise ValueError(
                    f"{self.name}: the {stage!r} stage was not computed before this gradient was "
                    "pickled; call grad.ir(stage) before pickling to keep it"
                )
            return self._texts[stage]
        if stage == "trace":
            return str(self._trace)
        if stage in ("grad", "opt", "plan"):
            return str(self.stages()[stage])
        if stage == "llvm":
            self._llvm = text(self._llvm)
            return self._llvm
        if stage == "llvm-opt":
            return self._lib.llvm_ir
        if stage == "asm":
            return self._lib.asm
        raise ValueError(f"unknown stage {stage!r}; expected one of {', '.join(pipeline.STAGES)}")

    def texts(self) -> dict[str, str]:
        """The printed stages of the front end computed so far (what a pickle keeps)."""
        if self._trace is None:
            return dict(self._texts)
        out = {"trace": str(self._trace)}
        if self._front is not None:
            out.update((s, str(v)) for s, v in self.stages().items() if s != "trace")
        return out

    def stages(self) -> dict[str, Any]:
        """The front end's stages (recomputed once if a cache hit skipped them)."""
        if self._front is None:
            self._front = pipeline.front(self._trace, self.signature.argnums, None, self.program)
        f = self._front
        return {"trace": f.trace, "grad": f.grad, "opt": f.opt, "plan": f.plan}

    @property
    def address(self) -> int:
        return self._lib.address(self._symbol)

    @property
    def constants(self) -> tuple[np.ndarray, ...]:
        return tuple(self._consts)

    @property
    def loop_iterations(self) -> list[int]:
        n = self.stats.get("loops", 0)
        if not n:
            return []
        p = _ffi.cast("int64_t *", self._lib.global_address(counters_symbol(self._symbol)))
        return [int(p[k]) for k in range(n)]


def _bind(
    trace: Graph,
    argnums: tuple[int, ...],
    tuple_result: bool,
    dynamic: dict[int, int],
    cache: ObjectCache | None,
    dispatcher: "Recovery | None",
    t_trace: float,
    progress: Progress | None,
    program: bool = False,
) -> Variant:
    """``trace`` compiled (or loaded from ``cache``) and bound as a :class:`Variant`
    (``program``: a transformation's program, run as it is, not differentiated)."""
    built, front, timings, hit = pipeline.load_or_build(
        trace, argnums, tuple_result, True, cache, progress, program, tuple(sorted(dynamic))
    )
    if progress:
        progress.step("bind", "cache hit" if hit else "compiled")
    n_args = len(built.shapes) - len(dynamic)  # then one hidden length per dynamic argument
    sig = Signature(
        trace.name, built.shapes[:n_args], argnums, tuple_result, dynamic, built.out_shapes
    )
    stats = {
        **built.stats,
        "constants_bytes": sum(c.nbytes for c in built.consts),
        "cache": "off" if cache is None else ("hit" if hit else "miss"),
        "timings": {"trace": t_trace, **timings},
        **({"program": True} if program else {}),
    }
    return Variant(built, trace, front, sig, stats, dispatcher)


def compile_variant(
    f: Callable,
    args: Sequence[Any],
    options: Options,
    dispatcher: "Recovery | None" = None,
    capacity: dict[int, int] | None = None,
    forced: dict[int, bool] | None = None,
    lenient: bool = False,
    unchecked: set[int] | None = None,
) -> Variant:
    """``f`` traced at ``args`` and compiled with ``options``.

    ``capacity``: rows each dynamic-length argument is compiled for (default: from the
    example); ``forced``: guard outcomes the trace follows instead of the example's (see
    :func:`tapejit.frontend.tracing.trace`); ``lenient``: leave out ``while_loop`` max_steps checks;
    ``unchecked``: guard numbers followed but not checked (a variant for one input only).
    Raises :class:`tapejit.TracingError` when ``f`` cannot be traced.
    """
    if options.nargs is not None:  # a program's call also passes its tangents etc.
        args = args[: options.nargs]
    order = options.order(len(args))
    capacity = capacity or {}
    dynamic = {
        i: capacity.get(i) or capacity_for(np.shape(args[i])[0])
        for i in options.dynamic(args, order)
    }
    name = getattr(f, "__name__", "f")
    mode = options.mode
    t0 = time.perf_counter()
    with _cyclic_gc_paused(), Progress(name, wanted(options.progress)) as progress:
        outputs = "scalar" if mode in transforms.SCALAR_MODES else "any"
        trace = tracing.trace(
            f, args, order, dynamic, forced, unchecked,
            check_max_steps=not lenient, outputs=outputs,
        )  # fmt: skip
        # Python element loops, unrolled by tracing, re-rolled into loop nodes, and sums over
        # 3-vectors as columns: part of the trace stage (printed, cache-keyed), so a cache hit
        # needs no pass after it
        trace, trace_stats = passes.trace_passes(trace)
        rerolled = trace_stats["reroll"]
        tuple_result = options.tuple_result
        if mode != "grad":
            trace = transforms.program(mode, trace, order, args)
            tuple_result = len(trace.outputs) > 1
        t_trace = time.perf_counter() - t0
        v = _bind(
            trace,
            order,
            tuple_result,
            dynamic,
            object_cache(options.cache),
            dispatcher,
            t_trace,
            progress,
            mode != "grad",
        )
        loops, iterations = trace.captured
        v.stats["reroll"] = {
            "iterations": rerolled["iterations"] + iterations,
            "loops": rerolled["loops"] + loops,
            "guards": rerolled.get("guards", 0),
            "ragged": rerolled.get("ragged", 0),
            "history": rerolled.get("history", 0),
            "captured": {"iterations": iterations, "loops": loops},
        }
        v.stats["columns"] = {"reductions": trace_stats["columns"]["reductions"]}
        v.stats["convert"] = convert_runtime.report()
    log.info(
        "compiled %s in %.3f s (%d trace nodes, on-disk cache %s)",
        trace.name, time.perf_counter() - t0, len(trace.nodes), v.stats["cache"],
    )
    return v


def compile_graph(trace: Graph, tuple_result: bool = True, cache: Any = False) -> Variant:
    """A forward graph built directly with :mod:`tapejit.core.ops` compiled as a :class:`Variant`
    (its active inputs are differentiated, in input order; guards raise)."""
    runtime = [k for k in trace.kinds if k != "const"]
    active = tuple(i for i, k in enumerate(runtime) if k == "active")
    with _cyclic_gc_paused():
        return _bind(trace, active, tuple_result, {}, object_cache(cache), None, 0.0, None)
