"""Arrays that numpy builds out of traced arrays (tapejit/frontend/numpy/np_assemble.py) and numpy's truth
tests on traced values (tapejit/frontend/numpy/np_logic.py).

Each case is plain numpy code, so numpy is its reference: the compiled value is compared with
numpy's on random inputs and the gradient with float64 central differences in random
directions. The graph of ``np.array([x, x])`` & co. must not grow with the size of ``x``.
"""

from __future__ import annotations

import numpy as np
import pytest

import tapejit as tj
from tapejit.frontend import tracing
from tapejit.frontend.numpy.np_assemble import MAX_ELEMENTS

RNG = np.random.default_rng(11)
C6 = RNG.standard_normal(6)  # a captured constant
C32 = RNG.standard_normal((3, 2))


def wsum(y):
    """A scalar depending on every element of ``y`` with a distinct weight. ``y`` may be an
    object array: ``tracing.lift`` turns it into one traced array, as any traced op would."""
    y = tracing.lift(y) if tracing._current else np.asarray(y, dtype=float)
    k = np.arange(1.0, 1.0 + y.size).reshape(y.shape) / y.size
    return np.sum(np.sin(y) * np.cos(k + 0.5))


def check(f, x, directions=3):
    """Compiled value against numpy, compiled gradient against central differences."""
    g = tj.compile(f, x, cache=False)
    value, grad = g.value_and_grad(x)
    assert value == pytest.approx(f(x), rel=1e-12, abs=1e-12)
    for _ in range(directions):
        v = RNG.standard_normal(x.shape)
        fd = (f(x + 1e-6 * v) - f(x - 1e-6 * v)) / 2e-6
        assert np.vdot(grad, v) == pytest.approx(fd, rel=1e-6, abs=1e-8)
    return grad


def snapshot(x):
    y = x.copy()
    a = np.array([y, 2.0 * y])
    y[0] = 100.0  # np.array copied: a keeps the old values
    return wsum(a) + wsum(y)


# -- 1. np.array / np.asarray of traced arrays ----------------------------------------------------
ARRAYS = {
    "pair": lambda x: wsum(np.array([x, x])),
    "nested": lambda x: wsum(np.array([[2 * x, x + 1], [x, x]])),
    "asarray_tuple": lambda x: wsum(np.asarray((x, C32, x * x))),
    "dtype_object": lambda x: wsum(np.array([x, x], dtype=object)),
    "asarray_alone": lambda x: wsum(np.asarray(x)),
    "rows_and_numbers": lambda x: wsum(np.array([x[0], [1.0, 2.5], x[2]])),
    "scalars_and_rows": lambda x: wsum(np.array([[x[0, 0], 3], x[1], [x[2, 1], x[0, 1]]])),
    "transposed_source": lambda x: wsum(np.array([x.T, x.T * 3.0])),
    "object_transpose": lambda x: wsum(np.array([x, np.exp(x)]).T),
    "object_loop": lambda x: wsum(np.array([x, x]) * 2.0 + x),
    "object_slice": lambda x: wsum(np.array([x, 2 * x])[:, 1:]),
    "snapshot": snapshot,
}


@pytest.mark.parametrize("f", ARRAYS.values(), ids=ARRAYS.keys())
def test_arrays_of_traced_arrays(f):
    check(f, RNG.standard_normal((3, 2)))


# -- 2. np.r_ and np.c_ ---------------------------------------------------------------------------
CONCATENATORS = {
    "r_x": lambda x: wsum(np.r_[x]),
    "r_xx": lambda x: wsum(np.r_[x, x]),
    "r_xc": lambda x: wsum(np.r_[x, C6]),
    "r_xcx": lambda x: wsum(np.r_[x, C6, x]),
    "r_xc_range": lambda x: wsum(np.r_[x, C6, 1:10]),
    "r_scalar": lambda x: wsum(np.r_[x, 2.0, x[0]]),
    "c_xcx": lambda x: wsum(np.c_[x, C6, x]),
    "c_x": lambda x: wsum(np.c_[x]),
}


@pytest.mark.parametrize("f", CONCATENATORS.values(), ids=CONCATENATORS.keys())
def test_index_concatenators(f):
    check(f, RNG.standard_normal(6))


