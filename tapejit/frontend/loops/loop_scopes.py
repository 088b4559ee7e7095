"""Where a name of a captured loop is seen outside it: the scope questions of
:mod:`tapejit.frontend.loops.loop_source`.

A captured loop's body runs in a function of its own, so the loop variable and the names the
body assigns before reading them (its temporaries) are no longer assigned in the traced
function. That is exact only if no code outside the loop reads what the loop left in them:
:func:`private` answers that from the function's syntax, conservatively.
"""

from __future__ import annotations

import ast


def names(node: ast.AST) -> set[str]:
    """The names ``node`` mentions (loaded, stored or deleted)."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def private(fn: ast.FunctionDef, loop: ast.For, local: list[str]) -> bool:
    """Whether ``local`` (the loop variable and temporaries) are not used outside ``loop``:
    each of their occurrences elsewhere in ``fn`` is inside another ``for`` loop that assigns
    the name before reading it (its own loop variable, or a straight-line body whose first use
    of the name is an assignment), or in a nested function or lambda that has a parameter of
    that name, so no code sees the value ``loop`` left in it."""
    inside = {id(n) for st in loop.body for n in ast.walk(st)}
    fors = [n for n in ast.walk(fn) if isinstance(n, ast.For) and n is not loop]
    scopes = [n for n in ast.walk(fn) if isinstance(n, (ast.Lambda, ast.FunctionDef,
                                                          ast.AsyncFunctionDef)) and n is not fn]
    for name in local:
        if bound_otherwise(fn, loop, name):
            return False
        shadowed = set()
        for sc in scopes:
            a = sc.args
            if any(p.arg == name for p in [*a.posonlyargs, *a.args, *a.kwonlyargs,
                                           *filter(None, [a.vararg, a.kwarg])]):  # fmt: skip
                # the body only: defaults, decorators and annotations are evaluated outside
                body = sc.body if isinstance(sc.body, list) else [sc.body]
                shadowed |= {id(n) for st in body for n in ast.walk(st)}
        for n in ast.walk(fn):
            if id(n) in inside or id(n) in shadowed or n is loop.target:
                continue
            if not (isinstance(n, ast.Name) and n.id == name):
                continue
            owners = [f for f in fors if any(m is n for m in ast.walk(f))
                      and not any(m is n for m in ast.walk(f.iter))
                      and not any(m is loop for m in ast.walk(f))]  # fmt: skip
            # (a loop around this one runs it, then reads what it left: not an owner)
            if not any(_assigns_first(f, name) for f in owners):
                return False
    return True


def bound_otherwise(fn: ast.FunctionDef, loop: ast.For, name: str) -> bool:
    """Whether ``fn`` binds ``name`` outside ``loop`` other than by a plain name: an import
    alias, a ``def`` or ``class``, an ``except ... as``, a parameter."""
    inside = {id(n) for st in loop.body for n in ast.walk(st)}
    for n in ast.walk(fn):
        if id(n) in inside:
            continue
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name.split(".")[0]) == name for a in n.names):
                return True
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if n is not fn and n.name == name:
                return True
        elif isinstance(n, ast.ExceptHandler) and n.name == name:
            return True
    a = fn.args
    return any(p.arg == name for p in [*a.posonlyargs, *a.args, *a.kwonlyargs,
                                       *filter(None, [a.vararg, a.kwarg])])  # fmt: skip


def _assigns_first(f: ast.For, name: str) -> bool:
    """Whether every iteration of ``f`` assigns ``name`` before any read of it."""
    if isinstance(f.target, ast.Name) and f.target.id == name:
        return True
    if f.orelse:
        return False
    stmts = list(f.body)
    while stmts:
        st = stmts.pop(0)
        if isinstance(st, ast.If) and not st.orelse and name not in names(st.test):
            if len(st.body) == 1 and isinstance(st.body[0], ast.Continue):
                continue  # `if j == i: continue`: that iteration reads nothing
            if not stmts:  # the rest of the iteration under one test (`if j != i: ...`)
                stmts = list(st.body)
                continue
            return False
        if isinstance(st, ast.Assign) and len(st.targets) == 1:
            if name in names(st.value):
                return False
            if isinstance(st.targets[0], ast.Name) and st.targets[0].id == name:
                return True
            if name in names(st.targets[0]):
                return False
        elif isinstance(st, (ast.Pass, ast.Expr)) and name not in names(st):
            continue
        else:
            return False
    return False
