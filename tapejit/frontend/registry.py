"""The tables the tracer looks numpy names up in, and the hooks it calls into the modules built on
it. The tracer (:mod:`~tapejit.frontend.tracer`) and the trace entry point
(:mod:`~tapejit.frontend.tracing`) read them at call time; the modules above them fill them when
the package imports them once (``tapejit/frontend/__init__.py``), so the tracer imports none of
them (JAX's ``ad.primitive_jvps``: the rule's module registers, the core never imports it).

=======================  ==========================================  ============================
table / hook             what the tracer asks it                     filled by
=======================  ==========================================  ============================
``UFUNCS``               numpy ufunc name -> implementation          ``numpy.numpy_api``
``FUNCTIONS``            numpy function -> implementation            ``numpy.numpy_api``
``UFUNC_METHODS``        (ufunc name, method) -> implementation      ``numpy.numpy_api``
``getitem``              ``x[key]``, basic indexing (``key`` ints,   ``indexing``
                         slices, ``...``, or a traced position)
``setitem``              ``y[key] = v`` with a basic key             ``indexing``
``inplace``              ``y op= o`` (numpy writes into ``y``)       ``indexing``
``advanced_getitem``     ``x[idx]``, integer arrays and masks        ``numpy.np_index``
``advanced_setitem``     ``y[idx] = v``                              ``numpy.np_index``
``object_elements``      ``np.array([x, y])``: a traced array as an  ``numpy.np_assemble``
                         object array of its elements
``from_objects``         such an object array as one traced array    ``numpy.np_assemble``
``shared_with_numpy``    where an array was passed to ``np.asarray`` ``numpy.np_assemble``
``array_namespace``      ``x.__array_namespace__()``                 ``numpy.array_api``
``scipy_array_api``      the context in which ``f`` is traced        ``numpy.array_api``
                         (scipy's array-API mode on)
=======================  ==========================================  ============================

A hook nobody registered raises :class:`TracingError` naming it (the package was imported
without its ``__init__``, or a module stopped registering).
"""

from __future__ import annotations

from typing import Any, Callable

from .errors import TracingError

#: numpy ufunc names (``np.sin.__name__``) -> their traced implementations
UFUNCS: dict[str, Callable[..., Any]] = {}

#: numpy functions (``np.sum``) -> their traced implementations
FUNCTIONS: dict[Callable, Callable[..., Any]] = {}

#: numpy ufunc methods other than ``__call__``: (ufunc name, method) -> implementation
UFUNC_METHODS: dict[tuple[str, str], Callable[..., Any]] = {}


class Hooks(dict):
    """Functions the tracer calls by name that a module above it registers (``HOOKS[name] =
    fn``); a name nobody registered raises naming it and who fills it."""

    def __missing__(self, name: str):
        raise TracingError(
            f"internal: the tracer's hook {name!r} is not registered (see "
            "tapejit/frontend/registry.py: import tapejit.frontend, whose __init__ imports the "
            "modules that fill it)"
        )


HOOKS = Hooks()
