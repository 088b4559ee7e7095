"""The host's BLAS and LAPACK: ``dgemm`` for large matrix products, ``dsyevd`` for
symmetric eigenproblems and ``dgesdd`` for singular value decompositions, from the libraries
scipy ships (``scipy.linalg.cython_blas`` and ``cython_lapack``), called by generated code
through function pointers.

:mod:`tapejit.codegen.lower.linalg` emits, for a matrix product of at least :data:`MIN_MULTIPLY_ADDS`
multiply-adds, a call through the global :data:`SYMBOL` when it is set and its own loops when it
is null; :func:`bind` sets it in a loaded code library. Without scipy (an optional dependency),
and in exported object files, the pointer stays null and the loops run. ``dgemm`` allocates no
memory per call once the BLAS library is initialised.

``eigh`` nodes (built only when :func:`lapack_available`) call ``dsyevd`` through
:data:`SYEVD_SYMBOL` — the routine numpy's ``np.linalg.eigh`` calls, so the eigenvectors' signs
agree with numpy's — with their work arrays on the stack; where that pointer is null (an
unpickled function on a host without scipy) they return NaN rather than run. ``svd`` nodes
call ``dgesdd`` (jobz='S', the routine and job numpy's ``np.linalg.svd(a,
full_matrices=False)`` uses: the same singular vectors, signs included) through
:data:`GESDD_SYMBOL` the same way.
"""

from __future__ import annotations

import ctypes
import functools
import importlib

#: The global (an ``i8*``) a module reads the ``dgemm`` address from.
SYMBOL = "tapejit.dgemm"

#: Products with at least this many multiply-adds (m k n) call BLAS: below it the generated
#: i-k-j loops are as fast or faster (measured single-threaded against OpenBLAS: 0.67x its time
#: at 64^3, 1.25x at 128^3, 1.9x at 256^3).
MIN_MULTIPLY_ADDS = 96**3


#: The global (an ``i8*``) a module reads the ``dsyevd`` address from.
SYEVD_SYMBOL = "tapejit.dsyevd"

#: The global (an ``i8*``) a module reads the ``dgesdd`` address from.
GESDD_SYMBOL = "tapejit.dgesdd"

#: The globals the factorisation ops (:mod:`tapejit.codegen.lower.factor`) read LAPACK's
#: ``dpotrf`` (Cholesky), ``dgetrf`` (LU with partial pivoting) and BLAS's ``dtrsm``
#: (triangular solves) from.
POTRF_SYMBOL = "tapejit.dpotrf"
GETRF_SYMBOL = "tapejit.dgetrf"
TRSM_SYMBOL = "tapejit.dtrsm"

#: Every routine a module may call through a global: (global, scipy module, routine).
ROUTINES = (
    (SYMBOL, "cython_blas", "dgemm"),
    (SYEVD_SYMBOL, "cython_lapack", "dsyevd"),
    (GESDD_SYMBOL, "cython_lapack", "dgesdd"),
    (POTRF_SYMBOL, "cython_lapack", "dpotrf"),
    (GETRF_SYMBOL, "cython_lapack", "dgetrf"),
    (TRSM_SYMBOL, "cython_blas", "dtrsm"),
)


@functools.cache
def dgemm_address() -> int | None:
    """The address of scipy's BLAS ``dgemm`` (Fortran calling convention), or ``None``."""
    return _address("cython_blas", "dgemm")


@functools.cache
def dsyevd_address() -> int | None:
    """The address of scipy's LAPACK ``dsyevd`` (Fortran calling convention), or ``None``."""
    return _address("cython_lapack", "dsyevd")


@functools.cache
def dgesdd_address() -> int | None:
    """The address of scipy's LAPACK ``dgesdd`` (Fortran calling convention), or ``None``."""
    return _address("cython_lapack", "dgesdd")


@functools.cache
def routine_address(module: str, name: str) -> int | None:
    """The address of scipy's ``scipy.linalg.<module>.<name>`` (Fortran calling convention),
    or ``None``."""
    return _address(module, name)


def lapack_available() -> bool:
    """Whether generated code can call LAPACK's ``dsyevd`` on this host (scipy installed)."""
    return dsyevd_address() is not None


def _address(module: str, name: str) -> int | None:
    try:
        lib = importlib.import_module(f"scipy.linalg.{module}")
    except ImportError:
        return None
    capsule = lib.__pyx_capi__.get(name)
    if capsule is None:
        return None
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return get_pointer(capsule, get_name(capsule)) or None


def bind(global_address) -> bool:
    """Point each global of :data:`ROUTINES` a loaded library has at its routine
    (``global_address(name)`` finds a global or raises ``KeyError``); returns whether any was
    set."""
    done = False
    for symbol, module, routine in ROUTINES:
        try:
            where = global_address(symbol)
        except KeyError:
            continue
        own = globals().get(f"{routine}_address")  # (a test may replace one of those)
        target = own() if own is not None else routine_address(module, routine)
        if target is not None:
            ctypes.c_void_p.from_address(where).value = target
            done = True
    return done
