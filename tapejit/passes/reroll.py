"""Re-rolling: Python element loops, unrolled by tracing, rebuilt as ``loop`` nodes.

A Python ``for`` loop over the elements of an array arrives in the trace unrolled: one copy of
the loop body per iteration, chained through what the loop carries::

    e = 0.0
    for i in range(len(x) - 1):
        d = x[i + 1] - x[i]
        e = e + np.exp(-d * d)          # add(e_{k-1}, term_k): an add *chain*

    y = np.zeros_like(x)
    for i in range(len(x)):
        y[i] = x[i] * x[i]              # scatter(y_{k-1}, upd_k){k}: a scatter chain

so the graph, the passes, LLVM and the machine code all grow with the trip count. This pass
(run on the trace, before reverse mode; :func:`reroll`) finds such chains and rebuilds each run
of at least :data:`MIN_RUN` consecutive *isomorphic* iterations as one ``loop`` node — a
:class:`tapejit.ops.LoopSpec` with a body sub-graph, exactly what :func:`tapejit.fori_loop` and
:func:`tapejit.scan` build (loop-invariant code hoisted, the reverse-mode split made), so reverse
mode, the passes and codegen handle it unchanged.

**Chains.** A chain is a path ``c_0 -> c_1 -> ... -> c_m`` of nodes of one type, each an
operand of the next (the accumulator of ``scatter``/``scatter_add``): the carry of a loop, from
its initial value to its result. It is found by the longest path of same-typed nodes behind
each node (the carry's path goes back through every iteration, a term's stays within one). An
iteration spans ``p`` chain nodes (``e = e * 0.5 + t`` spans a ``mul`` and an ``add``;
``e = e + a + b`` two ``add``s): each period up to :data:`MAX_PERIOD` at which the chain's ops
repeat is tried, and each phase; iteration ``k`` computes ``c_{(k+1)p}`` from its carry
``c_{kp}``.

**Iterations.** Iteration ``k``'s sub-graph is what it computes above its carry. A template is
built by walking iterations ``s``, ``s+1`` and ``s+2`` in parallel (commutative operands in
either order, by backtracking: hash-consing orders them by digest, not as the user wrote them);
every further iteration is walked against it. The walk stops at *leaves*:

* ``carry`` — the previous chain node;
* ``same`` — the very same node in every iteration (a value computed before the loop, an input,
  a constant): a loop *param*;
* ``xs`` — ``index`` of one (same) array whose integer index is affine in the iteration number,
  ``x[a + b*k]`` (``x[i]``, ``x[i+1]``, ``x[n-1-i]``, ``x[2*i]``, ``x[i, 0]``, ``x[i, :]``; one
  varying axis): the loop reads it as a scanned sequence, the strided slice
  ``x[a : a+b*T : b]`` (moved to the front axis) built outside the loop;
* ``iconst`` — a scalar constant that is an integer affine in ``k`` (``i`` used as a number):
  computed in the body from the iteration index (exactly: integers below 2**52);
* ``rmw`` — in a scatter chain, a read of the carry at the very position the iteration writes
  (``y[i] += v`` traces to ``scatter(y, y[i] + v){i}``): it reads the initial array there.

Everything else must match node for node (op, attributes, type). A run is cut where an
iteration does not match, where an index is not affine, and where an iteration touches a node a
*guard* depends on (Python control flow on a traced value: those iterations stay unrolled, so
the guard keeps checking exactly what it checked). Runs shorter than :data:`MIN_RUN` stay
unrolled.

**Loops built.**

* sum mode (:data:`REDUCE`, on by default): a scalar sum ``e = e + term`` (``- term``, several
  terms an iteration) whose terms do not read ``e`` and are elementwise ops on scalar element
  reads, params and constants becomes ``e_0 + sum(terms)``, the terms computed for all
  iterations at once on the scanned sequences (fused vector kernels, a vectorised reduction:
  reassociated like ``np.sum``, so it may differ from the unrolled left-to-right sum in the last
  bits);
* carry mode (any other chain, e.g. ``p = p * f``, ``h = tanh(W h + x[i])``, ``y[0] += v``, and
  sums with ``REDUCE = False``): a sequential loop over ``T`` iterations carrying ``c`` — the
  same operations in the same order as the unrolled code, so the same values;
* map mode (a ``scatter``/``scatter_add`` chain writing ``y[a + b*k]``, ``b != 0``, whose update
  does not read the carry except at the written position): a loop with no carry returning the
  updates as stacked ``ys``, written into the initial array by one strided ``scatter``
  (distinct positions, so the order of the writes does not matter).

A first iteration that tracing simplified (``0.0 * 0.5`` and ``1.0 * t`` fold) does not match
and stays unrolled; the loop starts from its result.

Not re-rolled (left as they are): chains whose iterations read other elements of the carried
array (``y[i] = y[i-1] + ...``), non-affine indices (``x[i*i]``, ``x[idx[i]]`` with a numpy
``idx``), sliding windows (``x[i:i+3]``), two varying axes (``x[i, i]``), several accumulators
that feed each other (the one that reads the other stays unrolled), iterations with guards, and
loops over fewer than :data:`MIN_RUN` iterations. Nested Python loops: the innermost loop is
re-rolled (each outer iteration keeps its own loop node).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from .. import ir, ops
from ..ir import Graph, Node, Type, substitute
from ..ops import Op
from ..progress import log

#: The shortest run of iterations worth a loop.
MIN_RUN = 16
#: Nodes one iteration may have (beyond that it is not an element loop; the walks recurse).
MAX_BODY = 250
#: Sums whose terms do not read the sum are computed as vectorised terms and one reduction
#: (:func:`_build_reduction`; reassociated as ``np.sum`` is); ``False``: a sequential loop in
#: the unrolled code's order (bit-identical values, one body call per iteration).
REDUCE = os.environ.get("TAPEJIT_REROLL_REDUCE", "1") != "0"
#: The most chain nodes one iteration may span (``e = e + a + b`` spans two).
MAX_PERIOD = 6
#: Ops whose chains carry an array through indexed writes (map mode possible).
_WRITES = (Op.SCATTER, Op.SCATTER_ADD)
_EXACT_INT = 2.0**52


# ----------------------------------------------------------------------------------------------
# Chains


def _chains(nodes: list[Node]) -> list[list[Node]]:
    """Maximal chains (see the module docstring) of at least ``MIN_RUN`` nodes.

    ``L(u)``, the longest path of nodes of ``u``'s type ending at ``u``, is what tells the
    carry from the terms: the carry is the operand with the longest path behind it (it goes
    back through every earlier iteration), a term's path stays within its iteration. A chain is
    followed back from its end through those operands, and stops where two operands tie."""
    L: dict[int, int] = {}
    pred: dict[int, Node] = {}
    for u in nodes:
        if u.op in ops.LEAF or u.op == Op.LOOP or not u.args or u.dtype != "f64":
            continue
        if u.op in _WRITES:  # the accumulator is the carry of an indexed write
            cands = [u.args[0]] if id(u.args[0]) in L and u.args[0].type == u.type else []
        else:
            cands = [a for a in dict.fromkeys(u.args) if a.type == u.type and id(a) in L]
        if not cands:
            L[id(u)] = 1
            continue
        cands.sort(key=lambda a: -L[id(a)])
        L[id(u)] = 1 + L[id(cands[0])]
        if len(cands) == 1 or L[id(cands[0])] > L[id(cands[1])]:
            pred[id(u)] = cands[0]
    is_pred = {id(p) for p in pred.values()}
    tails = [u for u in nodes if id(u) in pred and id(u) not in is_pred and L[id(u)] >= MIN_RUN]
    tails.sort(key=lambda u: -L[id(u)])
    taken: set[int] = set()
    chains = []
    for t in tails:
        chain = [t]
        taken.add(id(t))
        while id(chain[-1]) in pred and id(pred[id(chain[-1])]) not in taken:
            chain.append(pred[id(chain[-1])])
            taken.add(id(chain[-1]))
        if len(chain) >= MIN_RUN:
            chain.reverse()
            chains.append(chain)
    return chains


def _signature(n: Node) -> tuple:
    return (n.op, tuple(sorted(str(a.op) for a in n.args)))


def _periodic_part(chain: list[Node], p: int) -> tuple[int, int]:
    """``(lo, hi)``: the chain positions between which its ops repeat with period ``p``."""
    sig = [_signature(n) for n in chain]
    lo, hi = 0, len(chain)
    while lo + p < hi and sig[lo] != sig[lo + p]:
        lo += 1
    while hi - 1 - p >= lo and sig[hi - 1] != sig[hi - 1 - p]:
        hi -= 1
    return lo, hi


def _periods(chain: list[Node]) -> list[int]:
    """The periods (chain nodes per iteration) worth trying, shortest first: those at which
    the chain's ops repeat for at least a quarter of it (a cheap filter before matching)."""
    sig = [_signature(n) for n in chain]
    out = []
    for p in range(1, MAX_PERIOD + 1):
        if len(chain) < p * MIN_RUN:
            break
        same = sum(1 for a, b in zip(sig, sig[p:]) if a == b)
        if same * 4 >= len(chain):
            out.append(p)
    return out


