"""Lowering a planned program to LLVM IR.

``lowering`` is the registry — the tables :data:`EMIT` (elementwise ops), :data:`LOWER` (op
groups) and :data:`INDEX_OPS`, and the :class:`Lowering` object the rules work on — and imports
no family. The families import it and register their rows: ``arrays`` (elementwise, leaf,
reduce, shape, gathers and scatters), ``linalg`` (matrix products and LAPACK calls), ``factor``
(Cholesky, LU and triangular solves), ``table``
(gathers and scatters through index tables), ``window`` (sliding windows), ``control`` (loop
nodes). The machinery around the rules: ``base`` (LLVM types), ``chunks`` (registers, spill
slots, straight-line chunks), ``kernels`` (fused loops, kernel interfaces and functions),
``calls`` (kernel dedup and call tapes), ``guards``, and ``driver`` (the program walk, the entry
function, :func:`lower`). This package imports the registry, then every family once; code that
lowers imports the package (``from tapejit.codegen.lower import lower``).

May import: ``tapejit.core``, ``tapejit.codegen``.
"""

from .lowering import EMIT, INDEX_OPS, LOWER, Lowering, gather_affine
from . import arrays, control, linalg, factor, table, window  # noqa: F401, I001  (they register their rows)
from .driver import ProgramLowering, counters_symbol, lower  # noqa: E402

__all__ = ["EMIT", "INDEX_OPS", "LOWER", "Lowering", "ProgramLowering", "counters_symbol",
           "gather_affine", "lower"]  # fmt: skip
