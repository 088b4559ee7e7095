"""The public entry points: :func:`compile`, :func:`grad`, :func:`value_and_grad`.

``compile(f, *example_args, argnums=0)`` runs the whole pipeline once — trace, reverse mode,
passes, memory plan, LLVM lowering, JIT — and returns a :class:`GradientFunction` that calls the
native code. The gradient is specialised to the example arguments' shapes: calling it with other
shapes raises a ``ValueError`` (use :func:`grad`, which compiles one specialisation per shape).
The machinery lives in :mod:`tapejit.pipeline` (the stages) and :mod:`tapejit.runtime` (calls,
validation, specialisations).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from .pipeline import STAGES
from .runtime.dispatch import GuardError, GuardWarning, MaxStepsError, MaxStepsWarning
from .runtime.function import GradientFunction
from .runtime.options import DYNAMIC_CAPACITY, CacheSpec, object_cache

__all__ = [
    "DYNAMIC_CAPACITY",
    "STAGES",
    "GradientFunction",
    "GuardError",
    "GuardWarning",
    "MaxStepsError",
    "MaxStepsWarning",
    "compile",
    "grad",
    "object_cache",
    "value_and_grad",
]


def compile(
    f: Callable,
    *example_args: Any,
    argnums: int | Sequence[int] = 0,
    cache: CacheSpec = True,
    on_guard_failure: str = "recompile",
    max_specialisations: int = 8,
    dynamic_argnums: int | Sequence[int] = (),
    on_max_steps: str = "warn",
    progress: bool | None = None,
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

    Python control flow on traced values (``if x[0] > 1:``, ``range(int(x[0]))``) follows the
    example input and records a *guard*; the native code re-checks every guard and, when one
    fails, stops before writing any output. Then ``on_guard_failure="recompile"`` (default)
    retraces ``f`` with the actual input, compiles that specialisation, keeps up to
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

    ``progress``: show the compile's stages on standard error when it runs past a second —
    ``None`` (default) on a terminal unless ``$TAPEJIT_PROGRESS=0``; every stage is also logged
    to the ``"tapejit"`` logger (:mod:`tapejit.progress`).

    Returns a :class:`GradientFunction`. Raises :class:`tapejit.TracingError` when ``f`` cannot be
    traced (unsupported numpy function, a non-scalar result, a conversion that would drop a
    derivative), naming the file and line; ``TypeError``/``ValueError`` for invalid options.
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
        progress=progress,
    )


class _Lazy:
    """A gradient that compiles one specialisation per argument-shape signature, on first use."""

    def __init__(self, f: Callable, argnums: int | Sequence[int], with_value: bool):
        self.fn, self.argnums, self.with_value = f, argnums, with_value
        self.specialisations: dict[tuple, GradientFunction] = {}
        self.__doc__ = (
            f"{'(value, gradient)' if with_value else 'The gradient'} of "
            f"{getattr(f, '__name__', 'f')} with respect to argnums={argnums!r}, compiled per "
            "set of argument shapes (see tapejit.compile)."
        )

    def __call__(self, *args: Any, out: Any = None):
        key = tuple(np.shape(a) for a in args)
        g = self.specialisations.get(key)
        if g is None:
            g = self.specialisations[key] = GradientFunction(self.fn, args, self.argnums)
        return g.value_and_grad(*args, out=out) if self.with_value else g(*args, out=out)

    def __repr__(self) -> str:
        kind = "value_and_grad" if self.with_value else "grad"
        return f"<tapejit.{kind} of {getattr(self.fn, '__name__', 'f')}, argnums={self.argnums!r}>"


def grad(f: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """The gradient of scalar-valued ``f`` as a function: ``grad(f)(*args, out=None)``.

    Like :func:`compile`, but lazy: the first call with a given set of argument shapes traces and
    compiles ``f`` for them (default options), later calls with those shapes reuse that
    :class:`GradientFunction`. ``argnums``: the argument(s) to differentiate (an int: the
    gradient is an array of that argument's shape, or a float for a scalar; a tuple: a tuple of
    gradients in that order). ``out=``: as for :class:`GradientFunction`.

    Raises :class:`tapejit.TracingError` at the first call when ``f`` cannot be traced, and the
    ``TypeError``/``ValueError`` of a :class:`GradientFunction` call for invalid arguments.
    """
    return _Lazy(f, argnums, with_value=False)


def value_and_grad(f: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """``value_and_grad(f)(*args, out=None) -> (f(*args), gradient)``, both from one native call.

    The value ``f(*args)`` is a Python float; the gradient is an array of the differentiated
    argument's shape (a float for a scalar argument), or a tuple of them in ``argnums`` order
    for a tuple ``argnums``. ``out=``, if given, receives the gradient (writeable C-contiguous
    float64 arrays of the gradient's shape) and is returned in the gradient's place. Compiled
    lazily, like :func:`grad`: the first call with a given set of argument shapes traces and
    compiles ``f``; later calls with those shapes reuse it.

    Raises :class:`tapejit.TracingError` at the first call when ``f`` cannot be traced, and the
    ``TypeError``/``ValueError`` of a :class:`GradientFunction` call for invalid arguments.
    """
    return _Lazy(f, argnums, with_value=True)
