"""Re-rolling a sum (or an array fill) whose iterations take different branches: terms (writes)
grouped by their shape.

A sum ``e = e + term`` over a Python loop whose body branches on the data —
``e = e + max(x[i], 0.0) ** 2``, a pair potential with a cutoff (``if r2 < rc2: e = e +
...``), a constitutive law with an elastic and a plastic branch — leaves a chain of adds whose
terms come in a few shapes, in an order only the data decides. Runs of consecutive iterations
(:mod:`tapejit.passes.reroll.match`) are then short. With sums reassociated (as
:data:`tapejit.passes.reroll.driver.REDUCE` allows: ``np.sum``'s order), :func:`partition_sum`
groups the terms by shape instead — the same elementwise expression of the same leaves, element
reads at positions that move by a step or by any row (a table, ``take``), numbers per term from
a table (:class:`tapejit.passes.reroll.guards._Leaves`, which the loop's guards are matched
with too) — and sums each group of at least :data:`MIN_GROUP` terms as one vector and one
reduction. Terms of no such group are added after them, in their order. The loop's guards,
rolled into vector guards (:mod:`tapejit.passes.reroll.guards`), keep checking every
iteration's branch.

Only for a chain whose intermediate sums nothing else reads and whose terms do not read the
sum (every term is independent of the order of the additions); otherwise, or when grouping
rolls fewer terms than runs would, the chain is left to the runs.

An array filled element by element by branches (``stress[e] = E * strain[e]`` or ``= ...``
after a yield test) is grouped the same way by :func:`partition_writes`: each group's updates
one vector written at a table of its positions (``put``, exact: the positions are distinct, so
the order of the writes does not matter; additions ``f[a] += t``: ``add_at``, reassociated
where a position repeats).
"""

from __future__ import annotations

from typing import Callable

from ...core import ir, ops, ops_table
from ...core.ir import Node, Type
from ...core.ops import Op
from .guards import _bits, _Leaves, _vectorised
from .common import MIN_RUN

#: The fewest terms of one shape summed as a vector.
MIN_GROUP = MIN_RUN
#: The most shapes of terms one sum is grouped into.
MAX_GROUPS = 8


def _upto(chain: list[Node], ops_: tuple) -> list[Node]:
    """``chain`` up to its last node of one of ``ops_`` (what follows uses the loop's result:
    ``np.sum(y * w)`` after filling ``y``)."""
    end = len(chain)
    while end > 0 and chain[end - 1].op not in ops_:
        end -= 1
    return chain[:end]


def terms_of(chain: list[Node], users: dict[int, int]) -> tuple[int, list] | None:
    """``(s, [(sign, term)])``: the longest tail ``chain[s + 1:]`` that adds terms to
    ``chain[s]`` (each node ``chain[k-1] + t``, ``t + chain[k-1]`` or ``chain[k-1] - t``, every
    sum but the last read by the next alone: ``users`` counts the nodes, outputs and guards
    reading each node; a chain may begin inside the first iteration's term), or ``None`` when
    there is none or a term reads the sum."""
    chain = _upto(chain, (Op.ADD, Op.SUB))
    if len(chain) < 2 or chain[-1].type != Type(()) or chain[-1].dtype != "f64":
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
    if _reads_chain([t for _, t in out], chain[k:]):
        return None
    return k, out


def _groups(items: list[tuple], table: Callable[[tuple], Node]) -> list[tuple[tuple, Node, list[int]]]:
    """``items`` — ``(key, scalar node)`` — grouped by the node's shape (the same elementwise
    expression of leaves that move alike: :class:`tapejit.passes.reroll.guards._Leaves`) within
    each key, at most :data:`MAX_GROUPS` groups: ``(key, vector, members)`` for each group of at
    least :data:`MIN_GROUP`, its nodes computed as one f64 vector (element ``m``: member
    ``m``)."""
    groups: list[tuple[tuple, _Leaves, list[int]]] = []
    for k, (key, v) in enumerate(items):
        if v.shape != ():
            continue
        for g_key, lv, members in groups:
            if g_key == key:
                got = lv.match(v)
                if got is not None and lv.commit(got, len(members)):
                    members.append(k)
                    break
        else:
            if len(groups) < MAX_GROUPS:
                groups.append((key, _Leaves(v), [k]))
    out = []
    for key, lv, members in groups:
        if len(members) < MIN_GROUP:
            continue
        for leaf, seq in list(lv.tables.items()):
            if len({_bits(v) for v in seq}) == 1:  # the same number in every member
                del lv.tables[leaf]
                lv.same.add(leaf)
        vec = _vectorised(lv.ref, lv, len(members), table)
        if vec.dtype == "f64":
            out.append((key, vec, members))
    return out


