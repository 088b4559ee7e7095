"""scipy.special's functions of tapejit/frontend/numpy/np_special.py, np_normal.py and np_gamma.py,
compiled to native code: values against
mpmath (the oracle; scipy is what is matched, not the reference) over wide grids with the bound
each function's docstring states, derivatives against mpmath's numerical differentiation of the
same reference, against float64 central differences in random directions, and forward mode
(``tj.jvp``) against reverse mode.

A case is ``(id, f, reference, grid, bound, diff_grid)``: ``f`` is the scipy.special call on
arrays; ``reference(*mpf) -> mpf`` the mpmath value; ``grid`` the tuple of argument arrays
(broadcast together) where the relative error must stay below ``bound`` (absolute below the
smallest normal); ``diff_grid`` where derivatives are checked (inside the domain, off its edges).
"""

from __future__ import annotations

import numpy as np
import pytest

import tapejit as tj

sc = pytest.importorskip("scipy.special")
mp = pytest.importorskip("mpmath")
mp.mp.dps = 50

EPS = np.finfo(float).eps
RNG = np.random.default_rng(29)


def _grid(*axes):
    """The outer grid of ``axes``, flattened: one array per argument."""
    mesh = np.meshgrid(*[np.asarray(a, float) for a in axes], indexing="ij")
    return tuple(m.ravel() for m in mesh)


def _signed_log(lo, hi, n):
    m = np.logspace(lo, hi, n)
    return np.concatenate([-m[::-1], [0.0], m])


def _ndtri_ref(p):
    if p <= 0 or p >= 1:
        return mp.inf if p >= 1 else -mp.inf
    with mp.workdps(400):  # 2p - 1 keeps p = 1e-300's digits
        return +(mp.sqrt(2) * mp.erfinv(2 * p - 1))


def _rel_entr_ref(x, y):
    if x == 0 and y >= 0:
        return mp.mpf(0)
    if x > 0 and y > 0:
        return x * mp.log(x / y)
    return mp.inf


def _kl_div_ref(x, y):
    if x == 0 and y >= 0:
        return y
    if x > 0 and y > 0:
        return x * mp.log(x / y) - x + y
    return mp.inf


def _entr_ref(x):
    return -x * mp.log(x) if x > 0 else (mp.mpf(0) if x == 0 else -mp.inf)


def _boxcox_ref(x, lm):
    return mp.log(x) if lm == 0 else mp.expm1(lm * mp.log(x)) / lm


def _boxcox1p_ref(x, lm):
    return mp.log1p(x) if lm == 0 else mp.expm1(lm * mp.log1p(x)) / lm


def _dawsn_ref(x):
    """Dawson's integral x 1F1(1; 3/2; -x^2) (DLMF 7.11.7; mpmath's asymptotic series far out)."""
    if mp.isnan(x):
        return mp.nan
    return mp.mpf(0) if mp.isinf(x) else x * mp.hyp1f1(1, 1.5, -x * x)


def _owens_t_ref(h, a):
    """Owen's T as (1/2pi) int_0^atan(a) exp(-h^2 / (2 cos^2 t)) dt (x = tan t in Owen's
    integral: a bounded integrand for every a, inf included), in u = t / atan(a) with breakpoints
    where exp(-h^2 tan^2 t / 2) falls (it peaks at t = 0 with width ~1/h)."""
    s, a, h = mp.sign(a), abs(a), abs(h)
    if a == 0 or mp.isnan(a) or mp.isnan(h):
        return mp.nan if mp.isnan(a) or mp.isnan(h) else mp.mpf(0)
    top = mp.pi / 2 if mp.isinf(a) else mp.atan(a)
    cuts = [min(1, k / (h * top)) for k in (1, 2, 4, 8, 16)] if h > 0 else []
    f = lambda u: mp.exp(-h * h * mp.tan(top * u) ** 2 / 2)  # noqa: E731
    return s * mp.exp(-h * h / 2) * top * mp.quad(f, sorted({mp.mpf(0), mp.mpf(1), *cuts})) / (2 * mp.pi)


