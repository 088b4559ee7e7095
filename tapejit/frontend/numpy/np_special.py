"""scipy.special's ufuncs beyond the error and gamma functions, as compositions of primitives.

Every function here is built from the IR's primitives (``exp log log1p expm1 erfc gammaln
digamma sqrt ... where``) through the tracer, branch-free: a series, an asymptotic expansion or
a continued fraction runs a fixed number of terms on every element and :func:`_where` picks the
branch, so the fused loop vectorises. Functions whose value is an approximation get their
derivative from an analytic formula (a :class:`~tapejit.frontend.custom.custom_jvp` rule written with the
same primitives, so forward and reverse mode see IR), never from differentiating the
approximation; :func:`_rule` builds them from a table of partial derivatives.

An argument whose derivative is not computed (``gammainc``'s shape ``a``, ``zeta``'s order
``s``) passes through :func:`_no_derivative`: reverse or forward mode raises a
:class:`~tapejit.frontend.tracing.TracingError` naming the user's line, only when that argument is active.

Accuracy: each function's docstring states the bound that ``tests/test_scipy_special_more.py``
checks, as a relative error against mpmath (50 digits) or scipy, over the grid named there.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ...core import ops
from ..custom import custom_jvp
from ...core.ops import Op
from ..tracing import Tracer, TracingError, _build, _where, lift

_SQRT2 = math.sqrt(2.0)
_SQRTPI = math.sqrt(math.pi)
_SQRT2PI = math.sqrt(2.0 * math.pi)
_EULER = 0.57721566490153286061


def _t(x) -> Tracer:
    return lift(x)


def lifted(f: Callable) -> Callable:
    """``f`` called with its arguments as tracers (a ufunc may get numpy arrays next to them)."""
    return lambda *args: f(*(_t(a) for a in args))


# ----------------------------------------------------------------------------------------------
# Derivative rules and guards


def _rule(fun: Callable, *partials: Callable | None) -> Callable:
    """``fun(*xs)`` with the JVP ``sum_i partials[i](out, *xs) * t_i``: a ``custom`` node whose
    rule is IR (forward mode uses it, reverse mode its transpose). Every argument has a
    partial: pass non-differentiable arguments through :func:`_no_derivative` first."""
    f = custom_jvp(fun)

    def jvp(primals, tangents):
        out = fun(*primals)
        tan = None
        for p, t in zip(partials, tangents):
            term = p(out, *primals) * t
            tan = term if tan is None else tan + term
        return out, tan

    f.defjvp(jvp)
    return f


class _NoDerivative:
    """The rule of a ``custom`` node that passes its value on and raises a
    :class:`TracingError` (naming the user's line) when reverse or forward mode reaches it."""

    def __init__(self, what: str, site: str):
        self.message = f"{site}: {what} is not implemented (tapejit computes no derivative there)"

    def __repr__(self) -> str:  # deterministic: the cache key prints it
        return f"no_derivative({self.message.rsplit(': ', 1)[-1]})"

    def vjp(self, g, out, *args):
        raise TracingError(self.message)

    def jvp(self, t, out, *args):
        raise TracingError(self.message)


class _PassOn:
    """The rule of the node joining a guard to a result: the result's cotangent passes on, the
    guard gets a zero (so the guard's own rule runs exactly when its input is active)."""

    def __repr__(self) -> str:
        return "pass_on"

    def vjp(self, g, out, value, guard):
        return g, ops.const(0.0, guard.shape)

    def jvp(self, t, out, value, guard):
        return t[0]


_PASS_ON = _PassOn()


def _no_derivative(result, arg, what: str):
    """``result``, joined to a guard on ``arg``: differentiating through ``arg`` raises a
    TracingError naming the user's line and ``what``; differentiating ``result`` w.r.t. other
    arguments is unaffected."""
    arg = _t(arg)
    rule = _NoDerivative(what, _user_site())
    guard = _build(lambda a: ops.make(Op.CUSTOM, a, attrs=(rule,)), arg)
    return _build(lambda r, gd: ops.make(Op.CUSTOM, r, gd, attrs=(_PASS_ON,)), result, guard)


def _user_site() -> str:
    """``file:line in function`` of the innermost frame outside tapejit, numpy and scipy."""
    import os
    import sys

    # the package's root (this module sits in a subfolder of it)
    here = os.path.dirname(os.path.abspath(sys.modules[__name__.split(".")[0]].__file__)) + os.sep
    frame = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        skip = ("numpy" + os.sep, "scipy" + os.sep, "<frozen")
        if not path.startswith(here) and not any(s in path for s in skip):
            return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}()"
        frame = frame.f_back
    return "<unknown location>"


#: A fixed-length recurrence (Horner's rule, a series, a continued fraction) is written with a
#: step of another form (the same IEEE result: negations are exact) every ``_BREAK`` steps, so
#: that no run of 16 identical steps exists for the re-roll pass (tapejit/passes/reroll/driver.py) to
#: turn into a loop over whole arrays: unrolled, the steps fuse into one vectorised loop.
_BREAK = 12


