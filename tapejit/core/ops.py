"""The op table: one row per primitive, with its type rule, numpy reference and VJP rule.

Every primitive of the IR is defined here once:

* ``type_rule(arg_types, attrs) -> Type`` — shape and dtype of the result (raises on bad input);
* ``ref(attrs, *values)`` — numpy reference implementation, used by the interpreter (the oracle);
* ``vjp(g, out, *args)`` — the cotangent of each argument given the cotangent ``g`` of the result,
  written with the same ops (so backward code is optimised like forward code). ``None`` for an
  argument that gets no cotangent. An index op returns a :class:`Sparse` cotangent, which reverse
  mode applies as a scatter-add into one accumulator per operand.
* ``jvp(t, out, *args)`` — the tangent of the result given ``t``, one tangent per argument (a
  node of the argument's type, or ``None`` for a zero tangent), written with the same ops;
  ``None`` when the result's tangent is zero. Forward mode (:mod:`tapejit.ad.forward`) calls it
  only when some argument has a tangent; a scalar tangent of an array result is broadcast there.

Ops belong to *groups* (``ELEMENTWISE``, ``REDUCE``, ...) and passes and codegen match on groups.
Elementwise ops in the IR take operands of one shape, or scalars (shape ``()``), which broadcast
implicitly; any other numpy broadcasting is made explicit with ``broadcast_to`` by the builders
below. Composite functions (``mean``, ``square``, ``norm``, ...) are compositions in the tracer, not
primitives.

The VJP rules follow the standard derivations (e.g. Griewank & Walther, *Evaluating Derivatives*,
2nd ed., ch. 3; the rule tables of HIPS autograd ``numpy_vjps.py`` and JAX ``lax.py``); ties in
``maximum``/``minimum``/``reduce_max`` share the cotangent equally, as JAX does. The JVP rules are
the same derivatives applied the other way, with the same tie convention (the tangent of a tied
maximum is the mean of the tied operands' tangents), so ``<J v, w> = <v, J^T w>`` holds exactly.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import ir
from .ir import Node, Type

# ----------------------------------------------------------------------------------------------
# Names and groups


class Op(enum.StrEnum):
    """The primitives' names: ``Op.EXP == "exp"``. Code names an op through this enum, never by
    a string literal (``n.op == Op.CONST``, ``make(Op.ADD, x, y)``; passes match on the group
    tuples below where one fits); tests/test_registry.py rejects a comparison of ``.op`` with a
    string. A ``StrEnum``: a node's ``op`` (the plain string, which the printed IR and the cache
    key show) compares and hashes equal to its member. Each member is defined by one
    :func:`defop` block below; the import fails if a member has no block or a block no member.
    """

    # elementwise unary (float -> float)
    NEG = "neg"
    EXP = "exp"
    LOG = "log"
    LOG1P = "log1p"
    EXPM1 = "expm1"
    EXP2 = "exp2"
    LOG2 = "log2"
    LOG10 = "log10"
    ARCSINH = "arcsinh"
    ARCCOSH = "arccosh"
    ARCTANH = "arctanh"
    SINH = "sinh"
    COSH = "cosh"
    CBRT = "cbrt"
    SQRT = "sqrt"
    SIN = "sin"
    COS = "cos"
    TANH = "tanh"
    TAN = "tan"
    ARCSIN = "arcsin"
    ARCCOS = "arccos"
    ARCTAN = "arctan"
    ERF = "erf"
    ERFC = "erfc"
    GAMMALN = "gammaln"
    DIGAMMA = "digamma"
    ABS = "abs"
    SIGN = "sign"
    FLOOR = "floor"
    CEIL = "ceil"
    RINT = "rint"
    TRUNC = "trunc"
    # elementwise binary
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    POW = "pow"
    ARCTAN2 = "arctan2"
    FMOD = "fmod"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"
    # comparisons
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    EQ = "eq"
    NE = "ne"
    # logic
    AND = "and"
    OR = "or"
    NOT = "not"
    # select
    WHERE = "where"
    # cast
    CAST = "cast"
    # the value, with no derivative (tapejit.stop_gradient)
    STOP_GRADIENT = "stop_gradient"
    # reductions
    REDUCE_SUM = "reduce_sum"
    REDUCE_MAX = "reduce_max"
    # shapes
    BROADCAST_TO = "broadcast_to"
    RESHAPE = "reshape"
    TRANSPOSE = "transpose"
    # indexing
    INDEX = "index"
    SCATTER_ADD = "scatter_add"
    SCATTER = "scatter"
    TAKE = "take"
    ADD_AT = "add_at"
    PUT = "put"
    WINDOW = "window"
    WINDOW_ADD = "window_add"
    # linear algebra
    MATMUL = "matmul"
    EIGH = "eigh"
    SVD = "svd"
    # control
    LOOP = "loop"
    # a derivative given by hand (tapejit.frontend.custom): its value is its first operand
    CUSTOM = "custom"
    # leaves (graph inputs and constants)
    INPUT = "input"
    CONST = "const"


#: The leaves' plain names, which :func:`const` and :func:`input_node` give their nodes.
_INPUT, _CONST = str(Op.INPUT), str(Op.CONST)

#: Binary ops whose operands may be swapped: IEEE add and mul are commutative bit for bit, and
#: ``maximum``/``minimum`` are lowered to ``llvm.maximum``/``llvm.minimum``, which order signed
#: zeros (numpy's reference returns its second operand on a tie, so ``maximum(0.0, -0.0)`` may
#: differ in the sign of zero there). The IR puts their operands in a canonical order at
#: construction (:class:`tapejit.core.ir.Node`).
COMMUTATIVE = (Op.ADD, Op.MUL, Op.MAXIMUM, Op.MINIMUM, Op.EQ, Op.NE, Op.AND, Op.OR)


class RuleError(NotImplementedError):
    """An op has no rule for the requested transformation (names the op)."""


@dataclass(frozen=True)
class Sparse:
    """A cotangent that touches a static index set of its operand: ``operand[items] += g``."""

    g: Node
    items: tuple


@dataclass(frozen=True)
class OpDef:
    """Everything about one primitive, defined in one block of the table below.

    ``group``: unary, binary, compare, logical, select, cast, reduce, shape, index, linalg,
    control or leaf (passes and codegen match on groups). ``type_rule(arg_types, attrs)``,
    ``ref(attrs, *values)`` (the numpy reference: the interpreter's semantics), ``vjp(g, out,
    *args)`` (``None``: no rule; see :func:`vjp_rule`). ``numpy``: the numpy ufunc names the
    tracer maps to this op (``np.exp`` -> ``exp``). ``cost``: one element's cost in units of a
    vector add, for fusion's recompute-or-store rule. ``identity``: a reduction's value over
    nothing. ``differentiable``: False for piecewise-constant ops (no cotangent flows).
    ``jvp(t, out, *args)``: the forward-mode rule (``None``: no rule; see :func:`jvp_rule`)."""

    name: str
    group: str
    arity: int
    type_rule: Callable[[tuple[Type, ...], tuple], Type]
    ref: Callable[..., Any]
    vjp: Callable[..., tuple] | None
    numpy: tuple[str, ...] = ()
    cost: int = 1
    identity: float | None = None
    differentiable: bool = True
    jvp: Callable[..., Node | None] | None = None


OPS: dict[str, OpDef] = {}


def defop(
    name: Op | str,
    group: str,
    arity: int,
    type_rule: Callable,
    ref: Callable | None,
    vjp: Callable | None = None,
    *,
    numpy: tuple[str, ...] = (),
    cost: int = 1,
    identity: float | None = None,
    differentiable: bool = True,
    jvp: Callable | None = None,
) -> None:
    """Define primitive ``name``, a member of :class:`Op` (see :class:`OpDef`); a
    piecewise-constant op gets the rules that no cotangent and no tangent flows. The table is
    keyed by the plain name (``OPS["exp"]``; a member finds its row too: ``OPS[Op.EXP]``)."""
    name = str(name)  # the plain string, as nodes and the printed IR carry it
    if name in OPS:
        raise ValueError(f"op {name!r} is defined twice")
    if name not in set(Op):
        raise ValueError(
            f"op {name!r} has no member in tapejit.core.ops.Op: add {name.upper()} = {name!r} to it"
        )
    if not differentiable:
        vjp, jvp = _NO_COTANGENT, _ZERO_TANGENT
    OPS[name] = OpDef(name, group, arity, type_rule, ref, vjp, tuple(numpy), cost, identity,
                      differentiable, jvp)  # fmt: skip


# ----------------------------------------------------------------------------------------------
# Type rules


def _common(types: tuple[Type, ...]) -> Type | None:
    """The type of the non-scalar operands of an elementwise op (``None`` if all are scalars);
    they must all have one shape (implicit broadcasting in the IR is of scalars only)."""
    common = None
    for t in types:
        if t.shape != ():
            if common is None:
                common = t
            elif t.shape != common.shape:
                shapes = {t.shape for t in types if t.shape != ()}
                raise ValueError(
                    f"elementwise operands must share one shape or be scalars, got {shapes}"
                )
    return common


def _result(types: tuple[Type, ...], dtype: str) -> Type:
    """The result type of an elementwise op: the operands' common shape with ``dtype`` (an
    operand's own Type object when it matches, so no new Type is built per node)."""
    common = _common(types)
    if common is None:
        return types[0] if types and types[0].dtype == dtype else Type((), dtype)
    return common if common.dtype == dtype else Type(common.shape, dtype)