# ----------------------------------------------------------------------------------------------
# Matching iterations


class _Fail(Exception):
    pass


def _split_items(items: tuple) -> tuple[tuple, tuple[int, ...]] | None:
    """``(pattern, ints)``: the static part of an index (slices, and where the ints are) and its
    integer components; ``None`` for an index that is not plain ints and slices."""
    pattern, ints = [], []
    for it in items:
        if isinstance(it, tuple):
            pattern.append(it)
        elif type(it) is int:
            pattern.append(None)
            ints.append(it)
        else:
            return None
    return tuple(pattern), tuple(ints)


@dataclass
class _Template:
    """The shape of one iteration, from the reference iteration ``s``: for each node of it
    (by id) its kind — ``node`` (matched op by op), ``carry``, ``same``, ``xs``, ``iconst``,
    ``rmw`` — and the order of its leaves."""

    s: int
    kind: dict[int, str] = field(default_factory=dict)
    ref: dict[int, Node] = field(default_factory=dict)  # id -> reference node
    leaves: list[Node] = field(default_factory=list)  # xs/iconst/same/rmw leaves, first-seen
    root_varies: bool = False


class _Matcher:
    """Parallel walks of iterations against a reference iteration.

    A walk pairs each node ``R`` of the reference iteration ``s`` with a tuple ``Ns``: the
    corresponding node of each iteration walked. Building a template walks *two* iterations,
    ``s+1`` and ``s+2``, so that an index must move by the same step twice: commutative
    operands (in digest order, not the user's) are paired the way that makes every index
    affine, by backtracking. Checking an iteration walks one, against the index values the
    template predicts for it (``expect``)."""

    def __init__(self, chain: list[Node], chain_ids: set[int], guarded: set[int]):
        self.chain = chain
        self.chain_ids = chain_ids
        self.guarded = guarded

    def walk(self, tpl: _Template, ks: tuple[int, ...], building: bool, free: bool = False,
             expect: dict | None = None) -> dict:  # fmt: skip
        """Match iterations ``ks`` against ``tpl`` (``building``: decide its kinds). Returns
        ``env`` (reference id -> tuple of nodes) and ``carry`` (the carries read). ``free``:
        the carry is whichever operand matches (the first iteration of a loop)."""
        chain = self.chain
        carry = tuple(None if free or k == 0 else chain[k - 1] for k in ks)
        st = {"env": {}, "carry": carry, "log": [], "count": 0, "ks": ks, "expect": expect}
        R = chain[tpl.s]
        Ns = tuple(chain[k] for k in ks)
        for N in Ns:
            if R.op != N.op or R.type != N.type or len(R.args) != len(N.args):
                raise _Fail
            if id(N) in self.guarded:
                raise _Fail
        if any(N.attrs != R.attrs for N in Ns):
            if R.op not in _WRITES:
                raise _Fail
            if building:
                tpl.root_varies = True
            elif not tpl.root_varies:
                raise _Fail
            sr = _split_items(R.attrs)
            sns = [_split_items(N.attrs) for N in Ns]
            if sr is None or any(sn is None or sn[0] != sr[0] for sn in sns):
                raise _Fail
            self._check_ints(st, "__root__", sr[1], [sn[1] for sn in sns], building)
        elif tpl.root_varies:
            raise _Fail
        st["env"][id(R)] = Ns
        self._args(tpl, st, R, Ns, building)
        return st

    def check(self, tpl: _Template, k: int, free: bool, expect: dict) -> dict | None:
        """:meth:`walk` of one iteration against a built template (the fast path: most of
        the pass's time is here). Returns ``{"env", "carry"}`` or ``None``."""
        chain, kinds, guarded, chain_ids = self.chain, tpl.kind, self.guarded, self.chain_ids
        commutative, split, INDEX, CONST = ir.commutative, _split_items, Op.INDEX, Op.CONST
        R0, N0 = chain[tpl.s], chain[k]
        if R0.op != N0.op or R0.type != N0.type or id(N0) in guarded:
            return None
        if tpl.root_varies:
            sn = split(N0.attrs)
            if sn is None or sn[0] != split(R0.attrs)[0] or sn[1] != expect["__root__"]:
                return None
        elif N0.attrs != R0.attrs:
            return None
        env: dict[int, Node] = {id(R0): N0}
        added: list[int] = []
        carry = [None if free or k == 0 else chain[k - 1]]

        def pair(R: Node, N: Node) -> bool:
            got = env.get(id(R))
            if got is not None:
                return got is N
            kd = kinds.get(id(R))
            if kd is None:
                return False
            env[id(R)] = N
            added.append(id(R))
            if kd == "node":
                if (
                    N.op != R.op
                    or N.attrs != R.attrs
                    or N.type != R.type
                    or id(N) in chain_ids
                    or id(N) in guarded
                    or len(N.args) != len(R.args)
                ):
                    return False
                return args(R, N)
            if kd == "same":
                return N is R
            if kd == "carry":
                if carry[0] is None:
                    if N.type != R.type:
                        return False
                    carry[0] = N
                    added.append(-1)  # undo marker: forget the carry
                    return True
                return N is carry[0]
            if id(N) in guarded:
                return False
            if kd == "xs":
                if N.op != INDEX or N.args[0] is not R.args[0]:
                    return False
                sn = split(N.attrs)
                return sn is not None and sn[1] == expect[id(R)] and sn[0] == split(R.attrs)[0]
            if kd == "iconst":
                v = N.attrs[0] if N.op == CONST and N.type == R.type else None
                return isinstance(v, float) and v == int(v) and (int(v),) == expect[id(R)]
            if kd == "rmw":
                return N.op == INDEX and N.args[0] is carry[0] and N.attrs == N0.attrs
            return False

        def undo(mark: int) -> None:
            while len(added) > mark:
                key = added.pop()
                if key == -1:
                    carry[0] = None
                else:
                    del env[key]

        def args(R: Node, N: Node) -> bool:
            ra, na = R.args, N.args
            if len(ra) == 2 and R.op in commutative:
                mark = len(added)
                if pair(ra[0], na[0]) and pair(ra[1], na[1]):
                    return True
                undo(mark)
                return pair(ra[0], na[1]) and pair(ra[1], na[0])
            for a, b in zip(ra, na):
                if not pair(a, b):
                    return False
            return True

        if not args(R0, N0):
            return None
        if len(env) > MAX_BODY * 4:
            return None
        return {"env": {key: (n,) for key, n in env.items()}, "carry": (carry[0],)}

    def _check_ints(self, st, key, ref_ints, ints, building) -> None:
        """An index of the iterations walked is where the template puts it."""
        expect = st["expect"]
        if expect is not None:
            if tuple(ints[0]) != expect[key]:
                raise _Fail
        elif (
            building
            and len(ints) == 2  # s, s+1, s+2: equal steps
            and any(c - a != 2 * (b - a) for a, b, c in zip(ref_ints, ints[0], ints[1]))
        ):
            raise _Fail

    def _args(self, tpl, st, R, Ns, building):
        if len(R.args) == 2 and R.op in ir.commutative:
            r0, r1 = R.args
            combos = [()]
            for N in Ns:  # each iteration's operands, as they are or swapped
                combos = [c + (N.args,) for c in combos] + [
                    c + ((N.args[1], N.args[0]),) for c in combos
                ]
            mark = self._mark(st)
            for k, combo in enumerate(combos):
                try:
                    self._pair(tpl, st, r0, tuple(c[0] for c in combo), building)
                    self._pair(tpl, st, r1, tuple(c[1] for c in combo), building)
                    return
                except _Fail:
                    self._undo(tpl, st, mark)
                    if k == len(combos) - 1:
                        raise
            return
        for p, a in enumerate(R.args):
            self._pair(tpl, st, a, tuple(N.args[p] for N in Ns), building)

    def _mark(self, st):
        return len(st["log"]), st["carry"]

    def _undo(self, tpl, st, mark):
        n, carry = mark
        log = st["log"]
        while len(log) > n:
            what, key = log.pop()
            if what == "env":
                del st["env"][key]
            else:
                del tpl.kind[key]
                tpl.ref.pop(key, None)
                if tpl.leaves and id(tpl.leaves[-1]) == key:
                    tpl.leaves.pop()
        st["carry"] = carry

    def _set_kind(self, tpl, st, R, kind):
        tpl.kind[id(R)] = kind
        tpl.ref[id(R)] = R
        st["log"].append(("kind", id(R)))
        if kind in ("same", "xs", "iconst", "rmw"):
            tpl.leaves.append(R)

    def _pair(self, tpl: _Template, st: dict, R: Node, Ns: tuple, building: bool) -> None:
        env = st["env"]
        got = env.get(id(R))
        if got is not None:
            if any(g is not n for g, n in zip(got, Ns)):
                raise _Fail
            return
        kind = tpl.kind.get(id(R))
        if kind is None:
            if not building:
                raise _Fail
            kind = self._decide(tpl, R, Ns)
            self._set_kind(tpl, st, R, kind)
        env[id(R)] = Ns
        st["log"].append(("env", id(R)))
        if kind == "carry":
            carry = list(st["carry"])
            for j, N in enumerate(Ns):
                if carry[j] is None:  # a first iteration: its carry is what matches here
                    if N.type != R.type:
                        raise _Fail
                    carry[j] = N
                elif N is not carry[j]:
                    raise _Fail
            st["carry"] = tuple(carry)
            return
        if kind == "same":
            if any(N is not R for N in Ns):
                raise _Fail
            return
        if any(id(N) in self.guarded for N in Ns):
            raise _Fail
        if kind == "xs":
            sr = _split_items(R.attrs)
            ints = []
            for N in Ns:
                if N.op != Op.INDEX or N.args[0] is not R.args[0]:
                    raise _Fail
                sn = _split_items(N.attrs)
                if sn is None or sn[0] != sr[0]:
                    raise _Fail
                ints.append(sn[1])
            self._check_ints(st, id(R), sr[1], ints, building)
            return
        if kind == "iconst":
            ints = []
            for N in Ns:
                if N.op != Op.CONST or N.type != R.type:
                    raise _Fail
                v = N.attrs[0]
                if not isinstance(v, float) or v != int(v) or abs(v) >= _EXACT_INT:
                    raise _Fail
                ints.append((int(v),))
            self._check_ints(st, id(R), (int(R.attrs[0]),), ints, building)
            return
        if kind == "rmw":  # the carried array read where this iteration writes
            for j, (k, N) in enumerate(zip(st["ks"], Ns)):
                root = self.chain[k]
                if N.op != Op.INDEX or N.args[0] is not st["carry"][j] or N.attrs != root.attrs:
                    raise _Fail
            return
        # an internal node
        for N in Ns:
            if id(N) in self.chain_ids or N.op in ops.LEAF:
                raise _Fail
            if R.op != N.op or R.type != N.type or R.attrs != N.attrs:
                raise _Fail
            if len(R.args) != len(N.args):
                raise _Fail
        st["count"] += 1
        if st["count"] > MAX_BODY:
            raise _Fail
        self._args(tpl, st, R, Ns, building)

    def _decide(self, tpl: _Template, R: Node, Ns: tuple) -> str:
        carry_ref = self.chain[tpl.s - 1]
        if R is carry_ref:
            return "carry"
        if id(R) in self.chain_ids:
            raise _Fail
        if all(N is R for N in Ns):
            return "same"
        if R.op == Op.INDEX and all(N.op == Op.INDEX for N in Ns):
            root = self.chain[tpl.s]
            if tpl.root_varies and R.args[0] is carry_ref and R.attrs == root.attrs:
                return "rmw"
            if all(N.args[0] is R.args[0] for N in Ns) and R.dtype == "f64":
                sr = _split_items(R.attrs)
                if sr is not None and all(
                    (sn := _split_items(N.attrs)) is not None and sn[0] == sr[0] for N in Ns
                ):
                    return "xs"
        if (
            R.op == Op.CONST
            and R.type == Type(())
            and all(N.op == Op.CONST and N.type == R.type for N in Ns)
            and any(N.attrs != R.attrs for N in Ns)
            and isinstance(R.attrs[0], float)
            and R.attrs[0] == int(R.attrs[0])
            and abs(R.attrs[0]) < _EXACT_INT
        ):
            return "iconst"
        return "node"


