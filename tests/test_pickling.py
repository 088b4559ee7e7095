"""Pickling compiled gradients: round trips, deepcopy, specialisations, a missing ``f``, another
host, damaged payloads, spawned processes, a process pool and a real Dask cluster."""

from __future__ import annotations

import copy
import multiprocessing
import pickle
import threading
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest

import tapejit as tj
from tapejit.runtime import pickling

RNG = np.random.default_rng(5)


def eam(x):
    rho = np.sum(np.exp(-3.0 * (x + 1.0)))
    return rho**2 + rho**3 + 0.25 * rho**4


def eam_grad(x):
    rho = np.sum(np.exp(-3.0 * (x + 1.0)))
    return (2 * rho + 3 * rho**2 + rho**3) * -3.0 * np.exp(-3.0 * (x + 1.0))


def branchy(x):
    if x[0] > 0:
        return np.sum(x * x)
    return np.sum(np.exp(x))


W = RNG.random((50, 50))


def captured(x, s):
    return np.sum(np.tanh(W @ x)) * s


def _call(args):
    """Run in a worker process: the pickled gradient at x."""
    g, x = args
    return g(x), g.value_and_grad(x)[0]


def test_round_trip_protocol_5_with_out_of_band_buffers():
    x = RNG.random(50)
    g = tj.compile(captured, x, 0.5, argnums=(0, 1), cache=False)
    buffers = []
    data = pickle.dumps(g, protocol=5, buffer_callback=buffers.append)
    assert buffers  # the captured constant travels out of band
    h = pickle.loads(data, buffers=buffers)
    assert isinstance(h, tj.GradientFunction) and h is not g
    for a, b in zip(h(x, 0.5), g(x, 0.5)):
        np.testing.assert_array_equal(a, b)
    assert h.value_and_grad(x, 0.5)[0] == g.value_and_grad(x, 0.5)[0]
    X = RNG.random((7, 50))
    np.testing.assert_array_equal(h.batch(X, np.full(7, 0.5))[0], g.batch(X, np.full(7, 0.5))[0])
    assert h.ir("trace") == g.ir("trace") and h.argnums == (0, 1) and h.name == "captured"
    assert h._dispatcher.compiles == g._dispatcher.compiles


def test_deepcopy_and_plain_pickle():
    x = RNG.random(30)
    g = tj.compile(eam, x, cache=False)
    for h in (copy.deepcopy(g), pickle.loads(pickle.dumps(g))):
        np.testing.assert_array_equal(h(x), g(x))
        np.testing.assert_allclose(h(x), eam_grad(x), rtol=1e-12)


def test_specialisations_travel_and_f_recompiles_a_new_one():
    a, b = np.ones(6), -np.ones(6)
    g = tj.compile(branchy, a, cache=False)
    g(b)
    h = pickle.loads(pickle.dumps(g))
    n = h._dispatcher.compiles
    np.testing.assert_allclose(h(a), 2 * a)
    np.testing.assert_allclose(h(b), np.exp(b))
    assert h._dispatcher.compiles == n  # both branches came compiled
    k = pickle.loads(pickle.dumps(tj.compile(branchy, a, cache=False)))
    np.testing.assert_allclose(k(b), np.exp(b))  # f came along: the other branch compiles
    assert k._dispatcher.compiles == 2


def _unpicklable_f():
    lock = threading.Lock()  # neither pickle nor cloudpickle can take a lock

    def f(x):
        with lock:
            pass
        return np.sum(x * x) if x[0] > 0 else np.sum(np.exp(x))

    return f


def test_a_gradient_whose_f_cannot_be_pickled_says_why_at_a_guard_failure():
    f = _unpicklable_f()
    g = tj.compile(f, np.ones(4), cache=False)
    h = pickle.loads(pickle.dumps(g))
    np.testing.assert_allclose(h(np.ones(4)), 2 * np.ones(4))
    with pytest.raises(tj.GuardError, match="cannot recompile here: f could not be pickled"):
        h(-np.ones(4))


