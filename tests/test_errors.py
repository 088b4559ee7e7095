"""Bad input to the runtime and the tracer: every error is a ``TypeError``/``ValueError`` (runtime)
or a ``tapejit.TracingError`` (tracer) whose message names the argument, what was expected and
what was given (tracer errors: the user's file and line and the offending function), and no
error leaves state behind: after each one the same gradient function still gives the right
gradient on valid input (checked against the hand formula, rtol 1e-12)."""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest

import tapejit as tj
from tapejit.frontend import tracing

RNG = np.random.default_rng(3)
N = 10
THIS_FILE = "test_errors.py"


def eam(x):
    rho = np.sum(np.exp(-3.0 * (x + 1.0)))
    return rho**2 + rho**3 + 0.25 * rho**4


def eam_grad(x):
    e = np.exp(-3.0 * (x + 1.0))
    rho = e.sum()
    return -3.0 * e * (2 * rho + 3 * rho**2 + rho**3)


def vec_and_scalar(x, s):
    return np.sum(np.sin(x) * s) + s * s


def matrix_model(a):
    return np.sum(a * a[0])


@pytest.fixture(scope="module")
def g():
    return tj.compile(eam, RNG.random(N), cache=False)


@pytest.fixture(scope="module")
def g2():
    return tj.compile(vec_and_scalar, RNG.random(5), 0.5, argnums=(0, 1), cache=False)


@pytest.fixture(scope="module")
def gm():
    return tj.compile(matrix_model, RNG.random((3, 4)), cache=False)


def still_works(g):
    """The gradient is right on valid input, on the fast path (out=) and the Python path."""
    x = RNG.random(N)
    o = np.full(N, np.nan)
    assert g(x, out=o) is o
    np.testing.assert_allclose(o, eam_grad(x), rtol=1e-12)
    np.testing.assert_allclose(g(x), eam_grad(x), rtol=1e-12)
    value, grad = g.value_and_grad(x)
    assert value == pytest.approx(eam(x), rel=1e-12)
    np.testing.assert_allclose(grad, eam_grad(x), rtol=1e-12)


def check_message(excinfo, patterns):
    msg = str(excinfo.value)
    for p in patterns:
        assert re.search(p, msg), f"{p!r} not in message {msg!r}"


def _readonly(shape):
    a = np.empty(shape)
    a.setflags(write=False)
    return a


def _misaligned(n):
    a = np.ndarray((n,), dtype=np.float64, buffer=np.zeros(8 * n + 1, np.uint8), offset=1)
    assert not a.flags.aligned
    return a