def _leaf_ints(kind: str, n: Node) -> tuple:
    if kind == "xs":
        return _split_items(n.attrs)[1]
    if kind == "iconst":
        return (int(n.attrs[0]),)
    return ()


@dataclass
class _Run:
    tpl: _Template
    lo: int  # first iteration (chain position)
    hi: int  # last iteration
    init: Node  # the carry of iteration lo
    first: dict  # reference id -> leaf node of iteration lo
    steps: dict  # reference id -> per-iteration increments of the leaf's ints
    root_first_items: tuple = ()  # the written position of iteration lo (map mode)
    root_step: tuple = ()


def _find_runs(chain: list[Node], chain_ids: set[int], guarded: set[int]) -> list[_Run]:
    """Runs of at least ``MIN_RUN`` consecutive iterations of ``chain`` that match one
    template with affine indices, in order, not overlapping."""
    m = _Matcher(chain, chain_ids, guarded)
    free_m = _Matcher(chain, set(), guarded)  # a first iteration's walk (MAX_BODY bounds it)
    runs: list[_Run] = []
    floor = 0  # iterations before this belong to an earlier run
    s = 1
    while s + 2 < len(chain):
        tpl = _Template(s)
        try:
            st = m.walk(tpl, (s + 1, s + 2), True)
            base = _facts(tpl, None, chain[s])
            nxt = _facts(tpl, st, chain[s + 1])
        except _Fail:
            s += 1
            continue
        step = {key: tuple(b - a for a, b in zip(base[key], nxt[key])) for key in base}
        if not _steps_ok(tpl, step):
            s += 1
            continue

        def fits(k: int, free: bool = False, s=s, tpl=tpl, base=base, step=step) -> dict | None:
            d = k - s
            expect = {key: tuple(b + d * e for b, e in zip(base[key], step[key])) for key in base}
            return (free_m if free else m).check(tpl, k, free, expect)

        hi = s + 2
        while hi + 1 < len(chain) and fits(hi + 1) is not None:
            hi += 1
        lo, lo_st = s, None
        while lo - 1 >= floor:
            st = fits(lo - 1)
            if st is None:
                # the first iteration of the loop: its carry may be any operand (the chain
                # found may go on back into that iteration's term, or to a value computed
                # before the loop that is not a chain node)
                st = fits(lo - 1, free=True)
                if st is not None:
                    lo, lo_st = lo - 1, st
                break
            lo, lo_st = lo - 1, st
        if hi - lo + 1 >= MIN_RUN:
            if lo_st is None:
                first = {id(r): r for r in tpl.leaves}
                init = chain[s - 1]
            else:
                first = {id(r): lo_st["env"][id(r)][0] for r in tpl.leaves}
                init = lo_st["carry"][0]
            root_step = step.pop("__root__", ())
            runs.append(_Run(tpl, lo, hi, init, first, step, chain[lo].attrs, root_step))
            floor = hi + 1
            s = hi + 2
        else:
            s = max(s + 1, hi - 1)
    return runs


