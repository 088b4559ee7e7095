"""Loop exits rewritten away before conversion: ``continue`` and ``break`` as branches.

A converted loop's body is traced once and runs for every iteration, so it cannot leave an
iteration early (``continue``) or the loop (``break``). Both are rewritten into branches that
only assign, which the conversion then turns into selects (AutoGraph's
``continue_statements``/``break_statements`` transformers do the same; Moldovan et al., SysML
2019, section 5):

* ``if c: A; continue`` followed by the rest of the body becomes ``if c: A else: rest``;
* a loop with ``break`` gets a flag, ``_tj_brk_k = False`` before it; every ``break`` becomes
  ``_tj_brk_k = True``, the statements after a branch that may break run under
  ``if not _tj_brk_k:``, and so does the whole body. After the exit, the remaining iterations
  still run, with every value they would change kept by the select — the trip count does not
  depend on the data, so nothing recompiles when the exit moves (a ``while``-loop exit costs
  the loop's full length), and the adjoint of an iteration after the exit is exactly zero.

The break rewrite is applied only to a loop the conversion will take (``shape_ok`` says
nothing against it, its loop variable is not read after it, and it iterates over a
``range``/``enumerate``/``zip`` or a name — never over a call that could be an unbounded
iterator): a loop that runs as written keeps its own ``break``.
"""

from __future__ import annotations

import ast
import copy
from typing import Callable

from .liveness import Liveness, target_names

_LOOPS = (ast.For, ast.While, ast.AsyncFor)
_SCOPES = (ast.FunctionDef, ast.Lambda, ast.AsyncFunctionDef, ast.ClassDef)


def own_exit(stmts: list[ast.stmt], kind: type) -> bool:
    """Whether a ``kind`` (``ast.Break``/``ast.Continue``) of the enclosing loop occurs in
    ``stmts`` (not in inner loops or nested scopes; an inner loop's ``else`` is ours)."""
    todo = list(stmts)
    while todo:
        n = todo.pop()
        if isinstance(n, kind):
            return True
        if isinstance(n, _LOOPS):
            todo.extend(n.orelse)
            continue
        if isinstance(n, _SCOPES):
            continue
        todo.extend(ast.iter_child_nodes(n))
    return False


def _ends_with(block: list[ast.stmt], kind: type) -> bool:
    return bool(block) and isinstance(block[-1], kind)


def without_continue(block: list[ast.stmt]) -> list[ast.stmt]:
    """``block`` (a loop body) with each ``if c: A; continue`` + rest turned into ``if c: A
    else: rest`` (and the mirror for ``else: ...; continue``); a trailing ``continue`` dropped.
    Continues elsewhere are left (the loop is then not converted)."""
    out: list[ast.stmt] = []
    for k, st in enumerate(block):
        if isinstance(st, ast.Continue) and k == len(block) - 1:
            return out
        if isinstance(st, ast.If):
            rest = block[k + 1 :]
            if _ends_with(st.body, ast.Continue) and not own_exit(st.body[:-1] + st.orelse,
                                                               ast.Continue):  # fmt: skip
                new = ast.If(st.test, st.body[:-1] or [ast.Pass()],
                             without_continue(st.orelse + rest) or [ast.Pass()])  # fmt: skip
                out.append(ast.copy_location(new, st))
                return out
            if _ends_with(st.orelse, ast.Continue) and not own_exit(st.body + st.orelse[:-1],
                                                                 ast.Continue):  # fmt: skip
                new = ast.If(st.test, without_continue(st.body + rest) or [ast.Pass()],
                             st.orelse[:-1])  # fmt: skip
                out.append(ast.copy_location(new, st))
                return out
        out.append(st)
    return out


class LoopRewrite(ast.NodeTransformer):
    """A rewrite of a function's loops before conversion: :meth:`rewrite` visits the
    function's statements (a ``visit_For`` may return several statements for one loop);
    nested functions, lambdas and classes are left alone (they are converted on their own)."""

    def __init__(self, fn: ast.FunctionDef):
        self.fn = fn

    def rewrite(self) -> None:
        out: list[ast.stmt] = []
        for st in self.fn.body:
            new = self.visit(st)
            out.extend(new if isinstance(new, list) else [new])
        self.fn.body = out

    def visit_FunctionDef(self, node):
        return node

    visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = visit_FunctionDef


