"""The numpy surface: the ufuncs, functions and index forms that trace, each a composition of IR
primitives built through the tracer (:mod:`tapejit.frontend.tracer`).

Nothing here is a primitive: every function is written with the tracer's operations (elementwise
ops, reductions, basic indexing, reshapes, ``matmul`` and in-place writes, which are ``scatter``
updates), so its derivative comes from the primitives' rules and it is optimised and fused like
hand-written code. Where numpy has a numerically careful formulation the composition follows it
(``logaddexp`` shifts by the maximum; ``expit`` never exponentiates a positive number); each
function's docstring or comment says what it computes.

Integer-array and boolean-mask indexing (``x[idx]``, ``x[mask]``, ``np.take``) gathers one
basic-index read per selected element into a new array, so its adjoint is one scatter-add of
O(1) per index — never a dense one-hot array — and repeated indices accumulate (``np.add.at``).
Index arrays must be known when tracing (constants, not traced values).

``UFUNCS`` maps numpy ufunc names and ``FUNCTIONS`` numpy functions to their implementations:
they are the tables of :mod:`tapejit.frontend.registry`, filled when this module is imported (the
package does that once); the tracer's ``__array_ufunc__`` / ``__array_function__`` look them up,
and anything missing raises a :class:`~tapejit.frontend.errors.TracingError` naming the numpy
function.
"""

from __future__ import annotations

import functools
import math
from typing import Callable

import numpy as np

from ...core import ops
from .. import registry

# ----------------------------------------------------------------------------------------------
# The tables


def _primitive(op: ops.OpDef) -> Callable[..., Tracer]:
    return functools.partial(_unary if op.arity == 1 else _binary, op.name)


from .np_common import _c_order, _float_dtype, _like, _no_out, _t
from .np_math import (
    _beta,
    _betaln,
    _clip,
    _cross,
    _dot,
    _einsum,
    _erfcinv,
    _erfinv,
    _expit,
    _fmax,
    _fmin,
    _gamma,
    _gammasgn,
    _heaviside,
    _hypot,
    _inner,
    _kron,
    _log_expit,
    _logaddexp,
    _logaddexp2,
    _logit,
    _matmul_nd,
    _nan_to_num,
    _norm,
    _outer,
    _remainder,
    _rgamma,
    _round,
    _select,
    _sinc,
    _tensordot,
    _where_fn,
)
from . import np_beta as _spb, np_gamma as _spg, np_normal as _spn, np_special as _sp
from .np_reduce import (
    _average,
    _diff,
    _gradient,
    _logsumexp,
    _max,
    _mean_fn,
    _median,
    _min,
    _partition,
    _prod,
    _quantile,
    _scan,
    _sort,
    _std,
    _sum,
    _trapezoid,
    _var,
)
from .np_shape import (
    _append,
    _atleast,
    _broadcast_to,
    _column_stack,
    _concatenate,
    _diag,
    _diagonal,
    _dstack,
    _expand_dims,
    _fftshift,
    _flip,
    _hstack,
    _linspace,
    _meshgrid,
    _moveaxis,
    _repeat,
    _roll,
    _rollaxis,
    _rot90,
    _split,
    _split_along,
    _squeeze,
    _stack,
    _swapaxes,
    _tile,
    _trace,
    _tril,
    _triu,
    _vstack,
)

from .np_at import ufunc_at
from .np_float import _frexp, _ldexp
from .np_index import _take, _take_along_axis
from ...core.ops import Op
from ..tracer import Tracer, _binary, _copy, _power, _reshape, _transpose, _unary, _where, lift

