"""Lowering a planned program to LLVM IR: ``driver`` (the Lowering object, the row table per op,
kernels, loops, the entry function) and the families of ops that register their rows into its
table: ``linalg`` (matrix products and LAPACK calls), ``table`` (gathers and scatters through
index tables), ``window`` (sliding windows).

May import: ``tapejit.core``, ``tapejit.codegen``.
"""
