"""The seed model: an EAM-style embedding energy and its gradient, compiled with tapejit.

    f(x) = rho^2 + rho^3 + rho^4 / 4,   rho = sum_i exp(-3 (x_i + 1))
    df/dx_i = -3 e_i (2 rho + 3 rho^2 + rho^3),   e_i = exp(-3 (x_i + 1))

(user report ../shared/seeds/001: such a gradient is called millions of times from numpy code.)
Run:  python examples/eam.py [--calls N]
It checks the compiled gradient against the hand-derived formula, then times ``grad(x, out=g)``
against the hand-written numpy gradient, side by side, for n = 100 and n = 10,000.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import tapejit as tj


def eam(x):
    rho = np.sum(np.exp(-3.0 * (x + 1.0)))
    return rho**2 + rho**3 + 0.25 * rho**4


def eam_grad_numpy(x, out):
    """The hand-written numpy gradient (the formula above)."""
    e = np.exp(-3.0 * (x + 1.0))
    rho = e.sum()
    np.multiply(e, -3.0 * (2 * rho + 3 * rho**2 + rho**3), out=out)
    return out


def per_call_us(fn, calls: int) -> float:
    """Best of 3 repeats of ``calls`` calls, in microseconds per call."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best * 1e6


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=100_000, help="calls per timing at n = 100")
    ns = p.parse_args()
    rng = np.random.default_rng(0)
    print(
        f"{'n':>7} {'compile ms':>11} {'max rel err':>12} {'tapejit us':>11} {'numpy us':>9} {'speed-up':>9}"
    )
    ok = True
    for n in (100, 10_000):
        x = rng.random(n)
        t0 = time.perf_counter()
        grad = tj.compile(eam, x)
        compile_ms = (time.perf_counter() - t0) * 1e3
        g = np.empty(n)
        ref = np.empty(n)
        grad(x, out=g)
        eam_grad_numpy(x, ref)
        err = float(np.max(np.abs(g - ref) / np.abs(ref)))
        ok &= err < 1e-12
        calls = max(args_calls(ns.calls, n), 10)
        t_tj = per_call_us(lambda: grad(x, out=g), calls)
        t_np = per_call_us(lambda: eam_grad_numpy(x, ref), calls)
        print(
            f"{n:>7} {compile_ms:>11.1f} {err:>12.1e} {t_tj:>11.3f} {t_np:>9.3f} {t_np / t_tj:>8.1f}x"
        )
    print("gradient check:", "OK" if ok else "FAILED (relative error above 1e-12)")
    return 0 if ok else 1


def args_calls(calls_at_100: int, n: int) -> int:
    """Fewer calls for larger n, so each size takes about the same time."""
    return calls_at_100 * 100 // n


if __name__ == "__main__":
    sys.exit(main())
