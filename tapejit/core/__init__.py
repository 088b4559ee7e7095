"""The IR core: types and hash-consed nodes (``ir``), the op registry with the primitives' shape,
reference, VJP and JVP rules (``ops``) and its families (``ops_loop``: loop nodes; ``ops_table``:
gathers and scatters through index tables; ``ops_window``: sliding windows; ``ops_linalg``: matrix
primitives), and the interpreter (``interpret``, the oracle every pass is tested against).

May import: nothing else of tapejit. The transformations register the rules that need them (a
loop's JVP) into the core's tables from ``tapejit.ad``.
"""