# -- runtime: arguments of a one-argument gradient (eam, shape (10,)) ---------------------------
# name -> (build (args, kwargs) from a valid x and out, exception, patterns the message must hold)
BAD_CALLS = {
    "too few": (lambda x, o: ((), {}), TypeError, [r"^eam:", r"takes 1 argument", r"got 0"]),
    "too few, out=": (lambda x, o: ((), {"out": o}), TypeError, [r"takes 1 argument", r"got 0"]),
    "too many": (lambda x, o: ((x, x), {}), TypeError, [r"takes 1 argument", r"got 2"]),
    "too many, out=": (lambda x, o: ((x, x, x), {"out": o}), TypeError, [r"takes 1", r"got 3"]),
    "wrong shape": (
        lambda x, o: ((RNG.random(N + 1),), {}),
        ValueError,
        [r"argument 0", r"shape \(10,\)", r"got \(11,\)"],
    ),
    "wrong shape, converted dtype": (
        lambda x, o: ((np.arange(N + 1),), {"out": o}),
        ValueError,
        [r"argument 0", r"shape \(10,\)", r"got \(11,\)"],
    ),
    "wrong ndim 2-d": (
        lambda x, o: ((x.reshape(2, 5),), {}),
        ValueError,
        [r"argument 0", r"shape \(10,\)", r"got \(2, 5\)"],
    ),
    "wrong ndim 0-d array": (
        lambda x, o: ((np.array(1.0),), {}),
        ValueError,
        [r"argument 0", r"shape \(10,\)", r"got \(\)"],
    ),
    "wrong ndim python float": (
        lambda x, o: ((1.0,), {"out": o}),
        ValueError,
        [r"argument 0", r"shape \(10,\)", r"got a scalar"],
    ),
    "complex array": (
        lambda x, o: ((x.astype(complex),), {"out": o}),
        TypeError,
        [r"argument 0", r"float64", r"got dtype complex128"],
    ),
    "string": (
        lambda x, o: (("abc",), {}),
        TypeError,
        [r"argument 0", r"float64 array of shape \(10,\)", r"got str"],
    ),
    "string array": (
        lambda x, o: ((np.array(["a"] * N),), {}),
        TypeError,
        [r"argument 0", r"float64", r"got dtype <U1"],
    ),
    "object array": (
        lambda x, o: ((x.astype(object),), {"out": o}),
        TypeError,
        [r"argument 0", r"float64", r"got dtype object"],
    ),
    "bool array": (
        lambda x, o: ((np.ones(N, bool),), {}),
        TypeError,
        [r"argument 0", r"float64", r"got dtype bool"],
    ),
    "list": (
        lambda x, o: ((list(x),), {"out": o}),
        TypeError,
        [r"argument 0", r"float64 array of shape \(10,\)", r"got list"],
    ),
    "None": (lambda x, o: ((None,), {}), TypeError, [r"argument 0", r"got NoneType"]),
    "strided view": (
        lambda x, o: ((np.repeat(x, 2)[::2],), {"out": o}),
        ValueError,
        [r"argument 0", r"must be C-contiguous", r"np\.ascontiguousarray"],
    ),
    "negative stride": (
        lambda x, o: ((x[::-1],), {}),
        ValueError,
        [r"argument 0", r"must be C-contiguous"],
    ),
    "out wrong shape": (
        lambda x, o: ((x,), {"out": np.empty(N + 1)}),
        ValueError,
        [r"\bout\b", r"shape \(10,\)", r"got \(11,\)"],
    ),
    "out wrong ndim": (
        lambda x, o: ((x,), {"out": np.empty((2, 5))}),
        ValueError,
        [r"\bout\b", r"shape \(10,\)", r"got \(2, 5\)"],
    ),
    "out float32": (
        lambda x, o: ((x,), {"out": np.empty(N, np.float32)}),
        TypeError,
        [r"\bout\b", r"float64", r"got float32"],
    ),
    "out int64": (
        lambda x, o: ((x,), {"out": np.empty(N, np.int64)}),
        TypeError,
        [r"\bout\b", r"float64", r"got int64"],
    ),
    "out non-contiguous": (
        lambda x, o: ((x,), {"out": np.empty(2 * N)[::2]}),
        ValueError,
        [r"\bout\b", r"C-contiguous"],
    ),
    "out read-only": (
        lambda x, o: ((x,), {"out": _readonly(N)}),
        ValueError,
        [r"\bout\b", r"writeable"],
    ),
    "out misaligned": (
        lambda x, o: ((x,), {"out": _misaligned(N)}),
        ValueError,
        [r"\bout\b", r"aligned"],
    ),
    "out is the input": (
        lambda x, o: ((x,), {"out": x}),
        ValueError,
        [r"\bout\b", r"overlaps an argument"],
    ),
    "out overlaps the input": (
        lambda x, o: _overlapping(),
        ValueError,
        [r"\bout\b", r"overlaps an argument"],
    ),
    "out list": (
        lambda x, o: ((x,), {"out": list(o)}),
        TypeError,
        [r"\bout\b", r"numpy float64 array", r"got list"],
    ),
    "out tuple for a single argnums": (
        lambda x, o: ((x,), {"out": (o,)}),
        TypeError,
        [r"\bout\b", r"numpy float64 array", r"got tuple"],
    ),
    "out float": (
        lambda x, o: ((x,), {"out": 0.0}),
        TypeError,
        [r"\bout\b", r"got float"],
    ),
    "unknown keyword": (lambda x, o: ((x,), {"out": o, "bogus": 1}), TypeError, [r"bogus"]),
}


