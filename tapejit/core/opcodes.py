"""The vocabulary of the IR: the primitives' names (:class:`Op`), the commutative ones, and the
two leaves (graph inputs and constants), which no rule builds: :func:`const` and
:func:`input_node` make them directly.

Everything about an op but its name — type rule, numpy reference, derivative rules, group — is
in the registry, :mod:`tapejit.core.ops`, which re-exports these names; code imports them from
there. This module imports only :mod:`tapejit.core.ir`.
"""

from __future__ import annotations

import enum

from .ir import Node, Type


class Op(enum.StrEnum):
    """The primitives' names: ``Op.EXP == "exp"``. Code names an op through this enum, never by
    a string literal (``n.op == Op.CONST``, ``make(Op.ADD, x, y)``; passes match on the group
    tuples of :mod:`tapejit.core.ops` where one fits); tests/test_registry.py rejects a
    comparison of ``.op`` with a string. A ``StrEnum``: a node's ``op`` (the plain string, which
    the printed IR and the cache key show) compares and hashes equal to its member. Each member
    is defined by one :func:`~tapejit.core.ops.defop` block in its family; the import fails if a
    member has no block (:func:`~tapejit.core.ops.seal`) or a block no member.
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
    TRIANGLE = "triangle"
    CHOLESKY = "cholesky"
    TRISOLVE = "trisolve"
    LU = "lu"
    LU_SOLVE = "lu_solve"
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


def const(value: float, shape: tuple[int, ...] = (), dtype: str = "f64") -> Node:
    """A constant filled with ``value`` (a scalar when ``shape == ()``)."""
    value = bool(value) if dtype == "bool" else float(value)
    return Node(_CONST, (), (value,), Type(tuple(shape), dtype))


def input_node(position: int, name: str, t: Type) -> Node:
    """A graph input: a leaf at ``position`` in its graph's inputs, called ``name``."""
    return Node(_INPUT, (), (position, name), t)


def is_const(x: Node, value: float | None = None) -> bool:
    return x.op == Op.CONST and (value is None or x.attrs[0] == value)
