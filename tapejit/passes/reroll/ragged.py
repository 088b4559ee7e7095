"""Re-rolling sums over rows of different lengths: a triangular element loop as one flat sum.

A loop whose iterations work on rows that shrink (or grow) by a fixed step ::

    e = 0.0
    for i in range(n - 1):
        d = pos[i + 1:] - pos[i]                  # (n-1-i, 3)
        r2 = np.sum(d * d, axis=1)
        e = e + np.sum(4.0 * (r2**-6 - r2**-3))

    for i in range(n):                            # the scalar pair loop: its inner loops are
        for j in range(i + 1, n):                 # re-rolled first (sums over the row
            ...                                   # pos[i+1:, c] - pos[i, c], one per i)

traces to an ``add`` chain whose terms are alike but for the *lengths* of their arrays, so the
iteration matcher (:mod:`tapejit.passes.reroll.match`), which needs equal types, leaves it
unrolled: the trace, the passes, the kernels and LLVM grow with ``n`` (255 rows for 256 atoms).
This pass (:func:`ragged_sum`, tried on a sum chain the matcher left mostly unrolled) rebuilds
such a run as one computation on a *ragged layout* (:mod:`tapejit.core.ops_window`): all its rows
stored flat, row after row, row ``k`` of length ``L(k) = L0 + dL*k``.

**Matching.** Iteration ``j``'s term is walked against a template term node for node (op,
dtype, rank and attributes equal; commutative operands in the order of a hash of their
structure, which leaves out the numbers that change between iterations). Nodes identical in
the template and the next iteration are *shared* (an input, a constant, a value computed
before the loop). What may differ, and must be affine in the iteration number ``k`` over the
run:

* a read ``x[r, ...]`` of a shared array at an integer row ``r = a + b*k`` (the rest of the
  index equal): a per-iteration value, read for all iterations as the strided rows
  ``x[a::b]``;
* a read ``x[s:e:st, ...]`` (``st > 0``) whose start ``s = a + c*k`` and length ``L(k)``
  move: a ragged value, read as ``window(x)`` (rows ``a + c*k + st*m``);
* the first extent of the arrays computed from those (``L(k)`` for ragged values, fixed for
  the others) and of constants and broadcasts;

and every ragged value of the run has the same ``L(k)``.

**Building** every row at once is :mod:`tapejit.passes.reroll.flat`; the run's terms are then
summed, ``e_lo + sum(terms)``, reassociated as the re-rolled sums of
:mod:`tapejit.passes.reroll.driver` are (a term that sums a whole ragged value is summed over ``P``
directly). What the builder cannot build (an index of a computed value, a reshape across the
ragged axis, a maximum over it...) leaves the chain as it is.
"""

from __future__ import annotations

from ...core import ops
from ...core.ir import Node, _attr_key
from ...core.ops import Op
from .flat import _build, _Layout
from .common import MIN_RUN, _Fail

_COMMUTATIVE = frozenset(ops.COMMUTATIVE)
_SHAPED = (Op.BROADCAST_TO, Op.RESHAPE)  # attrs are the result shape


class _Hash(dict):
    """A hash of a node's structure without the numbers that change between iterations: the
    first index item's value, the first extent of shapes (memoised per node)."""

    def of(self, n: Node) -> int:
        h = self.get(id(n))
        if h is not None:
            return h
        stack = [n]
        while stack:
            u = stack[-1]
            todo = [a for a in u.args if id(a) not in self]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            if id(u) in self:
                continue
            if u.op == Op.INPUT:
                h = hash(("in", u.attrs[0]))
            elif u.op == Op.CONST:
                h = hash(("c", u.attrs, u.ndim, u.dtype))
            elif u.op == Op.INDEX:
                first = u.attrs[0]
                kind = "s" if isinstance(first, tuple) else "i"
                h = hash(("ix", self[id(u.args[0])], kind, u.attrs[1:], u.ndim))
            else:
                attrs = len(u.attrs) if u.op in _SHAPED else u.attrs
                ch = [self[id(a)] for a in u.args]
                if u.op in _COMMUTATIVE:
                    ch.sort()
                h = hash((u.op, u.dtype, u.ndim, attrs, tuple(ch)))
            self[id(u)] = h
        return self[id(n)]


def _numbers(t: Node, n: Node) -> tuple:
    """What may differ between template node ``t`` and ``n`` (both of one op): the first index
    item, the first extents; raises :class:`_Fail` when anything else does."""
    if t.op == Op.INDEX:
        a, b = t.attrs[0], n.attrs[0]
        if t.attrs[1:] != n.attrs[1:] or isinstance(a, tuple) != isinstance(b, tuple):
            raise _Fail
        if isinstance(a, tuple):
            if a[2] != b[2] or a[2] <= 0:
                raise _Fail
            return ("slice", b[0], len(range(*b)))
        return ("row", b)
    if t.op in _SHAPED:
        if t.attrs[1:] != n.attrs[1:] or len(t.attrs) != len(n.attrs) or not t.attrs:
            raise _Fail
    elif _attr_key(t.attrs) != _attr_key(n.attrs):  # (a constant's -0.0 is not its 0.0)
        raise _Fail
    if t.shape[1:] != n.shape[1:]:
        raise _Fail
    return ("extent", n.shape[0]) if n.ndim else ()


