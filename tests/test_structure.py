"""Architecture checks: no heap allocation in generated code, engine lifetime, what an install
adds (the import graph: tests/test_layering.py)."""

from __future__ import annotations

import gc
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import tapejit as tj

ROOT = Path(__file__).resolve().parents[1]


# The import graph's layering and cycles: tests/test_layering.py.


ALLOC = re.compile(
    r"\b(call|jmp)\w*\s+.*\b(malloc|calloc|realloc|free|posix_memalign|aligned_alloc)\b"
)


def _models():
    c = np.ones(1000)

    def eam(x):
        rho = np.sum(np.exp(-3.0 * (x + 1.0)))
        return rho**2 + rho**3 + 0.25 * rho**4

    def loop(x):
        s = 0.0
        for i in range(len(x)):
            s = s + np.tanh(x[i]) * c[i]
        return s

    def mlp(w):
        h = np.tanh(w.reshape(4, 5) @ np.linspace(0, 1, 5))
        return np.mean(h * h) + np.max(w) + np.log1p(np.abs(w)).sum()

    def rolled(x):  # native loops with residual stacks, a condition and a nested scan
        def body(v):
            inner, _ = tj.scan(lambda h, r: (np.tanh(h * r + v), None), v, c[:12].reshape(3, 4))
            return 0.5 * inner + np.sin(v)

        return np.sum(tj.while_loop(lambda v: np.sum(v * v) > 0.1, body, x, max_steps=64) ** 2)

    return [
        (eam, np.random.rand(100)),
        (loop, np.random.rand(20)),
        (mlp, np.random.rand(20)),
        (rolled, np.random.rand(4)),
    ]


def test_generated_code_never_allocates():
    for f, x in _models():
        grad = tj.compile(f, x)
        asm = grad.ir("asm")
        assert "ret" in asm
        hits = [line for line in asm.splitlines() if ALLOC.search(line)]
        assert not hits, f"{f.__name__}: heap allocation in generated code: {hits}"
        assert not re.search(r"\b(malloc|calloc|realloc|free)\b", grad.ir("llvm-opt"))


def test_gradient_function_keeps_its_engine_alive():
    def f(x):
        return np.sum(np.sin(x) ** 2)

    x = np.linspace(0, 1, 50)
    grads = [tj.compile(f, x) for _ in range(3)]
    del grads[:2]
    gc.collect()
    np.testing.assert_allclose(grads[0](x), 2 * np.sin(x) * np.cos(x), rtol=1e-13)


def test_full_width_vectors_on_avx512_hosts():
    from tapejit.codegen import target

    _, _, features = target.host()
    flags = features.split(",")
    assert ("-prefer-256-bit" in flags) == ("+avx512f" in flags)


def test_compiling_restores_the_cyclic_collector():
    """Compiling pauses the cyclic GC (docs/compile-time.md) and restores its state after, also
    when tracing fails; a caller that disabled it keeps it disabled."""

    def f(x):
        return np.sum(np.exp(x))

    def bad(x):
        return np.linalg.inv(x)

    x = np.linspace(0, 1, 8)
    assert gc.isenabled()
    tj.compile(f, x, cache=False)
    assert gc.isenabled()
    with pytest.raises(tj.TracingError):
        tj.compile(bad, x, cache=False)
    assert gc.isenabled()
    gc.disable()
    try:
        tj.compile(f, x + 1, cache=False)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_install_adds_exactly_one_top_level_name(tmp_path):
    """``pip install .`` puts only ``tapejit`` into site-packages: the top-level ``codegen/``
    folder installs as ``tapejit.codegen`` (an unrelated PyPI project is named ``codegen``)."""
    import subprocess
    import zipfile

    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
    )
    if r.returncode:
        pytest.skip(f"cannot build a wheel here: {r.stderr.strip()[-300:]}")
    (wheel,) = tmp_path.glob("tapejit-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"tapejit", wheel.name.split("-py")[0] + ".dist-info"}
    assert "tapejit/codegen/lower/driver.py" in names and "tapejit/codegen/__init__.py" in names
    sources = {
        "tapejit/" + str(p.relative_to(ROOT / "tapejit")) for p in (ROOT / "tapejit").rglob("*.py")
    } | {"tapejit/codegen/" + p.name for p in (ROOT / "codegen").glob("*.py")}
    missing = sorted(s for s in sources if s not in names)
    assert not missing, f"the wheel lacks {missing} (list the package in pyproject.toml)"


def test_cpu_features_can_be_narrowed_for_measurements():
    """``TAPEJIT_CPU_FEATURES=-avx512f`` makes the code an AVX2-only host would get (and keys
    the disk cache apart: the feature string is part of the key)."""
    import os
    import subprocess

    code = (
        "import numpy as np, tapejit as tj\n"
        "from tapejit.codegen import target\n"
        "f = target.host()[2].split(',')\n"
        "g = tj.compile(lambda x: np.sum(np.exp(x)), np.ones(64), cache=False)\n"
        "assert np.allclose(g(np.ones(64)), np.e)\n"
        "print(f[-1], '-prefer-256-bit' in f, 'zmm' in g.ir('asm'))\n"
    )
    env = dict(os.environ, TAPEJIT_CPU_FEATURES="-avx512f")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["-avx512f", "False", "False"]


def test_long_math_loops_ask_the_vectoriser_to_interleave():
    """Fused loops that evaluate polynomial math carry llvm.loop interleave metadata (a distinct
    self-referential loop ID, which the hint becomes in CodeLibrary.prepare): 4 from
    lower.INTERLEAVE_MIN_TRIP iterations (rows of 100 included), 1 below (so the vector loop
    runs at all); loops without math carry none."""

    def f(x):
        return np.sum(np.exp(x))

    def g(x):
        return np.sum(x * x)

    long = tj.compile(f, np.ones(5000), cache=False).ir("llvm")
    assert "llvm.loop.interleave.count\", i32 4" in long
    assert re.search(r"^(!\d+) = distinct !\{\1, !\d+\}$", long, re.M)
    assert "llvm.loop.interleave.count\", i32 4" in tj.compile(f, np.ones(100), cache=False).ir("llvm")
    short = tj.compile(f, np.ones(16), cache=False).ir("llvm")
    assert "llvm.loop.interleave.count\", i32 1" in short and "i32 4" not in short
    assert "llvm.loop.interleave" not in tj.compile(g, np.ones(5000), cache=False).ir("llvm")
