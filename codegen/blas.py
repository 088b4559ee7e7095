"""The host's BLAS for large matrix products: ``dgemm`` from the BLAS scipy ships
(``scipy.linalg.cython_blas``), called by generated code through a function pointer.

:func:`tapejit.codegen.lower` emits, for a matrix product of at least :data:`MIN_MULTIPLY_ADDS`
multiply-adds, a call through the global :data:`SYMBOL` when it is set and its own loops when it
is null; :func:`bind` sets it in a loaded code library. Without scipy (an optional dependency),
and in exported object files, the pointer stays null and the loops run. ``dgemm`` allocates no
memory per call once the BLAS library is initialised.
"""

from __future__ import annotations

import ctypes
import functools

#: The global (an ``i8*``) a module reads the ``dgemm`` address from.
SYMBOL = "tapejit.dgemm"

#: Products with at least this many multiply-adds (m k n) call BLAS: below it the generated
#: i-k-j loops are as fast or faster (measured single-threaded against OpenBLAS: 0.67x its time
#: at 64^3, 1.25x at 128^3, 1.9x at 256^3).
MIN_MULTIPLY_ADDS = 96**3


@functools.cache
def dgemm_address() -> int | None:
    """The address of scipy's BLAS ``dgemm`` (Fortran calling convention), or ``None``."""
    try:
        from scipy.linalg import cython_blas
    except ImportError:
        return None
    capsule = cython_blas.__pyx_capi__.get("dgemm")
    if capsule is None:
        return None
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return get_pointer(capsule, get_name(capsule)) or None


def bind(global_address) -> bool:
    """Point a loaded library's :data:`SYMBOL` at ``dgemm`` (``global_address(name)`` finds a
    global or raises ``KeyError``); returns whether it was set."""
    try:
        where = global_address(SYMBOL)
    except KeyError:
        return False
    address = dgemm_address()
    if address is None:
        return False
    ctypes.c_void_p.from_address(where).value = address
    return True
