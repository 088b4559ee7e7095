"""``np.frexp`` and ``np.ldexp``: a float's binary mantissa and exponent, and scaling by a power
of two, exact for every float64 (subnormals, ±0, ±inf, NaN) as numpy's — compositions of
``log2``, ``floor`` and ``exp2``, which is exact at whole-number arguments (its reduced argument
is then 0: ``codegen/mathlib/hyp.py``).

* ``frexp(x) -> (m, e)``: ``x = m 2^e`` with ``0.5 <= |m| < 1``; ``(x, 0)`` for 0, ±inf and
  NaN. ``e = floor(log2|x|) + 1`` is corrected by one where ``log2``'s rounding put ``|m|``
  outside ``[0.5, 1)``; ``m = x 2^-e`` is scaled in two steps of at most 2^±538, each exact
  (none underflows: ``|m| >= 0.5``). ``dm/dx = 2^-e``; the exponent is piecewise constant, a
  float64 array of whole numbers (traced values are float64 or bool), with no derivative.
* ``ldexp(x, n) = x 2^n`` for integers ``n`` (constants, or traced whole numbers such as
  ``frexp``'s exponent, cut from differentiation by ``trunc``). A constant ``n`` in
  ``[-1074, 1023]`` is one multiplication by the exact power, rounded once, as numpy rounds.
  Otherwise ``x = m 2^e`` and ``m 2^(e+n)`` is built so that only the last step rounds: up in
  two exact steps (overflowing to ±inf where the result does), down in one multiplication by
  ``2^(e+n) >= 2^-1100`` (rounding to a subnormal or ±0 once). ``d/dx = 2^n``; ``n`` gets no
  derivative.
"""

from __future__ import annotations

import numpy as np

from .np_common import _t
from ...core.ops import Op
from ..errors import _fail
from ..tracer import Tracer, _binary, _unary, _where

_TINY, _HUGE = -1100.0, 2100.0  # beyond these, every nonzero finite double gives 0 or inf
_N = 2300.0  # an exponent n beyond ±_N scales every nonzero finite double to 0 or inf


def _exp2(k) -> Tracer:
    return _unary(Op.EXP2, k)


def _clip(k, lo: float, hi: float) -> Tracer:
    return _binary(Op.MINIMUM, _binary(Op.MAXIMUM, k, lo), hi)


def _parts(x: Tracer) -> tuple[Tracer, Tracer, Tracer]:
    """(mask of the finite nonzero x, their signed mantissa m in ±[0.5, 1), exponent e)."""
    ax = abs(x)
    ok = _binary(Op.AND, ax > 0.0, ax < np.inf)
    safe = _where(ok, ax, 1.0)
    e0 = _unary(Op.FLOOR, _unary(Op.LOG2, safe)) + 1.0
    h = _unary(Op.FLOOR, e0 * 0.5)
    m = safe * _exp2(-h) * _exp2(h - e0)  # two exact scalings
    up, down = m >= 1.0, m < 0.5  # log2 rounded across a power of two
    e = e0 + _where(up, 1.0, _where(down, -1.0, 0.0))
    m = m * _where(up, 0.5, _where(down, 2.0, 1.0))
    return ok, _where(x < 0.0, -m, m), e


def _frexp(x, out=None, **kw):
    if out is not None or kw:
        raise _fail("numpy.frexp with out=/where= is not supported by tapejit")
    x = _t(x)
    ok, m, e = _parts(x)
    return _where(ok, m, x), _where(ok, e, 0.0)


def _ldexp(x, n, out=None, **kw):
    if out is not None or kw:
        raise _fail("numpy.ldexp with out=/where= is not supported by tapejit")
    x = _t(x)
    if isinstance(n, Tracer):
        k = _clip(_unary(Op.TRUNC, n), -_N, _N)  # whole; no derivative flows into n
    else:
        nk = np.asarray(n)
        if nk.dtype.kind not in "iub":
            raise _fail(
                f"numpy.ldexp: the exponent must be integers, got {nk.dtype} (as numpy's "
                "ufunc 'ldexp' refuses); use np.int64(n) or x * 2.0 ** n"
            )
        if nk.size == 0 or (nk.min() >= -1074 and nk.max() <= 1023):
            return x * np.ldexp(1.0, nk)  # an exact power of two: one rounding
        k = _t(np.clip(nk, -_N, _N).astype(np.float64))
    ok, m, e = _parts(x)
    s = _clip(k + e, _TINY, _HUGE)
    ku = _where(s > 0.0, s, 0.0)  # each branch's exponent kept finite where it is not taken
    hu = _unary(Op.FLOOR, ku * 0.5)
    up = m * _exp2(hu) * _exp2(ku - hu)  # exact, or ±inf where the result overflows
    down = m * _exp2(_where(s > 0.0, 0.0, s))  # the one rounding (to a subnormal, or 0)
    special = x * _exp2(_clip(k, -1074.0, 1023.0))  # ±0, ±inf, NaN keep their value
    return _where(ok, _where(s > 0.0, up, down), special)