class _Pairing:
    """Template term ``tpl`` walked against one iteration's term: ``pair[id(t)]`` the node of
    the iteration, ``nums[id(t)]`` its numbers (:func:`_numbers`). Raises :class:`_Fail`."""

    def _order(self, n: Node) -> tuple:
        """Commutative operands by structure, then (reads of one structure: ``w[i] *
        w[i + 1]``) by the row they read — an order every row keeps when the rows move
        alike; when they do not, the numbers do not fit and the run ends."""
        first = n.attrs[0] if n.op == Op.INDEX else 0
        return (self.h.of(n), first[0] if isinstance(first, tuple) else first)

    def tnode(self, key: int) -> Node:
        return self.tnodes[key]

    def __init__(self, tpl: Node, term: Node, h: _Hash, shared: set[int] | None):
        self.pair: dict[int, Node] = {}
        self.tnodes: dict[int, Node] = {}
        self.nums: dict[int, tuple] = {}
        self.h, self.shared = h, shared
        self._walk(tpl, term)

    def _walk(self, t0: Node, n0: Node) -> None:
        stack = [(t0, n0)]
        while stack:
            t, n = stack.pop()
            got = self.pair.get(id(t))
            if got is not None:
                if got is not n:
                    raise _Fail
                continue
            self.pair[id(t)] = n
            self.tnodes[id(t)] = t
            if n is t or (self.shared is not None and id(t) in self.shared):
                if n is not t:
                    raise _Fail
                continue
            if t.op != n.op or t.dtype != n.dtype or t.ndim != n.ndim or len(t.args) != len(n.args):
                raise _Fail
            if t.op in (Op.INPUT, Op.LOOP, Op.CUSTOM) or (t.op == Op.CONST and t.ndim == 0):
                raise _Fail  # differs, but is not something that may
            self.nums[id(t)] = _numbers(t, n)
            ta, na = list(t.args), list(n.args)
            if t.op in _COMMUTATIVE:
                ta.sort(key=self._order)
                na.sort(key=self._order)
                if [self.h.of(a) for a in ta] != [self.h.of(a) for a in na]:
                    raise _Fail
            stack.extend(zip(ta, na))


# ----------------------------------------------------------------------------------------------
# Runs of a sum chain


