"""Which Python ``for`` loops may be captured: the check of a loop's body (:class:`_Loop`, which
raises :class:`_NotCapturable` for anything outside the form below) and of a nest of loops over
rows (:func:`_nest_loop`). :mod:`~tapejit.frontend.loops.loop_source` rewrites the loops that
pass; this module only reads syntax trees.

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
"""

from __future__ import annotations

import ast

from .loop_scopes import names as _names
from .loop_skips import _split_loops

#: numpy functions a captured body may call: elementwise functions and reductions of the
#: arrays it reads, whose traced result depends only on the types of their arguments.
CALLS = frozenset(
    """abs absolute add arccos arccosh arcsin arcsinh arctan arctan2 arctanh cbrt cos cosh
    deg2rad divide dot exp exp2 expm1 fabs fmax fmin hypot log log10 log1p log2 logaddexp
    logaddexp2 maximum mean minimum multiply negative power prod rad2deg reciprocal sin sinc
    sinh sqrt square subtract sum tan tanh true_divide where clip sign""".split()
)

_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
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
