"""The op registry: one row (:class:`OpDef`) per primitive, with its type rule, numpy reference
and derivative rules, and the builders the front end and the rules make nodes with.

Every primitive of the IR is a member of :class:`Op` and is defined by one :func:`defop` block in
its *family*, a module that imports this registry and fills it: ``ops_elementwise`` (unary and
binary float ops, comparisons, logic, ``where``, ``cast``), ``ops_reduce`` (reductions),
``ops_shape`` (shapes and static indexing), ``ops_table`` (gathers and scatters through index
tables), ``ops_window`` (sliding windows), ``ops_linalg`` (``matmul``, ``eigh``, ``svd``),
``ops_loop`` (structured loops); the leaves and ``custom`` are defined here. This module never
imports its families: the package ``tapejit.core`` imports each once, then :func:`seal` checks
that every member has its block and computes the group tuples. A rule that needs a
transformation is registered from that transformation (the loop's JVP rule, by
:mod:`tapejit.ad.forward` through :func:`defjvp`): the core imports nothing else of tapejit.

A row holds:

* ``type_rule(arg_types, attrs) -> Type`` — shape and dtype of the result (raises on bad input;
  the rules are in :mod:`tapejit.core.typerules`);
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

This is the module code imports (``ops.make``, ``ops.const``, ``ops.OPS``, ``ops.Op``, the group
tuples): it re-exports the op names and leaves (:mod:`.opcodes`), the shape arithmetic of the
type rules (:mod:`.typerules`) and the loop's description (:mod:`.loop_spec`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import ir
from .ir import Node, Type
from .loop_spec import (  # noqa: F401  (re-exported: ops.LoopSpec, ops.loop_layout, ...)
    Accumulate,
    History,
    LoopLayout,
    LoopSpec,
    LoopVJP,
    Segment,
    extend_inputs,
    hoist_invariants,
    loop_layout,
)
from .opcodes import COMMUTATIVE, Op, const, input_node, is_const  # noqa: F401  (re-exported)
from .typerules import (  # noqa: F401  (re-exported: the shape arithmetic passes and codegen use)
    EIGH_MAX,
    FACTOR_MAX,
    SVD_MAX_K,
    SVD_MAX_SIZE,
    _leaf,
    _np_items,
    index_affine,
    index_shape,
    index_view_offset,
    matmul_dims,
    splice_offset,
    svd_lwork,
    svd_sizes,
)

# ----------------------------------------------------------------------------------------------
# The registry


class RuleError(NotImplementedError):
    """An op has no rule for the requested transformation (names the op)."""


@dataclass(frozen=True)
class Sparse:
    """A cotangent that touches a static index set of its operand: ``operand[items] += g``."""

    g: Node
    items: tuple


@dataclass(frozen=True)
class OpDef:
    """Everything about one primitive, defined in one :func:`defop` block of its family.

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
#: Set by :func:`seal`: no op is defined after it (the groups are computed then).
_sealed = False


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
    if _sealed:
        raise ValueError(f"op {name!r} is defined after the registry was sealed (tapejit.core)")
    if not differentiable:
        vjp, jvp = _NO_COTANGENT, _ZERO_TANGENT
    OPS[name] = OpDef(name, group, arity, type_rule, ref, vjp, tuple(numpy), cost, identity,
                      differentiable, jvp)  # fmt: skip


def defjvp(op: Op | str, jvp: Callable[..., Node | None]) -> None:
    """Give op ``op`` (already defined) its JVP rule: how a transformation registers a rule that
    needs it (the loop's, from :mod:`tapejit.ad.forward`; the core never imports ``ad``)."""
    row = OPS.get(op)
    if row is None:
        raise RuleError(f"unknown op {op!r}")
    OPS[row.name] = dataclasses.replace(row, jvp=jvp)


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
# Builders: the one way the front end makes nodes (the leaves, const and input_node, are in
# .opcodes).


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
    if (x.op in (Op.TAKE, Op.WINDOW) and len(items) > 1 and items[0] == (0, x.shape[0], 1)
            and (x.op == Op.WINDOW or x.args[1].ndim == 1)):  # fmt: skip
        # rows at a table (or a window's positions), then some of their elements: the
        # elements of the rows first (x[t][:, k] is x[:, k][t]) — the same values, and a
        # gather that fuses
        src = x.args[0]
        part = index(src, ((0, src.shape[0], 1), *items[1:]))
        if x.op == Op.WINDOW:
            return make(Op.WINDOW, part, attrs=x.attrs)
        return make(Op.TAKE, part, x.args[1])
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


def segment(x: Node, seg: Segment) -> Node:
    """Part ``seg`` of a loop's flat result ``x`` (see :func:`loop_layout`), in its shape."""
    return reshape(index(x, ((seg.offset, seg.offset + seg.size, 1),)), seg.shape)


# ----------------------------------------------------------------------------------------------
# Helpers of the rules. A VJP rule takes (g, out, *args) and returns one cotangent (or None) per
# argument. A JVP rule takes (t, out, *args) — ``t`` one tangent per argument, a node of the
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