def _overlapping():
    buf = np.zeros(2 * N)
    buf[:N] = RNG.random(N)
    return (buf[:N],), {"out": buf[N // 2 : N // 2 + N]}


@pytest.mark.parametrize("style", ["call", "value_and_grad"])
@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_bad_call(g, case, style):
    make, exc, patterns = BAD_CALLS[case]
    x, o = RNG.random(N), np.full(N, 7.0)
    args, kwargs = make(x, o)
    fn = g if style == "call" else g.value_and_grad
    with pytest.raises(exc) as ei:
        fn(*args, **kwargs)
    check_message(ei, patterns)
    np.testing.assert_array_equal(o, 7.0)  # a rejected call writes nothing
    still_works(g)


@pytest.mark.parametrize(
    "bad_out,given",
    [
        (lambda: _readonly(N), r"read-only|not writeable"),
        (lambda: np.empty(2 * N)[::2], r"not C-contiguous|strides"),
        (lambda: _misaligned(N), r"not aligned|misaligned|unaligned"),
    ],
    ids=["read-only", "non-contiguous", "misaligned"],
)
def test_out_layout_error_says_which_requirement_failed(g, bad_out, given):
    with pytest.raises(ValueError, match=given):
        g(RNG.random(N), out=bad_out())


def test_out_becoming_invalid_after_a_good_call_is_caught(g):
    """The runtime caches the last call's pointers: an out (or argument) changed in place since
    must not slip through that cache, on the fast path or the Python path."""
    for call in (g, g._dispatcher.current):
        x, o = RNG.random(N), np.empty(N)
        call(x, out=o)
        call(x, out=o)
        o.setflags(write=False)
        with pytest.raises(ValueError, match=r"out must be a writeable"):
            call(x, out=o)
        o.setflags(write=True)
        x.shape = (2, 5)
        with pytest.raises(ValueError, match=r"argument 0 must have shape \(10,\), got \(2, 5\)"):
            call(x, out=o)
        x.shape = (N,)
        o.shape = (2, 5)
        with pytest.raises(ValueError, match=r"out must have shape \(10,\), got \(2, 5\)"):
            call(x, out=o)
        o.shape = (N,)
        assert call(x, out=o) is o
        np.testing.assert_allclose(o, eam_grad(x), rtol=1e-12)
    still_works(g)


# -- runtime: accepted conversions (documented: real dtypes that numpy.can_cast 'safe'ly) ---------
@pytest.mark.parametrize(
    "dtype", [np.float32, np.float16, np.int8, np.int16, np.int32, np.uint8, np.uint32]
)
def test_exactly_convertible_dtypes_are_converted(g, dtype):
    x = (RNG.random(N) * 8).astype(dtype)  # int dtypes: small integers; all exact in float64
    ref = g(x.astype(np.float64))
    for out in (None, np.empty(N)):
        np.testing.assert_array_equal(g(x, out=out), ref)
    np.testing.assert_allclose(ref, eam_grad(x.astype(np.float64)), rtol=1e-12)


def test_int64_array_with_exact_values_is_converted(g):
    x = np.arange(N, dtype=np.int64) - 3  # |x| < 2**53: exact in float64
    np.testing.assert_array_equal(g(x), g(x.astype(np.float64)))


@pytest.mark.skipif(
    np.finfo(np.longdouble).nmant <= np.finfo(np.float64).nmant,
    reason="longdouble is float64 here",
)
def test_longdouble_is_rejected(g):
    with pytest.raises(TypeError, match=r"argument 0 .*float64.*got dtype float(96|128)"):
        g(RNG.random(N).astype(np.longdouble))
    still_works(g)


@pytest.mark.parametrize(
    "make",
    [
        lambda: (np.full(N, 2**53 + 1, dtype=np.int64),),
        lambda: (np.full(N, 2**63 + 1, dtype=np.uint64),),
    ],
    ids=["int64", "uint64"],
)
def test_inexact_integer_arrays_are_rejected(g, make):
    with pytest.raises((TypeError, ValueError), match=r"argument 0"):
        g(*make())


def test_inexact_python_int_scalar_is_rejected(g2):
    with pytest.raises((TypeError, ValueError), match=r"argument 1"):
        g2(RNG.random(5), 2**53 + 1)


def test_scalar_argument_accepts_real_numbers(g2):
    x = RNG.random(5)
    gx_ref, gs_ref = np.cos(x) * 2.0, np.sin(x).sum() + 4.0
    for s in (2.0, 2, np.float64(2.0), np.float32(2.0), np.int64(2), np.array(2.0), np.array(2)):
        gx, gs = g2(x, s)
        np.testing.assert_allclose(gx, gx_ref, rtol=1e-14)
        assert isinstance(gs, float) and gs == pytest.approx(gs_ref, rel=1e-14)


# -- runtime: a vector + scalar gradient with tuple argnums -------------------------------------
BAD_CALLS_2 = {
    "scalar given a 1-element array": (
        lambda x, s, o: ((x, np.ones(1)), {}),
        ValueError,
        [r"argument 1", r"shape \(\)", r"got \(1,\)"],
    ),
    "scalar given a bool": (
        lambda x, s, o: ((x, True), {}),
        TypeError,
        [r"argument 1", r"float64", r"got bool"],
    ),
    "scalar given a complex": (
        lambda x, s, o: ((x, 1j), {}),
        TypeError,
        [r"argument 1", r"float64", r"got complex"],
    ),
    "scalar given a string": (
        lambda x, s, o: ((x, "2.0"), {}),
        TypeError,
        [r"argument 1", r"float64", r"got str"],
    ),
    "vector given a scalar": (
        lambda x, s, o: ((1.0, s), {}),
        ValueError,
        [r"argument 0", r"shape \(5,\)", r"got a scalar"],
    ),
    "out not a tuple": (
        lambda x, s, o: ((x, s), {"out": o[0]}),
        TypeError,
        [r"\bout\b", r"tuple of 2 arrays", r"argnums"],
    ),
    "out tuple too short": (
        lambda x, s, o: ((x, s), {"out": o[:1]}),
        TypeError,
        [r"\bout\b", r"tuple of 2 arrays"],
    ),
    "out list of arrays": (
        lambda x, s, o: ((x, s), {"out": list(o)}),
        TypeError,
        [r"\bout\b", r"tuple of 2 arrays"],
    ),
    "out[1] wrong shape": (
        lambda x, s, o: ((x, s), {"out": (o[0], np.empty(1))}),
        ValueError,
        [r"out\[1\]", r"shape \(\)", r"got \(1,\)"],
    ),
    "out[0] wrong dtype": (
        lambda x, s, o: ((x, s), {"out": (o[0].astype(np.float32), o[1])}),
        TypeError,
        [r"out\[0\]", r"float64", r"got float32"],
    ),
    "outs overlap each other": (
        lambda x, s, o: ((x, s), {"out": (o[0], o[0][1:2].reshape(()))}),
        ValueError,
        [r"\bout\b", r"overlap each other"],
    ),
    "out[0] overlaps argument 0": (
        lambda x, s, o: ((x, s), {"out": (x, o[1])}),
        ValueError,
        [r"out\[0\]", r"overlaps an argument"],
    ),
}


@pytest.mark.parametrize("case", list(BAD_CALLS_2))
def test_bad_call_tuple_argnums(g2, case):
    make, exc, patterns = BAD_CALLS_2[case]
    x, s, o = RNG.random(5), 0.7, (np.full(5, 7.0), np.full((), 7.0))
    args, kwargs = make(x, s, o)
    with pytest.raises(exc) as ei:
        g2(*args, **kwargs)
    check_message(ei, patterns)
    np.testing.assert_array_equal(o[0], 7.0)
    res = g2(x, s, out=o)
    assert res[0] is o[0] and res[1] is o[1]
    np.testing.assert_allclose(o[0], np.cos(x) * s, rtol=1e-14)
    np.testing.assert_allclose(o[1], np.sin(x).sum() + 2 * s, rtol=1e-14)


def test_overlap_message_names_the_argument(g2):
    gx, gs = np.empty(5), np.empty(())
    s = gx[2:3].reshape(())  # argument 1 lives inside out[0]
    with pytest.raises(ValueError, match=r"argument 1"):
        g2(RNG.random(5), s, out=(gx, gs))


# -- runtime: 2-d layouts ---------------------------------------------------------------------------
def test_fortran_order_and_transposed_inputs(gm):
    a = RNG.random((3, 4))
    ref = gm(a)
    for bad in (np.asfortranarray(a), RNG.random((4, 3)).T, np.empty((3, 8))[:, ::2]):
        with pytest.raises(ValueError, match=r"argument 0 must be C-contiguous"):
            gm(bad)
    with pytest.raises(ValueError, match=r"argument 0 must have shape \(3, 4\), got \(12,\)"):
        gm(a.ravel())
    with pytest.raises(ValueError, match=r"argument 0 must have shape \(3, 4\), got \(4, 3\)"):
        gm(a.T.copy())
    with pytest.raises(ValueError, match=r"out must be a writeable, aligned, C-contiguous"):
        gm(a, out=np.asfortranarray(np.empty((3, 4))))
    o = np.empty((3, 4))
    assert gm(np.ascontiguousarray(np.asfortranarray(a)), out=o) is o
    np.testing.assert_array_equal(o, ref)
    expect = a[0] * np.ones((3, 4))
    expect[0] += a.sum(axis=0)
    np.testing.assert_allclose(ref, expect, rtol=1e-14)


# -- compile(): bad example arguments and options ------------------------------------------------
@pytest.mark.parametrize(
    "make,exc,patterns",
    [
        (
            lambda: (eam, RNG.random(3).astype(complex)),
            TypeError,
            [r"argument 0", r"float64", r"complex128"],
        ),
        (
            lambda: (eam, "abc"),
            TypeError,
            [r"argument 0", r"float64 array or a real number", r"got str"],
        ),
        (
            lambda: (eam, RNG.random(3).astype(object)),
            TypeError,
            [r"argument 0", r"float64", r"object"],
        ),
        (lambda: (eam, np.ones(3, bool)), TypeError, [r"argument 0", r"float64", r"bool"]),
        (lambda: (eam, [1.0, 2.0]), TypeError, [r"argument 0", r"got list"]),
        (lambda: (vec_and_scalar, np.ones(3), 1j), TypeError, [r"argument 1", r"got complex"]),
        (lambda: (eam,), TypeError, [r"at least one example argument"]),
        (lambda: (3, np.ones(3)), TypeError, [r"needs a callable", r"got int"]),
    ],
    ids=[
        "complex",
        "str",
        "object",
        "bool",
        "list",
        "complex scalar",
        "no example",
        "not callable",
    ],
)
def test_compile_rejects_bad_examples(g, make, exc, patterns):
    with pytest.raises(exc) as ei:
        tj.compile(*make(), cache=False)
    check_message(ei, patterns)
    assert not tracing._current  # no trace left open
    still_works(g)


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        ({"argnums": 2}, r"argnums entry 2 is not a valid index for 2 arguments"),
        ({"argnums": -3}, r"argnums entry -3"),
        ({"argnums": ()}, r"argnums is empty"),
        ({"argnums": (0, -2)}, r"repeats an argument"),
        (
            {"on_guard_failure": "ignore"},
            r"on_guard_failure must be 'recompile' or 'raise', got 'ignore'",
        ),
        ({"max_specialisations": 0}, r"max_specialisations must be an int >= 1, got 0"),
    ],
)
def test_compile_rejects_bad_options(g, kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        tj.compile(vec_and_scalar, np.ones(3), 0.5, cache=False, **kwargs)
    still_works(g)


# -- tracer: errors name the user's file and line -----------------------------------------------
def line_of(fn, text: str) -> int:
    """Absolute line number of the first source line of ``fn`` containing ``text``."""
    lines, start = inspect.getsourcelines(fn)
    for k, line in enumerate(lines):
        if text in line:
            return start + k
    raise AssertionError(f"{text!r} not in the source of {fn.__name__}")


def branch_on_array(x):
    if x > 0:  # MARK
        return np.sum(x)
    return np.sum(-x)


def float_of_array(x):
    return float(x) * np.sum(x)  # MARK


def int_of_array(x):
    return np.sum(x) * int(x)  # MARK


def range_of_int_of_array(x):
    s = 0.0
    for _ in range(int(x)):  # MARK
        s = s + np.sum(x)
    return s


def complex_of_element(x):
    return complex(x[0]).real * np.sum(x)  # MARK


def tolist_of_array(x):
    return sum(x.tolist())  # MARK


CONTROL_FLOW = [branch_on_array, float_of_array, int_of_array, range_of_int_of_array,
                tolist_of_array]  # fmt: skip


@pytest.mark.parametrize("f", CONTROL_FLOW, ids=lambda f: f.__name__)
def test_unguardable_control_flow_names_the_line_and_where(g, f):
    """What cannot be guarded (the truth value of a whole array, complex(), tolist()) is a
    TracingError at the user's line that points to tapejit.where."""
    with pytest.raises(tj.TracingError) as ei:
        tj.compile(f, RNG.random(4), cache=False)
    check_message(
        ei, [rf"{THIS_FILE}:{line_of(f, '# MARK')} in {f.__name__}\(\)", r"tapejit\.where"]
    )
    assert not tracing._current
    still_works(g)


def branch_on_element(x):
    if x[0] > 0:  # MARK
        return np.sum(x * x)
    return np.sum(np.exp(x))


def float_of_element(x):
    c = float(x[0])  # MARK
    return c * np.sum(x * x)


def float_of_comparison(x):
    c = float(x[0] > 1.2)  # MARK: float of a comparison has no derivative: guarded
    return c * np.sum(x * x)


def range_of_int_of_element(x):
    s = 0.0
    for i in range(int(x[0])):  # MARK
        s = s + x[1] * (i + 1.0)
    return s


GUARDED = [
    (branch_on_element, [1.0, 2.0, 3.0], [-1.0, 2.0, 3.0], lambda x: 2 * x),
    (float_of_comparison, [1.0, 2.0, 3.0], [1.5, 2.0, 3.0], lambda x: 0 * x),
    (
        range_of_int_of_element,
        [2.5, 2.0, 3.0],
        [3.5, 2.0, 3.0],
        lambda x: np.array([0.0, 3.0, 0.0]),
    ),
]


@pytest.mark.parametrize("f,x0,x1,grad0", GUARDED, ids=[case[0].__name__ for case in GUARDED])
def test_guarded_control_flow_raise_names_the_line_and_where(f, x0, x1, grad0):
    """Control flow on a traced scalar follows the example and records a guard (README); with
    on_guard_failure='raise' another path raises GuardError naming the line and tapejit.where,
    writes nothing, and the gradient keeps working for inputs on the compiled path."""
    x0, x1 = np.array(x0), np.array(x1)
    gf = tj.compile(f, x0, on_guard_failure="raise", cache=False)
    o = np.full(3, 7.0)
    with pytest.raises(tj.GuardError) as ei:
        gf(x1, out=o)
    check_message(
        ei, [rf"{THIS_FILE}:{line_of(f, '# MARK')} in {f.__name__}\(\)", r"tapejit\.where"]
    )
    np.testing.assert_array_equal(o, 7.0)
    assert gf(x0, out=o) is o
    np.testing.assert_allclose(o, grad0(x0), rtol=1e-12)


def traced_index(x):
    return np.sum(x[x > 1.5])  # MARK: a mask computed from x (x[x[0]] is a dynamic index)


def range_of_traced_float(x):
    return sum(range(x[0] + 0.5)) * np.sum(x)  # MARK: x[0] + 0.5 is not integral


def int_of_infinity(x):
    return int(x[0] / 0.0) * np.sum(x)  # MARK


def array_of_traced(x):
    return np.sum(np.asarray(x, dtype=float))  # MARK: a float array cannot hold tracers


M = np.arange(6.0).reshape(2, 3)


def captured_dot_traced(x):
    return np.sum(M.dot(x))  # MARK: ndarray.dot does not defer to tracers (use M @ x)


@pytest.mark.parametrize(
    "f,pattern",
    [
        (traced_index, r"indexing with a traced array"),
        (range_of_traced_float, r"only integer scalar values can be used as an index"),
        (int_of_infinity, r"int\(\) of a traced value that is inf"),
        (array_of_traced, r"numpy array conversion .* np\.copy\(x\)"),
        (captured_dot_traced, r"ndarray\.dot .* W @ x"),
        (float_of_element, r"float\(\) of a traced value .* differentiated argument"),
        (complex_of_element, r"complex\(\) of a traced value .* not supported"),
    ],
    ids=lambda v: getattr(v, "__name__", None),
)
def test_other_tracing_errors_name_the_line(g, f, pattern):
    with pytest.raises(tj.TracingError) as ei:
        tj.compile(f, np.array([1.0, 2.0, 3.0]), cache=False)
    check_message(ei, [rf"{THIS_FILE}:{line_of(f, '# MARK')} in {f.__name__}\(\)", pattern])
    assert not tracing._current
    still_works(g)


# -- tracer: unsupported numpy ---------------------------------------------------------------------
UNSUPPORTED = {
    "numpy.fft.fft": lambda x: np.sum(np.abs(np.fft.fft(x))),
    "numpy.searchsorted": lambda x: np.searchsorted(x, 0.5) * np.sum(x),
    "numpy.argsort": lambda x: np.sum(np.argsort(x) * x),
    "numpy.modf": lambda x: np.sum(np.modf(x)[0]),
    "numpy.linalg.eigvals": lambda x: np.sum(np.linalg.eigvals(x.reshape(2, 2))),
    "numpy.linalg.eig": lambda x: np.sum(np.linalg.eig(x.reshape(2, 2))[0]),
    "numpy.nextafter": lambda x: np.sum(np.nextafter(x, 2.0)),
    "numpy.spacing": lambda x: np.sum(np.spacing(x)),
    "numpy.add.outer": lambda x: np.sum(np.add.outer(x, x)),
    "numpy.exp with out=": lambda x: np.sum(np.exp(x, out=np.empty(4))),
    "numpy.ndarray.argmax": lambda x: x.argmax() * x[0],
    "numpy.ndarray.argsort": lambda x: x.argsort(),
    "numpy.ndarray.argmin": lambda x: x.argmin() * x[0],
}


@pytest.mark.parametrize("name", list(UNSUPPORTED))
def test_unsupported_numpy_is_named(g, name):
    f = UNSUPPORTED[name]
    with pytest.raises(tj.TracingError) as ei:
        tj.compile(f, RNG.random(4), cache=False)
    check_message(
        ei, [rf"{THIS_FILE}:{f.__code__.co_firstlineno}", re.escape(name), r"not supported"]
    )
    assert not tracing._current
    still_works(g)


def test_attribute_lookup_on_tracers_keeps_python_semantics():
    """Unsupported ndarray methods are TracingErrors but also AttributeErrors, so hasattr and
    getattr with a default answer as for any object; unknown names stay plain AttributeErrors."""
    seen = {}

    def f(x):
        seen["sort"] = hasattr(x, "argsort")
        seen["default"] = getattr(x, "argsort", None)
        seen["shape"] = hasattr(x, "shape")
        with pytest.raises(AttributeError) as ei:
            x.no_such_attribute
        seen["plain"] = not isinstance(ei.value, tj.TracingError)
        return np.sum(x * x)

    gf = tj.compile(f, RNG.random(4), cache=False)
    assert seen == {"sort": False, "default": None, "shape": True, "plain": True}
    x = RNG.random(4)
    np.testing.assert_allclose(gf(x), 2 * x, rtol=1e-14)


# -- tracer: f must return a scalar float -------------------------------------------------------------
def returns_vector(x):
    return x * 2.0


def returns_one_element(x):
    return x[:1]


def returns_bool(x):
    return x[0] > 1.0


def returns_tuple(x):
    return np.sum(x), np.sum(x * x)


def returns_list(x):
    return [np.sum(x)]


def returns_none(x):
    np.sum(x)


@pytest.mark.parametrize(
    "f,given",
    [
        (returns_vector, r"got f64\[4\]"),
        (returns_one_element, r"got f64\[1\]"),
        (returns_bool, r"got bool\[\]"),
        (returns_tuple, r"got tuple"),
        (returns_list, r"got list"),
        (returns_none, r"got NoneType"),
    ],
    ids=lambda v: getattr(v, "__name__", None),
)
def test_non_scalar_result_is_a_clear_error(g, f, given):
    with pytest.raises(tj.TracingError) as ei:
        tj.compile(f, RNG.random(4), cache=False)
    check_message(ei, [rf"^{f.__name__} must return a scalar float", given])
    assert not tracing._current
    still_works(g)


def test_a_fresh_compile_after_every_kind_of_error_is_correct():
    """Tracing state (open traces, concrete values) does not leak from failed traces into the
    next one: compile eam after a run of failures and compare with the hand formula."""
    for f in [*CONTROL_FLOW, *UNSUPPORTED.values(), returns_tuple, returns_none, traced_index]:
        with pytest.raises(tj.TracingError):
            tj.compile(f, RNG.random(4), cache=False)
    gf = tj.compile(eam, RNG.random(N), cache=False)
    still_works(gf)