def _reads_chain(values: list[Node], chain: list[Node]) -> bool:
    """Whether any of ``values`` depends on a node of ``chain``."""
    ids = {id(n) for n in chain}
    memo: dict[int, tuple] = {}
    decide = lambda m: True if id(m) in ids else None  # noqa: E731
    return any(ir.depends(v, decide, memo) for v in values)


def partition_sum(
    chain: list[Node], users: dict[int, int], table: Callable[[tuple], Node]
) -> tuple[Node, Node, int] | None:
    """The last sum of ``chain`` (what uses the loop's result may follow it), the node that
    replaces it — the first sum plus each group's vector sum, then the other terms — and the
    number of terms summed as vectors; ``None`` when no group has :data:`MIN_GROUP` terms (see
    the module docstring)."""
    chain = _upto(chain, (Op.ADD, Op.SUB))
    got = terms_of(chain, users)
    if got is None:
        return None
    start, terms = got
    total, rolled, done = chain[start], 0, set()
    for sign, vec, members in _groups(terms, table):  # grouped by sign, then shape
        part = ops.reduce(Op.REDUCE_SUM, vec, (0,))
        total = ops.add(total, part) if sign > 0 else ops.sub(total, part)
        rolled += len(members)
        done.update(members)
    if not rolled:
        return None
    for k, (sign, t) in enumerate(terms):
        if k not in done:
            total = ops.add(total, t) if sign > 0 else ops.sub(total, t)
    return chain[-1], total, rolled


def writes_of(chain: list[Node], users: dict[int, int]) -> tuple[int, list[tuple[int, Node]]] | None:
    """``(s, [(flat position, update)])``: the longest tail ``chain[s + 1:]`` of element writes
    (one op, ``scatter`` or ``scatter_add``, of a scalar at an element of the array) into
    ``chain[s]``, every array but the last read by the next write alone, no update reading the
    written arrays; ``None`` when there is none."""
    chain = _upto(chain, (Op.SCATTER, Op.SCATTER_ADD))
    if len(chain) < 2:
        return None
    last = chain[-1]
    if last.dtype != "f64":
        return None
    strides = [1] * last.ndim
    for a in range(last.ndim - 2, -1, -1):
        strides[a] = strides[a + 1] * last.shape[a + 1]
    out: list[tuple[int, Node]] = []
    k = len(chain) - 1
    while k > 0:
        c, prev = chain[k], chain[k - 1]
        if c.op != last.op or c.args[0] is not prev or c.args[1].shape != ():
            break
        if k < len(chain) - 1 and users.get(id(c), 0) != 1:
            break
        items = c.attrs
        if len(items) != c.ndim or any(type(i) is not int for i in items):
            break
        out.append((sum(i * st for i, st in zip(items, strides)), c.args[1]))
        k -= 1
    if not out:
        return None
    out.reverse()
    if _reads_chain([v for _, v in out], chain[k:]):
        return None
    return k, out


def partition_writes(
    chain: list[Node], users: dict[int, int], table: Callable[[tuple], Node], reassociate: bool
) -> tuple[Node, Node, int] | None:
    """A chain of element writes ``y[p_k] = v_k`` (``+= v_k``) whose updates come in a few
    shapes (the branches of a loop that fills an array), grouped by shape like
    :func:`partition_sum`'s terms: each group of at least :data:`MIN_GROUP` one vector of
    updates written at a table of positions (``put``; ``add_at`` for additions), the other
    writes after them in their order. Writes that overwrite must be at distinct positions (the
    order of the writes then does not matter: the same array); additions at a repeated
    position need ``reassociate`` (each element's sum in another order). Returns the last
    write of ``chain``, the node replacing it and the writes grouped, or ``None``."""
    chain = _upto(chain, (Op.SCATTER, Op.SCATTER_ADD))
    got = writes_of(chain, users)
    if got is None:
        return None
    start, writes = got
    positions = [p for p, _ in writes]
    if len(set(positions)) != len(positions) and (chain[-1].op == Op.SCATTER or not reassociate):
        return None
    base = chain[start]
    flat = ops.reshape(base, (base.type.size,))
    put_op = ops_table.put if chain[-1].op == Op.SCATTER else ops_table.add_at
    rolled, done = 0, set()
    for _, vec, members in _groups([(0, v) for _, v in writes], table):
        at = table(tuple(float(positions[k]) for k in members))
        flat = put_op(flat, at, vec)
        rolled += len(members)
        done.update(members)
    if not rolled:
        return None
    acc = ops.reshape(flat, base.shape)
    for k, ((_, v), c) in enumerate(zip(writes, chain[start + 1 :])):
        if k not in done:
            acc = ops.make(c.op, acc, v, attrs=c.attrs)
    return chain[-1], acc, rolled