def _need(types, dtype, what):
    for t in types:
        if t.dtype != dtype:
            raise TypeError(f"{what} needs {dtype} operands, got {t.dtype}")


def _arith(types, attrs):
    _need(types, "f64", "arithmetic")
    return _result(types, "f64")


def _compare(types, attrs):
    _need(types, "f64", "comparison")
    return _result(types, "bool")


def _logical(types, attrs):
    _need(types, "bool", "logical op")
    return _result(types, "bool")


def _where(types, attrs):
    c, a, b = types
    _need((c,), "bool", "where condition")
    _need((a, b), "f64", "where branches")
    common = _common(types)
    return Type(() if common is None else common.shape, "f64")


def _cast(types, attrs):
    return Type(types[0].shape, attrs[0])


def _reduce(types, attrs):
    (t,) = types
    (axes,) = attrs
    if sorted(set(axes)) != list(axes) or any(not 0 <= a < t.ndim for a in axes):
        raise ValueError(f"reduction axes {axes} are not sorted, unique and within {t.shape}")
    _need(types, "f64", "reduction")
    return Type(tuple(d for i, d in enumerate(t.shape) if i not in axes), "f64")


def _broadcast_to(types, attrs):
    (t,) = types
    (shape,) = attrs
    if np.broadcast_shapes(t.shape, shape) != tuple(shape):
        raise ValueError(f"cannot broadcast {t.shape} to {shape}")
    return Type(tuple(shape), t.dtype)


def _reshape(types, attrs):
    (t,) = types
    (shape,) = attrs
    if math.prod(shape) != t.size:
        raise ValueError(f"cannot reshape {t.shape} to {shape}")
    return Type(tuple(shape), t.dtype)


def _transpose(types, attrs):
    (t,) = types
    (perm,) = attrs
    if sorted(perm) != list(range(t.ndim)):
        raise ValueError(f"{perm} is not a permutation of the axes of {t.shape}")
    return Type(tuple(t.shape[p] for p in perm), t.dtype)


def index_shape(shape: tuple[int, ...], items: tuple) -> tuple[int, ...]:
    """Result shape of ``x[items]``; an item is an int or a normalised ``(start, stop, step)``."""
    if len(items) > len(shape):
        raise IndexError(f"too many indices ({len(items)}) for shape {shape}")
    out = []
    for item, d in zip(items, shape):
        if isinstance(item, tuple):
            r = range(*item)
            if len(r) and not (0 <= r[0] < d and 0 <= r[-1] < d):
                raise IndexError(f"slice {item} out of bounds for axis of size {d}")
            out.append(len(r))
        elif not 0 <= item < d:
            raise IndexError(f"index {item} out of bounds for axis of size {d}")
    return tuple(out) + tuple(shape[len(items) :])


def index_affine(
    shape: tuple[int, ...], items: tuple, strides: tuple[int, ...] | None = None, offset: int = 0
) -> tuple[int, tuple[int, ...]]:
    """``x[items]`` as an affine view of ``x``: (element offset, element strides). ``x`` is
    C-contiguous unless its element ``strides`` (and the ``offset`` of its first element in a
    larger buffer) are given."""
    if strides is None:
        strides = tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))
    out = []
    for i, d in enumerate(shape):
        item = items[i] if i < len(items) else (0, d, 1)
        if isinstance(item, tuple):
            offset += item[0] * strides[i]
            out.append(item[2] * strides[i])
        else:
            offset += item * strides[i]
    return offset, tuple(out)


def splice_offset(n: Node) -> int | None:
    """For a scatter into a constant that writes one contiguous block (``y = zeros;
    y[a:b] = u``, a cotangent's first contribution): the block's element offset; ``None``
    for any other node. Such a scatter needs no copy of its constant (fusion leaves it
    unmaterialised): code generation fills the result around the block and writes the block
    once, and memory planning may compute the update straight into it."""
    if n.op not in (Op.SCATTER, Op.SCATTER_ADD) or n.args[0].op != Op.CONST:
        return None
    return index_view_offset(n.args[0].shape, n.attrs)


def index_view_offset(shape: tuple[int, ...], items: tuple) -> int | None:
    """Element offset of ``x[items]`` when it is one contiguous block of C-contiguous ``x`` (so
    it can alias ``x`` instead of being copied), else ``None``."""
    out_shape = index_shape(shape, items)
    offset, strides = index_affine(shape, items)
    want = [math.prod(out_shape[i + 1 :]) for i in range(len(out_shape))]
    if all(d == 1 or s == w for d, s, w in zip(out_shape, strides, want)):
        return offset
    return None


def _index(types, attrs):
    (t,) = types
    return Type(index_shape(t.shape, attrs), t.dtype)


def _scatter_add(types, attrs):
    acc, upd = types
    _need(types, "f64", "scatter_add")
    if index_shape(acc.shape, attrs) != upd.shape:
        raise ValueError(f"scatter_add update {upd.shape} does not match {acc.shape}[{attrs}]")
    return acc


def _scatter(types, attrs):
    acc, upd = types
    if acc.dtype != upd.dtype:
        raise TypeError(f"scatter needs an update of the accumulator's dtype {acc.dtype}, got {upd.dtype}")
    if index_shape(acc.shape, attrs) != upd.shape:
        raise ValueError(f"scatter update {upd.shape} does not match {acc.shape}[{attrs}]")
    return acc


def matmul_dims(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, int, int]:
    """``(m, k, n)`` of a ``matmul`` node's operand shapes: ``(m,k) @ (k,n)``, or with a vector
    on either side, ``(m,k) @ (k,)`` (n = 1) and ``(k,) @ (k,n)`` (m = 1), as numpy defines."""
    m, k = a if len(a) == 2 else (1, a[0])
    k2, n = b if len(b) == 2 else (b[0], 1)
    if k != k2:
        raise ValueError(f"matmul operands {a} @ {b} are not aligned")
    return m, k, n


def _matmul(types, attrs):
    a, b = types
    _need(types, "f64", "matmul")
    if (a.ndim, b.ndim) not in ((2, 2), (2, 1), (1, 2)):
        raise ValueError(
            f"matmul needs (m,k) @ (k,n), (m,k) @ (k,) or (k,) @ (k,n) operands, "
            f"got {a.shape} @ {b.shape}"
        )
    matmul_dims(a.shape, b.shape)
    return Type(a.shape[:1] if b.ndim == 1 else a.shape[:-1] + b.shape[1:], "f64")


