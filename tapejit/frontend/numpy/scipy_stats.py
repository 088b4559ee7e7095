"""scipy.stats distributions on traced values: a table of log-densities and distribution
functions, written with numpy functions and scipy.special's ufuncs (which trace), used in place
of scipy's own ``rv_continuous`` methods when one of their arguments is a traced value.

scipy's generic methods (``rv_continuous.logpdf`` & co.) begin with ``np.asarray`` on every
argument and select the valid entries with ``np.place``/``np.extract``: nothing a traced value
passes through. So while a trace runs (:func:`traced_distributions`, entered with scipy's
array-API mode by :func:`tapejit.frontend.numpy.array_api.scipy_array_api`), the public methods
``logpdf pdf cdf logcdf sf logsf`` of ``rv_continuous`` and ``logpdf pdf`` of
``multivariate_normal`` are wrappers that call scipy's own method unless an argument is a
:class:`~tapejit.frontend.tracing.Tracer`, and then evaluate this module's row for the distribution,
as scipy's generic code does: ``z = (x - loc) / scale``; NaN where the shape parameters fail
scipy's ``_argcheck`` or ``scale <= 0`` or ``x`` is NaN; outside the support (closed for the
densities, open for the distribution functions, as scipy) ``-inf``/0/1; inside, the row's
formula at ``z`` (``- log(scale)`` for ``logpdf``, ``/ scale`` for ``pdf``). The formula is
evaluated at a point inside the support where the entry is outside it, so the derivative there
is 0, not NaN. Frozen distributions (``scipy.stats.norm(loc, scale).logpdf(x)``) call the same
methods.

Each row's formulas are scipy's ``_logpdf``/``_cdf``/... (``scipy/stats/_continuous_distns.py``),
missing ones derived as scipy derives them (``pdf = exp(logpdf)``, ``logcdf = log(cdf)``,
``sf = 1 - cdf``, ``logsf = log(sf)``). A distribution or method not in the table, or one whose
scipy.special function tapejit does not trace, raises a :class:`~tapejit.TracingError` naming
the user's line and what is supported. ``gamma``'s, ``t``'s and ``beta``'s ``cdf sf logcdf
logsf`` trace (``gammainc``/``gammaincc``, ``stdtr``, ``betainc``/``betaincc``, NaN outside
their stated domains) with derivatives in ``x``, ``loc`` and ``scale``; differentiating in a
shape raises, naming the line. The wrappers are installed for the duration of a trace and
restored after it (re-entrant, thread-safe: another thread's numpy calls get scipy's methods).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from ..errors import _PKG_DIR, TracingError
from ..tracer import Tracer, _where, lift

_METHODS = ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf")
_LOG_PI = math.log(math.pi)
_NORM_LOG_C = 0.5 * math.log(2.0 * math.pi)


def _sc(name: str) -> Callable[..., Tracer]:
    """scipy.special's ufunc ``name`` as tapejit traces it, or raise naming it."""
    from . import numpy_api

    fn = numpy_api.UFUNCS.get(name)
    if fn is None:
        raise _Missing(name)
    return fn


class _Missing(Exception):
    """A formula needs a scipy.special function tapejit does not trace."""


@dataclass(frozen=True)
class Dist:
    """One distribution: its shape parameters, support ``[lo, hi]`` (``inside``, a point in it
    where the formulas are evaluated for entries outside), parameter check, and formulas of
    the standardised ``z`` (and the shapes), as scipy's ``_logpdf``, ``_cdf``, ..."""

    shapes: tuple[str, ...] = ()
    lo: float = -np.inf
    hi: float = np.inf
    inside: float = 0.0
    check: Callable[..., Any] | None = None
    formulas: dict[str, Callable[..., Tracer]] = field(default_factory=dict)
    needs: dict[str, str] = field(default_factory=dict)  # method -> scipy.special function