POS = np.concatenate([np.logspace(-300, -1, 40), np.linspace(0.1, 5, 40), np.logspace(1, 300, 40)])
X01 = np.concatenate([[0.0], np.logspace(-300, -1, 30), np.linspace(0.1, 0.9, 17),
                      1.0 - np.logspace(-1, -16, 16), [1.0]])  # fmt: skip

def _betaincc_ref(a, b, x):
    """1 - I_x(a, b) as I_1-x(b, a), with 1 - x exact (x >= 1e-300)."""
    with mp.workdps(360):
        return +mp.betainc(b, a, 0, 1 - x, regularized=True)


def _stdtr_ref(df, t):
    if df <= 0 or df > 200:
        return mp.nan
    if mp.isinf(t):
        return mp.mpf(1 if t > 0 else 0)
    x, y = df / (df + t * t), t * t / (df + t * t)  # y exact near t = 0 (mp.diff's steps)
    if x < 0.5:
        half = mp.betainc(df / 2, mp.mpf(0.5), 0, x, regularized=True) / 2
    else:
        half = (1 - mp.betainc(mp.mpf(0.5), df / 2, 0, y, regularized=True)) / 2
    return half if t <= 0 else 1 - half


def _beta_grid(a_axis, b_axis):
    """The outer grid of a, b and X01, plus the switch point x = (a+1)/(a+b+2) and its
    neighbours (the fraction converges slowest there) for each a, b."""
    a, b, x = _grid(a_axis, b_axis, X01)
    ga, gb = _grid(a_axis, b_axis)
    sw = (ga + 1.0) / (ga + gb + 2.0)
    near = [np.minimum(sw * (1.0 + d), 1.0) for d in (-1e-3, -1e-9, 0.0, 1e-9, 1e-3)]
    return (np.concatenate([a, *[ga] * 5]), np.concatenate([b, *[gb] * 5]),
            np.concatenate([x, *near]))  # fmt: skip


#: betainc's domain: a in (0, 100], b in [0.1, 100] (betaincc: a and b exchanged)
BETA_SMALL = [1e-300, 1e-5, 0.05, 0.1, 0.5, 1.0, 2.5, 10.0, 33.3, 99.0, 100.0]
BETA_LARGE = [0.1, 0.11, 0.5, 1.0, 3.0, 10.0, 50.0, 100.0]
BETA_D = _grid([0.5, 2.5, 30.0], [0.7, 3.0, 30.0], [0.05, 0.3, 0.6, 0.95])

BESSEL_X = np.concatenate([_signed_log(-300, 0, 20), np.linspace(-700, 700, 301), [713.9]])
BESSEL_D = np.array([-30.0, -2.0, -1e-3, 0.0, 0.5, 3.0, 17.9, 18.1, 100.0])