_NO_COTANGENT = lambda g, out, *args: (None,) * len(args)
_ZERO_TANGENT = lambda t, out, *args: None

# ----------------------------------------------------------------------------------------------
# The ops of no family. Adding an op is its member of Op, one block in its family and its row in
# each codegen registry (codegen/lower/driver.py EMIT or LOWER, codegen/mathlib/core.py MATH for
# polynomial math); tests/test_registry.py names any layer without a row for an op.

# fmt: off
# custom(out, operands...): the value is out; the rules are the user's (attrs[0], a
# tapejit.frontend.custom.Rule); the passes replace the node by out before code generation
defop(Op.CUSTOM, "custom", -1, lambda types, attrs: types[0], lambda attrs, out, *rest: out,
      lambda g, out, *args: out.attrs[0].vjp(g, out, *args),
      jvp=lambda t, out, *args: out.attrs[0].jvp(t, out, *args))
defop(Op.INPUT, "leaf", 0, _leaf, None)
defop(Op.CONST, "leaf", 0, _leaf, None)
# fmt: on


# ----------------------------------------------------------------------------------------------
# Groups

#: Ops that write an update into a copy of their first operand at a static index set
#: (``acc[items] += upd`` / ``acc[items] = upd``); codegen updates in place when ``acc`` dies.
SCATTER = (Op.SCATTER_ADD, Op.SCATTER)
#: Ops that a fused loop computes by reading their (array) operand at other positions: gathers.
GATHERS = (Op.INDEX, Op.TRANSPOSE, Op.BROADCAST_TO)
#: Ops that only spread a scalar operand over a shape: a fused loop reads the scalar itself.
SCALAR_SPREADS = (Op.BROADCAST_TO, Op.RESHAPE)

# The groups read from the table, set by seal() once every family has registered its blocks.
UNARY: tuple[Op, ...]
BINARY: tuple[Op, ...]
COMPARE: tuple[Op, ...]
LOGICAL: tuple[Op, ...]
SELECT: tuple[Op, ...]
CAST: tuple[Op, ...]
ELEMENTWISE: tuple[Op, ...]
REDUCE: tuple[Op, ...]
SHAPE: tuple[Op, ...]
INDEX: tuple[Op, ...]
LINALG: tuple[Op, ...]
CONTROL: tuple[Op, ...]
#: hand-given rules: inlined by the passes, never lowered
CUSTOM: tuple[Op, ...]
LEAF: tuple[Op, ...]
#: Ops whose bool operands numpy promotes to float (see :func:`elementwise`).
_FLOAT_OPERANDS: frozenset[Op]
#: Ops whose result is piecewise constant in their float arguments: no cotangent flows through.
NONDIFFERENTIABLE: tuple[Op, ...]
_GROUPS = ("UNARY", "BINARY", "COMPARE", "LOGICAL", "SELECT", "CAST", "ELEMENTWISE", "REDUCE",
           "SHAPE", "INDEX", "LINALG", "CONTROL", "CUSTOM", "LEAF", "_FLOAT_OPERANDS",
           "NONDIFFERENTIABLE")  # fmt: skip


def _group(*names: str) -> tuple[Op, ...]:
    return tuple(Op(n) for n, d in OPS.items() if d.group in names)


def seal() -> None:
    """Close the registry once every family has registered (``tapejit.core`` calls it after
    importing them): raise ``ImportError`` naming each member of :class:`Op` without a block,
    put the table in the order of :class:`Op`, and compute the groups."""
    global _sealed, UNARY, BINARY, COMPARE, LOGICAL, SELECT, CAST, ELEMENTWISE, REDUCE, SHAPE
    global INDEX, LINALG, CONTROL, CUSTOM, LEAF, _FLOAT_OPERANDS, NONDIFFERENTIABLE
    missing = [m for m in Op if m not in OPS]
    if missing:
        names = ", ".join(missing)
        raise ImportError(f"tapejit.core.ops.Op members without a defop block: {names}")
    rows = [OPS.pop(str(m)) for m in Op]
    OPS.update((r.name, r) for r in rows)
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
    LINALG = _group("linalg")
    CONTROL = _group("control")
    CUSTOM = _group("custom")
    LEAF = _group("leaf")
    _FLOAT_OPERANDS = frozenset(BINARY + UNARY + COMPARE)
    NONDIFFERENTIABLE = tuple(Op(n) for n, d in OPS.items() if not d.differentiable)
    _sealed = True


def __getattr__(name: str) -> Any:
    """A group read before :func:`seal` names the cause (a family reading it at import)."""
    if name in _GROUPS:
        raise AttributeError(
            f"tapejit.core.ops.{name} is computed once every op family has registered "
            "(tapejit.core seals the registry): read it at call time, not at import"
        )
    raise AttributeError(f"module 'tapejit.core.ops' has no attribute {name!r}")


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
