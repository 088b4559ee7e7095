"""Public API: :func:`compile`, :class:`GradientFunction`, :func:`grad`, :func:`value_and_grad`.

``compile(f, *example_args, argnums=0)`` runs the whole pipeline once — trace, reverse mode,
passes, memory plan, LLVM lowering, JIT — and returns a :class:`GradientFunction` that calls the
native code. The gradient is specialised to the example arguments' shapes: calling it with other
shapes raises a ``ValueError`` (use :func:`grad`, which compiles one specialisation per shape).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import io
import json
import os
import threading
import time
import warnings
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from tapejit.codegen import entry as _entry  # api.py is the one front-end module that binds codegen
from tapejit.codegen import batch as _batch
from tapejit.codegen import fastcall as _fastcall
from tapejit.codegen.cache import ObjectCache, cache_key
from tapejit.codegen.jit import CodeLibrary
from tapejit.codegen.lower import counters_symbol, lower

from . import autodiff, passes, tracing
from .ir import Graph, Program, digest

_ffi = _entry.ffi

STAGES = ("trace", "grad", "opt", "plan", "llvm", "llvm-opt", "asm")

_F64 = np.dtype(np.float64)
_VERSION = "0.1.0"  # kept equal to tapejit.__version__ (salts the on-disk cache key)


def object_cache(cache: bool | str | os.PathLike | ObjectCache = True) -> ObjectCache | None:
    """The on-disk cache of compiled objects to use, or ``None`` for none.

    ``True`` (the default) means: the directory ``$TAPEJIT_CACHE_DIR`` if set, else the user cache
    directory of the platform (``platformdirs.user_cache_dir("tapejit")``), unless
    ``$TAPEJIT_CACHE`` is ``0``/``off``/``false``/``no``. ``False`` disables it; a path or an
    :class:`~codegen.cache.ObjectCache` selects one.
    """
    if isinstance(cache, ObjectCache):
        return cache
    if cache is False or cache is None:
        return None
    if cache is True:
        if os.environ.get("TAPEJIT_CACHE", "1").strip().lower() in ("0", "off", "false", "no"):
            return None
        directory = os.environ.get("TAPEJIT_CACHE_DIR")
        if not directory:
            import platformdirs  # imported only when needed: ~3 ms of a warm-cache start

            directory = platformdirs.user_cache_dir("tapejit")
        return ObjectCache(directory)
    return ObjectCache(cache)


_FAST = _fastcall.layout_ok()


def _normalise_argnums(argnums: int | Sequence[int], nargs: int) -> tuple[int, ...]:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    if not nums:
        raise ValueError("argnums is empty: nothing to differentiate")
    out = []
    for a in nums:
        if not isinstance(a, int) or not -nargs <= a < nargs:
            raise ValueError(f"argnums entry {a!r} is not a valid index for {nargs} arguments")
        out.append(a % nargs)
    if len(set(out)) != len(out):
        raise ValueError(f"argnums {nums} repeats an argument")
    return tuple(out)


@contextlib.contextmanager
def _cyclic_gc_paused():
    """Pause Python's cyclic garbage collector while compiling (refcounting still frees
    everything: IR nodes form no cycles). A compile allocates ~10^5-10^6 objects that all stay
    alive until it ends, so the collector's generational scans find nothing to free but still
    walk them: ~0.3 s of a 2 s compile of the 1000-vertex DAG model (docs/compile-time.md).
    The previous state is restored afterwards, so a caller that disabled the collector keeps
    it disabled."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


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
    """The fast path's own workspace and value output (it holds the GIL, so one set suffices)."""

    def __init__(self, nbytes: int):
        raw = np.zeros(nbytes + 64, dtype=np.uint8)
        start = (-raw.ctypes.data) % 64
        self.ws = raw[start : start + max(nbytes, 1)]
        self.value = np.zeros((), dtype=np.float64)


class MaxStepsWarning(RuntimeWarning):
    """A ``tapejit.while_loop`` stopped after ``max_steps`` iterations with its condition still
    true: the result (and gradient) are those of the loop cut off there, not of the Python loop,
    which would have gone on."""


class MaxStepsError(RuntimeError):
    """As :class:`MaxStepsWarning`, with ``compile(..., on_max_steps="raise")``."""


class GuardError(RuntimeError):
    """An input takes another path through Python control flow than the compiled gradient was
    traced for, and ``on_guard_failure="raise"`` was chosen. Names the guard's source line."""


@functools.cache
def _compiler_digest() -> str:
    """A digest of the compiler's own sources (every ``.py`` file of the ``tapejit`` and
    ``codegen`` packages), so that a cache entry written by a changed compiler — an editable
    install, the same version string — is never loaded by another. Computed once per process
    (~1 ms)."""
    h = hashlib.sha256()
    for pkg in (os.path.dirname(os.path.abspath(__file__)), os.path.dirname(_entry.__file__)):
        for root, dirs, files in os.walk(pkg):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(root, name)
                    h.update(os.path.relpath(path, os.path.dirname(pkg)).encode() + b"\0")
                    with open(path, "rb") as fh:
                        h.update(fh.read())
    return h.hexdigest()[:16]


def _fingerprint(trace: Graph, tuple_result: bool) -> str:
    """What decides the compiled code of ``trace``: its structure — the name, each input's and
    output's :func:`~tapejit.ir.digest` (a Merkle hash of the whole expression: ops, attributes,
    types, inputs by position and name; mostly computed already, while tracing ordered
    commutative operands), the input kinds, the guards with their outcomes and source lines —
    the bytes of every captured constant, the result kind and whether the fast-call entry is
    built. Equal to hashing the printed trace, at ~1/10 of the cost for a large trace."""
    h = hashlib.sha256()
    for i in sorted(trace.bindings):
        a = np.ascontiguousarray(trace.bindings[i])
        h.update(f"{i}:{a.dtype.str}:{a.shape}:".encode())
        h.update(a.reshape(-1).view(np.uint8))  # no copy; a zero-size array hashes as b""
    inputs = " ".join(f"{digest(n).hex()}:{k}" for n, k in zip(trace.inputs, trace.kinds))
    outputs = " ".join(digest(n).hex() for n in trace.outputs)
    guards = "".join(f"\nguard {digest(c).hex()} == {e} # {w}" for c, e, w in trace.guards)
    return (
        f"graph {trace.name}\ninputs {inputs}\noutputs {outputs}{guards}\n"
        f"constants {h.hexdigest()}\ntuple={tuple_result} fast={_FAST}"
    )


