"""Re-rolling graph models: vertex loops whose iterations read earlier iterations' outputs.

A graph model written as a Python loop over its vertices —

    outs = []
    for v in range(V):
        s = x if v == 0 else outs[v - 1]
        if skip[v] is not None:            # a parent further back, from a constant table
            s = s + outs[skip[v]]
        outs.append(np.tanh(W[v] @ s + b[v]))

— traces to one chain (each vertex's output is the next one's carry) whose iterations differ in
two ways the plain matcher (:mod:`tapejit.passes.reroll.match`) refuses: some iterations read
the output of an earlier iteration other than the previous one (a *history* read: a row of the
loop's own outputs, :class:`tapejit.core.ops.History`), and only some have that read at all (the
Python ``if`` on a constant table), so iterations are of two lengths.

:func:`pad_history` makes the iterations alike before the chains are matched: where a chain's
iterations add a history read to the carry (``add(c, out_r)``, ``out_r`` an earlier node of the
same chain) at one place of their period, every iteration of it that does not gets
``add(c, -0.0)`` there — exact, since ``c + (-0.0)`` is ``c`` for every ``c`` (a signed zero
included; ``+0.0`` would turn ``-0.0`` into ``+0.0``). The matcher then takes the read, or the
``-0.0`` pad (one constant node per shape, whose ids :func:`pad_history` returns), as a
``hist`` leaf, and :func:`history_rows` gives the loop
builder the rows each iteration reads: a row of the loop's stacked outputs, or, for a pad or a
value computed before the loop, a row of the history input's own operand (:func:`fallback`).
"""

from __future__ import annotations

from ...core import ops, ops_table
from ...core.ir import Graph, Node
from ...core.ops import Op
from .common import MAX_PERIOD, MIN_RUN, _Fail, _replace_all, chain_depth

#: The fewest history reads in a chain worth padding its other iterations for.
MIN_READS = 4


def _reads(chain: list[Node]) -> dict[int, Node]:
    """Chain position -> the earlier chain node its ``add`` adds to the carry (a history read)."""
    pos = {id(n): k for k, n in enumerate(chain)}
    out: dict[int, Node] = {}
    for k in range(1, len(chain)):
        n = chain[k]
        if n.op != Op.ADD or n.args[0].type != n.args[1].type:
            continue
        a, b = n.args
        other = b if a is chain[k - 1] else a if b is chain[k - 1] else None
        if other is not None and pos.get(id(other), k) < k - 1:
            out[k] = other
    return out


def _plan(chain: list[Node]) -> list[int]:
    """The chain positions whose node gets a padded history read in front of it: none unless
    the chain without its history reads repeats with a period ``p`` and the reads all come at
    one phase of it; then the nodes at that phase, within the stretch the reads span, that
    have no read in front of them."""
    reads = _reads(chain)
    if len(reads) < MIN_READS:
        return []
    kept = [k for k in range(len(chain)) if k not in reads]
    at = {k: j for j, k in enumerate(kept)}
    ops_seq = [chain[k].op for k in kept]
    targets = [at[k + 1] for k in reads if k + 1 in at]  # the node after each read
    if len(targets) != len(reads):
        return []
    for p in range(1, MAX_PERIOD + 1):
        phase = targets[0] % p
        if any(j % p != phase for j in targets):
            continue
        lo, hi = min(targets), max(targets)
        # the stretch around the reads where the reduced chain repeats with period p
        while lo - p >= 0 and ops_seq[lo - p : lo] == ops_seq[lo : lo + p]:
            lo -= p
        while hi + p < len(ops_seq) and ops_seq[hi + 1 : hi + p + 1] == ops_seq[hi - p + 1 : hi + 1]:
            hi += p
        span = ops_seq[lo : hi + 1]
        if any(span[j] != span[j + p] for j in range(len(span) - p)):
            continue
        have = set(targets)
        pads = [kept[j] for j in range(lo, hi + 1, p) if j not in have and kept[j] >= 1]
        if len(pads) + len(reads) < MIN_RUN:
            return []
        return pads
    return []


def pad_history(g: Graph, chains: list[list[Node]]) -> tuple[Graph, int, frozenset]:
    """``g`` with the iterations of its vertex-loop chains (``chains``, its
    :func:`tapejit.passes.reroll.match._chains`) padded to one form (see the module
    docstring), how many iterations were padded, and the ids of the pads (``-0.0``
    constants, one per shape)."""
    mapping: dict[int, Node] = {}
    pads: dict[tuple, Node] = {}
    count = 0
    for chain in chains:
        for k in _plan(chain):
            n, prev = chain[k], chain[k - 1]
            if sum(a is prev for a in n.args) != 1:
                continue
            pad = pads.setdefault(prev.type.shape, ops.const(-0.0, prev.shape))
            padded = ops.add(prev, pad)
            args = tuple(padded if a is prev else a for a in n.args)
            mapping[id(n)] = Node(n.op, args, n.attrs, n.type)
            count += 1
    if not mapping:
        return g, 0, frozenset()
    return _replace_all(g, mapping), count, frozenset(id(p) for p in pads.values())


def history_rows(
    nodes: tuple[Node, ...], position: dict[int, int], lo: int, pads: frozenset
) -> tuple[tuple[int, ...], list[tuple[int, Node]]]:
    """The rows a history leaf reads in the iterations ``lo, lo + 1, ...`` of a run, from the
    node it reads in each (``nodes``): ``(rows, fallback)`` — row ``r`` of the loop's stacked
    outputs for the output of iteration ``lo + r`` (``position``: chain node -> iteration whose
    output it is), ``-1`` for a pad or a value computed before the loop, which ``fallback``
    lists as ``(t, node)`` (the pads left out: the operand is ``-0.0`` where nothing is
    written)."""
    rows: list[int] = []
    fallback: list[tuple[int, Node]] = []
    for t, n in enumerate(nodes):
        q = position.get(id(n))
        if q is not None and lo <= q < lo + t:
            rows.append(q - lo)
            continue
        rows.append(-1)
        if id(n) not in pads:
            fallback.append((t, n))
    memo: dict[int, int] = {}
    if fallback and max(chain_depth(n, position, memo) for _, n in fallback) >= lo:
        raise _Fail  # a value computed within the loop that is not an iteration's output
    return tuple(rows), fallback


def fallback(T: int, like: Node, rows: list[tuple[int, Node]], table) -> Node:
    """The operand of a history input: ``(T, *like.shape)``, row ``t`` the node of each ``(t,
    node)`` of ``rows`` and ``-0.0`` elsewhere — the distinct nodes stacked once (after a row of
    ``-0.0``) and taken through a constant table (``table(values)`` makes one), so its code
    does not grow with the number of iterations that read them."""
    if not rows:
        return ops.const(-0.0, (T, *like.shape))
    if table is None:
        raise _Fail
    where: dict[int, int] = {}
    stacked = []
    picks = [0.0] * T
    for t, n in rows:
        if id(n) not in where:
            where[id(n)] = len(stacked) + 1
            stacked.append(n)
        picks[t] = float(where[id(n)])
    base = ops.const(-0.0, (len(stacked) + 1, *like.shape))
    for j, n in enumerate(stacked, 1):
        base = ops.make(Op.SCATTER, base, n, attrs=(j,))
    return ops_table.take(base, table(tuple(picks)))