def _facts(tpl: _Template, st: dict | None, root: Node) -> dict:
    """The integers of each leaf of one iteration: the reference itself (``st`` None) or the
    first iteration walked in ``st``."""
    out = {}
    for r in tpl.leaves:
        n = r if st is None else st["env"][id(r)][0]
        out[id(r)] = _leaf_ints(tpl.kind[id(r)], n)
    if tpl.root_varies:
        out["__root__"] = _split_items(root.attrs)[1]
    return out


def _steps_ok(tpl: _Template, step: dict) -> bool:
    """At most one varying integer per index (one scanned axis), and a written position that
    moves (map mode)."""
    for d in step.values():
        if sum(1 for v in d if v != 0) > 1:
            return False
    if tpl.root_varies:
        d = step.get("__root__", ())
        if sum(1 for v in d if v != 0) != 1:
            return False
    return True


# ----------------------------------------------------------------------------------------------
# Building the loop


def _scanned(src: Node, items: tuple, step: tuple, T: int) -> tuple[Node, int]:
    """``src[items_k]`` for k = 0..T-1 stacked on a new front axis (a strided slice of ``src``
    moved to the front), and the position the varying axis had."""
    pattern, ints = _split_items(items)
    out, axis, j, pos = [], None, 0, 0
    for p in pattern:
        if p is None:
            a, b = ints[j], step[j]
            j += 1
            if b != 0:
                out.append((a, a + b * T, b))
                axis = pos
                pos += 1
            else:
                out.append(a)
        else:
            out.append(p)
            pos += 1
    node = ops.index(src, tuple(out))
    if axis:
        perm = (axis, *[d for d in range(node.ndim) if d != axis])
        node = ops.transpose(node, perm)
    return node, (axis or 0)


