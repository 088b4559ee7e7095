"""The specialisation cache of one gradient, and what happens when a guard fails.

A compiled gradient is specialised: to its example's shapes, to the outcome of every Python
branch on a traced value (a *guard*), and to the capacity of its dynamic-length arguments. The
:class:`Dispatcher` keeps the compiled :class:`~tapejit.runtime.variant.Variant` s of one function,
most recently used first; the first is the one the public function's fast path calls. When a
variant reports a failed guard or a too-long argument (:meth:`Dispatcher.recover`), the
dispatcher runs a cached variant whose guards hold, or retraces ``f`` at the call's input and
compiles a new one (at most ``max_specialisations`` are kept, least recently used dropped), or
raises :class:`GuardError` when asked to. Calls take no lock; compiling does, so threads that fail
the same guard at once compile the new variant once.
"""

from __future__ import annotations

import os
import threading
import warnings
from typing import Any, Callable, Sequence

import numpy as np

from ..frontend import dynamic_index, tracing
from .options import Options, capacity_for
from .variant import TOO_LONG, Variant, compile_variant


class GuardError(RuntimeError):
    """An input takes another path through Python control flow than the compiled gradient was
    traced for, and ``on_guard_failure="raise"`` was chosen. Names the guard's source line."""


class GuardWarning(RuntimeWarning):
    """A gradient keeps recompiling because its guards keep failing."""


class MaxStepsWarning(RuntimeWarning):
    """A ``tapejit.while_loop`` stopped after ``max_steps`` iterations with its condition still
    true: the result (and gradient) are those of the loop cut off there, not of the Python loop,
    which would have gone on."""


class MaxStepsError(RuntimeError):
    """As :class:`MaxStepsWarning`, with ``compile(..., on_max_steps="raise")``."""


