"""Per-call cost of every call form of a compiled gradient (EAM, n = 100), against
``grad(x, out=g)`` and the hand-written C gradient through cffi (pointers cast once); switching
between two compiled branches on every call; two threads calling one gradient on n = 10⁵ against
one thread making both calls.

Every timed call's result is first checked against the numpy formula.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from benchutil import FAST_MATH, assert_close, tag

import tapejit as tj
from test_eam import C_CDEF, C_SOURCE, eam, eam_grad_numpy


def eam_grad(x):
    return eam_grad_numpy(x, np.empty_like(x))

FORMS = "Per-call cost of each call form, EAM n = 100 (µs per call)"
FLIP = "Per-call cost when every call switches branch (µs per call)"
THREADS = "Two threads calling one gradient, EAM n = 10⁵, 2 × 50 calls (ms per 100 calls)"
THREADS_NUMPY = (
    "Control for the host: two threads calling numpy (np.exp, np.multiply release the GIL), "
    "n = 10⁵, 2 × 50 calls (ms per 100 calls)"
)
X = np.random.default_rng(1).random(100)


def two(w, u):
    return np.sum(np.tanh(w @ u)) + np.sum(w * u)


@pytest.mark.parametrize(
    "form",
    [
        "grad(x, out=g)",
        "grad(x)",
        "value_and_grad(x, out=g)",
        "vg = grad.value_and_grad; vg(x, out=g)",
        "value_and_grad(x)",
        "grad(W, U), argnums=(0, 1), 16×16",
        "grad(W, U, out=(gW, gU))",
        "C -ffast-math via cffi",
    ],
)
def test_call_forms(benchmark, cc, form):
    x, g, ref = X, np.empty(100), eam_grad(X)
    if form.startswith("C"):
        lib = cc.build(C_SOURCE, C_CDEF, FAST_MATH)
        px, pg = cc.ptr(x), cc.ptr(g)
        call = lambda: lib.eam_grad(px, pg, 100)  # noqa: E731
        call()
        assert_close(g, ref, 1e-11, what=form)
        impl = "C (hand, cffi)"
    elif "W, U" in form:
        rng = np.random.default_rng(2)
        W, U = rng.random((16, 16)), rng.random((16, 16))
        fn = tj.compile(two, W, U, argnums=(0, 1))
        outs = (np.empty((16, 16)), np.empty((16, 16)))
        call = (lambda: fn(W, U, out=outs)) if "out=" in form else (lambda: fn(W, U))  # noqa: E731
        call()
        impl = "tapejit"
    else:
        fn = tj.compile(eam, x)
        vg = fn.value_and_grad  # the native entry itself (an attribute lookup less per call)
        call = {
            "grad(x, out=g)": lambda: fn(x, out=g),
            "grad(x)": lambda: fn(x),
            "value_and_grad(x, out=g)": lambda: fn.value_and_grad(x, out=g),
            "vg = grad.value_and_grad; vg(x, out=g)": lambda: vg(x, out=g),
            "value_and_grad(x)": lambda: fn.value_and_grad(x),
        }[form]
        r = call()
        assert_close(r if isinstance(r, np.ndarray) else r[1], ref, 1e-12, what=form)
        impl = "tapejit"
    tag(benchmark, FORMS, form, impl)
    benchmark(call)


def branchy(x):
    if x[0] > 0.5:
        return np.sum(x * x)
    return np.sum(np.exp(x))


@pytest.mark.parametrize("calls", ["same branch", "alternating branches"])
def test_guard_flips(benchmark, calls):
    a, b = np.full(100, 0.9), np.full(100, 0.1)
    fn = tj.compile(branchy, a)
    o = np.empty(100)
    fn(b, out=o)  # both variants compiled
    np.testing.assert_allclose(fn(a, out=o), 2 * a)
    np.testing.assert_allclose(fn(b, out=o), np.exp(b))
    if calls == "same branch":
        call = lambda: (fn(a, out=o), fn(a, out=o))  # noqa: E731
    else:
        call = lambda: (fn(a, out=o), fn(b, out=o))  # noqa: E731
    tag(benchmark, FLIP, "EAM-size branchy model, 2 calls", "tapejit " + calls, scale=2)
    benchmark(call)


def _both_calls(work, outs, threads: int):
    """``run()``: ``work(o)`` for each ``o`` of ``outs``, one after the other in this thread or
    each in its own thread."""

    def run():
        if threads == 1:
            for o in outs:
                work(o)
            return
        ts = [threading.Thread(target=work, args=(o,)) for o in outs]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    return run


@pytest.mark.parametrize("threads", [1, 2])
def test_two_threads(benchmark, threads):
    n, calls = 100_000, 50
    x = np.random.default_rng(3).random(n)
    fn = tj.compile(eam, x)
    assert fn.stats.get("releases_gil")
    outs = [np.empty(n), np.empty(n)]
    assert_close(fn(x, out=outs[0]), eam_grad(x), 1e-11, what="threads")

    def work(o):
        for _ in range(calls):
            fn(x, out=o)

    run = _both_calls(work, outs, threads)

    tag(benchmark, THREADS, "2 × 50 calls", f"tapejit, {threads} thread(s)" if threads == 2 else "1 thread, both calls", scale=1, unit="ms")
    benchmark(run)


@pytest.mark.parametrize("threads", [1, 2])
def test_two_threads_numpy_control(benchmark, threads):
    """The same two-thread experiment on numpy's ufunc loops (which release the GIL): how much
    this host's two vCPUs run in parallel at the time of the run, the bound for tapejit's."""
    n, calls = 100_000, 50
    x = np.random.default_rng(3).random(n)
    outs = [np.empty(n), np.empty(n)]

    def work(o):
        for _ in range(calls):
            np.exp(x, out=o)
            np.multiply(o, 3.0, out=o)

    run = _both_calls(work, outs, threads)

    run()
    assert_close(outs[1], 3.0 * np.exp(x), 1e-15, what="numpy control")
    impl = "2 thread(s)" if threads == 2 else "1 thread, both calls"
    tag(benchmark, THREADS_NUMPY, "2 × 50 calls", impl, scale=1, unit="ms")
    benchmark(run)