def _unscanned(ys: Node, axis: int) -> Node:
    """Stacked ``ys`` (front axis) with the front axis moved back to ``axis``."""
    if not axis:
        return ys
    perm = list(range(1, ys.ndim))
    perm.insert(axis, 0)
    return ops.transpose(ys, tuple(perm))


def _write_items(items: tuple, step: tuple, T: int) -> tuple:
    pattern, ints = _split_items(items)
    out, j = [], 0
    for p in pattern:
        if p is None:
            a, b = ints[j], step[j]
            j += 1
            out.append((a, a + b * T, b) if b != 0 else a)
        else:
            out.append(p)
    return tuple(out)


class _Differentiable:
    """Whether a node depends on an active input of the trace (memoised, as tracing decides)."""

    def __init__(self, g: Graph):
        self.active = {id(n) for n, k in zip(g.inputs, g.kinds) if k == "active"}
        self.memo: dict[int, tuple[Node, bool]] = {}

    def __call__(self, n: Node) -> bool:
        memo = self.memo
        todo = [n]
        while todo:
            m = todo[-1]
            if id(m) in memo:
                todo.pop()
                continue
            if m.op == Op.INPUT:
                memo[id(m)] = (m, id(m) in self.active)
            elif m.op in ops.NONDIFFERENTIABLE or m.op == Op.CONST:
                memo[id(m)] = (m, False)
            else:
                pending = [a for a in m.args if id(a) not in memo]
                if pending:
                    todo.extend(pending)
                    continue
                memo[id(m)] = (m, any(memo[id(a)][1] for a in m.args))
            todo.pop()
        return memo[id(n)][1]


