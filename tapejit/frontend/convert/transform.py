"""The source rewrite: ``for`` loops and ``if`` statements into calls of the conversion
operators (:mod:`tapejit.frontend.convert.runtime`), in AutoGraph's functional form (Moldovan et
al., *AutoGraph: Imperative-style Coding with Graph-based Performance*, SysML 2019).

A loop ::

    for i, (a, b) in enumerate(conn):        # line 12
        <body>

whose body assigns ``e`` and ``F`` (the names it assigns that are read before being assigned in
an iteration, or after the loop: :mod:`~tapejit.frontend.convert.liveness`) becomes ::

    def _tj_loop_0(_tj_item, e, F):
        i, (a, b) = _tj_item
        <body, converted>
        return (e, F)
    (e, F) = _tj_for_stmt(_tj_enumerate(conn), _tj_loop_0, _tj_args(lambda: e, lambda: F), 12)

and a branch whose bodies only assign (names, or elements ``y[i] = v``) ::

    if r2 < rc2:                             # line 20
        e = e + 4 * (s12 - s6)
    def _tj_then_1(e, s12, s6): e = e + 4 * (s12 - s6); return (e,)
    def _tj_else_1(e, s12, s6): return (e,)
    (e,) = _tj_if_stmt(r2 < rc2, _tj_then_1, _tj_else_1,
                       _tj_args(lambda: e, lambda: s12, lambda: s6), 20)

(the branch functions take every local name they read, so that the operator can hand them
values whose cotangent is masked by the condition). Element reads ``t[k]`` become
``_tj_getitem(t, k)`` (a numpy table read at a traced position is a gather), and conditions
``a and b``, ``not a``, ``a < b < c`` become ``_tj_and``/``_tj_or``/``_tj_not`` calls that keep
Python's short-circuit on plain values. ``continue`` at the end of a branch and ``break``
become branches on a flag first (:mod:`~tapejit.frontend.convert.exits`). What is not
convertible — a branch that returns, raises or calls a method that mutates, a loop with
``return``, ``try``, attribute stores or a target read after it — stays as written.
"""

from __future__ import annotations

import ast
import copy

from .appends import Appends
from .exits import Breaks, Continues
from .liveness import Liveness, modified, reads, target_names

#: Names of the operators the rewritten code calls (cells of the rewritten function).
OPERATORS = ("_tj_for_stmt", "_tj_if_stmt", "_tj_ifexp", "_tj_args", "_tj_and", "_tj_or",
             "_tj_not", "_tj_getitem", "_tj_range", "_tj_enumerate", "_tj_zip", "_tj_mkslice",
             "_tj_to_int", "_tj_aug", "_tj_kept", "_tj_setitem", "_tj_max2",
             "_tj_min2", "_tj_last", "_tj_sum")  # fmt: skip

#: Method names that change their object: a body calling one on a name is not converted
#: (the call would run once while tracing instead of once per iteration).
MUTATORS = frozenset({
    "append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "add",
    "discard", "sort", "reverse", "fill", "put", "itemset", "resize", "popitem", "appendleft",
    "extendleft", "popleft", "setflags", "partition", "__setitem__", "__delitem__",
})  # fmt: skip

_NOT_IN_BODY = (ast.Return, ast.Yield, ast.YieldFrom, ast.Await, ast.Global, ast.Nonlocal,
                ast.Try, ast.With, ast.AsyncWith, ast.AsyncFor, ast.Delete, ast.Import,
                ast.ImportFrom, ast.ClassDef, ast.AsyncFunctionDef, ast.Break, ast.NamedExpr)  # fmt: skip


def _name(n: str) -> ast.Name:
    return ast.Name(n, ast.Load())


def _call(fn: str, *args: ast.expr) -> ast.Call:
    return ast.Call(_name(fn), list(args), [])


def _noargs() -> ast.arguments:
    return ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[],
                         kwarg=None, defaults=[])  # fmt: skip


def _args(names: list[str]) -> ast.arguments:
    a = _noargs()
    a.args = [ast.arg(n) for n in names]
    return a


def _thunk(e: ast.expr) -> ast.Lambda:
    return ast.Lambda(_noargs(), e)


