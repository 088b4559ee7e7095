"""Control flow converted from the source, before tracing (AutoGraph's approach).

A traced function's ``for`` loops and ``if`` statements are rewritten from its source into calls
of the operators of :mod:`~tapejit.frontend.convert.runtime`, which decide *while tracing* what
each statement becomes: a ``for`` loop over a range, the rows of an array or an index table
becomes one IR loop whose body is traced once, with a symbolic index; an ``if`` on a traced
value whose branches only assign becomes a select of both branches' values (if-conversion),
with a masked adjoint. Where the operands are plain Python values, or a loop or branch cannot
be converted, the statement runs exactly as written.

* :mod:`~tapejit.frontend.convert.liveness` — which names each statement's successors read
  (the carries of a loop and the outputs of a branch are the names it assigns that are live);
* :mod:`~tapejit.frontend.convert.exits` — ``continue`` and ``break`` rewritten into
  branches on a flag first (a loop left on a traced condition compiles once);
* :mod:`~tapejit.frontend.convert.transform` — the AST rewrite (which statements are
  convertible, and the functions and calls they become);
* :mod:`~tapejit.frontend.convert.runtime` — the operators the rewritten code calls, by name:
  :mod:`~tapejit.frontend.convert.loops` (loops), :mod:`~tapejit.frontend.convert.branches`
  (branches), :mod:`~tapejit.frontend.convert.common` (what they share, and the record of what
  was converted);
* :mod:`~tapejit.frontend.convert.purity` — whether a body reads only values whose use runs
  no user code with side effects (else it runs as written).

The rewrite is applied by :func:`tapejit.frontend.loops.loop_source.rewrite`, after the
capture of innermost affine loops, which keeps the loops it owns; ``purity`` decides which
bodies may run once for many iterations.

May import: ``tapejit.core``, ``tapejit.frontend``.
"""
