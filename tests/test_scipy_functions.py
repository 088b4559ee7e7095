"""scipy functions written in Python on traced values (through the array API namespace of
:mod:`tapejit.frontend.numpy.array_api` and scipy's array-API mode, which tracing turns on and off): the
compiled gradient against float64 central differences in random directions, the value against
scipy itself; the functions that do not trace yet raise a ``TracingError`` naming the user's
line; scipy's switch is restored after every trace, also a failed one."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
from scipy.special import digamma as sc_digamma
import pytest

import tapejit as tj
from tapejit.frontend.numpy import array_api

sp = pytest.importorskip("scipy.special")
st = pytest.importorskip("scipy.stats")

RNG = np.random.default_rng(11)
THIS_FILE = "test_scipy_functions.py"
W = RNG.random((3, 4))  # weights that make a loss of an array-valued function

# name, loss, example shape
CASES = [
    ("softmax", lambda x: np.sum(sp.softmax(x) * W), (3, 4)),
    ("softmax_axis0", lambda x: np.sum(sp.softmax(x, axis=0) * W), (3, 4)),
    ("softmax_axis1", lambda x: np.sum(sp.softmax(x, axis=1) * W), (3, 4)),
    ("softmax_1d", lambda x: sp.softmax(x)[1] * 3.0, (5,)),
    pytest.param("logsumexp", lambda x: sp.logsumexp(x), (3, 4)),
    pytest.param(
        "logsumexp_axis0", lambda x: np.sum(sp.logsumexp(x, axis=0) * W[0]), (3, 4),
    ),
    pytest.param(
        "logsumexp_axis1_keepdims",
        lambda x: np.sum(sp.logsumexp(x, axis=1, keepdims=True) * W[:, :1]), (3, 4),
    ),
    pytest.param(
        "logsumexp_b", lambda x: np.sum(sp.logsumexp(x, b=0.5 * x + 1.0, axis=0)), (3, 4),
    ),
    pytest.param(
        "logsumexp_return_sign", lambda x: sp.logsumexp(x, b=x - 1.0, return_sign=True)[0],
        (3, 4),
    ),
    pytest.param(
        "log_softmax", lambda x: np.sum(sp.log_softmax(x, axis=1) * W), (3, 4),
    ),
    pytest.param(
        "multigammaln", lambda x: sp.multigammaln(x[0] + 3.0, 3) * x[1], (2,),
    ),
    pytest.param(
        "multigammaln_d1_vector", lambda x: np.sum(sp.multigammaln(x + 0.5, 1)), (3,),
    ),
    pytest.param(
        "multigammaln_d5", lambda x: np.sum(sp.multigammaln(x + 2.5, 5) * W[0, :2]), (2,),
    ),
    pytest.param(
        "norm.logpdf", lambda x: np.sum(st.norm.logpdf(x, 0.3, 2.0)), (4,)
    ),
    pytest.param(
        "norm.logcdf", lambda x: np.sum(st.norm.logcdf(x[0], x[1], 1.5)), (2, 3),
    ),
    pytest.param(
        "t.logpdf", lambda x: np.sum(st.t.logpdf(x, 3.0)), (4,)
    ),
    pytest.param(
        "gamma.logpdf", lambda x: np.sum(st.gamma.logpdf(x + 0.5, 2.0)), (4,),
    ),
    pytest.param(
        "multivariate_normal.logpdf",
        lambda x: st.multivariate_normal.logpdf(x, np.zeros(3), np.eye(3) + 0.5), (3,),
    ),
]  # fmt: skip


def _central_difference(f, x, d, h=1e-6):
    return (f(x + h * d) - f(x - h * d)) / (2 * h)


@pytest.mark.parametrize("name,f,shape", CASES)
def test_gradient_and_value_match_scipy(name, f, shape):
    x0 = RNG.random(shape) + 0.1
    g = tj.compile(f, x0, cache=False)
    for _ in range(3):
        x = RNG.random(shape) + 0.1
        value, grad = g.value_and_grad(x)
        np.testing.assert_allclose(value, f(x), rtol=1e-12, atol=1e-13, err_msg=name)
        np.testing.assert_allclose(g(x), grad, rtol=0, atol=0, err_msg=name)
        for _ in range(2):
            d = RNG.standard_normal(shape)
            fd = _central_difference(f, x, d)
            np.testing.assert_allclose(np.sum(grad * d), fd, rtol=1e-6, atol=1e-8, err_msg=name)


def _switch() -> list:
    return [array_api._get(owner, key) for owner, key in array_api._switches()]


def test_scipy_switch_is_known_and_restored():
    before = _switch()
    assert before, "tapejit does not know this scipy's array-API switch"
    seen = []

    def f(x):
        seen.append(array_api.scipy_mode_on())
        return np.sum(sp.softmax(x) * W[0])

    tj.compile(f, RNG.random(4), cache=False)
    assert seen == [True]
    assert _switch() == before


def unsupported(x):
    return np.sum(st.norm.ppf(x))  # MARK: unsupported


def _mark_line(fn) -> int:
    import inspect

    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, s in enumerate(lines) if "MARK" in s)


def test_unsupported_scipy_function_names_the_users_line_and_restores_the_switch():
    before = _switch()
    with pytest.raises(tj.TracingError) as info:
        tj.compile(unsupported, RNG.random(4), cache=False)
    msg = str(info.value)
    assert f"{THIS_FILE}:{_mark_line(unsupported)} in unsupported()" in msg
    assert "scipy's rv_continuous.ppf cannot be traced" in msg
    assert "numpy functions and scipy.special's ufuncs" in msg
    assert _switch() == before
    assert not array_api.scipy_mode_on() or all(before)


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_numpy_arrays_next_to_traced_values_are_constants(axis):
    """logsumexp(x, b=w) with a numpy w: scipy refuses to mix namespaces, so during a trace its
    array_namespace answers tapejit's namespace whenever a traced value is among the arrays."""
    w = np.exp(RNG.standard_normal((3, 4)))

    def f(x):
        return np.sum(sp.logsumexp(x, b=w, axis=axis, keepdims=True) ** 2)

    x = RNG.standard_normal((3, 4))
    value, g = tj.compile(f, x, cache=False).value_and_grad(x)
    assert value == pytest.approx(f(x), rel=1e-13)
    d = RNG.standard_normal(x.shape)
    assert np.sum(g * d) == pytest.approx(_central_difference(f, x, d), rel=1e-6)
    override = sys.modules["scipy._lib._array_api_override"]
    assert not isinstance(override.array_api_compat, array_api._MixedNamespaces)  # restored


