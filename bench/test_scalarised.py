"""Scalarised models (``bench/scalarised_models.py``: Python loops over elements, numpy index
tables, ``np.exp``/``np.sqrt``/``np.log`` on scalars, ``+=`` into scalars and ``np.zeros``
arrays) — the tapejit gradient against the hand-written C gradient of ``bench/scalarised_c.py``
(gcc -O3 -march=native -ffast-math), per model and size, in the same run.

Before anything is timed, the two gradients must agree: |tapejit - C| <= 1e-9 max |C| entry by
entry, and the two energies to 1e-9 relative (the C gradients themselves are checked against
central differences of the Python models by ``python bench/scalarised_c.py``). A model tapejit
fails to compile is an expected failure naming tapejit's error; its C column is still timed.
Cold compile times, workspace bytes and recompiles on new data are measured by
``python bench/scalarised_compile.py``.

Run: ``python -m pytest bench/test_scalarised.py -p no:xdist -o addopts="" --benchmark-enable``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scalarised_c as SC  # noqa: E402
import scalarised_models as M  # noqa: E402
from benchutil import assert_close, tag  # noqa: E402

import tapejit as tj  # noqa: E402

TABLE = "Scalarised models: gradient, one call from Python (µs per call)"
RTOL = 1e-9
C_IMPL = "C -O3 fast-math (hand)"
CASES = [(model, size) for model, (sizes, _) in M.MODELS.items() for size in sizes]


def _id(case) -> str:
    model, size = case
    return f"{model}-{'x'.join(map(str, size)) if isinstance(size, tuple) else size}"


@pytest.fixture(scope="module", params=CASES, ids=[_id(c) for c in CASES])
def case(request) -> M.Case:
    return M.build(*request.param)


_compiled: dict[tuple[str, str], object] = {}


@pytest.fixture(scope="module")
def compiled(case):
    """The tapejit gradient of ``case`` (one compile per module), or an expected failure naming
    the error tapejit raised."""
    key = (case.model, case.label)
    if key not in _compiled:
        try:
            _compiled[key] = tj.compile(case.f, case.x)
        except Exception as exc:  # noqa: BLE001 - any compile error is the finding
            _compiled[key] = exc
    grad = _compiled[key]
    if isinstance(grad, Exception):
        pytest.xfail(f"tapejit.compile failed: {type(grad).__name__}: {grad}")
    return grad


def _row(case: M.Case) -> str:
    return f"{case.model} {case.label}"


def test_agree(case, compiled, cc):
    """tapejit and C: the same gradient (1e-9 of its largest entry) and energy (1e-9)."""
    ref = SC.load(cc, case)
    e_c, g_c = ref.value_and_grad(case.x)
    e_tj, g_tj = compiled.value_and_grad(case.x)
    assert_close(g_tj, g_c, 0.0, RTOL * np.max(np.abs(g_c)), what=f"{_row(case)} gradient")
    assert e_tj == pytest.approx(e_c, rel=RTOL, abs=RTOL)


def test_tapejit(benchmark, case, compiled):
    """tapejit ``grad(x, out=g)``."""
    g = np.empty_like(case.x)
    compiled(case.x, out=g)
    tag(benchmark, TABLE, _row(case), "tapejit")
    benchmark.extra_info.update(
        compile_s=sum(compiled.stats["timings"].values()),
        workspace_bytes=compiled.workspace_bytes,
        reroll=compiled.stats.get("reroll"),
    )
    benchmark(compiled, case.x, out=g)


def test_c(benchmark, case, cc):
    """The hand-written C gradient through cffi, pointers made once."""
    ref = SC.load(cc, case)
    ref()
    tag(benchmark, TABLE, _row(case), C_IMPL)
    benchmark(ref.fn, *ref.args)