UFUNCS: dict[str, Callable[..., Tracer]] = registry.UFUNCS  # the tracer looks names up there
UFUNCS.update({
    # the primitives, by the numpy names their block in tapejit/core/ops.py declares
    **{alias: _primitive(op) for op in ops.OPS.values() for alias in op.numpy},
    # compositions
    "power": _power,
    "float_power": _power,
    "matmul": _matmul_nd,
    "positive": lift,
    "square": lambda x: _binary(Op.MUL, x, x),
    "reciprocal": lambda x: _binary(Op.DIV, 1.0, x),
    "logaddexp": _logaddexp,
    "logaddexp2": _logaddexp2,
    "hypot": _hypot,
    "deg2rad": lambda x: _t(x) * (math.pi / 180.0),
    "radians": lambda x: _t(x) * (math.pi / 180.0),
    "rad2deg": lambda x: _t(x) * (180.0 / math.pi),
    "degrees": lambda x: _t(x) * (180.0 / math.pi),
    "fmax": _fmax,
    "fmin": _fmin,
    "heaviside": _heaviside,
    "logical_xor": lambda a, b: _binary(Op.NE, _t(a) != 0.0, _t(b) != 0.0),
    "remainder": _remainder,
    "isnan": lambda x: _t(x) != _t(x),
    "isinf": lambda x: abs(_t(x)) == np.inf,
    "isfinite": lambda x: abs(_t(x)) < np.inf,
    "signbit": lambda x: _t(x) < 0.0,
    "conjugate": lambda x: _t(x),  # real values are their own conjugate
    "ldexp": _ldexp,
    "frexp": _frexp,
    # scipy.special's ufuncs (when scipy is installed; not a dependency)
    "expit": _expit,
    "log_expit": _log_expit,
    "logit": _logit,
    "xlogy": _sp._xlogy,
    "xlog1py": _sp._xlog1py,
    "erf": functools.partial(_unary, Op.ERF),
    "gammaln": functools.partial(_unary, Op.GAMMALN),
    "psi": functools.partial(_unary, Op.DIGAMMA),  # scipy.special.digamma is psi
    "erfc": functools.partial(_unary, Op.ERFC),
    "gamma": _gamma,
    "erfinv": _erfinv,
    "erfcinv": _erfcinv,
    "gammasgn": _gammasgn,
    "rgamma": _rgamma,
    "beta": _beta,
    "betaln": _betaln,
    "entr": _sp.lifted(_sp._entr),
    "rel_entr": _sp.lifted(_sp._rel_entr),
    "kl_div": _sp.lifted(_sp._kl_div),
    "erfcx": _sp.lifted(_spn._erfcx),
    "ndtr": _sp.lifted(_spn._ndtr),
    "log_ndtr": _sp.lifted(_spn._log_ndtr),
    "ndtri": _sp.lifted(_spn._ndtri),
    "dawsn": _sp.lifted(_spn._dawsn),
    "owens_t": _sp.lifted(_spn._owens_t),
    "boxcox": _sp.lifted(_spg._boxcox),
    "boxcox1p": _sp.lifted(_spg._boxcox1p),
    "loggamma": _spg._loggamma,
    "poch": _sp.lifted(_spg._poch),
    "_zeta": _spg._zeta,
    "_riemann_zeta": _spg._riemann_zeta,
    "i0": _sp.lifted(_spg._i0),
    "i0e": _sp.lifted(_spg._i0e),
    "i1": _sp.lifted(_spg._i1),
    "i1e": _sp.lifted(_spg._i1e),
    "gammainc": _spg._gammainc,
    "gammaincc": _spg._gammaincc,
    "betainc": _spb._betainc,
    "betaincc": _spb._betaincc,
    "stdtr": _spb._stdtr,
    "exp1": _sp.lifted(_spg._exp1),
    "expi": _sp.lifted(_spg._expi),
})  # fmt: skip

#: numpy ufunc methods other than ``__call__``: (ufunc name, method) -> implementation
UFUNC_METHODS: dict[tuple[str, str], Callable[..., Tracer]] = registry.UFUNC_METHODS
UFUNC_METHODS.update({
    ("add", "reduce"): lambda a, axis=0, dtype=None, out=None, keepdims=False, **kw: _sum(a, axis, dtype, out, keepdims, **kw),
    ("multiply", "reduce"): lambda a, axis=0, dtype=None, out=None, keepdims=False, **kw: _prod(a, axis, dtype, out, keepdims, **kw),
    ("maximum", "reduce"): lambda a, axis=0, dtype=None, out=None, keepdims=False, **kw: _max(a, axis, out, keepdims, **kw),
    ("minimum", "reduce"): lambda a, axis=0, dtype=None, out=None, keepdims=False, **kw: _min(a, axis, out, keepdims, **kw),
    ("logaddexp", "reduce"): _logsumexp,
    ("add", "accumulate"): lambda a, axis=0, dtype=None, out=None: _no_out(out, "add.accumulate") or _scan(a, axis, Op.ADD, 0.0),
    ("multiply", "accumulate"): lambda a, axis=0, dtype=None, out=None: _no_out(out, "multiply.accumulate") or _scan(a, axis, Op.MUL, 1.0),
})  # fmt: skip