CASES = [
    ("xlogy", sc.xlogy, lambda x, y: x * mp.log(y) if x != 0 else mp.mpf(0),
     _grid([0.0, 1e-300, 0.3, 2.0, 1e10, -3.0], [1e-300, 0.5, 1.0, 3.0, 1e300]), 2,
     _grid([0.5, 2.0], [0.5, 3.0])),
    ("xlog1py", sc.xlog1py, lambda x, y: x * mp.log1p(y) if x != 0 else mp.mpf(0),
     _grid([0.0, 0.3, 2.0, -3.0], [-0.9, 1e-20, 0.5, 3.0, 1e300]), 2,
     _grid([0.5, 2.0], [0.5, 3.0])),
    ("entr", sc.entr, _entr_ref, (np.concatenate([[0.0, -1.0], POS]),), 2, (np.array([0.3, 2.0]),)),
    ("rel_entr", sc.rel_entr, _rel_entr_ref,
     _grid([0.0, 1e-300, 0.5, 3.0, 1e300], [0.0, 1e-300, 0.7, 2.0, 1e300]), 4,
     _grid([0.5, 3.0], [0.7, 2.0])),
    ("kl_div", sc.kl_div, _kl_div_ref,
     _grid([0.0, 1e-200, 0.5, 3.0, 1e200], [0.0, 1e-200, 0.7, 2.0, 1e200]), 16,
     _grid([0.5, 3.0], [0.7, 2.0])),
    ("erfcx", sc.erfcx, lambda x: _erfcx_ref(x),
     (np.concatenate([np.linspace(-26.6, 30, 300), _signed_log(-300, 1.4, 40)[40:],
                      np.logspace(1.4, 300, 60)]),), 4,
     (np.array([-3.0, -0.5, 0.0, 0.7, 4.0, 19.0, 21.0, 100.0]),)),
    ("ndtr", sc.ndtr, mp.ncdf, (np.concatenate([np.linspace(-38, 9, 300), _signed_log(-300, 0, 30)]),), 4,
     (np.array([-30.0, -5.0, -1.5, -0.5, 0.0, 1.0, 4.0]),)),
    ("log_ndtr", sc.log_ndtr, lambda x: mp.log(mp.ncdf(x)) if x < 0 else mp.log1p(-mp.ncdf(-x)),
     (np.concatenate([np.linspace(-40, 40, 300), -np.logspace(1, 150, 40)]),), 4,
     (np.array([-1e3, -30.0, -5.0, -1.5, -0.5, 0.0, 1.0, 4.0, 10.0]),)),
    ("ndtri", sc.ndtri, _ndtri_ref, (X01,), 4, (np.array([1e-30, 1e-5, 0.1, 0.5, 0.8, 0.999]),)),
    ("dawsn", sc.dawsn, _dawsn_ref,
     (np.concatenate([np.linspace(-40, 40, 801), _signed_log(-300, 300, 60), [np.inf, -np.inf, np.nan]]),), 4,
     (np.array([-1e3, -5.0, -2.9, -0.5, 0.0, 1e-3, 0.9, 3.1, 7.0, 100.0]),)),
    ("owens_t", sc.owens_t, _owens_t_ref,
     _grid([-2.0, 0.0, 1e-300, 0.1, 0.9, 3.0, 5.03, 9.0, 12.0, 20.0, 30.0, 37.0],
           [-1.5, 0.0, 1e-300, 1e-3, 0.3, 0.88, 0.999, 1.0, 1.001, 1.7, 10.0, 1e5, 1e300, np.inf]),
     1e-14 / EPS, _grid([-1.5, 0.3, 2.0], [-0.7, 0.5, 2.5])),
    ("boxcox", sc.boxcox, _boxcox_ref,
     _grid(np.logspace(-10, 10, 21), [-3.0, -1.0, -1e-5, -1e-12, 0.0, 1e-20, 1e-8, 0.5, 2.0]), 4,
     _grid([0.3, 2.0], [-1.0, -1e-9, 0.0, 0.5])),
    ("boxcox1p", sc.boxcox1p, _boxcox1p_ref,
     _grid(np.concatenate([[-0.9, -1e-3, 1e-20], np.logspace(-10, 10, 11)]),
           [-3.0, -1e-12, 0.0, 1e-8, 0.5, 2.0]), 4,
     _grid([0.3, 2.0], [-1.0, -1e-9, 0.0, 0.5])),
    ("loggamma", sc.loggamma, lambda x: mp.loggamma(x) if x != 0 else mp.inf, (np.concatenate([[0.0], POS[:100]]),), 4,
     (np.array([0.3, 2.5, 40.0]),)),
    ("poch", sc.poch, mp.rf,
     _grid([0.1, 0.5, 1.0, 3.7, 9.5, 10.0, 30.0, 150.0], [-0.05, 0.0, 0.5, 1.0, 3.0, 7.5, 19.0]),
     1e-13 / EPS, _grid([0.5, 3.7, 30.0], [0.5, 3.0])),
    ("zeta", sc.zeta, mp.zeta,
     _grid([1.0001, 1.5, 2.0, 3.3, 10.0, 30.0, 60.0], [1e-3, 0.3, 1.0, 2.5, 40.0, 1e6]), 4,
     _grid([1.5, 3.3], [0.3, 2.5])),
    ("i0", sc.i0, lambda x: mp.besseli(0, x), (BESSEL_X,), 4, (BESSEL_D,)),
    ("i1", sc.i1, lambda x: mp.besseli(1, x), (BESSEL_X,), 4, (BESSEL_D,)),
    ("i0e", sc.i0e, lambda x: mp.besseli(0, x) * mp.exp(-abs(x)),
     (np.concatenate([BESSEL_X, [1e10, -1e100, 1e300]]),), 4, (BESSEL_D,)),
    ("i1e", sc.i1e, lambda x: mp.besseli(1, x) * mp.exp(-abs(x)),
     (np.concatenate([BESSEL_X, [1e10, -1e100, 1e300]]),), 4, (BESSEL_D,)),
    ("gammainc", sc.gammainc, lambda a, x: mp.gammainc(a, 0, x, regularized=True),
     _grid([0.05, 0.5, 1.0, 2.5, 10.0, 33.3, 50.0], np.concatenate([[0.0], np.logspace(-5, 2.3, 25)])),
     1e-13 / EPS, _grid([0.5, 2.5, 10.0], [0.3, 2.0, 15.0])),
    ("gammaincc", sc.gammaincc, lambda a, x: mp.gammainc(a, x, mp.inf, regularized=True),
     _grid([0.05, 0.5, 1.0, 2.5, 10.0, 33.3, 50.0], np.concatenate([[0.0], np.logspace(-5, 2.3, 25)])),
     1e-13 / EPS, _grid([0.5, 2.5, 10.0], [0.3, 2.0, 15.0])),
    ("betainc", sc.betainc, lambda a, b, x: mp.betainc(a, b, 0, x, regularized=True),
     _beta_grid(BETA_SMALL, BETA_LARGE), 1e-13 / EPS, BETA_D),
    ("betaincc", sc.betaincc, _betaincc_ref, _beta_grid(BETA_LARGE, BETA_SMALL), 1e-13 / EPS,
     BETA_D),
    ("stdtr", sc.stdtr, _stdtr_ref,
     _grid([1e-3, 0.1, 0.5, 1.0, 2.5, 10.0, 30.0, 199.0, 200.0],
           np.concatenate([_signed_log(-300, 300, 40), np.linspace(-10, 10, 41), [-np.inf, np.inf]])),
     1e-13 / EPS, _grid([0.5, 3.0, 30.0], [-20.0, -1.5, -1e-3, 0.0, 0.7, 4.0])),
    ("exp1", sc.exp1, lambda x: mp.e1(x) if x >= 0 else mp.nan, (np.concatenate([[0.0, -1.0], np.logspace(-300, 2.85, 200)]),), 8,
     (np.array([1e-3, 0.7, 1.5, 1.6, 4.0, 30.0]),)),
    ("expi", sc.expi, mp.ei, (np.concatenate([[0.0], -np.logspace(-300, 2.85, 100),
                                               np.logspace(-300, -1, 30), np.linspace(0.5, 709, 200)]),), 8,
     (np.array([-30.0, -1.0, -1e-3, 1e-3, 0.7, 1.5, 4.0, 39.0, 41.0, 300.0]),)),
    ("erfinv", sc.erfinv, lambda x: mp.erfinv(x) if abs(x) <= 1 else mp.nan,
     (np.concatenate([[-1.0, 1.0, 1.5], _signed_log(-300, 0, 40)[1:-1], np.linspace(-0.999, 0.999, 101),
                      1.0 - np.logspace(-16, -1, 30)]),), 4, (np.array([-0.9, -1e-3, 0.0, 0.3, 0.99]),)),
]  # fmt: skip