class Dispatcher:
    """The variants of ``f`` compiled with ``options`` (see the module docstring).

    ``on_promote(variant)`` is called whenever another variant becomes the current one (the
    public function points its fast path at ``variant.entry``).
    """

    def __init__(self, f: Callable, options: Options, on_promote: Callable[[Variant], None]):
        self.fn = f
        self.options = options
        self.on_promote = on_promote
        self.variants: list[Variant] = []  # most recently used first
        self.lenient: list[Variant] = []  # traced without max_steps checks (kept apart)
        self.compiles = 0
        self.missing: str | None = None  # why ``fn`` is None (an unpickled gradient)
        self._warned = False
        self._lock = threading.Lock()
        self._lock_pid = os.getpid()

    def start(self, args: Sequence[Any]) -> Variant:
        """Compile the first variant, for the example ``args``."""
        v = self._new(args)
        self.on_promote(v)
        return v

    @property
    def current(self) -> Variant:
        return self.variants[0]

    @property
    def name(self) -> str:
        return self.current.name

    def recover(self, failed: Variant, status: int, args: tuple, out: Any) -> tuple[float, Any]:
        """Answer a call that ``failed`` could not: ``status`` is a failed guard (1-based) or
        :data:`~tapejit.runtime.variant.TOO_LONG`."""
        if status == TOO_LONG:
            return self._grow(failed, args, out)
        return self._guard_failed(failed, status, args, out)

    # -- the variant list ------------------------------------------------------------------------
    def _compile(self, args: Sequence[Any], **spec: Any) -> Variant:
        return compile_variant(self.fn, args, self.options, self, **spec)

    def _new(self, args: Sequence[Any], **spec: Any) -> Variant:
        """Trace and compile a variant for ``args`` and put it first in the list (the least
        recently used beyond ``max_specialisations`` is dropped)."""
        v = self._compile(args, **spec)
        self._keep(v)
        return v

    def _keep(self, v: Variant) -> None:
        """Count a newly compiled ``v`` and put it first (the least recently used beyond
        ``max_specialisations`` is dropped)."""
        self.compiles += 1
        self.variants.insert(0, v)
        for old in self.variants[self.options.max_specialisations :]:
            old.link(None)
        del self.variants[self.options.max_specialisations :]
        self._relink()

    def _relink(self) -> None:
        """Chain the variants' fast paths in list order, so that a guard failing in native code
        tries the next variant natively (inputs alternating between branches cost no Python)."""
        vs = self.variants
        for a, b in zip(vs, vs[1:] + [None]):
            a.link(b)

    def _drop(self, v: Variant) -> None:
        try:
            self.variants.remove(v)
        except ValueError:  # another thread moved it meanwhile
            pass
        v.link(None)
        self._relink()

    def _promote(self, v: Variant) -> None:
        self._drop(v)
        self.variants.insert(0, v)
        self._relink()
        self.on_promote(v)

    def _try(self, args: tuple, out: Any, tried: set[int], fits: Callable = None):
        """The result of the first variant not in ``tried`` (and that ``fits``) whose guards
        hold; it is promoted. ``None`` if there is none; adds the variants run to ``tried``."""
        for v in list(self.variants):
            if id(v) in tried or (fits is not None and not fits(v)):
                continue
            tried.add(id(v))
            r = v.run(args, out)
            if type(r) is tuple:
                self._promote(v)
                return r
        return None

    def _compiling(self) -> threading.Lock:
        """The lock held while retracing and compiling. A forked child makes a fresh one: the
        parent's may be held by a thread that does not exist in the child."""
        if self._lock_pid != os.getpid():
            self._lock, self._lock_pid = threading.Lock(), os.getpid()
        return self._lock

    # -- recovering ------------------------------------------------------------------------------
    def _grow(self, failed: Variant, args: tuple, out: Any) -> tuple[float, Any]:
        """A dynamic-length argument longer than ``failed`` was compiled for: use a variant with
        room for it, or compile one with the capacity doubled past it."""
        dyn = failed.signature.dynamic
        need = {i: np.shape(args[i])[0] for i in dyn}

        def fits(v: Variant) -> bool:
            return all(v.signature.dynamic[i] >= n for i, n in need.items())

        r = self._try(args, out, set(), fits)
        if r is not None:
            return r
        cap = {i: capacity_for(max(n, 2 * dyn[i])) for i, n in need.items()}
        with self._compiling():
            v = self._new(args, capacity=cap)
        self._promote(v)
        return v.call(args, out)

    def _guard_failed(
        self, failed: Variant, status: int, args: tuple, out: Any
    ) -> tuple[float, Any]:
        """A call whose input takes another path than ``failed`` was traced for: run a cached
        variant whose guards hold, or retrace with this input and compile a new one."""
        _, expected, where = failed.guards[status - 1]
        if tracing.is_max_steps_site(where):
            return self._max_steps_reached(where, args, out)
        err = dynamic_index.run_error(self.name, where)
        if err is not None:  # no other variant answers it: raise
            raise err
        if self.options.on_guard_failure == "raise" or self.fn is None:
            raise GuardError(
                f"{self.name}: guard {status} at {where} was compiled for the outcome {expected}, "
                "and this input takes the other path; "
                + (
                    f"it cannot recompile here: {self.missing}"
                    if self.fn is None and self.missing
                    else "compile with on_guard_failure='recompile' (the default), "
                    "or make the choice branch-free with tapejit.where(cond, a, b)"
                )
            )
        tried = {id(failed)}
        r = self._try(args, out, tried)
        if r is not None:
            return r
        with self._compiling():
            r = self._try(args, out, tried)  # compiled by another thread meanwhile?
            if r is not None:
                return r
            return self._compile_for(args, out, where)

    def _max_steps_reached(self, where: str, args: tuple, out: Any) -> tuple[float, Any]:
        """A while_loop ran out of ``max_steps`` (native code stopped before writing): warn or
        raise, then answer with a variant traced without max_steps checks (kept apart from the
        dispatch list, so other inputs are still checked)."""
        msg = (
            f"{self.name}: {where}, its condition still true: the value and gradient are those of "
            "the loop stopped there, not of the Python loop (raise max_steps if it should finish)"
        )
        if self.options.on_max_steps == "raise" or self.fn is None:
            raise MaxStepsError(msg + "; compile with on_max_steps='warn' to accept the result")
        warnings.warn(msg, MaxStepsWarning, stacklevel=_user_level())
        for v in list(self.lenient):
            r = v.run(args, out)
            if type(r) is tuple:
                return r
        with self._compiling():
            r, v = self._settle(args, out, lenient=True)
            if v is not None:
                self.lenient.insert(0, v)
                del self.lenient[self.options.max_specialisations :]
        return r

    def _compile_for(self, args: tuple, out: Any, where: str) -> tuple[float, Any]:
        """Trace and compile a variant for ``args``, call it and make it the current one (see
        :meth:`_settle`)."""
        r, v = self._settle(args, out)
        if v is None:
            return r
        self._keep(v)
        if self.compiles > self.options.max_specialisations and not self._warned:
            self._warned = True
            kept = [f"line {line}: {why}" for line, why in v.stats.get("convert", {}).get(
                "kept", [])][:3]  # fmt: skip
            why = f"; statements not converted: {'; '.join(kept)}" if kept else ""
            warnings.warn(
                f"{self.name} has been compiled {self.compiles} times because guards failed "
                f"(Python control flow on traced values, e.g. at {where}); consider "
                f"tapejit.where(cond, a, b), which has no guard{why}",
                GuardWarning,
                stacklevel=_user_level(),
            )
        self._promote(v)
        return r

    def _settle(self, args: tuple, out: Any, lenient: bool = False) -> tuple[Any, Variant | None]:
        """Trace and compile a variant for ``args`` and call it: ``(result, variant)``, the
        variant ``None`` when it may answer this call only.

        A comparison that sits at a threshold can round one way in numpy (at trace time) and
        the other in native code (its summation order differs): the new variant then fails its
        own guard on the very input it was traced for. It is retraced with that guard's outcome
        *forced* to the native decision, so tracing follows native code. When that variant
        decides the other way again (each compiled variant rounds the comparison its own way:
        the input is at the threshold within rounding, where either branch is an answer), the
        call is answered by a variant that follows numpy's decision there without checking it:
        for this call only, never kept, since it would take that branch for any input. A
        while_loop's max_steps check that fails is answered as such (a warning or an error)."""
        forced: dict[int, bool] = {}
        unchecked: set[int] = set()
        while True:
            v = self._compile(
                args, forced=dict(forced), unchecked=set(unchecked), lenient=lenient
            )
            r = v.run(args, out)
            if type(r) is tuple:
                return r, (None if unchecked else v)
            k = r
            v.link(None)
            if k in unchecked or not 0 < k <= len(v.guards):
                raise RuntimeError(  # an internal error: an unchecked guard cannot fail
                    f"{self.name}: a variant traced for this input fails its guard {k} "
                    f"({v.guards[k - 1][2] if 0 < k <= len(v.guards) else '?'}), which it "
                    "does not check; please report this"
                )
            where = v.guards[k - 1][2]
            err = dynamic_index.run_error(self.name, where)
            if err is not None:
                raise err
            if tracing.is_max_steps_site(where) and not lenient:
                return self._max_steps_reached(where, args, out), None
            if k in forced:
                del forced[k]
                unchecked.add(k)
            else:
                forced[k] = not v.guards[k - 1][1]


def _user_level() -> int:
    """The ``stacklevel`` of the first frame outside tapejit (a warning names the user's call)."""
    import sys

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    f, level = sys._getframe(1), 1
    while f is not None and os.path.abspath(f.f_code.co_filename).startswith(here):
        f, level = f.f_back, level + 1
    return level