#: Largest matrix an ``eigh`` node takes: codegen keeps LAPACK ``dsyevd``'s work arrays (1 + 6n
#: + 2n^2 doubles, 3 + 5n ints) and a column-major copy on the stack — ~150 KiB at this size.
EIGH_MAX = 96


def _eigh(types, attrs):
    (t,) = types
    _need(types, "f64", "eigh")
    if t.ndim != 2 or t.shape[0] != t.shape[1] or attrs not in (("L",), ("U",)):
        raise ValueError(f"eigh needs one square matrix and UPLO 'L' or 'U', got {t.shape}, {attrs}")
    if t.shape[0] > EIGH_MAX:
        raise ValueError(f"eigh takes matrices up to {EIGH_MAX} x {EIGH_MAX}, got {t.shape}")
    return Type((t.shape[0] + 1, t.shape[0]), "f64")


#: Largest thin SVD an ``svd`` node takes: k = min(m, n) <= SVD_MAX_K and m n <= SVD_MAX_SIZE.
#: Codegen keeps a column-major copy of the matrix, U, s, Vt and LAPACK ``dgesdd``'s work
#: arrays (:func:`svd_lwork` doubles, 8k ints) on the stack — at most ~230 KiB at these sizes.
SVD_MAX_K = 48
SVD_MAX_SIZE = 4096


def svd_lwork(m: int, n: int) -> int:
    """``dgesdd``'s workspace for jobz='S' (doubles): above both minimums its documentation has
    stated, 4k^2 + 6k + max(m, n) (LAPACK >= 3.7) and 3k^2 + max(max(m, n), 4k^2 + 4k)."""
    k = min(m, n)
    return 7 * k * k + 6 * k + max(m, n)


def svd_sizes(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """(m, n, k) of an ``svd`` operand of ``shape`` (m, n), k = min(m, n)."""
    m, n = shape
    return m, n, min(m, n)


def _svd(types, attrs):
    (t,) = types
    _need(types, "f64", "svd")
    if t.ndim != 2 or 0 in t.shape or attrs:
        raise ValueError(f"svd needs one non-empty matrix and no attributes, got {t.shape} {attrs}")
    m, n, k = svd_sizes(t.shape)
    if k > SVD_MAX_K or m * n > SVD_MAX_SIZE:
        raise ValueError(
            f"svd takes matrices with min(m, n) <= {SVD_MAX_K} and m n <= {SVD_MAX_SIZE}, "
            f"got {t.shape}"
        )
    return Type((m * k + k + k * n,), "f64")


def _leaf(types, attrs):
    raise ValueError("leaf nodes are built directly")


def type_rule(op: Op | str, types: tuple[Type, ...], attrs: tuple) -> Type:
    """Result type of ``op`` on arguments of ``types``; raises on a bad combination."""
    row = OPS.get(op)
    if row is None:
        raise RuleError(f"unknown op {op!r}")
    if row.arity >= 0 and row.arity != len(types):
        raise ValueError(f"{op} takes {row.arity} operands, got {len(types)}")
    return row.type_rule(types, attrs)


ir.type_rule = type_rule
ir.commutative = frozenset(COMMUTATIVE)

# ----------------------------------------------------------------------------------------------
# Builders: the one way the front end makes nodes.


def make(op: Op | str, *args: Node, attrs: tuple = ()) -> Node:
    """The node ``op(*args)``, typed by the op's rule (so :func:`tapejit.core.ir.verify` need not
    check it again). The node's ``op`` is the plain name (``"exp"`` for ``Op.EXP``), so a node
    is the same object and prints the same however its op was named."""
    row = OPS.get(op)  # type_rule, inlined: one table lookup per node built
    if row is None:
        raise RuleError(f"unknown op {op!r}")
    types = tuple([a.type for a in args])
    if row.arity >= 0 and row.arity != len(types):
        raise ValueError(f"{op} takes {row.arity} operands, got {len(types)}")
    node = Node(row.name, args, attrs, row.type_rule(types, attrs))
    ir.mark_verified(node)
    return node


def const(value: float, shape: tuple[int, ...] = (), dtype: str = "f64") -> Node:
    """A constant filled with ``value`` (a scalar when ``shape == ()``)."""
    value = bool(value) if dtype == "bool" else float(value)
    return Node(_CONST, (), (value,), Type(tuple(shape), dtype))


def input_node(position: int, name: str, t: Type) -> Node:
    """A graph input: a leaf at ``position`` in its graph's inputs, called ``name``."""
    return Node(_INPUT, (), (position, name), t)


def is_const(x: Node, value: float | None = None) -> bool:
    return x.op == Op.CONST and (value is None or x.attrs[0] == value)


def broadcast_to(x: Node, shape: tuple[int, ...]) -> Node:
    shape = tuple(shape)
    if x.shape == shape:
        return x
    if x.op == Op.CONST:
        return const(x.attrs[0], shape, x.dtype)
    return make(Op.BROADCAST_TO, x, attrs=(shape,))


def _bcast(*xs: Node) -> tuple[Node, ...]:
    shapes = {x.shape for x in xs}
    shapes.discard(())
    if len(shapes) <= 1:
        return xs  # one shape, or scalars (which elementwise ops broadcast implicitly)
    shape = np.broadcast_shapes(*shapes)
    return tuple(x if x.shape in ((), shape) else broadcast_to(x, shape) for x in xs)


def _float(x: Node) -> Node:
    return make(Op.CAST, x, attrs=("f64",)) if x.dtype != "f64" else x


def elementwise(op: Op | str, *args: Node) -> Node:
    """``op`` with numpy broadcasting and numpy's promotion of bool operands to float.
    ``x * 1`` is ``x`` when ``x`` has the result's shape (exact in IEEE arithmetic): reverse
    mode seeds the cotangent with ones, and a product with them would otherwise be removed only
    by the simplifier, which then rebuilds every node downstream of it."""
    if op in _FLOAT_OPERANDS:
        args = tuple(_float(a) for a in args)
    if op == Op.MUL:
        x, y = args
        if is_const(y, 1.0) and x.shape == np.broadcast_shapes(x.shape, y.shape):
            return x
        if is_const(x, 1.0) and y.shape == np.broadcast_shapes(x.shape, y.shape):
            return y
    elif op == Op.WHERE:
        c, a, b = args
        if c.dtype != "bool":
            c = make(Op.NE, _float(c), const(0.0))
        args = (c, _float(a), _float(b))
    return make(op, *_bcast(*args))


def add(a, b):
    return elementwise(Op.ADD, a, b)


def sub(a, b):
    return elementwise(Op.SUB, a, b)


def mul(a, b):
    return elementwise(Op.MUL, a, b)


def div(a, b):
    return elementwise(Op.DIV, a, b)


def neg(a):
    return elementwise(Op.NEG, a)


def where(c, a, b):
    return elementwise(Op.WHERE, c, a, b)


def power(x: Node, y: Node) -> Node:
    """``x ** y``; a constant integer exponent |y| <= 16 becomes repeated multiplication and 0.5
    a square root (as numpy's own power loop does: ``np.power(-inf, 0.5)`` is NaN there too)."""
    if is_const(y) and y.shape == () and float(y.attrs[0]).is_integer() and abs(y.attrs[0]) <= 16:
        n = int(y.attrs[0])
        if n == 0:
            return broadcast_to(const(1.0), x.shape)
        result, base, k = None, _float(x), abs(n)
        while k:  # binary exponentiation: x**4 = (x*x)*(x*x)
            if k & 1:
                result = base if result is None else mul(result, base)
            k >>= 1
            if k:
                base = mul(base, base)
        return div(const(1.0), result) if n < 0 else result
    if is_const(y, 0.5) and y.shape == ():
        return elementwise(Op.SQRT, x)
    return elementwise(Op.POW, x, y)


def reduce(op: Op | str, x: Node, axes: tuple[int, ...] | None = None) -> Node:
    axes = tuple(range(x.ndim)) if axes is None else tuple(sorted(set(axes)))
    if not axes:
        return x
    return make(op, _float(x), attrs=(axes,))


def reshape(x: Node, shape: tuple[int, ...]) -> Node:
    """``x`` viewed with ``shape``; a reshape of a reshape is one reshape of the original, and
    of a constant fill a fill."""
    shape = tuple(shape)
    if x.op == Op.CONST:
        return const(x.attrs[0], shape, x.dtype)
    if x.op == Op.RESHAPE:
        x = x.args[0]
    return x if x.shape == shape else make(Op.RESHAPE, x, attrs=(shape,))


def transpose(x: Node, perm: tuple[int, ...] | None = None) -> Node:
    perm = tuple(reversed(range(x.ndim))) if perm is None else tuple(perm)
    return x if perm == tuple(range(x.ndim)) else make(Op.TRANSPOSE, x, attrs=(perm,))


def index(x: Node, items: tuple) -> Node:
    """``x[items]``; of ``x = scatter(acc, v){items}`` (an element just written), ``v`` itself
    (``u[i] = a; w[i] = u[i] * b`` reads ``a``, not the array: the write and the read are then
    independent of the rest of ``u``)."""
    if not items:
        return x
    if x.op == Op.SCATTER and x.attrs == items and x.args[1].type == index_type(x, items):
        return x.args[1]
    return make(Op.INDEX, x, attrs=items)


def scatter(acc: Node, upd: Node, items: tuple) -> Node:
    """``acc`` with ``acc[items] = upd``. An update that adds to what it overwrites,
    ``acc[items] + v`` (or ``- v``: what ``y[i] += v`` traces to), is ``scatter_add(acc, v)``:
    the same rounding (``a - v`` is ``a + (-v)`` exactly), and no read of ``acc`` — so two
    accumulations into one element commute up to rounding, which lets the re-rolling pass
    build element loops that add into overlapping positions (``f[e] -= t; f[e + 1] += t``)."""
    if acc.dtype == "f64" and upd.op in (Op.ADD, Op.SUB) and upd.type == index_type(acc, items):
        a, b = upd.args
        read = (a.op == Op.INDEX and a.args[0] is acc and a.attrs == items)
        if read and b.type == upd.type:
            return make(Op.SCATTER_ADD, acc, b if upd.op == Op.ADD else neg(b), attrs=items)
        if upd.op == Op.ADD and b.op == Op.INDEX and b.args[0] is acc and b.attrs == items:
            if a.type == upd.type:
                return make(Op.SCATTER_ADD, acc, a, attrs=items)
    return make(Op.SCATTER, acc, upd, attrs=items)


def index_type(x: Node, items: tuple) -> Type:
    """The type of ``x[items]``."""
    return Type(index_shape(x.shape, items), x.dtype)


def matmul(a: Node, b: Node) -> Node:
    """numpy's ``a @ b`` for 1-D and 2-D operands: one ``matmul`` node, except vector @ vector,
    which is a (1,k) @ (k,1) product reshaped to a scalar."""
    if a.ndim == 0 or b.ndim == 0 or a.ndim > 2 or b.ndim > 2:
        raise ValueError(f"matmul supports 1-D and 2-D operands, got {a.shape} @ {b.shape}")
    a, b = _float(a), _float(b)
    if a.shape[-1] != b.shape[0]:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} are not aligned")
    if a.ndim == 1 and b.ndim == 1:
        return reshape(make(Op.MATMUL, reshape(a, (1, a.shape[0])), b), ())
    return make(Op.MATMUL, a, b)


