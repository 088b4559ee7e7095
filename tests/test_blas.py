"""Large matrix products call the host's BLAS (scipy's dgemm) through a function pointer the
runtime sets; with the pointer unset (no scipy, an exported object) the generated loops run.
Both give numpy's product; small products never take the BLAS branch."""

from __future__ import annotations

import numpy as np
import pytest

import tapejit as tj
from tapejit.codegen import blas

RNG = np.random.default_rng(8)


def loss(A, B):
    C = A @ B
    return 0.5 * np.sum(C * C)


def grad_ref(A, B):
    C = A @ B
    return C @ B.T, A.T @ C


@pytest.mark.parametrize("n", [64, 128])
def test_products_match_numpy_with_and_without_blas(n, monkeypatch):
    A, B = RNG.standard_normal((n, n)), RNG.standard_normal((n, n))
    gA, gB = grad_ref(A, B)
    g = tj.compile(loss, A, B, argnums=(0, 1), cache=False)
    uses = blas.SYMBOL in g.ir("llvm")
    assert uses == (n**3 >= blas.MIN_MULTIPLY_ADDS)
    for got, want in zip(g(A, B), (gA, gB)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
    monkeypatch.setattr(blas, "bind", lambda global_address: False)  # the pointer stays null
    h = tj.compile(loss, A, B, argnums=(0, 1), cache=False)
    for got, want in zip(h(A, B), (gA, gB)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())


def test_the_blas_address_is_found_when_scipy_is_installed():
    pytest.importorskip("scipy.linalg.cython_blas")
    assert blas.dgemm_address()


def test_an_exported_object_with_a_large_product_runs_its_own_loops(tmp_path):
    import shutil
    import subprocess

    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    n = 100
    A, B = RNG.standard_normal((n, n)), RNG.standard_normal((n, n))
    g = tj.compile(loss, A, B, cache=False)
    g.export(tmp_path, name="mm")
    (tmp_path / "main.c").write_text(
        '#include <stdio.h>\n#include <stdlib.h>\n#include "mm.h"\n'
        "int main(void) {\n"
        "  static double a[MM_ARG0_SIZE], b[MM_ARG1_SIZE], g[MM_GRAD0_SIZE], v;\n"
        "  FILE *f = fopen(\"in.bin\", \"rb\");\n"
        "  if (fread(a, 8, MM_ARG0_SIZE, f) != MM_ARG0_SIZE) return 2;\n"
        "  if (fread(b, 8, MM_ARG1_SIZE, f) != MM_ARG1_SIZE) return 2;\n"
        "  void *ws = aligned_alloc(64, MM_WORKSPACE_BYTES + 64);\n"
        "  int s = mm(a, b, &v, g, ws);\n"
        "  FILE *o = fopen(\"out.bin\", \"wb\"); fwrite(g, 8, MM_GRAD0_SIZE, o); fclose(o);\n"
        "  return s;\n}\n"
    )
    (tmp_path / "in.bin").write_bytes(A.tobytes() + B.tobytes())
    subprocess.run(["cc", "-O1", "-o", "main", "main.c", "mm.o", "-lm"], cwd=tmp_path, check=True)
    subprocess.run(["./main"], cwd=tmp_path, check=True)
    got = np.frombuffer((tmp_path / "out.bin").read_bytes()).reshape(n, n)
    np.testing.assert_allclose(got, grad_ref(A, B)[0], rtol=1e-11, atol=1e-11)
