"""Re-rolling, the shared vocabulary: the thresholds every part of the pass uses, the failure
that abandons a run (:class:`_Fail`), the arithmetic of index attributes (plain integers and
slices, block reads), the strided reads and writes a loop's sequences are made of, and the
rewrite that puts the built loops into the graph (:func:`_replace_all`). Everything in
:mod:`tapejit.passes.reroll` may import this module; it imports only the core."""

from __future__ import annotations

from ...core import ir, ops
from ...core.ir import Graph, Node
from ...core.ops import Op

#: The shortest run of iterations worth a loop.
MIN_RUN = 16


#: A shorter run (down to this many iterations) is re-rolled when its body is the body of a run
#: of at least ``MIN_RUN`` re-rolled already (the short rows at the end of a triangular loop
#: nest): its loop shares that loop's kernel functions, so it costs no code, where the
#: iterations left unrolled would be straight-line code (most of the pair loop's compile time).
MIN_SHORT_RUN = 4


#: The most chain nodes one iteration may span (``e = e + a + b`` spans two).
MAX_PERIOD = 6


#: Ops whose chains carry an array through indexed writes (map mode possible).
_WRITES = (Op.SCATTER, Op.SCATTER_ADD)


class _Fail(Exception):
    pass


def chain_depth(N: Node, position: dict[int, int], memo: dict[int, int]) -> int:
    """The last chain position (``position``: node id -> position) that ``N`` depends on,
    ``-1`` for none (a value computed before the chain); memoised in ``memo``, iterative (a
    dependence may go back through every iteration)."""
    stack = [N]
    while stack:
        n = stack[-1]
        if id(n) in memo:
            stack.pop()
            continue
        q = position.get(id(n))
        if q is not None:
            memo[id(n)] = q
            stack.pop()
            continue
        pending = [a for a in n.args if id(a) not in memo]
        if pending:
            stack.extend(pending)
            continue
        memo[id(n)] = max((memo[id(a)] for a in n.args), default=-1)
        stack.pop()
    return memo[id(N)]


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


def _block(items: tuple) -> tuple[tuple[int, int], int] | None:
    """``((length, step), start)`` of a block read ``x[start : start + length : step]`` (one
    slice, on the first axis), whose start may move between iterations (``p[3*i : 3*i + 3]``,
    a vertex's weights ``params[v*P : v*P + n]``); ``None`` for any other index."""
    if len(items) != 1 or not isinstance(items[0], tuple) or len(items[0]) != 3:
        return None
    a, b, step = items[0]
    if step <= 0 or b <= a:
        return None
    return (b - a, step), a


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