def _t_logpdf(z, df):
    return (_sc("gammaln")(0.5 * df + 0.5) - _sc("gammaln")(0.5 * df)
            - 0.5 * (np.log(df) + _LOG_PI) - (df + 1.0) / 2.0 * np.log1p(z * z / df))  # fmt: skip


def _cauchy_logpdf(z):
    a = abs(z)
    big = _where(a < 1.0, 1.0, a)
    return _where(a < 1.0, -_LOG_PI - np.log1p(a * a),
                  -_LOG_PI - (2.0 * np.log(big) + np.log1p((1.0 / big) ** 2)))  # fmt: skip


def _laplace_cdf(z):
    return _where(z > 0.0, 1.0 - 0.5 * np.exp(-_where(z > 0.0, z, 0.0)),
                  0.5 * np.exp(_where(z > 0.0, 0.0, z)))  # fmt: skip


def _logistic_logpdf(z):
    y = -abs(z)
    return y - 2.0 * np.log1p(np.exp(y))


def _lognorm_logpdf(z, s):
    lz = np.log(z)
    return -(lz * lz) / (2.0 * s * s) - np.log(s * z * math.sqrt(2.0 * math.pi))


#: name -> the distribution's row (scipy's formulas, scipy/stats/_continuous_distns.py)
DISTRIBUTIONS: dict[str, Dist] = {
    "norm":     Dist(formulas={"logpdf": lambda z: -z * z / 2.0 - _NORM_LOG_C,
                               "pdf":    lambda z: np.exp(-z * z / 2.0) / math.sqrt(2.0 * math.pi),
                               "cdf":    lambda z: _sc("ndtr")(z),
                               "logcdf": lambda z: _sc("log_ndtr")(z),
                               "sf":     lambda z: _sc("ndtr")(-z),
                               "logsf":  lambda z: _sc("log_ndtr")(-z)}),
    "t":        Dist(("df",), check=lambda df: df > 0.0,
                     formulas={"logpdf": _t_logpdf,
                               "cdf":    lambda z, df: _sc("stdtr")(df, z),
                               "sf":     lambda z, df: _sc("stdtr")(df, -z)},
                     needs={"cdf": "stdtr", "sf": "stdtr"}),
    "gamma":    Dist(("a",), 0.0, np.inf, 1.0, lambda a: a > 0.0,
                     {"logpdf": lambda z, a: _sc("xlogy")(a - 1.0, z) - z - _sc("gammaln")(a),
                      "cdf":    lambda z, a: _sc("gammainc")(a, z),
                      "sf":     lambda z, a: _sc("gammaincc")(a, z)},
                     {"cdf": "gammainc", "sf": "gammaincc"}),
    "beta":     Dist(("a", "b"), 0.0, 1.0, 0.5, lambda a, b: (a > 0.0) & (b > 0.0),
                     {"logpdf": lambda z, a, b: _sc("xlog1py")(b - 1.0, -z) + _sc("xlogy")(a - 1.0, z) - _sc("betaln")(a, b),
                      "cdf":    lambda z, a, b: _sc("betainc")(a, b, z),
                      "sf":     lambda z, a, b: _sc("betaincc")(a, b, z)},
                     {"cdf": "betainc", "sf": "betaincc"}),
    "expon":    Dist((), 0.0, np.inf, 1.0,
                     formulas={"logpdf": lambda z: -z,
                               "pdf":    lambda z: np.exp(-z),
                               "cdf":    lambda z: -np.expm1(-z),
                               "sf":     lambda z: np.exp(-z),
                               "logsf":  lambda z: -z}),
    "laplace":  Dist(formulas={"logpdf": lambda z: math.log(0.5) - abs(z),
                               "pdf":    lambda z: 0.5 * np.exp(-abs(z)),
                               "cdf":    _laplace_cdf,
                               "sf":     lambda z: _laplace_cdf(-z)}),
    "cauchy":   Dist(formulas={"logpdf": _cauchy_logpdf,
                               "pdf":    lambda z: 1.0 / math.pi / (1.0 + z * z),
                               "cdf":    lambda z: np.arctan2(1.0, -z) / math.pi,
                               "sf":     lambda z: np.arctan2(1.0, z) / math.pi}),
    "lognorm":  Dist(("s",), 0.0, np.inf, 1.0, lambda s: s > 0.0,
                     {"logpdf": lambda z, s: _where(z != 0.0, _lognorm_logpdf(_where(z != 0.0, z, 1.0), s), -np.inf),
                      "cdf":    lambda z, s: _sc("ndtr")(np.log(z) / s),
                      "logcdf": lambda z, s: _sc("log_ndtr")(np.log(z) / s),
                      "sf":     lambda z, s: _sc("ndtr")(-np.log(z) / s),
                      "logsf":  lambda z, s: _sc("log_ndtr")(-np.log(z) / s)}),
    "logistic": Dist(formulas={"logpdf": _logistic_logpdf,
                               "cdf":    lambda z: _sc("expit")(z),
                               "logcdf": lambda z: _sc("log_expit")(z),
                               "sf":     lambda z: _sc("expit")(-z),
                               "logsf":  lambda z: _sc("log_expit")(-z)}),
    "uniform":  Dist((), 0.0, 1.0, 0.5,
                     formulas={"logpdf": lambda z: z * 0.0,
                               "pdf":    lambda z: z * 0.0 + 1.0,
                               "cdf":    lambda z: z,
                               "sf":     lambda z: 1.0 - z}),
}  # fmt: skip

