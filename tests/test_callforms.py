"""Every call form on the native path: ``grad(x)`` allocating its result, ``value_and_grad`` with
and without ``out=``, tuple results, scalar gradients; references are counted right (no leak, no
early free); kernels with much work release the GIL and stay correct under threads."""

from __future__ import annotations

import functools
import sys
import threading

import numpy as np
import pytest

import tapejit as tj
from tapejit.codegen import fastcall

RNG = np.random.default_rng(11)
pytestmark = pytest.mark.skipif(not fastcall.layout_ok(), reason="no fast path here")


def eam(x):
    rho = np.sum(np.exp(-3.0 * (x + 1.0)))
    return rho**2 + rho**3 + 0.25 * rho**4


def two(w, s):
    return np.sum(np.tanh(w) * s) + s * s


def _native(g):
    """The builtins calls reach (the native trampolines), not the Python fallbacks."""
    entry = functools.partial.func.__get__(g)
    vg = g.__dict__["value_and_grad"]
    assert type(entry).__name__ == type(vg).__name__ == "builtin_function_or_method"
    return entry, vg


def test_grad_without_out_allocates_on_the_native_path():
    x = RNG.random(40)
    g = tj.compile(eam, x, cache=False)
    entry, _ = _native(g)
    slow = g._dispatcher.current
    a, b = g(x), entry(x)
    assert a is not b and a.base is None and a.flags.writeable and a.flags.c_contiguous
    np.testing.assert_array_equal(a, slow(x))
    np.testing.assert_array_equal(b, a)
    assert sys.getrefcount(a) == 2  # held by `a` and the call's argument only


def test_value_and_grad_forms_match_the_python_path():
    x = RNG.random(40)
    g = tj.compile(eam, x, cache=False)
    slow = g._dispatcher.current
    v, gr = g.value_and_grad(x)
    v2, gr2 = slow.value_and_grad(x)
    assert type(v) is float and v == v2 and v == pytest.approx(eam(x), rel=1e-13)
    np.testing.assert_array_equal(gr, gr2)
    o = np.empty(40)
    before = sys.getrefcount(o)
    for _ in range(1000):
        v3, same = g.value_and_grad(x, out=o)
    assert same is o and v3 == v and sys.getrefcount(o) == before + 1  # `same` holds one
    np.testing.assert_array_equal(o, gr)


def test_tuple_and_scalar_gradients():
    w, s = RNG.random((4, 3)), 0.7
    g = tj.compile(two, w, s, argnums=(0, 1), cache=False)
    gw, gs = g(w, s)
    assert type(gs) is float and gs == pytest.approx(np.sum(np.tanh(w)) + 2 * s, rel=1e-13)
    np.testing.assert_allclose(gw, (1 - np.tanh(w) ** 2) * s, rtol=1e-13)
    v, (gw2, gs2) = g.value_and_grad(w, s)
    assert v == pytest.approx(two(w, s), rel=1e-13) and gs2 == gs
    np.testing.assert_array_equal(gw2, gw)
    t = g(w, s)
    assert sys.getrefcount(t) == 2 and sys.getrefcount(t[0]) == 3  # tuple, t[0], argument
    g1 = tj.compile(two, w, s, argnums=1, cache=False)
    assert type(g1(w, s)) is float and g1(w, s) == gs


def test_no_reference_leaks_over_many_calls():
    """Results, tuples and floats made natively are owned by the caller alone: memory stays flat."""
    x = RNG.random(1000)
    g = tj.compile(eam, x, cache=False)
    w, s = RNG.random((8, 8)), 0.3
    h = tj.compile(two, w, s, argnums=(0, 1), cache=False)
    for _ in range(200):  # warm up allocator pools
        g(x), g.value_and_grad(x), h(w, s), h.value_and_grad(w, s)

    def rss() -> int:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * 4096

    start = rss()
    for _ in range(20000):  # 20000 x 8 KB results: a leak would grow by 160 MB
        g(x), g.value_and_grad(x), h(w, s), h.value_and_grad(w, s)
    assert rss() - start < 8 << 20


def test_an_invalid_call_still_gets_the_clear_error():
    x = RNG.random(40)
    g = tj.compile(eam, x, cache=False)
    with pytest.raises(ValueError, match=r"argument 0 must have shape \(40,\)"):
        g(RNG.random(41))
    with pytest.raises(ValueError, match=r"argument 0 must have shape \(40,\)"):
        g.value_and_grad(RNG.random(41))
    with pytest.raises(TypeError, match="takes 1 argument"):
        g.value_and_grad(x, x)


