"""Python loops read from the function's source: ``source_code`` finds and parses it,
``loop_source`` rewrites loops over ranges and rows into captured loops (``loop_scopes``,
``loop_skips``: the analyses it needs), ``loop_capture`` runs them while tracing (a few
iterations traced, the rest built).

May import: ``tapejit.core``, ``tapejit.frontend``, ``tapejit.passes``, ``tapejit.progress``.
"""
