"""A loop that skips one iteration, ``for j in range(a, b): if j != i: BODY``, as the two
loops before and after it (:class:`_SplitSkips`, run on a function's source before
:mod:`tapejit.frontend.loops.loop_source` finds the loops it can capture): each is then straight-line code,
and a pair loop over every ``j != i`` a nest of two rows.
"""

from __future__ import annotations

import ast
import copy

from . import loop_scopes
from .loop_scopes import names as _names


def _no_arguments() -> ast.arguments:
    return ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[],
                         kwarg=None, defaults=[])  # fmt: skip



class _SplitSkips(ast.NodeTransformer):
    """``for j in range(a, b): if j != i: BODY`` (``i != j``; or ``if j == i: continue`` then
    ``BODY``) as the two loops ``for j in range(a, _tj_min(i, b)): BODY`` and ``for j in
    range(_tj_max(i + 1, a), b): BODY`` — the same iterations in the same order, whatever
    ``i`` is — so that each is straight-line code (and a pair loop over all ``j != i`` a nest of
    two rows: before and after the diagonal). The two loops run when ``i`` is a Python ``int``
    when the loop starts (``_tj_int``: not a float, which ``j`` never equals, nor a numpy
    integer, whose ``i + 1`` may wrap; and bound: the loop as written reads it only if it runs);
    otherwise the loop as written runs. Only where that is exactly the loop as written: ``a``
    and ``b`` names, numbers, ``len`` and shapes that ``BODY`` neither assigns nor changes
    through a method call or ``del`` (they are evaluated twice), ``i`` and ``j`` not assigned
    in ``BODY``, no ``break`` or ``continue`` in it, and ``j`` not read after the loop
    (:func:`tapejit.frontend.loops.loop_scopes.private`)."""

    def __init__(self, fn: ast.FunctionDef):
        self.fn = fn
        self.count = 0

    def visit_FunctionDef(self, node):
        return node if node is not self.fn else self.generic_visit(node)

    visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = visit_FunctionDef

    def visit_For(self, node: ast.For):
        self.generic_visit(node)
        split = _skip(node)
        if split is None or not loop_scopes.private(self.fn, node, [node.target.id]):
            return node
        a, b, i, body = split
        first = ast.For(copy.deepcopy(node.target), _range(a, _call("_tj_min", i, b)),
                        copy.deepcopy(body), [])  # fmt: skip
        after = ast.BinOp(copy.deepcopy(i), ast.Add(), ast.Constant(1))
        second = ast.For(copy.deepcopy(node.target), _range(_call("_tj_max", after, a),
                         copy.deepcopy(b)), copy.deepcopy(body), [])  # fmt: skip
        bound = ast.Lambda(_no_arguments(), copy.deepcopy(i))
        out = ast.If(_call("_tj_int", bound), [first, second], [node])
        ast.copy_location(out, node)
        for n in ast.walk(out):
            if not hasattr(n, "lineno") or n.lineno is None:
                ast.copy_location(n, node)
        self.count += 1
        return out


def _split_loops(st: ast.stmt, var: str) -> list[ast.For] | None:
    """The two loops of a skip split (:class:`_SplitSkips`) whose ``i`` is ``var`` — an outer
    loop's variable, an ``int`` in every row, so the split runs — else ``None``."""
    if (
        isinstance(st, ast.If)
        and isinstance(st.test, ast.Call)
        and isinstance(st.test.func, ast.Name)
        and st.test.func.id == "_tj_int"
        and isinstance(st.test.args[0], ast.Lambda)
        and isinstance(st.test.args[0].body, ast.Name)
        and st.test.args[0].body.id == var
        and len(st.body) == 2
        and all(isinstance(f, ast.For) for f in st.body)
    ):
        return list(st.body)
    return None


def _call(name: str, *args: ast.expr) -> ast.Call:
    return ast.Call(ast.Name(name, ast.Load()), [copy.deepcopy(a) for a in args], [])


def _range(start: ast.expr, stop: ast.expr) -> ast.Call:
    return ast.Call(ast.Name("range", ast.Load()), [start, stop], [])


def _skip(node: ast.For):
    """``(a, b, i, BODY)`` of a loop :class:`_SplitSkips` splits, else ``None``."""
    if node.orelse or not isinstance(node.target, ast.Name):
        return None
    j = node.target.id
    it = node.iter
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
            and len(it.args) in (1, 2) and not it.keywords):  # fmt: skip
        return None
    a, b = (ast.Constant(0), it.args[0]) if len(it.args) == 1 else it.args
    first, rest = node.body[0], node.body[1:]
    i = None
    if isinstance(first, ast.If) and not first.orelse and not rest:
        i, body = _other(first.test, j, ast.NotEq), first.body
    elif (isinstance(first, ast.If) and not first.orelse and len(first.body) == 1
          and isinstance(first.body[0], ast.Continue) and rest):  # fmt: skip
        i, body = _other(first.test, j, ast.Eq), rest
    if i is None:
        return None
    assigned = {n.id for st in body for n in ast.walk(st)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}  # fmt: skip
    if i.id in assigned or j in assigned or (_names(a) | _names(b)) & assigned:
        return None
    if any(isinstance(n, (ast.Break, ast.Continue, ast.Return, ast.Yield, ast.YieldFrom,
                          ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                          ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp))
           for st in body for n in ast.walk(st)):  # fmt: skip
        return None  # (a closure made in the body would see j after the loop: its last value)
    if not all(_plain(e) for e in (a, b)):
        return None
    bounds = _names(a) | _names(b)
    for n in (n for st in body for n in ast.walk(st)):
        if isinstance(n, ast.Delete) or (
            isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and bounds & _names(n.func.value)
        ) or (
            isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store)
            and bounds & _names(n.value)
        ):  # fmt: skip
            return None  # (x.append(...), lim[0] += 1: a bound changes between the two loops)
    return a, b, i, body


def _other(test: ast.expr, j: str, op: type) -> ast.Name | None:
    """``i`` of ``j <op> i`` or ``i <op> j`` (names), else ``None``."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], op)):
        return None
    left, right = test.left, test.comparators[0]
    if not (isinstance(left, ast.Name) and isinstance(right, ast.Name)) or left.id == right.id:
        return None
    if left.id == j:
        return right
    return left if right.id == j else None


def _plain(e: ast.expr) -> bool:
    """Names, numbers, arithmetic, ``len(name)`` and ``name.shape[k]``: evaluated twice, the
    same both times."""
    for n in ast.walk(e):
        if isinstance(n, ast.Call):
            if not (isinstance(n.func, ast.Name) and n.func.id == "len" and len(n.args) == 1
                    and isinstance(n.args[0], ast.Name)):  # fmt: skip
                return False
        elif not isinstance(n, (ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator,
                                ast.unaryop, ast.Load, ast.Attribute, ast.Subscript)):  # fmt: skip
            return False
        elif isinstance(n, ast.Attribute) and n.attr not in ("shape", "size", "ndim"):
            return False
    return True