#: the arguments whose derivative is checked (default: all)
DIFF_ARGS = {"zeta": (1,), "gammainc": (1,), "gammaincc": (1,), "betainc": (2,), "betaincc": (2,),
             "stdtr": (1,)}


def _erfcx_ref(x):
    if x > 10:  # exp(x^2) erfc(x) = U(1/2, 1/2, x^2) / sqrt(pi) (DLMF 7.11.4): no huge exp
        return mp.hyperu(0.5, 0.5, x * x) / mp.sqrt(mp.pi)
    return mp.exp(x * x) * mp.erfc(x)


def _reference(ref, args) -> np.ndarray:
    out = []
    for xs in zip(*args):
        try:
            v = ref(*[mp.mpf(float(x)) for x in xs])
        except (ValueError, ZeroDivisionError):
            v = mp.nan
        out.append(float(v) if mp.isfinite(v) or mp.isinf(v) else np.nan)
    return np.array(out)


def _native_value_and_partials(f, args, argnums=None):
    """One native call of the compiled VJP with a cotangent of ones: values and (for an
    elementwise f) the partial derivatives for ``argnums`` (default: all)."""
    argnums = tuple(range(len(args))) if argnums is None else argnums
    vf = tj.compile(f, *args, argnums=argnums, mode="vjp", cache=False)
    out = vf(*args, np.ones_like(args[0]))
    return np.asarray(out[0]), [np.asarray(o) for o in out[1:]]


