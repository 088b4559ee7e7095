"""Re-rolling: repeated iterations of an element loop that was traced element by element become
one loop node again. ``driver`` runs the pass (and documents it); ``chains`` finds the carries
and their periods; ``match`` walks iterations against a template and ``runs`` turns the walks
into runs; ``build`` builds a run's loop or sum; ``flat``, ``ragged``, ``sums``, ``guards`` and
``history`` handle rows of one layout, rows of growing length, sums of iterations, guards per
iteration and iterations that read earlier ones; ``common`` holds what they all share (it
imports nothing of the pass; nothing but ``driver`` imports ``driver``). The fallback for
functions whose loops could not be read from source.

May import: ``tapejit.core``, ``tapejit.ad``, ``tapejit.progress``.
"""
