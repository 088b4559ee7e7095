"""The public compiled-gradient object, :class:`GradientFunction`: a thin front over a
:class:`~tapejit.runtime.dispatch.Dispatcher` whose current variant its calls reach directly."""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Sequence

import numpy as np

from ..codegen import fastcall as _fastcall
from .dispatch import Dispatcher
from .options import CacheSpec, Options
from .variant import Variant


def _not_built(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("this GradientFunction was not built")


#: How a gradient pickles, ``(reduce, token)``: registered by :mod:`tapejit.runtime.pickling`,
#: which restores gradients and so imports this module (``import tapejit`` imports it).
_pickling: tuple[Callable[[Any], tuple], Callable[[Any], str]] | None = None


def register_pickling(reduce: Callable[[Any], tuple], token: Callable[[Any], str]) -> None:
    """Make ``reduce(g)`` what ``g.__reduce__()`` returns and ``token(g)`` Dask's token of
    ``g`` (:mod:`tapejit.runtime.pickling` registers its own on import)."""
    global _pickling
    _pickling = (reduce, token)


def _pickler() -> tuple[Callable[[Any], tuple], Callable[[Any], str]]:
    if _pickling is None:
        raise TypeError("pickling a GradientFunction needs tapejit.runtime.pickling imported")
    return _pickling


class GradientFunction(functools.partial):
    """A compiled native gradient of ``f`` with respect to the arguments ``argnums``; made by
    :func:`tapejit.compile` (which documents the options).

    **Calling**: ``grad(*args, out=None)`` returns the gradient of ``f`` at ``args`` — an array of
    the differentiated argument's shape (a ``float`` for a scalar argument), or a tuple of them in
    ``argnums`` order when ``argnums`` is a tuple. Arguments must match the example arguments
    given to :func:`tapejit.compile`: same count, same shapes; float64 C-contiguous arrays are
    used in place, arrays of other real dtypes that convert to float64 exactly
    (``numpy.can_cast(..., 'safe')``) and Python/numpy numbers are converted. ``out=`` (an array,
    or a tuple of arrays for a tuple ``argnums``) must be writeable, C-contiguous float64 arrays
    of the gradient's shape that overlap no argument; the gradient is written there, ``out`` is
    returned, and no numpy array is created.

    Other calls: :meth:`value_and_grad` (``(f(*args), gradient)`` from the same native call),
    :meth:`batch` (many inputs, one native call per thread); raw access through :attr:`address`.

    Raises ``TypeError`` for a wrong argument count or type, ``ValueError`` for a wrong shape,
    layout or ``out`` — naming the argument, what was expected and what was given;
    :class:`tapejit.GuardError` when an input takes another branch than compiled and
    ``on_guard_failure="raise"``. Thread-safe: each thread gets its own workspace.

    How a call runs: ``grad(*args, out=...)`` with exactly the compiled types goes through a
    native ``METH_FASTCALL`` entry that validates the call itself and holds the GIL for the
    kernel's duration (tens of nanoseconds of overhead); every other call — no ``out``, arrays
    that need converting, anything invalid — takes the Python path, which validates, converts
    or raises, and releases the GIL around the native call. (The class derives from
    ``functools.partial`` only so that calling an instance is a C-level vectorcall.)
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> "GradientFunction":
        return functools.partial.__new__(cls, _not_built)

    def __init__(
        self,
        f: Callable,
        example_args: Sequence[Any],
        argnums: int | Sequence[int] = 0,
        cache: CacheSpec = True,
        on_guard_failure: str = "recompile",
        max_specialisations: int = 8,
        dynamic_argnums: int | Sequence[int] = (),
        on_max_steps: str = "warn",
        progress: bool | None = None,
        mode: str = "grad",
    ):
        if not callable(f):
            raise TypeError(f"compile() needs a callable, got {type(f).__name__}")
        if not example_args:
            raise TypeError("compile() needs at least one example argument to specialise on")
        options = Options(
            argnums if isinstance(argnums, int) else tuple(argnums),
            cache,
            on_guard_failure,
            max_specialisations,
            dynamic_argnums if isinstance(dynamic_argnums, int) else tuple(dynamic_argnums),
            on_max_steps,
            progress,
            mode,
            None if mode == "grad" else len(example_args),
        )
        self.fn = f
        self._example = tuple(example_args)  # to recompile an unpickled copy on another host
        self._dispatcher = Dispatcher(f, options, self._point)
        self._primary = self._dispatcher.start(example_args)

    def _point(self, v: Variant) -> None:
        """Make calls reach ``v``: the partial's C-level function is its entry, and the
        instance's ``value_and_grad`` (shadowing the method below) is its native one."""
        if not v.program:
            self.__dict__["value_and_grad"] = v.vg_entry
        functools.partial.__setstate__(self, (v.entry, (), {}, self.__dict__))

    def __reduce__(self):
        """Pickle support: the compiled object code and everything needed to run it (see
        :mod:`tapejit.runtime.pickling`); ``copy.deepcopy`` goes the same way."""
        return _pickler()[0](self)

    # functools.partial's protocol, which Dask reads of every partial (dask.utils.funcname,
    # dask.tokenize): ``partial(g.func, *g.args, **g.keywords)`` is ``g``. (The C-level function
    # the vectorcall reaches stays private: functools.partial.func.__get__(g).)
    @property
    def func(self) -> "_Func":
        """A callable that computes this gradient, named after ``f`` (the partial protocol)."""
        return _Func(self)

    @property
    def args(self) -> tuple:
        """``()``: no arguments are bound (the partial protocol)."""
        return ()

    @property
    def keywords(self) -> dict:
        """``{}``: no keywords are bound (the partial protocol)."""
        return {}

    def __dask_tokenize__(self) -> str:
        """Dask's key for this gradient: the digest of its pickle (equal for equal compiled
        code, options and ``f``), computed once per set of specialisations."""
        return _pickler()[1](self)

    def __call__(self, *args: Any, out: Any = None) -> Any:
        """``grad(*args, out=None)``: the gradient of ``f`` at ``args`` (see the class doc).

        Calls do not run this method: the instance's vectorcall reaches the native entry of
        the current variant directly (it does the same as this method, faster)."""
        return self._dispatcher.current.call(args, out)[1]

    # -- the options -----------------------------------------------------------------------------
    @property
    def argnums(self) -> tuple[int, ...]:
        """The differentiated arguments' positions, in the order gradients are returned."""
        return self._primary.signature.argnums

    @property
    def _n_outputs(self) -> int:
        """How many results a call returns (gradients, or a transformation's outputs)."""
        return len(self._primary.signature.grad_shapes)

    @property
    def name(self) -> str:
        """The compiled function's name (``f.__name__``)."""
        return self._primary.name

    @property
    def on_guard_failure(self) -> str:
        return self._dispatcher.options.on_guard_failure

    @property
    def max_specialisations(self) -> int:
        return self._dispatcher.options.max_specialisations

    @property
    def on_max_steps(self) -> str:
        return self._dispatcher.options.on_max_steps

    # -- calling ---------------------------------------------------------------------------------
    def value_and_grad(self, *args: Any, out: Any = None) -> tuple[float, Any]:
        """``(f(*args), gradient)``: the primal value (a float) and the gradient, from one native
        call; ``out`` as for a plain call. Raises as a plain call does, and ``TypeError`` for a
        transformation other than a gradient (``compile(..., mode=...)``)."""
        if self._primary.program:
            raise TypeError(
                f"{self.name}: value_and_grad is for gradients; this function was compiled with "
                f"mode={self._dispatcher.options.mode!r}"
            )
        return self._dispatcher.current.call(args, out)

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
        concurrently without the GIL, each with its own workspace. Rows that take another branch
        than compiled are answered one by one through the specialisation cache.

        Raises ``TypeError``/``ValueError`` naming the argument for a wrong count, type, shape,
        layout or output, ``ValueError`` for ``threads < 1``, and ``TypeError`` for a gradient
        with dynamic-length arguments.
        """
        return self._dispatcher.current.batch(args, out, values, threads)

    # -- introspection ---------------------------------------------------------------------------
    @property
    def stats(self) -> dict[str, Any]:
        """Statistics of the compile for the example arguments: IR node counts per stage, pass
        statistics, kernels, loops, workspace and constants bytes, on-disk cache ``hit``/``miss``/
        ``off``, and per-stage ``timings`` in seconds."""
        return self._primary.stats

    def ir(self, stage: str = "grad") -> str:
        """The printed form of a pipeline stage of the compile for the example arguments: one
        of :data:`tapejit.STAGES` (``trace``, ``grad``, ``opt``, ``plan``, ``llvm``,
        ``llvm-opt``, ``asm``). Raises ``ValueError`` for another name."""
        return self._primary.ir(stage)

    @property
    def specialisations(self) -> list[dict[str, Any]]:
        """The compiled variants, most recently used first: for each, the guards it was traced
        under (``source`` file:line and the ``outcome`` taken) and its ``stats``."""
        return [
            {"guards": [{"source": w, "outcome": e} for _, e, w in v.guards], "stats": v.stats}
            for v in self._dispatcher.variants
        ]

    @property
    def loop_iterations(self) -> list[int]:
        """Iterations each loop node of the program has run (forward and backward loops, in
        program order), summed over every call since the example's variant was compiled — how
        tests see that a ``while_loop``'s gradient does work for the steps taken, not for
        ``max_steps``."""
        return self._primary.loop_iterations

    @property
    def address(self) -> int:
        """Address of the native kernel compiled for the example, callable from C, cffi, ctypes
        or numba as::

            int32_t f(const double *arg0, ..., const T *const0, ..., double *value,
                      double *grad0, ..., void *workspace);

        one pointer per runtime argument (C-contiguous float64, a scalar as a pointer to one
        double), then one per captured constant (:attr:`constants`, in order), the primal value
        (one double), one per gradient (C-contiguous, the argument's shape), and a 64-byte
        aligned workspace of :attr:`workspace_bytes` bytes (may be NULL when 0) that no other
        call uses at the same time. Returns 0 on success, ``k > 0`` when guard ``k`` failed
        (nothing was written). Valid while this object lives.
        """
        return self._primary.address

    @property
    def constants(self) -> tuple[np.ndarray, ...]:
        """The captured constants the kernel takes after the runtime arguments (see
        :attr:`address`); snapshotted at compile time, read-only by contract."""
        return self._primary.constants

    @property
    def workspace_bytes(self) -> int:
        """Bytes of workspace the kernel at :attr:`address` needs per concurrent call."""
        return self._primary.stats["workspace_bytes"]

    def export(self, path: str, name: str | None = None, shared: bool = False) -> Any:
        """Write the kernel compiled for the example as a relocatable object file (PIC) and a
        C header, for use from C/C++/Fortran without Python; ``shared=True`` also links a shared
        library with the system C compiler. See :mod:`tapejit.runtime.export` for the files,
        the C signature, how captured constants and guards are handled, and the errors raised.
        """
        from .export import export_variant

        return export_variant(self._primary, path, name or self.name, shared)

    def __repr__(self) -> str:
        shapes = ", ".join(f"f64{list(s)}" for s in self._primary.signature.shapes)
        return f"<GradientFunction of {self.name}({shapes}) wrt argnums={self.argnums}>"


class _Func:
    """``grad.func``: calls ``grad``; has ``f``'s ``__name__`` and ``grad``'s Dask token."""

    __slots__ = ("grad",)

    def __init__(self, grad: GradientFunction):
        self.grad = grad

    def __call__(self, *args: Any, out: Any = None) -> Any:
        return self.grad(*args, out=out)

    @property
    def __name__(self) -> str:
        return self.grad.name

    def __dask_tokenize__(self) -> str:
        return self.grad.__dask_tokenize__()

    def __reduce__(self) -> tuple:
        return (_Func, (self.grad,))

    def __repr__(self) -> str:
        return f"<native call of {self.grad!r}>"


class _Signatures:
    """``inspect.signature`` of the class: the constructor's; of an instance: the call's."""

    def __init__(self, init: Callable):
        params = list(inspect.signature(init).parameters.values())[1:]
        self.init = inspect.Signature(params)
        P = inspect.Parameter
        self.call = inspect.Signature(
            [P("args", P.VAR_POSITIONAL), P("out", P.KEYWORD_ONLY, default=None)]
        )

    def __get__(self, obj: Any, cls: type) -> inspect.Signature:
        return self.init if obj is None else self.call


GradientFunction.__signature__ = _Signatures(GradientFunction.__init__)
_fastcall.inherit_vectorcall(GradientFunction, equivalent_call=True)
