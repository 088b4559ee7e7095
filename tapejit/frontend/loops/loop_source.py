"""Which Python ``for`` loops of a traced function may be captured, and the function rewritten
to hand them to :mod:`tapejit.frontend.loops.loop_capture`.

Tracing runs a Python loop: ``n`` iterations leave ``n`` copies of the body in the trace, and
tracing them is most of the compile time of a scalarised model (the Lennard-Jones pair loop at
N = 256 is 32,640 iterations). :mod:`tapejit.passes.reroll.driver` rebuilds such copies as loops
afterwards, so the result is right either way; what costs is tracing them. This module finds
the loops whose iterations can be *proved* to trace the same, so that tracing a few of them is
enough (:mod:`tapejit.frontend.loops.loop_capture` builds the rest), by reading the function's source.

**Capturable loops** are decided by :mod:`~tapejit.frontend.loops.loop_check` (the form is
written down there); pure helpers a body may call by :mod:`~tapejit.frontend.loops.loop_purity`.

**The rewrite** turns such a loop into ::

    def _tj_body_0(j, e):          # the body, unchanged but for the element reads
        d = _tj_read(x, (j + 1,)) - _tj_read(x, (j,))
        e = e + d * d
        return (e,)
    (e,) = _tj_for(range(n - 1), _tj_body_0, (e,), (x,), ())   # carries, reads, writes

at the loop's own line numbers, the body's code named as the function (errors and
tracebacks point at the user's lines and function), compiled once per code object
(:func:`rewrite`). The source is used only if, compiled as it is, it gives the function's
own bytecode (:mod:`tapejit.frontend.loops.source_code`: a file edited since the function was defined is not
its source). ``_tj_for`` runs the body for every iteration exactly
as the loop would, unless it can capture the loop (:mod:`tapejit.frontend.loops.loop_capture`).
"""

from __future__ import annotations

import ast
import copy
import functools
import inspect
import os
import sysconfig
import threading
import types
from typing import Callable

from . import loop_scopes, source_code
from ..convert import transform as convert_transform
from .loop_scopes import names as _names
from .loop_check import _FRAME_ATTRIBUTES, _INTROSPECTION, _Loop, _nest_loop, _NotCapturable
from .loop_purity import _PURE_DEPTH, _fixed_names, _pure_names
from .loop_skips import _no_arguments, _SplitSkips

#: Whether tracing rewrites capturable loops (``TAPEJIT_CAPTURE=0`` in the environment: off).
ENABLED = os.environ.get("TAPEJIT_CAPTURE", "1") not in ("", "0")

_HELPERS = ("_tj_for", "_tj_read", "_tj_all", "_tj_can", "_tj_nest", "_tj_min", "_tj_max",
            "_tj_slice", "_tj_int", *convert_transform.OPERATORS)

#: Whether tracing converts loops and branches from the source (:mod:`tapejit.frontend.convert`;
#: ``TAPEJIT_CONVERT=0`` in the environment: off).
CONVERT = os.environ.get("TAPEJIT_CONVERT", "1") not in ("", "0")
#: Whether a rectangular nest this capture accepts (inner bounds that do not move with the
#: outer variable: a stencil's ``for i: for j in range(1, n - 1)``) is captured rather than
#: converted (see :meth:`_Rewriter._nest`; tests turn it off to flatten every form of nest by
#: conversion). A ragged nest (``range(i + 1, n)``) is converted whenever :data:`CONVERT` is on.
NEST_CAPTURE = True