def unsummed_product(n: Node) -> Node | None:
    """``matmul`` node ``n`` as an elementwise product when its contraction has length 1 (an
    outer product, a vector scaled by a 1-vector): one product per element and no sum, so the
    same value; ``None`` for any other product."""
    if n.op != Op.MATMUL or n.args[0].shape[-1] != 1:
        return None
    a, b = n.args
    m = a.shape[:1] if a.ndim == 2 else ()
    k = b.shape[1:] if b.ndim == 2 else ()
    left = reshape(a, m + (1,) * len(k)) if k and m else reshape(a, m)
    return mul(left, reshape(b, k))


# ----------------------------------------------------------------------------------------------
# Reference implementations (numpy), used by the interpreter.


def _np_items(items: tuple) -> tuple:
    return tuple(
        slice(i[0], None if i[1] < 0 else i[1], i[2]) if isinstance(i, tuple) else i for i in items
    )


def _scatter_ref(attrs, acc, upd):
    out = np.array(acc, dtype=np.float64, copy=True)
    out[_np_items(attrs)] += upd
    return out


def _scatter_set_ref(attrs, acc, upd):
    out = np.array(acc, copy=True)
    out[_np_items(attrs)] = upd
    return out


def _reduce_max_ref(attrs, x):
    return np.max(x, axis=attrs[0])


def _ew_ref(fn):
    return lambda attrs, *xs: fn(*xs)


# ----------------------------------------------------------------------------------------------
# VJP rules. Each takes (g, out, *args) and returns one cotangent (or None) per argument.
# Cotangents of scalar operands of elementwise ops are summed by reverse mode (see autodiff).


def _one_minus_sq(y):
    return sub(const(1.0), mul(y, y))


def _one_plus_sq(y):
    return add(const(1.0), mul(y, y))


def _sqrt_one_minus_sq(x):
    """sqrt((1 - x)(1 + x)): 1 - x^2 without cancellation near |x| = 1."""
    return elementwise(Op.SQRT, mul(sub(const(1.0), x), add(const(1.0), x)))


#: the log family's switch to log(2|x|) (codegen/mathlib/log.py, BIG)
_LOG_BIG = 2.0**28


def _asinh_den(x):
    """sqrt(1 + x^2), |x| above 2^28 (arcsinh' = 1 / this)."""
    a = elementwise(Op.ABS, x)
    big = elementwise(Op.GT, a, const(_LOG_BIG))
    return where(big, a, elementwise(Op.SQRT, add(const(1.0), mul(x, x))))


def _acosh_den(x):
    """sqrt((x - 1)(|x| + 1)) (0 at 1, NaN below), x above 2^28 (arccosh' = 1 / this)."""
    w = mul(sub(x, const(1.0)), add(elementwise(Op.ABS, x), const(1.0)))
    return where(elementwise(Op.GT, x, const(_LOG_BIG)), x, elementwise(Op.SQRT, w))


def _atanh_den(x):
    """(1 - x)(1 + x) (arctanh' = 1 / this)."""
    return mul(sub(const(1.0), x), add(const(1.0), x))


def _max_vjp(g, out, x, y, pick):
    """Cotangents of maximum/minimum: to the selected side; ties split evenly (as JAX)."""
    half = mul(g, const(0.5))
    gx = where(elementwise(pick, x, y), g, where(elementwise(Op.EQ, x, y), half, const(0.0)))
    gy = where(elementwise(pick, y, x), g, where(elementwise(Op.EQ, x, y), half, const(0.0)))
    return gx, gy


def _keepdims(shape, axes):
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


def _reduce_sum_vjp(g, out, x):
    (axes,) = out.attrs
    return (broadcast_to(reshape(g, _keepdims(x.shape, axes)), x.shape),)


def _argmax_mask(out, x):
    """``(keepdims shape, 0/1 mask of the maxima of x, their count per reduced slice)`` of a
    ``reduce_max`` node ``out``: how both of its rules share among tied maxima."""
    (axes,) = out.attrs
    keep = _keepdims(x.shape, axes)
    eq = elementwise(Op.EQ, x, broadcast_to(reshape(out, keep), x.shape))
    mask = make(Op.CAST, eq, attrs=("f64",))
    return keep, mask, reduce(Op.REDUCE_SUM, mask, axes)


def _reduce_max_vjp(g, out, x):
    keep, mask, count = _argmax_mask(out, x)
    share = broadcast_to(reshape(div(g, count), keep), x.shape)
    # share * indicator (as JAX): where the maximum is NaN no element equals it, count is 0 and
    # the gradient is NaN (0 * inf), not a silent 0
    return (mul(share, mask),)


