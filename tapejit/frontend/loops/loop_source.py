"""Which Python ``for`` loops of a traced function may be captured, and the function rewritten
to hand them to :mod:`tapejit.frontend.loops.loop_capture`.

Tracing runs a Python loop: ``n`` iterations leave ``n`` copies of the body in the trace, and
tracing them is most of the compile time of a scalarised model (the Lennard-Jones pair loop at
N = 256 is 32,640 iterations). :mod:`tapejit.passes.reroll.driver` rebuilds such copies as loops
afterwards, so the result is right either way; what costs is tracing them. This module finds
the loops whose iterations can be *proved* to trace the same, so that tracing a few of them is
enough (:mod:`tapejit.frontend.loops.loop_capture` builds the rest), by reading the function's source.

**Capturable loops.** An innermost ``for NAME in ITER:`` (no ``else``) whose body is
straight-line code: only

* assignments ``v = expr`` and ``v op= expr`` to plain names, ``a, b = e1, e2`` (and
  ``pass``);
* writes ``y[index] = expr`` / ``y[index] op= expr`` into an array the loop does not rebind,
  at an index affine in the loop variable (a map: ``out[i] = ...``; a scatter-add:
  ``g[j, 0] += ...``) or at the same index every iteration;
* expressions of names, number literals, arithmetic operators (``+ - * / // % **``, unary
  ``- +``), the functions of :data:`CALLS` called as ``np.f(...)`` / ``numpy.f(...)`` (numpy
  imported under that name at module level) with keyword arguments that are literals, the
  built-in ``abs``, and *pure helpers*: module-level functions of the same form (straight-line
  assignments and one ``return``, no writes; :func:`_pure_code`), ``e = e + pair(r2)``;
* subscripts. The loop variable may appear only in subscripts of a name the loop does not
  assign (an array read by the loop), as an index that is affine in it — ``x[j]``,
  ``x[j + 1, 0]``, ``x[n - 1 - j, :]``, ``x[2 * j + k]`` with ``n``, ``k`` not assigned by the
  loop (``len(x)``, ``x.shape[0]`` too) — and nowhere else (not as a number, not in a slice
  bound, not in a nested range). Subscripts without the loop variable take indices the loop
  does not assign.

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
import builtins
import copy
import functools
import inspect
import os
import types
from typing import Callable

import numpy as np

from . import loop_scopes, source_code
from .loop_scopes import names as _names
from .loop_skips import _no_arguments, _split_loops, _SplitSkips

#: Whether tracing rewrites capturable loops (``TAPEJIT_CAPTURE=0`` in the environment: off).
ENABLED = os.environ.get("TAPEJIT_CAPTURE", "1") not in ("", "0")

#: numpy functions a captured body may call: elementwise functions and reductions of the
#: arrays it reads, whose traced result depends only on the types of their arguments.
CALLS = frozenset(
    """abs absolute add arccos arccosh arcsin arcsinh arctan arctan2 arctanh cbrt cos cosh
    deg2rad divide dot exp exp2 expm1 fabs fmax fmin hypot log log10 log1p log2 logaddexp
    logaddexp2 maximum mean minimum multiply negative power prod rad2deg reciprocal sin sinc
    sinh sqrt square subtract sum tan tanh true_divide where clip sign""".split()
)

_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
_HELPERS = ("_tj_for", "_tj_read", "_tj_all", "_tj_can", "_tj_nest", "_tj_min", "_tj_max",
            "_tj_slice", "_tj_int")
#: Built-ins that let code read or change a function's variables by name: a function using
#: any of them is never rewritten (its loop's temporaries would not be where it looks).
_INTROSPECTION = frozenset({"eval", "exec", "locals", "vars", "globals", "dir", "__import__"})
_FRAME_ATTRIBUTES = frozenset({"_getframe", "currentframe", "f_locals", "f_back", "stack"})


class _NotCapturable(Exception):
    pass


class _Loop:
    """What one capturable loop reads and writes."""

    def __init__(self, node: ast.For, modules: set[str], f_locals: set[str],
                 pure: frozenset = frozenset()):  # fmt: skip
        self.node = node
        self.var = node.target.id
        self.modules = modules  # names that are numpy at module level (and abs, len)
        self.f_locals = f_locals
        self.pure = pure  # module-level functions that are pure straight-line code
        self.assigned: list[str] = []
        self.carries: list[str] = []
        self.bases: list[ast.expr] = []  # the arrays read at the loop variable
        #: whether a slice bound moves with the loop variable (``x[i + 1:]``): rows of
        #: different lengths, captured as a nest without inner loops (``_Rewriter._rows``)
        self.ragged = False
        self.writes: list[str] = []  # arrays written by subscript: y[i] = v, y[i] += v
        self.helpers: list[str] = []  # pure helpers called (checked again when the loop runs)
        #: every name the body assigns (a plain-name target, anywhere in it)
        self.rebound = frozenset(
            t.id for st in node.body
            for t in ((st.targets[0],) if isinstance(st, ast.Assign) else
                      (st.target,) if isinstance(st, ast.AugAssign) else ())
            for t in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else (t,))
            if isinstance(t, ast.Name)
        )  # fmt: skip
        for st in node.body:
            self._statement(st)
        self.temps = [v for v in self.assigned if v not in self.carries]
        # the other names the body reads: values the same in every iteration, whose types
        # loop_capture checks (numbers, numeric arrays, traced values: nothing that runs code)
        loads = {n.id for st in node.body for n in ast.walk(st)
                 if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}  # fmt: skip
        skip = {self.var, *self.assigned, *self.writes, *modules, *pure}
        self.invariants = sorted(loads - skip)

    def _statement(self, st: ast.stmt) -> None:
        if isinstance(st, ast.Pass) or (
            isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant)
        ):
            return
        if isinstance(st, ast.Assign) and len(st.targets) == 1:
            target, value, reads_target = st.targets[0], st.value, False
        elif isinstance(st, ast.AugAssign) and isinstance(st.op, _OPS):
            target, value, reads_target = st.target, st.value, True
        else:
            raise _NotCapturable
        if isinstance(target, (ast.Tuple, ast.List)) and not reads_target:
            self._unpack(target, value)
            return
        if isinstance(target, ast.Subscript):
            self._write(target, value)
            self._carried(_names(value) | _names(target.slice))
            return
        if not isinstance(target, ast.Name) or target.id == self.var:
            raise _NotCapturable
        if reads_target and target.id in self.assigned:
            # `t += v` on a value assigned in this iteration: in place if it is an array, and
            # it may be another array or a view (t = y; t += v writes y)
            raise _NotCapturable
        self._expr(value)
        self._carried(_names(value) | ({target.id} if reads_target else set()))
        if target.id not in self.assigned:
            self.assigned.append(target.id)

    def _unpack(self, target: ast.Tuple | ast.List, value: ast.expr) -> None:
        """``a, b = e1, e2``: every value is evaluated, then every name assigned (so
        ``a, b = b, a`` reads both before either changes)."""
        names = [t.id for t in target.elts if isinstance(t, ast.Name)]
        if (
            not isinstance(value, (ast.Tuple, ast.List))
            or len(value.elts) != len(target.elts)
            or len(names) != len(target.elts)
            or len(set(names)) != len(names)
            or self.var in names
            or any(isinstance(v, ast.Starred) for v in value.elts)
        ):
            raise _NotCapturable
        for v in value.elts:
            self._expr(v)
        self._carried(set().union(*(_names(v) for v in value.elts)))
        for name in names:
            if name not in self.assigned:
                self.assigned.append(name)

    def _carried(self, read: set[str]) -> None:
        """Names read before the body assigns them (in this iteration) are carried."""
        for name in read:
            if name not in self.assigned and name not in self.carries:
                if name in self.rebound:
                    self.carries.append(name)

    def _write(self, target: ast.Subscript, value: ast.expr) -> None:
        """``y[index] = value`` (or ``op=``): an array the loop does not rebind, written at
        an index affine in the loop variable (or the same index every iteration)."""
        y = target.value
        if not isinstance(y, ast.Name) or y.id == self.var or y.id in self.rebound:
            raise _NotCapturable
        self._expr(value)
        if self.var in _names(target.slice):
            self._loop_index(target.slice)
        else:
            self._invariant_index(target.slice)
        if y.id not in self.writes:
            self.writes.append(y.id)

    def _expr(self, e: ast.expr) -> None:
        if isinstance(e, ast.Constant):
            if type(e.value) not in (int, float):
                raise _NotCapturable
        elif isinstance(e, ast.Name):
            if e.id == self.var:
                raise _NotCapturable  # the loop variable as a number
        elif isinstance(e, ast.BinOp) and isinstance(e.op, _OPS):
            self._expr(e.left)
            self._expr(e.right)
        elif isinstance(e, ast.UnaryOp) and isinstance(e.op, (ast.USub, ast.UAdd)):
            self._expr(e.operand)
        elif isinstance(e, ast.Subscript):
            self._subscript(e)
        elif isinstance(e, ast.Call):
            self._call(e)
        else:
            raise _NotCapturable

    def _call(self, e: ast.Call) -> None:
        f = e.func
        if isinstance(f, ast.Name) and f.id == "abs" and "abs" in self.modules:
            pass
        elif isinstance(f, ast.Name) and f.id in self.pure and f.id not in self.f_locals:
            if f.id not in self.helpers:  # a helper of the same form: the same every call
                self.helpers.append(f.id)
        elif not (
            isinstance(f, ast.Attribute)
            and isinstance(f.value, ast.Name)
            and f.value.id in self.modules
            and f.value.id not in ("abs", "len")
            and f.attr in CALLS
        ):
            raise _NotCapturable
        for a in e.args:
            if isinstance(a, ast.Starred):
                raise _NotCapturable
            self._expr(a)
        for k in e.keywords:
            if k.arg is None or not isinstance(k.value, ast.Constant):
                raise _NotCapturable

    def _subscript(self, e: ast.Subscript) -> None:
        if self.var not in _names(e.slice):
            self._expr(e.value)
            self._invariant_index(e.slice)
            return
        # an element read at an index affine in the loop variable, of an array the loop reads
        # (and does not assign: the read's array is evaluated before the loop): a name, or an
        # entry of one (p["w"], layers[0]: a pytree's leaf)
        base = e.value
        while isinstance(base, ast.Subscript) and isinstance(base.slice, ast.Constant):
            if type(base.slice.value) not in (int, str):
                raise _NotCapturable
            base = base.value
        if (not isinstance(base, ast.Name) or base.id == self.var
                or base.id in self.rebound):  # fmt: skip
            raise _NotCapturable
        self._loop_index(e.slice)
        if all(ast.dump(b) != ast.dump(e.value) for b in self.bases):
            self.bases.append(e.value)

    def _loop_index(self, index: ast.expr) -> None:
        """Integers affine in the loop variable, or invariant, and slices whose bounds are
        (a bound that moves makes the loop one over rows of different lengths: ``ragged``)."""
        items = index.elts if isinstance(index, ast.Tuple) else [index]
        for it in items:
            if isinstance(it, ast.Slice):
                for part in (it.lower, it.upper, it.step):
                    if part is None:
                        continue
                    if self.var in _names(part):
                        if part is it.step:
                            raise _NotCapturable  # a step that moves: lengths not affine
                        self._affine(part)
                        self.ragged = True
                    else:
                        self._invariant(part)
            elif self.var in _names(it):
                self._affine(it)
            else:
                self._invariant(it)

    def _affine(self, e: ast.expr) -> None:
        """``e`` is ``var``, or ``a + b*var`` built with + - * and unary minus from it and
        expressions without it (integers at run time, or the read is not an index)."""
        if isinstance(e, ast.Name) and e.id == self.var:
            return
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
            return self._affine(e.operand)
        if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Add, ast.Sub, ast.Mult)):
            left, right = self.var in _names(e.left), self.var in _names(e.right)
            if left and right:
                raise _NotCapturable  # var * var, var + var * ...: keep it simple
            if isinstance(e.op, ast.Mult) or left or right:
                self._affine(e.left) if left else self._invariant(e.left)
                self._affine(e.right) if right else self._invariant(e.right)
                return
        raise _NotCapturable

    def _invariant(self, e: ast.expr) -> None:
        """An expression that is the same in every iteration: number literals and names the
        loop does not assign, combined by arithmetic, ``len(name)`` (the built-in) and
        ``name.shape[k]``/``name.ndim``/``name.size``."""
        if isinstance(e, ast.Name):
            if e.id == self.var or e.id in self.rebound:
                raise _NotCapturable
        elif isinstance(e, ast.Constant):
            if type(e.value) not in (int, float, str):  # (str: a key, p["w"])
                raise _NotCapturable
        elif isinstance(e, ast.BinOp) and isinstance(e.op, _OPS):
            self._invariant(e.left)
            self._invariant(e.right)
        elif isinstance(e, ast.UnaryOp) and isinstance(e.op, (ast.USub, ast.UAdd)):
            self._invariant(e.operand)
        elif (isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "len"
              and "len" in self.modules and len(e.args) == 1 and not e.keywords):  # fmt: skip
            self._invariant(e.args[0])
        elif isinstance(e, ast.Attribute) and e.attr in ("ndim", "size", "shape"):
            self._invariant(e.value)
        elif (isinstance(e, ast.Subscript) and isinstance(e.value, ast.Attribute)
              and e.value.attr == "shape" and isinstance(e.slice, ast.Constant)):  # fmt: skip
            self._invariant(e.value.value)
        else:
            raise _NotCapturable

    def _invariant_index(self, e: ast.expr) -> None:
        items = e.elts if isinstance(e, ast.Tuple) else [e]
        for it in items:
            if isinstance(it, ast.Slice):
                for part in (it.lower, it.upper, it.step):
                    if part is not None:
                        self._invariant(part)
            else:
                self._invariant(it)


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
        return _capture_or_run(fdef, it, carries, call, original, node.iter, node)


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
        The node as rewritten by the inner loop's capture when it is not such a nest."""
        try:
            loop, ranges = _nest_loop(original, self.modules, self.f_locals, self.pure)
        except _NotCapturable:
            return node
        if rewritten < len(ranges):  # an inner loop left as written: not a nest
            return node
        if not loop_scopes.private(self.fn, node, [loop.var, *loop.temps]):
            return node
        return self._rows(loop, node, ranges, original)

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
                    loop: ast.For, iterable: ast.expr, where: ast.For) -> list[ast.stmt]:
    """``fdef; it = iterable; if _tj_can(it): carries = call else: loop`` (``loop`` over
    ``it``, as written), every new node at ``where``'s line (errors name the user's lines)."""
    loop.iter = ast.Name(it, ast.Load())
    branch = ast.If(
        ast.Call(ast.Name("_tj_can", ast.Load()), [ast.Name(it, ast.Load())], []),
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


def _nest_loop(outer: ast.For, modules: set[str], f_locals: set[str],
               pure: frozenset) -> tuple[_Loop, list[ast.expr]]:  # fmt: skip
    """The outer loop of a nest (see ``_Rewriter._nest``) checked as one loop over its
    variable — its body with each inner loop's body in that loop's place, the inner variables
    names it does not assign — and the inner loops' ranges (bounds affine in the
    outer variable, or the ``_tj_min``/``_tj_max`` of such that :class:`_SplitSkips` writes;
    the rows' ranges are checked when the nest runs). Raises :class:`_NotCapturable`."""
    if not isinstance(outer.target, ast.Name) or outer.orelse:
        raise _NotCapturable
    if not isinstance(outer.target, ast.Name):
        raise _NotCapturable
    stmts: list[ast.stmt] = []  # the body, a skip split at the row (if j != i) as its loops
    for st in outer.body:
        split = _split_loops(st, outer.target.id)
        stmts.extend(split if split is not None else [st])
    fors = [st for st in stmts if isinstance(st, ast.For)]
    if not fors or len(fors) > 2:
        raise _NotCapturable
    body: list[ast.stmt] = []
    for st in stmts:
        body.extend(st.body if isinstance(st, ast.For) else [st])
    loop = _Loop(ast.For(outer.target, outer.iter, body, []), modules, f_locals, pure)
    if loop.writes or loop.ragged or "range" in f_locals:
        raise _NotCapturable
    ranges = []
    for inner in fors:
        rng = inner.iter
        if (
            inner.orelse
            or not isinstance(inner.target, ast.Name)
            or any(isinstance(n, (ast.For, ast.While)) for st in inner.body for n in ast.walk(st))
            or not (isinstance(rng, ast.Call) and isinstance(rng.func, ast.Name)
                    and rng.func.id == "range" and 1 <= len(rng.args) <= 3 and not rng.keywords
                    and not any(isinstance(a, ast.Starred) for a in rng.args))
        ):  # fmt: skip
            raise _NotCapturable
        j = inner.target.id
        if j == loop.var or j in loop.rebound:
            raise _NotCapturable
        for a in rng.args:
            _bound(loop, a)
        ranges.append(rng)
        if j not in loop.temps:
            loop.temps.append(j)
    inner_vars = {f.target.id for f in fors}
    loop.invariants = [v for v in loop.invariants if v not in inner_vars]
    return loop, ranges


def _bound(loop: _Loop, e: ast.expr) -> None:
    """A range bound: affine in the loop variable, invariant, or ``_tj_min``/``_tj_max`` of
    such (a skip split in two, :class:`_SplitSkips`)."""
    if (isinstance(e, ast.Call) and isinstance(e.func, ast.Name)
            and e.func.id in ("_tj_min", "_tj_max") and not e.keywords):  # fmt: skip
        for a in e.args:
            _bound(loop, a)
    elif loop.var in _names(e):
        loop._affine(e)
    else:
        loop._invariant(e)


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
    if any(isinstance(n, ast.Attribute) and n.attr in _FRAME_ATTRIBUTES for n in ast.walk(fn)):
        return None
    f_locals = set(code.co_varnames) | set(code.co_cellvars) | set(code.co_freevars)
    skips = _SplitSkips(fn)
    skips.visit(fn)
    rw = _Rewriter(fn, {m for m in modules if m not in f_locals}, f_locals, pure)
    rw.visit(fn)
    if not rw.count and not skips.count:
        return None
    new = source_code.compile_function(fn, code, [*code.co_freevars, *_HELPERS], imported)
    return _renamed_bodies(new, code.co_name, code.co_qualname)


def _renamed_bodies(code: types.CodeType, name: str, qualname: str) -> types.CodeType:
    """``code`` with its loop bodies' code objects named as the function (so that errors and
    tracebacks inside a body say ``in f()``, the user's function, as the loop did)."""
    consts = tuple(
        _renamed_bodies(c, name, qualname).replace(co_name=name, co_qualname=qualname)
        if isinstance(c, types.CodeType) and c.co_name.startswith("_tj_body_") else c
        for c in code.co_consts
    )  # fmt: skip  (a nest's body holds its inner loops' bodies)
    return code.replace(co_consts=consts)


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
    from ..tracer import Tracer

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


def rewrite(f: Callable, helpers: dict) -> Callable:
    """``f`` with its capturable loops handed to ``helpers["_tj_for"]`` (see the module
    docstring), or ``f`` itself when it has none, its source cannot be read, or capturing is
    off (:data:`ENABLED`). ``helpers`` maps each name of ``_HELPERS`` to its object."""
    code = getattr(f, "__code__", None)
    if not ENABLED or not isinstance(f, types.FunctionType) or code is None:
        return f
    if code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
        return f
    read = source_code.read(f)
    if read is None:
        return f
    source, imported = read
    modules = _fixed_names(f.__globals__)
    pure = _pure_names(f.__globals__, code, _PURE_DEPTH)
    try:
        new = _rewritten_code(code, source, modules, imported, pure)
    except (SyntaxError, StopIteration, ValueError):
        return f
    if new is None or set(new.co_freevars) - set(_HELPERS) != set(code.co_freevars):
        return f
    cells = dict(zip(code.co_freevars, f.__closure__ or ()))
    cells.update({k: types.CellType(helpers[k]) for k in _HELPERS})
    g = types.FunctionType(
        new, f.__globals__, f.__name__, f.__defaults__, tuple(cells[n] for n in new.co_freevars)
    )
    g.__kwdefaults__ = f.__kwdefaults__
    g.__wrapped__ = f
    return g
