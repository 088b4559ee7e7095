"""Export the EAM gradient for C: writes ``eam.o`` and ``eam.h`` (and ``libeam.so``).

    python examples/aot/export_eam.py [DIR]        # default DIR: examples/aot/build

``f(x) = rho^2 + rho^3 + rho^4 / 4``, ``rho = sum_i exp(-3 (x_i + 1))``, compiled for ``x`` of
100 elements. ``main.c`` calls the exported function on ``x_i = i / 99``; this script prints
what the Python gradient gives there, for comparison with its output.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import tapejit as tj

N = 100


def eam(x):
    rho = np.sum(np.exp(-3.0 * (x + 1.0)))
    return rho**2 + rho**3 + 0.25 * rho**4


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent / "build"
    x = np.arange(N) / (N - 1)  # the input main.c builds
    grad = tj.compile(eam, x)
    files = grad.export(out, shared=True)  # a directory: build/eam.o, eam.h, libeam.so
    value, g = grad.value_and_grad(x)
    print(f"wrote {files.object}, {files.header}, {files.shared}")
    print(f"python: value = {value:.17g}, |grad| = {np.linalg.norm(g):.17g}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
