"""The array API namespace of traced values, and scipy's array-API mode while tracing.

scipy functions written in Python (``scipy.special.logsumexp``, ``softmax``, ...) begin with
``np.asarray(a)`` — a numpy array cannot hold a traced value — unless scipy's *array-API mode*
is on (``SCIPY_ARRAY_API=1`` when scipy is imported). In that mode scipy asks its arguments for
their namespace (:meth:`Tracer.__array_namespace__ <tapejit.frontend.tracing.Tracer>` returns
:data:`namespace`) and computes with ``xp.exp``, ``xp.sum``, ... of it: the functions below,
which apply numpy's functions to traced values (they dispatch to tapejit through
``__array_ufunc__``/``__array_function__``), so scipy's code traces like the user's own.

:func:`scipy_array_api` turns scipy's mode on for the duration of a trace and restores it after
(:func:`tapejit.frontend.tracing.trace` enters it), so the user sets no environment variable. The mode is
a process-wide switch of scipy; numpy arrays passed to scipy from other threads during a trace
still get numpy's results (scipy's array-API mode supports numpy arrays), with scipy's stricter
input validation (no object, masked or ``np.matrix`` arrays). scipy versions whose switch is not
known here are left alone (their functions then fail with tapejit's conversion error).

The namespace implements what scipy's functions use (found by running them, see
``tests/test_scipy_functions.py``), the array API's names for numpy functions, and falls back to
``array_api_compat.numpy`` (or scipy's copy of it) and then to numpy for other names: numpy's
functions, applied to traced values, either trace or raise a :class:`~tapejit.TracingError`
naming the function and the user's line. Traced values are float64 or bool; there are no integer
or complex traced values, so functions asked for those dtypes return numpy arrays (constants).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from types import ModuleType
from typing import Any, Callable, Iterator

import numpy as np

from ..errors import _PKG_DIR, TracingError
from ..registry import HOOKS
from ..trace_state import _current
from ..tracer import Tracer, lift
from .scipy_linalg import traced_linalg
from .scipy_stats import traced_distributions

# ----------------------------------------------------------------------------------------------
# The namespace


def _dtype(x: Any) -> Any:
    return x.dtype if isinstance(x, (Tracer, np.ndarray, np.generic)) else x


def asarray(obj, /, *, dtype=None, device=None, copy=None) -> Any:
    """A traced value for a traced value, a float or bool number or array (captured as a
    constant), or a sequence of them; a numpy array for other dtypes (integer indices)."""
    if isinstance(obj, Tracer):
        out = obj if dtype is None or np.dtype(dtype) == obj.dtype else obj.astype(dtype)
        return np.copy(out) if copy and out is obj else out
    if isinstance(obj, (list, tuple)) and any(isinstance(v, Tracer) for v in obj):
        return asarray(np.stack([asarray(v) for v in obj]), dtype=dtype, copy=False)
    arr = np.array(obj, dtype=dtype, copy=copy if copy is not None else None)
    if arr.dtype == object:
        return asarray(lift(arr), dtype=dtype)
    if arr.dtype.kind in "fb" and arr.dtype.itemsize in (1, 8):  # float64, bool
        return lift(arr if arr.ndim else arr[()])
    return arr


def astype(x, dtype, /, *, copy=True, device=None) -> Any:
    if isinstance(x, Tracer):
        return asarray(x, dtype=dtype, copy=copy)
    return np.asarray(x).astype(dtype, copy=copy)


def result_type(*arrays_and_dtypes) -> np.dtype:
    return np.result_type(*(_dtype(x) for x in arrays_and_dtypes))


def isdtype(dtype, kind) -> bool:
    return np.isdtype(np.dtype(dtype), kind)


def broadcast_arrays(*arrays) -> list:
    shape = np.broadcast_shapes(*(np.shape(a) for a in arrays))
    return [np.broadcast_to(a, shape) for a in arrays]


def _fill(value: float, shape, dtype=None) -> Any:
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    return asarray(np.full(shape, value, dtype=dtype))


def full(shape, fill_value, *, dtype=None, device=None) -> Any:
    if isinstance(fill_value, Tracer):
        return np.broadcast_to(asarray(fill_value, dtype=dtype), shape) * 1
    return _fill(fill_value, shape, dtype)


def full_like(x, /, fill_value, *, dtype=None, device=None) -> Any:
    return full(np.shape(x), fill_value, dtype=dtype or _dtype(x))


def zeros(shape, *, dtype=None, device=None) -> Any:
    return _fill(0, shape, dtype)


def ones(shape, *, dtype=None, device=None) -> Any:
    return _fill(1, shape, dtype)


def zeros_like(x, /, *, dtype=None, device=None) -> Any:
    return full_like(x, 0, dtype=dtype)


def ones_like(x, /, *, dtype=None, device=None) -> Any:
    return full_like(x, 1, dtype=dtype)


def empty(shape, *, dtype=None, device=None) -> Any:
    return zeros(shape, dtype=dtype)


def empty_like(x, /, *, dtype=None, device=None) -> Any:
    return zeros_like(x, dtype=dtype)


def _reduction(fn):
    def reduce(x, /, *, axis=None, dtype=None, keepdims=False, **kw):
        return fn(x, axis=axis, keepdims=keepdims)

    reduce.__name__ = fn.__name__
    return reduce


def finfo(type, /):
    return np.finfo(_dtype(type))


def iinfo(type, /):
    return np.iinfo(_dtype(type))


#: array-API names that are numpy's names too (numpy's functions dispatch to tapejit)
_SAME_AS_NUMPY = """abs exp expm1 log log1p log2 log10 sqrt square sign sin cos tan sinh cosh tanh
    floor ceil trunc round isfinite isinf isnan where clip maximum minimum logaddexp any all
    real imag conj squeeze reshape expand_dims broadcast_to stack moveaxis""".split()

#: array-API name -> function (numpy's functions dispatch to tapejit for traced arguments)
_FUNCTIONS = {
    **{name: getattr(np, name) for name in _SAME_AS_NUMPY},
    "asarray": asarray,
    "astype": astype,
    "result_type": result_type,
    "isdtype": isdtype,
    "finfo": finfo,
    "iinfo": iinfo,
    "broadcast_arrays": broadcast_arrays,
    "full": full,
    "full_like": full_like,
    "zeros": zeros,
    "ones": ones,
    "zeros_like": zeros_like,
    "ones_like": ones_like,
    "empty": empty,
    "empty_like": empty_like,
    "sum": _reduction(np.sum),
    "prod": _reduction(np.prod),
    "max": _reduction(np.max),
    "min": _reduction(np.min),
    "mean": _reduction(np.mean),
    "concat": np.concatenate,
    "pow": np.power,
    "permute_dims": np.transpose,
    "acos": np.arccos,
    "asin": np.arcsin,
    "atan": np.arctan,
    "atan2": np.arctan2,
    "acosh": np.arccosh,
    "asinh": np.arcsinh,
    "atanh": np.arctanh,
}

#: array-API constants and dtypes
_CONSTANTS = {
    "e": np.e,
    "pi": np.pi,
    "inf": np.inf,
    "nan": np.nan,
    "newaxis": None,
    "bool": np.bool_,
    "float64": np.float64,
    "float32": np.float32,
    "int64": np.int64,
    "int32": np.int32,
    "complex128": np.complex128,
    "complex64": np.complex64,
}


def _fallback_namespace() -> ModuleType:
    try:
        import array_api_compat.numpy as compat
    except ImportError:
        try:
            import scipy._lib.array_api_compat.numpy as compat
        except ImportError:
            compat = np
    return compat


class _Special:
    """``xp.special``: scipy.special's ufuncs, which trace through ``__array_ufunc__`` (scipy
    looks here before it falls back to numpy for a namespace's ``special`` functions, when
    ``SCIPY_ARRAY_API=1`` was set as scipy was imported and wrapped its ufuncs)."""

    def __getattr__(self, name: str) -> Any:
        special = sys.modules.get("scipy.special")
        fn = getattr(special, name, None) if not name.startswith("_") else None
        fn = getattr(fn, "__wrapped__", fn)  # the ufunc under scipy's array-API wrapper
        if not isinstance(fn, np.ufunc):
            raise AttributeError(name)
        return fn


class ArrayNamespace:
    """The array API namespace of :class:`~tapejit.frontend.tracing.Tracer` (see the module docstring).
    Names it does not define come from ``array_api_compat.numpy`` or numpy."""

    __name__ = __qualname__ = "tapejit.frontend.numpy.array_api"
    __array_api_version__ = "2024.12"

    special = _Special()

    def __init__(self):
        self.__dict__.update(_FUNCTIONS)
        self.__dict__.update(_CONSTANTS)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        fallback = _fallback_namespace()
        fn = getattr(fallback, name, None)
        if fn is None:
            fn = getattr(np, name)  # AttributeError for names neither defines
        setattr(self, name, fn)
        return fn

    def __repr__(self) -> str:
        return "<array API namespace tapejit.frontend.numpy.array_api>"


#: The namespace ``Tracer.__array_namespace__`` returns.
namespace = ArrayNamespace()


# ----------------------------------------------------------------------------------------------
# scipy's array-API mode


class _SciPyMode:
    """Counts the traces in progress (in every thread) that need scipy's array-API mode on: the
    first one turns it on, the last one restores what it was."""

    def __init__(self):
        self.lock = threading.Lock()
        self.depth = 0
        self.saved: list[tuple[Any, str, Any]] = []  # (dict-like or module, key, old value)


_mode = _SciPyMode()


def _switches() -> list[tuple[Any, str]]:
    """Where the imported scipy keeps its array-API switch: ``(owner, key)`` pairs (a dict and a
    key, or a module and an attribute); empty if scipy is not imported or its switch is not known.

    scipy 1.11–1.15 read ``scipy._lib._array_api._GLOBAL_CONFIG["SCIPY_ARRAY_API"]``; scipy
    1.16+ read the module attribute ``scipy._lib._array_api_override.SCIPY_ARRAY_API`` in
    ``array_namespace`` (``scipy._lib._array_api`` keeps a copy, read by ``xp_vector_norm``)."""
    found: list[tuple[Any, str]] = []
    api = sys.modules.get("scipy._lib._array_api")
    if api is None:
        return found
    config = getattr(api, "_GLOBAL_CONFIG", None)
    if isinstance(config, dict) and "SCIPY_ARRAY_API" in config:
        found.append((config, "SCIPY_ARRAY_API"))
    override = sys.modules.get("scipy._lib._array_api_override")
    if override is not None and hasattr(override, "SCIPY_ARRAY_API"):
        found.append((override, "SCIPY_ARRAY_API"))
        if hasattr(api, "SCIPY_ARRAY_API"):
            found.append((api, "SCIPY_ARRAY_API"))
        if hasattr(override, "array_api_compat"):
            found.append((override, "array_api_compat"))
    for name in _ASARRAY_MODULES:  # scipy functions written in Python that convert first
        module = sys.modules.get(name)
        if module is not None and getattr(module, "asarray", None) is not None:
            found.append((module, "asarray"))
    return found


#: scipy modules whose Python-level functions call ``asarray`` (numpy's, imported by name) on
#: their arguments before ufuncs that trace: ``scipy.special.polygamma(n, x)`` is
#: ``where(n == 0, psi(x), (-1)**(n+1) gamma(n+1) zeta(n+1, x))`` after ``asarray``. While a
#: trace runs, their ``asarray`` passes traced values through (:func:`_keep_traced`).
_ASARRAY_MODULES = ("scipy.special._basic",)


class _keep_traced:
    """``asarray`` that returns a traced value as it is (numpy's for anything else)."""

    def __init__(self, asarray: Any):
        self._asarray = asarray

    def __call__(self, a: Any, *args: Any, **kw: Any) -> Any:
        if isinstance(a, Tracer):
            return a
        return self._asarray(a, *args, **kw)


class _MixedNamespaces:
    """Stands in for ``array_api_compat`` in scipy's ``array_namespace`` during a trace: numpy
    arrays next to traced values (``logsumexp(x, b=w)`` with a constant ``w``) are constants of
    the trace, so the namespace is tapejit's — scipy would otherwise refuse the mix ("Multiple
    namespaces"). Everything else is array_api_compat's answer."""

    def __init__(self, compat: Any):
        self._compat = compat

    def array_namespace(self, *arrays: Any, **kw: Any) -> Any:
        if any(isinstance(a, Tracer) for a in arrays):
            return namespace
        return self._compat.array_namespace(*arrays, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._compat, name)


def _on(key: str, old: Any) -> Any:
    """The value a switch takes during a trace."""
    if key == "asarray":
        return _keep_traced(old)
    return _MixedNamespaces(old) if key == "array_api_compat" else True


def _get(owner: Any, key: str) -> Any:
    return owner[key] if isinstance(owner, dict) else getattr(owner, key)


def _set(owner: Any, key: str, value: Any) -> None:
    if isinstance(owner, dict):
        owner[key] = value
    else:
        setattr(owner, key, value)


def scipy_mode_on() -> bool:
    """Whether scipy's array-API mode is on now (False if scipy is not imported)."""
    switches = [(o, k) for o, k in _switches() if k == "SCIPY_ARRAY_API"]  # (not asarray)
    return bool(switches) and all(bool(_get(o, k)) for o, k in switches)


@contextlib.contextmanager
def scipy_array_api(f: Callable | None = None) -> Iterator[None]:
    """Turn scipy's array-API mode on (if scipy is imported and its switch is known) and
    restore the previous setting afterwards, also after an error. Re-entrant and thread-safe:
    nested traces and traces in other threads share one activation."""
    with _mode.lock:
        if _mode.depth == 0:
            _mode.saved = [(o, k, _get(o, k)) for o, k in _switches()]
            for o, k, old in _mode.saved:
                _set(o, k, _on(k, old))
        _mode.depth += 1
    try:
        # scipy.stats' methods and scipy.linalg's functions on traced values
        with traced_distributions(), traced_linalg(f):
            yield
    except (TracingError, TypeError, AttributeError) as e:
        recorded = _current[0].conversion_error if _current else None
        err = _scipy_error(e, recorded, bool(_mode.saved))
        if err is None:
            raise
        if recorded is not None:  # trace() raises the recorded conversion error: this one
            _current[0].conversion_error = err
        raise err from e
    finally:
        with _mode.lock:
            _mode.depth -= 1
            if _mode.depth == 0:
                for o, k, old in _mode.saved:
                    _set(o, k, old)
                _mode.saved = []


# ----------------------------------------------------------------------------------------------
# Errors inside scipy


def _frame_site(tb) -> str:
    code = tb.tb_frame.f_code
    return f"{code.co_filename}:{tb.tb_lineno} in {code.co_name}()"


_SITE = re.compile(r"^\S.*?:\d+ in [\w<>.]+\(\): ")


def _scipy_error(
    e: BaseException, conversion: TracingError | None, mode_on: bool
) -> TracingError | None:
    """For ``e`` raised inside a scipy function on traced values (its innermost frame outside
    tapejit and numpy is scipy's): a :class:`TracingError` naming the user's line that called
    scipy, scipy's function and line, the message of ``e`` (or of the ``conversion`` error
    :func:`tapejit.frontend.tracing.trace` would raise instead) and what to do; else None."""
    scipy = sys.modules.get("scipy")
    if scipy is None or not getattr(scipy, "__file__", None):
        return None
    scipy_dir = os.path.dirname(os.path.abspath(scipy.__file__)) + os.sep
    user = entry = inner = None
    tb = e.__traceback__
    while tb is not None:
        path = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if path.startswith(scipy_dir):
            entry = entry or tb
            inner = tb
        elif not path.startswith(_PKG_DIR + os.sep) and "numpy" + os.sep not in path:
            if entry is not None:
                return None  # raised in user code that scipy called back (an optimiser's f)
            user = tb
        tb = tb.tb_next
    if inner is None:
        return None
    if conversion is not None:  # its advice is for the user's own np.asarray: leave it out
        message = _SITE.sub("", str(conversion), count=1).split(": ", 1)[0]
    elif isinstance(e, TracingError):
        message = _SITE.sub("", str(e), count=1)
    else:
        message = f"{type(e).__name__}: {e}"
    func = entry.tb_frame.f_code.co_name
    tb = entry
    while tb is not None:  # the function the user called, not a decorator's wrapper
        name = getattr(tb.tb_frame.f_code, "co_qualname", "")
        path = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if path.startswith(scipy_dir) and name and "<locals>" not in name:
            func = name
            break
        tb = tb.tb_next
    if not mode_on and _switches():
        fix = (
            "scipy was first imported while this function was being traced, after tapejit "
            "turns scipy's array-API mode on (when a trace starts); import scipy, or the scipy "
            "function, at module level (or before compiling), and compile again"
        )
    elif not mode_on:
        fix = (
            "tapejit could not turn on scipy's array-API mode for this scipy version, and "
            "without it scipy converts its arguments to numpy arrays (np.asarray), which "
            "cannot hold traced values; set the environment variable SCIPY_ARRAY_API=1 before "
            "scipy is imported, or write the formula with numpy functions and scipy.special's "
            "ufuncs (expit, gammaln, xlogy, ...), which trace"
        )
    elif "Multiple namespaces" in message:
        fix = (
            "scipy does not mix numpy arrays and traced values in one call (their array "
            "namespaces differ); pass Python numbers, or make the numpy array w a traced "
            "constant first: np.zeros_like(x) + w"
        )
    else:
        fix = (
            "this scipy function does not support the array API or uses an operation tapejit "
            "does not trace (scipy.stats distributions convert their arguments with "
            "np.asarray); write the formula with numpy functions and scipy.special's ufuncs "
            "(expit, gammaln, xlogy, ...), which trace"
        )
    where = _frame_site(user) if user is not None else "<unknown location>"
    return TracingError(
        f"{where}: scipy's {func} cannot be traced: at {_frame_site(inner)}: {message}. {fix}"
    )


# the tracer's hooks: ``x.__array_namespace__()`` and the context ``f`` is traced in
HOOKS["array_namespace"] = namespace
HOOKS["scipy_array_api"] = scipy_array_api
