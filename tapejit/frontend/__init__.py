"""The front end: from a user's Python function to a trace graph. ``tracing`` (tracers, guards,
the trace entry point), ``views`` (numpy's view semantics for writes), ``control`` (structured
loops: fori_loop, scan, while_loop), ``dynamic_index`` (indices at traced positions),
``custom`` (hand-given derivative rules), ``nested`` (a gradient inside a traced function); the
numpy/scipy surface in ``frontend.numpy`` and reading Python loops from source in
``frontend.loops``.

May import: ``tapejit.core``, ``tapejit.ad``, ``tapejit.passes`` (loop capture re-rolls what it
traced), ``tapejit.progress``.
"""