def _broadcast_vjp(g, out, x):
    lead = out.ndim - x.ndim
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(x.shape) if d == 1 and out.shape[lead + i] != 1
    )
    return (reshape(reduce(Op.REDUCE_SUM, g, axes), x.shape),)


def _pow_dx(x, y):
    """d(x**y)/dx = y * x**(y-1)."""
    return mul(y, power(x, sub(y, const(1.0)) if not is_const(y) else const(y.attrs[0] - 1)))


def _pow_dy(out, x):
    """d(x**y)/dy = log(x) * x**y, which is 0 where x**y is 0 (0**y for y > 0), not NaN."""
    return where(elementwise(Op.EQ, out, const(0.0)), const(0.0), mul(elementwise(Op.LOG, x), out))


def _pow_vjp(g, out, x, y):
    gx = mul(g, _pow_dx(x, y))
    dy = _pow_dy(out, x)
    gy = None if is_const(y) else mul(g, dy)
    return gx, gy


def _gauss(x: Node) -> Node:
    """d erf(x) / dx = 2 / sqrt(pi) * exp(-x^2)."""
    return mul(const(2.0 / math.sqrt(math.pi)), elementwise(Op.EXP, neg(mul(x, x))))


def _trigamma(x: Node) -> Node:
    """psi'(x) as a composition (only digamma's derivative needs it): the recurrence
    psi'(x) = sum_{k<10} 1/(x+k)^2 + psi'(x+10), the asymptotic series 1/y + 1/(2y^2) +
    sum_{k<=7} B_2k / y^(2k+1) at y = x + 10 (Abramowitz & Stegun 6.4.12), and the reflection
    psi'(x) = pi^2 / sin^2(pi x) - psi'(1 - x) for x < 0."""
    neg = elementwise(Op.LT, x, const(0.0))
    xr = where(neg, sub(const(1.0), x), x)
    acc = None
    for k in range(10):
        t = div(const(1.0), mul(add(xr, const(float(k))), add(xr, const(float(k)))))
        acc = t if acc is None else add(acc, t)
    y = add(xr, const(10.0))
    iy = div(const(1.0), y)
    z = mul(iy, iy)
    # sum_k B_2k / y^(2k+1) = iy^3 (1/6 - z/30 + z^2/42 - z^3/30 + 5 z^4/66 - 691 z^5/2730
    # + 7 z^6/6), z = 1/y^2 <= 1/100: the first omitted term is below 1e-19 of the result
    series = const(7.0 / 6)
    for c in (-691.0 / 2730, 5.0 / 66, -1.0 / 30, 1.0 / 42, -1.0 / 30, 1.0 / 6):
        series = add(mul(series, z), const(c))
    asym = add(add(iy, mul(const(0.5), z)), mul(mul(z, iy), series))
    pos = add(acc, asym)
    # sin^2(pi x) = sin^2(pi (x - rint x)): the reduced argument is exact, so the pole's
    # neighbourhood keeps its relative accuracy
    s = elementwise(Op.SIN, mul(const(math.pi), sub(x, elementwise(Op.RINT, x))))
    refl = sub(div(const(math.pi**2), mul(s, s)), pos)
    return where(neg, refl, pos)


def _special(name: str):
    """scipy.special's ufunc ``name`` as the reference (the interpreter's semantics); without
    scipy, numpy's vectorised ``math`` function (correctly rounded to ~1 ulp as well)."""
    try:
        import scipy.special

        return getattr(scipy.special, name)
    except ImportError:
        return np.vectorize(getattr(math, name), otypes=[np.float64])


def _atan2_vjp(g, out, y, x):
    """d atan2(y, x) = (x dy - y dx) / (x^2 + y^2)."""
    r = div(g, add(mul(x, x), mul(y, y)))
    return mul(r, x), neg(mul(r, y))


def _transpose2(x: Node) -> Node:
    """``x.T`` of a 2-D ``x``; with a unit dimension that is the same element order, a reshape
    (a view, never a copy)."""
    return reshape(x, x.shape[::-1]) if 1 in x.shape else transpose(x)


def _matmul_vjp(g, a, b):
    """Cotangents of ``a @ b``: ``g @ b.T`` and ``a.T @ g``, with vectors as numpy treats them
    (an outer product is a (m,1) @ (1,n) product of reshaped vectors). ``a.T @ g`` with a vector
    ``g`` is computed as ``g @ a`` — the same products summed in the same order, so
    bit-identical — which reads ``a`` in place: ``a.T`` would be a gather that matmul needs
    materialised, a copy of ``a`` per call."""
    if b.ndim == 1:  # (m,k) @ (k,): g is (m,)
        return matmul(reshape(g, (g.shape[0], 1)), reshape(b, (1, b.shape[0]))), matmul(g, a)
    if a.ndim == 1:  # (k,) @ (k,n): g is (n,)
        return matmul(b, g), matmul(reshape(a, (a.shape[0], 1)), reshape(g, (1, g.shape[0])))
    ga = matmul(g, _transpose2(b))
    if g.shape[1] == 1:
        gb = reshape(matmul(reshape(g, (g.shape[0],)), a), (a.shape[1], 1))
    else:
        gb = matmul(_transpose2(a), g)
    return ga, gb


_NO_COTANGENT = lambda g, out, *args: (None,) * len(args)

# ----------------------------------------------------------------------------------------------
# JVP rules. Each takes (t, out, *args) — ``t`` one tangent per argument, a node of the
# argument's type or ``None`` (zero) — and returns the result's tangent, ``None`` for zero.
# Forward mode calls a rule only when some argument has a tangent. The helpers below keep zero
# tangents symbolic: a missing term is left out rather than built as a multiplication by 0.


def _tadd(a: Node | None, b: Node | None) -> Node | None:
    """``a + b`` of tangents (``None`` is zero)."""
    if a is None:
        return b
    return a if b is None else add(a, b)


def _tneg(a: Node | None) -> Node | None:
    return None if a is None else neg(a)


def _tmul(a: Node | None, f: Node) -> Node | None:
    """A tangent ``a`` scaled by ``f`` (``None`` stays zero)."""
    return None if a is None else mul(a, f)


def _tdiv(a: Node | None, f: Node) -> Node | None:
    return None if a is None else div(a, f)


def _or_zero(a: Node | None, like: Node | None = None) -> Node:
    """A tangent as a node: ``None`` becomes a zero of ``like``'s shape (a scalar zero, which
    elementwise ops broadcast, when ``like`` is not given)."""
    if a is not None:
        return a
    return const(0.0) if like is None else const(0.0, like.shape)


def _max_jvp(t, out, x, y, pick):
    """Tangent of maximum/minimum: the selected side's; on a tie the mean of both (the VJP's
    even split, transposed)."""
    tx, ty = t
    half = mul(_tadd(tx, ty), const(0.5))
    return where(elementwise(pick, x, y), _or_zero(tx),
                 where(elementwise(Op.EQ, x, y), half, _or_zero(ty)))  # fmt: skip


def _pow_jvp(t, out, x, y):
    tx, ty = t
    return _tadd(
        None if tx is None else mul(tx, _pow_dx(x, y)),
        None if ty is None else mul(ty, _pow_dy(out, x)),
    )


def _atan2_jvp(t, out, y, x):
    """d atan2(y, x) = (x dy - y dx) / (x^2 + y^2)."""
    ty, tx = t
    return div(_tadd(_tmul(ty, x), _tneg(_tmul(tx, y))), add(mul(x, x), mul(y, y)))


def _fmod_jvp(t, out, x, y):
    tx, ty = t
    if ty is None:
        return tx
    return _tadd(tx, neg(mul(ty, elementwise(Op.RINT, div(sub(x, out), y)))))


def _where_jvp(t, out, c, a, b):
    _, ta, tb = t
    if ta is None and tb is None:
        return None
    return where(c, _or_zero(ta), _or_zero(tb))