def test_guard_failure_on_an_allocating_call_frees_what_it_allocated():
    def f(x):
        return np.sum(x * x) if x[0] > 0 else np.sum(np.exp(x))

    a, b = np.ones(30), -np.ones(30)
    g = tj.compile(f, a, cache=False)
    np.testing.assert_allclose(g(b), np.exp(b), rtol=1e-14)  # fails the native guard first
    np.testing.assert_allclose(g(a), 2 * a, rtol=1e-14)
    np.testing.assert_allclose(g.value_and_grad(b)[1], np.exp(b), rtol=1e-14)


def test_large_kernels_release_the_gil_and_stay_correct_in_threads():
    n = 200_000
    x = RNG.random(n)
    g = tj.compile(eam, x, cache=False)
    assert g.stats["work"] >= fastcall.GIL_RELEASE_WORK
    small = tj.compile(eam, RNG.random(10), cache=False)
    assert small.stats["work"] < fastcall.GIL_RELEASE_WORK
    ref = g(x)
    xs = [RNG.random(n) for _ in range(4)]
    refs = [g(v) for v in xs]
    errors = []

    def worker(k: int) -> None:
        o = np.empty(n)
        for _ in range(20):
            for v, r in zip(xs, refs):
                if not np.array_equal(g(v, out=o), r):
                    errors.append(k)
                if not np.array_equal(g(v), r):  # the allocating form too
                    errors.append(k)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    np.testing.assert_array_equal(g(x), ref)


def _three_way(x):
    if x[0] > 1.0:
        return np.sum(x * x)
    if x[0] > 0.0:
        return np.sum(np.exp(x))
    return np.sum(np.sin(x))


def _ref(x):
    return 2 * x if x[0] > 1.0 else (np.exp(x) if x[0] > 0.0 else np.cos(x))


def test_alternating_guards_dispatch_in_native_code(monkeypatch):
    """Once each branch is compiled, inputs alternating between them never reach Python: the
    variants' fast paths are chained (a failed guard tries the next variant natively)."""
    xs = [np.full(20, 2.0), np.full(20, 0.5), np.full(20, -0.5)]
    g = tj.compile(_three_way, xs[0], cache=False)
    for x in xs:
        g(x)
    assert g._dispatcher.compiles == 3

    def no_python(*args, **kwargs):
        raise AssertionError("a guard failure reached the Python dispatcher")

    monkeypatch.setattr(g._dispatcher, "recover", no_python)
    o = np.empty(20)
    for _ in range(50):
        for x in xs:
            np.testing.assert_allclose(g(x, out=o), _ref(x), rtol=1e-14)
            np.testing.assert_allclose(g(x), _ref(x), rtol=1e-14)
            v, gr = g.value_and_grad(x)
            assert v == pytest.approx(_three_way(x), rel=1e-13)
            np.testing.assert_allclose(gr, _ref(x), rtol=1e-14)


def test_chains_survive_dropped_specialisations():
    """With room for two specialisations, cycling through three recompiles and drops; the chain
    never points at a dropped (freed) variant."""
    import gc

    xs = [np.full(20, 2.0), np.full(20, 0.5), np.full(20, -0.5)]
    g = tj.compile(_three_way, xs[0], cache=False, max_specialisations=2)
    with pytest.warns(tj.GuardWarning):
        for _ in range(4):
            for x in xs:
                np.testing.assert_allclose(g(x), _ref(x), rtol=1e-14)
                gc.collect()
    assert len(g.specialisations) == 2


def test_dynamic_length_arguments_take_the_native_path():
    """A sequence whose length changes between calls is checked natively (1 <= rows <= the
    compiled capacity, the other axes exact) and passed with its length; a longer one takes the
    Python path, which compiles for it."""

    def loss(p, seq):
        def step(h, row):
            return np.tanh(p * h + row), None

        h, _ = tj.scan(step, np.zeros(3), seq)
        return np.sum(h * h)

    p = RNG.random(3)
    g = tj.compile(loss, p, RNG.random((5, 3)), dynamic_argnums=1, cache=False)
    entry, vg = _native(g)
    slow = g._dispatcher.current
    for T in (1, 7, 40):
        s = RNG.random((T, 3))
        np.testing.assert_array_equal(entry(p, s), slow(p, s))
        v, gr = vg(p, s)
        assert v == slow.value_and_grad(p, s)[0]
    with pytest.raises(ValueError, match=r"argument 1 must have shape \(n, 3\)"):
        g(p, RNG.random((4, 2)))
    with pytest.raises(ValueError, match="n >= 1"):
        g(p, np.zeros((0, 3)))
    cap = g._primary.signature.dynamic[1]
    long = RNG.random((cap + 5, 3))
    want = tj.compile(loss, p, long, cache=False)(p, long)  # a fixed-length compile of it
    np.testing.assert_allclose(g(p, long), want, rtol=1e-13)
    assert g._dispatcher.compiles == 2  # grown once, for the longer sequence
