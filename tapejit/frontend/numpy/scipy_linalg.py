"""``scipy.linalg``'s factorisations and solves on traced values: ``cholesky``, ``cho_factor``,
``cho_solve``, ``solve_triangular``, ``lu_factor``, ``lu_solve``, ``solve`` (``assume_a``
'gen', 'sym', 'pos' and the triangular kinds), ``inv`` and ``det``, as the primitives of
:mod:`.numpy_factor` (LAPACK's routines, the ones scipy calls, with matrix-level derivatives),
and ``expm`` (Padé scaling and squaring, traced).

scipy's functions convert their arguments with ``np.asarray``, which a traced value refuses, and
they are plain Python functions (no ``__array_function__``), so while a trace runs
(:func:`traced_linalg`) each is replaced by a dispatcher — where the traced code can reach it:
as an attribute of ``scipy.linalg`` (``scipy.linalg.solve(...)``, ``sla.solve(...)``) and as a
name in the traced function's module (``from scipy.linalg import cho_factor``). A dispatcher
calls scipy's own function unless an argument is traced, so other threads are unaffected. A
helper module that imported a name itself is not reached; its call then fails with the error
that names scipy's function (:mod:`tapejit.frontend.trace_state`).

Errors are scipy's: ``LinAlgError`` at the call for a singular matrix (``solve``, ``inv``,
``solve_triangular``, ``lu_solve``) and for a Cholesky factor of a matrix that is not positive
definite; ``ValueError`` for shapes and options scipy refuses.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import threading
from typing import Any, Callable, Iterator

import numpy as np

from ...core.ops import Op
from ..errors import _fail
from ..trace_state import _UNSET
from ..tracer import Tracer, _transpose
from . import numpy_factor as factor
from .np_common import _t
from .numpy_linalg import _batched, _square


def _matrix(a, name: str) -> Tracer:
    a = _t(a)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise _fail(f"scipy.linalg.{name}: expected a square 2-D matrix, got shape {a.shape}")
    return a


def _rhs(a: Tracer, b, name: str) -> Tracer:
    b = _t(b)
    if b.ndim not in (1, 2) or b.shape[0] != a.shape[0]:
        raise _fail(
            f"scipy.linalg.{name}: shapes of a {a.shape} and b {b.shape} are incompatible "
            "(b must be (n,) or (n, k))"
        )
    return b


def _trans(trans, name: str) -> bool:
    if trans in (0, "N", "n"):
        return False
    if trans in (1, 2, "T", "t", "C", "c"):
        return True
    raise _fail(f"scipy.linalg.{name}: trans must be 0, 1, 2, 'N', 'T' or 'C', got {trans!r}")


def _t2(m: Tracer) -> Tracer:
    return _transpose(m, (1, 0))


def cholesky(a, lower=False, overwrite_a=False, check_finite=True):
    """``scipy.linalg.cholesky``: the upper factor U (U^T U = a) by default, L with ``lower``;
    reads the triangle it returns, as LAPACK's ``dpotrf`` does."""
    a = _t(a)
    _square(a, "cholesky")
    read = a if lower else _transpose(a, tuple(range(a.ndim - 2)) + (a.ndim - 1, a.ndim - 2))
    low = _batched(lambda m: factor.cholesky(m, "scipy.linalg.cholesky"), read)
    if lower:
        return low
    return _transpose(low, tuple(range(a.ndim - 2)) + (a.ndim - 1, a.ndim - 2))


def cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    """``scipy.linalg.cho_factor`` -> ``(c, lower)``: c holds the factor in the triangle
    ``lower`` names and zeros in the other (scipy leaves arbitrary values there)."""
    a = _matrix(a, "cho_factor")
    return cholesky(a, lower=lower), bool(lower)


def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    """``scipy.linalg.cho_solve((c, lower), b)``: x with A x = b for A = c c^T (lower) or
    c^T c, by two triangular solves."""
    c, lower = c_and_lower
    c = _matrix(c, "cho_solve")
    b = _rhs(c, b, "cho_solve")
    name = "scipy.linalg.cho_solve"
    y = factor.triangular_solve(c, b, bool(lower), not lower, False, name)
    return factor.triangular_solve(c, y, bool(lower), bool(lower), False, name)


def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False,
                     check_finite=True):  # fmt: skip
    """``scipy.linalg.solve_triangular``: x with op(T) x = b, T the ``lower`` (or upper)
    triangle of ``a``, ones on its diagonal with ``unit_diagonal``."""
    a = _matrix(a, "solve_triangular")
    b = _rhs(a, b, "solve_triangular")
    return factor.triangular_solve(a, b, bool(lower), _trans(trans, "solve_triangular"),
                                   bool(unit_diagonal), "scipy.linalg.solve_triangular")  # fmt: skip


