"""Lowering of transcendental functions: the one table of math implementations.

Each entry maps an op name to how its scalar double result is produced. For now these are LLVM
intrinsics (``llvm.exp.f64`` ...) or libm calls, which LLVM cannot vectorise on this target
(llvmlite ships no vector math library; see DESIGN.md). Vectorisable polynomial implementations
replace these rows later without touching the lowering.
"""

from __future__ import annotations

import llvmlite.ir as ir

F64 = ir.DoubleType()

#: op -> ("intrinsic" | "libm", symbol)
MATH: dict[str, tuple[str, str]] = {
    "exp": ("intrinsic", "llvm.exp"),
    "log": ("intrinsic", "llvm.log"),
    "sin": ("intrinsic", "llvm.sin"),
    "cos": ("intrinsic", "llvm.cos"),
    "sqrt": ("intrinsic", "llvm.sqrt"),
    "abs": ("intrinsic", "llvm.fabs"),
    "pow": ("intrinsic", "llvm.pow"),
    "maximum": ("intrinsic", "llvm.maximum"),
    "minimum": ("intrinsic", "llvm.minimum"),
    "log1p": ("libm", "log1p"),
    "expm1": ("libm", "expm1"),
    "tanh": ("libm", "tanh"),
}


def call(builder: ir.IRBuilder, op: str, args: list[ir.Value], inline: bool = True) -> ir.Value:
    """Emit ``op(*args)`` on doubles using the row of :data:`MATH`."""
    kind, name = MATH[op]
    module = builder.module
    if kind == "intrinsic":
        fn = module.declare_intrinsic(name, [F64], ir.FunctionType(F64, [F64] * len(args)))
    else:
        fn = module.globals.get(name)
        if fn is None:
            fn = ir.Function(module, ir.FunctionType(F64, [F64] * len(args)), name)
    return builder.call(fn, args)
