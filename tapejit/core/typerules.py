"""The primitives' type rules — ``type_rule(arg_types, attrs) -> Type``, the shape and dtype of a
result, raising on bad operands — and the shape arithmetic they share with the passes and
codegen: static indexing (:func:`index_shape`, :func:`index_affine`, contiguous views),
``matmul``'s dimensions and the size limits and workspaces of the LAPACK-backed ``eigh`` and
``svd``.

Each op family (``tapejit/core/ops_*.py``) passes its rule to :func:`tapejit.core.ops.defop`; the
public helpers are re-exported by :mod:`tapejit.core.ops`. Imports only ``ir`` and ``opcodes``.
"""

from __future__ import annotations

import math

import numpy as np

from .ir import Node, Type
from .opcodes import Op


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


#: Largest matrix the factorisation ops (``cholesky``, ``trisolve``, ``lu``, ``lu_solve``)
#: take: codegen keeps ``dgetrf``'s pivots (n int32) on the stack.
FACTOR_MAX = 8192


def _square_matrix(t, what: str) -> int:
    if t.ndim != 2 or t.shape[0] != t.shape[1] or t.shape[0] == 0:
        raise ValueError(f"{what} needs a non-empty square matrix, got shape {t.shape}")
    if t.shape[0] > FACTOR_MAX:
        raise ValueError(f"{what} takes matrices up to {FACTOR_MAX} x {FACTOR_MAX}, got {t.shape}")
    return t.shape[0]


def _triangle(types, attrs):
    """``triangle(x)``, attrs (lower, diagonal scale): the lower (j <= i) or upper triangle of a
    square matrix, its diagonal times the scale, zeros elsewhere."""
    (t,) = types
    _need(types, "f64", "triangle")
    _square_matrix(t, "triangle")
    if len(attrs) != 2 or attrs[0] not in (True, False) or not isinstance(attrs[1], float):
        raise ValueError(f"triangle needs attrs (lower: bool, diagonal scale: float), got {attrs}")
    return t


def _cholesky(types, attrs):
    (t,) = types
    _need(types, "f64", "cholesky")
    _square_matrix(t, "cholesky")
    if attrs:
        raise ValueError(f"cholesky takes no attributes, got {attrs}")
    return t


def _rhs(t, b, what: str) -> None:
    if b.ndim != 2 or b.shape[0] != t.shape[0]:
        raise ValueError(f"{what}: the right-hand side must be ({t.shape[0]}, k), got {b.shape}")


def _trisolve(types, attrs):
    """``trisolve(t, b)``, attrs (lower, trans, unit): x with op(T) x = b, T the lower or upper
    triangle of ``t`` (its diagonal taken as ones when unit), op the transpose when trans."""
    t, b = types
    _need(types, "f64", "trisolve")
    _square_matrix(t, "trisolve")
    _rhs(t, b, "trisolve")
    if len(attrs) != 3 or any(a not in (True, False) for a in attrs):
        raise ValueError(f"trisolve needs attrs (lower, trans, unit) as bools, got {attrs}")
    return b


def _lu(types, attrs):
    """``lu(a)``: (n + 2, n): rows 0..n-1 LAPACK's ``dgetrf`` factors of a^T (see
    :mod:`tapejit.core.ops_factor`), row n its pivots, row n + 1 the permutation."""
    (t,) = types
    _need(types, "f64", "lu")
    n = _square_matrix(t, "lu")
    if attrs:
        raise ValueError(f"lu takes no attributes, got {attrs}")
    return Type((n + 2, n), "f64")


def _lu_solve(types, attrs):
    """``lu_solve(a, lu, b)``, attrs (trans,): x with a x = b (a^T x = b when trans), from
    ``lu = lu(a)``."""
    a, f, b = types
    _need(types, "f64", "lu_solve")
    n = _square_matrix(a, "lu_solve")
    if f.shape != (n + 2, n):
        raise ValueError(f"lu_solve needs the lu of its matrix, shape {(n + 2, n)}, got {f.shape}")
    _rhs(a, b, "lu_solve")
    if len(attrs) != 1 or attrs[0] not in (True, False):
        raise ValueError(f"lu_solve needs attrs (trans,) as a bool, got {attrs}")
    return b


def _leaf(types, attrs):
    raise ValueError("leaf nodes are built directly")


def _np_items(items: tuple) -> tuple:
    return tuple(
        slice(i[0], None if i[1] < 0 else i[1], i[2]) if isinstance(i, tuple) else i for i in items
    )
