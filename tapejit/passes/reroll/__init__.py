"""Re-rolling: repeated iterations of an element loop that was traced element by element become
one loop node again. ``driver`` finds the runs and builds the loops; ``match`` tells which
iterations are alike; ``flat``, ``ragged``, ``sums``, ``guards`` and ``history`` handle rows of
one layout, rows of growing length, sums of iterations, guards per iteration and iterations that
read earlier ones. The fallback for functions whose loops could not be read from source.

May import: ``tapejit.core``, ``tapejit.ad``, ``tapejit.progress``.
"""