def _getters(names: list[str]) -> ast.Call:
    """``_tj_args(lambda: a, lambda: b)``: the values of names that may be unbound."""
    return _call("_tj_args", *(_thunk(_name(n)) for n in names))


def _tuple(names: list[str], ctx) -> ast.Tuple:
    return ast.Tuple([ast.Name(n, ctx()) for n in names], ctx())


def _mutating_call(n: ast.AST) -> bool:
    return (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr in MUTATORS)  # fmt: skip


def _simple_store(t: ast.AST) -> bool:
    """A store target the conversion handles: names, tuples of them, ``y[k]`` of a name."""
    if isinstance(t, ast.Name):
        return True
    if isinstance(t, (ast.Tuple, ast.List)):
        return all(_simple_store(e) for e in t.elts)
    if isinstance(t, ast.Starred):
        return isinstance(t.value, ast.Name)
    return isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)


def _nested_scopes(node: ast.AST) -> bool:
    return any(isinstance(n, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                              ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp))
               for n in ast.walk(node))  # fmt: skip


class Converter(ast.NodeTransformer):
    """Rewrites the convertible loops and branches of one function (see the module docstring).
    ``locals_``: the function's local names (arguments and every name it assigns)."""

    def __init__(self, fn: ast.FunctionDef, locals_: set[str]):
        self.fn = fn
        Continues(fn).rewrite()
        _single_return(fn)
        Appends(fn, loop_shape_ok).rewrite()
        Breaks(fn, loop_shape_ok).rewrite()
        self.live = Liveness(fn)
        self.locals = set(locals_) | modified(fn.body)
        for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]:
            self.locals.add(a.arg)
        for a in (fn.args.vararg, fn.args.kwarg):
            if a is not None:
                self.locals.add(a.arg)
        self.count = 0
        self.kept = 0  # loops and branches left as written, with a note of why
        self.loops = 0
        self.branches = 0
        self.scope = 0  # > 0 inside a comprehension or lambda: expressions stay as they are
        self.lazy = 0  # > 0 inside a lambda or generator expression (run later, or never)

    # -- scopes left alone ------------------------------------------------------------------
    def visit_FunctionDef(self, node):
        if node is self.fn:
            node.body = self._stmts(node.body)
            return node
        if not node.name.startswith("_tj_") and not self.scope:
            # a helper defined in the function: converted as a function of its own (its own
            # names and liveness; the operators are the enclosing function's free names)
            inner = Converter(node, set())
            if not (inner.locals & _BUILTINS_USED):
                inner.visit(node)
                self.count += inner.count
        return node  # (the capture's bodies are traced as they are)

    def visit_AsyncFunctionDef(self, node):
        return node

    visit_ClassDef = visit_AsyncFunctionDef

    def _inner_scope(self, node):
        self.scope += 1
        try:
            return self.generic_visit(node)
        finally:
            self.scope -= 1

    def _lazy_scope(self, node):
        self.lazy += 1
        try:
            return self._inner_scope(node)
        finally:
            self.lazy -= 1

    # a list, set or dict comprehension runs where it stands: its subscripts read as the
    # statement's do (``np.stack([X[tets[t, m]] for m in range(4)])`` gathers at a traced t)
    visit_ListComp = visit_SetComp = visit_DictComp = _inner_scope
    visit_Lambda = _lazy_scope

    def visit_GeneratorExp(self, node):  # consumed at once by sum(...), list(...): eager
        return (self._inner_scope if id(node) in self.live.eager else self._lazy_scope)(node)

    def _stmts(self, stmts: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for st in stmts:
            new = self.visit(st)
            if new is None:
                continue
            out.extend(new if isinstance(new, list) else [new])
        return out

    # -- expressions --------------------------------------------------------------------------
    def visit_Subscript(self, node: ast.Subscript):
        self.generic_visit(node)
        if not isinstance(node.ctx, ast.Load) or self.lazy:
            return node
        key = node.slice
        if isinstance(key, ast.Tuple):
            key = ast.Tuple([self._slice_value(e) for e in key.elts], ast.Load())
        else:
            key = self._slice_value(key)
        return ast.copy_location(_call("_tj_getitem", node.value, key), node)

    @staticmethod
    def _slice_value(e: ast.expr) -> ast.expr:
        if not isinstance(e, ast.Slice):
            return e
        parts = [p if p is not None else ast.Constant(None) for p in (e.lower, e.upper, e.step)]
        return ast.copy_location(_call("_tj_mkslice", *parts), e)

    def visit_Assign(self, node: ast.Assign):
        """``y[k] = v`` (``y`` a name, one target) as ``_tj_setitem(y, k, v)``: the same write,
        also at a slice of fixed length with a traced start."""
        self.generic_visit(node)
        if self.scope or len(node.targets) != 1:
            return node
        t = node.targets[0]
        if not (isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)):
            return node
        key = t.slice
        key = (ast.Tuple([self._slice_value(e) for e in key.elts], ast.Load())
               if isinstance(key, ast.Tuple) else self._slice_value(key))  # fmt: skip
        call = _call("_tj_setitem", ast.Name(t.value.id, ast.Load()), key, node.value)
        return ast.copy_location(ast.Expr(call), node)

    def visit_AugAssign(self, node: ast.AugAssign):
        """``y[k] += v`` (``y`` a name) as ``_tj_aug(y, k, "+=", v)``: the same reads and
        write, in place, with the element read going through ``_tj_getitem``."""
        self.generic_visit(node)
        t = node.target
        if self.scope or not (isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)):
            return node
        op = _AUG.get(type(node.op))
        if op is None:
            return node
        key = t.slice
        key = (ast.Tuple([self._slice_value(e) for e in key.elts], ast.Load())
               if isinstance(key, ast.Tuple) else self._slice_value(key))  # fmt: skip
        call = _call("_tj_aug", ast.Name(t.value.id, ast.Load()), key, ast.Constant(op), node.value)
        return ast.copy_location(ast.Expr(call), node)

    def visit_Call(self, node: ast.Call):
        self.generic_visit(node)
        if (isinstance(node.func, ast.Name) and node.func.id == "int" and len(node.args) == 1
                and not node.keywords and not self.scope and "int" not in self.locals):  # fmt: skip
            return ast.copy_location(_call("_tj_to_int", node.args[0]), node)
        if (isinstance(node.func, ast.Name) and node.func.id == "sum" and 1 <= len(node.args) <= 2
                and not node.keywords and not self.scope and "sum" not in self.locals
                and not any(isinstance(a, ast.Starred) for a in node.args)):  # fmt: skip
            return ast.copy_location(_call("_tj_sum", *node.args), node)
        if (isinstance(node.func, ast.Name) and node.func.id in ("max", "min")
                and len(node.args) == 2 and not node.keywords and not self.scope
                and node.func.id not in self.locals
                and not any(isinstance(a, ast.Starred) for a in node.args)):  # fmt: skip
            return ast.copy_location(_call(f"_tj_{node.func.id}2", *node.args), node)
        return node

    def _test(self, e: ast.expr) -> ast.expr:
        """A condition with ``and``/``or``/``not``/chained comparisons as operator calls."""
        if isinstance(e, ast.BoolOp):
            fn = "_tj_and" if isinstance(e.op, ast.And) else "_tj_or"
            return ast.copy_location(_call(fn, *(_thunk(self._test(v)) for v in e.values)), e)
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
            return ast.copy_location(_call("_tj_not", self._test(e.operand)), e)
        if isinstance(e, ast.Compare) and len(e.ops) > 1:
            parts, left = [], e.left
            for op, right in zip(e.ops, e.comparators):
                parts.append(ast.Compare(copy.deepcopy(left), [op], [right]))
                left = right
            return ast.copy_location(_call("_tj_and", *(_thunk(p) for p in parts)), e)
        return e

    def visit_IfExp(self, node: ast.IfExp):
        self.generic_visit(node)
        if self.scope or _nested_scopes(node.body) or _nested_scopes(node.orelse):
            return node
        names = sorted((reads(node.body) | reads(node.orelse)) & self.locals)
        fn = lambda e: ast.Lambda(_args(names), e)  # noqa: E731
        call = _call("_tj_ifexp", self._test(node.test), fn(node.body), fn(node.orelse),
                     _getters(names), ast.Constant(node.lineno))  # fmt: skip
        return ast.copy_location(call, node)

    # -- branches ---------------------------------------------------------------------------
    def _branch_ok(self, stmts: list[ast.stmt]) -> str | None:
        """Why a branch ``stmts`` cannot be converted to a select, or ``None``."""
        for st in stmts:
            if isinstance(st, ast.Pass):
                continue
            if isinstance(st, ast.If):
                why = self._branch_ok(st.body) or self._branch_ok(st.orelse)
                if why:
                    return why
                continue
            if isinstance(st, ast.Assign):
                if not all(_simple_store(t) for t in st.targets):
                    return "it stores into an attribute or a nested element"
            elif isinstance(st, (ast.AugAssign, ast.AnnAssign)):
                if not _simple_store(st.target) or getattr(st, "value", 1) is None:
                    return "it stores into an attribute or a nested element"
            else:
                kind = _STATEMENT.get(type(st), type(st).__name__)
                return f"it has a {kind} (a branch converts when it only assigns)"
            for n in ast.walk(st):
                if _mutating_call(n):
                    return f"it calls .{n.func.attr}(), which changes an object"
                if isinstance(n, (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await)):
                    return f"it has a {type(n).__name__}"
        return None

    def visit_If(self, node: ast.If):
        why = self._branch_ok(node.body) or self._branch_ok(node.orelse)
        ok = why is None
        after = self.live.live_after(node)
        assigned = modified(node.body) | modified(node.orelse)
        written = _element_writes(node.body + node.orelse)
        read = set().union(*(reads(s) for s in node.body + node.orelse)) if ok else set()
        node.body = self._stmts(node.body) or [ast.Pass()]
        node.orelse = self._stmts(node.orelse)
        test = self.visit(node.test)
        if not ok:  # a guard where the test is traced: say why
            self.kept += 1
            node.test = _call("_tj_kept", ast.Constant(node.lineno), ast.Constant(why),
                              self._test(test))  # fmt: skip
            return _located([node], node)[0]
        k = self.count
        self.count += 1
        self.branches += 1
        outs = sorted((assigned & after) | written)  # (written in place: other names may see it)
        params = sorted((read | set(outs)) & self.locals)
        ret = ast.Return(_tuple(outs, ast.Load))
        then = ast.FunctionDef(f"_tj_then_{k}", _args(params), [*node.body, ret], [], None, None)
        other = ast.FunctionDef(f"_tj_else_{k}", _args(params),
                                [*node.orelse, copy.deepcopy(ret)], [], None, None)  # fmt: skip
        inplace = tuple((j, params.index(n)) for j, n in enumerate(outs) if n in written)
        call = _call("_tj_if_stmt", self._test(test), _name(then.name), _name(other.name),
                     _getters(params), ast.Constant(node.lineno), ast.Constant(inplace),
                     ast.Constant(bool(getattr(node, "_tj_returns", False))))  # fmt: skip
        use = ast.Assign([_tuple(outs, ast.Store)], call) if outs else ast.Expr(call)
        return _located([then, other, use], node)

    # -- loops ------------------------------------------------------------------------------
    def _loop_ok(self, node: ast.For) -> str | None:
        """Why loop ``node`` cannot be converted, or ``None``."""
        why = loop_shape_ok(node)
        if why is None and target_names(node.target) & self.live.always:
            return ("the loop variable is read in a lambda, nested function or generator "
                    "expression, which may run after the loop (a list comprehension, "
                    "[... for ...], runs where it stands)")
        if why is None and target_names(node.target) & self.live.live_after(node):
            return "the loop variable is read after the loop"
        return why

    def visit_For(self, node: ast.For):
        why = self._loop_ok(node)
        ok = why is None
        if ok:
            assigned = modified(node.body)
            carried = assigned & (self.live.exposed(node.body) | self.live.live_after(node))
            carried -= target_names(node.target)
            written = _element_writes(node.body)
        node.body = self._stmts(node.body) or [ast.Pass()]
        node.iter = self.visit(node.iter)
        node.orelse = self._stmts(node.orelse)
        if not ok:
            self.kept += 1
            note = ast.Expr(_call("_tj_kept", ast.Constant(node.lineno), ast.Constant(why)))
            return _located([note], node) + [node]
        k = self.count
        self.count += 1
        self.loops += 1
        names = sorted(carried)
        apps = getattr(node, "_tj_appends", [])  # (list, output) pairs: see .appends
        outs = [*names, *(out for _, out in apps)]
        bind = ast.Assign([node.target], _name("_tj_item"))
        body = ast.FunctionDef(f"_tj_loop_{k}", _args(["_tj_item", *names]),
                               [bind, *node.body, ast.Return(_tuple(outs, ast.Load))],
                               [], None, None)  # fmt: skip
        inplace = tuple(k for k, n in enumerate(names) if n in written)
        call = _call("_tj_for_stmt", self._iterable(node.iter), _name(body.name),
                     _getters(names), ast.Constant(node.lineno),
                     ast.Constant(inplace), ast.Constant(len(apps)))  # fmt: skip
        rows = [f"_tj_rows_{lst}" for lst, _ in apps]
        targets = [*names, *rows]
        use = ast.Assign([_tuple(targets, ast.Store)], call) if targets else ast.Expr(call)
        extend = [ast.Expr(ast.Call(ast.Attribute(_name(lst), "extend", ast.Load()),
                                    [_name(r)], [])) for (lst, _), r in zip(apps, rows)]  # fmt: skip
        return _located([body, use, *extend], node)

    @staticmethod
    def _iterable(it: ast.expr) -> ast.expr:
        """``range``/``enumerate``/``zip`` calls as the operators that keep their operands."""
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and not it.keywords:
            table = {"range": "_tj_range", "enumerate": "_tj_enumerate", "zip": "_tj_zip"}
            if it.func.id in table and not any(isinstance(a, ast.Starred) for a in it.args):
                return ast.copy_location(ast.Call(_name(table[it.func.id]), it.args, []), it)
        return it