def _broken(k: int) -> bool:
    return k % _BREAK == _BREAK - 1


def _step_add(acc, term, k: int):
    """acc + term (as acc - (-term) on every ``_BREAK``-th step k)."""
    return acc - (-term) if _broken(k) else acc + term


def _horner(coefs, w):
    """sum coefs[k] w^(n-1-k) (highest power first)."""
    p = coefs[0]
    for k, c in enumerate(coefs[1:]):
        p = c - (-p) * w if _broken(k) else c + p * w
    return p


def _isnan(x):
    return x != x


def _exp_sq(x, sign: float):
    """exp(sign * x^2) with x^2 as an exact double-double (Veltkamp's split): the rounding of
    x^2 would cost |x^2| ulps of relative error (Dekker, Numer. Math. 18, 1971)."""
    c = x * 134217729.0  # 2^27 + 1
    hi = c - (c - x)
    lo = x - hi
    h = x * x
    err = ((hi * hi - h) + 2.0 * hi * lo) + lo * lo  # x^2 = h + err exactly (up to 2^-106)
    return np.exp(sign * h) * (1.0 + sign * err)


# ----------------------------------------------------------------------------------------------
# x log y and the entropies (scipy.special's convex-analysis functions)


def _xlogy_value(x, y):
    safe = _where(x == 0.0, 1.0, y)
    r = _where(x == 0.0, 0.0, x * np.log(safe))
    return _where(_isnan(y), np.nan, r)


def _xlog1py_value(x, y):
    safe = _where(x == 0.0, 0.0, y)
    r = _where(x == 0.0, 0.0, x * np.log1p(safe))
    return _where(_isnan(y), np.nan, r)


_xlogy_rule = _rule(
    _xlogy_value,
    lambda out, x, y: np.log(y),  # at x = 0 too: d/dx (x log y) = log y (as JAX)
    lambda out, x, y: _where(x == 0.0, 0.0, x / y),
)
_xlog1py_rule = _rule(
    _xlog1py_value,
    lambda out, x, y: np.log1p(y),
    lambda out, x, y: _where(x == 0.0, 0.0, x / (1.0 + y)),
)


def _xlogy(x, y):
    """x * log(y), 0 where x == 0 and y is not NaN (scipy.special.xlogy); d/dx = log(y), also
    at x = 0, and d/dy = x / y (0 at x = 0). Within 1 ulp of x * log(y)."""
    return _xlogy_rule(_t(x), _t(y))


def _xlog1py(x, y):
    """x * log1p(y), 0 where x == 0 and y is not NaN; d/dx = log1p(y) at x = 0 too."""
    return _xlog1py_rule(_t(x), _t(y))


def _log_ratio(x, y):
    """log(x / y), from log x - log y where x / y over- or underflows."""
    r = x / y
    ok = (r > 0.0) & (r < np.inf)
    return _where(ok, np.log(_where(ok, r, 1.0)), np.log(x) - np.log(y))


def _entr_value(x):
    r = -x * np.log(_where(x > 0.0, x, 1.0))
    return _where(x > 0.0, r, _where(x == 0.0, 0.0, _where(_isnan(x), np.nan, -np.inf)))


def _rel_entr_value(x, y):
    both = (x > 0.0) & (y > 0.0)
    r = x * _log_ratio(_where(both, x, 1.0), _where(both, y, 1.0))
    r = _where(both, r, _where((x == 0.0) & (y >= 0.0), 0.0, np.inf))
    return _where(_isnan(x) | _isnan(y), np.nan, r)


def _kl_div_value(x, y):
    both = (x > 0.0) & (y > 0.0)
    r = x * _log_ratio(_where(both, x, 1.0), _where(both, y, 1.0)) - x + y
    r = _where(both, r, _where((x == 0.0) & (y >= 0.0), y, np.inf))
    return _where(_isnan(x) | _isnan(y), np.nan, r)


#: entr(x) = -x log x; rel_entr(x, y) = x log(x / y); kl_div(x, y) = x log(x / y) - x + y
#: (scipy's conventions at 0 and outside the domain). Partials: d entr = -log x - 1; d rel_entr
#: = (log(x / y) + 1, -x / y); d kl_div = (log(x / y), 1 - x / y). Within 2 ulp of scipy
#: (which computes the same formulas) where x / y neither over- nor underflows, and of
#: mpmath where it does (scipy gives 0 or inf there).
_entr = _rule(_entr_value, lambda out, x: -np.log(x) - 1.0)
_rel_entr = _rule(
    _rel_entr_value, lambda out, x, y: _log_ratio(x, y) + 1.0, lambda out, x, y: -x / y
)
_kl_div = _rule(_kl_div_value, lambda out, x, y: _log_ratio(x, y), lambda out, x, y: 1.0 - x / y)
