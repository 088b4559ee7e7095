"""Live names after each statement of a function: the data-flow analysis the conversion of
loops and branches needs (a loop carries, and a branch outputs, only what is read later).

Classic backward liveness over the statement tree (Aho, Lam, Sethi & Ullman, *Compilers*,
2nd ed., 9.2.5), conservative wherever Python is dynamic: a name read anywhere inside a nested
function, lambda, class or generator expression is live everywhere (it may be read whenever
the closure runs; a list, set or dict comprehension reads where it stands, and so does a
generator expression that ``sum``, ``min``, ``list``... consume at once);
``break``/``continue`` are treated as falling through (a larger live set, never a
smaller one); ``try``/``with`` blocks kill nothing.
"""

from __future__ import annotations

import ast

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp,
           ast.SetComp, ast.DictComp, ast.GeneratorExp)  # fmt: skip


#: Scopes that run to completion where they stand: a list, set or dict comprehension reads the
#: enclosing names when its statement runs, never later (a generator expression may be consumed
#: after the loop: it stays live everywhere, as functions and lambdas do).
_EAGER = (ast.ListComp, ast.SetComp, ast.DictComp)


#: Builtins that consume a generator expression passed as their only argument before they
#: return (``sum(x[t, k] for k in range(3))``): the generator runs where the call stands.
CONSUMERS = frozenset({"sum", "min", "max", "any", "all", "list", "tuple", "sorted", "set"})


def eager_generators(fn: ast.AST) -> set[int]:
    """Ids of the generator expressions in ``fn`` that run where they stand: the only argument
    of a call to one of :data:`CONSUMERS` that ``fn`` does not rebind (a local ``sum`` may keep
    the generator)."""
    local = modified(fn.body) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) else set()
    args = getattr(fn, "args", None)
    if isinstance(args, ast.arguments):
        every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
        local |= {a.arg for a in every if a is not None}
    out: set[int] = set()
    for n in ast.walk(fn):
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in CONSUMERS
                and n.func.id not in local and len(n.args) == 1 and not n.keywords
                and isinstance(n.args[0], ast.GeneratorExp)):  # fmt: skip
            out.add(id(n.args[0]))
    return out


def reads(node: ast.AST | None) -> set[str]:
    """Every name ``node`` loads: its own, and those a nested function, lambda or comprehension
    in it reads from outside (not the names such a scope binds: ``lambda i: i`` reads no
    ``i``)."""
    if node is None:
        return set()
    out: set[str] = set()
    todo = [node]
    while todo:
        n = todo.pop()
        if n is not node and isinstance(n, _SCOPES):
            out |= free_reads(n)
            continue
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            out.add(n.id)
        todo.extend(ast.iter_child_nodes(n))
    return out


def _generated_scopes(fn: ast.AST) -> set[int]:
    """Nested scopes an earlier rewrite made and calls at once (``_tj_...`` functions, lambdas
    passed to ``_tj_...`` calls): their reads count where they stand, not everywhere."""
    out: set[int] = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.FunctionDef) and n.name.startswith("_tj_"):
            out.add(id(n))
        elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
              and n.func.id.startswith("_tj_")):  # fmt: skip
            out.update(id(a) for a in n.args if isinstance(a, ast.Lambda))
    return out


def free_reads(scope: ast.AST) -> set[str]:
    """Names a nested scope reads that it does not bind itself (its parameters, the names it
    assigns, a comprehension's targets): those of the enclosing function it may read."""
    bound: set[str] = set()
    args = getattr(scope, "args", None)
    if isinstance(args, ast.arguments):
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if a is not None:
                bound.add(a.arg)
    for n in ast.walk(scope):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            bound.add(n.id)
        elif isinstance(n, ast.arg):
            bound.add(n.arg)
    # evaluated where the scope stands, not in it: defaults, decorators, a class's bases, a
    # comprehension's first iterable
    outside: list[ast.AST] = []
    if isinstance(args, ast.arguments):
        outside += [*args.defaults, *(d for d in args.kw_defaults if d is not None)]
    outside += [*getattr(scope, "decorator_list", []), *getattr(scope, "bases", [])]
    gens = getattr(scope, "generators", None)
    if gens:
        outside.append(gens[0].iter)
    skip = {id(n) for n in outside}
    inner: set[str] = set()
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        c = todo.pop()
        if id(c) in skip:
            continue
        if isinstance(c, (ast.arguments, ast.comprehension)):
            todo.extend(ast.iter_child_nodes(c))
            continue
        inner |= reads(c)
    return (inner - bound) | set().union(*(reads(n) for n in outside))


def target_names(t: ast.AST) -> set[str]:
    """Names a store target binds (``a``, ``a, (b, c)``, ``*rest``); not subscript bases."""
    if isinstance(t, ast.Name):
        return {t.id}
    if isinstance(t, (ast.Tuple, ast.List)):
        return set().union(*(target_names(e) for e in t.elts)) if t.elts else set()
    if isinstance(t, ast.Starred):
        return target_names(t.value)
    return set()


