"""Loops that append to a list, converted as loops with per-iteration outputs (a scan's ``ys``).

A time loop that records its trajectory, or a graph model that builds its values one vertex
at a time, is written ::

    traj = [x0]
    for t in range(T):
        y = step(traj[-1])
        traj.append(y)

The body's one ``traj.append(y)`` per iteration becomes an output of the loop (stacked over
the iterations, then handed back as the list's new elements) and ``traj[-1]`` a carry, so the
body is traced once, whatever ``T`` is ::

    _tj_last_traj = _tj_last(traj)
    for t in range(T):
        y = step(_tj_last_traj)
        _tj_app_traj = y
        _tj_last_traj = _tj_app_traj
    # the loop returns the _tj_app_traj of every iteration: traj.extend(those)

A list qualifies when the function only ever binds it to a list display (``[]``, ``[x0]``) or
``list(...)``, never to another name, no nested function reads it, and the loop body uses it
only in one top-level ``traj.append(v)`` and in ``traj[-1]`` reads — so no other code can see
the list while the loop runs. The loop must have no ``break`` (the number of appends would
depend on the data) and be convertible otherwise (``shape_ok``); else it runs as written.
"""

from __future__ import annotations

import ast
import copy
from typing import Callable

import numpy as np

from ..tracer import Tracer
from .exits import LoopRewrite, own_exit
from .liveness import Liveness, target_names

def _append_of(st: ast.stmt) -> tuple[str, ast.expr] | None:
    """``(L, v)`` for a statement ``L.append(v)``, else ``None``."""
    if not (isinstance(st, ast.Expr) and isinstance(st.value, ast.Call)):
        return None
    c = st.value
    f = c.func
    if (isinstance(f, ast.Attribute) and f.attr == "append" and isinstance(f.value, ast.Name)
            and len(c.args) == 1 and not c.keywords
            and not isinstance(c.args[0], ast.Starred)):  # fmt: skip
        return f.value.id, c.args[0]
    return None


def _is_last(n: ast.AST, name: str) -> bool:
    """Whether ``n`` is the load ``name[-1]``."""
    if not (isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Load)):
        return False
    if not (isinstance(n.value, ast.Name) and n.value.id == name):
        return False
    k = n.slice
    return (isinstance(k, ast.UnaryOp) and isinstance(k.op, ast.USub)
            and isinstance(k.operand, ast.Constant) and k.operand.value == 1)  # fmt: skip


def _lists(fn: ast.FunctionDef) -> set[str]:
    """Names the function only ever binds to a new list (a display or ``list(...)``) and never
    copies into another name (``M = L``) or binds otherwise (loop targets, arguments, ...)."""
    good: set[str] = set()
    bad: set[str] = set()
    a = fn.args
    for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
        if arg is not None:
            bad.add(arg.arg)
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                pairs = [(t, n.value)]
                if (isinstance(t, ast.Tuple) and isinstance(n.value, ast.Tuple)
                        and len(t.elts) == len(n.value.elts)):  # fmt: skip
                    pairs = list(zip(t.elts, n.value.elts))  # a, b = [], []
                for tt, v in pairs:
                    if isinstance(tt, ast.Name):
                        (good if _fresh(v) else bad).add(tt.id)
                    else:
                        bad |= target_names(tt)
            for v in ast.walk(n.value):
                if isinstance(v, ast.Name) and not _inside_call(n.value, v):
                    bad.add(v.id)  # an alias (M = L, pair = (L, M))
        elif isinstance(n, (ast.For, ast.comprehension)):
            bad |= target_names(n.target)
        elif isinstance(n, (ast.AugAssign, ast.AnnAssign)) and isinstance(n.target, ast.Name):
            bad.add(n.target.id)
        elif isinstance(n, (ast.With, ast.AsyncWith)):
            for item in n.items:
                if item.optional_vars is not None:
                    bad |= target_names(item.optional_vars)
        elif isinstance(n, ast.NamedExpr):
            bad.add(n.target.id)
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            bad.update(n.names)
    return good - bad


def _fresh(v: ast.expr) -> bool:
    """A new list: a display, or a ``list(...)`` call."""
    return isinstance(v, ast.List) or (isinstance(v, ast.Call) and isinstance(v.func, ast.Name)
                                       and v.func.id == "list")  # fmt: skip


def _inside_call(root: ast.expr, name: ast.Name) -> bool:
    """Whether ``name`` is read inside a call or subscript in ``root`` (``y = f(L)``,
    ``y = L[-1]``: a value computed from the list, not the list itself)."""
    for n in ast.walk(root):
        if isinstance(n, (ast.Call, ast.Subscript, ast.Attribute, ast.BinOp, ast.Compare)):
            if any(c is name for c in ast.walk(n)):
                return True
    return False


class _Lasts(ast.NodeTransformer):
    def __init__(self, names: dict[str, str]):
        self.names = names
        self.used: set[str] = set()

    def visit_Subscript(self, node):
        for name, var in self.names.items():
            if _is_last(node, name):
                self.used.add(name)
                return ast.copy_location(ast.Name(var, ast.Load()), node)
        return self.generic_visit(node)


