"""numpy's products (``dot``, ``matmul`` with batches, ``tensordot``, ``einsum``, ``outer``,
``inner``, ``kron``, ``cross``, norms) and elementwise functions written as compositions of
primitives, following numpy's numerically careful formulations where it has one (``logaddexp``
shifts by the maximum; ``expit`` never exponentiates a positive number; ``mod`` is C's ``fmod``
moved to the divisor's sign)."""

from __future__ import annotations

import math

import numpy as np

from .np_common import _axis, _float_dtype, _no_kwargs, _no_out, _reduce, _t
from .np_shape import _broadcast_to, _diagonal, _moveaxis, _squeeze, _stack
from ...core.ops import Op
from ..errors import _fail
from ..tracer import _binary, _matmul, _reshape, _transpose, _unary, _where, lift


def _dot(a, b, out=None):
    _no_out(out, "dot")
    a, b = _t(a), _t(b)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    if a.ndim <= 2 and b.ndim <= 2:
        return _matmul(a, b)
    # N-d: a sum product over the last axis of a and the second-to-last of b
    return _tensordot(a, b, ([a.ndim - 1], [b.ndim - 2 if b.ndim > 1 else 0]))


def _matmul_nd(a, b, out=None, **kw):
    _no_out(out, "matmul")
    _float_dtype("matmul", kw.pop("dtype", None))
    _no_kwargs("matmul", kw)
    a, b = _t(a), _t(b)
    if a.ndim == 0 or b.ndim == 0:
        raise _fail("matmul: Input operand does not have enough dimensions")
    if a.ndim <= 2 and b.ndim <= 2:
        return _matmul(a, b)
    a2 = _reshape(a, (1, *a.shape)) if a.ndim == 1 else a
    b2 = _reshape(b, (*b.shape, 1)) if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    a2 = _broadcast_to(a2, batch + a2.shape[-2:])
    b2 = _broadcast_to(b2, batch + b2.shape[-2:])
    rows = [_matmul(a2[idx], b2[idx]) for idx in np.ndindex(*batch)]
    r = _reshape(_stack(rows), batch + rows[0].shape)
    if a.ndim == 1:
        r = _reshape(r, r.shape[:-2] + r.shape[-1:])
    if b.ndim == 1:
        r = _reshape(r, r.shape[:-1])
    return r


def _tensordot(a, b, axes=2):
    a, b = _t(a), _t(b)
    if np.ndim(axes) == 0:
        k = int(axes)
        ax_a, ax_b = list(range(a.ndim - k, a.ndim)), list(range(k))
    else:
        ax_a, ax_b = axes
        ax_a = [ax_a] if np.ndim(ax_a) == 0 else list(ax_a)
        ax_b = [ax_b] if np.ndim(ax_b) == 0 else list(ax_b)
    ax_a = [_axis(k, a.ndim) for k in ax_a]
    ax_b = [_axis(k, b.ndim) for k in ax_b]
    if [a.shape[i] for i in ax_a] != [b.shape[i] for i in ax_b]:
        raise _fail("shape-mismatch for sum in tensordot")
    free_a = [i for i in range(a.ndim) if i not in ax_a]
    free_b = [i for i in range(b.ndim) if i not in ax_b]
    k = math.prod(a.shape[i] for i in ax_a)
    am = _reshape(_transpose(a, free_a + ax_a), (math.prod(a.shape[i] for i in free_a), k))
    bm = _reshape(_transpose(b, ax_b + free_b), (k, math.prod(b.shape[i] for i in free_b)))
    r = _matmul(am, bm)
    return _reshape(r, tuple(a.shape[i] for i in free_a) + tuple(b.shape[i] for i in free_b))


def _outer(a, b, out=None):
    _no_out(out, "outer")
    a, b = _reshape(_t(a), (-1, 1)), _reshape(_t(b), (1, -1))
    return a * b


def _inner(a, b):
    a, b = _t(a), _t(b)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    return _tensordot(a, b, ([a.ndim - 1], [b.ndim - 1]))


def _kron(a, b):
    a, b = _t(a), _t(b)
    nd = max(a.ndim, b.ndim)
    a = _reshape(a, (1,) * (nd - a.ndim) + a.shape)
    b = _reshape(b, (1,) * (nd - b.ndim) + b.shape)
    ea = _reshape(a, tuple(x for d in a.shape for x in (d, 1)))
    eb = _reshape(b, tuple(x for d in b.shape for x in (1, d)))
    return _reshape(ea * eb, tuple(p * q for p, q in zip(a.shape, b.shape)))


