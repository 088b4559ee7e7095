"""The native entry point as Python calls it: a cffi function pointer with a fixed signature.

C signature of every compiled gradient (see :mod:`codegen.lower`)::

    int32_t f(const double *in0, ..., double *out0, ..., void *workspace);

Returns 0 on success. cffi's ABI mode calls it without compiling anything, and releases the GIL
for the duration of the call.
"""

from __future__ import annotations

import cffi

ffi = cffi.FFI()


def signature(n_inputs: int, n_outputs: int) -> str:
    """The C function-pointer type of an entry with these argument counts."""
    params = ", ".join(["void *"] * (n_inputs + n_outputs + 1))
    return f"int32_t(*)({params})"


def bind(address: int, n_inputs: int, n_outputs: int):
    """A cffi callable for the entry at ``address``. Arguments: cffi pointers or ``ffi.NULL``."""
    return ffi.cast(signature(n_inputs, n_outputs), address)


def bind_batch(address: int, n_pointers: int):
    """A cffi callable for a batched entry (:mod:`codegen.batch`): ``n_pointers`` pointers, then
    the row range ``begin, end`` as int64."""
    params = ", ".join(["void *"] * n_pointers + ["int64_t", "int64_t"])
    return ffi.cast(f"int32_t(*)({params})", address)
