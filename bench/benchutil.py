"""Helpers of the benchmarks: the C compiler front-end (gcc → shared library → cffi ABI mode),
the tolerance check every benchmark runs before it times anything, and :func:`tag`, which places a
benchmark in the tables of ``bench/report.py``.

Tags: the *table* a benchmark belongs to, its *row* and *column* (``impl``), and ``scale`` — what
the timed call is divided by to get the reported unit (K calls of a native loop, m rows of a
batch, n elements). Columns whose name starts with ``tapejit`` are tapejit; the report gives
``tapejit / reference`` for every other column of a row.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

GCC = shutil.which("gcc")
#: Extra flags for every C reference, e.g. ``TAPEJIT_BENCH_CFLAGS=-mno-avx512f`` together with
#: ``TAPEJIT_CPU_FEATURES=-avx512f`` to measure AVX2 code against AVX2 C on an AVX-512 host.
EXTRA_CFLAGS = tuple(os.environ.get("TAPEJIT_BENCH_CFLAGS", "").split())
C_FLAGS = ("-O3", "-march=native", *EXTRA_CFLAGS)
FAST_MATH = ("-O3", "-march=native", "-ffast-math", *EXTRA_CFLAGS)


class CCompiler:
    """``build(source, cdef, flags)`` → a cffi ``lib`` of the shared library gcc makes of
    ``source``; one build per (source, flags) per session. Libraries stay loaded for the session."""

    def __init__(self, workdir: Path):
        import cffi

        self.workdir = workdir
        self._libs: dict[tuple[str, tuple[str, ...]], object] = {}
        self.ffi = cffi.FFI()  # for pointers: from_buffer / cast, shared by every library
        self._cdefs: set[str] = set()

    def build(self, source: str, cdef: str, flags: tuple[str, ...] = C_FLAGS):
        key = (source, tuple(flags))
        if key not in self._libs:
            tag = hashlib.sha1(repr(key).encode()).hexdigest()[:12]
            c_file, so_file = self.workdir / f"{tag}.c", self.workdir / f"lib{tag}.so"
            c_file.write_text(source)
            cmd = [GCC, *flags, "-fPIC", "-shared", "-o", str(so_file), str(c_file), "-lm"]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode:
                raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr}")
            if cdef not in self._cdefs:
                self.ffi.cdef(cdef)
                self._cdefs.add(cdef)
            self._libs[key] = self.ffi.dlopen(str(so_file))
        return self._libs[key]

    def ptr(self, a: np.ndarray, ctype: str = "double *"):
        """A typed pointer to ``a``'s data (create it once, outside the timed call)."""
        return self.ffi.cast(ctype, self.ffi.from_buffer(a))


def tag(benchmark, table: str, row: str, impl: str, scale: float = 1, unit: str = "us") -> None:
    """Place a benchmark in the report: ``table``, ``row``, column ``impl``; the timed call is
    ``scale`` units of work and is reported in ``unit`` (s, ms, us, ns) per unit of work."""
    benchmark.group = f"{table} | {row}"
    benchmark.extra_info.update(table=table, row=row, impl=impl, scale=scale, unit=unit)


def assert_close(got, ref, rtol: float, atol: float = 0.0, what: str = "") -> None:
    """The benchmarked result agrees with the reference: |got - ref| <= atol + rtol |ref|."""
    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    err = np.abs(got - ref)
    bad = err > atol + rtol * np.abs(ref)
    if bad.any():
        i = np.unravel_index(int(np.argmax(err - rtol * np.abs(ref))), err.shape)
        raise AssertionError(
            f"{what}: {int(bad.sum())} entries differ (rtol={rtol}, atol={atol}); worst at {i}: "
            f"got {got[i]!r}, reference {ref[i]!r}"
        )