def _cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    a, b = _t(a), _t(b)
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = _moveaxis(a, axisa, -1), _moveaxis(b, axisb, -1)
    if a.shape[-1] not in (2, 3) or b.shape[-1] not in (2, 3):
        raise _fail("incompatible dimensions for cross product (dimension must be 2 or 3)")
    comp = lambda x, i: x[..., i] if i < x.shape[-1] else 0.0  # noqa: E731
    a0, a1, a2 = (comp(a, i) for i in range(3))
    b0, b1, b2 = (comp(b, i) for i in range(3))
    if a.shape[-1] == 2 and b.shape[-1] == 2:
        return a0 * b1 - a1 * b0
    c = _stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], -1)
    return _moveaxis(c, -1, axisc)


def _check_dots(term: str) -> None:
    if term.count("...") > 1 or "." in term.replace("...", "", 1):
        raise _fail(f"numpy.einsum: subscripts '{term}' have a '.' that is not one '...'")


def _ellipsis_dims(term: str, ndim: int) -> int:
    """How many dimensions the ``...`` of an einsum ``term`` stands for (0 without one)."""
    _check_dots(term)
    if "..." not in term:
        return 0
    if ndim < len(term) - 3:
        raise _fail(f"numpy.einsum: operand has {ndim} dimensions, subscripts '{term}'")
    return ndim - (len(term) - 3)


def _sublist(sub) -> str:
    """An einsum sublist (ints 0-51 and ``...``) as subscripts: 0-25 are A-Z, 26-51 a-z
    (numpy's labels, in the same order, so an implicit output sorts the same)."""
    out = []
    for s in sub:
        if s is Ellipsis:
            out.append("...")
        elif isinstance(s, (int, np.integer)) and 0 <= s < 52:
            out.append(chr(ord("A") + s) if s < 26 else chr(ord("a") + s - 26))
        else:
            raise _fail(f"numpy.einsum: subscript {s!r} in a sublist is not an integer in [0, 52)")
    return "".join(out)


def _from_sublists(args):
    """``einsum(op0, sublist0, op1, sublist1, ..., [sublistout])`` as (subscripts, operands)."""
    res = "->" + _sublist(args[-1]) if len(args) % 2 else ""  # an odd count ends with the output's
    args = args[: len(args) - len(args) % 2]
    return ",".join(_sublist(s) for s in args[1::2]) + res, tuple(args[0::2])


def _einsum(subscripts, *operands, out=None, optimize=False, **kw):
    """``np.einsum`` for explicit and implicit subscripts: the broadcast product of the
    operands summed over the labels that do not appear in the output. ``...`` stands for the
    dimensions a term's letters leave, as in numpy: those of all operands broadcast against
    each other (right-aligned), and an implicit output starts with them."""
    _no_out(out, "einsum")
    _float_dtype("einsum", kw.pop("dtype", None))
    _no_kwargs("einsum", kw)
    if not isinstance(subscripts, str):
        subscripts, operands = _from_sublists((subscripts,) + operands)
    ops_ = [_t(o) for o in operands]
    spec = subscripts.replace(" ", "")
    ins, _, res = spec.partition("->")
    terms = ins.split(",")
    if len(terms) != len(ops_):
        raise _fail("numpy.einsum: more operands than subscripts or the other way round")
    # each ellipsis becomes labels of its own (private-use characters: no subscript letter),
    # the last ones for an operand with fewer broadcast dimensions than another
    ell = [_ellipsis_dims(t, o.ndim) for t, o in zip(terms, ops_)]
    batch = "".join(chr(0xE000 + k) for k in range(max(ell, default=0)))
    terms = [t.replace("...", batch[len(batch) - e :]) for t, e in zip(terms, ell)]
    if "->" not in spec:
        counts = {c: ins.count(c) for c in ins if c.isalpha()}
        res = batch + "".join(sorted(c for c, k in counts.items() if k == 1))
    elif "..." in res:
        _check_dots(res)
        res = res.replace("...", batch)
    elif batch:
        raise _fail(
            "numpy.einsum: output has more dimensions than subscripts given in einstein sum, "
            "but no '...' ellipsis provided to broadcast the extra dimensions"
        )
    letters = sorted({c for t in terms for c in t})
    sizes: dict[str, int] = {}  # numpy's rule: a label's sizes agree, or are 1 (broadcast)
    for t, o in zip(terms, ops_):
        if len(t) != o.ndim:
            raise _fail(f"numpy.einsum: operand has {o.ndim} dimensions, subscripts '{t}'")
        for c, d in zip(t, o.shape):
            if sizes.get(c, 1) == 1:
                sizes[c] = d
            elif d not in (1, sizes[c]):
                if c in batch:
                    raise _fail("numpy.einsum: operands could not be broadcast together")
                raise _fail(f"numpy.einsum: size of label '{c}' does not match")
    # repeated letters within one term: take the diagonal first
    ops2, terms2 = [], []
    for t, o in zip(terms, ops_):
        while len(set(t)) != len(t):
            c = next(c for c in t if t.count(c) > 1)
            i, j = t.index(c), t.index(c, t.index(c) + 1)
            o = _moveaxis(_diagonal(o, 0, i, j), -1, i)
            t = t[:j] + t[j + 1 :]
        ops2.append(o)
        terms2.append(t)
    # the broadcast product over all letters, then a sum over those not in the result
    full = letters
    prod = None
    for t, o in zip(terms2, ops2):
        perm = sorted(range(len(t)), key=lambda k: full.index(t[k]))
        o = _transpose(o, perm) if o.ndim > 1 else o
        dims = {t[k]: d for k, d in zip(perm, o.shape)}
        o = _reshape(o, tuple(dims.get(c, 1) for c in full))
        prod = o if prod is None else prod * o
    summed = tuple(k for k, c in enumerate(full) if c not in res)
    r = _reduce(Op.REDUCE_SUM, prod, summed) if summed else prod
    kept = [c for c in full if c in res]
    return _transpose(r, [kept.index(c) for c in res]) if r.ndim > 1 else r