def _assert_close(got, want, bound, name):
    tiny = np.finfo(float).tiny
    both_inf = np.isinf(got) & np.isinf(want) & (np.sign(got) == np.sign(want))
    both_nan = np.isnan(got) & np.isnan(want)
    with np.errstate(all="ignore"):
        err = np.abs(got - want) / np.maximum(np.abs(want), tiny)
    bad = ~(both_inf | both_nan | (err <= bound * EPS) | (np.abs(got - want) <= tiny))
    if bad.any():
        i = np.flatnonzero(bad)[:8]
        raise AssertionError(f"{name}: {bad.sum()} points off by more than {bound} eps: "
                             f"at {i}: got {got[i]}, want {want[i]}, err/eps {err[i] / EPS}")  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_value_matches_mpmath(case):
    name, f, ref, grid, bound, _ = case
    args = [np.asarray(a, float) for a in np.broadcast_arrays(*grid)]
    got, _ = _native_value_and_partials(f, args, DIFF_ARGS.get(name))
    _assert_close(got, _reference(ref, args), bound, name)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_partials_match_mpmath_derivatives(case):
    name, f, ref, _, _, grid = case
    args = [np.asarray(a, float) for a in np.broadcast_arrays(*grid)]
    _, partials = _native_value_and_partials(f, args, DIFF_ARGS.get(name))
    for k, got in zip(DIFF_ARGS.get(name, range(len(args))), partials):
        want = []
        for xs in zip(*args):
            p = [mp.mpf(float(x)) for x in xs]
            g = lambda t: ref(*(p[:k] + [t] + p[k + 1 :]))  # noqa: E731
            want.append(float(mp.diff(g, p[k])))
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-300, err_msg=f"{name} d/d{k}")


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_gradient_matches_central_differences_and_forward_mode(case):
    name, f, _, _, _, grid = case
    args = [np.asarray(a, float) for a in np.broadcast_arrays(*grid)]
    nums = DIFF_ARGS.get(name, tuple(range(len(args))))
    w = RNG.uniform(0.5, 1.5, args[0].shape)
    fixed, n = dict(enumerate(args)), len(args)
    fk = lambda *xs: f(*[{**fixed, **dict(zip(nums, xs))}[i] for i in range(n)])  # noqa: E731
    loss = lambda *xs: np.sum(fk(*xs) * w)  # noqa: E731
    args = [args[i] for i in nums]
    value, grads = tj.value_and_grad(loss, argnums=tuple(range(len(args))))(*args)
    assert value == pytest.approx(loss(*args), rel=1e-12)
    for _ in range(2):
        vs = [RNG.standard_normal(a.shape) * np.where(a == 0.0, 1.0, np.abs(a)) for a in args]
        h = 1e-7  # a relative step: the grids reach the edges of the domains
        fd = (loss(*[a + h * v for a, v in zip(args, vs)])
              - loss(*[a - h * v for a, v in zip(args, vs)])) / (2 * h)  # fmt: skip
        dot = sum(np.vdot(g, v) for g, v in zip(grads, vs))
        scale = sum(np.vdot(np.abs(g), np.abs(v)) for g, v in zip(grads, vs))
        assert dot == pytest.approx(fd, rel=1e-6, abs=1e-7 * scale), name
        _, tangent = tj.jvp(lambda *xs: fk(*xs) * w, args, vs)
        assert np.sum(tangent) == pytest.approx(dot, rel=1e-12, abs=1e-300), name


