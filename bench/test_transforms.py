"""Transformations against hand-written numpy references (and ``jax.jit`` when jax is installed;
skipped otherwise — jax is not a test dependency): the Jacobian of a 100 -> 100 map, the Hessian
of the EAM model at n = 100, the HVP of an MLP loss, and the HVP's cost in gradients.

Every timed result is first checked against its reference.
"""

from __future__ import annotations

import numpy as np
import pytest
from benchutil import assert_close, tag

import tapejit as tj

RNG = np.random.default_rng(3)
N = 100
A = RNG.standard_normal((N, N)) / np.sqrt(N)
X0 = RNG.random(N)
JAC = "Jacobian of tanh(A x) * x wrt x, A an argument, 100 -> 100 (µs per call)"
HESS = "Hessian of the EAM model, n = 100 (µs per call)"
HVP = "HVP of an MLP loss, 10-32-1 on 64 rows (µs per call)"
COST = "HVP cost in gradients (µs per call)"

W_SHAPES = [(32, 10), (32,), (32,)]
W_SIZE = sum(int(np.prod(s)) for s in W_SHAPES)
XB = RNG.standard_normal((64, 10))
YB = RNG.standard_normal(64)
W0 = RNG.standard_normal(W_SIZE) * 0.3
V0 = RNG.standard_normal(W_SIZE)


def vecmap(x, A):
    """A is an argument (not a captured constant), so no compiler folds A @ basis into A."""
    return np.tanh(A @ x) * x


def jac_ref(x):  # hand-written: d/dx_j [tanh(a_i . x) x_i]
    t = np.tanh(A @ x)
    J = ((1 - t**2) * x)[:, None] * A
    J[np.diag_indices(N)] += t
    return J


def eam(x):
    rho = np.sum(np.exp(-3.0 * (x + 1.0)))
    return rho**2 + rho**3 + 0.25 * rho**4


def eam_hess_ref(x):
    e = np.exp(-3.0 * (x + 1.0))
    rho = e.sum()
    d1 = 2 * rho + 3 * rho**2 + rho**3
    d2 = 2 + 6 * rho + 3 * rho**2
    return 9.0 * (d2 * np.outer(e, e) + d1 * np.diag(e))


def mlp(w, X, y):
    W1 = w[:320].reshape(32, 10)
    b1, W2 = w[320:352], w[352:384]
    h = np.tanh(X @ W1.T + b1)
    return np.mean((h @ W2 - y) ** 2)


def mlp_hvp_ref(w, X, y, v):
    """Hand-written forward-over-reverse HVP of the MLP loss (the R-operator, Pearlmutter 1994)."""
    W1, b1, W2 = w[:320].reshape(32, 10), w[320:352], w[352:384]
    V1, c1, V2 = v[:320].reshape(32, 10), v[320:352], v[352:384]
    n = len(y)
    a = X @ W1.T + b1
    h = np.tanh(a)
    out = h @ W2 - y
    ra = X @ V1.T + c1
    rh = (1 - h**2) * ra
    rout = rh @ W2 + h @ V2
    g_out = 2 * out / n
    rg_out = 2 * rout / n
    gW2 = h.T @ g_out
    rgW2 = rh.T @ g_out + h.T @ rg_out
    gh = np.outer(g_out, W2)
    rgh = np.outer(rg_out, W2) + np.outer(g_out, V2)
    ga = gh * (1 - h**2)
    rga = rgh * (1 - h**2) - gh * 2 * h * rh
    rgW1 = rga.T @ X
    rgb1 = rga.sum(0)
    del gW2
    return np.concatenate([rgW1.ravel(), rgb1, rgW2])


def _jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    return jax