class Continues(LoopRewrite):
    """Applies :func:`without_continue` to the body of every loop of a function."""

    def visit_For(self, node):
        self.generic_visit(node)
        node.body = without_continue(node.body) or [ast.Pass()]
        return node

    visit_While = visit_For


def _set(flag: str, where: ast.AST) -> ast.stmt:
    st = ast.Assign([ast.Name(flag, ast.Store())], ast.Constant(True))
    return ast.copy_location(st, where)


def _unless(flag: str, block: list[ast.stmt], where: ast.AST) -> ast.stmt:
    test = ast.UnaryOp(ast.Not(), ast.Name(flag, ast.Load()))
    return ast.copy_location(ast.If(test, block, []), where)


def without_break(block: list[ast.stmt], flag: str) -> list[ast.stmt]:
    """``block`` with each own ``break`` as ``flag = True`` and what follows a statement that
    may break run only while ``flag`` is false (see the module docstring). ``break`` inside
    statements other than ``if`` (a ``with``, a ``try``, an inner loop's ``else``) is left:
    the loop is then not converted."""
    out: list[ast.stmt] = []
    for k, st in enumerate(block):
        if isinstance(st, ast.Break):
            out.append(_set(flag, st))
            return out
        if not (isinstance(st, ast.If) and own_exit([st], ast.Break)):
            out.append(st)
            continue
        rest = block[k + 1 :]
        for side, other in ((st.body, st.orelse), (st.orelse, st.body)):
            if _ends_with(side, ast.Break) and not own_exit(side[:-1] + other, ast.Break):
                # one side always breaks, the other never: the rest joins the other side
                done = [*side[:-1], _set(flag, side[-1])]
                cont = (other + rest) or [ast.Pass()]
                body, orelse = (done, cont) if side is st.body else (cont, done)
                out.append(ast.copy_location(ast.If(st.test, body, orelse), st))
                return out
        new = ast.If(st.test, without_break(st.body, flag) or [ast.Pass()],
                     without_break(st.orelse, flag))  # fmt: skip
        out.append(ast.copy_location(new, st))
        tail = without_break(rest, flag)
        if tail:
            out.append(_unless(flag, tail, rest[0]))
        return out
    return out


def _bounded(it: ast.expr) -> bool:
    """An iterable whose length is known before the loop runs: a ``range``/``enumerate``/
    ``zip`` call over names, attributes, subscripts or ``range`` calls, or a name (an array, a
    table, a list)."""
    if isinstance(it, (ast.Name, ast.Attribute, ast.Subscript)):
        return True
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and not it.keywords):
        return False
    if it.func.id == "range":
        return True
    if it.func.id in ("enumerate", "zip"):
        return all(_bounded(a) for a in it.args)
    return False


class Breaks(LoopRewrite):
    """Rewrites the ``break`` of every loop the conversion will take (innermost first).
    ``shape_ok(loop)``: why a loop (with no ``break`` left) cannot be converted, or ``None``."""

    def __init__(self, fn: ast.FunctionDef, shape_ok: Callable[[ast.For], str | None]):
        super().__init__(fn)
        self.shape_ok = shape_ok
        self.live = Liveness(fn) if any(isinstance(n, ast.Break) for n in ast.walk(fn)) else None
        self.count = 0

    def rewrite(self) -> int:
        if self.live is not None:
            super().rewrite()
        return self.count

    def visit_For(self, node: ast.For):
        self.generic_visit(node)
        if node.orelse or not own_exit(node.body, ast.Break) or not _bounded(node.iter):
            return node
        if target_names(node.target) & self.live.live_after(node):
            return node
        flag = f"_tj_brk_{self.count}"
        trial = copy.copy(node)
        body = without_break(copy.deepcopy(node.body), flag)
        trial.body = [_unless(flag, body, node.body[0])]
        if own_exit(trial.body, ast.Break) or self.shape_ok(trial) is not None:
            return node
        self.count += 1
        node.body = trial.body
        init = ast.Assign([ast.Name(flag, ast.Store())], ast.Constant(False))
        return [ast.copy_location(init, node), node]
