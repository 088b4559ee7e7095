"""Branches converted to selects (if-conversion): ``if``/``elif``/``else`` and ``a if c else
b`` on a traced scalar (:mod:`tapejit.frontend.convert`).

Both branches run, on their inputs *masked* by their condition — ``where(c, v,
stop_gradient(v))``: the value is ``v``, the cotangent ``where(c, ct, 0)`` — and each name they
assign is selected per element, so the compiled code does not depend on which way the data go,
and a branch not taken contributes exactly zero to every cotangent even where its own values or
derivatives are inf or NaN (JAX's "double where" problem, solved at the branch's inputs). Each
branch gets its own tracer objects (a write in place in one does not reach the other); index
checks and guards recorded while a branch is traced hold only where it is taken. Element writes
under a branch are pushed into the rows they write (:func:`_pushdown`). A pair whose values
cannot be selected (a name assigned on one side only, shapes or kinds that differ) falls back to
a guard: the branch the example input takes, as before conversion.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ...core import ops
from ...core.ir import Node
from ...core.ops import Op
from ...core.ops_table import add_at, put, take
from ..errors import TracingError
from ..trace_state import BodyTrace, _state
from ..tracer import Tracer, _build, _wrap, lift
from . import purity
from .common import (UNDEFINED, _aliased, _event, _logical, _mask, _note, _own, _read_only,
                     _rebind, _tracing, _unbound, under)  # fmt: skip


_NO = object()


def _numeric(v: Any) -> bool:
    if v.__class__ is Tracer:
        return True
    if isinstance(v, (bool, int, float, np.number, np.bool_)):
        return True
    return isinstance(v, np.ndarray) and v.dtype.kind in "fiub"


def _select(c: Tracer, a: Any, b: Any) -> Any:
    """The value of a name after the branch: ``a`` where ``c``, else ``b``; :data:`_NO` when
    the two cannot be selected elementwise."""
    if a is b:
        return a
    if a.__class__ is Tracer and b.__class__ is Tracer and a.node is b.node:
        return a  # unchanged on both sides
    if a is UNDEFINED or b is UNDEFINED:
        return _NO
    if not (_numeric(a) and _numeric(b)):
        try:
            return a if type(a) is type(b) and bool(a == b) else _NO
        except Exception:  # noqa: BLE001 - an object whose == is not a plain truth
            return _NO
    if np.shape(a) != np.shape(b):
        return _NO
    if a.__class__ is Tracer and b.__class__ is Tracer and a.node.type.size > 1:
        pushed = _pushdown(c, a, b)
        if pushed is not None:
            return pushed
    if a.__class__ is not Tracer and b.__class__ is not Tracer:
        if type(a) is type(b) and np.array_equal(a, b):
            return a
    ta, tb = lift(a), lift(b)
    if ta.node.dtype != tb.node.dtype:
        ta, tb = _build(ops._float, ta), _build(ops._float, tb)
    return _build(ops.where, c, ta, tb)


def if_stmt(test: Any, then: Callable, other: Callable, values: tuple, line: int,
            inplace: tuple = (), returns: bool = False) -> tuple:  # fmt: skip
    """``if test: then else: other`` over the names ``values`` (see the module docstring);
    ``inplace``: ``(output, value)`` positions of the names whose elements a branch writes;
    ``returns``: the branch was an early return (see below)."""
    if test.__class__ is not Tracer or not _tracing():
        try:
            return (then if test else other)(*values)
        except NameError as e:
            raise _unbound(e) from None
    why = purity.why_not(then, other)
    if returns and not isinstance(_state(), BodyTrace):
        # an early return (``if c: return a``): a guard where one is possible, as the code
        # reads — one specialisation per outcome — and a select in a loop body traced once
        why = "a branch that returns, outside a loop body"
    if not why and any(_aliased(values[k]) or _read_only(values[k]) for _, k in inplace):
        why = "an array a branch writes into is also reachable another way"
    if why:
        _note(line, f"only the branch taken may run: {why}")
        return (then if test else other)(*values)
    c = _logical(test)
    try:
        with under(c):
            out_t = then(*(_own(_mask(v, c)) for v in values))
        nc = ~c
        with under(nc):
            out_f = other(*(_own(_mask(v, nc)) for v in values))
        result = []
        for a, b in zip(out_t, out_f):
            a, b = _unmask(a, values, c), _unmask(b, values, nc)
            r = _select(c, a, b)
            if r is _NO:
                raise _Unselectable
            result.append(r)
        _event("branches", line)
        origin = {j: values[k] for j, k in inplace}
        return tuple(_rebind(origin[j], r) if j in origin else r for j, r in enumerate(result))
    except _Unselectable:
        _note(line, "the branches' values cannot be selected elementwise (a name assigned on "
                    "one side only, or values of different shapes or kinds)")  # fmt: skip
    except TracingError as e:
        _note(line, f"a branch cannot be traced on both sides: {e}")
    return (then if test else other)(*values)  # a guard: the branch this input takes


def _chain(n: Node) -> tuple[Node, list[Node]]:
    """The element writes (``put``/``add_at``) ``n`` is the last of, first first, and what the
    first writes into."""
    links = []
    while n.op in (Op.PUT, Op.ADD_AT):
        links.append(n)
        n = n.args[0]
    return n, links[::-1]


def _pushdown(c: Tracer, a: Tracer, b: Tracer) -> Tracer | None:
    """``where(c, a, b)`` for arrays that are element writes into the same array by either
    branch (``F[i] += f`` under an ``if``): the writes applied to that array with their rows
    selected — ``put(x, t, where(c, u, x[t]))``, ``add_at(x, t, where(c, u, 0))`` — so the
    select costs the rows written, not the whole array."""
    cn = lift(c).node
    ncn = lift(~c).node
    ra, la = _chain(a.node)
    rb, lb = _chain(b.node)
    if not (la or lb):
        return None

    def base(root: Node, links: list, cond: Node) -> Node | None:
        if not links:
            return root
        if (root.op == Op.WHERE and root.args[0] is cond and root.args[2].op == Op.STOP_GRADIENT
                and root.args[2].args[0] is root.args[1]):  # fmt: skip
            return root.args[1]
        return None

    x = base(ra, la, cn)
    if x is None or x is not base(rb, lb, ncn) or x.type != a.node.type:
        return None
    acc = x
    for cond, links in ((cn, la), (ncn, lb)):
        for w in links:
            t, u = w.args[1], w.args[2]
            if w.op == Op.PUT:
                acc = put(acc, t, ops.where(cond, u, take(acc, t)))
            else:
                acc = add_at(acc, t, ops.where(cond, u, ops.const(0.0, u.shape)))
    return _wrap(acc)


class _Unselectable(Exception):
    pass


def _unmask(v: Any, values: tuple, c: Tracer) -> Any:
    """A branch's output that is one of its (masked) inputs, as the unmasked input."""
    if v.__class__ is not Tracer or v.node.op != Op.WHERE:
        return v
    for orig in values:
        if orig.__class__ is Tracer and v.node.args[1] is lift(orig).node \
                and v.node.args[2].op == Op.STOP_GRADIENT:  # fmt: skip
            return orig
    return v


def ifexp(test: Any, then: Callable, other: Callable, values: tuple, line: int) -> Any:
    """``then(...) if test else other(...)``: :func:`if_stmt` of one value."""
    return if_stmt(test, lambda *v: (then(*v),), lambda *v: (other(*v),), values, line)[0]
    if purity.why_not(then, other):
        return (then if test else other)(*values)
    c = _logical(test)
    try:
        with under(c):
            a = then(*(_own(_mask(v, c)) for v in values))
        nc = ~c
        with under(nc):
            b = other(*(_own(_mask(v, nc)) for v in values))
        r = _select(c, _unmask(a, values, c), _unmask(b, values, nc))
        if r is not _NO:
            return r
    except TracingError:
        pass
    return (then if test else other)(*values)
