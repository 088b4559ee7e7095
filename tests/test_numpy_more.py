"""numpy/scipy functions added for issue 29 (part 4): the NaN-ignoring statistics
(tapejit/frontend/numpy/np_nan.py), ``ufunc.at`` (np_at.py), ``frexp``/``ldexp`` (np_float.py), ``np.pad``'s
modes (np_pad.py) and scipy.stats' distributions (scipy_stats.py).

Every case is compiled to native code (``tapejit.compile``, ``value_and_grad``/``jvp``); its
value is checked against numpy or scipy themselves, its gradient against float64 central
differences in random directions (and, for the NaN entries of the ``nan*`` functions, against
0, as ``jax.numpy.nan*`` give).
"""

from __future__ import annotations

import numpy as np
import pytest

import tapejit as tj

RNG = np.random.default_rng(29)


def wsum(y):
    """A scalar that depends on every element of ``y`` with a distinct weight."""
    k = np.arange(1.0, 1.0 + np.size(y)).reshape(np.shape(y)) / np.size(y)
    return np.sum(y * np.sin(k + 0.5))


def _check(f, xs, rtol=1e-12, fd_rtol=1e-6, nan_mask=None):
    """Compiled value against ``f`` run by numpy, gradient against central differences."""
    argnums = tuple(range(len(xs)))
    g = tj.compile(f, *xs, argnums=argnums, cache=False)
    value, grads = g.value_and_grad(*xs)
    want = f(*[x.copy() for x in xs])
    np.testing.assert_allclose(value, want, rtol=rtol, atol=1e-13)
    if nan_mask is not None:
        assert np.all(grads[0][nan_mask] == 0.0), grads[0]
    for _ in range(2):
        vs = [RNG.standard_normal(x.shape) for x in xs]
        h = 1e-6
        fp = f(*[x + h * v for x, v in zip(xs, vs)])
        fm = f(*[x - h * v for x, v in zip(xs, vs)])
        fd = (fp - fm) / (2 * h)
        dot = sum(np.vdot(np.where(np.isnan(x), 0.0, gr), v) for gr, v, x in zip(grads, vs, xs))
        assert dot == pytest.approx(fd, rel=fd_rtol, abs=1e-7)


# ----------------------------------------------------------------------------------------------
# nan-statistics: inputs with NaN entries (one row all NaN where the case says so)

NAN = [
    ("nanmean", lambda x: wsum(np.nanmean(x, axis=1)) + np.nanmean(x)),
    ("nanmean_keepdims", lambda x: wsum(np.nanmean(x, axis=0, keepdims=True) * x[1:2])),
    ("nanvar", lambda x: wsum(np.nanvar(x, axis=1)) + np.nanvar(x)),
    ("nanvar_ddof", lambda x: wsum(np.nanvar(x, axis=0, ddof=1, keepdims=True))),
    ("nanstd", lambda x: wsum(np.nanstd(x, axis=1, ddof=1)) + np.nanstd(x)),
    ("nanmax_nanmin_all_nan_row", lambda x: wsum(np.nan_to_num(np.nanmax(x, axis=1), nan=7.0))
        + wsum(np.nan_to_num(np.nanmin(x, axis=1), nan=-3.0)) + np.nansum(x)),
    ("nancumsum", lambda x: wsum(np.nancumsum(x, axis=1)) + wsum(np.nancumsum(x))),
    ("nancumprod", lambda x: wsum(np.nancumprod(x, axis=0)) + np.nanprod(x)),
    ("nanmedian", lambda x: wsum(np.nan_to_num(np.nanmedian(x, axis=1))) + np.nanmedian(x)),
    ("nanmedian_keepdims", lambda x: wsum(np.nanmedian(x, axis=0, keepdims=True) * x[1:2])),
    ("nanpercentile", lambda x: wsum(np.nan_to_num(np.nanpercentile(x, [10.0, 50.0, 95.0], axis=1)))),
    ("nanquantile", lambda x: np.nanquantile(x, 0.3) + wsum(np.nanquantile(x, 0.75, axis=0))),
    ("nanargmax_values", lambda x: x[1, np.nanargmax(x[1])] * x[0, np.nanargmin(x[0])]
        + np.sum(np.nanargmax(x[:3], axis=1) * 1.0) + np.sum(np.argmax(x[2:]) * 1.0)),
]  # fmt: skip


