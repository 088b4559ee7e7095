"""The numpy and scipy surface of traced values: ufuncs and functions (``numpy_api`` and the
``np_*`` modules it assembles), ``numpy.linalg`` (``numpy_linalg``), ``scipy.special``
(``np_special``, ``np_normal``, ``np_gamma``), ``scipy.stats`` log-densities (``scipy_stats``) and the array API namespace
scipy's own functions use (``array_api``).

May import: ``tapejit.core``, ``tapejit.frontend`` (the tracer).
"""
