"""The LLVM types every lowering module shares, and row-major stride arithmetic on constant
shapes. Imports nothing of the lowering (every other module of :mod:`tapejit.codegen.lower` may
import it)."""

from __future__ import annotations

import math

import llvmlite.ir as ir

F64 = ir.DoubleType()
I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
I8P = I8.as_pointer()
ELEM = {"f64": F64, "bool": I8}
ELEM_REG = {"f64": F64, "bool": I1}  # a scalar in a register


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))


def _i64(v: int | ir.Value) -> ir.Value:
    return I64(v) if isinstance(v, int) else v