def _nan_input(shape=(4, 5)):
    x = RNG.uniform(-2.0, 2.0, shape)
    x[0, 1] = x[2, 3] = x[2, 0] = np.nan
    x[3, :] = np.nan  # a row with no number
    return x


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name,f", NAN, ids=[c[0] for c in NAN])
def test_nan_statistics_match_numpy_and_are_zero_at_nan(name, f):
    x = _nan_input()
    if name in ("nanmean", "nanvar", "nanstd", "nancumprod", "nanquantile", "nanmedian",
                "nanargmax_values", "nanmedian_keepdims", "nanmean_keepdims", "nanvar_ddof"):
        x[3, :2] = [0.3, -1.1]  # the reductions over everything need one number per slice
    _check(f, [x], nan_mask=np.isnan(x))


def test_nanargmax_all_nan_slice_raises_as_numpy():
    with pytest.raises(tj.TracingError, match="All-NaN slice"):
        tj.grad(lambda x: x[np.nanargmax(x * np.nan)])(np.ones(3))


def test_argmax_is_guarded_so_another_input_recompiles():
    f = lambda x: x[np.argmax(x)] * 2.0  # noqa: E731
    vg = tj.value_and_grad(f)
    for x in (np.array([1.0, 3.0, 2.0]), np.array([5.0, 3.0, 2.0]), np.array([1.0, 3.0, 4.0])):
        v, g = vg(x)
        assert v == 2.0 * x.max() and np.array_equal(g, 2.0 * (x == x.max()))


# ----------------------------------------------------------------------------------------------
# ufunc.at: repeated indices accumulate (a[idx] += v does not)

AT = [
    ("add_repeated", "add", [0, 0, 1, 3, 3, 3], (6,), (5,)),
    ("add_int", "add", 1, (), (5,)),
    ("add_slice", "add", slice(1, 4), (3,), (5,)),
    ("add_2d_pairs", "add", ([0, 1, 1], [2, 2, 2]), (3,), (3, 4)),
    ("add_rows", "add", [2, 0, 2], (3, 4), (3, 4)),
    ("add_mask", "add", np.array([True, False, True, True, False]), (), (5,)),
    ("add_columns", "add", (slice(None), [0, 0]), (3, 2), (3, 4)),
    ("subtract_repeated", "subtract", [4, 4, 0], (3,), (5,)),
    ("multiply_repeated", "multiply", [0, 0, 1, 0], (4,), (5,)),
    ("maximum_repeated", "maximum", [2, 2, 2, 1], (4,), (5,)),
    ("minimum_2d", "minimum", ([0, 0, 2], [1, 1, 3]), (3,), (3, 4)),
    ("add_many", "add", list(RNG.integers(0, 6, 40)), (40,), (6,)),
]


@pytest.mark.parametrize("case", AT, ids=[c[0] for c in AT])
def test_ufunc_at_matches_numpy(case):
    _, name, idx, vshape, ashape = case
    W = RNG.standard_normal(ashape)

    def f(x, v):
        a = np.sin(x)
        getattr(np, name).at(a, idx, v * 1.5)
        return np.sum(a * W)

    _check(f, [RNG.standard_normal(ashape), RNG.standard_normal(vshape)])


def test_unary_ufunc_at_applies_once_per_occurrence():
    def f(x):
        a = x * 1.0
        np.negative.at(a, [0, 0, 1])
        np.exp.at(a, [2, 2])
        return wsum(a)

    _check(f, [RNG.uniform(-1, 1, 3)])


def test_ufunc_at_into_the_argument_or_a_numpy_array_raises():
    def into_arg(x):
        np.add.at(x, [0, 0], 1.0)
        return np.sum(x)

    with pytest.raises(tj.TracingError, match="writing into the function's argument x"):
        tj.grad(into_arg)(np.ones(3))

    def into_numpy(x):
        y = np.zeros(3)
        np.add.at(y, [0, 0], x[:2])
        return np.sum(y)

    with pytest.raises(tj.TracingError, match="into a numpy array"):
        tj.grad(into_numpy)(np.ones(3))


