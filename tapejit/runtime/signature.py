"""What a compiled gradient accepts and returns, and the validation of every call form.

A :class:`Signature` is built from the shapes the gradient was compiled for. It checks the
arguments and outputs of a single call (:meth:`Signature.pointers`) and of a batch
(:meth:`Signature.batch_pointers`) with the same rules and the same messages, and hands back cffi
pointers that native code may use: generated code only ever sees validated pointers. Every
failure is a ``TypeError`` (count, type, dtype) or ``ValueError`` (shape, layout, overlap) that
names the function, the argument, what was expected and what was given.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..codegen.entry import ffi
from ..frontend.tracing import masked_array_error

F64 = np.dtype(np.float64)
_BIG = 2**53  # 64-bit integers convert to float64 exactly only up to here in magnitude


def _dims(shape: tuple[int, ...]) -> str:
    return ", ".join(map(str, shape)) if shape else ""


class Signature:
    """The calling convention of one compiled gradient.

    ``shapes``: the runtime arguments' shapes (float64); ``argnums``: the differentiated
    arguments; ``tuple_result``: the results come back as a tuple; ``dynamic``: position ->
    capacity of arguments whose leading axis may vary up to the capacity (a hidden length input
    follows the arguments for each); ``out_shapes``: the results' shapes (default: the
    gradients', ``shapes[i]`` for ``i`` in ``argnums``), kept as ``grad_shapes``.
    """

    def __init__(
        self,
        name: str,
        shapes: tuple[tuple[int, ...], ...],
        argnums: tuple[int, ...],
        tuple_result: bool,
        dynamic: dict[int, int],
        out_shapes: tuple[tuple[int, ...], ...] | None = None,
    ):
        self.name = name
        self.shapes = shapes
        self.argnums = argnums
        self.grad_shapes = (
            tuple(shapes[i] for i in argnums) if out_shapes is None else tuple(out_shapes)
        )
        self.tuple_result = tuple_result
        self.dynamic = dynamic

    # -- a single call --------------------------------------------------------------------------
    def too_long(self, args: tuple) -> bool:
        """Whether a dynamic-length argument has more rows than the capacity compiled for."""
        if len(args) != len(self.shapes):
            return False
        return any(np.ndim(args[i]) and np.shape(args[i])[0] > c for i, c in self.dynamic.items())

    def outs(self, out: Any) -> Any:
        """``out`` as the tuple of output arrays the call writes (not yet checked)."""
        return out if self.tuple_result else (out,)

    def new_outs(self) -> tuple[np.ndarray, ...]:
        return tuple(np.empty(s) for s in self.grad_shapes)

    def result(self, outs: tuple[np.ndarray, ...]) -> Any:
        """The gradient as the caller gets it: floats for scalar arguments, a tuple or not."""
        result = tuple(float(o) if o.shape == () else o for o in outs)
        return result if self.tuple_result else result[0]

    def pointers(self, args: tuple, outs: Any) -> list:
        """Check every argument and output array; returns ``[input pointers (then one hidden
        length per dynamic argument), output pointers]``."""
        if len(args) != len(self.shapes):
            raise TypeError(
                f"{self.name}: the compiled gradient takes {len(self.shapes)} argument(s), "
                f"got {len(args)}"
            )
        ptrs = [self.arg_pointer(i, a) for i, a in enumerate(args)]
        for i in sorted(self.dynamic):  # the hidden length inputs
            ptrs.append(ffi.from_buffer(np.array(float(np.shape(args[i])[0]))))
        if not isinstance(outs, tuple) or len(outs) != len(self.grad_shapes):
            raise TypeError(
                f"{self.name}: out must be a tuple of {len(self.grad_shapes)} arrays "
                "(one per result: per entry of argnums, for a gradient)"
            )
        out_ptrs = [
            self.out_pointer(self._out_name("", k), o, s, args)
            for k, (o, s) in enumerate(zip(outs, self.grad_shapes))
        ]
        self._distinct(outs, "")
        return [ptrs, out_ptrs]

    def same_call(self, args: tuple, outs: tuple, last: tuple) -> bool:
        """Whether ``args``/``outs`` are the objects of the validated call ``last`` — ``(args,
        outs, pointers, the arguments' shapes then)`` — and still valid (only what can change in
        place is re-checked: shape, dtype, layout, writeable)."""
        if len(args) != len(last[0]) or len(outs) != len(last[1]):
            return False
        for a, b, shape in zip(args, last[0], last[3]):
            if a is not b:
                return False
            if type(a) is np.ndarray and not (
                a.shape == shape and a.dtype == F64 and a.flags.c_contiguous
            ):
                return False
        for o, b, shape in zip(outs, last[1], self.grad_shapes):
            if o is not b or not (o.shape == shape and o.dtype == F64 and o.flags.writeable):
                return False
            if not o.flags.c_contiguous:
                return False
        return True

    def arg_pointer(self, i: int, a: Any):
        """A pointer to argument ``i`` as float64 (converted when it converts exactly)."""
        shape = self.shapes[i]
        if i in self.dynamic:  # any number of rows up to the capacity (checked by too_long)
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
        what = f"{self.name}: argument {i}"
        if type(a) is np.ndarray:
            if a.dtype != F64:
                self._check_dtype(what, a)
                if a.shape != shape:
                    raise ValueError(f"{what} must have shape {shape}, got {a.shape}")
                return ffi.from_buffer(self._converted(what, a))
            if a.shape != shape:
                raise ValueError(f"{what} must have shape {shape}, got {a.shape}")
            if not a.flags.c_contiguous:
                raise ValueError(f"{what} must be C-contiguous; pass np.ascontiguousarray(x)")
            if not a.flags.aligned:  # generated code assumes 8-byte aligned doubles
                a = a.copy()
            return ffi.from_buffer(a, require_writable=False)
        if isinstance(a, (float, int, np.floating, np.integer)) and not isinstance(
            a, (bool, np.bool_)
        ):
            if shape != ():
                raise ValueError(f"{what} must be an array of shape {shape}, got a scalar")
            if isinstance(a, (int, np.integer)) and abs(int(a)) > _BIG:
                raise ValueError(
                    f"{what} is the integer {int(a)}, which float64 cannot "
                    "represent exactly (|v| > 2**53); pass a float if rounding is intended"
                )
            return ffi.from_buffer(np.array(float(a)))
        if isinstance(a, np.ma.MaskedArray):
            raise masked_array_error(what)
        if isinstance(a, np.ndarray):  # an ndarray subclass: view it as a plain array
            return self.arg_pointer(i, np.asarray(a))
        raise TypeError(
            f"{what} must be a float64 array of shape {shape}, got {type(a).__name__}"
        )

    @staticmethod
    def _check_dtype(what: str, a: np.ndarray) -> None:
        if a.dtype == np.bool_ or not np.can_cast(a.dtype, F64, "safe"):
            raise TypeError(f"{what} must be float64 (or convert to it exactly), got dtype {a.dtype}")

    @staticmethod
    def _converted(what: str, a: np.ndarray) -> np.ndarray:
        """``a`` (a real dtype that converts safely) as a C-contiguous float64 copy."""
        if a.dtype.kind in "iu" and a.dtype.itemsize > 4 and a.size:
            big = a > _BIG if a.dtype.kind == "u" else (a > _BIG) | (a < -_BIG)
            if big.any():
                raise ValueError(
                    f"{what} has {a.dtype} values that float64 cannot "
                    "represent exactly (|v| > 2**53); convert it yourself if rounding is intended"
                )
        return np.ascontiguousarray(a, dtype=F64)

    def out_pointer(self, what: str, o: Any, shape: tuple[int, ...], args: Sequence[Any]):
        """Validate an output array; returns a writeable cffi pointer to it."""
        if type(o) is not np.ndarray:
            raise TypeError(f"{what} must be a numpy float64 array, got {type(o).__name__}")
        if o.dtype != F64:
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
        return ffi.from_buffer(o, require_writable=True)

    def _out_name(self, prefix: str, k: int) -> str:
        return f"{self.name}{prefix}: out" + (f"[{k}]" if self.tuple_result else "")

    def _distinct(self, outs: tuple, prefix: str) -> None:
        for i in range(len(outs)):
            for j in range(i):
                if np.may_share_memory(outs[i], outs[j]):
                    raise ValueError(f"{self.name}{prefix}: the arrays in out overlap each other")

    # -- a batch ----------------------------------------------------------------------------------
    def batch_pointers(self, args: tuple, out: Any, values: np.ndarray | None) -> tuple:
        """Check a batch: every runtime argument with a leading axis of one length ``m``.
        Returns ``(m, arrays, outs, values, input pointers, output pointers, value pointer)``;
        ``outs``/``values`` are new arrays when not given."""
        pre = ".batch"
        if len(args) != len(self.shapes):
            raise TypeError(
                f"{self.name}{pre}: the compiled gradient takes {len(self.shapes)} batched "
                f"argument(s), got {len(args)}"
            )
        m, arrays = None, []
        for i, (a, shape) in enumerate(zip(args, self.shapes)):
            what = f"{self.name}{pre}: argument {i}"
            if not isinstance(a, np.ndarray):
                raise TypeError(
                    f"{what} must be a float64 array of shape (m, {_dims(shape)}), "
                    f"got {type(a).__name__}"
                )
            if a.dtype != F64:
                self._check_dtype(what, a)
                a = a.astype(F64)
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
            outs = tuple(np.empty((m, *s)) for s in self.grad_shapes)
        else:
            outs = self.outs(out)
            if not isinstance(outs, tuple) or len(outs) != len(self.grad_shapes):
                raise TypeError(
                    f"{self.name}{pre}: out must be a tuple of {len(self.grad_shapes)} arrays"
                )
        out_ptrs = [
            self.out_pointer(self._out_name(pre, k), o, (m, *s), arrays)
            for k, (o, s) in enumerate(zip(outs, self.grad_shapes))
        ]
        self._distinct(outs, pre)
        if values is None:
            values = np.empty(m)
        else:
            self.out_pointer(f"{self.name}{pre}: values", values, (m,), arrays + list(outs))
        in_ptrs = [ffi.from_buffer(a, require_writable=False) for a in arrays]
        vptr = ffi.from_buffer(values, require_writable=True)
        return m, arrays, outs, values, in_ptrs, out_ptrs, vptr
