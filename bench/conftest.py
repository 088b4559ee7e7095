"""Shared fixtures of the benchmarks: one BLAS thread, a private tapejit cache directory, the
session's C compiler (skips when gcc or cffi is missing), and the machine facts recorded with
every JSON run."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

# One thread per framework, as in PEERS.md: a multi-threaded BLAS on a shared 2-core machine makes
# numpy's `c @ proj` (n = 10⁶) 40× slower (7.9 ms instead of 0.2 ms). Must precede importing numpy.
NUMPY_PREIMPORTED = "numpy" in sys.modules
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import pytest  # noqa: E402
from benchutil import GCC, CCompiler  # noqa: E402


@pytest.fixture(autouse=True, scope="session")
def _private_cache_dir(tmp_path_factory):
    """Compiled tapejit code goes to a fresh directory: no developer cache is read or filled."""
    old = os.environ.get("TAPEJIT_CACHE_DIR")
    os.environ["TAPEJIT_CACHE_DIR"] = str(tmp_path_factory.mktemp("tapejit-cache"))
    yield
    if old is None:
        os.environ.pop("TAPEJIT_CACHE_DIR", None)
    else:
        os.environ["TAPEJIT_CACHE_DIR"] = old


@pytest.fixture(scope="session")
def cc(tmp_path_factory) -> CCompiler:
    """The session's C compiler; skips the benchmark when gcc or cffi is missing."""
    if GCC is None:
        pytest.skip("gcc not found on PATH: the hand-written C references cannot be built")
    pytest.importorskip("cffi", reason="cffi is needed to call the C references")
    return CCompiler(tmp_path_factory.mktemp("cbuild"))


def _version(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.splitlines()[
            0
        ]
    except (OSError, IndexError):
        return "n/a"


def pytest_benchmark_update_machine_info(config, machine_info):
    """Record what the figures depend on: CPU model, core count, library and compiler versions."""
    import llvmlite
    import numpy

    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    flags = ""
    try:
        text = Path("/proc/cpuinfo").read_text()
        have = set(text.split("flags", 1)[1].split("\n", 1)[0].split())
        flags = " ".join(f for f in ("avx2", "fma", "avx512f") if f in have)
    except (OSError, IndexError):
        pass
    try:
        import numba

        numba_version = numba.__version__
    except ImportError:
        numba_version = "not installed"
    machine_info["tapejit_bench"] = {
        "blas_threads": "?" if NUMPY_PREIMPORTED else os.environ["OPENBLAS_NUM_THREADS"],
        "cpu": cpu,
        "cpu_flags": flags,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "llvmlite": llvmlite.__version__,
        "llvm": ".".join(map(str, __import__("llvmlite.binding").binding.llvm_version_info)),
        "numba": numba_version,
        "gcc": _version([GCC or "gcc", "--version"]),
        # code for another target than the host (TAPEJIT_CPU_FEATURES) and the C flags to match
        "cpu_features": os.environ.get("TAPEJIT_CPU_FEATURES", ""),
        "c_flags_extra": os.environ.get("TAPEJIT_BENCH_CFLAGS", ""),
    }
