"""tapejit's back end (installed as ``tapejit.codegen``; the source lives in the repository's
top-level ``codegen/`` folder): lowering of a :class:`tapejit.core.program.Program` to LLVM IR, the
vectorisable math library, the host target, the JIT code library, the on-disk object cache and
the native entry points Python calls. It imports only :mod:`tapejit.core.ir` and :mod:`tapejit.core.ops`
of the front end."""