def loop_shape_ok(node: ast.For) -> str | None:
    """Why loop ``node`` cannot be converted, from its own statements (not what is read after
    it), or ``None``."""
    if node.orelse:
        return "the loop has an else clause"
    if not _simple_store(node.target) or any(
        isinstance(t, ast.Subscript) for t in ast.walk(node.target)
    ):
        return "its target is not a name or a tuple of names"
    for st in node.body:
        for n in _walk_own(st):
            if isinstance(n, ast.FunctionDef) and not n.name.startswith("_tj_"):
                return "its body defines a function"
            if isinstance(n, _NOT_IN_BODY):
                return f"its body has a {_STATEMENT.get(type(n), type(n).__name__)}"
            if isinstance(n, ast.Continue):
                return "a continue that does not end a branch"
            if _mutating_call(n):
                if n.func.attr == "append" and isinstance(n.func.value, ast.Name):
                    L = n.func.value.id
                    return (f"its body calls {L}.append(), and the loop cannot own {L} (it "
                            f"converts with one {L}.append(v) per iteration at the body's top "
                            f"level, {L} read only as {L}[-1], a list the function made and "
                            "never shares, and no break)")  # fmt: skip
                return f"its body calls .{n.func.attr}(), which changes an object"
            if isinstance(n, (ast.Attribute, ast.Subscript)) and isinstance(n.ctx, ast.Store):
                if not (isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name)):
                    return "its body stores into an attribute or a nested element"
            if isinstance(n, ast.While):
                return "its body has a while loop"
    return None