# ----------------------------------------------------------------------------------------------
# frexp and ldexp, exact as numpy's

TINY = np.nextafter(0.0, 1.0)
SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 0.5, 0.75, 3.0, 1e-300, 2.0**-1022, 2.225e-308, TINY,
                    3 * TINY, -5e-320, np.finfo(float).max, -1e308, np.inf, -np.inf, np.nan,
                    1e10, 0.1, 2.0**1023, 1 - 2.0**-53, -7.5e-310])  # fmt: skip


def _same(a, b):
    return np.array_equal(a, b, equal_nan=True) and np.array_equal(np.signbit(a), np.signbit(b))


def _random_doubles(n):
    """Doubles of every magnitude: random bits, NaN/inf included."""
    return RNG.integers(0, 2**63, n, dtype=np.int64).view(np.float64) * RNG.choice([-1.0, 1.0], n)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_frexp_is_exact_with_mantissa_derivative():
    x = np.concatenate([SPECIAL, _random_doubles(200)])
    m, e = np.frexp(x)
    ym, tm = tj.jvp(lambda x: np.frexp(x)[0], (x,), (np.ones_like(x),))
    ye, te = tj.jvp(lambda x: np.frexp(x)[1], (x,), (np.ones_like(x),))
    assert _same(ym, m) and np.array_equal(ye, e)
    ok = np.isfinite(x) & (x != 0)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(tm[ok], 2.0 ** -e[ok].astype(float))
    assert np.all(te == 0.0)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("n", [3, -5, 1023, -1074, 1030, -1080, -1100, 2000, -2500, "array", "traced"])
def test_ldexp_is_exact_with_derivative_two_to_the_n(n):
    x = np.concatenate([SPECIAL, _random_doubles(100)])
    if n == "traced":  # the exponent a traced whole number (frexp's)
        y, t = tj.jvp(lambda x: np.ldexp(np.frexp(x)[0], np.frexp(x)[1] - 3.0), (x,), (x * 0 + 1,))
        assert _same(y, np.ldexp(x, -3))
        return
    if n == "array":
        n = RNG.integers(-2200, 2200, x.size)
    y, t = tj.jvp(lambda x: np.ldexp(x, n), (x,), (np.ones_like(x),))
    assert _same(y, np.ldexp(x, n))
    # d/dx = 2^n, checked where x and the result are normal numbers (for 0 and subnormals the
    # composition's derivative 2^-e 2^(e+n) passes through 2^-e, which overflows; where the
    # result underflows to 0 the clamped exponent gives 0)
    r = abs(np.ldexp(x, n))
    normal = np.isfinite(x) & (abs(x) >= 2.0**-1022) & (r >= 2.0**-1022) & (r < np.inf)
    np.testing.assert_array_equal(t[normal], np.ldexp(1.0, np.broadcast_to(n, x.shape)[normal]))


def test_ldexp_gradient_in_a_loss():
    _check(lambda x: wsum(np.ldexp(np.sin(x), [3, -2, 0])), [RNG.standard_normal(3)])


# ----------------------------------------------------------------------------------------------
# np.pad's modes

PAD = [
    ("edge", {}), ("reflect", {}), ("symmetric", {}), ("wrap", {}),
    ("reflect", {"reflect_type": "odd"}), ("symmetric", {"reflect_type": "odd"}),
    ("linear_ramp", {}), ("linear_ramp", {"end_values": ((1.5, -2.0), (0.5, 3.0))}),
    ("maximum", {}), ("minimum", {"stat_length": 2}),
    ("mean", {"stat_length": ((1, 3), (2, 1))}), ("median", {}),
    ("constant", {"constant_values": ((1.0, 2.0), (3.0, 4.0))}),
]  # fmt: skip
WIDTHS = [((2, 9), (7, 1)), 2, ((0, 1), (2, 0))]