#: ``ufunc.at`` for every numpy ufunc above (tapejit/frontend/numpy/np_at.py)
UFUNC_METHODS.update(
    {(n, "at"): functools.partial(ufunc_at, n, fn) for n, fn in UFUNCS.items() if isinstance(getattr(np, n, None), np.ufunc)}
)  # fmt: skip

FUNCTIONS: dict[Callable, Callable[..., Tracer]] = registry.FUNCTIONS
FUNCTIONS.update({
    np.sum: _sum,
    np.max: _max,
    np.amax: _max,
    np.min: _min,
    np.amin: _min,
    np.mean: _mean_fn,
    np.var: _var,
    np.std: _std,
    np.average: _average,
    np.prod: _prod,
    np.cumsum: lambda a, axis=None, dtype=None, out=None: _no_out(out, "cumsum") or _float_dtype("cumsum", dtype) or _scan(a, axis, Op.ADD, 0.0),
    np.cumprod: lambda a, axis=None, dtype=None, out=None: _no_out(out, "cumprod") or _float_dtype("cumprod", dtype) or _scan(a, axis, Op.MUL, 1.0),
    np.diff: _diff,
    np.dot: _dot,
    np.matmul: _matmul_nd,
    np.vdot: lambda a, b: _dot(_reshape(_t(a), (-1,)), _reshape(_t(b), (-1,))),
    np.tensordot: _tensordot,
    np.outer: _outer,
    np.inner: _inner,
    np.kron: _kron,
    np.cross: _cross,
    np.einsum: _einsum,
    np.trace: _trace,
    np.diagonal: _diagonal,
    np.diag: _diag,
    np.tril: _tril,
    np.triu: _triu,
    np.reshape: lambda a, shape=None, order="C", **kw: _c_order("reshape", order) or _reshape(a, shape if shape is not None else kw["newshape"]),
    np.transpose: lambda a, axes=None: _transpose(a, axes),
    np.where: _where_fn,
    np.select: _select,
    np.ravel: lambda a, order="C": _c_order("ravel", order) or _reshape(a, (-1,)),
    np.shape: lambda a: lift(a).shape,
    np.ndim: lambda a: lift(a).ndim,
    np.size: lambda a, axis=None: lift(a).size if axis is None else lift(a).shape[axis],
    np.linalg.norm: _norm,
    np.clip: _clip,
    np.nan_to_num: _nan_to_num,
    np.round: _round,
    np.fix: lambda x, out=None: _unary(Op.TRUNC, _t(x)),
    np.around: _round,
    np.sinc: _sinc,
    np.copy: lambda a, order="K", subok=False: _copy(a),
    np.zeros_like: lambda a, dtype=None, order="K", subok=True, shape=None, **kw: _like(0.0, a, dtype, shape),
    np.ones_like: lambda a, dtype=None, order="K", subok=True, shape=None, **kw: _like(1.0, a, dtype, shape),
    np.empty_like: lambda a, dtype=None, order="K", subok=True, shape=None, **kw: _like(0.0, a, dtype, shape),
    np.full_like: lambda a, fill_value, dtype=None, order="K", subok=True, shape=None, **kw: _like(fill_value, a, dtype, shape),
    np.concatenate: _concatenate,
    np.stack: _stack,
    np.vstack: _vstack,
    np.hstack: _hstack,
    np.column_stack: _column_stack,
    np.append: _append,
    np.split: lambda a, i, axis=0: _split(a, i, axis, True),
    np.array_split: lambda a, i, axis=0: _split(a, i, axis, False),
    np.expand_dims: _expand_dims,
    np.squeeze: _squeeze,
    np.swapaxes: _swapaxes,
    np.moveaxis: _moveaxis,
    np.broadcast_to: _broadcast_to,
    np.atleast_1d: _atleast(1),
    np.atleast_2d: _atleast(2),
    np.atleast_3d: _atleast(3),
    np.meshgrid: _meshgrid,
    np.trapezoid: _trapezoid,
    np.flip: _flip,
    np.flipud: lambda m: _flip(m, 0),
    np.fliplr: lambda m: _flip(m, 1),
    np.roll: _roll,
    np.tile: _tile,
    np.repeat: _repeat,
    np.take: _take,
    np.sort: _sort,
    np.rot90: _rot90,
    np.vsplit: _split_along(0),
    np.hsplit: _split_along(1),
    np.dsplit: _split_along(2),
    np.dstack: _dstack,
    np.rollaxis: _rollaxis,
    np.quantile: _quantile,
    np.percentile: lambda a, q, axis=None, out=None, **kw: _quantile(a, np.asarray(q) / 100.0, axis, out, **kw),
    np.ptp: lambda a, axis=None, out=None, keepdims=False: _max(a, axis, out, keepdims) - _min(a, axis, None, keepdims),
    np.real: lambda val: _t(val),
    np.imag: lambda val: _t(val) * 0.0,
    np.conjugate: lambda x: _t(x),
    np.partition: _partition,
    np.median: _median,
    np.take_along_axis: _take_along_axis,
    np.gradient: _gradient,
    np.linspace: _linspace,
    np.angle: lambda z, deg=False: _where((_t(z) < 0.0) | (1.0 / _t(z) < 0.0), 180.0 if deg else math.pi, _where(_t(z) == _t(z), 0.0, np.nan)),  # real z (and -0.0)
    np.real_if_close: lambda a, tol=100: _t(a),  # real values are returned as they are
    np.fft.fftshift: lambda x, axes=None: _fftshift(x, axes),
    np.fft.ifftshift: lambda x, axes=None: _fftshift(x, axes, inverse=True),
})  # fmt: skip

