"""Re-rolling, finding the runs: the runs of consecutive iterations of a chain that match one
template (:class:`tapejit.passes.reroll.match._Matcher`) with index attributes affine in the
iteration number (:func:`_find_runs`), what each run's leaves read in its first iteration and
how they move (:class:`_Run`), and the signature that lets short runs share a long run's body
(:func:`_template_signature`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...core import ir
from ...core.ir import Node
from .common import MIN_RUN, MIN_SHORT_RUN, _block, _Fail, _split_items
from .match import _Free, _leaf_ints, _Matcher, _Template

#: How deep :class:`_Skeletons` compares iterations before walking them.
SKELETON_DEPTH = 4


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
    extra: int = 0  # iterations after hi not in the chain (a captured loop's, not traced)
    tables: dict = field(default_factory=dict)  # cseq leaf id -> its value in each iteration
    rows: dict = field(default_factory=dict)  # free xs leaf id -> the row it reads, each iteration
    hist: dict = field(default_factory=dict)  # hist leaf id -> the node it reads, each iteration

    @property
    def trips(self) -> int:
        """The loop's trip count."""
        return self.hi - self.lo + 1 + self.extra


def _template_signature(tpl: _Template, root: Node) -> tuple:
    """The structure of the iteration rooted at ``root`` (the template's reference) without the
    identity of its nodes, operands of commutative ops in sorted order (hash-consing orders
    them by digest, which differs between iterations of different rows): each node's op,
    attributes and type; a ``same`` leaf (a loop parameter) by its type, an ``xs`` leaf by its
    array's type and the non-varying part of its index. Runs with one signature build one loop
    body, up to the order of commutative operands, over other parameters and sequences."""
    memo: dict[int, tuple] = {}

    def sig(n: Node) -> tuple:
        got = memo.get(id(n))
        if got is not None:
            return got
        kind = "node" if n is root else tpl.kind.get(id(n))
        if kind is None:
            out: tuple = ("?", id(n))  # not part of the template: never equal to another
        elif kind == "node":
            args = [sig(a) for a in n.args]
            if n.op in ir.commutative:
                args.sort(key=hash)  # any order, the same for equal signatures
            out = (n.op, n.attrs, n.type.shape, n.type.dtype, tuple(args))
        elif kind == "xs":
            base = n.args[0].type
            out = (kind, base.shape, _split_items(n.attrs)[0], n.type.shape, n.type.dtype)
        elif kind == "block":
            out = (kind, n.args[0].type.shape, _block(n.attrs)[0], n.type.shape, n.type.dtype)
        elif kind == "write":
            args = [sig(a) for a in n.args]
            out = (kind, n.op, _split_items(n.attrs)[0], n.type.shape, tuple(args))
        else:
            out = (kind, n.type.shape, n.type.dtype)
        memo[id(n)] = out
        return out

    return (tpl.root_varies, sig(root))


def _find_runs(
    chain: list[Node], chain_ids: set[int], guarded: set[int], known: set | None = None,
    min_run: int = MIN_RUN, tables: bool = True, pads: frozenset = frozenset(),
) -> list[_Run]:
    """Runs of at least ``min_run`` (``MIN_RUN``) consecutive iterations of ``chain`` that match one
    template with affine indices, in order, not overlapping; with ``known`` (a set of
    template signatures, updated with those of the runs found), also runs of at least
    ``MIN_SHORT_RUN`` whose template has a known signature. ``pads``: the ids of the ``-0.0``
    constants :func:`tapejit.passes.reroll.history.pad_history` padded iterations with (read
    as history, ``hist`` leaves). With ``tables``, where the affine
    template gives no run, element reads whose row moves other than affinely (``x[idx[e]]``
    of a numpy ``idx``) may be read through a table of the rows (``_Run.rows``)."""
    m = _Matcher(chain, chain_ids, guarded, pads)
    free_m = _Matcher(chain, set(), guarded, pads)  # a first iteration's walk (MAX_BODY bounds it)
    runs: list[_Run] = []
    pending: list[tuple[_Run, tuple]] = []  # short runs of a body not (yet) known
    floor = 0  # iterations before this belong to an earlier run
    s = 1
    skeleton = _Skeletons(chain_ids | {id(n) for n in chain} | pads)
    while s + 2 < len(chain):
        if not skeleton.alike(chain[s], chain[s + 1], chain[s + 2]):
            s += 1  # cannot match: no walk (a failing walk backtracks over operand orders)
            continue
        got = None
        for free_mode in (False, True) if tables else (False,):
            m.free_mode = free_mode
            attempt = _run_at(chain, s, floor, m, free_m)
            m.free_mode = False
            if attempt is not None and (got is None or _count(attempt) > _count(got)):
                got = attempt
            if got is not None and _count(got) >= min_run:
                break
        if got is None:
            s += 1
            continue
        run = got
        count = _count(run)
        short = count < min_run
        if short and (known is None or count < MIN_SHORT_RUN):
            s = max(s + 1, run.hi - 1)
            continue
        sig = _template_signature(run.tpl, chain[run.tpl.s]) if known is not None else None
        if short and sig not in known:
            pending.append((run, sig))  # its body may turn up in a long run further on
            s = max(s + 1, run.hi - 1)
            continue
        if not short and known is not None:
            known.add(sig)
        runs.append(run)
        floor = run.hi + 1
        s = run.hi + 2
    taken = [(r.lo, r.hi) for r in runs]
    for run, sig in pending:
        if sig in known and not any(run.lo <= b and a <= run.hi for a, b in taken):
            runs.append(run)
            taken.append((run.lo, run.hi))
    runs.sort(key=lambda r: r.lo)
    return runs