_LN2 = math.log(2.0)


def _logaddexp(a, b):
    """max + log1p(exp(-|a - b|)); equal infinities give that infinity, as numpy's (inf - inf
    would be NaN: the difference is taken as 0 where a == b, which changes no other value)."""
    a, b = lift(a), lift(b)
    m = _binary(Op.MAXIMUM, a, b)
    d = _where(a == b, 0.0, a - b)
    return m + np.log1p(np.exp(-abs(d)))


def _logaddexp2(a, b):
    return _logaddexp(_t(a) * _LN2, _t(b) * _LN2) * (1.0 / _LN2)


def _hypot(a, b):
    """sqrt(a^2 + b^2) scaled by max(|a|, |b|) so neither overflows nor underflows; inf if
    either is infinite (even with a NaN), else NaN if either is NaN, as numpy's."""
    a, b = abs(_t(a)), abs(_t(b))
    m = _binary(Op.MAXIMUM, a, b)  # NaN if either is
    finite = m < np.inf  # False for inf and NaN
    s = _where(finite & (m > 0.0), m, 1.0)
    q = _binary(Op.MINIMUM, a, b) / s
    r = _where(m == 0.0, 0.0, s * np.sqrt(1.0 + q * q))
    r = _where(finite, r, m)  # NaN stays NaN ...
    return _where((a == np.inf) | (b == np.inf), np.inf, r)  # ... unless one is infinite


def _sinc(x):
    """sin(pi x) / (pi x), 1 at 0 (numpy's definition)."""
    x = _t(x)
    y = math.pi * _where(x == 0.0, 1e-20, x)
    return _where(x == 0.0, 1.0, np.sin(y) / y)


def _fmax(a, b):
    a, b = _t(a), _t(b)
    return _where(b != b, a, _where(a != a, b, _binary(Op.MAXIMUM, a, b)))


def _fmin(a, b):
    a, b = _t(a), _t(b)
    return _where(b != b, a, _where(a != a, b, _binary(Op.MINIMUM, a, b)))


def _nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    x = _t(x)
    big = np.finfo(np.float64).max
    x = _where(x != x, nan, x)
    x = _where(x == np.inf, big if posinf is None else posinf, x)
    return _where(x == -np.inf, -big if neginf is None else neginf, x)


def _heaviside(x1, x2):
    x1 = _t(x1)
    return _where(x1 > 0.0, 1.0, _where(x1 == 0.0, x2, _where(x1 < 0.0, 0.0, x1)))


def _clip(a, a_min=None, a_max=None, out=None, **kw):
    _no_out(out, "clip")
    a_min = kw.pop("min", a_min)
    a_max = kw.pop("max", a_max)
    _no_kwargs("clip", kw)
    r = lift(a)
    if a_min is not None:
        r = _binary(Op.MAXIMUM, r, a_min)
    if a_max is not None:
        r = _binary(Op.MINIMUM, r, a_max)
    return r