def _element_writes(stmts: list[ast.stmt]) -> set[str]:
    """Names whose elements ``stmts`` write (``y[i] = v``, ``y[i] += v``): changed in place."""
    return {n.value.id for st in stmts for n in ast.walk(st)
            if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store)
            and isinstance(n.value, ast.Name)}  # fmt: skip


def _walk_own(node: ast.AST):
    """``ast.walk`` that does not enter lambdas or the functions an earlier rewrite made
    (``_tj_...``: the capture's loop bodies, whose ``return`` is their own)."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        if isinstance(n, ast.Lambda) or (isinstance(n, ast.FunctionDef)
                                         and n.name.startswith("_tj_")):  # fmt: skip
            continue
        todo.extend(ast.iter_child_nodes(n))


_STATEMENT = {ast.Return: "return", ast.Raise: "raise", ast.Break: "break",
              ast.Continue: "continue", ast.Expr: "call or expression statement",
              ast.For: "for loop", ast.While: "while loop", ast.Try: "try statement",
              ast.With: "with statement", ast.Delete: "del statement", ast.Yield: "yield",
              ast.Global: "global statement", ast.Nonlocal: "nonlocal statement",
              ast.Import: "import", ast.ImportFrom: "import", ast.Await: "await",
              ast.ClassDef: "class definition", ast.NamedExpr: "walrus (:=)"}  # fmt: skip

_AUG = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**",
        ast.FloorDiv: "//", ast.Mod: "%"}  # fmt: skip


def _located(stmts: list[ast.stmt], where: ast.stmt) -> list[ast.stmt]:
    """``stmts`` with every new node at ``where``'s line (errors name the user's line)."""
    for st in stmts:
        ast.copy_location(st, where)
        for n in ast.walk(st):
            if getattr(n, "lineno", None) is None:
                ast.copy_location(n, where)
        ast.fix_missing_locations(st)
    return stmts


#: Built-ins the rewrite replaces by operators: a function that binds one of these names keeps
#: its statements as written.
_BUILTINS_USED = frozenset({"range", "enumerate", "zip", "slice", "int", "max", "min", "sum"})


def _returns_in(node: ast.AST) -> bool:
    """Whether ``node`` holds a ``return`` of the function (not of a nested one)."""
    todo = [node]
    while todo:
        n = todo.pop()
        if isinstance(n, ast.Return):
            return True
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        todo.extend(ast.iter_child_nodes(n))
    return False


def _ends_in_return(block: list[ast.stmt]) -> bool:
    if not block:
        return False
    last = block[-1]
    if isinstance(last, ast.Return):
        return True
    return isinstance(last, ast.If) and _ends_in_return(last.body) and _ends_in_return(last.orelse)


def _assign_returns(stmts: list[ast.stmt], budget: list[int]) -> list[ast.stmt] | None:
    """``stmts`` (a block ending the function) with every ``return v`` as ``_tj_ret = v`` and
    the statements after an ``if`` that returns on one side moved into its other side (falling
    off the end: ``_tj_ret = None``); ``None`` when a return sits in a loop, ``try`` or
    ``with``, or the copies grow past ``budget``."""
    out: list[ast.stmt] = []
    for k, st in enumerate(stmts):
        if isinstance(st, ast.Return):
            value = st.value if st.value is not None else ast.Constant(None)
            out.append(ast.copy_location(ast.Assign([ast.Name("_tj_ret", ast.Store())], value), st))
            return out
        if isinstance(st, ast.If) and _returns_in(st):
            rest = stmts[k + 1 :]
            budget[0] -= len(rest) * (2 - _ends_in_return(st.body) - _ends_in_return(st.orelse))
            if budget[0] < 0:
                return None
            body = _assign_returns(st.body + ([] if _ends_in_return(st.body) else rest), budget)
            other = _assign_returns(st.orelse + ([] if _ends_in_return(st.orelse) else rest),
                                    budget)  # fmt: skip
            if body is None or other is None:
                return None
            branch = ast.copy_location(ast.If(st.test, body, other), st)
            branch._tj_returns = True  # (a guard at the top level, a select in a loop body)
            out.append(branch)
            return out
        if _returns_in(st):
            return None
        out.append(st)
    out.append(ast.Assign([ast.Name("_tj_ret", ast.Store())], ast.Constant(None)))
    return out


def _single_return(fn: ast.FunctionDef) -> None:
    """``fn`` with its early returns from branches (``if r2 > rc2: return 0.0``) as one
    return at the end, so that the branches only assign and may become selects."""
    body = fn.body
    if not any(isinstance(st, ast.If) and _returns_in(st) for st in body):
        return
    new = _assign_returns(body, [4 * sum(1 for _ in ast.walk(fn))])
    if new is None:
        return
    ret = ast.Return(ast.Name("_tj_ret", ast.Load()))
    fn.body = [*new, ast.copy_location(ret, body[-1])]
    ast.fix_missing_locations(fn)


def convert(fn: ast.FunctionDef, locals_: set[str]) -> int:
    """Rewrite ``fn`` in place; returns how many loops and branches were converted or kept
    with a note (a function with either runs rewritten: the notes reach ``stats``). Builtins
    shadowed by the function's own names (``range = ...``) keep the statement as written."""
    if any(isinstance(n, (ast.Global, ast.Nonlocal)) for n in ast.walk(fn)):
        return 0
    cv = Converter(fn, locals_)
    if cv.locals & _BUILTINS_USED:
        return 0
    cv.visit(fn)
    return cv.count + cv.kept
