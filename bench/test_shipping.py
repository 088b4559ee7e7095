"""Shipping compiled gradients: pickle size, the time to unpickle (link the object code; no LLVM
work) for the EAM model and the 1000-vertex DAG model, and a Dask sweep of the EAM gradient on a
local cluster of 2 worker processes against one process (skipped without distributed)."""

from __future__ import annotations

import pickle
import time

import numpy as np
import pytest
from benchutil import tag
from dagmodel import make_inputs, make_model

import tapejit as tj
from test_eam import eam

TABLE = "Pickling a compiled gradient (ms per unpickle; size in the row name)"
SWEEP = "Dask sweep of the EAM gradient (n = 100), 400k rows (s per sweep)"


def _models():
    x = np.random.default_rng(0).random(100)
    params, xv = make_inputs(1000)
    return {"EAM n=100": (eam, (x,), 0), "DAG V=1000": (make_model(1000), (params, xv), (0, 1))}


@pytest.mark.parametrize("model", ["EAM n=100", "DAG V=1000"])
def test_unpickle(benchmark, model):
    f, args, argnums = _models()[model]
    g = tj.compile(f, *args, argnums=argnums)
    data = pickle.dumps(g, protocol=5)
    h = pickle.loads(data)
    got, want = h(*args), g(*args)
    for a, b in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        np.testing.assert_array_equal(a, b)
    tag(benchmark, TABLE, f"{model}, {len(data) / 1024:.0f} KiB", "tapejit unpickle", unit="ms")
    benchmark(lambda: pickle.loads(data))


@pytest.mark.parametrize("where", ["one process", "Dask, 2 worker processes"])
def test_dask_sweep(benchmark, where):
    distributed = pytest.importorskip("distributed")
    import dask.array as da

    import tapejit.tools.dask as tjd

    x = np.random.default_rng(0).random(100)
    g = tj.compile(eam, x)
    rows = 400_000
    X = da.random.random((rows, 100), chunks=(50_000, 100))  # generated on the workers

    if where == "one process":
        Xn = X.compute()
        ref = g.batch(Xn[:1000])
        np.testing.assert_array_equal(ref, g.batch(Xn[:1000]))
        tag(benchmark, SWEEP, "400k rows, checksum only", "one process (grad.batch)", unit="s")
        benchmark.pedantic(lambda: g.batch(Xn).sum(), rounds=3, iterations=1)
        return
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster, distributed.Client(cluster):
        G = tjd.batch(g, X, compute=False)
        first = G.sum().compute()  # ships the gradient once per worker
        assert np.isfinite(first)
        tag(benchmark, SWEEP, "400k rows, checksum only", "tapejit on Dask", unit="s")
        benchmark.pedantic(lambda: G.sum().compute(), rounds=3, iterations=1)
