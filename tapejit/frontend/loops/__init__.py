"""Python loops read from the function's source: ``source_code`` finds and parses it,
``loop_check`` decides which loops may be captured (``loop_scopes``, ``loop_skips``: the
analyses it needs; ``loop_purity``: the helpers a body may call), ``loop_source`` rewrites those
loops over ranges and rows into calls of ``loop_capture``, which runs them while tracing (a few
iterations traced, the rest built).

May import: ``tapejit.core``, ``tapejit.frontend``, ``tapejit.passes``, ``tapejit.progress``.
"""