class _Rewriter(ast.NodeTransformer):
    """Replaces each capturable innermost loop of the function by a body function and a call
    of ``_tj_for``; records how many it replaced."""

    def __init__(self, fn: ast.FunctionDef, modules: set[str], f_locals: set[str],
                 pure: frozenset):  # fmt: skip
        self.fn = fn
        self.modules = modules
        self.f_locals = f_locals
        self.pure = pure
        self.count = 0
        self.handlers = 0  # enclosing try / with statements

    def visit_FunctionDef(self, node):  # nested functions are traced as they are
        return node if node is not self.fn else self.generic_visit(node)

    visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = visit_FunctionDef

    def visit_Try(self, node):
        """A loop inside ``try`` or ``with`` stays as it is: an exception it raises may be
        caught, and the code after sees the variables as the loop left them."""
        self.handlers += 1
        try:
            return self.generic_visit(node)
        finally:
            self.handlers -= 1

    visit_TryStar = visit_With = visit_AsyncWith = visit_Try

    def visit_For(self, node: ast.For):
        original, count = copy.deepcopy(node), self.count
        self.generic_visit(node)
        if self.handlers or node.orelse or not isinstance(node.target, ast.Name):
            return node
        if any(isinstance(n, (ast.For, ast.While)) for st in node.body for n in ast.walk(st)):
            if self.count > count:  # inner loops rewritten: a nest of two levels?
                return self._nest(original, node, self.count - count)
            return node
        try:
            loop = _Loop(node, self.modules, self.f_locals, self.pure)
        except _NotCapturable:
            return node
        if not loop_scopes.private(self.fn, node, [loop.var, *loop.temps]):
            return node
        if loop.ragged:
            if loop.writes:
                return node
            return self._rows(loop, node, [], copy.deepcopy(node))
        return self._replace(loop)

    def _replace(self, loop: _Loop) -> list[ast.stmt]:
        """The loop as ::

            def _tj_body_k(var, *carries): <body, element reads checked>; return carries
            _tj_it_k = <iterable>
            if _tj_can(_tj_it_k):     # a range long enough, while tracing
                carries = _tj_for(_tj_it_k, _tj_body_k, carries, lambda: reads, writes,
                                  invariants, helpers)   # reads: evaluated once checked
            else:
                for var in _tj_it_k: <body>      # the loop as written
        """
        k = self.count
        self.count += 1
        node = loop.node
        original = copy.deepcopy(node)
        carries = loop.carries
        name, it = f"_tj_body_{k}", f"_tj_it_{k}"
        fdef = _body_function(name, loop, node.body)
        call = ast.Call(
            ast.Name("_tj_for", ast.Load()),
            [ast.Name(it, ast.Load()), ast.Name(name, ast.Load()), _tuple(carries, ast.Load()),
             _bases(loop), _tuple(loop.writes, ast.Load()),
             _tuple(loop.invariants, ast.Load()), _tuple(loop.helpers, ast.Load())],
            [],
        )  # fmt: skip
        return _capture_or_run(fdef, it, carries, call, original, node.iter, node, loop.writes)


    def _nest(self, original: ast.For, node: ast.For, rewritten: int):
        """A loop whose body is straight-line code around capturable inner loops over
        ranges whose bounds are affine in the outer variable (``for i in range(n): for j
        in range(i + 1, n): ...``; the two loops of a skip, :class:`_SplitSkips`), rewritten
        as ::

            def _tj_body_k(i, *carries): <body, its inner loop rewritten>; return carries
            _tj_it_k = <iterable>
            if _tj_can(_tj_it_k):
                carries = _tj_nest(_tj_it_k, _tj_body_k, carries,
                                   lambda i: (<inner ranges>,), lambda: (<arrays read at i>,),
                                   invariants, helpers)
            else:
                for i in _tj_it_k: <body, its inner loop rewritten>

        ``_tj_nest`` (:func:`tapejit.frontend.loops.loop_capture.run_nest`) traces a few rows and builds the
        others as one sum over rows of different lengths. What makes that exact, besides what
        an inner capturable loop guarantees: the outer body with the inner loop's body in its
        place is capturable code for the outer variable (it appears only in affine element
        reads and in the inner range's bounds, never as a number), and it writes no array.
        When it is not such a nest: the node as rewritten by the inner loops' capture, or with
        conversion on (:data:`CONVERT`), the loop as written, inner loops too, for conversion.
        A ragged nest (inner bounds that move with the outer variable) is always left to
        conversion when that is on: flattened, its pairs are a ragged layout read through
        windows (:mod:`tapejit.passes.nest_layout`), as fast as the capture's rows and in
        constant time, where the capture grows with the rows that do not match term for term
        (flat ``x[3*j + k]`` reads: 23 s at N = 1024 atoms, against 0.6 s). A rectangular one
        the capture accepts is captured (:data:`NEST_CAPTURE`): a stencil's rows read as
        slices run 1.6x faster than through its windows."""
        count = self.count - rewritten
        try:
            loop, ranges = _nest_loop(original, self.modules, self.f_locals, self.pure)
        except _NotCapturable:
            loop = ranges = None
        ragged = loop is not None and any(loop.var in _names(a) for r in ranges for a in r.args)
        if ((NEST_CAPTURE and not ragged) or not CONVERT) and loop is not None \
                and rewritten >= len(ranges) \
                and loop_scopes.private(self.fn, node, [loop.var, *loop.temps]):
            return self._rows(loop, node, ranges, original)
        if CONVERT:
            # not a nest: left as written, inner loops too, for conversion — each body traced
            # once, a nest of sums and scatter-adds flattened into one iteration space
            # (tapejit/passes/vectorise.py), in constant time; inner loops captured in a body
            # of their own would keep the outer loop from being converted (their bounds are
            # traced there), and the outer loop would run as written, row by row
            self.count = count
            return original
        return node

    def _rows(self, loop: _Loop, node: ast.For, ranges: list, original: ast.For):
        """The rewrite of a nest (see :meth:`_nest`; ``ranges``: its inner loops' ranges),
        or of a loop over rows of different lengths (no inner loops, ``loop.ragged``): its
        body, the reads at the row checked, as a function handed to ``_tj_nest``."""
        k = self.count
        self.count += 1
        carries = loop.carries
        name, it = f"_tj_body_{k}", f"_tj_it_{k}"
        # element reads at the row checked as a captured loop's are (the inner loops' bodies
        # too: they read the row's elements)
        fdef = _body_function(name, loop, copy.deepcopy(node.body))
        inner = ast.Lambda(
            ast.arguments(posonlyargs=[], args=[ast.arg(loop.var)], vararg=None, kwonlyargs=[],
                          kw_defaults=[], kwarg=None, defaults=[]),
            ast.Tuple([copy.deepcopy(r) for r in ranges], ast.Load()),
        )  # fmt: skip
        call = ast.Call(
            ast.Name("_tj_nest", ast.Load()),
            [ast.Name(it, ast.Load()), ast.Name(name, ast.Load()), _tuple(carries, ast.Load()),
             inner, _bases(loop), _tuple(loop.invariants, ast.Load()), _tuple(loop.helpers, ast.Load())],
            [],
        )  # fmt: skip
        return _capture_or_run(fdef, it, carries, call, node, original.iter, original)