#: how a method missing from a row follows from the others (scipy's generic definitions)
_DERIVED: dict[str, tuple[str, Callable]] = {
    "pdf":    ("logpdf", np.exp),
    "logcdf": ("cdf", np.log),
    "logsf":  ("sf", np.log),
    "sf":     ("cdf", lambda c: 1.0 - c),
}  # fmt: skip


def _formula(dist: Dist, method: str) -> Callable | None:
    fn = dist.formulas.get(method)
    if fn is None and method in _DERIVED:
        base, then = _DERIVED[method]
        inner = _formula(dist, base)
        if inner is not None:
            return lambda *a: then(inner(*a))
    return fn


def _traces(dist: Dist, method: str) -> bool:
    """Whether the method has a formula whose scipy.special functions all trace."""
    from . import numpy_api

    base = _DERIVED[method][0] if method not in dist.formulas and method in _DERIVED else method
    need = dist.needs.get(method) or dist.needs.get(base) or dist.needs.get(_DERIVED.get(base, ("",))[0])
    return _formula(dist, method) is not None and (need is None or need in numpy_api.UFUNCS)


def supported() -> str:
    """The methods that trace now, per distribution."""
    rows = [
        f"{name} ({' '.join(m for m in _METHODS if _traces(d, m))})"
        for name, d in DISTRIBUTIONS.items()
    ]
    return ", ".join(rows + ["multivariate_normal (logpdf pdf)"])


def _site() -> str:
    """``file:line in function`` of the innermost frame outside tapejit, numpy and scipy."""
    frame = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        inside = (
            path.startswith(_PKG_DIR + os.sep)
            or f"{os.sep}numpy{os.sep}" in path
            or f"{os.sep}scipy{os.sep}" in path
            or frame.f_code.co_filename.startswith("<frozen")
        )
        if not inside:
            return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}()"
        frame = frame.f_back
    return "<unknown location>"


def _unsupported(what: str, why: str = "") -> TracingError:
    return TracingError(
        f"{_site()}: scipy.stats.{what} of traced values is not supported by tapejit{why}; "
        f"supported: {supported()} (or write the density with numpy and scipy.special)"
    )