@pytest.mark.parametrize("width", WIDTHS, ids=["wide", "two", "one_sided"])
@pytest.mark.parametrize("mode,kw", PAD, ids=[f"{m}-{'-'.join(k) or 'default'}" for m, k in PAD])
def test_pad_matches_numpy(mode, kw, width):
    shape = (1, 3) if width == 2 else (4, 3)
    x = RNG.standard_normal(shape)
    y, _ = tj.jvp(lambda x: np.pad(x, width, mode, **kw), (x,), (x,))
    if mode == "mean":
        np.testing.assert_allclose(y, np.pad(x, width, mode, **kw), rtol=1e-15)
    else:
        assert np.array_equal(y, np.pad(x, width, mode, **kw))
    _check(lambda x: wsum(np.pad(x, width, mode, **kw) ** 2), [x])


def test_pad_1d_and_3d():
    _check(lambda x: wsum(np.pad(x, (3, 8), "reflect")), [RNG.standard_normal(4)])
    _check(lambda x: wsum(np.pad(x, 1, "wrap")), [RNG.standard_normal((2, 3, 2))])


def test_pad_empty_mode_is_refused():
    with pytest.raises(tj.TracingError, match="mode='empty' is not supported"):
        tj.grad(lambda x: np.sum(np.pad(x, 1, "empty")))(np.ones(3))


# ----------------------------------------------------------------------------------------------
# scipy.stats distributions with traced loc, scale and shapes

st = pytest.importorskip("scipy.stats")

# name, distribution, shape parameters, x range (inside the support), methods
STATS = [
    ("norm", st.norm, (), (-3.0, 3.0), "logpdf pdf cdf logcdf sf logsf"),
    ("t", st.t, (3.5,), (-3.0, 3.0), "logpdf pdf"),
    ("gamma", st.gamma, (2.5,), (0.5, 4.0), "logpdf pdf"),
    ("beta", st.beta, (2.0, 3.0), (0.35, 0.9), "logpdf pdf"),
    ("expon", st.expon, (), (0.5, 4.0), "logpdf pdf cdf logcdf sf logsf"),
    ("laplace", st.laplace, (), (-3.0, 3.0), "logpdf pdf cdf logcdf sf logsf"),
    ("cauchy", st.cauchy, (), (-3.0, 3.0), "logpdf pdf cdf logcdf sf logsf"),
    ("lognorm", st.lognorm, (0.7,), (0.5, 4.0), "logpdf pdf cdf logcdf sf logsf"),
    ("logistic", st.logistic, (), (-3.0, 3.0), "logpdf pdf cdf logcdf sf logsf"),
    ("uniform", st.uniform, (), (0.1, 0.9), "logpdf pdf cdf logcdf sf logsf"),
]
STATS_CASES = [(n, d, s, r, m) for n, d, s, r, ms in STATS for m in ms.split()]


@pytest.mark.parametrize("name,dist,shapes,xr,method", STATS_CASES,
                         ids=[f"{c[0]}.{c[4]}" for c in STATS_CASES])  # fmt: skip
def test_scipy_stats_matches_scipy(name, dist, shapes, xr, method):
    # x, loc, scale and the shape parameters all traced
    def f(x, p):
        loc, scale = p[0], p[1]
        args = tuple(p[2 + i] for i in range(len(shapes)))
        return wsum(getattr(dist, method)(x, *args, loc=loc, scale=scale))

    x = RNG.uniform(*xr, 5)
    p = np.array([0.1, 1.2, *shapes])
    _check(f, [x * 1.2 + 0.1, p], rtol=1e-11)


@pytest.mark.parametrize("method", ["cdf", "logcdf", "sf", "logsf"])
def test_scipy_stats_gamma_distribution_functions(method):
    """gamma.cdf & co. through gammainc/gammaincc (scipy's _cdf/_sf; logcdf = log cdf as
    scipy's generic code): x, loc and scale traced, the shape a a constant (gammainc has no
    derivative in a: differentiating there raises, naming the line)."""
    f = lambda x, p: wsum(getattr(st.gamma, method)(x, 2.5, loc=p[0], scale=p[1]))  # noqa: E731
    x = np.concatenate([RNG.uniform(0.5, 4.0, 5), RNG.uniform(6.0, 12.0, 3)]) * 1.2 + 0.1
    _check(f, [x, np.array([0.1, 1.2])], rtol=1e-12)

    def g(a):
        return np.sum(getattr(st.gamma, method)(np.array([1.0, 3.0]), a))  # MARK

    with pytest.raises(tj.TracingError) as e:
        tj.grad(g)(np.array([2.0, 3.0]))
    assert f"test_numpy_more.py:{g.__code__.co_firstlineno + 1}" in str(e.value)


