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
:data:`MAX_PERIOD` consecutive guards (``lo < x[i] < hi`` has two), all of one source line,
whose conditions are the same elementwise expression of the same leaves (nodes computed before
the loop, constants, element reads whose position moves by a step — ``x[a + b*k]`` — or by any
row of the array's first axis — ``x[idx[k]]``, read through a table of the rows — and numbers
that differ per iteration: a table) — by **one vector guard**: the conditions computed for
every iteration at once (``lt(x[0:T], 0.0)``, a fused vector kernel; with several guards an
iteration, interleaved iteration by iteration), checked element by element against each
guard's own outcome (one for all, or a tuple of one per element), element ``t`` numbered as
guard ``first + t`` was. So a failure reports the guard the unrolled code would have, and a
retrace that forces its outcome finds it (``tapejit.runtime.dispatch``). The same IEEE
operations on the same values give the same outcomes. The loop itself then re-rolls like any
other (:mod:`tapejit.passes.reroll.driver`; iterations of mixed branches of a sum:
:mod:`tapejit.passes.reroll.sums`): its nodes are no longer read by a guard.

Not rolled (left as they are): conditions that read a loop-carried value (``if e > 1.0`` for
a running ``e``; the walk also gives up after :data:`MAX_COND` nodes), reads that move in
other ways (``x[i, idx[i]]``), and runs shorter than :data:`MIN_RUN` iterations.
"""

from __future__ import annotations

import struct
from typing import Callable

from ...core import ir, ops, ops_table
from ...core.ir import Graph, Node
from ...core.ops import Op
from .common import MIN_RUN, _scanned, _split_items

#: Most node pairs compared when matching one guard's condition against the reference.
MAX_COND = 64


class _NoMatch(Exception):
    pass


class _Leaves:
    """What the reference condition's leaves are, learnt while matching guard ``m`` of the run
    (``m = 1, 2, ...``) against guard 0: ``reads[id(R)]``, the integers of an element read
    ``R``'s index in each guard so far (:meth:`moves` says how they move); ``tables[id(R)]``,
    the values of an f64 constant in each guard so far (one that never differs stays the
    constant); ``same``, nodes that are the very same in every guard; ``inner``, the
    elementwise nodes in between."""

    def __init__(self, ref: Node):
        self.ref = ref
        self.nodes: dict[int, Node] = {}  # id -> reference node
        self.reads: dict[int, list[tuple[int, ...]]] = {}
        self.tables: dict[int, list[float]] = {}
        self.same: set[int] = set()
        self.inner: set[int] = set()
        self.moving: dict[int, object] = {}  # read id -> how it moves so far (_advance)
        self.patterns: dict[int, tuple] = {}  # read id -> (_split_items, _rows) of it

    def match(self, N: Node) -> dict | None:
        """How condition ``N`` pairs with the reference — its element reads' integers and its
        constants noted — or ``None`` if it does not."""
        env: dict[int, Node] = {}
        kind: dict[int, str] = {}
        ints: dict[int, tuple[int, ...]] = {}
        values: dict[int, float] = {}
        log: list[int] = []  # reference ids paired, in order (undone on a failed pairing)
        budget = [MAX_COND]
        patterns = self.patterns
        reads, moving = self.reads, self.moving
        elementwise, commutative = ops.ELEMENTWISE, ir.commutative
        CONST, INDEX = Op.CONST, Op.INDEX

        def pair(R: Node, N: Node) -> None:
            key = id(R)
            got = env.get(key)
            if got is not None:
                if got is not N:
                    raise _NoMatch
                return
            budget[0] -= 1
            if budget[0] < 0 or R.type != N.type or R.shape != ():
                raise _NoMatch
            env[key] = N
            log.append(key)
            self.nodes[key] = R
            if R.op == CONST and R.dtype == "f64":  # a number: the same, or a table
                if N.op != CONST:
                    raise _NoMatch
                kind[key], values[key] = "table", N.attrs[0]
                return
            if R.op == INDEX and N.op == INDEX and N.args[0] is R.args[0]:
                # an element read, even of the same element: later ones may read others
                sr = patterns.get(key)
                if sr is None:
                    sr = patterns[key] = (_split_items(R.attrs), _rows(R))
                sn = _split_items(N.attrs)
                if sr[0] is None or sn is None or sr[0][0] != sn[0]:
                    raise _NoMatch
                seq = reads.get(key) or [sr[0][1]]
                if _advance(moving.get(key), seq[0], sn[1], len(seq), sr[1]) is None:
                    raise _NoMatch  # (of a commutative op's operands, the other pairing)
                kind[key], ints[key] = "read", sn[1]
                return
            if N is R:
                kind[key] = "same"
                return
            if (
                R.op != N.op
                or R.op not in elementwise
                or R.attrs != N.attrs
                or len(R.args) != len(N.args)
            ):
                raise _NoMatch
            kind[key] = "inner"
            ra, na = R.args, N.args
            if len(ra) == 2 and R.op in commutative and ra[0] is not ra[1]:
                mark, left = len(log), budget[0]
                try:
                    pair(ra[0], na[0])
                    pair(ra[1], na[1])
                    return
                except _NoMatch:
                    while len(log) > mark:  # forget the pairs of the failed order
                        k = log.pop()
                        env.pop(k, None)
                        kind.pop(k, None)
                        ints.pop(k, None)
                        values.pop(k, None)
                    budget[0] = left
                pair(ra[0], na[1])
                pair(ra[1], na[0])
                return
            for a, b in zip(ra, na):
                pair(a, b)

        try:
            pair(self.ref, N)
        except _NoMatch:
            return None
        return {"kind": kind, "ints": ints, "values": values}

    def commit(self, got: dict, m: int) -> bool:
        """Record guard ``m``'s leaves; ``False`` when a node's role differs from the earlier
        guards' (a node that was the same now differs) or a read stops moving in one of the
        ways :meth:`moves` knows."""
        kind, ints, values = got["kind"], got["ints"], got["values"]
        if m == 1:
            self.reads = {k: [_split_items(self.nodes[k].attrs)[1], v] for k, v in ints.items()}
            self.same = {k for k, v in kind.items() if v == "same"}
            self.inner = {k for k, v in kind.items() if v == "inner"}
            self.tables = {k: [self.nodes[k].attrs[0], v] for k, v in values.items()}
        else:
            if (
                ints.keys() != self.reads.keys()
                or values.keys() != self.tables.keys()
                or {k for k, v in kind.items() if v == "same"} != self.same
                or {k for k, v in kind.items() if v == "inner"} != self.inner
            ):
                return False
            for k, v in ints.items():
                self.reads[k].append(v)
            for k, v in values.items():
                self.tables[k].append(v)
        moving = {}
        for k in ints:
            seq = self.reads[k]
            how = _advance(self.moving.get(k), seq[0], seq[-1], len(seq) - 1, _rows(self.nodes[k]))
            if how is None:
                break
            moving[k] = how
        if len(moving) == len(ints):
            self.moving.update(moving)
            return True
        for k in ints:  # undo: the run ends before this guard
            self.reads[k].pop()
        for k in values:
            self.tables[k].pop()
        return False

    def moves(self, key: int):
        """How read ``key`` moves over the guards so far: its step (one axis moves by a fixed
        amount: a strided slice) or ``"rows"`` (through a table, ``take``); see
        :func:`_advance`."""
        return self.moving[key]


def _rows(R: Node) -> tuple:
    """The index pattern of element read ``R`` (``_split_items``) as :func:`_advance` takes it:
    empty — no rows through a table — for an array ``take`` cannot read (a bool mask)."""
    return _split_items(R.attrs)[0] if R.args[0].dtype == "f64" else ()


def _advance(how, first: tuple, ints: tuple, m: int, pattern: tuple):
    """How an element read moves once its ``m``-th guard reads ``ints`` (guard 0: ``first``;
    ``how``: how it moved before, ``None`` at ``m = 1``): a step (one axis moves by a fixed
    amount: a strided slice), ``"rows"`` (only its first integer, an index into the array's
    first axis, moves: rows through a table, ``take``), or ``None`` when it moves in neither
    way. O(1): the history is summed up in ``how``."""
    rows_ok = bool(pattern) and pattern[0] is None and ints[1:] == first[1:]
    if how is None or m == 1:
        step = tuple(b - a for a, b in zip(first, ints))
        if sum(d != 0 for d in step) == 1:
            return step
        return "rows" if rows_ok else None
    if how == "rows":
        return how if rows_ok else None
    if all(x - a == m * d for x, a, d in zip(ints, first, how)):
        return how
    # a step along the first axis alone: every earlier read had the first's other integers
    return "rows" if rows_ok and not any(how[1:]) else None


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
        out.append((vec, _outcomes(guards, j, end), guards[j][2]))
        rolled += end - j
        j = end
    if not rolled:
        return g, 0
    return g.replace(guards=tuple(out)), rolled


def _run_at(guards: list[tuple], j: int, p: int, table) -> tuple[int, Node | None]:
    """The end of the run of guards that starts at ``j`` with ``p`` guards an iteration, and
    its vector condition (element ``t * p + q``: guard ``q`` of iteration ``t``); ``(j,
    None)`` when fewer than :data:`MIN_RUN` iterations roll."""
    where = guards[j][2]
    refs = [c for c, _, _ in guards[j : j + p]]
    if len(refs) < p or any(
        c.shape != () or c.op in (Op.CONST, Op.INPUT) or w != where
        for c, _, w in guards[j : j + p]
    ):
        return j, None
    leaves = [_Leaves(c) for c in refs]
    T = 1
    while j + (T + 1) * p <= len(guards):
        done = []
        for q in range(p):
            c, _, w = guards[j + T * p + q]
            got = leaves[q].match(c) if w == where and c.shape == () else None
            if got is None or not leaves[q].commit(got, T):
                break
            done.append(q)
        if len(done) < p:
            for q in done:  # the iteration is not rolled: forget its guards' leaves
                for seq in (*leaves[q].reads.values(), *leaves[q].tables.values()):
                    seq.pop()
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


def _outcomes(guards: list[tuple], j: int, end: int) -> bool | tuple:
    """The outcome of guards ``j .. end - 1``: one, or a tuple of one per guard."""
    out = tuple(e for _, e, _ in guards[j:end])
    return out[0] if all(e == out[0] for e in out) else out


def _bits(v: float) -> bytes:
    return struct.pack("<d", v)


def _vectorised(ref: Node, leaves: _Leaves, T: int, table) -> Node:
    """The reference condition computed for all ``T`` guards at once: element reads scanned
    (``x[a + b*k]``, k < T, as one strided slice), per-guard numbers from a table, the rest
    as it is; shape ``(T,)``."""
    memo: dict[int, Node] = {}
    todo = [ref]
    while todo:  # the reference's inner nodes, operands first; leaves are not entered
        n = todo[-1]
        key = id(n)
        if key in memo:
            todo.pop()
            continue
        if key in leaves.reads:
            how = leaves.moves(key)
            if how == "rows":  # rows through a table, then the rest of the index
                rows = table(tuple(float(v[0]) for v in leaves.reads[key]))
                taken = ops_table.take(n.args[0], rows)
                rest = n.attrs[1:]
                memo[key] = ops.index(taken, ((0, T, 1), *rest)) if rest else taken
            else:
                memo[key], _ = _scanned(n.args[0], n.attrs, how, T)
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