def test_another_host_recompiles_from_f_or_raises(monkeypatch):
    x = RNG.random(20)
    data = pickle.dumps(tj.compile(eam, x, cache=False))
    other = dict(pickling.host_key(), cpu="some-other-cpu")
    monkeypatch.setattr(pickling, "host_key", lambda: other)
    h = pickle.loads(data)  # recompiled here from f: never runs code built for another CPU
    np.testing.assert_allclose(h(x), eam_grad(x), rtol=1e-12)
    bad = pickle.dumps(tj.compile(_unpicklable_f(), np.ones(4), cache=False))
    monkeypatch.setattr(pickling, "host_key", lambda: dict(other, cpu="a-third-cpu"))
    with pytest.raises(pickling.GradientUnpicklingError, match="cpu.*f could not be pickled"):
        pickle.loads(bad)


def test_damaged_and_foreign_payloads_raise_clear_errors():
    g = tj.compile(eam, RNG.random(10), cache=False)
    data = pickle.dumps(g)
    with pytest.raises((pickle.UnpicklingError, EOFError)):
        pickle.loads(data[: len(data) // 2])
    state = g.__reduce__()[1][0]
    damaged = dict(state, variants=[dict(state["variants"][0])])
    obj = bytearray(damaged["variants"][0]["object"])
    obj[len(obj) // 2] ^= 0xFF
    damaged["variants"][0]["object"] = bytes(obj)
    with pytest.raises(pickling.GradientUnpicklingError, match="damaged"):
        pickling.restore(damaged)
    with pytest.raises(pickling.GradientUnpicklingError, match="unknown format"):
        pickling.restore(dict(state, format="tapejit-gradient-999"))
    with pytest.raises(pickling.GradientUnpicklingError, match="lacks"):
        pickling.restore({k: v for k, v in state.items() if k != "variants"})
    with pytest.raises(pickling.GradientUnpicklingError):
        pickling.restore("not a state")


def test_spawned_pool_and_process_pool_executor():
    x = [RNG.random(40) for _ in range(4)]
    g = tj.compile(eam, x[0], cache=False)
    want = [(g(v), g.value_and_grad(v)[0]) for v in x]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:  # (a worker that fails to unpickle a task would hang the pool)
        got = pool.map_async(_call, [(g, v) for v in x]).get(timeout=300)
    with ProcessPoolExecutor(2, mp_context=ctx) as ex:
        got2 = list(ex.map(_call, [(g, v) for v in x], timeout=300))
    for (ga, va), (gb, vb), (gc, vc) in zip(want, got, got2):
        np.testing.assert_array_equal(ga, gb)
        np.testing.assert_array_equal(ga, gc)
        assert va == vb == vc


def test_dask_sweep_on_a_local_cluster_ships_the_gradient_once_per_worker():
    distributed = pytest.importorskip("distributed")
    import tapejit.dask as tjd

    def model(x):  # a closure: travels by value (cloudpickle), not by module reference
        return eam(x) + 0.5 * np.sum(x * x)

    x = RNG.random(30)
    g = tj.compile(model, x, cache=False)
    X = RNG.random((4000, 30))
    want = g.batch(X)
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster, distributed.Client(cluster) as client:
        got = tjd.batch(g, X, rows_per_task=500)  # 8 tasks
        np.testing.assert_array_equal(got, want)
        counts = client.run(lambda: __import__("tapejit.runtime.pickling").runtime.pickling.restored)
        assert 1 <= sum(counts.values()) <= len(counts)  # once per worker that ran a task
    with pytest.raises(ValueError, match=r"X must have shape \(m, 30\)"):
        tjd.batch(g, RNG.random((5, 31)))


def test_a_transformation_pickles_and_recompiles_with_its_mode(monkeypatch):
    x, v = RNG.random(8), RNG.standard_normal(8)
    h = tj.compile(eam, x, mode="hvp", cache=False)
    h2 = pickle.loads(pickle.dumps(h))
    np.testing.assert_array_equal(h2(x, v), h(x, v))
    data = pickle.dumps(h)
    here = pickling.host_key()
    monkeypatch.setattr(pickling, "host_key", lambda: dict(here, cpu="elsewhere"))
    h3 = pickle.loads(data)  # recompiled for "this" host, in the same mode
    np.testing.assert_allclose(h3(x, v), h(x, v), rtol=1e-14)