@dataclass
class _Built:
    """What a call needs of a compiled gradient: the code library and the facts about its
    entry point that the pipeline found. This is what an on-disk cache entry holds."""

    symbol: str
    n_inputs: int  # pointer arguments of the kernel before the value output
    n_outputs: int
    shapes: tuple[tuple[int, ...], ...]  # runtime arguments
    consts: list[np.ndarray]  # constant inputs after the passes (folded, unused ones dropped)
    stats: dict[str, Any]
    llvm: str | bytes  # the module's text before optimisation (or zlib-compressed text)
    lib: CodeLibrary

    def entry(self, trace: Graph) -> dict[str, bytes]:
        """The cache entry: object code, IR text, and a JSON description. A constant that is one
        of ``trace``'s captured arrays is stored as its index there (it is part of the key);
        only constants made by the passes are stored as data."""

        def where(a: np.ndarray) -> tuple:
            return a.__array_interface__["data"][0], a.shape, a.dtype.str

        captured = {where(np.asarray(a)): i for i, a in trace.bindings.items()}
        consts, parts = [], {}
        for k, c in enumerate(self.consts):
            i = captured.get(where(c))
            if i is None:
                buf = io.BytesIO()
                np.save(buf, c, allow_pickle=False)
                parts[f"const{k}"] = buf.getvalue()
                consts.append(["data", k])
            else:
                consts.append(["trace", i])
        meta = {
            "symbol": self.symbol,
            "n_inputs": self.n_inputs,
            "n_outputs": self.n_outputs,
            "shapes": [list(s) for s in self.shapes],
            "consts": consts,
            "stats": self.stats,
        }
        parts["object"] = self.lib.object
        # level 1: a third of level 6's time (4 vs 12 ms for 1.3 MB of LLVM IR), 1.5x the size
        parts["llvm"] = zlib.compress(self.llvm.encode(), 1)
        parts["llvm-opt"] = zlib.compress(self.lib.llvm_ir.encode(), 1)
        parts["meta"] = json.dumps(meta).encode()
        return parts

    @classmethod
    def from_entry(cls, parts: dict[str, bytes] | None, trace: Graph) -> "_Built | None":
        """The gradient stored in a cache entry, or ``None`` when there is none or it does not
        decode (then the caller compiles and replaces it)."""
        if parts is None:
            return None
        try:
            meta = json.loads(parts["meta"])
            consts = []
            for kind, i in meta["consts"]:
                if kind == "trace":
                    consts.append(np.ascontiguousarray(trace.bindings[i]))
                else:
                    consts.append(np.load(io.BytesIO(parts[f"const{i}"]), allow_pickle=False))
            llvm, llvm_opt = parts["llvm"], parts["llvm-opt"]  # decompressed when read
            shapes = tuple(tuple(int(d) for d in s) for s in meta["shapes"])
            fields = (meta["symbol"], int(meta["n_inputs"]), int(meta["n_outputs"]))
            stats = meta["stats"]
            obj = parts["object"]
        except (KeyError, ValueError, TypeError, IndexError, OSError, zlib.error):
            return None
        return cls(*fields, shapes, consts, stats, llvm, CodeLibrary.load(obj, llvm_opt))


class GuardWarning(RuntimeWarning):
    """A gradient keeps recompiling because its guards keep failing."""


@dataclass(frozen=True)
class _Specialisation:
    """What sets a variant apart from a fresh :func:`compile` (private to the dispatcher):
    the gradient that dispatches to it, the rows its dynamic-length arguments have room for,
    guard outcomes the trace must follow (native code decided them differently than numpy,
    see :func:`tracing.trace`), and whether ``while_loop`` max_steps checks are left out."""

    owner: GradientFunction | None = None
    capacity: dict[int, int] | None = None
    forced: dict[int, bool] | None = None
    lenient: bool = False


def _dims(shape: tuple[int, ...]) -> str:
    return ", ".join(map(str, shape)) if shape else ""