def modified(stmts: list[ast.stmt]) -> set[str]:
    """Names a statement list assigns or updates in place (``y[i] = v`` modifies ``y``), not
    looking into nested scopes."""
    out: set[str] = set()
    for st in stmts:
        for n in _walk_local(st):
            if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
                out.add(n.id)
            elif isinstance(n, (ast.Subscript, ast.Attribute)) and isinstance(n.ctx, ast.Store):
                base = n.value
                while isinstance(base, (ast.Subscript, ast.Attribute)):
                    base = base.value
                if isinstance(base, ast.Name):
                    out.add(base.id)
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(n.name)
    return out


def _walk_local(node: ast.AST):
    """``ast.walk`` that does not enter nested scopes (their own names are not ours)."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        for c in ast.iter_child_nodes(n):
            if isinstance(c, _SCOPES):
                if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    yield c
                continue
            todo.append(c)


class Liveness:
    """``after[id(stmt)]``: the names live after ``stmt``, for every statement of ``fn``."""

    def __init__(self, fn: ast.FunctionDef):
        self.after: dict[int, frozenset[str]] = {}
        self.always: set[str] = set()
        #: ids of the generator expressions that run where they stand (:func:`eager_generators`)
        self.eager = eager_generators(fn)
        generated = _generated_scopes(fn) | self.eager
        for n in ast.walk(fn):
            if isinstance(n, _EAGER):
                continue  # run where it stands: its reads are counted there (a lambda in it is not)
            if n is not fn and isinstance(n, _SCOPES) and id(n) not in generated:
                self.always |= free_reads(n)
        self.block(fn.body, set(), record=True)

    def live_after(self, st: ast.stmt) -> frozenset[str]:
        return self.after.get(id(st), frozenset()) | frozenset(self.always)

    def exposed(self, stmts: list[ast.stmt]) -> set[str]:
        """Names ``stmts`` may read before assigning them (live on entry with nothing after)."""
        return self.block(stmts, set(), record=False)

    def block(self, stmts: list[ast.stmt], live_out: set[str], record: bool) -> set[str]:
        live = set(live_out)
        for st in reversed(stmts):
            if record:
                self.after[id(st)] = frozenset(live)
            live = self.stmt(st, live, record)
        return live

    def stmt(self, st: ast.stmt, out: set[str], record: bool) -> set[str]:
        if isinstance(st, ast.If):
            return (reads(st.test) | self.block(st.body, out, record)
                    | self.block(st.orelse, out, record))  # fmt: skip
        if isinstance(st, (ast.For, ast.AsyncFor, ast.While)):
            after = out | self.block(st.orelse, out, record)
            head = set(after)
            kill = target_names(st.target) if not isinstance(st, ast.While) else set()
            test = reads(st.test) if isinstance(st, ast.While) else set()
            for _ in range(len(st.body) + 8):  # to the fixed point (a few rounds)
                new = after | test | (self.block(st.body, head, False) - kill)
                if new == head:
                    break
                head = new
            if record:
                self.block(st.body, head, True)
            return head | (reads(st.iter) if not isinstance(st, ast.While) else set())
        if isinstance(st, (ast.Try, ast.With, ast.AsyncWith)) or type(st).__name__ == "TryStar":
            return out | reads(st) | self._record_inner(st, out, record)
        if isinstance(st, (ast.Return, ast.Raise)):
            return reads(st)
        if isinstance(st, ast.Assign):
            kill = set().union(*(target_names(t) for t in st.targets))
            return (out - kill) | reads(st)
        if isinstance(st, ast.AnnAssign):
            kill = target_names(st.target) if st.value is not None else set()
            return (out - kill) | reads(st)
        if isinstance(st, ast.AugAssign):
            return out | reads(st) | target_names(st.target)
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            # evaluated where the definition stands: decorators, defaults, bases, annotations
            heads = [*st.decorator_list, *getattr(st, "bases", []),
                     *(k.value for k in getattr(st, "keywords", []))]  # fmt: skip
            if not isinstance(st, ast.ClassDef):
                heads += [*st.args.defaults, *(d for d in st.args.kw_defaults if d is not None)]
            deco = set().union(*(reads(d) for d in heads)) if heads else set()
            if st.name.startswith("_tj_"):  # a rewrite's body, called right after: reads here
                deco |= free_reads(st)
            return (out - {st.name}) | deco
        if isinstance(st, (ast.Import, ast.ImportFrom)):
            return out - {(a.asname or a.name).split(".")[0] for a in st.names}
        return out | reads(st)

    def _record_inner(self, st: ast.stmt, out: set[str], record: bool) -> set[str]:
        """Inner blocks of a try/with, recorded with everything they read live after them."""
        if not record:
            return set()
        live = out | reads(st)
        for field in ("body", "orelse", "finalbody"):
            self.block(getattr(st, field, []) or [], live, True)
        for h in getattr(st, "handlers", []) or []:
            self.block(h.body, live, True)
        return set()