# -- the graph grows with the runs, not the elements -----------------------------------------------
SIZED = {
    "pair": lambda x, c: np.sum(np.array([x, x]) * x[0]),
    "nested": lambda x, c: np.sum(np.array([[2 * x, x + 1], [x, c]]) * x[0]),
    "asarray": lambda x, c: np.sum(np.asarray(x) * x[0]),
    "r_": lambda x, c: np.sum(np.r_[x, c, x, 1:10] * x[0]),
    "c_": lambda x, c: np.sum(np.c_[x, c, x] * x[0]),
}


@pytest.mark.parametrize("f", SIZED.values(), ids=SIZED.keys())
def test_graph_size_does_not_depend_on_the_array_size(f):
    counts = []
    for n in (10, 1000):
        c = np.linspace(0.0, 1.0, n)
        g = tracing.trace(lambda x, c=c: f(x, c), [RNG.standard_normal(n)], (0,))
        counts.append(len(g.nodes))
    assert counts[0] == counts[1] < 20, counts


def test_too_large_an_array_names_np_stack():
    x = np.ones(MAX_ELEMENTS + 1)
    with pytest.raises(tj.TracingError, match=r"more than .* elements.*np\.stack"):
        tj.compile(lambda x: wsum(np.array([x, x])), x, cache=False)


def test_ndarray_dot_of_a_traced_array_still_raises():
    m = RNG.standard_normal((2, 6))
    with pytest.raises(tj.TracingError, match=r"W @ x"):
        tj.compile(lambda x: np.sum(m.dot(x)), RNG.standard_normal(6), cache=False)


# -- 3. integer casts used as indices: the example's integers, guarded --------------------------
CASTS = {
    "np.int64": lambda t: np.int64(t),
    "astype": lambda t: t.astype(int),
    "np.array": lambda t: np.array(t, dtype=int),
}


@pytest.mark.parametrize("cast", CASTS.values(), ids=CASTS.keys())
def test_integer_casts_are_guarded_constants_with_zero_derivative(cast):
    def f(w):
        idx = cast(w[:, -1])
        assert idx.dtype.kind == "i"
        return np.sum((w[:, :-1] ** 2)[idx]) + np.sum(w[:, :-1] * cast(w[:, -1:]))

    w = RNG.standard_normal((5, 4))
    w[:, -1] = [3.5, 1.2, 4.9, 0.1, 2.7]  # integer parts 3 1 4 0 2; away from their edges
    grad = tj.compile(f, w, cache=False)
    value, g = grad.value_and_grad(w)
    assert value == pytest.approx(f(w), rel=1e-13)
    for _ in range(3):
        d = RNG.standard_normal(w.shape)
        fd = (f(w + 1e-6 * d) - f(w - 1e-6 * d)) / 2e-6
        assert np.sum(g * d) == pytest.approx(fd, rel=1e-6)
    assert not g[:, -1].any()  # the cast is piecewise constant
    other = w.copy()
    other[:, -1] = [0.5, 0.5, 1.5, 1.5, 4.5]  # other integers: the guard recompiles
    value2, g2 = grad.value_and_grad(other)
    assert value2 == pytest.approx(f(other), rel=1e-13)
    assert len(grad.specialisations) == 2


def test_integer_cast_of_a_non_finite_value_raises():
    with pytest.raises(tj.TracingError, match=r"not finite"):
        tj.compile(lambda w: np.sum(w[np.int64(w * np.inf)]), np.ones(3), cache=False)


# -- 4. isclose, allclose, all, any, iscomplex & co. ------------------------------------------------
def assert_allclose_inside(x):
    assert np.allclose(x, (x * 3.0) / 3.0)
    assert not np.allclose(x, x + 1.0)
    return np.sum(x**2)


def close_mask(x):
    y = x + np.where(np.arange(x.size) % 2 == 0, 1e-9, 1e-3)  # every other one is close
    return np.sum(np.where(np.isclose(x, y), x**2, np.sin(x)))


def close_tolerances(x):
    m = np.isclose(x, 1.0, rtol=0.0, atol=0.5) | np.isclose(2.0, x, rtol=0.25)
    return np.sum(np.where(m, x**3, x))


