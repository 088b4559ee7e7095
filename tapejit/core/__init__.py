"""The IR core: types and hash-consed nodes (``ir``), the op registry (``ops``: the table of
primitives, their builders, the group tuples; it re-exports the op names of ``opcodes``, the
shape arithmetic of ``typerules`` and the loop description of ``loop_spec``), the op families
that fill it (``ops_elementwise``, ``ops_reduce``, ``ops_shape``, ``ops_table``: gathers and
scatters through index tables, ``ops_window``: sliding windows, ``ops_linalg``: matrix
primitives, ``ops_factor``: factorisations and solves, ``ops_loop``: loop nodes), and the interpreter (``interpret``, the oracle every pass
is tested against).

The registry never imports its families: this package imports each once, after ``ops``, and then
seals the registry (:func:`tapejit.core.ops.seal`: every op has its block; the groups are
computed).

May import: nothing else of tapejit. The transformations register the rules that need them (a
loop's JVP) into the core's tables from ``tapejit.ad``.
"""

from . import ops
from . import (  # noqa: F401  (each registers its ops' blocks into ops.OPS; in the order of ops.Op)
    ops_elementwise,
    ops_reduce,
    ops_shape,
    ops_table,
    ops_window,
    ops_linalg,
    ops_factor,
    ops_loop,
)

ops.seal()
