"""Automatic differentiation on the IR: reverse mode with activity analysis (``autodiff``) and
forward mode (``forward``), each a sweep over a graph with the core's rule tables. A rule that
needs a transformation is registered from here into the core's table: ``forward`` gives the
``loop`` primitive its JVP rule (it differentiates the body) when it is imported, which this
package does, so every path to forward mode has it.

May import: ``tapejit.core``.
"""

from . import autodiff, forward  # noqa: F401  (forward registers the loop's JVP rule)
