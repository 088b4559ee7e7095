"""Re-rolling a sum whose iterations take different branches: terms grouped by their shape.

A sum ``e = e + term`` over a Python loop whose body branches on the data —
``e = e + max(x[i], 0.0) ** 2``, a pair potential with a cutoff (``if r2 < rc2: e = e +
...``), a constitutive law with an elastic and a plastic branch — leaves a chain of adds whose
terms come in a few shapes, in an order only the data decides. Runs of consecutive iterations
(:mod:`tapejit.passes.reroll_match`) are then short. With sums reassociated (as
:data:`tapejit.passes.reroll.REDUCE` allows: ``np.sum``'s order), :func:`partition_sum`
groups the terms by shape instead — the same elementwise expression of the same leaves, element
reads at positions that move by a step or by any row (a table, ``take``), numbers per term from
a table (:class:`tapejit.passes.reroll_guards._Leaves`, which the loop's guards are matched
with too) — and sums each group of at least :data:`MIN_GROUP` terms as one vector and one
reduction. Terms of no such group are added after them, in their order. The loop's guards,
rolled into vector guards (:mod:`tapejit.passes.reroll_guards`), keep checking every
iteration's branch.

Only for a chain whose intermediate sums nothing else reads and whose terms do not read the
sum (every term is independent of the order of the additions); otherwise, or when grouping
rolls fewer terms than runs would, the chain is left to the runs.
"""

from __future__ import annotations

from typing import Callable

from .. import ir, ops
from ..ir import Node, Type
from ..ops import Op
from .reroll_guards import _bits, _Leaves, _vectorised
from .reroll_match import MIN_RUN

#: The fewest terms of one shape summed as a vector.
MIN_GROUP = MIN_RUN
#: The most shapes of terms one sum is grouped into.
MAX_GROUPS = 8


def terms_of(chain: list[Node], users: dict[int, int]) -> tuple[int, list] | None:
    """``(s, [(sign, term)])``: the longest tail ``chain[s + 1:]`` that adds terms to
    ``chain[s]`` (each node ``chain[k-1] + t``, ``t + chain[k-1]`` or ``chain[k-1] - t``, every
    sum but the last read by the next alone: ``users`` counts the nodes, outputs and guards
    reading each node; a chain may begin inside the first iteration's term), or ``None`` when
    there is none or a term reads the sum."""
    if chain[-1].type != Type(()) or chain[-1].dtype != "f64":
        return None
    out: list[tuple[int, Node]] = []
    k = len(chain) - 1
    while k > 0:
        c, prev = chain[k], chain[k - 1]
        if c.op not in (Op.ADD, Op.SUB) or c.type != prev.type:
            break
        if k < len(chain) - 1 and users.get(id(c), 0) != 1:
            break
        a, b = c.args
        if a is prev and b is not prev:
            out.append((1 if c.op == Op.ADD else -1, b))
        elif b is prev and a is not prev and c.op == Op.ADD:
            out.append((1, a))
        else:
            break
        k -= 1
    if not out:
        return None
    out.reverse()
    ids = {id(n) for n in chain[k:]}
    memo: dict[int, tuple] = {}
    decide = lambda m: True if id(m) in ids else None  # noqa: E731
    if any(ir.depends(t, decide, memo) for _, t in out):
        return None
    return k, out


def partition_sum(
    chain: list[Node], users: dict[int, int], table: Callable[[tuple], Node]
) -> tuple[Node, int] | None:
    """The node that replaces ``chain[-1]`` — ``chain[0]`` plus each group's vector sum, then
    the other terms — and the number of terms summed as vectors; ``None`` when no group has
    :data:`MIN_GROUP` terms (see the module docstring)."""
    got = terms_of(chain, users)
    if got is None:
        return None
    start, terms = got
    groups: list[tuple[int, _Leaves, list[int]]] = []  # (sign, leaves, term positions)
    for k, (sign, t) in enumerate(terms):
        if t.shape != ():
            continue
        for g_sign, lv, members in groups:
            if g_sign != sign:
                continue
            got = lv.match(t)
            if got is not None and lv.commit(got, len(members)):
                members.append(k)
                break
        else:
            if len(groups) < MAX_GROUPS:
                groups.append((sign, _Leaves(t), [k]))
    total, rolled, done = chain[start], 0, set()
    for sign, lv, members in groups:
        T = len(members)
        if T < MIN_GROUP:
            continue
        for key, seq in list(lv.tables.items()):
            if len({_bits(v) for v in seq}) == 1:  # the same number in every term
                del lv.tables[key]
                lv.same.add(key)
        vec = _vectorised(lv.ref, lv, T, table)
        if vec.dtype != "f64":
            continue
        part = ops.reduce(Op.REDUCE_SUM, vec, (0,))
        total = ops.add(total, part) if sign > 0 else ops.sub(total, part)
        rolled += T
        done.update(members)
    if not rolled:
        return None
    for k, (sign, t) in enumerate(terms):
        if k not in done:
            total = ops.add(total, t) if sign > 0 else ops.sub(total, t)
    return total, rolled