def _body_function(name: str, loop: _Loop, body: list[ast.stmt]) -> ast.FunctionDef:
    """``def name(var, *carries): <body, element reads at var checked>; return carries``."""
    args = ast.arguments(
        posonlyargs=[], args=[ast.arg(a) for a in [loop.var, *loop.carries]], vararg=None,
        kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[],
    )  # fmt: skip
    ret = ast.Return(_tuple(loop.carries, ast.Load()))
    stmts = [_Reads(loop).visit(st) for st in body]
    return ast.FunctionDef(name, args, [*stmts, ret], [], None, None, type_params=[])


def _bases(loop: _Loop) -> ast.Lambda:
    """``lambda: (<the arrays the loop reads at its variable>,)``, evaluated once checked."""
    return ast.Lambda(_no_arguments(), ast.Tuple([copy.deepcopy(b) for b in loop.bases],
                                                 ast.Load()))  # fmt: skip


def _capture_or_run(fdef: ast.FunctionDef, it: str, carries: list[str], call: ast.Call,
                    loop: ast.For, iterable: ast.expr, where: ast.For,
                    writes: list[str] = ()) -> list[ast.stmt]:  # fmt: skip
    """``fdef; it = iterable; if _tj_can(it): carries = call else: loop`` (``loop`` over
    ``it``, as written), every new node at ``where``'s line (errors name the user's lines)."""
    loop.iter = ast.Name(it, ast.Load())
    branch = ast.If(
        ast.Call(ast.Name("_tj_can", ast.Load()),
                 [ast.Name(it, ast.Load()),
                  ast.Lambda(_no_arguments(), _tuple(list(writes), ast.Load()))], []),
        [ast.Assign([_tuple(carries, ast.Store())], call)],
        [loop],
    )
    out = [fdef, ast.Assign([ast.Name(it, ast.Store())], iterable), branch]
    for st in out:
        ast.copy_location(st, where)
        ast.fix_missing_locations(st)
        for n in ast.walk(st):
            if not hasattr(n, "lineno") or n.lineno is None:
                ast.copy_location(n, where)
    return out




