"""Re-rolling a Python loop's guards: a run of per-iteration guards becomes one vector guard.

Python control flow on a traced value inside an element loop — ``max(x[i], 0.0)``, ``if
x[i] > 0:``, ``if r2 < cutoff2:`` — leaves one *guard* per iteration in the trace (the
condition each iteration's branch relied on; generated code checks it on every call and
returns its number when it fails, see ``Graph.guards``)::

    guard 1: lt(x[0], 0.0) == False
    guard 2: lt(x[1], 0.0) == False
    ...

Such guards kept the loop unrolled (re-rolling must not lose a check). :func:`roll_guards`
replaces a run of them — at least :data:`MIN_RUN` iterations, each with up to
:data:`MAX_PERIOD` consecutive guards (``lo < x[i] < hi`` has two), all of one outcome and
source line, whose conditions are the same elementwise expression of the same leaves (nodes
computed before the loop, constants, element reads ``x[a + b*k]`` affine in the iteration
``k``, numbers that differ per iteration: a table) — by **one vector guard**: the conditions
computed for every iteration at once on the scanned sequences (``lt(x[0:T], 0.0)``, a fused
vector kernel; with several guards an iteration, interleaved iteration by iteration), checked
element by element, element ``t`` numbered as guard ``first + t`` was. So a failure reports
the guard the unrolled code would have, and a retrace that forces its outcome finds it
(``tapejit.runtime.dispatch``). The same IEEE operations on the same values give the same
outcomes. The loop itself then re-rolls like any other (:mod:`tapejit.passes.reroll`): its
nodes are no longer read by a guard.

Not rolled (left as they are): conditions that read a loop-carried value (``if e > 1.0`` for
a running ``e``; the walk also gives up after :data:`MAX_COND` nodes) or an array other than
by an affine scalar element read, and runs whose outcomes or source lines differ (``relu`` of
mixed signs rolls only the stretches of one sign).
"""

from __future__ import annotations

import struct
from typing import Callable

from .. import ir, ops
from ..ir import Graph, Node
from ..ops import Op
from .reroll_match import MIN_RUN, _split_items

#: Most node pairs compared when matching one guard's condition against the reference.
MAX_COND = 64


class _NoMatch(Exception):
    pass


