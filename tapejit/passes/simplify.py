"""Algebraic simplification, constant folding and strength reduction: ``Graph -> Graph``.

Every rule is one row of :data:`RULES`: ``(name, ops it matches, rewrite, note)``. A rewrite
takes a node whose arguments are already simplified and returns an equal node or ``None``. The
notes say where a rule is not bit-exact under IEEE 754; all others are exact. Rules in the
spirit of LLVM's InstCombine and XLA's algebraic simplifier, restricted to what keeps float64
results within rounding of the original:

* every rule but one gives the same bits for every input, ``±0.0``, inf and NaN included:
  ``x + 0.0`` is ``x`` only where ``x`` is never ``-0.0`` (``-0.0 + 0.0`` is ``+0.0``; an
  ``arctan2`` or a division downstream tells them apart), ``0.0 - x`` is never ``-x``,
  ``x - x`` is never ``0`` (``inf - inf`` is NaN) and products are never reassociated
  (``(x * 1e200) * 1e-200`` overflows where ``x * (1e200 * 1e-200)`` does not);
* ``sum(broadcast s) -> n*s`` rounds once where the sum rounds at every step.

Constant folding evaluates a node whose arguments are all known at compile time — ``const``
nodes and captured arrays, which were snapshotted at trace time, so folding over them is sound —
with the op's numpy reference. A scalar or uniform result becomes a ``const`` node; an array
result becomes a new captured constant when it is no bigger than :data:`FOLD_MAX_ELEMENTS` or its
largest operand (so folding never makes the program's constants grow by more than a copy).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from ..core import ops
from ..core.ir import NUMPY_DTYPE, Graph, Node
from ..core.ops import Op
from .rewrite import Rewriter, fit

#: Largest array result constant folding creates when it is bigger than every operand.
FOLD_MAX_ELEMENTS = 4096


def _fill(x: Node) -> float | bool | None:
    """The fill value of a ``const`` node (any shape), else ``None``."""
    return x.attrs[0] if x.op == Op.CONST else None


def _is(x: Node, value: float) -> bool:
    v = _fill(x)
    return v is not None and not isinstance(v, bool) and v == value


#: Ops whose node may be a scalar in disguise (see :func:`_scalar`).
_SCALAR_LIKE = frozenset({Op.CONST, *ops.SCALAR_SPREADS})


def _scalar(x: Node) -> Node | None:
    """``x`` as a scalar if it is one, a broadcast scalar, or a constant fill; else ``None``."""
    if x.shape == ():
        return x
    if x.op == Op.CONST:
        return ops.const(x.attrs[0], (), x.dtype)
    if x.op in ops.SCALAR_SPREADS and x.args[0].shape == ():
        return x.args[0]
    return None


# ----------------------------------------------------------------------------------------------
# Rules


def _fold(n: Node, rw: Rewriter) -> Node | None:
    if not n.args or not all(rw.known(a) for a in n.args):
        return None
    values = [rw.constant(a) for a in n.args]
    with np.errstate(all="ignore"):
        v = np.asarray(ops.OPS[n.op].ref(n.attrs, *values), dtype=NUMPY_DTYPE[n.dtype])
    if v.shape != n.shape:
        raise AssertionError(f"reference of {n.op} gave shape {v.shape}, expected {n.shape}")
    if v.size == 0:
        return None
    flat = np.ascontiguousarray(v).reshape(-1)
    raw = flat.view(np.uint8).reshape(flat.size, flat.itemsize)
    if (raw == raw[0]).all():  # uniform, bitwise (so -0.0 and NaN count too)
        return ops.const(flat[0].item(), n.shape, n.dtype)
    largest = max(a.type.size for a in n.args)
    if v.size > max(FOLD_MAX_ELEMENTS, largest):
        return None
    return rw.bind(v, n.type)


def _is_zero(x: Node, negative: bool) -> bool:
    """Whether ``x`` is a fill of ``-0.0`` (``negative``) or of ``+0.0``."""
    v = _fill(x)
    return (
        v is not None and not isinstance(v, bool) and v == 0.0
        and (math.copysign(1.0, v) < 0) == negative
    )


#: Ops whose result is never ``-0.0`` (for every input, inf and NaN included).
_NEVER_NEGATIVE_ZERO = frozenset({Op.EXP, Op.ABS, Op.COSH})


def _not_negative_zero(x: Node, depth: int = 3) -> bool:
    """Whether ``x`` is provably never ``-0.0``: then ``x + 0.0`` is ``x`` bit for bit."""
    v = _fill(x)
    if v is not None:
        return isinstance(v, bool) or not (v == 0.0 and math.copysign(1.0, v) < 0)
    if x.op in _NEVER_NEGATIVE_ZERO or x.dtype != "f64":
        return True
    if x.op == Op.MUL and x.args[0] is x.args[1]:  # a square: (-0)*(-0) is +0
        return True
    if x.op == Op.ADD and depth:  # a sum is -0.0 only when both terms are
        return any(_not_negative_zero(a, depth - 1) for a in x.args)
    return False


def _add(n, rw):
    x, y = n.args
    # x + (-0.0) is x for every x; x + (+0.0) is +0.0 where x is -0.0, so only where x never is
    for a, z in ((x, y), (y, x)):
        if _is_zero(z, negative=True) or (_is_zero(z, negative=False) and _not_negative_zero(a)):
            return fit(a, n)
    if y.op == Op.NEG:
        return ops.make(Op.SUB, x, y.args[0])
    if x.op == Op.NEG:
        return ops.make(Op.SUB, y, x.args[0])
    return None


def _accumulate_outer(n, rw):
    """``acc + outer(d, h)`` (a product with a contraction of length 1 — reverse mode's weight
    gradient accumulated in a loop) as ``acc + d * h``: elementwise, so it fuses into one loop
    over the accumulator instead of a product kernel and an add. Only under an add: an outer
    product written on its own is a product kernel that writes its destination in place."""
    x, y = n.args
    for p, q in ((x, y), (y, x)):
        if p.op == Op.MATMUL and p.shape == n.shape:
            flat = ops.unsummed_product(p)
            if flat is not None:
                return ops.make(Op.ADD, flat, q) if p is x else ops.make(Op.ADD, q, flat)
    return None


def _sub(n, rw):
    x, y = n.args
    # x - (+0.0) is x for every x, x - (-0.0) is x + 0.0; (-0.0) - y is -y for every y, but
    # 0.0 - y is not (0.0 - 0.0 is +0.0, -(0.0) is -0.0)
    if _is_zero(y, negative=False) or (_is_zero(y, negative=True) and _not_negative_zero(x)):
        return fit(x, n)
    if _is_zero(x, negative=True):
        return fit(ops.make(Op.NEG, y), n)
    if y.op == Op.NEG:
        return ops.make(Op.ADD, x, y.args[0])
    return None


def _mul(n, rw):
    x, y = n.args
    if _is(y, 1.0):
        return fit(x, n)
    if _is(x, 1.0):
        return fit(y, n)
    if _is(y, -1.0):
        return fit(ops.make(Op.NEG, x), n)
    if _is(x, -1.0):
        return fit(ops.make(Op.NEG, y), n)
    if x.op == Op.NEG and y.op == Op.NEG:
        return ops.make(Op.MUL, x.args[0], y.args[0])
    return None


def _scalar_negation(n, rw):
    """``(-v)*t`` with a scalar t and an array v is ``v*(-t)``: the negation runs once (exact:
    negating a factor negates the product)."""
    if n.shape == ():
        return None
    x, y = n.args
    for inner, t in ((x, y), (y, x)):
        if t.shape == () and inner.op == Op.NEG and inner.shape != ():
            return ops.make(Op.MUL, inner.args[0], ops.make(Op.NEG, t))
    return None


def _div(n, rw):
    x, y = n.args
    if _is(y, 1.0):
        return fit(x, n)
    c = _fill(y)
    if c is not None and y.shape == () and c != 0 and math.isfinite(c):
        m, e = math.frexp(abs(c))
        if m == 0.5 and math.isfinite(1.0 / c):  # a power of two with a finite reciprocal:
            # x / c and x * (1/c) round the same exact value
            return ops.make(Op.MUL, x, ops.const(1.0 / c))
    return None


def _neg(n, rw):
    (x,) = n.args
    if x.op == Op.NEG:
        return x.args[0]
    return None


def _pow(n, rw):
    x, y = n.args
    if y.op == Op.CONST and y.shape == ():
        r = ops.power(x, y)  # integer exponents -> products, 0.5 -> sqrt
        if r is not n:
            return fit(r, n)
    return None


def _where(n, rw):
    c, a, b = n.args
    if a is b:
        return fit(a, n)  # a may be a scalar that the condition broadcasts
    v = _fill(c)
    if v is not None:
        return fit(a if v else b, n)
    return None


def _scalarise(n, rw):
    """An elementwise op on broadcast scalars: operate on the scalars (``exp(broadcast s)`` is
    ``broadcast exp(s)``) and pass scalar operands directly (elementwise ops broadcast them)."""
    if n.shape == () or all(a.shape != () and a.op not in _SCALAR_LIKE for a in n.args):
        return None  # the common case, decided without building anything
    bases = [_scalar(a) for a in n.args]
    if all(b is not None for b in bases):
        return ops.broadcast_to(ops.make(n.op, *bases, attrs=n.attrs), n.shape)
    new = tuple(a if b is None else b for a, b in zip(n.args, bases))
    if any(a is not b for a, b in zip(n.args, new)):
        return ops.make(n.op, *new, attrs=n.attrs)
    return None


def _cast(n, rw):
    (x,) = n.args
    return x if x.dtype == n.dtype else None


def _broadcast(n, rw):
    (x,) = n.args
    if x.shape == n.shape:
        return x
    if x.op in ops.SCALAR_SPREADS and x.args[0].type.size == 1:
        if x.args[0].shape != ():
            return None
        return ops.make(Op.BROADCAST_TO, x.args[0], attrs=n.attrs)
    if x.type.size == 1 and x.shape != ():
        return ops.make(Op.BROADCAST_TO, ops.reshape(x, ()), attrs=n.attrs)
    return None


def _reshape(n, rw):
    (x,) = n.args
    if x.shape == n.shape:
        return x
    if x.op == Op.RESHAPE:
        return ops.reshape(x.args[0], n.shape)
    if x.shape == ():
        return ops.make(Op.BROADCAST_TO, x, attrs=(n.shape,))
    s = _scalar(x)
    if s is not None and s is not x:
        return ops.broadcast_to(s, n.shape)
    return None


def _transpose(n, rw):
    (x,) = n.args
    if x.op == Op.TRANSPOSE:
        perm = tuple(x.attrs[0][p] for p in n.attrs[0])
        return ops.transpose(x.args[0], perm)
    moved = [p for p in n.attrs[0] if x.shape[p] != 1]
    if moved == sorted(moved):  # only unit axes move: the same element order, a view
        return ops.reshape(x, n.shape)
    s = _scalar(x)
    return None if s is None else ops.broadcast_to(s, n.shape)


def _index(n, rw):
    """``x[items]`` of a broadcast scalar is the scalar broadcast; ``x[:, 0]`` that reads all of
    ``x`` (integer items on axes of length 1) a reshape of ``x`` — ``t`` itself for
    ``reshape(t, (n, 1))[:, 0]``, so a loop reading it reads ``t`` in the same iteration
    rather than from memory through a view."""
    (x,) = n.args
    s = _scalar(x)
    if s is not None:
        return ops.broadcast_to(s, n.shape)
    if n.attrs and _whole(x.shape, n.attrs):
        return ops.reshape(x, n.shape)
    return None


def _whole(shape: tuple[int, ...], items: tuple) -> bool:
    """Whether index ``items`` select every element of ``shape`` in order (an integer item
    selects all of an axis of length 1: ``c[:, 0]`` of a ``(n, 1)`` array)."""
    return all(it == (0, d, 1) or (it == 0 and d == 1) for it, d in zip(items, shape))


def _whole_update(n) -> Node | None:
    """The update of scatter ``n`` viewed with ``n``'s shape when it covers every element of
    the result in order, else ``None``."""
    upd = n.args[1]
    if upd.type.size != n.type.size or not _whole(n.shape, n.attrs):
        return None
    return upd if upd.shape == n.shape else ops.reshape(upd, n.shape)


def _scatter_add(n, rw):
    """``zeros[all] += upd`` is ``upd`` (reverse mode accumulating a whole-array cotangent) where
    that is exact: the zeros are ``-0.0`` or ``upd`` is never ``-0.0`` (as in :func:`_add`)."""
    acc, upd = n.args
    exact = _is_zero(acc, negative=True) or (
        _is_zero(acc, negative=False) and _not_negative_zero(upd)
    )
    return _whole_update(n) if exact else None


def _scatter(n, rw):
    """``c[all] = upd`` is ``upd`` (a cotangent's first contribution, over the whole array)."""
    return _whole_update(n) if n.args[0].op == Op.CONST else None


def _reduce_sum(n, rw):
    (x,) = n.args
    s = _scalar(x)
    if s is None:
        return None
    count = x.type.size // max(n.type.size, 1)
    return ops.broadcast_to(ops.make(Op.MUL, s, ops.const(float(count))), n.shape)


def _reduce_max(n, rw):
    (x,) = n.args
    s = _scalar(x)
    return None if s is None or x.type.size == 0 else ops.broadcast_to(s, n.shape)


def _custom(n, rw):
    """A derivative given by hand has served reverse/forward mode: what remains is its value."""
    return n.args[0]


#: The rule table: (name, ops matched (None: every op), rewrite, note on exactness).
RULES: list[tuple[str, tuple[Op, ...] | None, object, str]] = [
    ("custom", (Op.CUSTOM,), _custom, "exact: a hand-given rule's node is its value"),
    ("stop-gradient", (Op.STOP_GRADIENT,), lambda n, rw: n.args[0], "exact: its value"),
    ("fold", None, _fold, "exact: evaluated with the op's reference"),
    ("add", (Op.ADD,), _add, "exact: x+(-0.0) -> x, x+0.0 -> x where x is never -0.0, x+(-y)"),
    ("accumulate-outer", (Op.ADD,), _accumulate_outer, "exact: one product per element"),
    ("sub", (Op.SUB,), _sub, "exact: x-0.0 -> x, (-0.0)-x -> -x, x-(-y) -> x+y"),
    ("mul", (Op.MUL,), _mul, "exact: x*1, x*-1, (-x)*(-y)"),
    ("scalar-negation", (Op.MUL,), _scalar_negation, "exact: (-v)*t -> v*(-t)"),
    ("div", (Op.DIV,), _div, "exact: x/1, x/2^k -> x*2^-k"),
    ("neg", (Op.NEG,), _neg, "exact: -(-x) -> x"),
    ("pow", (Op.POW,), _pow, "x**k (integer k) -> products; x**0.5 -> sqrt"),
    ("where", (Op.WHERE,), _where, "exact"),
    ("scalarise", ops.ELEMENTWISE, _scalarise, "exact: ops on broadcast scalars run once"),
    ("cast", (Op.CAST,), _cast, "exact"),
    ("broadcast", (Op.BROADCAST_TO,), _broadcast, "exact"),
    ("reshape", (Op.RESHAPE,), _reshape, "exact"),
    ("transpose", (Op.TRANSPOSE,), _transpose, "exact: also one that moves only unit axes"),
    ("index", (Op.INDEX,), _index, "exact: indexing a broadcast scalar, or all of an array"),
    ("scatter-add-whole", (Op.SCATTER_ADD,), _scatter_add, "exact: as add"),
    ("scatter-whole", (Op.SCATTER,), _scatter, "exact: every element overwritten"),
    ("reduce-sum", (Op.REDUCE_SUM,), _reduce_sum, "sum of a broadcast s -> count*s (rounding)"),
    ("reduce-max", (Op.REDUCE_MAX,), _reduce_max, "exact"),
]

_BY_OP: dict[str, list] = {}
for _name, _ops, _fn, _note in RULES:
    for _op in ops.OPS if _ops is None else _ops:
        _BY_OP.setdefault(_op, []).append((_name, _fn))


def simplify(g: Graph) -> tuple[Graph, dict]:
    """Apply :data:`RULES` to every node of ``g`` until none fires; returns the new graph and
    ``{"rules": {rule name: times fired}}``."""
    fired: Counter[str] = Counter()

    def rule(n: Node, rw: Rewriter) -> Node | None:
        for name, fn in _BY_OP.get(n.op, ()):
            r = fn(n, rw)
            if r is not None and r is not n:
                fired[name] += 1
                return r
        return None

    out = Rewriter(g).run(rule)
    return out, {"rules": dict(fired)}