@pytest.mark.parametrize("x", [0.0, 1.0, 2.5])
def test_xlogy_derivative_at_zero_is_log_y(x):
    """d/dx xlogy(x, y) = log(y) at x = 0 too (it was 0), and xlog1py's log1p(y); the value
    stays 0 there (JAX's tests check the same)."""
    xs, y = np.array([0.0, x]), np.array([2.0, 0.5])
    value, (gx, gy) = tj.value_and_grad(lambda a, b: np.sum(sc.xlogy(a, b)), argnums=(0, 1))(xs, y)
    assert value == pytest.approx(x * np.log(0.5), abs=1e-300)
    np.testing.assert_allclose(gx, np.log(y), rtol=1e-15)
    np.testing.assert_allclose(gy, [0.0, x / 0.5], rtol=1e-15)
    value, (gx,) = tj.value_and_grad(lambda a: np.sum(sc.xlog1py(a, y)), argnums=(0,))(xs)
    np.testing.assert_allclose(gx, np.log1p(y), rtol=1e-15)
    _, tangent = tj.jvp(lambda a: sc.xlogy(a, y), (xs,), (np.ones(2),))
    np.testing.assert_allclose(tangent, np.log(y), rtol=1e-15)


def test_derivative_with_respect_to_an_unsupported_argument_names_the_line():
    def f(s, q):
        return np.sum(sc.zeta(s, q))  # MARK

    line = f.__code__.co_firstlineno + 1
    q = np.array([0.5, 2.0])
    # w.r.t. q only: fine, -s zeta(s + 1, q)
    _, (gq,) = tj.value_and_grad(f, argnums=(1,))(np.array([2.0, 3.0]), q)
    np.testing.assert_allclose(gq, -np.array([2.0, 3.0]) * sc.zeta([3.0, 4.0], q), rtol=1e-13)
    with pytest.raises(tj.TracingError) as info:
        tj.value_and_grad(f, argnums=(0,))(np.array([2.0, 3.0]), q)
    assert f"test_scipy_special_more.py:{line}" in str(info.value)
    assert "with respect to s" in str(info.value)


@pytest.mark.parametrize("f", [sc.i0, sc.expi, lambda x: sc.gammainc(2.5, x), lambda x: sc.betainc(2.5, 3.0, x / 31.0)],
                         ids=["i0", "expi", "gammainc", "betainc"])  # fmt: skip
def test_series_stay_unrolled_and_fused(f):
    """A 48-term Horner rule or an 80-step fraction must not be re-rolled into a loop over
    whole arrays (it was: 210 MB of workspace and 30x scipy's time for i0 on 1e5 elements)."""
    x = np.linspace(0.1, 30.0, 1000)
    g = tj.compile(lambda a: np.sum(f(a)), x, cache=False)
    assert g.stats["reroll"]["loops"] == 0
    assert g.stats["workspace_bytes"] < 128 * x.nbytes  # re-rolled: ~2000 arrays


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5])
def test_polygamma_traces_through_scipys_own_code(n):
    """scipy.special.polygamma is Python (asarray, then psi or gamma * zeta): while a trace runs
    its asarray passes traced values through. Value against scipy, derivative against the next
    polygamma, and the module's asarray is numpy's again afterwards."""
    import scipy.special as sp
    from scipy.special import polygamma

    x = np.array([0.3, 0.7, 1.5, 3.2, 11.0])
    value, grad = tj.value_and_grad(lambda x: np.sum(polygamma(n, x) * np.arange(1.0, 6.0)))(x)
    assert value == pytest.approx(np.sum(sp.polygamma(n, x) * np.arange(1.0, 6.0)), rel=1e-12)
    np.testing.assert_allclose(grad, sp.polygamma(n + 1, x) * np.arange(1.0, 6.0), rtol=1e-11)
    assert sp._basic.asarray is np.asarray


def test_gammainc_beyond_its_shape_bound_is_nan_not_a_wrong_probability():
    """Shapes above 50 (x = a = 1000 was off by 0.013 with the fixed-length forms, then NaN)
    take Temme's expansion and match scipy (1e-13; tests/test_incomplete_large.py checks them
    against mpmath); above GAMMAINC_A_MAX = 1e10 (a = 1e20 gave -inf once) NaN, never a wrong
    probability."""
    import scipy.special as sp

    f = tj.jit(lambda a, x: (sp.gammainc(a, x), sp.gammaincc(a, x)))
    a = np.array([10.0, 50.0, 50.5, 1000.0, 1e20])
    p, q = f(a, a * 1.1)
    np.testing.assert_allclose(p[:4], sp.gammainc(a[:4], a[:4] * 1.1), rtol=1e-13)
    np.testing.assert_allclose(q[:4], sp.gammaincc(a[:4], a[:4] * 1.1), rtol=1e-13)
    assert np.isnan(p[4]) and np.isnan(q[4])