@pytest.mark.parametrize("impl", ["tapejit jacrev", "tapejit jacfwd", "numpy (hand)", "jax jacfwd"])
def test_jacobian(benchmark, impl):
    x = X0
    ref = jac_ref(x)
    if impl.startswith("tapejit"):
        fn = tj.compile(vecmap, x, A, mode=impl.split()[1])
        out = np.empty((N, N))
        call = lambda: fn(x, A, out=out)  # noqa: E731
    elif impl == "numpy (hand)":
        call = lambda: jac_ref(x)  # noqa: E731
    else:
        jax = _jax()
        import jax.numpy as jnp

        jf = jax.jit(jax.jacfwd(lambda x, A: jnp.tanh(A @ x) * x))
        call = lambda: jf(x, A).block_until_ready()  # noqa: E731
    assert_close(call(), ref, 1e-12, 1e-13, impl)
    tag(benchmark, JAC, "J, 100 x 100", impl)
    benchmark(call)


@pytest.mark.parametrize("impl", ["tapejit hessian", "numpy (hand)", "jax hessian"])
def test_hessian(benchmark, impl):
    x = X0
    ref = eam_hess_ref(x)
    if impl.startswith("tapejit"):
        fn = tj.compile(eam, x, mode="hessian")
        out = np.empty((N, N))
        call = lambda: fn(x, out=out)  # noqa: E731
    elif impl == "numpy (hand)":
        call = lambda: eam_hess_ref(x)  # noqa: E731
    else:
        jax = _jax()
        import jax.numpy as jnp

        hf = jax.jit(jax.hessian(lambda x: (r := jnp.sum(jnp.exp(-3.0 * (x + 1.0)))) ** 2 + r**3 + 0.25 * r**4))
        call = lambda: hf(x).block_until_ready()  # noqa: E731
    assert_close(call(), ref, 1e-10, 1e-12, impl)
    tag(benchmark, HESS, "H, 100 x 100", impl)
    benchmark(call)


@pytest.mark.parametrize("impl", ["tapejit hvp", "numpy (hand)", "jax jvp-of-grad"])
def test_mlp_hvp(benchmark, impl):
    ref = mlp_hvp_ref(W0, XB, YB, V0)
    if impl.startswith("tapejit"):
        fn = tj.compile(mlp, W0, XB, YB, mode="hvp")
        out = np.empty(W_SIZE)
        call = lambda: fn(W0, XB, YB, V0, out=out)  # noqa: E731
    elif impl == "numpy (hand)":
        call = lambda: mlp_hvp_ref(W0, XB, YB, V0)  # noqa: E731
    else:
        jax = _jax()
        import jax.numpy as jnp

        def jl(w):
            W1, b1, W2 = w[:320].reshape(32, 10), w[320:352], w[352:384]
            return jnp.mean((jnp.tanh(XB @ W1.T + b1) @ W2 - YB) ** 2)

        hf = jax.jit(lambda w, v: jax.jvp(jax.grad(jl), (w,), (v,))[1])
        call = lambda: hf(W0, V0).block_until_ready()  # noqa: E731
    assert_close(call(), ref, 1e-9, 1e-12, impl)
    tag(benchmark, HVP, "H v, 384 parameters", impl)
    benchmark(call)


@pytest.mark.parametrize("what", ["EAM n=100", "MLP loss"])
@pytest.mark.parametrize("impl", ["tapejit hvp", "gradient"])
def test_hvp_cost_in_gradients(benchmark, what, impl):
    if what == "EAM n=100":
        args, v, f = (X0,), RNG.standard_normal(N), eam
    else:
        args, v, f = (W0, XB, YB), V0, mlp
    out = np.empty(args[0].shape)
    if impl == "gradient":
        fn = tj.compile(f, *args)
        call = lambda: fn(*args, out=out)  # noqa: E731
    else:
        fn = tj.compile(f, *args, mode="hvp")
        call = lambda: fn(*args, v, out=out)  # noqa: E731
    call()
    assert np.all(np.isfinite(out))
    tag(benchmark, COST, what, impl)
    benchmark(call)