def evaluate(name: str, method: str, x, shapes: tuple, loc, scale) -> Tracer:
    """scipy's ``rv_continuous.<method>(x, *shapes, loc, scale)`` for the row ``name``."""
    dist = DISTRIBUTIONS.get(name)
    fn = None if dist is None else _formula(dist, method)
    if fn is None:
        raise _unsupported(f"{name}.{method}")
    if len(shapes) != len(dist.shapes):
        raise TypeError(f"{name}.{method} takes the shape parameters {dist.shapes}")
    x, loc, scale = lift(x), lift(loc), lift(scale)
    shapes = tuple(lift(s) for s in shapes)
    z = (x - loc) / scale
    valid = scale > 0.0
    if dist.check is not None:
        valid = valid & dist.check(*shapes)
    density = method in ("logpdf", "pdf")
    if density:
        inside = (z >= dist.lo) & (z <= dist.hi)
    else:
        inside = (z > dist.lo) & (z < dist.hi)
    zs = _where(inside, z, dist.inside)
    safe = tuple(_where(valid, s, 1.0) for s in shapes)
    try:
        value = fn(zs, *safe)
    except _Missing as e:
        raise _unsupported(
            f"{name}.{method}", f" (it needs scipy.special.{e}, which tapejit does not trace)"
        ) from None
    if method == "logpdf":
        value = value - np.log(_where(valid, scale, 1.0))
    elif method == "pdf":
        value = value / _where(valid, scale, 1.0)
    above = z >= dist.hi
    outside = {
        "logpdf": -np.inf, "pdf": 0.0,
        "cdf": _where(above, 1.0, 0.0), "logcdf": _where(above, 0.0, -np.inf),
        "sf": _where(above, 0.0, 1.0), "logsf": _where(above, -np.inf, 0.0),
    }[method]  # fmt: skip
    out = _where(inside, value, outside)
    return _where(valid & (z == z), out, np.nan)


def _mvn_logpdf(x, mean=None, cov=1, allow_singular=False) -> Tracer:
    """scipy's ``multivariate_normal.logpdf``: ``-(k log 2 pi + log det C + d^T C^-1 d) / 2``
    with ``d = x - mean`` (by ``slogdet`` and ``solve``); scipy's shapes (``x`` of shape
    ``(..., k)``, or ``(n,)`` of scalars for ``k = 1``; the result squeezed)."""
    x = lift(x)
    if mean is not None:
        mean = lift(mean)
        k = mean.shape[-1] if mean.ndim else 1
    else:
        c = np.shape(cov) if not isinstance(cov, Tracer) else cov.shape
        k = c[0] if len(c) else (x.shape[-1] if x.ndim else 1)
        mean = lift(np.zeros(k))
    mean = np.reshape(mean, (k,))
    cov = lift(cov)
    if cov.ndim == 0:
        cov = cov * np.eye(k)
    elif cov.ndim == 1:
        cov = cov * np.eye(k)
    if cov.shape != (k, k):
        raise TypeError(f"multivariate_normal: cov of shape {cov.shape} for dimension {k}")
    if x.ndim == 0:
        x = np.reshape(x, (1, 1))
    elif x.ndim == 1:
        x = np.reshape(x, (-1, 1) if k == 1 else (1, k))
    d = x - mean
    flat = np.reshape(d, (-1, k))
    sol = np.linalg.solve(cov, flat.T).T
    maha = np.reshape(np.sum(flat * sol, axis=-1), d.shape[:-1])
    logdet = np.linalg.slogdet(cov)[1]
    out = -0.5 * (k * math.log(2.0 * math.pi) + logdet + maha)
    return np.squeeze(out)


# ----------------------------------------------------------------------------------------------
# The wrappers, while a trace runs


def _traced(args: tuple, kwds: dict) -> bool:
    return any(isinstance(a, Tracer) for a in args) or any(
        isinstance(v, Tracer) for v in kwds.values()
    )


