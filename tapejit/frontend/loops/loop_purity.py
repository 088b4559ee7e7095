"""Pure helpers and inert values, for loop capture: a module-level function a captured body may
call (``e = e + pair(r2)``) must be straight-line code of the capturable form
(:mod:`~tapejit.frontend.loops.loop_check`) whose reads are *inert* values (numbers, numpy
scalars, tracers, tuples and dicts of them), so that every iteration calls it the same way. Also
the names a module binds to numpy and to the built-ins a body may call."""

from __future__ import annotations

import ast
import builtins
import functools
import inspect
import types

import numpy as np

from ..tracer import Tracer
from . import source_code
from .loop_check import _INTROSPECTION, _Loop, _NotCapturable
from .loop_scopes import names as _names


def _fixed_names(g: dict) -> frozenset:
    """The names in module globals ``g`` that are numpy, and the built-ins ``abs`` and
    ``len`` unless the module has its own."""
    out = {k for k, v in g.items() if v is np}
    b = g.get("__builtins__", builtins)
    b = b if isinstance(b, dict) else vars(b)  # the module's built-ins (a module or a dict)
    for name in ("abs", "len"):
        if g.get(name, b.get(name)) is getattr(builtins, name):
            out.add(name)
    return frozenset(out)


#: How deep pure helpers may call pure helpers.
_PURE_DEPTH = 3


def _pure_names(g: dict, code: types.CodeType, depth: int) -> frozenset:
    """Global names ``code`` uses that are *pure helpers* (see :func:`_pure_code`)."""
    if depth <= 0:
        return frozenset()
    out = set()
    for name in code.co_names:
        h = g.get(name)
        if isinstance(h, types.FunctionType) and _is_pure(h, depth):
            out.add(name)
    return frozenset(out)


def pure_helper(h) -> bool:
    """Whether ``h`` is a pure helper now, its globals and defaults included (a captured loop
    asks again when it runs: the function may have changed a module global since)."""
    return isinstance(h, types.FunctionType) and _is_pure(h, _PURE_DEPTH)


def _is_pure(h: types.FunctionType, depth: int) -> bool:
    code = h.__code__
    if code.co_freevars or code.co_flags & (
        inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
        | inspect.CO_VARARGS | inspect.CO_VARKEYWORDS
    ):
        return False
    read = source_code.read(h)
    if read is None:
        return False
    source, imported = read
    pure = _pure_names(h.__globals__, code, depth - 1)
    try:
        reads = _pure_code(code, source, _fixed_names(h.__globals__), imported, pure)
    except (SyntaxError, StopIteration, ValueError):
        return False
    g = h.__globals__
    defaults = [*(h.__defaults__ or ()), *(h.__kwdefaults__ or {}).values()]
    return (reads is not None and all(n in g and inert(g[n]) for n in reads)
            and all(inert(v) for v in defaults))  # fmt: skip


_NUMPY_SCALARS = frozenset(
    t for t in set(np.sctypeDict.values())
    if issubclass(t, (np.floating, np.integer, np.bool_)) and t is not np.timedelta64
)  # the exact types: a subclass may define its own arithmetic


def inert(v, depth: int = 2) -> bool:
    """Whether ``v`` is a value whose arithmetic runs no user code, the same in every call:
    a Python or numpy number, a numeric numpy array (exactly, not a subclass), a traced
    value, or a tuple, list or dict (string or integer keys) of those."""
    t = type(v)
    if t in (int, float, bool, Tracer) or t in _NUMPY_SCALARS:
        return True
    if t is np.ndarray:
        return v.dtype.kind in "biuf"
    if t in (tuple, list) and depth > 0:
        return all(inert(e, depth - 1) for e in v)
    if t is dict and depth > 0:  # a pytree of parameters: p["w"]
        return all(type(k) in (str, int) and inert(e, depth - 1) for k, e in v.items())
    return False


@functools.lru_cache(maxsize=256)
def _pure_code(code: types.CodeType, source: str, modules: frozenset, imported: frozenset,
               pure: frozenset) -> frozenset | None:  # fmt: skip
    """Whether the function of ``code`` (its source ``source``) is a *pure helper*: straight-
    line assignments to its own names and one final ``return``, every expression of the form
    a captured loop body may have (numpy calls, arithmetic, subscripts at indices it computes
    from its arguments and constants, other pure helpers). Called in a captured loop, it
    runs the same code on the same kinds of values in every iteration. Returns the global
    names it reads (their values must be :func:`inert`), or ``None``: not a pure helper."""
    fn = source_code.checked_function(code, source, imported)
    if fn is None:
        return None
    *body, last = fn.body
    if not isinstance(last, ast.Return) or last.value is None:
        return None
    f_locals = set(code.co_varnames)
    result = ast.Assign([ast.Name("_tj_result", ast.Store())], last.value)
    # checked as the body of a loop whose variable occurs nowhere (the helper cannot see it)
    loop = ast.For(ast.Name("_tj_no_var", ast.Store()), ast.Constant(None), [*body, result], [])
    try:
        checked = _Loop(loop, {m for m in modules if m not in f_locals}, f_locals, pure)
    except _NotCapturable:
        return None
    if checked.writes or _names(fn) & _INTROSPECTION:
        return None  # a write into an argument is a side effect
    return frozenset(n for n in checked.invariants if n not in f_locals)
