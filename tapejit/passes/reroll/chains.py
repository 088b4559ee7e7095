"""Re-rolling, finding the chains: the carries a Python loop leaves in the trace, each a path of
same-typed nodes from its initial value to its result (:func:`_chains`), and the periods (chain
nodes per iteration) worth trying on them (:func:`_periods`, :func:`_periodic_part`). See
:mod:`tapejit.passes.reroll.driver` for the whole pass."""

from __future__ import annotations

from ...core import ops
from ...core.ir import Node
from ...core.ops import Op
from .common import MAX_PERIOD, MIN_RUN, _WRITES

def _chains(nodes: list[Node]) -> list[list[Node]]:
    """Maximal chains (see the module docstring) of at least ``MIN_RUN`` nodes.

    ``L(u)``, the longest path of nodes of ``u``'s type ending at ``u``, is what tells the
    carry from the terms: the carry is the operand with the longest path behind it (it goes
    back through every earlier iteration), a term's path stays within its iteration. A chain is
    followed back from its end through those operands, and stops where two operands tie."""
    L: dict[int, int] = {}
    pred: dict[int, Node] = {}
    leaf, loop, writes = ops.LEAF, Op.LOOP, _WRITES
    for u in nodes:  # (a hot loop: one pass over the trace, ~10^6 nodes for big element loops)
        op, args = u.op, u.args
        if op in leaf or op == loop or not args or u.type.dtype != "f64":
            continue
        ut = u.type
        if op in writes:  # the accumulator is the carry of an indexed write
            args = args[:1]
        # the operand with the longest path behind it (the first, on a tie), and the longest
        # path behind any other operand: it is the carry's only when strictly longer
        best, l1, l2 = None, 0, 0
        for a in args:
            la = L.get(id(a))
            if la is None or a is best or (a.type is not ut and a.type != ut):
                continue
            if la > l1:
                best, l1, l2 = a, la, l1
            elif la > l2:
                l2 = la
        L[id(u)] = 1 + l1
        if best is not None and l1 > l2:
            pred[id(u)] = best
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