def _norm(x, ord=None, axis=None, keepdims=False):
    """``np.linalg.norm`` for vector norms (ord None/2, 1, inf, -inf, p) and the matrix norms
    'fro', 1, inf, -1, -inf, 'nuc' excluded (it needs singular values)."""
    x = _t(x)
    if axis is None and (x.ndim == 1 or ord is None):
        if ord is None or (x.ndim == 1 and ord == 2):
            return np.sqrt(_reduce(Op.REDUCE_SUM, x * x, None, keepdims))
        axis = None
    if axis is not None and np.ndim(axis) == 0:
        axis = (axis,)
    vec = (axis is None and x.ndim == 1) or (axis is not None and len(axis) == 1)
    if vec:
        ax = None if axis is None else axis[0]
        a = abs(x)
        if ord in (None, 2):
            return np.sqrt(_reduce(Op.REDUCE_SUM, x * x, ax, keepdims))
        if ord == np.inf:
            return _reduce(Op.REDUCE_MAX, a, ax, keepdims)
        if ord == -np.inf:
            return -_reduce(Op.REDUCE_MAX, -a, ax, keepdims)
        if ord == 1:
            return _reduce(Op.REDUCE_SUM, a, ax, keepdims)
        if ord == 0:
            return _reduce(Op.REDUCE_SUM, (x != 0.0).astype(float), ax, keepdims)
        p = float(ord)
        return _reduce(Op.REDUCE_SUM, a**p, ax, keepdims) ** (1.0 / p)
    rows, cols = (0, 1) if axis is None else (_axis(axis[0], x.ndim), _axis(axis[1], x.ndim))
    if ord in (None, "fro"):
        return np.sqrt(_reduce(Op.REDUCE_SUM, x * x, (rows, cols), keepdims))
    a = abs(x)
    if ord in (1, -1):
        s = _reduce(Op.REDUCE_SUM, a, rows, True)
        r = _reduce(Op.REDUCE_MAX, s if ord == 1 else -s, cols, True) * (1 if ord == 1 else -1)
    elif ord in (np.inf, -np.inf):
        s = _reduce(Op.REDUCE_SUM, a, cols, True)
        r = _reduce(Op.REDUCE_MAX, s if ord > 0 else -s, rows, True) * (1 if ord > 0 else -1)
    else:
        raise _fail(f"numpy.linalg.norm with ord={ord!r} for matrices is not supported")
    return r if keepdims else _squeeze(r, (rows, cols))


def _expit(x):
    """The logistic sigmoid 1 / (1 + exp(-x)), exponentiating only non-positive numbers."""
    x = _t(x)
    e = np.exp(-abs(x))
    return _where(x >= 0.0, 1.0 / (1.0 + e), e / (1.0 + e))


def _log_expit(x):
    """log(expit(x)) = -log1p(exp(-x)), stable for both signs."""
    x = _t(x)
    return _binary(Op.MINIMUM, x, 0.0) - np.log1p(np.exp(-abs(x)))


def _logit(p):
    p = _t(p)
    return np.log(p / (1.0 - p))


def _remainder(a, b):
    """numpy's ``mod``/``remainder``/``%``: ``fmod`` moved to the sign of ``b`` (numpy's own
    ``npy_divmod``), exact like it."""
    a, b = _t(a), _t(b)
    m = _binary(Op.FMOD, a, b)
    wrong_side = (m != 0.0) & ((b < 0.0) != (m < 0.0))
    return _where(wrong_side, m + b, m)


def _round(a, decimals=0, out=None):
    """numpy's ``round``: half to even, by scaling with 10^decimals as numpy does."""
    _no_out(out, "round")
    a = _t(a)
    if decimals == 0:
        return _unary(Op.RINT, a)
    scale = 10.0**decimals
    if decimals > 0:
        return _unary(Op.RINT, a * scale) / scale
    return _unary(Op.RINT, a / (1.0 / scale)) * (1.0 / scale)


def _where_fn(c, x=None, y=None):
    if x is None or y is None:
        raise _fail("numpy.where with one argument (indices) is not supported")
    return _where(c, x, y)


def _select(condlist, choicelist, default=0):
    if len(condlist) != len(choicelist):
        raise _fail("list of cases must be same length as list of conditions")
    r = lift(default)
    for c, v in reversed(list(zip(condlist, choicelist))):
        r = _where(c, v, r)
    return r


# the gamma family of scipy.special, from gammaln (log |Gamma|) and the sign of Gamma


def _gammasgn(x):
    """The sign of Gamma(x) (scipy.special.gammasgn): 1 for x > 0 and +0, -1 for -0, alternating
    on the negative intervals (-1 on (-1, 0)), NaN at the poles x = -1, -2, ... and -inf."""
    x = _t(x)
    neg = 1.0 - 2.0 * (np.ceil(-x) % 2.0)
    zero = _where(1.0 / x < 0.0, -1.0, 1.0)  # the sign of a zero
    return _where(x > 0.0, 1.0, _where(x == 0.0, zero, _where(x == np.floor(x), np.nan, neg)))


