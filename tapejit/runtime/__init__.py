"""The runtime: what happens between a Python call and the native code.

==================  =============================================================================
module              owns
==================  =============================================================================
``options``         the options of :func:`tapejit.compile`, validated once; the on-disk cache
                    they select; dynamic-length capacities
``signature``       the calling convention of one compiled gradient and the validation of every
                    call form (single call, ``out=``, batch) into pointers native code may use
``variant``         one compiled specialisation: tracing + the pipeline + binding its native
                    entries (cffi, the fast-call trampoline, the batch entry), workspaces
``dispatch``        the specialisation cache of one function: guard failures, recompiles,
                    dynamic capacity growth, ``max_steps`` reporting, the compile lock
``function``        :class:`GradientFunction`, the public object over a dispatcher
==================  =============================================================================

The pipeline itself (trace -> ... -> machine code) is :mod:`tapejit.pipeline`; the cache-entry
codec lives with the cache in :mod:`tapejit.codegen.cache`.

May import: ``tapejit.core``, ``tapejit.ad``, ``tapejit.frontend``, ``tapejit.passes``,
``tapejit.codegen``, ``tapejit.transforms``, ``tapejit.pipeline`` (everything but the public
API and the tools).
"""