def lu_factor(a, overwrite_a=False, check_finite=True):
    """``scipy.linalg.lu_factor`` -> ``(lu, piv)``: the packed factors of A = P L U and the
    pivots (row i was swapped with row piv[i]; a float array here, scipy's is int32). A
    singular matrix is factored (a zero on U's diagonal), as scipy's (which warns)."""
    a = _matrix(a, "lu_factor")
    f = factor.lu(a)
    n = a.shape[0]
    return f[:n], f[n]


def _factors_of(lu: Any) -> tuple[Tracer, Tracer]:
    """(the matrix, its ``lu`` node) behind the factors ``lu_factor`` returned."""
    node = getattr(lu, "node", None)
    if not (isinstance(lu, Tracer) and node.op == Op.INDEX and node.args[0].op == Op.LU):
        raise _fail(
            "scipy.linalg.lu_solve on traced values needs the (lu, piv) that "
            "scipy.linalg.lu_factor returned for a traced matrix, unchanged; "
            "or write scipy.linalg.solve(a, b)"
        )
    return Tracer(node.args[0].args[0], _UNSET, lu.level), Tracer(node.args[0], _UNSET, lu.level)


def lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True):
    """``scipy.linalg.lu_solve((lu, piv), b)``: x with A x = b (A^T x = b for ``trans``)."""
    lu, _ = lu_and_piv
    a, f = _factors_of(lu)
    b = _rhs(a, b, "lu_solve")
    return factor.lu_solve(a, f, b, _trans(trans, "lu_solve"), "scipy.linalg.lu_solve")


_TRIANGULAR = {"lower triangular": True, "upper triangular": False}


def solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, check_finite=True,
          assume_a=None, transposed=False):  # fmt: skip
    """``scipy.linalg.solve``: by LU for 'gen'/'general', 'sym'/'symmetric' and None (scipy
    then detects the structure: the solution is the same), by Cholesky for 'pos'/'positive
    definite' (the ``lower`` triangle read; ``LinAlgError`` when not positive definite), by one
    triangular solve for 'lower triangular'/'upper triangular'."""
    a = _matrix(a, "solve")
    b = _rhs(a, b, "solve")
    name = "scipy.linalg.solve"
    kind = assume_a
    if kind in _TRIANGULAR:
        return factor.triangular_solve(a, b, _TRIANGULAR[kind], bool(transposed), False, name)
    if kind in ("pos", "positive definite"):
        low = factor.cholesky(a if lower else _t2(a), name)
        y = factor.triangular_solve(low, b, True, False, False, name)
        return factor.triangular_solve(low, y, True, True, False, name)
    if kind not in (None, "gen", "general", "sym", "symmetric", "her", "hermitian"):
        raise _fail(
            f"scipy.linalg.solve: assume_a={kind!r} is not supported by tapejit on traced "
            "values; use 'gen', 'sym', 'pos', 'lower triangular' or 'upper triangular'"
        )
    if kind in ("sym", "symmetric", "her", "hermitian"):  # scipy reads one triangle
        tri = np.tril if lower else np.triu
        part = tri(a)
        a = part + _transpose(tri(a, -1 if lower else 1), (1, 0))
    return factor.lu_solve(a, factor.lu(a), b, bool(transposed), name)


def inv(a, overwrite_a=False, check_finite=True, *, assume_a=None, lower=False):
    """``scipy.linalg.inv``: the inverse by LU (``LinAlgError`` for a singular matrix)."""
    a = _matrix(a, "inv")
    return factor.inv(a, "scipy.linalg.inv")


def det(a, overwrite_a=False, check_finite=True):
    """``scipy.linalg.det``: as ``np.linalg.det`` (0 for a singular matrix, the adjugate as
    its gradient)."""
    return np.linalg.det(_t(a))


#: The degree-13 Padé coefficients b_0..b_13 of exp (Higham 2005, "The scaling and squaring
#: method for the matrix exponential revisited", Table 2.3) and the 1-norm up to which they
#: are accurate to double precision without scaling (theta_13, ibid. Table 2.3).
_PADE13 = (64764752532480000.0, 32382376266240000.0, 7771770303897600.0, 1187353796428800.0,
           129060195264000.0, 10559470521600.0, 670442572800.0, 33522128640.0, 1323241920.0,
           40840800.0, 960960.0, 16380.0, 182.0, 1.0)  # fmt: skip
_THETA13 = 5.371920351148152

#: The most squarings :func:`expm` runs (a 1-norm up to theta_13 2^60).
_MAX_SQUARINGS = 60


def _squarings(a: Tracer) -> int:
    """s = max(0, ceil(log2(||a||_1 / theta_13))), decided at trace time: each comparison is a
    guard, so an input whose norm falls in another power-of-two bucket compiles another
    specialisation (as any value-dependent branch does)."""
    norm = np.max(np.sum(np.abs(a), axis=0))
    for s in range(_MAX_SQUARINGS + 1):
        if not (norm > _THETA13 * 2.0**s):  # noqa: SIM108  (a guard on a traced comparison)
            return s
    raise _fail(
        f"scipy.linalg.expm: the 1-norm of the matrix is above {_THETA13 * 2.0**_MAX_SQUARINGS:.3g}"
        " (or NaN); its exponential overflows"
    )


