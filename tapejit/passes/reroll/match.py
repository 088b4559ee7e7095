"""Re-rolling, matching iterations: parallel walks of a chain's iterations against a reference
iteration (:class:`_Matcher`), which build a template (:class:`_Template`: each node of the
reference iteration matched op by op, or a leaf of one of :data:`LEAF_KINDS`) and check further
iterations against it, with the index values it predicts. :mod:`tapejit.passes.reroll.runs`
turns the walks into runs; :mod:`tapejit.passes.reroll.driver` documents the whole pass."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ...core import ir, ops
from ...core.ir import Node, Type
from ...core.ops import Op
from .common import MAX_PERIOD, _block, _Fail, _split_items, _WRITES, chain_depth

#: Nodes one iteration may have (beyond that it is not an element loop; the walks recurse).
MAX_BODY = 250
_EXACT_INT = 2.0**52
#: The kinds of a template's leaves (what a walk does not go below): see reroll's docstring.
LEAF_KINDS = ("same", "xs", "block", "iconst", "cseq", "rmw", "hist")
#: Listed in a template's ``leaves`` too: its leaves, and ``write`` — an earlier write of a map
#: iteration that writes several positions (``r[i, 0] = a; r[i, 1] = b``), at a position that
#: moves like the root's (walked below like a node).
_LISTED = (*LEAF_KINDS, "write")


# ----------------------------------------------------------------------------------------------
# Matching iterations


@dataclass
class _Template:
    """The shape of one iteration, from the reference iteration ``s``: for each node of it
    (by id) its kind — ``node`` (matched op by op), ``carry``, ``same``, ``xs``, ``iconst``,
    ``cseq``, ``rmw``, ``write`` — and the order of its leaves (and writes)."""

    s: int
    kind: dict[int, str] = field(default_factory=dict)
    ref: dict[int, Node] = field(default_factory=dict)  # id -> reference node
    leaves: list[Node] = field(default_factory=list)  # xs/iconst/cseq/same/rmw, first-seen
    root_varies: bool = False
    stages: set = field(default_factory=set)  # ids of the earlier writes into the carry (map)
    free: set = field(default_factory=set)  # ids of xs leaves read at positions from a table


class _Matcher:
    """Parallel walks of iterations against a reference iteration.

    A walk pairs each node ``R`` of the reference iteration ``s`` with a tuple ``Ns``: the
    corresponding node of each iteration walked. Building a template walks *two* iterations,
    ``s+1`` and ``s+2``, so that an index must move by the same step twice: commutative
    operands (in digest order, not the user's) are paired the way that makes every index
    affine, by backtracking. Checking an iteration walks one, against the index values the
    template predicts for it (``expect``)."""

    def __init__(
        self, chain: list[Node], chain_ids: set[int], guarded: set[int], pads: frozenset = frozenset()
    ):
        self.pads = pads  # ids of the -0.0 constants reroll_history padded iterations with
        self.chain = chain
        self.chain_ids = chain_ids
        self.guarded = guarded
        self.free_mode = False  # building: an element read may move other than affinely
        self.pos = {id(n): k for k, n in enumerate(chain)}
        self._dep: dict[int, int] = {}

    def _depth(self, N: Node) -> int:
        """The last iteration whose output ``N`` depends on (:func:`chain_depth`)."""
        return chain_depth(N, self.pos, self._dep)

    def own(self, N: Node, k: int) -> bool:
        """Whether ``N``, read in iteration ``k``, is the output of an earlier iteration of the
        chain, or a pad (:mod:`tapejit.passes.reroll.history`)."""
        q = self.pos.get(id(N))
        return (q is not None and q < k) or id(N) in self.pads

    def hist(self, N: Node, k: int) -> bool:
        """Whether ``N`` is a history read in iteration ``k``: :meth:`own`, or a value that
        depends on no iteration after ``k - 2`` (a value from before the loop: the loop reads
        it from the history input's operand)."""
        return self.own(N, k) or self._depth(N) < k - 1

    def walk(self, tpl: _Template, ks: tuple[int, ...], building: bool, free: bool = False,
             expect: dict | None = None) -> dict:  # fmt: skip
        """Match iterations ``ks`` against ``tpl`` (``building``: decide its kinds). Returns
        ``env`` (reference id -> tuple of nodes) and ``carry`` (the carries read). ``free``:
        the carry is whichever operand matches (the first iteration of a loop)."""
        chain = self.chain
        carry = tuple(None if free or k == 0 else chain[k - 1] for k in ks)
        st = {"env": {}, "carry": carry, "log": [], "count": 0, "ks": ks, "expect": expect,
              "free_mode": self.free_mode}  # fmt: skip
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
                # the earlier writes of the iteration into the carried array: the nodes on
                # its path from the carry to the root (no other write may move)
                w, path, carry_ref = R.args[0], set(), chain[tpl.s - 1]
                while w is not carry_ref and w.op in _WRITES and len(path) < MAX_PERIOD:
                    path.add(id(w))
                    w = w.args[0]
                tpl.stages = path if w is carry_ref else set()
            elif not tpl.root_varies:
                raise _Fail
            sr = _split_items(R.attrs)
            sns = [_split_items(N.attrs) for N in Ns]
            if sr is None or any(sn is None or sn[0] != sr[0] for sn in sns):
                raise _Fail
            ints = [sn[1] for sn in sns]
            if building and st["free_mode"] and R.op == Op.SCATTER_ADD and _tabled(sr, ints, True):
                tpl.free.add("__root__")  # adds at positions from a table (add_at)
            else:
                self._check_ints(st, "__root__", sr[1], ints, building)
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
            if sn is None or sn[0] != split(R0.attrs)[0] or not _at(sn[1], expect["__root__"]):
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
                    or (N.type is not R.type and N.type != R.type)
                    or id(N) in chain_ids
                    or id(N) in guarded
                    or len(N.args) != len(R.args)
                ):
                    return False
                return args(R, N)
            if kd == "write":
                if (
                    N.op != R.op
                    or N.type != R.type
                    or id(N) in chain_ids
                    or id(N) in guarded
                    or (sn := split(N.attrs)) is None
                    or sn[0] != split(R.attrs)[0]
                    or not _at(sn[1], expect[id(R)])
                ):
                    return False
                return args(R, N)
            if kd == "same":
                return N is R
            if kd == "hist":
                return (N.type is R.type or N.type == R.type) and self.hist(N, k)
            if kd == "block":
                if N.op != INDEX or N.args[0] is not R.args[0] or id(N) in guarded:
                    return False
                bn = _block(N.attrs)
                return bn is not None and bn[0] == _block(R.attrs)[0] and (bn[1],) == expect[id(R)]
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
                if sn is None or sn[0] != split(R.attrs)[0]:
                    return False
                return _at(sn[1], expect[id(R)])
            if kd == "iconst":
                v = N.attrs[0] if N.op == CONST and N.type == R.type else None
                return _whole(v) and (int(v),) == expect[id(R)]
            if kd == "cseq":
                return N.op == CONST and N.type == R.type
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
        if kind in _LISTED:
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
            kind = self._decide(tpl, R, Ns, st["ks"])
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
        if kind == "hist":
            if any(N.type != R.type or not self.hist(N, k) for N, k in zip(Ns, st["ks"])):
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
            if building and st["free_mode"] and _tabled(sr, ints):
                tpl.free.add(id(R))  # read through a table of the rows each iteration reads
                return
            self._check_ints(st, id(R), sr[1], ints, building)
            return
        if kind == "block":
            (shape, a) = _block(R.attrs)
            ints = []
            for N in Ns:
                bn = _block(N.attrs) if N.op == Op.INDEX and N.args[0] is R.args[0] else None
                if bn is None or bn[0] != shape:
                    raise _Fail
                ints.append((bn[1],))
            self._check_ints(st, id(R), (a,), ints, building)
            return
        if kind == "iconst":
            ints = []
            for N in Ns:
                if N.op != Op.CONST or N.type != R.type:
                    raise _Fail
                v = N.attrs[0]
                if not _whole(v):
                    raise _Fail
                ints.append((int(v),))
            self._check_ints(st, id(R), (int(R.attrs[0]),), ints, building)
            return
        if kind == "cseq":
            if any(N.op != Op.CONST or N.type != R.type for N in Ns):
                raise _Fail
            return
        if kind == "rmw":  # the carried array read where this iteration writes
            for j, (k, N) in enumerate(zip(st["ks"], Ns)):
                root = self.chain[k]
                if N.op != Op.INDEX or N.args[0] is not st["carry"][j] or N.attrs != root.attrs:
                    raise _Fail
            return
        if kind == "write":  # an earlier write of the iteration: its position moves too
            sr = _split_items(R.attrs)
            ints = []
            for N in Ns:
                sn = _split_items(N.attrs) if N.op == R.op else None
                if sn is None or sn[0] != sr[0] or N.type != R.type or id(N) in self.chain_ids:
                    raise _Fail
                ints.append(sn[1])
            if building and st["free_mode"] and R.op == Op.SCATTER_ADD and _tabled(sr, ints, True):
                tpl.free.add(id(R))
            else:
                self._check_ints(st, id(R), sr[1], ints, building)
            st["count"] += 1
            self._args(tpl, st, R, Ns, building)
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

    def _decide(self, tpl: _Template, R: Node, Ns: tuple, ks: tuple) -> str:
        carry_ref = self.chain[tpl.s - 1]
        if R is carry_ref:
            return "carry"
        walked = tuple(zip((R, *Ns), (tpl.s, *ks)))
        if all(N.type == R.type and self.own(N, k) for N, k in walked):
            return "hist"  # a history read (reroll_history): a row of the loop's outputs
        if id(R) in self.chain_ids:
            raise _Fail
        if all(N is R for N in Ns):
            return "same"
        if any(self.own(N, k) for N, k in walked) and all(
            N.type == R.type and self.hist(N, k) for N, k in walked
        ):
            return "hist"  # some read an earlier output, some a value from before the loop
        if (
            id(R) in tpl.stages
            and all(N.op == R.op for N in Ns)
            and any(N.attrs != R.attrs for N in Ns)
        ):
            return "write"
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
            bl = _block(R.attrs)
            if bl is not None and R.dtype == "f64" and all(
                N.args[0] is R.args[0] and (bn := _block(N.attrs)) is not None and bn[0] == bl[0]
                for N in Ns
            ):
                return "block"
        if (
            R.op == Op.CONST
            and R.type == Type(())
            and all(N.op == Op.CONST and N.type == R.type for N in Ns)
        ):  # not one node in every iteration (``same``): a number per iteration (0.0, -0.0)
            vals = [R.attrs[0], *(N.attrs[0] for N in Ns)]
            if all(_whole(v) for v in vals) and (
                len(vals) != 3 or vals[2] - vals[0] == 2 * (vals[1] - vals[0])
            ):
                return "iconst"  # the loop index as a number: computed in the body
            return "cseq"  # any other number per iteration: read from a table
        return "node"


class _Free:
    """What a template expects of a read through a table (:func:`_tabled`): any row, and the
    rest of the index as the reference's."""

    __slots__ = ("rest",)

    def __init__(self, rest: tuple):
        self.rest = rest


def _at(ints: tuple, e) -> bool:
    """Whether an index's integers are where a template expects them (``_Free``: any row)."""
    if type(e) is _Free:
        return ints[1:] == e.rest
    return ints == e


def _tabled(sr: tuple, ints: list, element: bool = False) -> bool:
    """Whether an element read (``element``: write of one element) whose index is ``sr``
    (``_split_items``) in the reference and ``ints`` in the iterations walked moves only in
    its first position, which is an integer on the array's first axis, and not by one step:
    read (added) through a table of rows (``take``, ``add_at``)."""
    pattern, ref = sr
    if not pattern or pattern[0] is not None or not ints:
        return False
    if element and any(p is not None for p in pattern):
        return False
    if any(tuple(n[1:]) != ref[1:] for n in ints):
        return False
    rows = [ref[0], *(n[0] for n in ints)]
    return len(rows) != 3 or rows[2] - rows[0] != 2 * (rows[1] - rows[0])


def _whole(v) -> bool:
    """Whether constant ``v`` is a float holding an integer the loop can recompute exactly
    from its index: finite, below 2**52, and not -0.0 (``i * b + a`` gives +0.0 there, and the
    sign of zero shows in arctan2, 1/x, copysign)."""
    return (
        isinstance(v, float) and math.isfinite(v) and v == int(v) and abs(v) < _EXACT_INT
        and not (v == 0.0 and math.copysign(1.0, v) < 0)
    )  # fmt: skip


def _leaf_ints(kind: str, n: Node) -> tuple:
    if kind in ("xs", "write"):
        return _split_items(n.attrs)[1]
    if kind == "block":
        return (_block(n.attrs)[1],)
    if kind == "iconst":
        return (int(n.attrs[0]),)
    return ()