def _reduce_max_jvp(t, out, x):
    """The mean of the tangents of the tied maxima of each reduced slice."""
    _, mask, count = _argmax_mask(out, x)
    return div(reduce(Op.REDUCE_SUM, mul(t[0], mask), out.attrs[0]), count)


def _scatter_add_jvp(t, out, acc, upd):
    ta, tu = t
    if tu is None:
        return ta
    return make(Op.SCATTER_ADD, _or_zero(ta, acc), tu, attrs=out.attrs)


def _scatter_jvp(t, out, acc, upd):
    """acc[items] = upd: the tangent of acc with the overwritten elements' tangents replaced."""
    ta, tu = t
    return make(Op.SCATTER, _or_zero(ta, acc), _or_zero(tu, upd), attrs=out.attrs)


def _matmul_jvp(t, out, a, b):
    ta, tb = t
    return _tadd(
        None if ta is None else make(Op.MATMUL, ta, b),
        None if tb is None else make(Op.MATMUL, a, tb),
    )


_ZERO_TANGENT = lambda t, out, *args: None

# ----------------------------------------------------------------------------------------------
# The table: one block per primitive. Adding an op is its member of Op, one block here and its row
# in each codegen registry (codegen/lower/driver.py EMIT or LOWER, codegen/mathlib/core.py MATH for polynomial
# math); tests/test_registry.py names any layer without a row for an op.

# fmt: off
_E = _ew_ref
_MATH_COST = 20  # a polynomial exp/log/sin...: ~15-25 vector adds per element
_LN2 = math.log(2.0)
_LN10 = math.log(10.0)

# -- elementwise unary (float -> float)
defop(Op.NEG, "unary", 1, _arith, _E(np.negative), lambda g, out, x: (neg(g),),
      numpy=("negative",), jvp=lambda t, out, x: neg(t[0]))
defop(Op.EXP, "unary", 1, _arith, _E(np.exp), lambda g, out, x: (mul(g, out),),
      numpy=("exp",), cost=_MATH_COST, jvp=lambda t, out, x: mul(t[0], out))
defop(Op.LOG, "unary", 1, _arith, _E(np.log), lambda g, out, x: (div(g, x),),
      numpy=("log",), cost=_MATH_COST, jvp=lambda t, out, x: div(t[0], x))
defop(Op.LOG1P, "unary", 1, _arith, _E(np.log1p), lambda g, out, x: (div(g, add(x, const(1.0))),),
      numpy=("log1p",), cost=_MATH_COST, jvp=lambda t, out, x: div(t[0], add(x, const(1.0))))
defop(Op.EXPM1, "unary", 1, _arith, _E(np.expm1), lambda g, out, x: (mul(g, add(out, const(1.0))),),
      numpy=("expm1",), cost=_MATH_COST, jvp=lambda t, out, x: mul(t[0], add(out, const(1.0))))
defop(Op.EXP2, "unary", 1, _arith, _E(np.exp2), lambda g, out, x: (mul(g, mul(out, const(_LN2))),),
      numpy=("exp2",), cost=_MATH_COST, jvp=lambda t, out, x: mul(t[0], mul(out, const(_LN2))))
# the log family (codegen/mathlib/log.py). Each derivative's divisor is formed exactly as the IR
# body forms its own reciprocal, so in a gradient the sqrt and the division are computed once:
# arcsinh' = 1/sqrt(1 + x^2) (1/|x| above 2^28, where x^2 may overflow); arccosh' =
# 1/sqrt((x - 1)(|x| + 1)) (inf at 1, NaN below, 1/x above 2^28); arctanh' = 1/((1 - x)(1 + x))
# (factored: exact near +-1, inf there, negative beyond)
defop(Op.LOG2, "unary", 1, _arith, _E(np.log2), lambda g, out, x: (div(g, mul(x, const(_LN2))),),
      numpy=("log2",), cost=_MATH_COST, jvp=lambda t, out, x: div(t[0], mul(x, const(_LN2))))
defop(Op.LOG10, "unary", 1, _arith, _E(np.log10),
      lambda g, out, x: (div(g, mul(x, const(_LN10))),), numpy=("log10",), cost=_MATH_COST,
      jvp=lambda t, out, x: div(t[0], mul(x, const(_LN10))))
defop(Op.ARCSINH, "unary", 1, _arith, _E(np.arcsinh), lambda g, out, x: (div(g, _asinh_den(x)),),
      numpy=("arcsinh",), cost=_MATH_COST, jvp=lambda t, out, x: div(t[0], _asinh_den(x)))
defop(Op.ARCCOSH, "unary", 1, _arith, _E(np.arccosh), lambda g, out, x: (div(g, _acosh_den(x)),),
      numpy=("arccosh",), cost=_MATH_COST, jvp=lambda t, out, x: div(t[0], _acosh_den(x)))
defop(Op.ARCTANH, "unary", 1, _arith, _E(np.arctanh), lambda g, out, x: (div(g, _atanh_den(x)),),
      numpy=("arctanh",), cost=_MATH_COST, jvp=lambda t, out, x: div(t[0], _atanh_den(x)))
# sinh' = cosh, cosh' = sinh: both IR bodies share one core (codegen/mathlib/hyp.py), computed
# once per element after inlining; cbrt' = (1/3)/cbrt^2: inf at 0, 0 at +-inf (the limits)
defop(Op.SINH, "unary", 1, _arith, _E(np.sinh),
      lambda g, out, x: (mul(g, elementwise(Op.COSH, x)),), numpy=("sinh",), cost=_MATH_COST,
      jvp=lambda t, out, x: mul(t[0], elementwise(Op.COSH, x)))
defop(Op.COSH, "unary", 1, _arith, _E(np.cosh),
      lambda g, out, x: (mul(g, elementwise(Op.SINH, x)),), numpy=("cosh",), cost=_MATH_COST,
      jvp=lambda t, out, x: mul(t[0], elementwise(Op.SINH, x)))
defop(Op.CBRT, "unary", 1, _arith, _E(np.cbrt),
      lambda g, out, x: (div(mul(g, const(1 / 3)), mul(out, out)),), numpy=("cbrt",),
      cost=_MATH_COST, jvp=lambda t, out, x: div(mul(t[0], const(1 / 3)), mul(out, out)))
defop(Op.SQRT, "unary", 1, _arith, _E(np.sqrt), lambda g, out, x: (div(mul(g, const(0.5)), out),),
      numpy=("sqrt",), cost=4, jvp=lambda t, out, x: div(mul(t[0], const(0.5)), out))
defop(Op.SIN, "unary", 1, _arith, _E(np.sin), lambda g, out, x: (mul(g, elementwise(Op.COS, x)),),
      numpy=("sin",), cost=_MATH_COST, jvp=lambda t, out, x: mul(t[0], elementwise(Op.COS, x)))
defop(Op.COS, "unary", 1, _arith, _E(np.cos),
      lambda g, out, x: (neg(mul(g, elementwise(Op.SIN, x))),), numpy=("cos",), cost=_MATH_COST,
      jvp=lambda t, out, x: neg(mul(t[0], elementwise(Op.SIN, x))))
defop(Op.TANH, "unary", 1, _arith, _E(np.tanh), lambda g, out, x: (mul(g, _one_minus_sq(out)),),
      numpy=("tanh",), cost=_MATH_COST, jvp=lambda t, out, x: mul(t[0], _one_minus_sq(out)))
# tan' = 1 + tan^2; arcsin' = -arccos' = 1/sqrt((1 - x)(1 + x)) (factored: exact near +-1,
# inf at +-1, NaN outside [-1, 1])
defop(Op.TAN, "unary", 1, _arith, _E(np.tan), lambda g, out, x: (mul(g, _one_plus_sq(out)),),
      numpy=("tan",), cost=_MATH_COST, jvp=lambda t, out, x: mul(t[0], _one_plus_sq(out)))