def _gamma(x):
    x = _t(x)
    return _gammasgn(x) * np.exp(_unary(Op.GAMMALN, x))


def _rgamma(x):
    """1 / Gamma(x), 0 at the poles (scipy.special.rgamma)."""
    x = _t(x)
    pole = (x <= 0.0) & (x == np.floor(x))
    return _where(pole, 0.0, _gammasgn(x) * np.exp(-_unary(Op.GAMMALN, x)))


def _betaln(a, b):
    """log |B(a, b)| = gammaln(a) + gammaln(b) - gammaln(a + b) (scipy.special.betaln; for
    moderate arguments: no asymptotic form for a, b >> 1)."""
    a, b = _t(a), _t(b)
    return _unary(Op.GAMMALN, a) + _unary(Op.GAMMALN, b) - _unary(Op.GAMMALN, a + b)


def _beta(a, b):
    a, b = _t(a), _t(b)
    return _gammasgn(a) * _gammasgn(b) * _gammasgn(a + b) * np.exp(_betaln(a, b))


# inverse error functions: Giles' approximation ("Approximating the erfinv function", GPU
# Computing Gems, 2011; single precision) refined by Newton steps on erfc, so the value is
# accurate to double precision and the derivative of the last step is 1 / erf'(y)

_ERFINV_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                   -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)  # fmt: skip
_ERFINV_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)  # fmt: skip


def _horner(coefs, w):
    p = coefs[0]
    for c in coefs[1:]:
        p = c + p * w
    return p


def _erfinv_central(t):
    """erfinv(t) for |t| <= 0.5: Newton steps on erf (t need not be small to be exact)."""
    w = -np.log1p(-t * t)
    y = _horner(_ERFINV_CENTRAL, w - 2.5) * t
    for _ in range(3):
        y = y + (t - _unary(Op.ERF, y)) / (1.1283791670955126 * np.exp(-y * y))
    return y


def _erfcinv_tail(q):
    """erfcinv(q) for 0 < q <= 0.5: Newton steps on log(erfc), which converge from either side
    where erfc is tiny."""
    w = -np.log(q * (2.0 - q))  # -log((1 - x)(1 + x)) for x = 1 - q, without cancellation
    central = _horner(_ERFINV_CENTRAL, w - 2.5)
    tail = _horner(_ERFINV_TAIL, np.sqrt(_where(w < 5.0, 5.0, w)) - 3.0)
    y = _where(w < 5.0, central, tail) * (1.0 - q)
    # far out (q < 1e-7) the asymptotic erfc(y) ~ exp(-y^2) / (y sqrt(pi)) is the better start
    big = -np.log(_where(w < 16.0, 1e-7, q))
    z = np.sqrt(big)
    for _ in range(3):
        z = np.sqrt(big - np.log(1.7724538509055159 * z))
    y = _where(w < 16.0, y, z)
    for _ in range(5):
        e = _unary(Op.ERFC, y)
        y = y + (np.log(e) - np.log(q)) * e / (1.1283791670955126 * np.exp(-y * y))
    return y


def _erfcinv(x):
    """scipy.special.erfcinv on [0, 2] (inf at 0, -inf at 2, NaN outside): erfinv(1 - x) in
    the middle (1 - x is exact there), the tails from erfcinv(2 - x) = -erfcinv(x)."""
    x = _t(x)
    mid = (x >= 0.5) & (x <= 1.5)
    y = _erfinv_central(_where(mid, 1.0 - x, 0.0))
    lo = x < 0.5
    q = _where(lo, x, 2.0 - x)
    tail = _erfcinv_tail(_where((q > 0.0) & (q <= 0.5), q, 0.5))
    y = _where(mid, y, _where(lo, tail, -tail))
    y = _where(x == 0.0, np.inf, _where(x == 2.0, -np.inf, y))
    return _where((x < 0.0) | (x > 2.0) | (x != x), np.nan, y)


def _erfinv(x):
    """scipy.special.erfinv on [-1, 1]: Newton on erf for |x| <= 0.5, else erfcinv(1 - |x|)
    (1 - |x| is exact there) with the sign of x."""
    x = _t(x)
    a = abs(x)
    small = a <= 0.5
    y = _erfinv_central(_where(small, x, 0.0))
    q = 1.0 - a
    tail = _erfcinv_tail(_where(small | (q <= 0.0), 0.5, q))
    tail = _where(a == 1.0, np.inf, tail)
    y = _where(small, y, _where(x < 0.0, -tail, tail))
    return _where((a > 1.0) | (x != x), np.nan, y)
