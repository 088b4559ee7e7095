"""The fast call path (codegen/fastcall.py): same results and same errors as the Python path,
nothing allocated per call with ``out=``, every unusual call forwarded to the Python path."""

from __future__ import annotations

import itertools
import threading
import tracemalloc

import functools

import numpy as np
import pytest

import tapejit as tj
from tapejit.codegen import fastcall

RNG = np.random.default_rng(7)

pytestmark = pytest.mark.skipif(not fastcall.layout_ok(), reason="object layouts differ here")


def eam(x):
    rho = np.sum(np.exp(-3.0 * (x + 1.0)))
    return rho**2 + rho**3 + 0.25 * rho**4


def two(x, s):
    return np.sum(np.sin(x) * s) + s * s


@pytest.fixture(scope="module")
def g():
    return tj.compile(eam, RNG.random(50))


@pytest.fixture(scope="module")
def g2():
    return tj.compile(two, RNG.random(5), 0.5, argnums=(0, 1))


def test_instances_call_the_native_entry(g):
    entry = functools.partial.func.__get__(g)  # the C-level function the vectorcall reaches
    assert type(entry).__name__ == "builtin_function_or_method"
    assert entry.__self__ == g._dispatcher.current.__call__  # its fallback: the Python path


def test_fast_and_python_paths_agree_bitwise(g):
    for _ in range(5):
        x = RNG.random(50)
        a, b = np.empty(50), np.empty(50)
        assert g(x, out=a) is a
        g._dispatcher.current(x, out=b)
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(g(x), b)  # no out: the Python path allocates the result


def test_tuple_out_and_scalar_arguments(g2):
    x = RNG.random(5)
    for s in (0.7, np.float64(0.7), np.array(0.7)):  # float, float subclass, 0-d array
        gx, gs = np.empty(5), np.empty(())
        res = g2(x, s, out=(gx, gs))
        assert res[0] is gx and res[1] is gs
        np.testing.assert_allclose(gx, np.cos(x) * 0.7, rtol=1e-14)
        np.testing.assert_allclose(gs, np.sin(x).sum() + 1.4, rtol=1e-14)


BAD = {
    "short": (lambda x, o: ((x[:10],), {"out": o}), ValueError, "argument 0 must have shape"),
    "strided": (lambda x, o: ((np.repeat(x, 2)[::2],), {"out": o}), ValueError, "C-contiguous"),
    "list": (lambda x, o: ((list(x),), {"out": o}), TypeError, "got list"),
    "complex": (lambda x, o: ((x.astype(complex),), {"out": o}), TypeError, "float64"),
    "extra arg": (lambda x, o: ((x, x), {"out": o}), TypeError, "takes 1 argument"),
    "no arg": (lambda x, o: ((), {"out": o}), TypeError, "takes 1 argument"),
    "out shape": (lambda x, o: ((x,), {"out": o[:10]}), ValueError, "out must have shape"),
    "out dtype": (lambda x, o: ((x,), {"out": o.astype(np.float32)}), TypeError, "float64"),
    "out readonly": (lambda x, o: ((x,), {"out": _readonly(o)}), ValueError, "writeable"),
    "out overlaps": (lambda x, o: ((x,), {"out": x}), ValueError, "overlaps"),
    "out list": (lambda x, o: ((x,), {"out": list(o)}), TypeError, "numpy float64 array"),
    "unknown kw": (lambda x, o: ((x,), {"out": o, "bogus": 1}), TypeError, "bogus"),
}


def _readonly(o):
    o = o.copy()
    o.setflags(write=False)
    return o


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_calls_raise_the_python_paths_error(g, case):
    make, exc, text = BAD[case]
    x, o = RNG.random(50), np.empty(50)
    args, kwargs = make(x, o)
    with pytest.raises(exc, match=text):
        g(*args, **kwargs)
    assert g(x, out=o) is o  # still works afterwards
    np.testing.assert_array_equal(o, g._dispatcher.current(x))


def test_converted_and_misaligned_inputs_take_the_python_path(g):
    x = RNG.random(50)
    ref = g(x)
    as_int = (x * 100).astype(np.int32)  # converted exactly to float64 by the Python path
    np.testing.assert_array_equal(g(as_int, out=np.empty(50)), g._dispatcher.current(as_int.astype(float)))
    raw = np.zeros(50 * 8 + 1, dtype=np.uint8)
    unaligned = np.ndarray((50,), dtype=np.float64, buffer=raw, offset=1)
    assert not unaligned.flags.aligned
    unaligned[...] = x
    np.testing.assert_array_equal(g(unaligned, out=np.empty(50)), ref)
    bad_out = np.ndarray((50,), dtype=np.float64, buffer=np.zeros(401, np.uint8), offset=1)
    with pytest.raises(ValueError, match="aligned"):
        g(x, out=bad_out)


def test_out_call_allocates_nothing(g):
    x, o = RNG.random(50), np.empty(50)

    def calls(n):
        for _ in itertools.repeat(None, n):
            g(x, out=o)

    calls(10)
    tracemalloc.start()
    try:
        calls(10_000)
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert current == 0
    assert peak < 112  # less than one numpy array header: nothing is created per call


def test_threads_share_one_gradient(g):
    xs = [RNG.random(50) for _ in range(4)]
    refs = [g._dispatcher.current(x) for x in xs]
    errors = []

    def work(x, ref):
        o = np.empty(50)
        for _ in range(2000):
            g(x, out=o)
            if not np.array_equal(o, ref):
                errors.append("mismatch")
                return

    ts = [threading.Thread(target=work, args=a) for a in zip(xs, refs)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
