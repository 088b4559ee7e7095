"""Whether a converted loop body (or a branch pair) may be traced once instead of run per
iteration (per branch taken): every value it reads from outside — closure cells, globals,
built-ins, and recursively the functions it calls — runs no user code with side effects and
no user-defined arithmetic, so one symbolic run is every run.

A body that calls ``log.append(x)``, a helper whose default is a stateful object, a numpy
scalar subclass with its own ``__mul__``, ``np.random``, a helper that assigns a global or an
attribute: each must run as written (every iteration, only the branch taken), so the statement
is not converted and :func:`why_not` says why. Library functions (numpy, scipy, math, the
built-ins, tapejit) are trusted apart from random number generation; user functions are read
from their bytecode (``STORE_GLOBAL``, ``STORE_ATTR``, nonlocal stores, deletions, method
names that mutate — :data:`~tapejit.frontend.convert.transform.MUTATORS` — or ``random``
reject them) to a depth of :data:`DEPTH` calls.
"""

from __future__ import annotations

import builtins
import dis
import inspect
import types
from typing import Any

import numpy as np

from ..tracer import Tracer
from .transform import MUTATORS

#: How deep user helpers are followed (a helper calling a helper calling ...).
DEPTH = 4

_TRUSTED_MODULES = ("numpy", "scipy", "math", "cmath", "builtins", "tapejit", "operator",
                    "functools", "itertools", "_operator", "_functools")  # fmt: skip
_FORBIDDEN_NAMES = MUTATORS | {"random", "seed", "shuffle", "permutation", "choice",
                               "default_rng", "normal", "uniform"}  # fmt: skip
_SIDE_EFFECTS = frozenset({"STORE_GLOBAL", "STORE_ATTR", "STORE_DEREF", "DELETE_GLOBAL",
                           "DELETE_ATTR", "DELETE_DEREF", "DELETE_SUBSCR", "IMPORT_NAME",
                           "YIELD_VALUE"})  # fmt: skip
_PLAIN = (type(None), bool, int, float, complex, str, bytes, range, slice, type(Ellipsis))


def _trusted(v: Any) -> bool:
    mod = getattr(v, "__module__", None) or ""
    if not isinstance(mod, str):
        return False
    root = mod.split(".")[0]
    if root not in _TRUSTED_MODULES or "random" in mod:
        return False
    return not (root == "numpy" and getattr(v, "__name__", "") in _FORBIDDEN_NAMES)


def why_not_value(v: Any, depth: int = DEPTH, seen: set | None = None) -> str | None:
    """``None`` when reading ``v`` (calling it, doing arithmetic on it) runs no user code with
    side effects; otherwise a phrase naming what it is."""
    seen = set() if seen is None else seen
    if id(v) in seen:
        return None
    t = type(v)
    if t in _PLAIN or t is Tracer:
        return None
    if isinstance(v, np.generic):
        return None if t.__module__ == "numpy" else f"a numpy scalar subclass {t.__name__}"
    if t is np.ndarray:
        return None if v.dtype.kind in "biufc" else "a numpy array of objects"
    if t in (tuple, list, frozenset, set):
        if len(v) > 100_000:
            return f"a {t.__name__} of {len(v)} items"
        seen.add(id(v))
        for e in v:
            why = why_not_value(e, depth, seen)
            if why:
                return why
        return None
    if t is dict:
        seen.add(id(v))
        for e in v.values():
            why = why_not_value(e, depth, seen)
            if why:
                return why
        return None
    if t is types.ModuleType:
        return "the module numpy.random" if "random" in v.__name__ else None
    if t is types.FunctionType:
        if _trusted(v):
            return None
        seen.add(id(v))
        return why_not_code(v, depth - 1, seen)
    if isinstance(v, type):
        return None if _trusted(v) else f"the class {v.__name__}"
    if t is np.ufunc or (callable(v) and _trusted(v)):
        return None
    if callable(v):
        return f"the callable {getattr(v, '__name__', t.__name__)!r}"
    return f"a {t.__name__} object"


def why_not_code(fn: types.FunctionType, depth: int = DEPTH, seen: set | None = None) -> str | None:
    """``None`` when ``fn`` (a Python function: a converted body, or a helper it calls) and
    everything it reads may run once for many calls; otherwise why not."""
    seen = set() if seen is None else seen
    name = getattr(fn, "__qualname__", "?")
    if depth < 0:
        return f"{name} calls helpers more than {DEPTH} deep"
    code = fn.__code__
    if code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
        return f"{name} is a generator"
    for why in _code_problems(code, name):
        return why
    cells = dict(zip(code.co_freevars, fn.__closure__ or ()))
    for n, cell in cells.items():
        if n.startswith("_tj_"):
            continue
        try:
            v = cell.cell_contents
        except ValueError:  # unbound yet: read later, as written
            continue
        why = why_not_value(v, depth, seen)
        if why:
            return f"{n} is {why}"
    g = fn.__globals__
    b = g.get("__builtins__", builtins)
    b = b if isinstance(b, dict) else vars(b)
    for n in _global_names(code):
        if n.startswith("_tj_"):
            continue
        if n in g:
            v = g[n]
        elif n in b:
            v = b[n]
            if v is getattr(builtins, n, None):
                continue
        else:
            continue
        why = why_not_value(v, depth, seen)
        if why:
            return f"{n} is {why}"
    for v in [*(fn.__defaults__ or ()), *(fn.__kwdefaults__ or {}).values()]:
        why = why_not_value(v, depth, seen)
        if why:
            return f"a default of {name} is {why}"
    return None


def _code_problems(code: types.CodeType, name: str):
    """Side effects visible in ``code`` and the code objects nested in it."""
    if set(code.co_names) & _FORBIDDEN_NAMES:
        bad = sorted(set(code.co_names) & _FORBIDDEN_NAMES)[0]
        yield f"{name} calls .{bad}(), which changes an object or draws random numbers"
        return
    for ins in dis.get_instructions(code):
        if ins.opname in _SIDE_EFFECTS:
            if ins.opname == "STORE_DEREF" and ins.argval in code.co_cellvars:
                continue  # a cell of its own (a name a nested function reads)
            if ins.opname == "YIELD_VALUE" and code.co_name == "<genexpr>":
                continue  # a generator expression's items (when it runs: the liveness's care)
            yield f"{name} has a side effect ({ins.opname} {ins.argval})"
            return
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _code_problems(c, name)


def _global_names(code: types.CodeType) -> set[str]:
    """Names ``code`` (and the code nested in it) loads as globals or built-ins."""
    out = set()
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            out.add(ins.argval)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out |= _global_names(c)
    return out


def why_not(*fns: types.FunctionType) -> str | None:
    """The first reason any of ``fns`` may not be traced once, or ``None``."""
    seen: set = set()
    for fn in fns:
        why = why_not_code(fn, DEPTH, seen)
        if why:
            return why
    return None