def _count(run: _Run) -> int:
    return run.hi - run.lo + 1


def _run_at(chain: list[Node], s: int, floor: int, m: "_Matcher", free_m: "_Matcher") -> _Run | None:
    """The run around iterations ``s``, ``s+1``, ``s+2`` (their template, extended forward and
    back to ``floor``), or ``None`` when those three do not match one template."""
    tpl = _Template(s)
    try:
        st = m.walk(tpl, (s + 1, s + 2), True)
        base = _facts(tpl, None, chain[s])
        nxt = _facts(tpl, st, chain[s + 1])
    except _Fail:
        return None
    step = {key: tuple(b - a for a, b in zip(base[key], nxt[key])) for key in base if key not in tpl.free}
    if not _steps_ok(tpl, step):
        return None
    cseq = [r for r in tpl.leaves if tpl.kind[id(r)] == "cseq"]
    free = [r for r in tpl.leaves if id(r) in tpl.free]
    hist = [r for r in tpl.leaves if tpl.kind[id(r)] == "hist"]
    noted = cseq + free + hist  # iteration -> its node of each cseq, table-read, hist leaf
    seen = {s: list(noted)}
    seen[s + 1] = [st["env"][id(r)][0] for r in noted]
    seen[s + 2] = [st["env"][id(r)][1] for r in noted]
    rest: dict = {id(r): _Free(_split_items(r.attrs)[1][1:]) for r in free}
    if "__root__" in tpl.free:
        rest["__root__"] = _Free(_split_items(chain[s].attrs)[1][1:])

    def fits(k: int, is_free: bool = False) -> dict | None:
        d = k - s
        expect = {key: tuple(b + d * e for b, e in zip(base[key], step[key])) for key in step}
        expect.update(rest)
        got = (free_m if is_free else m).check(tpl, k, is_free, expect)
        if got is not None and noted:
            seen[k] = [got["env"][id(r)][0] for r in noted]
        return got

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
            st = fits(lo - 1, is_free=True)
            if st is not None:
                lo, lo_st = lo - 1, st
            break
        lo, lo_st = lo - 1, st
    if lo_st is None:
        first = {id(r): r for r in tpl.leaves}
        init = chain[s - 1]
    else:
        first = {id(r): lo_st["env"][id(r)][0] for r in tpl.leaves}
        init = lo_st["carry"][0]
    root_step = step.pop("__root__", ())
    tables = {
        id(r): tuple(seen[k][j].attrs[0] for k in range(lo, hi + 1)) for j, r in enumerate(cseq)
    }
    rows = {
        id(r): tuple(_split_items(seen[k][len(cseq) + j].attrs)[1][0] for k in range(lo, hi + 1))
        for j, r in enumerate(free)
    }
    if "__root__" in tpl.free:  # the rows the iterations add to
        rows["__root__"] = tuple(_split_items(chain[k].attrs)[1][0] for k in range(lo, hi + 1))
    j0 = len(cseq) + len(free)
    reads = {
        id(r): tuple(seen[k][j0 + j] for k in range(lo, hi + 1)) for j, r in enumerate(hist)
    }
    return _Run(tpl, lo, hi, init, first, step, chain[lo].attrs, root_step, tables=tables,
                rows=rows, hist=reads)  # fmt: skip


class _Skeletons:
    """A node's *skeleton*: its op and type and, to :data:`SKELETON_DEPTH` levels, the
    skeletons of its operands (as a multiset: commutative operands come in either order),
    chain nodes (carries) as leaves. Iterations that match one template have equal skeletons:
    what the walk pairs node for node has equal ops and types, and its leaves are equal to
    that depth (the same node, reads of the same array at other positions, constants, the
    carry). Iterations of another length (a loop per row of a triangle) differ, and are not
    walked at all (a failing walk backtracks over the orders of commutative operands)."""

    def __init__(self, chain_ids: set[int]):
        self.memo: dict[tuple[int, int], int] = {}
        self.chain_ids = chain_ids

    def of(self, n: Node, depth: int) -> int:
        key = (id(n), depth)
        h = self.memo.get(key)
        if h is None:
            if id(n) in self.chain_ids:  # a carry, a history read or its pad
                h = hash(("chain", n.type))
            elif depth == 0 or not n.args:
                h = hash((n.op, n.type))
            else:
                kids = sorted(self.of(a, depth - 1) for a in n.args)
                h = hash((n.op, n.type, *kids))
            self.memo[key] = h
        return h

    def alike(self, *roots: Node) -> bool:
        """Whether the iterations rooted at ``roots`` (chain nodes) may match."""
        def root(n: Node) -> int:
            kids = sorted(self.of(a, SKELETON_DEPTH - 1) for a in n.args)
            return hash((n.op, n.type, *kids))

        first = root(roots[0])
        return all(root(n) == first for n in roots[1:])


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
    for key, d in step.items():
        if sum(1 for v in d if v != 0) > 1:
            return False
    for r in tpl.leaves:
        if id(r) in tpl.free:
            continue
        if tpl.kind[id(r)] == "write" and sum(1 for v in step.get(id(r), ()) if v != 0) != 1:
            return False
    if tpl.root_varies and "__root__" not in tpl.free:
        d = step.get("__root__", ())
        if sum(1 for v in d if v != 0) != 1:
            return False
    return True


