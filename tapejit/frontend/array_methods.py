"""The ndarray surface of a tracer that the numpy surface defines: :class:`ArrayMethods`, the
base class of :class:`~tapejit.frontend.tracer.Tracer` holding the ndarray methods that are numpy
functions (``x.sum()`` is ``np.sum(x)``), the operators numpy defines (``%``, ``round``,
``floor``, ``@`` from the left, the in-place operators) and the numpy protocols
(``__array_ufunc__``, ``__array_function__``, ``__array_namespace__``). Each looks its
implementation up in :mod:`~tapejit.frontend.registry` when called (JAX's ``array_methods``:
the array type names the methods, the numpy layer defines them); none builds an op itself.
"""

from __future__ import annotations

import functools

import numpy as np

from ..core.ops import Op
from .errors import _UnsupportedAttribute, _fail, _user_site
from .registry import FUNCTIONS, HOOKS, UFUNCS, UFUNC_METHODS
from .trace_state import _conversion_error


class ArrayMethods:
    """The methods of a traced array that the numpy surface implements (see the module
    docstring)."""

    __slots__ = ()

    def __mod__(self, o):
        return UFUNCS["remainder"](self, o)

    def __rmod__(self, o):
        return UFUNCS["remainder"](o, self)

    def __round__(self, ndigits=None):
        if ndigits is None:  # round(x) is an int: a guarded conversion, as int()
            return int(FUNCTIONS[np.round](self).__index__())
        return FUNCTIONS[np.round](self, ndigits)

    def __floor__(self):
        return int(UFUNCS["floor"](self).__index__())

    def __ceil__(self):
        return int(UFUNCS["ceil"](self).__index__())

    def __rmatmul__(self, o):
        return FUNCTIONS[np.matmul](o, self)

    # numpy's in-place operators modify the array object (every alias and view sees it); a
    # traced scalar is a numpy scalar, immutable, so for it Python falls back to ``x = x + y``
    def __iadd__(self, o):
        return HOOKS["inplace"](self, Op.ADD, o)

    def __isub__(self, o):
        return HOOKS["inplace"](self, Op.SUB, o)

    def __imul__(self, o):
        return HOOKS["inplace"](self, Op.MUL, o)

    def __itruediv__(self, o):
        return HOOKS["inplace"](self, Op.DIV, o)

    def __ipow__(self, o):
        return HOOKS["inplace"](self, Op.POW, o)

    def __getattr__(self, name):
        # Only reached when normal lookup fails: name ndarray methods tapejit does not trace
        # instead of a bare "'Tracer' object has no attribute" with no file and line.
        fn = None if name.startswith("_") else UFUNCS.get(name)
        if fn is not None and not hasattr(np.ndarray, name):
            # numpy's ufunc loops over object arrays call a method of the ufunc's name
            return functools.partial(fn, self)
        if not name.startswith("_") and hasattr(np.ndarray, name):
            raise _UnsupportedAttribute(
                f"{_user_site()}: numpy.ndarray.{name} is not supported by tapejit"
            )
        raise AttributeError(f"'Tracer' object has no attribute {name!r}")

    # -- the array API standard (scipy's array-API mode, see tapejit.frontend.numpy.array_api) -------------
    device = property(lambda self: "cpu")

    def __array_namespace__(self, api_version=None):
        return HOOKS["array_namespace"]

    def sum(self, axis=None, dtype=None, out=None, keepdims=False, **kw):
        return FUNCTIONS[np.sum](self, axis, dtype, out, keepdims, **kw)

    def max(self, axis=None, out=None, keepdims=False, **kw):
        return FUNCTIONS[np.max](self, axis, out, keepdims, **kw)

    def min(self, axis=None, out=None, keepdims=False, **kw):
        return FUNCTIONS[np.min](self, axis, out, keepdims, **kw)

    def mean(self, axis=None, dtype=None, out=None, keepdims=False, **kw):
        return FUNCTIONS[np.mean](self, axis, dtype, out, keepdims, **kw)

    def dot(self, o):
        return FUNCTIONS[np.dot](self, o)

    # ndarray methods that are numpy functions (the numpy surface defines them)
    def var(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
        return FUNCTIONS[np.var](self, axis, dtype, out, ddof, keepdims)

    def std(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
        return FUNCTIONS[np.std](self, axis, dtype, out, ddof, keepdims)

    def prod(self, axis=None, dtype=None, out=None, keepdims=False):
        return FUNCTIONS[np.prod](self, axis, dtype, out, keepdims)

    def cumsum(self, axis=None, dtype=None, out=None):
        return FUNCTIONS[np.cumsum](self, axis)

    def cumprod(self, axis=None, dtype=None, out=None):
        return FUNCTIONS[np.cumprod](self, axis)

    def diagonal(self, offset=0, axis1=0, axis2=1):
        return FUNCTIONS[np.diagonal](self, offset, axis1, axis2)

    def trace(self, offset=0, axis1=0, axis2=1, dtype=None, out=None):
        return FUNCTIONS[np.trace](self, offset, axis1, axis2, dtype, out)

    def squeeze(self, axis=None):
        return FUNCTIONS[np.squeeze](self, axis)

    def swapaxes(self, axis1, axis2):
        return FUNCTIONS[np.swapaxes](self, axis1, axis2)

    def repeat(self, repeats, axis=None):
        return FUNCTIONS[np.repeat](self, repeats, axis)

    def take(self, indices, axis=None, out=None, mode="raise"):
        return FUNCTIONS[np.take](self, indices, axis, out, mode)

    def sort(self, axis=-1, kind=None, order=None):
        HOOKS["setitem"](self, Ellipsis, FUNCTIONS[np.sort](self, axis))  # in place, as numpy

    def round(self, decimals=0, out=None):
        return FUNCTIONS[np.round](self, decimals, out)

    def clip(self, min=None, max=None, out=None, **kw):
        return FUNCTIONS[np.clip](self, min, max, out)

    def fill(self, value):
        HOOKS["setitem"](self, Ellipsis, value)

    # -- numpy protocols --------------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        name = ufunc.__name__
        if method != "__call__":
            fn = UFUNC_METHODS.get((name, method))
            if fn is None:
                raise _fail(f"numpy.{name}.{method} is not supported by tapejit")
            return fn(*inputs, **kwargs)
        if kwargs.get("out") is not None:
            if any(isinstance(o, np.ndarray) for o in kwargs["out"]):
                # a += t on a numpy array a: numpy would store the traced result in a
                raise _conversion_error(f"numpy.{name} with out= a numpy array", self)
            raise _fail(f"numpy.{name} with out= is not supported by tapejit; write y = ...")
        if kwargs.get("where", True) is not True:
            raise _fail(f"numpy.{name} with where= is not supported by tapejit")
        fn = UFUNCS.get(name)
        if fn is None:
            raise _fail(f"numpy.{name} is not supported by tapejit")
        return fn(*inputs)

    def __array_function__(self, func, types, args, kwargs):
        fn = FUNCTIONS.get(func)
        if fn is None:
            module = getattr(func, "__module__", None) or ""
            prefix = module if module.startswith("numpy.") else "numpy"  # numpy.linalg.inv
            raise _fail(f"{prefix}.{func.__name__} is not supported by tapejit")
        return fn(*args, **kwargs)