def _build_reduction(run: _Run, chain: list[Node]) -> Node | None:
    """A sum instead of a loop: ``e = e + term`` (``e = e - term``; several terms an
    iteration) whose terms do not read ``e``, are scalars and are built from elementwise ops
    on scalar element reads, params and constants, becomes ``e_0 + sum(terms)`` with the
    terms computed for every iteration at once on the scanned sequences (``x[i+1] - x[i]``
    becomes ``x[1:n] - x[0:n-1]``): fused vector kernels and a vectorised reduction instead of
    one call of a scalar body per iteration. The sum is reassociated (as ``np.sum``), so it
    can differ from the unrolled code's left-to-right sum in the last bits; ``REDUCE = False``
    keeps the sequential loop. ``None`` when the iteration is not of that form."""
    tpl = run.tpl
    carry_ref = chain[tpl.s - 1]
    if carry_ref.type != Type(()) or carry_ref.dtype != "f64":
        return None
    T = run.hi - run.lo + 1
    kinds = tpl.kind
    dep: dict[int, bool] = {}

    def depends(R: Node) -> bool:  # on the carry, within the template
        if R is carry_ref:
            return True
        if kinds.get(id(R)) != "node":
            return False
        d = dep.get(id(R))
        if d is None:
            d = dep[id(R)] = any(depends(a) for a in R.args)
        return d

    terms: list[tuple[int, Node]] = []
    node = chain[tpl.s]
    while node is not carry_ref:
        if node.op not in (Op.ADD, Op.SUB) or node.type != carry_ref.type:
            return None
        a, b = node.args
        da, db = depends(a), depends(b)
        if da and not db:
            terms.append((1 if node.op == Op.ADD else -1, b))
            node = a
        elif db and not da and node.op == Op.ADD:
            terms.append((1, a))
            node = b
        else:
            return None
    vec: dict[int, Node] = {}

    def vectorised(R: Node) -> Node | None:
        got = vec.get(id(R))
        if got is not None:
            return got
        kind = kinds.get(id(R))
        out: Node | None = None
        if R.type.shape != ():
            return None
        if kind == "same":
            out = R
        elif kind == "xs":
            first = run.first[id(R)]
            out, _ = _scanned(first.args[0], first.attrs, run.steps[id(R)], T)
        elif kind == "node" and R.op in ops.ELEMENTWISE:
            args = [vectorised(a) for a in R.args]
            if any(a is None for a in args):
                return None
            if all(a is b for a, b in zip(args, R.args)):
                out = R  # the same in every iteration
            else:
                out = ops.make(R.op, *ops._bcast(*args), attrs=R.attrs)
        if out is not None:
            vec[id(R)] = out
        return out

    total: Node | None = None
    for sign, term in reversed(terms):
        v = vectorised(term)
        if v is None:
            return None
        if v.shape != (T,):
            v = ops.broadcast_to(v, (T,))
        if total is None:
            total = v if sign > 0 else ops.neg(v)
        else:
            total = ops.add(total, v) if sign > 0 else ops.sub(total, v)
    if total is None:
        return None
    return ops.add(run.init, ops.reduce(Op.REDUCE_SUM, total, (0,)))