def _rv_method(method: str, original: Callable) -> Callable:
    @functools.wraps(original)
    def dispatch(self, x, *args, **kwds):
        if not (isinstance(x, Tracer) or _traced(args, kwds)):
            return original(self, x, *args, **kwds)
        name = getattr(self, "name", type(self).__name__)
        if name not in DISTRIBUTIONS:
            raise _unsupported(f"{name}.{method}")
        shapes, loc, scale = self._parse_args(*args, **kwds)
        return evaluate(name, method, x, shapes, loc, scale)

    return dispatch


def _mvn_method(method: str, original: Callable) -> Callable:
    @functools.wraps(original)
    def dispatch(self, x, *args, **kwds):
        if not (isinstance(x, Tracer) or _traced(args, kwds)):
            return original(self, x, *args, **kwds)
        r = _mvn_logpdf(x, *args, **kwds)
        return r if method == "logpdf" else np.exp(r)

    return dispatch


def _multigammaln(a, d):
    """``log Γ_d(a) = d(d-1)/4 log π + Σ_{j=1..d} log Γ(a - (j-1)/2)`` (Muirhead 1982, as
    scipy computes it) of a traced ``a``; NaN where ``a <= (d-1)/2`` (scipy raises
    ``ValueError`` there, which a traced value cannot decide). ``d`` must be a positive
    integer known when tracing."""
    if isinstance(d, Tracer) or not float(np.asarray(d)).is_integer() or np.ndim(d) or d < 1:
        raise ValueError(f"multigammaln: d should be a positive integer (dimension), got {d!r}")
    d = int(d)
    gammaln = _sc("gammaln")
    res = gammaln(a)
    for j in range(2, d + 1):
        res = res + gammaln(a - (j - 1.0) / 2.0)
    res = res + (d * (d - 1) * 0.25) * _LOG_PI
    return _where(a > 0.5 * (d - 1), res, np.nan)


def _special_function(name: str, original: Callable) -> Callable:
    traced = {"multigammaln": _multigammaln}[name]

    @functools.wraps(original)
    def dispatch(*args, **kwds):
        if not _traced(args, kwds):
            return original(*args, **kwds)
        return traced(*args, **kwds)

    return dispatch


def _targets() -> list[tuple[type, str, Callable]]:
    """(class or module, name, wrapper factory) for each method or function to wrap; empty
    without scipy."""
    infra = sys.modules.get("scipy.stats._distn_infrastructure")
    mvn = sys.modules.get("scipy.stats._multivariate")
    out: list[tuple[type, str, Callable]] = []
    # scipy.special's functions that are not ufuncs (np.asarray first): as scipy.special.NAME
    for module in ("scipy.special", "scipy.special._spfun_stats"):
        mod = sys.modules.get(module)
        if mod is not None:
            out.append((mod, "multigammaln", _special_function))
    if infra is not None and hasattr(infra, "rv_continuous"):
        out += [(infra.rv_continuous, m, _rv_method) for m in _METHODS]
    if mvn is not None and hasattr(mvn, "multivariate_normal_gen"):
        out += [(mvn.multivariate_normal_gen, m, _mvn_method) for m in ("logpdf", "pdf")]
    return [(c, m, w) for c, m, w in out if m in c.__dict__]


class _Installed:
    def __init__(self):
        self.lock = threading.Lock()
        self.depth = 0
        self.saved: list[tuple[type, str, Callable]] = []


_installed = _Installed()


@contextlib.contextmanager
def traced_distributions() -> Iterator[None]:
    """Route scipy.stats' methods on traced values to :data:`DISTRIBUTIONS` while the block
    runs (see the module docstring); restore scipy's methods after, also after an error."""
    with _installed.lock:
        if _installed.depth == 0:
            targets = _targets()
            _installed.saved = [(c, m, c.__dict__[m]) for c, m, _ in targets]
            for c, m, wrap in targets:
                setattr(c, m, wrap(m, c.__dict__[m]))
        _installed.depth += 1
    try:
        yield
    finally:
        with _installed.lock:
            _installed.depth -= 1
            if _installed.depth == 0:
                for c, m, old in _installed.saved:
                    setattr(c, m, old)
                _installed.saved = []