def test_without_the_mixed_namespace_hook_the_error_says_what_to_do(monkeypatch):
    monkeypatch.setattr(array_api, "_on", lambda key, old: old if key == "array_api_compat" else True)

    def f(x):
        return sp.logsumexp(x, b=W[0])

    with pytest.raises(tj.TracingError, match=r"np\.zeros_like\(x\) \+ w"):
        tj.compile(f, RNG.random(4), cache=False)


def test_without_the_switch_the_error_says_to_set_the_environment_variable(monkeypatch):
    monkeypatch.setattr(array_api, "_switches", list)

    def f(x):
        return sp.logsumexp(x)  # MARK: no switch

    with pytest.raises(tj.TracingError, match="SCIPY_ARRAY_API=1") as info:
        tj.compile(f, RNG.random(4), cache=False)
    assert f"{THIS_FILE}:{_mark_line(f)} in f()" in str(info.value)


def test_numpy_calls_during_a_trace_give_numpy_results():
    """scipy on numpy arrays, in the traced function and in another thread, while the mode
    is on: the same results as with the mode off."""
    a = RNG.random(6)
    expected = sp.logsumexp(a), sp.softmax(a)
    results = []

    def other_thread():
        results.append((sp.logsumexp(a), sp.softmax(a)))

    def f(x):
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        results.append((sp.logsumexp(a), sp.softmax(a)))
        return np.sum(sp.softmax(x) * expected[1])

    tj.compile(f, RNG.random(6), cache=False)
    assert len(results) == 2
    for lse, soft in results:
        assert lse == expected[0] and isinstance(soft, np.ndarray)
        np.testing.assert_array_equal(soft, expected[1])


def test_the_mode_is_shared_by_nested_and_concurrent_traces():
    before = _switch()
    with array_api.scipy_array_api():
        with array_api.scipy_array_api():
            assert array_api.scipy_mode_on()
        assert array_api.scipy_mode_on()
    assert _switch() == before


def test_with_scipy_array_api_set_by_the_user_scipy_special_ufuncs_still_trace():
    """SCIPY_ARRAY_API=1 at scipy's import wraps scipy.special's ufuncs; the wrappers find the
    ufuncs in the namespace's ``special`` and trace them (not scipy's numpy fallback)."""
    import os
    import subprocess
    import sys

    code = (
        "import numpy as np, scipy.special as sp, tapejit as tj\n"
        "x = np.linspace(0.2, 1.4, 4)\n"
        "f = lambda x: np.sum(sp.expit(x) + sp.gammaln(x) + sp.softmax(x) * x)\n"
        "v, g = tj.compile(f, x, cache=False).value_and_grad(x)\n"
        "assert abs(v - f(x)) < 1e-12, (v, f(x))\n"
        "print('ok')\n"
    )
    env = dict(os.environ, SCIPY_ARRAY_API="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_scipy_first_imported_inside_the_traced_function_says_to_import_it_first():
    """The mode is switched when a trace starts; scipy imported later, inside f, gets the clear
    error (not "this scipy version"), and the next compile works."""
    script = (
        "import numpy as np, tapejit as tj\n"
        "def f(x):\n"
        "    from scipy.special import logsumexp\n"
        "    return logsumexp(x)\n"
        "try:\n"
        "    tj.value_and_grad(f)(np.array([1.0, 2.0]))\n"
        "except tj.TracingError as e:\n"
        "    print('ERR', 'import scipy, or the scipy function, at module level' in str(e))\n"
        "print('OK', round(float(tj.value_and_grad(f)(np.array([1.0, 2.0]))[0]), 6))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["ERR", "True", "OK", "2.313262"], out.stdout + out.stderr


def test_multigammaln_outside_its_domain_is_nan_and_scipy_is_restored():
    """scipy raises for ``a <= (d-1)/2``; a traced ``a`` cannot decide that when tracing, so
    the compiled value there is NaN. A non-integer ``d`` raises as scipy does. Outside a
    trace (and for untraced arguments inside one) scipy's own function runs."""
    original = sp.multigammaln
    seen = []

    def f(x):
        seen.append(sp.multigammaln(4.0, 3))  # untraced: scipy's value
        return sp.multigammaln(x[0], 4)

    g = tj.compile(f, np.array([3.0]), cache=False)
    assert seen == [original(4.0, 3)]
    assert sp.multigammaln is original
    value, grad = g.value_and_grad(np.array([1.0]))
    assert np.isnan(value)
    np.testing.assert_allclose(g(np.array([3.0])), [sum(sc_digamma(3.0 - j / 2) for j in range(4))],
                               rtol=1e-12)
    with pytest.raises(ValueError, match="positive integer"):
        tj.compile(lambda x: sp.multigammaln(x[0], 2.5), np.array([3.0]), cache=False)