def test_ndtr_far_in_the_lower_tail_is_zero_not_nan():
    """x = -inf and x = -1e300 gave NaN (x^2 overflowed in the tail's exp(-x^2/2))."""
    import scipy.special as sp

    f = tj.jit(lambda v: sp.ndtr(v))
    x = np.array([-np.inf, -1e300, -1e10, -40.0, 1e300, np.inf, np.nan])
    got = f(x)
    np.testing.assert_array_equal(got[:-1], sp.ndtr(x[:-1]))
    assert np.isnan(got[-1])


def test_betainc_and_stdtr_outside_their_domain_are_nan_and_edges_as_scipy():
    """NaN where the fixed-length fraction or the complement is not accurate (a or b > 100, the
    small parameter of the complement < 0.1, df > 200), never a wrong probability; scipy's
    values at the edges (x = 0, 1, a = 0 or b = 0, t = +-inf) and NaN for invalid arguments."""
    import scipy.special as sp

    f = tj.jit(lambda a, b, x: (sp.betainc(a, b, x), sp.betaincc(a, b, x)))
    a = np.array([101.0, 2.0, np.inf, 2.0, 0.05, 2.0, 1.0, 0.0, 2.0, 0.0, -1.0, 2.0, 2.0, np.nan, 2.0])
    b = np.array([2.0, 1e3, 1.0, 0.05, 2.0, 3.0, 1.0, 2.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0])
    x = np.array([0.5, 0.5, 0.5, 0.5, 0.5, 0.0, 1.0, 0.3, 0.3, 0.5, 0.5, -0.1, 1.1, 0.5, np.nan])
    p, q = f(a, b, x)
    nan_p = np.isnan(p)
    nan_q = np.isnan(q)
    assert nan_p[[0, 1, 2, 3]].all() and not nan_p[4] and nan_q[[0, 1, 2, 4]].all() and not nan_q[3]
    edge = slice(5, 9)  # x = 0, x = 1, a = 0 < x, b = 0 and x < 1
    np.testing.assert_array_equal(p[edge], sp.betainc(a[edge], b[edge], x[edge]))
    np.testing.assert_array_equal(q[edge], sp.betaincc(a[edge], b[edge], x[edge]))
    assert np.isnan(p[9:]).all() and np.isnan(q[9:]).all()
    g = tj.jit(lambda df, t: sp.stdtr(df, t))
    df = np.array([201.0, np.inf, 0.0, -1.0, np.nan, 3.0, 3.0, 3.0, 0.5])
    t = np.array([1.0, 1.0, 1.0, 1.0, 1.0, np.nan, -np.inf, np.inf, -1e300])
    got = g(df, t)
    assert np.isnan(got[:6]).all()
    np.testing.assert_allclose(got[6:8], sp.stdtr(df[6:8], t[6:8]), rtol=1e-13)
    # scipy answers 0 at df = 1/2, t = -1e300: the tail is |t|^-df/2 there, 3.2e-151
    assert got[8] == pytest.approx(float(_stdtr_ref(mp.mpf(0.5), mp.mpf(-1e300))), rel=1e-13)


@pytest.mark.parametrize("which", ["betainc_a", "betaincc_b", "stdtr_df"])
def test_betainc_and_stdtr_derivative_in_a_shape_names_the_line(which):
    import scipy.special as sp

    def f(a):
        if which == "betainc_a":
            return np.sum(sp.betainc(a, 2.0, 0.3))  # MARK
        if which == "betaincc_b":
            return np.sum(sp.betaincc(2.0, a, 0.3))  # MARK
        return np.sum(sp.stdtr(a, 0.3))  # MARK

    with pytest.raises(tj.TracingError) as info:
        tj.grad(f)(np.array([2.0, 3.0]))
    line = f.__code__.co_firstlineno + {"betainc_a": 2, "betaincc_b": 4, "stdtr_df": 5}[which]
    assert f"test_scipy_special_more.py:{line}" in str(info.value)
    assert {"betainc_a": "in a", "betaincc_b": "in b", "stdtr_df": "in df"}[which] in str(info.value)