def _expm2(a: Tracer) -> Tracer:
    n = a.shape[0]
    s = _squarings(a)
    a = a * (0.5**s)
    b = _PADE13
    eye = _t(np.eye(n))
    a2 = a @ a
    a4 = a2 @ a2
    a6 = a2 @ a4
    u = a @ (a6 @ (b[13] * a6 + b[11] * a4 + b[9] * a2) + b[7] * a6 + b[5] * a4 + b[3] * a2
             + b[1] * eye)  # fmt: skip
    v = a6 @ (b[12] * a6 + b[10] * a4 + b[8] * a2) + b[6] * a6 + b[4] * a4 + b[2] * a2 + b[0] * eye
    r = np.linalg.solve(v - u, v + u)
    for _ in range(s):
        r = r @ r
    return r


def expm(A):
    """``scipy.linalg.expm``: the degree-13 Padé approximant with scaling and squaring
    (Higham 2005, alg. 2.3; scipy uses the same approximant above its smaller degrees' norms),
    for a (..., n, n) array. Its derivative is that of the algorithm, which approximates the
    Fréchet derivative to the same accuracy (Al-Mohy & Higham 2009, "Computing the Fréchet
    derivative of the matrix exponential", sec. 6). The number of squarings depends on the
    1-norm: a guard per power of two (see :func:`_squarings`)."""
    a = _t(A)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise _fail(f"scipy.linalg.expm: expected a square matrix (..., n, n), got shape {a.shape}")
    return _batched(_expm2, a)


#: name -> the traced implementation
FUNCTIONS: dict[str, Callable] = {
    "cholesky": cholesky, "cho_factor": cho_factor, "cho_solve": cho_solve,
    "solve_triangular": solve_triangular, "lu_factor": lu_factor, "lu_solve": lu_solve,
    "solve": solve, "inv": inv, "det": det, "expm": expm,
}  # fmt: skip


def _traced(args: tuple, kwds: dict) -> bool:
    def has(x):
        if isinstance(x, Tracer):
            return True
        return isinstance(x, tuple) and any(isinstance(y, Tracer) for y in x)

    return any(has(a) for a in args) or any(has(v) for v in kwds.values())


def _dispatcher(name: str, original: Callable) -> Callable:
    traced = FUNCTIONS[name]

    @functools.wraps(original)
    def dispatch(*args, **kwds):
        if not _traced(args, kwds):
            return original(*args, **kwds)
        return traced(*args, **kwds)

    dispatch.__tapejit_original__ = original
    return dispatch


class _Installed:
    """The dispatchers in place: (namespace, key, scipy's function), restored when the last
    trace (of any thread) ends."""

    def __init__(self):
        self.lock = threading.Lock()
        self.depth = 0
        self.saved: list[tuple[dict, str, Callable]] = []


_installed = _Installed()


def _namespaces(f: Callable | None) -> list[dict]:
    """The ``__dict__`` of ``scipy.linalg`` (if imported) and the globals of ``f``'s module."""
    out = []
    mod = sys.modules.get("scipy.linalg")
    if mod is not None:
        out.append(mod.__dict__)
    if f is not None:
        try:
            g = getattr(inspect.unwrap(f), "__globals__", None)
        except ValueError:  # a wrapper loop
            g = None
        if isinstance(g, dict) and all(g is not o for o in out):
            out.append(g)
    return out


@contextlib.contextmanager
def traced_linalg(f: Callable | None = None) -> Iterator[None]:
    """Route scipy.linalg's functions on traced values to :data:`FUNCTIONS` while the block
    runs (see the module docstring); restore them after, also after an error."""
    mod = sys.modules.get("scipy.linalg")
    with _installed.lock:
        if mod is not None:
            scipy_fns = {}
            for n in FUNCTIONS:
                fn = getattr(mod, n, None)
                fn = getattr(fn, "__tapejit_original__", fn)
                if fn is not None:
                    scipy_fns[id(fn)] = (n, fn)
            for ns in _namespaces(f):
                for key, value in list(ns.items()):
                    hit = scipy_fns.get(id(value))
                    if hit is not None and hit[1] is value:
                        ns[key] = _dispatcher(hit[0], value)
                        _installed.saved.append((ns, key, value))
        _installed.depth += 1
    try:
        yield
    finally:
        with _installed.lock:
            _installed.depth -= 1
            if _installed.depth == 0:
                for ns, key, value in _installed.saved:
                    if getattr(ns.get(key), "__tapejit_original__", None) is value:
                        ns[key] = value
                _installed.saved = []
