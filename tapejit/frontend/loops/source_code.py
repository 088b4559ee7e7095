"""A function's own source: read, checked to be the code that runs, and compiled again.

:mod:`tapejit.frontend.loops.loop_source` rewrites a traced function from its source. The source must be
the function's: ``inspect.getsource`` reads the file *now*, which may have been edited since
the function was defined (a notebook, an editor with a live session). :func:`checked_function`
compiles the source as it is and compares the result with the function's code object
(bytecode, names, constants, flags; not line numbers), in a module that imports what the
function's module imports (CPython compiles ``name.attr(...)`` differently when ``name`` is an
imported one) and with its ``from __future__`` flags. Any difference: the source is not used.
"""

from __future__ import annotations

import __future__
import ast
import functools
import inspect
import linecache
import symtable
import textwrap
import types

#: The compiler flags of every ``from __future__`` feature.
FUTURE_FLAGS = 0
for _feature in __future__.all_feature_names:
    FUTURE_FLAGS |= getattr(__future__, _feature).compiler_flag


def read(f: types.FunctionType) -> tuple[str, frozenset] | None:
    """``f``'s source (dedented) and the names its module imports, or ``None`` when the
    source cannot be read (a built-in, a function made by ``exec`` of a string that is not in
    ``linecache``)."""
    try:
        source = textwrap.dedent(inspect.getsource(f))
    except (OSError, TypeError):
        return None
    code = f.__code__
    module_source = "".join(linecache.getlines(code.co_filename, f.__globals__))
    return source, imported_names(code.co_filename, module_source)


def fingerprint(code: types.CodeType) -> tuple:
    """What a code object computes (its bytecode, exception table, names and constants,
    nested functions' too), without its line numbers."""
    consts = tuple(fingerprint(c) if isinstance(c, types.CodeType) else _constant(c)
                   for c in code.co_consts)  # fmt: skip
    return (code.co_code, code.co_exceptiontable, code.co_names, code.co_varnames,
            code.co_freevars, code.co_cellvars, code.co_argcount, code.co_posonlyargcount,
            code.co_kwonlyargcount, code.co_flags & ~inspect.CO_NESTED, consts)  # fmt: skip


def _constant(c) -> tuple:
    """A constant by type and exact value: ``0.0`` and ``-0.0``, ``1`` and ``1.0`` (in a
    tuple too) differ."""
    if isinstance(c, float):
        return (float, c.hex())
    if isinstance(c, complex):
        return (complex, c.real.hex(), c.imag.hex())
    if isinstance(c, (tuple, frozenset)):
        items = [_constant(e) for e in c]
        return (type(c), tuple(items if isinstance(c, tuple) else sorted(items, key=repr)))
    return (type(c), c)


@functools.lru_cache(maxsize=64)
def imported_names(filename: str, source: str) -> frozenset:
    """Names that module-level imports bind in the module ``source`` (CPython compiles
    ``name.attr(...)`` differently when ``name`` is an imported one)."""
    try:
        table = symtable.symtable(source, filename, "exec")
    except (SyntaxError, ValueError):
        return frozenset()
    return frozenset(s.get_name() for s in table.get_symbols() if s.is_imported())


def compile_function(fn: ast.FunctionDef, code: types.CodeType, free: list[str],
                      imported: frozenset) -> types.CodeType:  # fmt: skip
    """``fn`` compiled as a function whose free variables are ``free`` (the names of an outer
    function it is defined in, so that the result can be given cells), in a module that
    imports ``imported`` as the function's own module does."""
    outer = ast.FunctionDef(
        "_tj_outer",
        ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[],
                      kwarg=None, defaults=[]),  # fmt: skip
        [*[ast.Assign([ast.Name(n, ast.Store())], ast.Constant(None)) for n in free],
         fn, ast.Return(ast.Name(fn.name, ast.Load()))],  # fmt: skip
        [], None, None, type_params=[],
    )  # fmt: skip
    imports = [ast.Import([ast.alias(n)]) for n in sorted(imported)]
    mod = ast.Module([*imports, outer], [])
    ast.fix_missing_locations(mod)
    flags = code.co_flags & FUTURE_FLAGS  # the module's `from __future__` imports
    compiled = compile(mod, code.co_filename, "exec", flags=flags, dont_inherit=True)
    outer_code = next(c for c in compiled.co_consts if isinstance(c, types.CodeType))
    return next(
        c for c in outer_code.co_consts if isinstance(c, types.CodeType) and c.co_name == fn.name
    )


def checked_function(code: types.CodeType, source: str, imported: frozenset):
    """The ``FunctionDef`` of ``source`` (at ``code``'s line numbers, decorators dropped) if
    compiling it gives ``code``; ``None`` otherwise. Raises ``SyntaxError`` for a source
    that does not parse."""
    tree = ast.parse(source)
    fn = tree.body[0] if tree.body else None
    if not isinstance(fn, ast.FunctionDef) or fn.name != code.co_name:
        return None
    fn.decorator_list = []
    ast.increment_lineno(tree, code.co_firstlineno - 1)
    if fingerprint(compile_function(fn, code, list(code.co_freevars), imported)) != fingerprint(code):
        return None
    return fn