from .numpy_linalg import FUNCTIONS as _LINALG  # noqa: E402  (it builds on the functions above)

from .np_logic import FUNCTIONS as _LOGIC  # noqa: E402
from .np_nan import FUNCTIONS as _NAN  # noqa: E402
from .np_pad import FUNCTIONS as _PAD  # noqa: E402
from .numpy_qr import FUNCTIONS as _QR  # noqa: E402

FUNCTIONS.update(_LINALG)
FUNCTIONS.update(_LOGIC)
FUNCTIONS.update(_NAN)
FUNCTIONS.update(_PAD)
FUNCTIONS.update(_QR)


def _function_name(fn: Callable) -> str:
    module = getattr(fn, "__module__", "") or ""
    prefix = "np.linalg." if "linalg" in module else "np.fft." if "fft" in module else "np."
    return prefix + fn.__name__


def supported_markdown() -> str:
    """The README's list of the numpy names that trace (a test keeps README in sync; regenerate
    with ``python -c "import tapejit.frontend.numpy.numpy_api as m; print(m.supported_markdown())"``)."""
    ufuncs = sorted(n for n in UFUNCS if isinstance(getattr(np, n, None), np.ufunc))
    # scipy.special.zeta(s) and zeta(s, q) call the ufuncs _riemann_zeta and _zeta
    special = sorted({n.removeprefix("_riemann").lstrip("_") for n in UFUNCS if n not in ufuncs})
    functions = sorted({_function_name(f) for f in FUNCTIONS})
    methods = sorted(
        n
        for n in dir(Tracer)
        if not n.startswith("_")
        and hasattr(np.ndarray, n)
        and n not in ("T", "shape", "ndim", "size", "dtype", "device", "tolist")
    )
    return "\n".join(
        [
            "- numpy ufuncs: " + ", ".join(f"`{n}`" for n in ufuncs),
            "- numpy functions: " + ", ".join(f"`{n}`" for n in functions),
            "- ndarray methods: "
            + ", ".join(f"`.{n}`" for n in methods)
            + "; attributes `.T .shape .ndim .size .dtype`",
            "- scipy.special (when scipy is installed): " + ", ".join(f"`{n}`" for n in special),
        ]
    )