defop(Op.ARCSIN, "unary", 1, _arith, _E(np.arcsin),
      lambda g, out, x: (div(g, _sqrt_one_minus_sq(x)),), numpy=("arcsin",), cost=_MATH_COST,
      jvp=lambda t, out, x: div(t[0], _sqrt_one_minus_sq(x)))
defop(Op.ARCCOS, "unary", 1, _arith, _E(np.arccos),
      lambda g, out, x: (neg(div(g, _sqrt_one_minus_sq(x))),), numpy=("arccos",), cost=_MATH_COST,
      jvp=lambda t, out, x: neg(div(t[0], _sqrt_one_minus_sq(x))))
defop(Op.ARCTAN, "unary", 1, _arith, _E(np.arctan),
      lambda g, out, x: (div(g, add(const(1.0), mul(x, x))),), numpy=("arctan",), cost=_MATH_COST,
      jvp=lambda t, out, x: div(t[0], add(const(1.0), mul(x, x))))
# the error function and its complement (scipy.special.erf/erfc: not numpy ufuncs)
defop(Op.ERF, "unary", 1, _arith, lambda a, x: _special("erf")(x),
      lambda g, out, x: (mul(g, _gauss(x)),), cost=_MATH_COST,
      jvp=lambda t, out, x: mul(t[0], _gauss(x)))
defop(Op.ERFC, "unary", 1, _arith, lambda a, x: _special("erfc")(x),
      lambda g, out, x: (neg(mul(g, _gauss(x))),), cost=_MATH_COST,
      jvp=lambda t, out, x: neg(mul(t[0], _gauss(x))))
# log |Gamma(x)| and its derivative, digamma (scipy.special.gammaln / digamma / psi)
defop(Op.GAMMALN, "unary", 1, _arith, lambda a, x: _special("gammaln")(x),
      lambda g, out, x: (mul(g, elementwise(Op.DIGAMMA, x)),), cost=_MATH_COST,
      jvp=lambda t, out, x: mul(t[0], elementwise(Op.DIGAMMA, x)))
defop(Op.DIGAMMA, "unary", 1, _arith, lambda a, x: _special("digamma")(x),
      lambda g, out, x: (mul(g, _trigamma(x)),), cost=_MATH_COST,
      jvp=lambda t, out, x: mul(t[0], _trigamma(x)))
defop(Op.ABS, "unary", 1, _arith, _E(np.abs), lambda g, out, x: (mul(g, elementwise(Op.SIGN, x)),),
      numpy=("absolute", "fabs"), jvp=lambda t, out, x: mul(t[0], elementwise(Op.SIGN, x)))
defop(Op.SIGN, "unary", 1, _arith, _E(np.sign), None, numpy=("sign",), differentiable=False)
# rounding: piecewise constant (their derivative is 0 where it exists, as for int())
defop(Op.FLOOR, "unary", 1, _arith, _E(np.floor), None, numpy=("floor",), differentiable=False)
defop(Op.CEIL, "unary", 1, _arith, _E(np.ceil), None, numpy=("ceil",), differentiable=False)
defop(Op.RINT, "unary", 1, _arith, _E(np.rint), None, numpy=("rint",), differentiable=False)
defop(Op.TRUNC, "unary", 1, _arith, _E(np.trunc), None, numpy=("trunc",), differentiable=False)

# -- elementwise binary
defop(Op.ADD, "binary", 2, _arith, _E(np.add), lambda g, out, x, y: (g, g), numpy=("add",),
      jvp=lambda t, out, x, y: _tadd(t[0], t[1]))
defop(Op.SUB, "binary", 2, _arith, _E(np.subtract), lambda g, out, x, y: (g, neg(g)),
      numpy=("subtract",), jvp=lambda t, out, x, y: _tadd(t[0], _tneg(t[1])))
defop(Op.MUL, "binary", 2, _arith, _E(np.multiply), lambda g, out, x, y: (mul(g, y), mul(g, x)),
      numpy=("multiply",), jvp=lambda t, out, x, y: _tadd(_tmul(t[0], y), _tmul(t[1], x)))
defop(Op.DIV, "binary", 2, _arith, _E(np.divide),
      lambda g, out, x, y: (div(g, y), neg(div(mul(g, out), y))),
      numpy=("divide", "true_divide"), cost=4,
      jvp=lambda t, out, x, y: _tadd(_tdiv(t[0], y), _tneg(_tdiv(_tmul(t[1], out), y))))
defop(Op.POW, "binary", 2, _arith, _E(np.power), _pow_vjp, cost=_MATH_COST, jvp=_pow_jvp)
defop(Op.ARCTAN2, "binary", 2, _arith, _E(np.arctan2), _atan2_vjp, numpy=("arctan2",),
      cost=_MATH_COST, jvp=_atan2_jvp)
# C's fmod (exact; the sign of x): x - trunc(x / y) * y, so d/dx = 1, d/dy = -trunc(x / y);
# trunc(x / y) is (x - fmod) / y, an integer up to rounding: rint recovers it exactly (trunc of
# the rounded quotient could land one below)
defop(Op.FMOD, "binary", 2, _arith, _E(np.fmod),
      lambda g, out, x, y: (g, neg(mul(g, elementwise(Op.RINT, div(sub(x, out), y))))),
      numpy=("fmod",), cost=8, jvp=_fmod_jvp)  # a libm call per element
defop(Op.MAXIMUM, "binary", 2, _arith, _E(np.maximum),
      lambda g, out, x, y: _max_vjp(g, out, x, y, Op.GT), numpy=("maximum",),
      jvp=lambda t, out, x, y: _max_jvp(t, out, x, y, Op.GT))
defop(Op.MINIMUM, "binary", 2, _arith, _E(np.minimum),
      lambda g, out, x, y: _max_vjp(g, out, x, y, Op.LT), numpy=("minimum",),
      jvp=lambda t, out, x, y: _max_jvp(t, out, x, y, Op.LT))

# -- comparisons and logic (bool results: no cotangent)
for _n, _fn, _np in [(Op.LT, np.less, "less"), (Op.LE, np.less_equal, "less_equal"),
                     (Op.GT, np.greater, "greater"), (Op.GE, np.greater_equal, "greater_equal"),
                     (Op.EQ, np.equal, "equal"), (Op.NE, np.not_equal, "not_equal")]:
    defop(_n, "compare", 2, _compare, _E(_fn), None, numpy=(_np,), differentiable=False)
defop(Op.AND, "logical", 2, _logical, _E(np.logical_and), None, numpy=("logical_and",),
      differentiable=False)
defop(Op.OR, "logical", 2, _logical, _E(np.logical_or), None, numpy=("logical_or",),
      differentiable=False)
defop(Op.NOT, "logical", 1, _logical, _E(np.logical_not), None, numpy=("logical_not",),
      differentiable=False)

# -- select and cast
defop(Op.WHERE, "select", 3, _where, _E(np.where),
      lambda g, out, c, a, b: (None, where(c, g, const(0.0)), where(c, const(0.0), g)),
      jvp=_where_jvp)
defop(Op.CAST, "cast", 1, _cast, lambda attrs, x: np.asarray(x).astype(ir.NUMPY_DTYPE[attrs[0]]),
      None, differentiable=False)
# stop_gradient(x): x's value; no cotangent, zero tangent (so activity analysis stops at it);
# the passes, which run after every differentiation, replace it by x
defop(Op.STOP_GRADIENT, "unary", 1, _arith, lambda attrs, x: x, None, differentiable=False)

# -- reductions
defop(Op.REDUCE_SUM, "reduce", 1, _reduce, lambda a, x: np.sum(x, axis=a[0]), _reduce_sum_vjp,
      identity=0.0, jvp=lambda t, out, x: reduce(Op.REDUCE_SUM, t[0], out.attrs[0]))
defop(Op.REDUCE_MAX, "reduce", 1, _reduce, _reduce_max_ref, _reduce_max_vjp, identity=-math.inf,
      jvp=_reduce_max_jvp)

