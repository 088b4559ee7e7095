"""Automatic differentiation on the IR: reverse mode with activity analysis (``autodiff``) and
forward mode (``forward``), each a sweep over a graph with the core's rule tables.

May import: ``tapejit.core``.
"""