class _Reads(ast.NodeTransformer):
    """``x[j + 1, 0]`` -> ``_tj_read(x, (j + 1, 0))``: the loop variable's element reads, which
    ``_tj_for`` checks while it captures."""

    def __init__(self, loop: _Loop):
        self.var = loop.var

    def visit_Subscript(self, e: ast.Subscript):
        if isinstance(e.ctx, ast.Store):  # a write: y[i] = v
            return e
        self.generic_visit(e)
        if self.var not in _names(e.slice):
            return e
        items = e.slice.elts if isinstance(e.slice, ast.Tuple) else [e.slice]
        key = [_slice_value(it) if isinstance(it, ast.Slice) else it for it in items]
        arg = ast.Tuple(key, ast.Load()) if isinstance(e.slice, ast.Tuple) else key[0]
        return ast.copy_location(
            ast.Call(ast.Name("_tj_read", ast.Load()), [e.value, arg], []), e
        )


def _slice_value(it: ast.Slice) -> ast.expr:
    """A slice item as a value: ``_tj_all`` for ``:``, else ``_tj_slice(lower, upper, step)``."""
    if it.lower is None and it.upper is None and it.step is None:
        return ast.Name("_tj_all", ast.Load())
    parts = [p if p is not None else ast.Constant(None) for p in (it.lower, it.upper, it.step)]
    return ast.Call(ast.Name("_tj_slice", ast.Load()), parts, [])


def _tuple(names: list[str], ctx) -> ast.Tuple:
    return ast.Tuple([ast.Name(n, ctx) for n in names], ctx)


@functools.lru_cache(maxsize=256)
def _rewritten_code(code: types.CodeType, source: str, modules: frozenset,
                    imported: frozenset, pure: frozenset) -> types.CodeType | None:  # fmt: skip
    """The code object of the rewritten function, or ``None``: nothing to capture, or the
    source read is not that of ``code`` (the file changed since the function was defined:
    the source compiled as it is must give ``code``'s bytecode)."""
    fn = source_code.checked_function(code, source, imported)
    if fn is None or any(isinstance(n, (ast.Global, ast.Nonlocal)) for n in ast.walk(fn)):
        return None
    if any(n.startswith("_tj_") for n in _names(fn)) or _names(fn) & _INTROSPECTION:
        return None
    if any(isinstance(n, ast.Attribute) and n.attr in _FRAME_ATTRIBUTES
           and not (isinstance(n.value, ast.Name) and n.value.id in modules)  # np.stack
           for n in ast.walk(fn)):  # fmt: skip
        return None
    f_locals = set(code.co_varnames) | set(code.co_cellvars) | set(code.co_freevars)
    skips = _SplitSkips(fn)
    skips.visit(fn)
    rw = _Rewriter(fn, {m for m in modules if m not in f_locals}, f_locals, pure)
    rw.visit(fn)
    converted = convert_transform.convert(fn, f_locals) if CONVERT else 0
    if not rw.count and not skips.count and not converted:
        return None
    new = source_code.compile_function(fn, code, [*code.co_freevars, *_HELPERS], imported)
    return _renamed_bodies(new, code.co_name, code.co_qualname)


_BODY_PREFIXES = ("_tj_body_", "_tj_loop_", "_tj_then_", "_tj_else_")


def _renamed_bodies(code: types.CodeType, name: str, qualname: str) -> types.CodeType:
    """``code`` with its loop bodies' code objects named as the function (so that errors and
    tracebacks inside a body say ``in f()``, the user's function, as the loop did)."""
    consts = tuple(
        _renamed_bodies(c, name, qualname).replace(co_name=name, co_qualname=qualname)
        if isinstance(c, types.CodeType) and c.co_name.startswith(_BODY_PREFIXES) else c
        for c in code.co_consts
    )  # fmt: skip  (a nest's body holds its inner loops' bodies)
    return code.replace(co_consts=consts)