def _not_built(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("this GradientFunction was not built")


class GradientFunction(functools.partial):
    """A compiled native gradient of ``f`` with respect to the arguments ``argnums``.

    Call it as ``grad(*args, out=None)``. Arguments must match the example arguments given to
    :func:`compile`: same count, same shapes; float64 C-contiguous arrays are used in place,
    arrays of other real dtypes that convert to float64 exactly (``numpy.can_cast(..., 'safe')``)
    and Python/numpy numbers are converted. The result is the gradient — an array of the
    argument's shape (a ``float`` for a scalar argument), or a tuple of them when ``argnums`` is a
    tuple. ``out=`` (an array, or a tuple of arrays for a tuple ``argnums``) must be writeable,
    C-contiguous float64 arrays of the gradient's shape that do not overlap any argument; the
    gradient is written there, ``out`` is returned, and no numpy array is created.

    Raises ``TypeError`` for a wrong argument count or type, ``ValueError`` for a wrong shape,
    layout or ``out``. Thread-safe: each thread gets its own workspace.

    Calling: ``grad(*args, out=...)`` with exactly the compiled types goes through a native
    ``METH_FASTCALL`` entry (:mod:`codegen.fastcall`) that validates the call itself and holds
    the GIL for the kernel's duration (tens of nanoseconds of overhead); every other call — no
    ``out``, arrays that need converting, anything invalid — takes the Python path, which
    validates, converts or raises, and releases the GIL around the native call (cffi). The class
    derives from ``functools.partial`` only so that calling an instance is a C-level vectorcall.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> "GradientFunction":
        return functools.partial.__new__(cls, _not_built)

    def __reduce__(self):
        raise TypeError(
            "a GradientFunction holds native code and cannot be pickled; pickle f instead"
        )

    def __init__(
        self,
        f: Callable,
        example_args: Sequence[Any],
        argnums: int | Sequence[int] = 0,
        cache: bool | str | os.PathLike | ObjectCache = True,
        on_guard_failure: str = "recompile",
        max_specialisations: int = 8,
        dynamic_argnums: int | Sequence[int] = (),
        on_max_steps: str = "warn",
    ):
        if not callable(f):
            raise TypeError(f"compile() needs a callable, got {type(f).__name__}")
        if not example_args:
            raise TypeError("compile() needs at least one example argument to specialise on")
        if on_guard_failure not in ("recompile", "raise"):
            raise ValueError(
                f"on_guard_failure must be 'recompile' or 'raise', got {on_guard_failure!r}"
            )
        if on_max_steps not in ("warn", "raise"):
            raise ValueError(f"on_max_steps must be 'warn' or 'raise', got {on_max_steps!r}")
        if not isinstance(max_specialisations, int) or max_specialisations < 1:
            raise ValueError(
                f"max_specialisations must be an int >= 1, got {max_specialisations!r}"
            )
        self._setup(
            f,
            example_args,
            argnums,
            cache,
            on_guard_failure,
            max_specialisations,
            dynamic_argnums,
            on_max_steps,
            _Specialisation(),
        )

    def _setup(
        self,
        f: Callable,
        example_args: Sequence[Any],
        argnums: int | Sequence[int],
        cache: bool | str | os.PathLike | ObjectCache,
        on_guard_failure: str,
        max_specialisations: int,
        dynamic_argnums: int | Sequence[int],
        on_max_steps: str,
        spec: _Specialisation,
    ) -> None:
        """Trace ``f`` at ``example_args`` and compile it (the constructor's work; variants
        come here directly, with their :class:`_Specialisation`)."""
        nums = _normalise_argnums(argnums, len(example_args))
        dyn = _normalise_dynamic(dynamic_argnums, nums, example_args)
        capacity = spec.capacity or {}
        self._dynamic = {
            i: capacity.get(i) or _capacity_for(np.shape(example_args[i])[0]) for i in dyn
        }
        self._dynamic_spec = dynamic_argnums
        with _cyclic_gc_paused():
            t0 = time.perf_counter()
            trace = tracing.trace(
                f, example_args, nums, self._dynamic, spec.forced, check_max_steps=not spec.lenient
            )
            self._argnums_spec = argnums
            self._order = nums  # gradients come back in argnums order, as given
            self._cache_spec = cache
            self._init_dispatch(spec.owner, on_guard_failure, max_specialisations)
            if spec.owner is None:
                self.on_max_steps = on_max_steps
                self._lenient_variants: list[GradientFunction] = []
            self._build(
                trace,
                f,
                not isinstance(argnums, int),
                time.perf_counter() - t0,
                object_cache(cache),
            )

    def _grow(self, args: tuple, out: Any):
        """A call whose dynamic-length argument is longer than the capacity compiled for: use a
        variant with room for it, or compile one with the capacity doubled past it."""
        need = {i: np.shape(args[i])[0] for i in self._dynamic}
        for v in self._variants:
            if all(v._dynamic[i] >= n for i, n in need.items()):
                r = v._call(args, out, dispatch=False)
                if r is not None:
                    self._promote(v)
                    return r
        cap = {i: _capacity_for(max(n, 2 * self._dynamic[i])) for i, n in need.items()}
        v = self._new_variant(args, cap)
        self._promote(v)
        return v._call(args, out)

    def _variant(self, args: tuple, **spec: Any) -> "GradientFunction":
        """``f`` traced and compiled for ``args`` with this gradient's settings, as a variant it
        dispatches to (``spec``: the other fields of :class:`_Specialisation`)."""
        v = GradientFunction.__new__(GradientFunction)
        v._setup(
            self.fn,
            args,
            self._argnums_spec,
            self._cache_spec,
            self.on_guard_failure,
            self.max_specialisations,
            self._dynamic_spec,
            self.on_max_steps,
            _Specialisation(owner=self, **spec),
        )
        return v

    def _new_variant(
        self,
        args: tuple,
        capacity: dict[int, int] | None = None,
        forced: dict[int, bool] | None = None,
    ) -> "GradientFunction":
        """Trace and compile ``f`` for ``args`` as a new specialisation (most recent first; the
        least recently used beyond ``max_specialisations`` is dropped). ``forced``: guard
        outcomes the trace follows instead of the example's (see :func:`tracing.trace`)."""
        v = self._variant(args, capacity=capacity, forced=forced)
        self._compiles += 1
        self._variants.insert(0, v)
        del self._variants[self.max_specialisations :]
        return v

    @classmethod
    def from_graph(
        cls,
        trace: Graph,
        tuple_result: bool = True,
        cache: bool | str | os.PathLike | ObjectCache = False,
    ) -> "GradientFunction":
        """Compile a forward graph built directly with :mod:`tapejit.ops` (its active inputs are
        differentiated). Used by tests that sweep the op table."""
        self = cls.__new__(cls)
        self._dynamic, self._dynamic_spec, self._order = {}, (), None
        self._init_dispatch(None, "raise", 1)
        with _cyclic_gc_paused():
            self._build(trace, None, tuple_result, 0.0, object_cache(cache))
        return self

    # -- guards and specialisations ------------------------------------------------------------
    def _init_dispatch(self, owner, on_guard_failure: str, max_specialisations: int) -> None:
        self._owner = self if owner is None else owner
        if owner is None:
            self.on_guard_failure = on_guard_failure
            self.max_specialisations = max_specialisations
            self._variants: list[GradientFunction] = [self]  # most recently used first
            self._compiles = 1
            self._warned = False
            # held while a guard failure retraces and compiles, so that threads failing the
            # same guard at once compile the new specialisation once (calls take no lock)
            self._compile_lock = threading.Lock()
            self._lock_pid = os.getpid()

    @property
    def specialisations(self) -> list[dict[str, Any]]:
        """The compiled variants, most recently used first: for each, the guards it was traced
        under (``source`` file:line and the ``outcome`` taken) and its ``stats``."""
        return [
            {"guards": [{"source": w, "outcome": e} for _, e, w in v._guards], "stats": v.stats}
            for v in self._owner._variants
        ]

    def _guard_failed(self, failed: "GradientFunction", status: int, args: tuple, out: Any):
        """A call whose input takes another path than ``failed`` was traced for: run a cached
        variant whose guards hold, or retrace with this input and compile a new one."""
        _, expected, where = failed._guards[status - 1]
        if tracing.is_max_steps_site(where):
            return self._max_steps_reached(where, args, out)
        if self.on_guard_failure == "raise" or self.fn is None:
            raise GuardError(
                f"{self.name}: guard {status} at {where} was compiled for the outcome {expected}, "
                "and this input takes the other path; compile with on_guard_failure='recompile' "
                "(the default), or make the choice branch-free with tapejit.where(cond, a, b)"
            )
        tried = {id(failed)}
        r = self._try_variants(args, out, tried)
        if r is not None:
            return r
        with self._compiling():
            r = self._try_variants(args, out, tried)  # compiled by another thread meanwhile?
            if r is not None:
                return r
            return self._compile_for(args, out, where)

    def _max_steps_reached(self, where: str, args: tuple, out: Any):
        """A while_loop ran out of ``max_steps`` (native code stopped before writing): warn or
        raise, then answer with a variant traced without max_steps checks (kept apart from the
        dispatch list, so other inputs are still checked)."""
        msg = (
            f"{self.name}: {where}, its condition still true: the value and gradient are those of "
            "the loop stopped there, not of the Python loop (raise max_steps if it should finish)"
        )
        if self.on_max_steps == "raise" or self.fn is None:
            raise MaxStepsError(msg + "; compile with on_max_steps='warn' to accept the result")
        warnings.warn(msg, MaxStepsWarning, stacklevel=5)  # the user's call
        for v in list(self._lenient_variants):
            r = v._call(args, out, dispatch=False)
            if r is not None:
                return r
        with self._compiling():
            v = self._variant(args, lenient=True)
            self._lenient_variants.insert(0, v)
            del self._lenient_variants[self.max_specialisations :]
        r = v._call(args, out, dispatch=False)
        if r is None:
            raise RuntimeError(f"{self.name}: a variant traced for this input failed its own guard")
        return r

    def _compiling(self) -> threading.Lock:
        """The lock held while retracing and compiling. A forked child makes a fresh one: the
        parent's may be held by a thread that does not exist in the child."""
        if self._lock_pid != os.getpid():
            self._compile_lock, self._lock_pid = threading.Lock(), os.getpid()
        return self._compile_lock

    def _try_variants(self, args: tuple, out: Any, tried: set[int]):
        """The result of the first compiled variant not in ``tried`` whose guards hold (it is
        promoted), else None; adds the variants tried to ``tried``."""
        for v in list(self._variants):
            if id(v) not in tried:
                tried.add(id(v))
                r = v._call(args, out, dispatch=False)
                if r is not None:
                    self._promote(v)
                    return r
        return None

    def _compile_for(self, args: tuple, out: Any, where: str):
        """Trace and compile a variant for ``args`` and call it. A comparison that sits at a
        threshold can round one way in numpy (at trace time) and the other in native code (its
        summation order differs): the new variant then fails its own guard on the very input it
        was traced for. It is retraced with that guard's outcome *forced* to the native
        decision, so tracing follows native code (at most once per guard)."""
        v = self._new_variant(args)
        forced: dict[int, bool] = {}
        while True:
            r = v._call(args, out, dispatch=False)
            if r is not None:
                break
            k = v._tls.status
            if k in forced or not 0 < k <= len(v._guards):
                raise RuntimeError(
                    f"{self.name}: a variant traced for this input fails its own guard {k} "
                    f"({v._guards[k - 1][2] if 0 < k <= len(v._guards) else '?'}) even when "
                    "traced to follow the native decision there"
                )
            forced[k] = not v._guards[k - 1][1]
            self._drop(v)
            v = self._new_variant(args, forced=dict(forced))
        if self._compiles > self.max_specialisations and not self._warned:
            self._warned = True
            warnings.warn(
                f"{self.name} has been compiled {self._compiles} times because guards failed "
                f"(Python control flow on traced values, e.g. at {where}); consider "
                "tapejit.where(cond, a, b), which has no guard",
                GuardWarning,
                stacklevel=5,
            )
        self._promote(v)
        return r

    def _drop(self, v: "GradientFunction") -> None:
        try:
            self._variants.remove(v)
        except ValueError:  # another thread moved it meanwhile
            pass

    def _promote(self, v: "GradientFunction") -> None:
        self._drop(v)
        self._variants.insert(0, v)
        functools.partial.__setstate__(self, (v._entry, (), {}, self.__dict__))

    def _build(
        self,
        trace: Graph,
        f: Callable | None,
        tuple_result: bool,
        t_trace: float,
        cache: ObjectCache | None,
    ) -> None:
        """Compile ``trace`` (or load its machine code from ``cache``) and set up the calls.

        The cache key is the trace itself (:func:`_fingerprint`: its text with guards, the
        captured constants' bytes, the result kind), so a hit skips reverse mode, the passes,
        lowering and LLVM; the pipeline is deterministic, so the same trace always gives the
        same machine code. The stages after ``trace`` are recomputed only if :meth:`ir` asks.
        """
        runtime_kinds = [k for k in trace.kinds if k != "const"]
        self.fn = f
        active = tuple(i for i, k in enumerate(runtime_kinds) if k == "active")
        self.argnums = active if self._order is None else tuple(self._order)
        self._tuple_result = tuple_result
        self._stages: dict[str, Any] = {"trace": trace}
        timings: dict[str, float] = {"trace": t_trace}
        key = built = None
        if cache is not None:
            t0 = time.perf_counter()
            key = cache_key(
                f"{_fingerprint(trace, tuple_result)}\norder={self.argnums}",
                f"tapejit-{_VERSION}-{_compiler_digest()}",
            )
            built = _Built.from_entry(cache.load(key), trace)
            timings["cache_key"] = time.perf_counter() - t0
        if built is None:
            built = self._compile(trace, tuple_result, timings, keep_object=cache is not None)
            if cache is not None:
                cache.store(key, built.entry(trace))
        else:
            timings.update(built.lib.timings)
        self._bind(built, trace, tuple_result, timings, cache)

    def _front(self, trace: Graph) -> tuple[Graph, Graph, Program, dict, dict[str, float]]:
        """Reverse mode, the passes and the memory plan of ``trace``: ``(joint graph, optimised
        graph, program, pass statistics, timings)``."""
        t1 = time.perf_counter()
        joint = autodiff.vjp_graph(trace, self._order)
        t2 = time.perf_counter()
        opt, pass_stats = passes.optimise(joint)
        t3 = time.perf_counter()
        prog = passes.plan(opt)
        t4 = time.perf_counter()
        self._stages.update(grad=joint, opt=opt, plan=prog)
        return (
            joint,
            opt,
            prog,
            pass_stats,
            {"autodiff": t2 - t1, "passes": t3 - t2, "plan": t4 - t3},
        )

    def _compile(
        self, trace: Graph, tuple_result: bool, timings: dict, keep_object: bool
    ) -> "_Built":
        """The whole pipeline after tracing: a :class:`_Built` with a live code library."""
        joint, opt, prog, pass_stats, front = self._front(trace)
        timings.update(front)
        t3 = time.perf_counter()
        symbol = f"tj_{trace.name}".replace("<", "_").replace(">", "_")
        module, workspace_bytes = lower(prog, symbol)
        g = prog.graph
        runtime = [n for n, k in zip(g.inputs, g.kinds) if k != "const"]
        consts = [
            np.ascontiguousarray(g.bindings[i]) for i, k in enumerate(g.kinds) if k == "const"
        ]
        if list(g.kinds[len(runtime) :]) != ["const"] * len(consts):
            raise AssertionError("graph inputs must list runtime arguments before constants")
        shapes = tuple(n.shape for n in runtime)
        grad_shapes = tuple(shapes[i] for i in self.argnums)
        if _FAST and not self._dynamic:
            spec = _fastcall.Spec(shapes, grad_shapes, tuple_result, len(consts))
            _fastcall.add_trampoline(module, symbol, spec, symbol + "_fast")
        if not self._dynamic:
            _batch.add_batch_entry(
                module,
                symbol,
                [max(1, int(np.prod(s))) for s in shapes],
                len(consts),
                [max(1, int(np.prod(s))) for s in grad_shapes],
                symbol + "_batch",
            )
        text = CodeLibrary.prepare(module)
        timings["lower"] = time.perf_counter() - t3
        lib = CodeLibrary.compile(text, emit_object=keep_object)
        timings.update(lib.timings)
        stats = {
            "nodes": {"trace": len(trace.nodes), "grad": len(joint.nodes), "opt": len(opt.nodes)},
            "passes": pass_stats,
            "workspace_bytes": workspace_bytes,
            "kernels": prog.stats["kernels"],
            "work": prog.stats["work"],
            "buffers": prog.stats["buffers"],
            "recomputed": prog.stats["recomputed"],
            "loops": sum(n.op == "loop" for n in prog.graph.nodes),
        }
        return _Built(symbol, len(g.inputs), len(g.outputs), shapes, consts, stats, text, lib)

    def _bind(
        self, built: "_Built", trace: Graph, tuple_result: bool, timings: dict, cache
    ) -> None:
        """Set up the native calls of ``built`` (pointers, workspaces, the fast path)."""
        symbol = built.symbol
        self._consts = built.consts
        n_args = len(built.shapes) - len(self._dynamic)  # then one hidden length per dynamic arg
        self._shapes = built.shapes[:n_args]
        self._grad_shapes = tuple(self._shapes[i] for i in self.argnums)
        self._symbol = symbol
        self._llvm = built.llvm
        self._lib = built.lib
        workspace_bytes = built.stats["workspace_bytes"]
        self.name = trace.name
        self._const_ptrs = tuple(_ffi.from_buffer(c) for c in self._consts)
        self._native = _entry.bind(self._lib.address(symbol), built.n_inputs, built.n_outputs)
        self._keepalive: list[Any] = []
        entry: Callable = self._slow_call
        if _FAST and not self._dynamic:
            self._fast_buffers = _Buffers(workspace_bytes)
            address = self._lib.address(symbol + "_fast")
            _fastcall.fill_env(
                self._lib.global_address(_fastcall.env_name(symbol + "_fast")),
                self._fast_buffers.value.ctypes.data,
                self._fast_buffers.ws.ctypes.data,
                [c.ctypes.data for c in self._consts],
            )
            entry = _fastcall.make_builtin(address, self._slow_call, self.name, self._keepalive)
        self._entry = entry
        self._guards = trace.guards
        functools.partial.__setstate__(self, (entry, (), {}, self.__dict__))
        self._tls = _Workspace(workspace_bytes)
        n_ptrs = built.n_inputs + 1 + len(self._grad_shapes) + 1
        self._batch_native = (
            None
            if self._dynamic
            else _entry.bind_batch(self._lib.address(symbol + "_batch"), n_ptrs)
        )
        # idle batch workspaces; a batch call takes one per thread and puts them back, so
        # concurrent batch calls never share one (list.pop/extend are atomic under the GIL)
        self._batch_workspaces: list[_Buffers] = []
        # The last fully validated call with out=: (args, outs, pointers). A repeat call with the
        # same objects re-checks only what can change in place (shape, dtype, layout, writeable).
        self._last: tuple[tuple, tuple, list] | None = None
        hit = cache is not None and built.lib.timings.keys() == {"cache_load"}
        self.stats: dict[str, Any] = {
            **built.stats,
            "constants_bytes": sum(c.nbytes for c in self._consts),
            "cache": "off" if cache is None else ("hit" if hit else "miss"),
            "timings": timings,
        }

    @property
    def loop_iterations(self) -> list[int]:
        """Iterations each loop node of the program has run (forward and backward loops, in
        program order), summed over every call since this variant was compiled — how tests see
        that a ``while_loop``'s gradient does work for the steps taken, not for ``max_steps``."""
        n = self.stats.get("loops", 0)
        if not n:
            return []
        p = _ffi.cast("int64_t *", self._lib.global_address(counters_symbol(self._symbol)))
        return [int(p[k]) for k in range(n)]

    # -- introspection ------------------------------------------------------------------------
    def ir(self, stage: str = "grad") -> str:
        """Printed form of a pipeline stage: one of :data:`STAGES`."""
        if stage in ("grad", "opt", "plan") and stage not in self._stages:
            self._front(self._stages["trace"])  # a cache hit skipped them: recompute
        if stage in self._stages:
            return str(self._stages[stage])
        if stage == "llvm":
            if isinstance(self._llvm, bytes):
                self._llvm = zlib.decompress(self._llvm).decode()
            return self._llvm
        if stage == "llvm-opt":
            return self._lib.llvm_ir
        if stage == "asm":
            return self._lib.asm
        raise ValueError(f"unknown stage {stage!r}; expected one of {', '.join(STAGES)}")

    def __repr__(self) -> str:
        shapes = ", ".join(f"f64{list(s)}" for s in self._shapes)
        return f"<GradientFunction of {self.name}({shapes}) wrt argnums={self.argnums}>"

    # -- calling ------------------------------------------------------------------------------
    def _arg_pointer(self, i: int, a: Any):
        shape = self._shapes[i]
        if i in self._dynamic:  # any number of rows up to the capacity (checked by _call)
            if (
                type(a) is not np.ndarray
                or a.ndim != len(shape)
                or a.shape[1:] != shape[1:]
                or not a.shape[0]
            ):
                got = a.shape if isinstance(a, np.ndarray) else type(a).__name__
                raise ValueError(
                    f"{self.name}: argument {i} must have shape (n, {_dims(shape[1:])}) with "
                    f"n >= 1 (a dynamic length), got {got}"
                )
            shape = a.shape
        if type(a) is np.ndarray:
            if a.dtype != _F64:
                if a.dtype == np.bool_ or not np.can_cast(a.dtype, _F64, "safe"):
                    raise TypeError(
                        f"{self.name}: argument {i} must be float64 (or convert to it exactly), "
                        f"got dtype {a.dtype}"
                    )
                if a.shape != shape:
                    raise ValueError(
                        f"{self.name}: argument {i} must have shape {shape}, got {a.shape}"
                    )
                converted = np.ascontiguousarray(a, dtype=_F64)
                if a.dtype.kind in "iu" and a.dtype.itemsize > 4 and a.size:
                    # 64-bit integers convert exactly only up to 2**53 in magnitude
                    big = a > 2**53 if a.dtype.kind == "u" else (a > 2**53) | (a < -(2**53))
                    if big.any():
                        raise ValueError(
                            f"{self.name}: argument {i} has {a.dtype} values that float64 cannot "
                            "represent exactly (|v| > 2**53); convert it yourself if rounding is "
                            "intended"
                        )
                return _ffi.from_buffer(converted)
            if a.shape != shape:
                raise ValueError(
                    f"{self.name}: argument {i} must have shape {shape}, got {a.shape}"
                )
            if not a.flags.c_contiguous:
                raise ValueError(
                    f"{self.name}: argument {i} must be C-contiguous; pass np.ascontiguousarray(x)"
                )
            if not a.flags.aligned:  # generated code assumes 8-byte aligned doubles
                a = a.copy()
            return _ffi.from_buffer(a, require_writable=False)
        if isinstance(a, (float, int, np.floating, np.integer)) and not isinstance(
            a, (bool, np.bool_)
        ):
            if shape != ():
                raise ValueError(
                    f"{self.name}: argument {i} must be an array of shape {shape}, got a scalar"
                )
            v = float(a)
            if isinstance(a, (int, np.integer)) and abs(int(a)) > 2**53:
                raise ValueError(
                    f"{self.name}: argument {i} is the integer {int(a)}, which float64 cannot "
                    "represent exactly (|v| > 2**53); pass a float if rounding is intended"
                )
            return _ffi.from_buffer(np.array(v))
        if isinstance(a, np.ndarray):  # an ndarray subclass: view it as a plain array
            return self._arg_pointer(i, np.asarray(a))
        raise TypeError(
            f"{self.name}: argument {i} must be a float64 array of shape {shape}, "
            f"got {type(a).__name__}"
        )

    def _out_pointer(self, k: int, o: Any, args: Sequence[Any]):
        what = f"{self.name}: out" + (f"[{k}]" if self._tuple_result else "")
        return self._check_out(what, o, self._grad_shapes[k], args)

    def _check_out(self, what: str, o: Any, shape: tuple[int, ...], args: Sequence[Any]):
        """Validate an output array; returns a writeable cffi pointer to it."""
        if type(o) is not np.ndarray:
            raise TypeError(f"{what} must be a numpy float64 array, got {type(o).__name__}")
        if o.dtype != _F64:
            raise TypeError(f"{what} must have dtype float64, got {o.dtype}")
        if o.shape != shape:
            raise ValueError(f"{what} must have shape {shape}, got {o.shape}")
        problems = [
            problem
            for ok, problem in (
                (o.flags.writeable, "it is read-only (not writeable)"),
                (o.flags.aligned, "it is not aligned to 8 bytes (misaligned)"),
                (o.flags.c_contiguous, f"it is not C-contiguous (strides {o.strides})"),
            )
            if not ok
        ]
        if problems:
            raise ValueError(
                f"{what} must be a writeable, aligned, C-contiguous array; "
                + ", and ".join(problems)
            )
        for i, a in enumerate(args):
            if type(a) is np.ndarray and np.may_share_memory(a, o):
                raise ValueError(
                    f"{what} overlaps an argument (argument {i}); pass a separate output array"
                )
        return _ffi.from_buffer(o, require_writable=True)

    def _repeat(self, args: tuple, outs: tuple) -> list | None:
        """Pointers of the last call if ``args``/``outs`` are the same, still-valid objects."""
        last = self._last
        if last is None or len(args) != len(last[0]) or len(outs) != len(last[1]):
            return None
        for a, b, shape in zip(args, last[0], self._shapes):
            if a is not b:
                return None
            if type(a) is np.ndarray and not (
                a.shape == shape and a.dtype == _F64 and a.flags.c_contiguous
            ):
                return None
        for o, b, shape in zip(outs, last[1], self._grad_shapes):
            if o is not b or not (o.shape == shape and o.dtype == _F64 and o.flags.writeable):
                return None
            if not o.flags.c_contiguous:
                return None
        return last[2]

    def _call(self, args: tuple, out: Any, dispatch: bool = True) -> tuple[float, Any] | None:
        if self._dynamic and len(args) == len(self._shapes):
            for i, cap in self._dynamic.items():
                if np.ndim(args[i]) and np.shape(args[i])[0] > cap:
                    if not dispatch:
                        return None
                    return self._owner._grow(args, out)
        if out is not None:
            outs = out if self._tuple_result else (out,)
            ptrs = self._repeat(args, outs) if type(outs) is tuple else None
            if ptrs is None:
                ptrs = self._validate(args, outs)
                self._last = (args, outs, ptrs)
        else:
            outs = tuple(np.empty(s) for s in self._grad_shapes)
            ptrs = self._validate(args, outs)
        tls = self._tls
        status = self._native(*ptrs[0], *self._const_ptrs, tls.value_ptr, *ptrs[1], tls.ws_ptr)
        if status != 0:
            if 0 < status <= len(self._guards):
                if not dispatch:
                    tls.status = status  # which guard failed, for the dispatcher
                    return None
                return self._owner._guard_failed(self, status, args, out)
            raise RuntimeError(f"{self.name}: native gradient returned status {status}")
        value = float(tls.value)
        if out is not None:
            return value, out
        result = tuple(float(o) if o.shape == () else o for o in outs)
        return value, (result if self._tuple_result else result[0])

    def _validate(self, args: tuple, outs: Any) -> list:
        """Check every argument and output array; returns [input pointers, output pointers]."""
        if len(args) != len(self._shapes):
            raise TypeError(
                f"{self.name}: the compiled gradient takes {len(self._shapes)} argument(s), "
                f"got {len(args)}"
            )
        ptrs = [self._arg_pointer(i, a) for i, a in enumerate(args)]
        for i in sorted(self._dynamic):  # the hidden length inputs
            ptrs.append(_ffi.from_buffer(np.array(float(np.shape(args[i])[0]))))
        if not isinstance(outs, tuple) or len(outs) != len(self._grad_shapes):
            raise TypeError(
                f"{self.name}: out must be a tuple of {len(self._grad_shapes)} arrays "
                "(one per entry of argnums)"
            )
        out_ptrs = [self._out_pointer(k, o, args) for k, o in enumerate(outs)]
        for i in range(len(outs)):
            for j in range(i):
                if np.may_share_memory(outs[i], outs[j]):
                    raise ValueError(f"{self.name}: the arrays in out overlap each other")
        return [ptrs, out_ptrs]

    def _slow_call(self, *args: Any, out: Any = None) -> Any:
        """The gradient of ``f`` at ``args`` (see the class docstring): the Python path."""
        return self._call(args, out)[1]

    # -- batched calls and raw access ---------------------------------------------------------
    @property
    def address(self) -> int:
        """Address of the native kernel, callable from C, cffi, ctypes or numba as::

            int32_t f(const double *arg0, ..., const T *const0, ..., double *value,
                      double *grad0, ..., void *workspace);

        one pointer per runtime argument (C-contiguous float64, a scalar as a pointer to one
        double), then one per captured constant (:attr:`constants`, in order), the primal value
        (one double), one per gradient (C-contiguous, the argument's shape), and a 64-byte
        aligned workspace of :attr:`workspace_bytes` bytes (may be NULL when 0) that no other
        call uses at the same time. Returns 0 on success. Valid while this object lives.
        """
        return self._lib.address(self._symbol)

    @property
    def constants(self) -> tuple[np.ndarray, ...]:
        """The captured constants the kernel takes after the runtime arguments (see
        :attr:`address`); snapshotted at compile time, read-only by contract."""
        return tuple(self._consts)

    @property
    def workspace_bytes(self) -> int:
        return self.stats["workspace_bytes"]

    def batch(
        self, *args: Any, out: Any = None, values: np.ndarray | None = None, threads: int = 1
    ) -> Any:
        """The gradient at every row of a batch, in one native call per thread.

        Each runtime argument gets a leading batch axis: shape ``(m, *shape_i)`` (a scalar
        argument: ``(m,)``), float64 and C-contiguous (arrays of other real dtypes that convert
        exactly are converted). Returns an array of shape ``(m, *grad_shape)`` — a tuple of them
        for a tuple ``argnums`` — or writes into ``out`` (same rules as for a single call) and
        returns it. ``values``, if given, is a writeable float64 array of shape ``(m,)`` that
        receives ``f`` at each row. ``threads=k`` splits the rows into ``k`` contiguous ranges run
        concurrently without the GIL, each with its own workspace.

        Raises ``TypeError``/``ValueError`` naming the argument for a wrong count, type, shape,
        layout or output, and ``ValueError`` for ``threads < 1``.
        """
        if self._dynamic:
            raise TypeError(
                f"{self.name}.batch: a gradient with dynamic-length arguments (dynamic_argnums) "
                "cannot be batched; call it once per sequence"
            )
        current = self._owner._variants[0]
        if current is not self:
            return current.batch(*args, out=out, values=values, threads=threads)
        if len(args) != len(self._shapes):
            raise TypeError(
                f"{self.name}.batch: the compiled gradient takes {len(self._shapes)} batched "
                f"argument(s), got {len(args)}"
            )
        if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
            raise ValueError(f"{self.name}.batch: threads must be an int >= 1, got {threads!r}")
        m, arrays = None, []
        for i, (a, shape) in enumerate(zip(args, self._shapes)):
            what = f"{self.name}.batch: argument {i}"
            if not isinstance(a, np.ndarray):
                raise TypeError(
                    f"{what} must be a float64 array of shape (m, {_dims(shape)}), got {type(a).__name__}"
                )
            if a.dtype != _F64:
                if a.dtype == np.bool_ or not np.can_cast(a.dtype, _F64, "safe"):
                    raise TypeError(
                        f"{what} must be float64 (or convert to it exactly), got dtype {a.dtype}"
                    )
                a = a.astype(_F64)
            if (
                a.ndim != len(shape) + 1
                or a.shape[1:] != shape
                or (m is not None and a.shape[0] != m)
            ):
                expected = f"({'m' if m is None else m}, {_dims(shape)})"
                raise ValueError(f"{what} must have shape {expected}, got {a.shape}")
            if not a.flags.c_contiguous:
                raise ValueError(f"{what} must be C-contiguous; pass np.ascontiguousarray(x)")
            m = a.shape[0]
            arrays.append(a if a.flags.aligned else a.copy())
        if out is None:
            outs = tuple(np.empty((m, *s)) for s in self._grad_shapes)
        else:
            outs = out if self._tuple_result else (out,)
            if not isinstance(outs, tuple) or len(outs) != len(self._grad_shapes):
                raise TypeError(
                    f"{self.name}.batch: out must be a tuple of {len(self._grad_shapes)} arrays"
                )
        out_ptrs = []
        for k, (o, s) in enumerate(zip(outs, self._grad_shapes)):
            what = f"{self.name}.batch: out" + (f"[{k}]" if self._tuple_result else "")
            out_ptrs.append(self._check_out(what, o, (m, *s), arrays))
        for i in range(len(outs)):
            for j in range(i):
                if np.may_share_memory(outs[i], outs[j]):
                    raise ValueError(f"{self.name}.batch: the arrays in out overlap each other")
        if values is None:
            values = np.empty(m)
        else:
            self._check_out(f"{self.name}.batch: values", values, (m,), arrays + list(outs))
        in_ptrs = [_ffi.from_buffer(a, require_writable=False) for a in arrays]
        vptr = _ffi.from_buffer(values, require_writable=True)
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
            if not all(0 <= st <= len(self._guards) for st in status):
                raise RuntimeError(
                    f"{self.name}.batch: native gradient returned status {max(status)}"
                )
            # Some row takes another path than this variant was traced for: answer row by row
            # through the dispatcher, which picks or compiles the right variant for each.
            for r in range(m):
                row_out = tuple(o[r, ...] for o in outs)  # views, 0-d for a scalar gradient
                value, _ = self._owner._call(
                    tuple(a[r] for a in arrays), row_out if self._tuple_result else row_out[0]
                )
                values[r] = value
        return out if out is not None else (outs if self._tuple_result else outs[0])

    def value_and_grad(self, *args: Any, out: Any = None) -> tuple[float, Any]:
        """``(f(*args), gradient)``: the primal value (a float) and the gradient, in one call."""
        return self._call(args, out)


_fastcall.inherit_vectorcall(GradientFunction)


def _normalise_dynamic(
    dynamic: int | Sequence[int], argnums: tuple[int, ...], args
) -> tuple[int, ...]:
    dyn = (dynamic,) if isinstance(dynamic, int) else tuple(dynamic)
    out = []
    for d in dyn:
        if not isinstance(d, int) or not -len(args) <= d < len(args):
            raise ValueError(
                f"dynamic_argnums entry {d!r} is not a valid index for {len(args)} arguments"
            )
        d %= len(args)
        if d in argnums:
            raise ValueError(
                f"argument {d} cannot be both differentiated (argnums) and of dynamic length "
                "(dynamic_argnums): its gradient's shape would change from call to call"
            )
        if np.ndim(args[d]) < 1 or np.shape(args[d])[0] < 1:
            raise ValueError(f"argument {d} is in dynamic_argnums but has no leading axis to vary")
        out.append(d)
    return tuple(sorted(set(out)))


#: Rows a dynamic-length argument is compiled for at first (grown by doubling when exceeded).
DYNAMIC_CAPACITY = 1024


def _capacity_for(n: int) -> int:
    return max(DYNAMIC_CAPACITY, 1 << max(0, int(n) - 1).bit_length())


def compile(
    f: Callable,
    *example_args: Any,
    argnums: int | Sequence[int] = 0,
    cache: bool | str | os.PathLike | ObjectCache = True,
    on_guard_failure: str = "recompile",
    max_specialisations: int = 8,
    dynamic_argnums: int | Sequence[int] = (),
    on_max_steps: str = "warn",
) -> GradientFunction:
    """Compile the gradient of scalar-valued ``f`` for arguments shaped like ``example_args``.

    ``f`` takes float64 arrays (any shape) or floats and returns a scalar float; it is written
    with numpy (``np.exp``, ``@``, ``x.sum()``, indexing, Python loops over elements ...).
    ``argnums`` (int or tuple of ints) selects the arguments to differentiate; the others are
    runtime inputs that get no gradient. Numpy arrays that ``f`` captures are snapshotted now.
    ``cache`` chooses the on-disk cache of compiled machine code (see :func:`object_cache`): a
    hit skips everything after tracing (reverse mode, passes, LLVM); tracing always runs and the
    key is the trace with the captured arrays' bytes, so changed code or a changed captured
    array is always seen.

    Python control flow on traced values (``if x[0] > 1:``, ``range(int(x[0]))``, ``float(x)``)
    follows the example input and records a *guard*; the native code re-checks every guard and,
    when one fails, stops before writing any output. Then ``on_guard_failure="recompile"``
    (default) retraces ``f`` with the actual input, compiles that specialisation, keeps up to
    ``max_specialisations`` of them (least recently used dropped; a :class:`GuardWarning` when
    more compiles than that were needed) and answers the call; ``"raise"`` raises
    :class:`GuardError` naming the guard's source line. ``tapejit.where(c, a, b)`` is the
    branch-free alternative, with no guard.

    ``dynamic_argnums``: arguments whose leading axis may have a different length at every call
    *without recompiling* — a sequence that ``f`` passes to :func:`tapejit.scan` as ``xs``
    (the only use allowed; the scan then runs as many iterations as the call's length and
    returns no ``ys``). Such an argument cannot be differentiated. It is compiled for a capacity
    of :data:`DYNAMIC_CAPACITY` rows (or more, for a longer example) that sizes the loop's
    residual stack in the workspace; a longer call compiles once more with the capacity
    doubled. Calls with dynamic arguments take the Python call path (~1-2 µs) and cannot be
    batched.

    ``on_max_steps``: what a call does when a top-level :func:`tapejit.while_loop` runs all its
    ``max_steps`` iterations with its condition still true — ``"warn"`` (default) issues a
    :class:`MaxStepsWarning` and returns the value and gradient of the loop cut off there;
    ``"raise"`` raises :class:`MaxStepsError`.

    Returns a :class:`GradientFunction`. Raises :class:`tapejit.TracingError` when ``f`` cannot be
    traced (unsupported numpy function, a non-scalar result, ambiguous truth value of an array),
    naming the file and line.
    """
    return GradientFunction(
        f,
        example_args,
        argnums,
        cache,
        on_guard_failure,
        max_specialisations,
        dynamic_argnums=dynamic_argnums,
        on_max_steps=on_max_steps,
    )


class _Lazy:
    """A gradient that compiles one specialisation per argument-shape signature, on first use."""

    def __init__(self, f: Callable, argnums: int | Sequence[int], with_value: bool):
        self.fn, self.argnums, self.with_value = f, argnums, with_value
        self.specialisations: dict[tuple, GradientFunction] = {}

    def __call__(self, *args: Any, out: Any = None):
        key = tuple(np.shape(a) for a in args)
        g = self.specialisations.get(key)
        if g is None:
            g = self.specialisations[key] = GradientFunction(self.fn, args, self.argnums)
        return g.value_and_grad(*args, out=out) if self.with_value else g(*args, out=out)


def grad(f: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """``grad(f)(*args)``: like :func:`compile`, compiling on first call for each set of shapes."""
    return _Lazy(f, argnums, with_value=False)


def value_and_grad(f: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """``value_and_grad(f)(*args) -> (value, gradient)``, compiled per set of argument shapes."""
    return _Lazy(f, argnums, with_value=True)
