"""A Gaussian-process marginal likelihood, written as a user writes it (``np.linalg.cholesky``
and two ``np.linalg.solve`` calls), differentiated in its three log-hyperparameters: tapejit's
cold compile time (no disk cache, best of 3, after one warm-up compile) and gradient time against a hand-written numpy + scipy (LAPACK) gradient
(K^-1 from the Cholesky factor, dNLL/dθ_j = tr((K^-1 - α α^T) dK/dθ_j) / 2), and jax.jit(jax.grad)
where jax is installed. Prints a markdown table; the figures go to bench/RESULTS.md.

    python bench/gp_linalg.py [n ...]      # default n = 20 60 200 1000
"""

from __future__ import annotations

import sys
import time
import timeit

import numpy as np
import scipy.linalg as sla

import tapejit as tj


def gp_nll(theta, X, y):
    """Negative log marginal likelihood of a squared-exponential GP (length scale, signal and
    noise variance as exp(theta))."""
    ell, sf2, sn2 = np.exp(theta)
    d2 = np.sum((X[:, None, :] - X[None, :, :]) ** 2, axis=-1)
    K = sf2 * np.exp(-0.5 * d2 / ell**2) + sn2 * np.eye(X.shape[0])
    L = np.linalg.cholesky(K)
    alpha = np.linalg.solve(L.T, np.linalg.solve(L, y))
    return 0.5 * y @ alpha + np.sum(np.log(np.diag(L))) + 0.5 * len(y) * np.log(2 * np.pi)


def gp_grad_hand(theta, X, y):
    """The gradient a numerical analyst writes with numpy and scipy's LAPACK wrappers."""
    ell, sf2, sn2 = np.exp(theta)
    n = X.shape[0]
    d2 = np.sum((X[:, None, :] - X[None, :, :]) ** 2, axis=-1)
    E = sf2 * np.exp(-0.5 * d2 / ell**2)
    K = E + sn2 * np.eye(n)
    c = sla.cho_factor(K, lower=True, check_finite=False)
    alpha = sla.cho_solve(c, y, check_finite=False)
    W = sla.cho_solve(c, np.eye(n), check_finite=False) - np.outer(alpha, alpha)
    return 0.5 * np.array([np.sum(W * (E * d2 / ell**2)), np.sum(W * E), sn2 * np.trace(W)])


def _best(fn, number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number


def main(sizes: list[int]) -> None:
    try:
        import jax

        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp
    except ImportError:
        jax = None
    rng = np.random.default_rng(0)
    tj.compile(gp_nll, np.zeros(3), np.zeros((5, 2)), np.zeros(5), cache=False)  # imports, LLVM
    print("| n | tapejit compile (s) | tapejit gradient (ms) | numpy+scipy hand (ms) | tj ÷ hand |"
          + (" jax.jit(grad) (ms) | tj ÷ jax |" if jax else ""))  # fmt: skip
    print("|---|---|---|---|---|" + ("---|---|" if jax else ""))
    for n in sizes:
        X = rng.uniform(-3.0, 3.0, (n, 2))
        y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(n)
        theta = np.log([1.0, 1.0, 0.1])
        compile_s = float("inf")
        for _ in range(3):  # cold (no disk cache), best of 3: the machine is shared
            t = time.perf_counter()
            g = tj.compile(gp_nll, theta, X, y, cache=False)
            compile_s = min(compile_s, time.perf_counter() - t)
        np.testing.assert_allclose(g(theta, X, y), gp_grad_hand(theta, X, y), rtol=1e-8)
        number = max(1, int(2e6 / n**3)) * 5
        tj_s = _best(lambda: g(theta, X, y), number)
        hand_s = _best(lambda: gp_grad_hand(theta, X, y), number)
        row = f"| {n} | {compile_s:.2f} | {tj_s * 1e3:.3g} | {hand_s * 1e3:.3g} | {tj_s / hand_s:.2f} |"
        if jax:
            def jnll(th, X, y):
                ell, sf2, sn2 = jnp.exp(th)
                d2 = jnp.sum((X[:, None, :] - X[None, :, :]) ** 2, axis=-1)
                K = sf2 * jnp.exp(-0.5 * d2 / ell**2) + sn2 * jnp.eye(X.shape[0])
                L = jnp.linalg.cholesky(K)
                a = jnp.linalg.solve(L.T, jnp.linalg.solve(L, y))
                return 0.5 * y @ a + jnp.sum(jnp.log(jnp.diag(L)))

            jg = jax.jit(jax.grad(jnll))
            jg(theta, X, y).block_until_ready()
            jax_s = _best(lambda: jg(theta, X, y).block_until_ready(), number)
            row += f" {jax_s * 1e3:.3g} | {tj_s / jax_s:.2f} |"
        print(row)


if __name__ == "__main__":
    main([int(v) for v in sys.argv[1:]] or [20, 60, 200, 1000])