SPECIAL = np.array([np.inf, -np.inf, np.nan, np.nan, 1.0, np.inf, 0.0])
OTHER = np.array([np.inf, np.inf, np.nan, 1.0, 1.0 + 1e-10, 1e300, -0.0])


def close_special(x):
    a = x * 0.0 + SPECIAL  # traced, with infinities and NaNs
    m1 = np.isclose(a, OTHER)
    m2 = np.isclose(a, OTHER, equal_nan=True)
    return np.sum(np.where(m1, x, 0.0)) + np.sum(np.where(m2, 2.0 * x, 0.0))


def all_any(x):
    m = x.reshape(2, 3) > 0.0
    a = np.where(np.all(m, axis=1), 1.0, 2.0) * np.where(np.any(m, axis=0), 3.0, 4.0)[0]
    return np.sum(a * x[:2]) + np.sum(np.where(np.all(x > -10.0), x, 0.0)) + np.any(x > 10)


def real_predicates(x):
    assert not np.iscomplexobj(x) and np.isrealobj(x)
    assert not np.any(np.iscomplex(x)) and np.all(np.isreal(x))
    return np.sum(np.where(np.isreal(x), x**2, 0.0)) + np.sum(np.where(np.iscomplex(x), x, 0.0))


LOGIC = [assert_allclose_inside, close_mask, close_tolerances, close_special, all_any]


@pytest.mark.parametrize("f", LOGIC + [real_predicates], ids=lambda f: f.__name__)
def test_truth_tests(f):
    check(f, RNG.uniform(0.2, 1.8, 7 if f is close_special else 6))


def test_truth_tests_on_the_values_numpy_sees():
    seen = []

    def f(x):
        seen.append(
            (
                np.isclose(x, x + 1e-9),
                np.all(x > 0.0),
                np.any(x > 1.0, keepdims=True),
                np.iscomplex(x),
                np.isreal(x[0]),
            )
        )
        return np.sum(x)

    tj.compile(f, np.array([0.5, 1.5]), cache=False)
    close, every, some, cplx, real = seen[-1]
    assert close.dtype == np.bool_ and close.shape == (2,) and every.shape == ()
    assert some.shape == (1,)
    assert cplx.dtype == np.bool_ and not np.any(cplx) and real is np.True_


def test_allclose_is_guarded():
    """allclose's bool() records a guard: an input that changes the answer is re-traced."""

    def f(x):
        return np.sum(x**2) if np.allclose(x, 1.0, atol=0.5) else np.sum(x**3)

    x0 = np.array([1.1, 0.9])
    g = tj.compile(f, x0, cache=False)
    np.testing.assert_allclose(g(x0), 2 * x0, rtol=1e-12)
    x1 = np.array([1.1, 3.0])
    np.testing.assert_allclose(g(x1), 3 * x1**2, rtol=1e-12)
    np.testing.assert_allclose(g(x0), 2 * x0, rtol=1e-12)


def test_integer_cast_of_a_traced_scalar():
    value, g = tj.value_and_grad(lambda x: x[0] * np.int64(x[0]) + np.array(x[1], dtype=int))(
        np.array([2.5, 3.7])
    )
    assert value == 2.5 * 2 + 3 and np.array_equal(g, [2.0, 0.0])


def test_a_write_after_np_asarray_raises_where_numpy_would_alias():
    """np.asarray(x) is x itself in numpy: a later write into x changes it; tapejit's object
    array holds the values it had, so the write is refused (np.array copies: allowed)."""

    def aliased(x):
        x = x * 1.0
        a = np.asarray(x)
        x += 1.0  # MARK
        return np.sum(a * np.arange(3.0)) + np.sum(x)

    with pytest.raises(tj.TracingError, match=r"passed to np\.asarray at .*use np\.array\(x\)"):
        tj.compile(aliased, np.ones(3), cache=False)

    def copied(x):
        x = x * 1.0
        a = np.array(x)
        x += 1.0
        return np.sum(a * np.arange(3.0)) + np.sum(x)

    assert tj.value_and_grad(copied)(np.ones(3))[0] == pytest.approx(copied(np.ones(3)))