def _build_loop(
    run: _Run, chain: list[Node], number: int, diff: _Differentiable
) -> tuple[Node, bool]:
    """The node that replaces ``chain[run.hi]``, and whether it is a sum (no loop)."""
    from .. import autodiff  # autodiff imports the passes' users; import late

    tpl = run.tpl
    R0 = chain[tpl.s]
    T = run.hi - run.lo + 1
    prefix = f"r{number}"
    map_mode = tpl.root_varies
    carry_ref = chain[tpl.s - 1]
    # inputs: i, carry (carry mode), xs..., params...
    i_in = ops.input_node(0, f"{prefix}i", Type(()))
    inputs = [i_in]
    mapping: dict[int, Node] = {}
    carries: list[Node] = []
    if not map_mode:
        c_in = ops.input_node(1, f"{prefix}c0", carry_ref.type)
        inputs.append(c_in)
        mapping[id(carry_ref)] = c_in
        carries.append(run.init)
    xs: list[Node] = []
    params: list[Node] = []
    param_refs: list[Node] = []
    for r in tpl.leaves:
        kind = tpl.kind[id(r)]
        if kind == "xs":
            first = run.first[id(r)]
            node, _ = _scanned(first.args[0], first.attrs, run.steps[id(r)], T)
            x_in = ops.input_node(len(inputs), f"{prefix}x{len(xs)}", r.type)
            inputs.append(x_in)
            xs.append(node)
            mapping[id(r)] = x_in
        elif kind == "rmw":  # the initial array at the position written
            node, _ = _scanned(run.init, run.root_first_items, run.root_step, T)
            x_in = ops.input_node(len(inputs), f"{prefix}x{len(xs)}", r.type)
            inputs.append(x_in)
            xs.append(node)
            mapping[id(r)] = x_in
        elif kind == "iconst":
            a = run.first[id(r)].attrs[0]
            (b,) = run.steps[id(r)]
            v = i_in
            if b != 1:
                v = ops.mul(v, ops.const(float(b)))
            if a != 0:
                v = ops.add(v, ops.const(float(a)))
            mapping[id(r)] = v
    for r in tpl.leaves:
        if tpl.kind[id(r)] == "same":
            if r.op == Op.CONST:
                mapping[id(r)] = r
                continue
            param_refs.append(r)
    for r in param_refs:
        p_in = ops.input_node(len(inputs), f"{prefix}p{len(params)}", r.type)
        inputs.append(p_in)
        params.append(r)
        mapping[id(r)] = p_in
    if not map_mode and REDUCE:
        total = _build_reduction(run, chain)
        if total is not None:
            return total, True
    out_ref = R0.args[1] if map_mode else R0
    if map_mode and carry_ref in _reachable(out_ref, {**mapping, id(carry_ref): carry_ref}):
        raise _Fail  # the update reads the carried array elsewhere than where it writes
    (out,) = substitute((out_ref,), mapping)
    if out.dtype != "f64":
        raise _Fail
    n_carry, n_xs = len(carries), len(xs)
    body = Graph("body", tuple(inputs), ("inactive",) * len(inputs), (out,))
    body, all_params = ops.hoist_invariants(body, 1 + n_carry + n_xs, params, f"{prefix}h")
    vjp = None
    if any(diff(n) for n in carries + xs + all_params):
        wrt_xs = tuple(diff(x) for x in xs)
        wrt_params = tuple(diff(p) for p in all_params)
        body, vjp = autodiff.loop_vjp(
            body, n_carry, n_xs, wrt_xs, wrt_params, False, prefix=f"{prefix}b"
        )
    spec = ops.LoopSpec(body, n_carry, n_xs, T, start=0, vjp=vjp)
    loop = ops.make(Op.LOOP, *carries, *xs, *all_params, attrs=(spec,))
    lay = ops.loop_layout(spec)
    if not map_mode:
        return ops.segment(loop, lay.carries[0]), False
    ys = _unscanned(ops.segment(loop, lay.ys[0]), _write_axis(run))
    items = _write_items(run.root_first_items, run.root_step, T)
    return ops.make(R0.op, run.init, ys, attrs=items), False


def _write_axis(run: _Run) -> int:
    """Where the varying axis of the written position sits in the written block."""
    pattern, _ = _split_items(run.root_first_items)
    pos, j = 0, 0
    for p in pattern:
        if p is None:
            if run.root_step[j] != 0:
                return pos
            j += 1
        else:
            pos += 1
    return 0


def _reachable(out: Node, mapping: dict[int, Node]) -> set:
    """Nodes of the reference iteration reachable from ``out`` without passing a leaf."""
    seen: dict[int, Node] = {}
    todo = [out]
    while todo:
        n = todo.pop()
        if id(n) in seen:
            continue
        seen[id(n)] = n
        if id(n) in mapping:
            continue
        todo.extend(n.args)
    return set(seen.values())


