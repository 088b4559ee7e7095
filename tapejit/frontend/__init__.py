"""The front end: from a user's Python function to a trace graph. ``tracing`` (the trace entry
point) on the tracer, split by concern: ``errors`` (errors and the user's line), ``trace_state``
(the trace in progress, guards), ``registry`` (the tables and hooks the tracer calls),
``tracer`` (the traced value and the builders of ops; ``array_methods`` its ndarray methods),
``indexing`` (basic indexing and writes); ``views`` (numpy's view semantics for writes),
``control`` (structured loops: fori_loop, scan, while_loop), ``dynamic_index`` (indices at
traced positions), ``custom`` (hand-given derivative rules), ``nested`` (a gradient inside a
traced function); the numpy/scipy surface in ``frontend.numpy`` and reading Python loops from
source in ``frontend.loops``.

The tracer imports none of the modules built on it: they register into ``registry`` when this
package imports them, once, below.

May import: ``tapejit.core``, ``tapejit.ad``, ``tapejit.passes`` (loop capture re-rolls what it
traced), ``tapejit.progress``.
"""

from . import tracing  # noqa: F401  (the entry point, and the tracer below it)
from . import indexing  # noqa: F401  (registers basic indexing and writes)
from .numpy import array_api, np_assemble, np_index, numpy_api  # noqa: F401  (the numpy surface)
