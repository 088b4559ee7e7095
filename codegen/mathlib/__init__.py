"""The math library in LLVM IR: branch-free, vectorisable polynomial kernels for the
transcendental functions, one row per op with its accuracy domain and ulp bound. ``core`` holds
the table and exp/log-style building blocks; ``hyp``, ``log`` and ``trig`` the families.

May import: ``tapejit.core``, ``tapejit.codegen``.
"""