def ragged_sum(
    chain: list[Node], users: dict[int, int], guarded: set[int]
) -> tuple[Node, Node, int, int] | None:
    """The longest run of a sum chain ``e = e + t_k`` whose terms are alike but for the
    lengths of their rows (see the module docstring), rebuilt: ``(old, new, iterations,
    tail)`` — the chain node ``old`` the run ends at, what replaces it, the iterations it
    re-rolls and the chain nodes after it — or ``None``. ``users``: readers of each node (a
    chain node read elsewhere ends a run); ``guarded``: nodes a scalar guard reads (an
    iteration with one stays unrolled)."""
    chain = _additions(chain)
    if len(chain) < MIN_RUN or any(c.op != Op.ADD or c.shape != () for c in chain):
        return None
    try:
        terms = _terms(chain)
    except _Fail:
        return None
    h = _Hash()
    best = None
    m = len(chain) - 1
    for s in sorted({1, m // 3, m // 2, (2 * m) // 3}):
        if s < 1 or s + 1 > m or (best is not None and best[0] <= s <= best[1]):
            continue
        try:
            got = _run(chain, terms, s, h, users, guarded)
        except _Fail:
            continue
        if got is not None and (best is None or got[1] - got[0] > best[1] - best[0]):
            best = got
    if best is None:
        return None
    lo, hi, new = best
    return chain[hi], new, hi - lo + 1, len(chain) - 1 - hi


def ragged_groups(
    chain: list[Node], users: dict[int, int], guarded: set[int]
) -> tuple[Node, Node, int, int] | None:
    """A sum chain whose rows of different lengths are not consecutive terms (a pair loop's
    rows before and after the diagonal, ``j < i`` and ``j > i``; rows between unrolled short
    ones), regrouped: its terms grouped by their structure, each group of at least
    :data:`MIN_GROUP` terms that fit one template (numbers affine in their order in the group)
    one ragged sum (consecutive members, or every second or third), the other terms added
    after them in their order — a reassociation of the
    whole sum, so only for a chain whose partial sums nothing else reads. Returns ``(old,
    new, terms grouped, terms left)`` (see :func:`ragged_sum`) or ``None``."""
    chain = _additions(chain)
    if len(chain) < MIN_GROUP or any(users.get(id(c), 0) != 1 for c in chain[:-1]):
        return None
    try:
        terms = [*chain[0].args, *_terms(chain)[1:]]
    except _Fail:
        return None
    h = _Hash()
    groups: dict[int, list[int]] = {}
    for i, t in enumerate(terms):
        if t.op == Op.REDUCE_SUM:
            groups.setdefault(h.of(t), []).append(i)
    built, used = [], set()
    for group in groups.values():
        # runs of consecutive members first; then of every second or third one (a pair loop
        # over j != i: each row's terms before and after the diagonal alternate)
        for p in (1, 2, 3):
            left = [i for i in group if i not in used]
            for phase in range(p):
                members, start = left[phase::p], 0
                while len(members) - start >= MIN_GROUP:
                    run = _group_run(terms, members[start:], h, guarded)
                    if run is None:
                        start += 1
                        continue
                    node, n = run
                    built.append(node)
                    used.update(members[start : start + n])
                    start += n
    if not built:
        return None
    total = built[0]
    for b in built[1:]:
        total = ops.add(total, b)
    rest = [t for i, t in enumerate(terms) if i not in used]
    for t in rest:
        total = ops.add(total, t)
    return chain[-1], total, len(used), len(rest)


#: Fewest terms of one structure :func:`ragged_groups` makes one ragged sum of.
MIN_GROUP = 4


def _group_run(terms: list[Node], members: list[int], h: _Hash, guarded: set[int]):
    """``(sum, count)``: the longest start of ``members`` (positions in ``terms``) whose
    terms fit one template, summed as rows of a ragged layout; ``None`` when it is shorter
    than :data:`MIN_GROUP`."""
    try:
        rows = _Rows(terms[members[0]], terms[members[1]], 0, h, guarded)
    except _Fail:
        return None
    n = 2
    while n < len(members) and rows.fits(n, terms[members[n]]):
        n += 1
    if n < MIN_GROUP:
        return None
    try:
        return rows.build(0, n), n
    except _Fail:
        return None


class _Rows:
    """Terms alike but for numbers affine in the row: the template ``tpl`` (row ``s``) and
    the numbers of each of its nodes at row ``s`` and their step per row, from ``tpl`` and
    the next row's term ``nxt``. Raises :class:`_Fail`."""

    def __init__(self, tpl: Node, nxt: Node, s: int, h: _Hash, guarded: set[int]):
        self.tpl, self.s, self.h, self.guarded = tpl, s, h, guarded
        first = _Pairing(tpl, nxt, h, None)
        self.shared = {k for k, n in first.pair.items() if first.tnode(k) is n}
        if any(k in guarded or id(n) in guarded
               for k, n in first.pair.items() if k not in self.shared):  # fmt: skip
            raise _Fail
        self.base = {k: _numbers(first.tnode(k), first.tnode(k)) for k in first.nums}
        self.step: dict[int, tuple] = {}
        for k, v in first.nums.items():
            b = self.base[k]
            if not b:
                self.step[k] = ()
                continue
            if v[0] != b[0]:
                raise _Fail
            self.step[k] = tuple(x - y for x, y in zip(v[1:], b[1:]))

    def fits(self, j: int, term: Node) -> bool:
        """Whether ``term`` is row ``j``'s: the template with its numbers at row ``j``."""
        try:
            p = _Pairing(self.tpl, term, self.h, self.shared)
        except _Fail:
            return False
        if any(id(n) in self.guarded for k, n in p.pair.items() if k not in self.shared):
            return False
        for k, v in p.nums.items():
            b, st = self.base[k], self.step[k]
            if not b:
                continue
            if v[0] != b[0] or any(x != y + (j - self.s) * d for x, y, d in zip(v[1:], b[1:], st)):
                return False
        return True

    def build(self, lo: int, T: int) -> Node:
        """The sum of the terms of rows ``lo .. lo + T - 1``, for all rows at once. Raises
        :class:`_Fail` (also for rows that would read out of bounds)."""
        fit = {}
        for k, b in self.base.items():
            st = self.step[k]
            if b:
                lo_vals = tuple(y - (self.s - lo) * d for y, d in zip(b[1:], st))
                fit[k] = (b[0], *zip(lo_vals, st))
        tpl = self.tpl
        try:
            lay = _Layout(T)
            memo = _build(tpl, self.shared, fit, lay)
            level, total = memo[id(tpl)]
            if level != "k" or total.shape != (T,):
                raise _Fail
            x = tpl.args[0] if tpl.op == Op.REDUCE_SUM else None
            if x is not None and memo[id(x)][0] == "r" and len(tpl.attrs[0]) == x.ndim:
                return ops.reduce(Op.REDUCE_SUM, memo[id(x)][1], tuple(range(x.ndim)))  # over P
            return ops.reduce(Op.REDUCE_SUM, total, (0,))
        except (ValueError, IndexError, TypeError) as e:  # a row out of bounds (extended
            raise _Fail from e  # rows), an operand of a kind the ops refuse


def _additions(chain: list[Node]) -> list[Node]:
    """``chain`` from its first addition on (a sum's chain starts at its first term)."""
    k = 0
    while k < len(chain) and chain[k].op != Op.ADD:
        k += 1
    return chain[k:]


def _terms(chain: list[Node]) -> list[Node | None]:
    """``[None, t_1, t_2, ...]``: what ``chain[j] = chain[j-1] + t_j`` adds; raises
    :class:`_Fail` when a chain node is not such an addition."""
    terms: list[Node | None] = [None]
    for j in range(1, len(chain)):
        c, prev = chain[j], chain[j - 1]
        if c.op != Op.ADD or c.shape != ():
            raise _Fail
        a, b = c.args
        if (a is prev) == (b is prev):
            raise _Fail
        terms.append(b if a is prev else a)
    return terms


def _run(chain, terms, s, h, users, guarded):
    rows = _Rows(terms[s], terms[s + 1], s, h, guarded)
    fits = rows.fits
    hi = s + 1
    while hi + 1 < len(chain) and users.get(id(chain[hi]), 0) == 1 and fits(hi + 1, terms[hi + 1]):
        hi += 1
    lo = s
    while lo - 1 >= 1 and users.get(id(chain[lo - 1]), 0) == 1 and fits(lo - 1, terms[lo - 1]):
        lo -= 1
    init = chain[lo - 1]
    if lo == 1 and users.get(id(chain[0]), 0) == 1:  # the first iteration: one of chain[0]'s operands
        for t0, other in (chain[0].args, chain[0].args[::-1]):
            if other is not t0 and fits(0, t0):
                lo, init = 0, other
                break
    if any(users.get(id(chain[j]), 0) != 1 for j in range(lo, hi)):
        raise _Fail
    T = hi - lo + 1
    if T < MIN_RUN:
        return None
    return lo, hi, ops.add(init, rows.build(lo, T))


def _row_terms(carry: Node, before: Node) -> list[Node]:
    """The terms one row adds: ``carry = ((before + t_1) + t_2) + ...``, in order. Raises
    :class:`_Fail` when ``carry`` is not ``before`` plus terms that do not read it."""
    out = []
    node = carry
    while node is not before:
        if node.op != Op.ADD or node.shape != () or len(out) > 8:
            raise _Fail
        a, b = node.args
        if (a is before or a.op == Op.ADD) and _reads(a, before):
            out.append(b)
            node = a
        elif _reads(b, before):
            out.append(a)
            node = b
        else:
            raise _Fail
    out.reverse()
    if not out or any(_reads(t, before) for t in out):
        raise _Fail
    return out


def _reads(n: Node, target: Node, limit: int = 64) -> bool:
    """Whether ``n`` is ``target`` or an addition chain leading back to it (a short walk along
    the first operands that are additions: the rows' chain, not a term's insides)."""
    for _ in range(limit):
        if n is target:
            return True
        if n.op != Op.ADD:
            return False
        a, b = n.args
        if a is target or b is target:
            return True
        n = a if a.op == Op.ADD else b
    return False


def extend_rows(chain: list[Node], rows: int) -> Node:
    """The carry after ``rows`` rows of a sum over rows of different lengths of which only the
    first few were traced (:func:`tapejit.frontend.loops.loop_capture.run_nest`: a nest whose inner loops
    are captured, each a sum): ``chain[0]`` is the carry after the first row traced,
    ``chain[j]`` after each next one, ``chain[j] = chain[j-1] + t_j1 + t_j2 + ...`` (one term
    per inner loop, and any the row adds around them). Each term of the traced rows after the
    first must fit one template (per place in the row) with its numbers affine in the row; the
    rows not traced are built from them (the caller vouches, from the loop's source and the
    ranges it checked, that they trace the same). Raises :class:`_Fail`."""
    if len(chain) < 4 or rows < len(chain):
        raise _Fail
    per_row = [_row_terms(chain[j], chain[j - 1]) for j in range(1, len(chain))]
    p = len(per_row[0])
    if any(len(t) != p for t in per_row):
        raise _Fail
    h = _Hash()
    fits = [_Rows(per_row[0][q], per_row[1][q], 1, h, set()) for q in range(p)]
    for j in range(3, len(chain)):
        if not all(fits[q].fits(j, per_row[j - 1][q]) for q in range(p)):
            raise _Fail
    total = None
    for f in fits:
        built = f.build(1, rows - 1)
        total = built if total is None else ops.add(total, built)
    return ops.add(chain[0], total)