def rewrite(f: Callable, helpers: dict) -> Callable:
    """``f`` with its capturable loops handed to ``helpers["_tj_for"]`` and its control flow
    converted (see the module docstring), the user functions it calls by a global or closure
    name prepared the same way (:func:`_callees`), or ``f`` itself when there is nothing to
    rewrite, its source cannot be read, or capturing is off (:data:`ENABLED`). ``helpers``
    maps each name of ``_HELPERS`` to its object; ``functools.partial`` objects are rewritten
    through their function."""
    if isinstance(f, functools.partial):
        inner = rewrite(f.func, helpers)
        return f if inner is f.func else functools.partial(inner, *f.args, **f.keywords)
    code = getattr(f, "__code__", None)
    if not ENABLED or not isinstance(f, types.FunctionType) or code is None:
        return f
    if code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
        return f
    if code in _preparing.codes:  # recursion: the function as written
        return f
    _preparing.codes.add(code)
    try:
        new = _converted(f, code)
        glob, cells = _callees(f, new or code, helpers)
    finally:
        _preparing.codes.discard(code)
    if new is None and glob is f.__globals__ and not cells:
        return f
    cells = {**dict(zip(code.co_freevars, f.__closure__ or ())), **cells}
    if new is not None:
        cells.update({k: types.CellType(helpers[k]) for k in _HELPERS})
    run = new or code
    g = types.FunctionType(
        run, glob, f.__name__, f.__defaults__, tuple(cells[n] for n in run.co_freevars)
    )
    g.__kwdefaults__ = f.__kwdefaults__
    g.__wrapped__ = f
    return g


class _Preparing(threading.local):
    def __init__(self):
        self.codes: set = set()


_preparing = _Preparing()


def _converted(f: types.FunctionType, code: types.CodeType) -> types.CodeType | None:
    """The rewritten code of ``f``, or ``None`` (nothing to rewrite, or no source)."""
    read = source_code.read(f)
    if read is None:
        return None
    source, imported = read
    modules = _fixed_names(f.__globals__)
    pure = _pure_names(f.__globals__, code, _PURE_DEPTH)
    try:
        new = _rewritten_code(code, source, modules, imported, pure)
    except (SyntaxError, StopIteration, ValueError):
        return None
    if new is None or set(new.co_freevars) - set(_HELPERS) != set(code.co_freevars):
        return None
    return new


def _user_function(v) -> bool:
    """A Python function of the user's code (not of the standard library, an installed
    package or tapejit): one whose loops and branches are worth converting."""
    if type(v) is not types.FunctionType:
        return False
    path = os.path.realpath(v.__code__.co_filename)
    return not path.startswith(_LIBRARY_PATHS) and not path.startswith("<")


_LIBRARY_PATHS = tuple(
    os.path.realpath(p) + os.sep
    for p in {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    | {os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))}
)


def _callees(f: types.FunctionType, code: types.CodeType, helpers: dict):
    """``(globals, cells)`` for running ``code`` as ``f`` with the user functions it calls by
    name rewritten too: a copy of ``f``'s globals with those functions replaced (``f``'s own
    globals when none is), and new closure cells for those ``f`` reads from its closure. (A
    snapshot while one call traces: a rewritten function cannot assign globals.)"""
    names = _loaded_names(code)
    g = f.__globals__
    over = {}
    for n in names:
        v = g.get(n)
        if _user_function(v):
            w = rewrite(v, helpers)
            if w is not v:
                over[n] = w
    cells = {}
    for n, cell in zip(f.__code__.co_freevars, f.__closure__ or ()):
        try:
            v = cell.cell_contents
        except ValueError:
            continue
        if _user_function(v):
            w = rewrite(v, helpers)
            if w is not v:
                cells[n] = types.CellType(w)
    if not over:
        return g, cells
    glob = dict(g)
    glob.update(over)
    return glob, cells


def _loaded_names(code: types.CodeType) -> set[str]:
    out = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out |= _loaded_names(c)
    return out