# -- shapes and indexing
defop(Op.BROADCAST_TO, "shape", 1, _broadcast_to, lambda a, x: np.broadcast_to(x, a[0]),
      _broadcast_vjp, jvp=lambda t, out, x: broadcast_to(t[0], out.shape))
defop(Op.RESHAPE, "shape", 1, _reshape, lambda a, x: np.reshape(x, a[0]),
      lambda g, out, x: (reshape(g, x.shape),), jvp=lambda t, out, x: reshape(t[0], out.shape))
defop(Op.TRANSPOSE, "shape", 1, _transpose, lambda a, x: np.transpose(x, a[0]),
      lambda g, out, x: (transpose(g, tuple(np.argsort(out.attrs[0]).tolist())),),
      jvp=lambda t, out, x: transpose(t[0], out.attrs[0]))
defop(Op.INDEX, "index", 1, _index, lambda a, x: np.asarray(x)[_np_items(a)],
      lambda g, out, x: (Sparse(g, out.attrs),), jvp=lambda t, out, x: index(t[0], out.attrs))
defop(Op.SCATTER_ADD, "index", 2, _scatter_add, _scatter_ref,
      lambda g, out, acc, upd: (g, index(g, out.attrs)), jvp=_scatter_add_jvp)
# acc[items] = upd: the overwritten elements of acc get no cotangent
defop(Op.SCATTER, "index", 2, _scatter, _scatter_set_ref,
      lambda g, out, acc, upd: (make(Op.SCATTER, g, const(0.0, upd.shape), attrs=out.attrs),
                                index(g, out.attrs)),
      jvp=_scatter_jvp)

from .ops_table import (
    _add_at_jvp,
    _add_at_ref,
    _add_at_type,
    _add_at_vjp,
    _put_jvp,
    _put_ref,
    _put_type,
    _put_vjp,
    _take_jvp,
    _take_ref,
    _take_type,
    _take_vjp,
)

# take(x, idx): rows x[idx[t]] for a table of whole-number positions (an f64 constant input);
# add_at(acc, idx, upd): acc with row upd[t] added at row idx[t], t in order (tapejit/core/ops_table.py)
defop(Op.TAKE, "index", 2, _take_type, _take_ref, _take_vjp, jvp=_take_jvp)
defop(Op.ADD_AT, "index", 3, _add_at_type, _add_at_ref, _add_at_vjp, jvp=_add_at_jvp)
# put(acc, idx, upd): acc with rows idx[t] replaced by upd[t], the positions distinct
defop(Op.PUT, "index", 3, _put_type, _put_ref, _put_vjp, jvp=_put_jvp)
from .ops_window import (
    _window_add_jvp,
    _window_add_ref,
    _window_add_type,
    _window_add_vjp,
    _window_jvp,
    _window_ref,
    _window_type,
    _window_vjp,
)

# window(x): rows x[a + c*k + d*m] over the positions (k, m) of a ragged layout (T rows, row k of
# L0 + dL*k); window_add(acc, upd): upd added at those rows, in order (tapejit/core/ops_window.py)
defop(Op.WINDOW, "index", 1, _window_type, _window_ref, _window_vjp, jvp=_window_jvp)
defop(Op.WINDOW_ADD, "index", 2, _window_add_type, _window_add_ref, _window_add_vjp,
      jvp=_window_add_jvp)

# -- linear algebra, control, leaves
defop(Op.MATMUL, "linalg", 2, _matmul, lambda a, x, y: np.matmul(x, y),
      lambda g, out, a, b: _matmul_vjp(g, a, b), jvp=_matmul_jvp)
from .ops_linalg import _eigh_jvp, _eigh_ref, _eigh_vjp, _svd_jvp, _svd_ref, _svd_vjp

# eigh(a): row 0 the eigenvalues (ascending), rows 1..n the eigenvectors (columns) of the
# symmetric matrix a, by LAPACK's dsyevd reading triangle attrs[0] (codegen/blas.py)
defop(Op.EIGH, "linalg", 1, _eigh, _eigh_ref, _eigh_vjp, jvp=_eigh_jvp)
# svd(a): the thin SVD of the (m, n) matrix a, k = min(m, n), flat: U (m x k, row-major), then
# s (k, descending), then Vt (k x n, row-major), by LAPACK's dgesdd, jobz='S' (codegen/blas.py)
defop(Op.SVD, "linalg", 1, _svd, _svd_ref, _svd_vjp, jvp=_svd_jvp)
from .ops_loop import (  # noqa: F401  (the rules build on the builders above; re-exported)
    Accumulate,
    History,
    LoopLayout,
    LoopSpec,
    LoopVJP,
    Segment,
    _loop,
    _loop_jvp,
    _loop_ref,
    _loop_vjp,
    eval_graph,
    extend_inputs,
    hoist_invariants,
    loop_layout,
    segment,
)

# loop(...): a structured loop whose body is a sub-graph (tapejit/core/ops_loop.py)
defop(Op.LOOP, "control", -1, _loop, _loop_ref, _loop_vjp, jvp=_loop_jvp)
# custom(out, operands...): the value is out; the rules are the user's (attrs[0], a
# tapejit.frontend.custom.Rule); the passes replace the node by out before code generation
defop(Op.CUSTOM, "custom", -1, lambda types, attrs: types[0], lambda attrs, out, *rest: out,
      lambda g, out, *args: out.attrs[0].vjp(g, out, *args),
      jvp=lambda t, out, *args: out.attrs[0].jvp(t, out, *args))
defop(Op.INPUT, "leaf", 0, _leaf, None)
defop(Op.CONST, "leaf", 0, _leaf, None)
# fmt: on


_missing = [m for m in Op if m not in OPS]
if _missing:
    raise ImportError(f"tapejit.core.ops.Op members without a defop block: {', '.join(_missing)}")


def _group(*names: str) -> tuple[Op, ...]:
    return tuple(Op(n) for n, d in OPS.items() if d.group in names)


UNARY = _group("unary")
BINARY = _group("binary")
COMPARE = _group("compare")
LOGICAL = _group("logical")
SELECT = _group("select")
CAST = _group("cast")
ELEMENTWISE = UNARY + BINARY + COMPARE + LOGICAL + SELECT + CAST
REDUCE = _group("reduce")
SHAPE = _group("shape")
INDEX = _group("index")
#: Ops that write an update into a copy of their first operand at a static index set
#: (``acc[items] += upd`` / ``acc[items] = upd``); codegen updates in place when ``acc`` dies.
SCATTER = (Op.SCATTER_ADD, Op.SCATTER)
#: Ops that a fused loop computes by reading their (array) operand at other positions: gathers.
GATHERS = (Op.INDEX, Op.TRANSPOSE, Op.BROADCAST_TO)
#: Ops that only spread a scalar operand over a shape: a fused loop reads the scalar itself.
SCALAR_SPREADS = (Op.BROADCAST_TO, Op.RESHAPE)
LINALG = _group("linalg")
CONTROL = _group("control")
CUSTOM = _group("custom")  # hand-given rules: inlined by the passes, never lowered
LEAF = _group("leaf")
#: Ops whose bool operands numpy promotes to float (see :func:`elementwise`).
_FLOAT_OPERANDS = frozenset(BINARY + UNARY + COMPARE)
#: Ops whose result is piecewise constant in their float arguments: no cotangent flows through.
NONDIFFERENTIABLE = tuple(Op(n) for n, d in OPS.items() if not d.differentiable)


def vjp_rule(op: Op | str) -> Callable[..., tuple]:
    """The VJP rule of ``op``; raises :class:`RuleError` naming the op if it has none."""
    row = OPS.get(op)
    if row is None or row.vjp is None:
        raise RuleError(f"op {str(op)!r} has no VJP rule")
    return row.vjp


def jvp_rule(op: Op | str) -> Callable[..., Node | None]:
    """The JVP rule of ``op``; raises :class:`RuleError` naming the op if it has none."""
    row = OPS.get(op)
    if row is None or row.jvp is None:
        raise RuleError(f"op {str(op)!r} has no JVP rule (forward mode)")
    return row.jvp
