"""Issue 6: a random DAG of V dense tanh layers (``bench/dagmodel.py``), gradient with respect to
the packed parameters and the input. Compares tapejit's first-call latency — cold (no disk cache)
and in a fresh process with a warm disk cache — and its steady-state gradient call against a
hand-written numpy backpropagation of the same graph.

The numpy backpropagation is checked against central differences (V = 4) and tapejit against it
at every V (max error 1e-10 × max |gradient|) before anything is timed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from benchutil import assert_close, tag
from dagmodel import Backprop, make_inputs, make_model

import tapejit as tj

SIZES = [10, 100, 1000]
LATENCY = "DAG gradient, compile + first call (ms)"
STEADY = "DAG gradient, steady-state call from Python (µs per call)"
BENCH_DIR = Path(__file__).resolve().parent


def check(gp, gx, ref_p, ref_x, what: str) -> None:
    scale = max(np.abs(ref_p).max(), np.abs(ref_x).max())
    assert_close(gp, ref_p, 1e-10, 1e-10 * scale, what=f"{what}: d/d params")
    assert_close(gx, ref_x, 1e-10, 1e-10 * scale, what=f"{what}: d/d x")


@pytest.fixture(scope="module", params=SIZES, ids=lambda V: f"V={V}")
def dag(request):
    """(V, model, params, x, reference gradients from the numpy backpropagation)."""
    V = request.param
    params, x = make_inputs(V)
    ref_p, ref_x = np.empty_like(params), np.empty_like(x)
    Backprop(V).grad(params, x, ref_p, ref_x)
    return V, make_model(V), params, x, ref_p, ref_x


def test_backprop_matches_central_differences():
    """The reference itself: numpy backpropagation vs central differences of the loss, V = 4."""
    V, eps = 4, 1e-6
    params, x = make_inputs(V)
    bp = Backprop(V)
    gp, gx = np.empty_like(params), np.empty_like(x)
    assert bp.grad(params, x, gp, gx) == pytest.approx(make_model(V)(params, x), rel=1e-14)
    for arg, g in ((params, gp), (x, gx)):
        num = np.empty_like(arg)
        for i in range(arg.size):
            keep = arg[i]
            arg[i] = keep + eps
            up = bp.loss(params, x)
            arg[i] = keep - eps
            num[i] = (up - bp.loss(params, x)) / (2 * eps)
            arg[i] = keep
        assert_close(g, num, 1e-6, 1e-8, what="backprop vs central differences")


def test_cold_first_call(benchmark, dag):
    """tapejit compile with ``cache=False`` plus the first gradient call, in this process."""
    V, f, params, x, ref_p, ref_x = dag
    gp, gx = np.empty_like(params), np.empty_like(x)

    def cold():
        tj.compile(f, params, x, argnums=(0, 1), cache=False)(params, x, out=(gp, gx))

    tag(benchmark, LATENCY, f"V={V}", "tapejit cold (cache=False)", unit="ms")
    benchmark.pedantic(cold, rounds=1 if V >= 1000 else 3, iterations=1)
    check(gp, gx, ref_p, ref_x, "tapejit cold")


FRESH_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    t0 = time.perf_counter()
    import numpy as np
    import tapejit as tj
    from dagmodel import Backprop, make_inputs, make_model
    t1 = time.perf_counter()
    V = int(sys.argv[1])
    f, (params, x) = make_model(V), make_inputs(V)
    gp, gx = np.empty_like(params), np.empty_like(x)
    t2 = time.perf_counter()
    grad = tj.compile(f, params, x, argnums=(0, 1))
    grad(params, x, out=(gp, gx))
    t3 = time.perf_counter()
    ref_p, ref_x = np.empty_like(params), np.empty_like(x)
    Backprop(V).grad(params, x, ref_p, ref_x)
    scale = max(np.abs(ref_p).max(), np.abs(ref_x).max())
    err = max(np.abs(gp - ref_p).max(), np.abs(gx - ref_x).max()) / scale
    print(json.dumps({"import_s": t1 - t0, "first_call_s": t3 - t2, "err": err,
                      "cache": grad.stats["cache"], "timings": grad.stats["timings"]}))
    """
)


def test_fresh_process_first_call(benchmark, dag, tmp_path):
    """A new Python process with a warm disk cache: compile + first call, timed inside it."""
    V = dag[0]
    script = tmp_path / "fresh.py"
    script.write_text(FRESH_SCRIPT)
    env = dict(os.environ, TAPEJIT_CACHE_DIR=str(tmp_path / "cache"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCH_DIR), env.get("PYTHONPATH")]))

    def run() -> dict:
        cmd = [sys.executable, str(script), str(V)]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])

    first = run()  # fills the cache
    assert first["cache"] == "miss" and first["err"] < 1e-10, first
    inner, walls = [], []

    def second() -> None:
        t0 = time.perf_counter()
        r = run()
        walls.append(time.perf_counter() - t0)
        assert r["cache"] == "hit" and r["err"] < 1e-10, r
        inner.append(r)

    benchmark.pedantic(second, rounds=3, iterations=1)
    tag(benchmark, LATENCY, f"V={V}", "tapejit fresh process, warm cache", unit="ms")
    best = sorted(inner, key=lambda r: r["first_call_s"])[len(inner) // 2]
    benchmark.extra_info.update(
        seconds=best["first_call_s"],
        also={"tapejit fresh process: whole process (start-up, imports)": float(np.median(walls))},
        import_s=best["import_s"],
        timings=best["timings"],
        cold_subprocess_s=first["first_call_s"],
    )


def test_steady_tapejit(benchmark, dag):
    """tapejit ``grad(params, x, out=(gp, gx))`` after compilation."""
    V, f, params, x, ref_p, ref_x = dag
    grad = tj.compile(f, params, x, argnums=(0, 1))
    gp, gx = np.empty_like(params), np.empty_like(x)
    grad(params, x, out=(gp, gx))
    check(gp, gx, ref_p, ref_x, "tapejit")
    tag(benchmark, STEADY, f"V={V}", "tapejit")
    benchmark(grad, params, x, out=(gp, gx))


def test_steady_numpy(benchmark, dag):
    """The hand-written numpy forward + backward pass, preallocated buffers."""
    V, _, params, x, ref_p, ref_x = dag
    bp = Backprop(V)
    gp, gx = np.empty_like(params), np.empty_like(x)
    bp.grad(params, x, gp, gx)
    check(gp, gx, ref_p, ref_x, "numpy backprop")
    tag(benchmark, STEADY, f"V={V}", "numpy backprop (hand)")
    benchmark(bp.grad, params, x, gp, gx)