@pytest.mark.parametrize("name,shapes,xr", [("t", (3.5,), (-4.0, 4.0)), ("t", (0.7,), (-30.0, 3.0)),
                                               ("beta", (2.0, 3.0), (0.05, 0.95)),
                                               ("beta", (0.5, 40.0), (0.001, 0.3))])
@pytest.mark.parametrize("method", ["cdf", "logcdf", "sf", "logsf"])
def test_scipy_stats_t_and_beta_distribution_functions(name, shapes, xr, method):
    """t.cdf & co. through stdtr (scipy's _cdf; _sf = stdtr(df, -x)), beta.cdf & co. through
    betainc/betaincc: x, loc and scale traced, the shapes constants (no derivative there:
    differentiating in them raises, naming the line)."""
    dist = getattr(st, name)
    f = lambda x, p: wsum(getattr(dist, method)(x, *shapes, loc=p[0], scale=p[1]))  # noqa: E731
    x = RNG.uniform(*xr, 8) * 1.2 + 0.1
    _check(f, [x, np.array([0.1, 1.2])], rtol=1e-12)

    def g(a):
        return np.sum(getattr(dist, method)(np.array([0.2, 0.4]), a, *shapes[1:]))  # MARK

    with pytest.raises(tj.TracingError) as e:
        tj.grad(g)(np.array([2.0, 3.0]))
    assert f"test_numpy_more.py:{g.__code__.co_firstlineno + 1}" in str(e.value)


def test_scipy_stats_frozen_and_positional():
    _check(lambda x: np.sum(st.norm(x[0], x[1] ** 2 + 0.5).logpdf(x[2:])), [RNG.standard_normal(5)])
    _check(lambda x: np.sum(st.gamma.logpdf(x + 2.0, 2.0, 0.3, 1.5)), [RNG.random(4)], rtol=1e-11)


def test_scipy_stats_outside_support_and_bad_parameters():
    f = lambda x: st.gamma.logpdf(x, 2.0, scale=x[0] - 1.5)  # noqa: E731
    x = np.array([1.0, -1.0, 3.0])  # scale < 0: NaN everywhere
    y, _ = tj.jvp(f, (x,), (x,))
    assert np.all(np.isnan(y)) and np.all(np.isnan(f(x)))
    g = lambda x: st.gamma.logpdf(x, 2.0) + st.expon.cdf(x)  # noqa: E731
    y, t = tj.jvp(g, (x,), (np.ones(3),))
    np.testing.assert_allclose(y, g(x), rtol=1e-13)
    assert np.all(np.isfinite(t[[0, 2]])) and t[1] == 0.0  # 0 outside the support, not NaN


def test_multivariate_normal_logpdf():
    A = RNG.standard_normal((3, 3))

    def f(p):
        x, mean, L = p[:3], p[3:6], np.reshape(p[6:], (3, 3))
        cov = L @ L.T + np.eye(3)
        return st.multivariate_normal.logpdf(x, mean, cov) + np.sum(
            st.multivariate_normal.pdf(np.stack([x, 2.0 * x]), mean=mean, cov=cov)
        )

    _check(f, [np.concatenate([RNG.standard_normal(6), A.ravel() * 0.5])], rtol=1e-11)


def test_unsupported_distribution_names_the_line_and_what_is_supported():
    def f(x):
        return np.sum(st.weibull_min.logpdf(x, 2.0))  # MARK

    with pytest.raises(tj.TracingError) as e:
        tj.grad(f)(np.ones(3))
    msg = str(e.value)
    assert "test_numpy_more.py" in msg and "weibull_min.logpdf" in msg and "norm (logpdf" in msg
    # and scipy's own methods are back
    assert st.norm.logpdf.__qualname__ == "rv_continuous.logpdf"
    assert st.norm.logpdf.__module__.startswith("scipy")