class _Leaves:
    """What the reference condition's leaves are, learnt while matching guard ``m`` of the run
    (``m = 1, 2, ...``) against guard 0: ``reads[id(R)]``, the per-position step of an element
    read ``R``; ``tables[id(R)]``, the values of an f64 constant in each guard so far (one
    that never differs stays the constant); ``same``, nodes that are the very same in every
    guard; ``inner``, the elementwise nodes in between."""

    def __init__(self, ref: Node):
        self.ref = ref
        self.nodes: dict[int, Node] = {}  # id -> reference node
        self.reads: dict[int, tuple[int, ...]] = {}
        self.tables: dict[int, list[float]] = {}
        self.same: set[int] = set()
        self.inner: set[int] = set()

    def match(self, N: Node, m: int) -> dict | None:
        """How condition ``N`` (guard ``m`` of the run) pairs with the reference — its element
        reads moved ``m`` steps, its constants noted — or ``None`` if it does not."""
        env: dict[int, Node] = {}
        kind: dict[int, str] = {}
        steps: dict[int, tuple[int, ...]] = {}
        values: dict[int, float] = {}
        budget = [MAX_COND]

        def pair(R: Node, N: Node) -> None:
            got = env.get(id(R))
            if got is not None:
                if got is not N:
                    raise _NoMatch
                return
            budget[0] -= 1
            if budget[0] < 0 or R.type != N.type or R.shape != ():
                raise _NoMatch
            env[id(R)] = N
            self.nodes[id(R)] = R
            if R.op == Op.CONST and R.dtype == "f64":  # a number: the same, or a table
                if N.op != Op.CONST:
                    raise _NoMatch
                kind[id(R)], values[id(R)] = "table", N.attrs[0]
                return
            if N is R:
                kind[id(R)] = "same"
                return
            if R.op == Op.INDEX and N.op == Op.INDEX and N.args[0] is R.args[0]:
                sr, sn = _split_items(R.attrs), _split_items(N.attrs)
                if sr is None or sn is None or sr[0] != sn[0]:
                    raise _NoMatch
                diff = tuple(b - a for a, b in zip(sr[1], sn[1]))
                if any(d % m for d in diff):
                    raise _NoMatch
                step = tuple(d // m for d in diff)
                if sum(s != 0 for s in step) != 1:
                    raise _NoMatch  # one axis moves
                kind[id(R)], steps[id(R)] = "read", step
                return
            if (
                R.op != N.op
                or R.op not in ops.ELEMENTWISE
                or R.attrs != N.attrs
                or len(R.args) != len(N.args)
            ):
                raise _NoMatch
            kind[id(R)] = "inner"
            ra, na = R.args, N.args
            if len(ra) == 2 and R.op in ir.commutative and ra[0] is not ra[1]:
                saved = dict(env), dict(kind), dict(steps), dict(values), budget[0]
                try:
                    pair(ra[0], na[0])
                    pair(ra[1], na[1])
                    return
                except _NoMatch:
                    for d, old in zip((env, kind, steps, values), saved):
                        d.clear()
                        d.update(old)
                    budget[0] = saved[4]
                pair(ra[0], na[1])
                pair(ra[1], na[0])
                return
            for a, b in zip(ra, na):
                pair(a, b)

        try:
            pair(self.ref, N)
        except _NoMatch:
            return None
        return {"kind": kind, "steps": steps, "values": values}

    def commit(self, got: dict, m: int) -> bool:
        """Record guard ``m``'s leaves; ``False`` when a node's role differs from the earlier
        guards' (a read that moves by another step, a node that was the same now differs)."""
        kind, steps, values = got["kind"], got["steps"], got["values"]
        if m == 1:
            self.reads = dict(steps)
            self.same = {k for k, v in kind.items() if v == "same"}
            self.inner = {k for k, v in kind.items() if v == "inner"}
            self.tables = {k: [self.nodes[k].attrs[0], v] for k, v in values.items()}
            return True
        if (
            steps != self.reads
            or values.keys() != self.tables.keys()
            or {k for k, v in kind.items() if v == "same"} != self.same
            or {k for k, v in kind.items() if v == "inner"} != self.inner
        ):
            return False
        for k, v in values.items():
            self.tables[k].append(v)
        return True


#: Most guards an iteration (``lo < x[i] < hi``: two) whose numbers interleave in a run.
MAX_PERIOD = 4


def roll_guards(g: Graph, table: Callable[[tuple], Node]) -> tuple[Graph, int]:
    """``g`` with each run of guards that re-roll (see the module docstring) replaced by one
    vector guard, and how many guards were rolled. ``table(values)``: a constant f64 input
    holding ``values`` (a number that differs per guard)."""
    guards = list(g.guards)
    out: list[tuple] = []
    rolled, j = 0, 0
    while j < len(guards):
        end, vec = None, None
        for period in range(1, MAX_PERIOD + 1):
            end, vec = _run_at(guards, j, period, table)
            if vec is not None:
                break
        if vec is None:
            out.append(guards[j])
            j += 1
            continue
        out.append((vec, guards[j][1], guards[j][2]))
        rolled += end - j
        j = end
    if not rolled:
        return g, 0
    return g.replace(guards=tuple(out)), rolled


def _run_at(guards: list[tuple], j: int, p: int, table) -> tuple[int, Node | None]:
    """The end of the run of guards that starts at ``j`` with ``p`` guards an iteration, and
    its vector condition (element ``t * p + q``: guard ``q`` of iteration ``t``); ``(j,
    None)`` when fewer than :data:`MIN_RUN` iterations roll."""
    _, expected, where = guards[j]
    refs = [c for c, _, _ in guards[j : j + p]]
    if len(refs) < p or any(
        c.shape != () or c.op in (Op.CONST, Op.INPUT) or e != expected or w != where
        for c, e, w in guards[j : j + p]
    ):
        return j, None
    leaves = [_Leaves(c) for c in refs]
    T = 1
    while j + (T + 1) * p <= len(guards):
        ok = True
        for q in range(p):
            c, e, w = guards[j + T * p + q]
            if e != expected or w != where or c.shape != ():
                ok = False
                break
            got = leaves[q].match(c, T)
            if got is None or not leaves[q].commit(got, T):
                ok = False
                break
        if not ok:
            break
        T += 1
    if T < MIN_RUN:
        return j, None
    for lv in leaves:
        for k, seq in list(lv.tables.items()):
            if len({_bits(v) for v in seq}) == 1:  # the same number in every guard
                del lv.tables[k]
                lv.same.add(k)
    if not any(lv.reads or lv.tables for lv in leaves):
        return j, None  # the same conditions every time: nothing to roll
    vecs = [_vectorised(c, lv, T, table) for c, lv in zip(refs, leaves)]
    if p == 1:
        return j + T, vecs[0]
    vec = ops.const(False, (T * p,), "bool")  # interleaved: iteration by iteration
    for q, v in enumerate(vecs):
        vec = ops.make(Op.SCATTER, vec, v, attrs=((q, q + p * T, p),))
    return j + T * p, vec


def _bits(v: float) -> bytes:
    return struct.pack("<d", v)


def _vectorised(ref: Node, leaves: _Leaves, T: int, table) -> Node:
    """The reference condition computed for all ``T`` guards at once: element reads scanned
    (``x[a + b*k]``, k < T, as one strided slice), per-guard numbers from a table, the rest
    as it is; shape ``(T,)``."""
    from .reroll import _scanned  # reroll imports this module

    memo: dict[int, Node] = {}
    todo = [ref]
    while todo:  # the reference's inner nodes, operands first; leaves are not entered
        n = todo[-1]
        key = id(n)
        if key in memo:
            todo.pop()
            continue
        if key in leaves.reads:
            memo[key], _ = _scanned(n.args[0], n.attrs, leaves.reads[key], T)
        elif key in leaves.tables:
            memo[key] = table(tuple(leaves.tables[key]))
        elif key not in leaves.inner:
            memo[key] = n
        else:
            pending = [a for a in n.args if id(a) not in memo]
            if pending:
                todo.extend(pending)
                continue
            args = [memo[id(a)] for a in n.args]
            if all(a is b for a, b in zip(args, n.args)):
                memo[key] = n
            else:
                memo[key] = ops.make(n.op, *ops._bcast(*args), attrs=n.attrs)
        todo.pop()
    vec = memo[id(ref)]
    return vec if vec.shape == (T,) else ops.broadcast_to(vec, (T,))