def _replace_all(g: Graph, mapping: dict[int, Node]) -> Graph:
    """``g`` with each node in ``mapping`` replaced by its image, the images themselves rebuilt
    (an image's operands may be nodes that are replaced too). Iterative."""
    memo: dict[int, Node] = {}
    roots = list(g.outputs) + [c for c, _, _ in g.guards]

    def kids(n: Node):
        img = mapping.get(id(n))
        return (img,) if img is not None else n.args

    todo = list(roots)
    while todo:
        n = todo[-1]
        if id(n) in memo:
            todo.pop()
            continue
        ks = kids(n)
        pending = [a for a in ks if id(a) not in memo]
        if pending:
            todo.extend(pending)
            continue
        todo.pop()
        img = mapping.get(id(n))
        if img is not None:
            memo[id(n)] = memo[id(img)]
            continue
        args = tuple(memo[id(a)] for a in n.args)
        memo[id(n)] = (
            n if all(a is b for a, b in zip(args, n.args)) else ir.Node(n.op, args, n.attrs, n.type)
        )
    outs = tuple(memo[id(o)] for o in g.outputs)
    guards = tuple((memo[id(c)], e, w) for c, e, w in g.guards)
    return g.replace(outputs=outs, guards=guards)


# ----------------------------------------------------------------------------------------------
# The pass


def reroll(g: Graph) -> tuple[Graph, dict]:
    """``g`` with its runs of isomorphic unrolled iterations rebuilt as loops, and statistics
    (``grad.stats["passes"]["reroll"]``): ``iterations`` re-rolled into ``loops`` loops (of
    which ``reductions`` became sums, see :data:`REDUCE`), the trace's node counts before and
    after, and the seconds taken."""
    t0 = time.perf_counter()
    nodes = g.nodes
    stats = {"nodes_before": len(nodes), "nodes_after": len(nodes), "iterations": 0, "loops": 0,
             "reductions": 0}  # fmt: skip
    chains = _chains(nodes)
    if not chains:
        stats["seconds"] = time.perf_counter() - t0
        return g, stats
    guarded: set[int] = set()
    if g.guards:
        guarded = {id(n) for n in ir.toposort(tuple(c for c, _, _ in g.guards))}
    spine_ids = {id(n) for c in chains for n in c}
    diff = _Differentiable(g)
    mapping: dict[int, Node] = {}
    number = 0
    for chain in chains:
        # iterations may span several chain nodes (e = e + a + b: two adds per iteration):
        # try each period and phase, keep the choice that re-rolls the most chain nodes
        best: tuple[int, list, list] = (0, [], [])
        worked: set[int] = set()
        for period in _periods(chain):
            if best[0] * 2 >= len(chain) or any(period % q == 0 for q in worked):
                continue  # most of it re-rolled already, or a multiple of a period that worked
            # the chain without the ends that do not repeat (the first iteration's term, what
            # uses the loop's result), and the phase that ends an iteration where it ends first
            lo, hi = _periodic_part(chain, period)
            tail = (hi - 1) % period
            for phase in [tail] + [q for q in range(period) if q != tail]:
                sub = chain[phase::period]
                mine = {id(n) for n in chain} - {id(n) for n in sub}
                runs = _find_runs(sub, spine_ids - mine, guarded)
                covered = sum(r.hi - r.lo + 1 for r in runs) * period
                if runs:
                    worked.add(period)
                if covered > best[0]:
                    best = (covered, sub, runs)
                if best[0] >= hi - lo - 2 * period:
                    break  # (nearly) all of it: no other choice can do better
            if best[0] >= hi - lo - 2 * period:
                break
        _, sub, runs = best
        for run in runs:
            try:
                new, summed = _build_loop(run, sub, number, diff)
            except _Fail:
                continue
            mapping[id(sub[run.hi])] = new
            number += 1
            stats["loops"] += 1
            stats["reductions"] += summed
            stats["iterations"] += run.hi - run.lo + 1
    if mapping:
        g = _replace_all(g, mapping)
        ir.verify(g)
        stats["nodes_after"] = len(g.nodes)
    stats["seconds"] = time.perf_counter() - t0
    return g, stats


#: Whether :func:`maybe_reroll` (the first step of ``pipeline.front``, so of every
#: ``tapejit.compile``) re-rolls. Off by default for now: two tests of other parts
#: (tests/test_passes.py, the chunking of ``examples/element_loop.py``'s straight-line code,
#: and tests/test_cli.py's asm annotation, whose plan ``cli.front_end`` builds without this
#: pass) assume element loops stay unrolled. ``TAPEJIT_REROLL=1`` in the environment, or
#: setting this to ``True``, switches it on.
ENABLED = os.environ.get("TAPEJIT_REROLL", "1") not in ("", "0")


def maybe_reroll(g: Graph) -> tuple[Graph, dict]:
    """:func:`reroll` when :data:`ENABLED` (the hook in ``runtime/variant.py``). A failure of
    the pass itself (a bug) is logged and the trace compiled as it is, unrolled."""
    if not ENABLED:
        n = len(g.nodes)
        return g, {"nodes_before": n, "nodes_after": n, "seconds": 0.0, "skipped": True,
                   "iterations": 0, "loops": 0}  # fmt: skip
    try:
        return reroll(g)
    except Exception:  # noqa: BLE001 - a bug in this pass must not break compiling
        log.warning("reroll failed on %s; compiling it unrolled", g.name, exc_info=True)
        n = len(g.nodes)
        return g, {"nodes_before": n, "nodes_after": n, "seconds": 0.0, "iterations": 0,
                   "loops": 0, "failed": True}  # fmt: skip