class Appends(LoopRewrite):
    """Rewrites the appends of every loop the conversion will take (see the module docstring)
    and marks the loop with ``_tj_appends``: ``[(list name, output name), ...]``."""

    def __init__(self, fn: ast.FunctionDef, shape_ok: Callable[[ast.For], str | None]):
        super().__init__(fn)
        self.shape_ok = shape_ok
        found = any(_append_of(n) for n in ast.walk(fn) if isinstance(n, ast.stmt))
        self.lists = _lists(fn) if found else set()
        self.live = Liveness(fn) if self.lists else None

    def rewrite(self) -> None:
        if self.lists:
            super().rewrite()

    def _candidates(self, node: ast.For) -> list[str]:
        """The lists of ``self.lists`` the body appends to once, at its top level, and uses
        otherwise only as ``L[-1]``."""
        counts: dict[str, int] = {}
        for st in node.body:
            app = _append_of(st)
            if app is not None:
                counts[app[0]] = counts.get(app[0], 0) + 1
        names = [n for n, c in counts.items() if c == 1 and n in self.lists
                 and n not in self.live.always]  # fmt: skip
        ok = []
        for name in names:
            uses = 0
            for st in node.body:
                app = _append_of(st)
                parts = [app[1]] if app is not None and app[0] == name else [st]
                for n in (m for part in parts for m in ast.walk(part)):
                    if isinstance(n, ast.Name) and n.id == name:
                        uses += 1
                    elif _is_last(n, name):
                        uses -= 1  # (its Name is counted when walked)
            if uses == 0:
                ok.append(name)
        return ok

    def visit_For(self, node: ast.For):
        self.generic_visit(node)
        if node.orelse or own_exit(node.body, ast.Break):
            return node
        names = self._candidates(node)
        if not names:
            return node
        if target_names(node.target) & self.live.live_after(node):
            return node
        lasts = {n: f"_tj_last_{n}" for n in names}
        fix = _Lasts(lasts)
        parts: list[tuple[str | None, ast.stmt | ast.expr]] = []
        for st in copy.deepcopy(node.body):
            app = _append_of(st)
            if app is not None and app[0] in lasts:
                parts.append((app[0], ast.copy_location(fix.visit(app[1]), st)))
            else:
                parts.append((None, fix.visit(st)))
        body: list[ast.stmt] = []
        for name, part in parts:
            if name is None:
                body.append(part)
                continue
            out = f"_tj_app_{name}"
            body.append(ast.copy_location(ast.Assign([ast.Name(out, ast.Store())], part), part))
            if name in fix.used:
                keep = ast.Assign([ast.Name(lasts[name], ast.Store())], ast.Name(out, ast.Load()))
                body.append(ast.copy_location(keep, part))
        trial = copy.copy(node)
        trial.body = body
        if self.shape_ok(trial) is not None:
            return node
        node.body = body
        node._tj_appends = [(n, f"_tj_app_{n}") for n in names]
        before = []
        for n in names:  # the first iteration's L[-1] (an IndexError as written, if L is empty)
            if n in fix.used:
                call = ast.Call(ast.Name("_tj_last", ast.Load()), [ast.Name(n, ast.Load())], [])
                st = ast.Assign([ast.Name(lasts[n], ast.Store())], call)
                before.append(ast.copy_location(st, node))
        return [*before, node]


class _Empty:
    """The ``L[-1]`` of an empty list: reading it raises as ``[][-1]`` does."""

    def _raise(self, *a, **k):
        raise IndexError("list index out of range")

    __getattr__ = __add__ = __radd__ = __mul__ = __rmul__ = __sub__ = __rsub__ = _raise
    __truediv__ = __rtruediv__ = __pow__ = __neg__ = __float__ = __array__ = _raise


def last(lst):
    """``lst[-1]`` before the loop, or a value that raises ``IndexError`` when used."""
    return lst[-1] if len(lst) else _Empty()


def sum_(seq, start=0):
    """Python's ``sum(seq, start)``; a list holding runs of consecutive rows of one traced
    array (what a converted loop's appends hand back) adds each run as one ``np.sum`` over its
    rows instead of one addition per element (the same sum, in numpy's pairwise order)."""
    if type(seq) is not list or len(seq) < 3 or not all(isinstance(v, Tracer) for v in seq):
        return sum(seq, start)
    if any(v.shape != seq[0].shape for v in seq):
        return sum(seq, start)  # (broadcasting additions: as written)
    from ..numpy.np_shape import row_runs  # (the numpy layer imports this package)

    runs = row_runs(seq)
    if not runs:
        return sum(seq, start)
    total, at = start, 0
    for i, j, rows in runs:
        for v in seq[at:i]:
            total = total + v
        total = total + np.sum(rows, axis=0)
        at = j
    for v in seq[at:]:
        total = total + v
    return total
