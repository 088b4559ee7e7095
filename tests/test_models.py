"""End-to-end gradients of whole models, computed by native code (tapejit.compile), against
independent references on random inputs (numpy.random.default_rng, fixed seeds):

* hand-derived gradients (EAM, Rosenbrock, element loop, Lennard-Jones, matmul, MLP backprop):
  rtol 1e-12 (1e-11 where long sums or cancellations reorder rounding), with an absolute floor
  of 1e-12 times the largest gradient entry where entries can cancel to ~0;
* float64 4th-order central differences, h = 1e-3 * max(1, |x_i|) (1e-4 for Lennard-Jones;
  truncation ~h^4, rounding ~eps/h): rtol 1e-7, atol 1e-9 times the largest gradient entry;
* exact results where the arithmetic is exact (captured constants that fold to c[0]).

Compiled gradients are shared through module-level fixtures (each compile costs ~50 ms)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tapejit as tj

SEED = 20240611


def rng(k: int = 0) -> np.random.Generator:
    return np.random.default_rng(SEED + k)


def central4(f, x, h=1e-3):
    """4th-order central differences of scalar ``f`` at float64 array ``x`` (any shape)."""
    x = np.array(x, dtype=np.float64)
    g = np.zeros_like(x)
    for i in range(x.size):
        step = h * max(1.0, abs(x.flat[i]))
        fs = []
        for k in (2, 1, -1, -2):
            xk = x.copy()
            xk.flat[i] += k * step
            fs.append(f(xk))
        g.flat[i] = (-fs[0] + 8 * fs[1] - 8 * fs[2] + fs[3]) / (12 * step)
    return g


def assert_fd(g, ref):
    """Compare with central differences (tolerances in the module docstring)."""
    np.testing.assert_allclose(g, ref, rtol=1e-7, atol=1e-9 * max(1.0, np.abs(ref).max()))


def assert_exact_formula(g, ref, rtol=1e-12):
    np.testing.assert_allclose(g, ref, rtol=rtol, atol=1e-12 * np.abs(ref).max())


# -- EAM --------------------------------------------------------------------------------------------
def eam(x):
    rho = np.sum(np.exp(-3.0 * (x + 1.0)))
    return rho**2 + rho**3 + 0.25 * rho**4


def eam_grad(x):
    e = np.exp(-3.0 * (x + 1.0))
    rho = e.sum()
    return -3.0 * e * (2 * rho + 3 * rho**2 + rho**3)


EAM_SIZES = (1, 7, 100, 1000)


@pytest.fixture(scope="module")
def eam_grads():
    return {n: tj.compile(eam, rng(n).random(n)) for n in EAM_SIZES}


@pytest.mark.parametrize("n", EAM_SIZES)
def test_eam_matches_the_hand_formula(eam_grads, n):
    g = eam_grads[n]
    r = rng(100 + n)
    # [0, 1) like the example input, and a wider range where rho spans orders of magnitude
    for x in (r.random(n), r.uniform(-1.5, 2.0, n), r.normal(0.0, 0.5, n)):
        ref = eam_grad(x)
        np.testing.assert_allclose(g(x), ref, rtol=1e-12)
        value, grad = g.value_and_grad(x)
        np.testing.assert_allclose(grad, ref, rtol=1e-12)
        assert value == pytest.approx(eam(x), rel=1e-13)  # eam(x) evaluated by numpy


def test_eam_against_central_differences(eam_grads):
    x = rng(1).random(7)
    assert_fd(eam_grads[7](x), central4(eam, x))


# -- captured constants that fold away --------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 5, 1000])
def test_captured_constant_element_and_projection(n):
    c = np.ones(n)
    proj = np.zeros(n)
    proj[0] = 1.0
    first = lambda p: c[0] * p  # noqa: E731
    projected = lambda p: (c @ proj) * p  # noqa: E731
    first_sum = lambda p: np.sum(c[0] * p)  # noqa: E731
    projected_sum = lambda p: np.sum((c @ proj) * p * p)  # noqa: E731
    r = rng(n)
    for f in (first, projected):  # scalar p: the gradient is a float, exactly c[0] = 1
        g = tj.compile(f, 0.5)
        for p in (0.5, r.normal(), -3.0):
            dp = g(p)
            assert isinstance(dp, float) and dp == 1.0
            value, dp = g.value_and_grad(p)
            assert value == p and dp == 1.0
    g = tj.compile(first_sum, np.ones(1))  # 1-element p
    np.testing.assert_array_equal(g(np.array([r.normal()])), [1.0])
    g = tj.compile(projected_sum, np.ones(3))  # small p: d/dp sum(p^2) = 2p, exactly
    p = r.normal(size=3)
    np.testing.assert_array_equal(g(p), 2.0 * p)


def test_captured_constants_are_snapshotted_at_compile_time():
    r = rng(2)
    c = r.normal(size=6)
    proj = np.zeros(6)
    proj[0] = 1.0
    g = tj.compile(lambda p: (c @ proj) * p + np.sum(c * c) * p * p, 0.5)
    c0, cc = c[0], np.sum(c * c)
    c[:] = 100.0  # README: changing a captured array after compiling changes nothing
    for p in (0.5, -1.25):
        assert g(p) == pytest.approx(c0 + 2 * cc * p, rel=1e-14)


def test_array_changed_in_place_while_tracing_is_captured_again():
    """A numpy array used, changed in place, then used again: each use sees the values it had
    then (the first snapshot is not reused for the changed array), as numpy computes."""
    c = np.ones(3)

    def f(x):
        a = np.sum(x * c)
        c[0] = 5.0
        b = np.sum(x * c)
        c[1] = -0.0  # a change only in the sign of a zero counts too
        d = np.sum(np.arctan2(c, x - 2.0))
        c[:] = 1.0
        return a + b + d

    x = np.arange(3.0)
    g = tj.compile(f, x, cache=False)
    val, grad = g.value_and_grad(x)
    assert val == pytest.approx(f(x), rel=1e-14)
    h, d = 1e-6, np.array([0.3, -0.7, 0.2])
    fd = (f(x + h * d) - f(x - h * d)) / (2 * h)
    assert np.dot(grad, d) == pytest.approx(fd, rel=1e-7)
    # d/dx0: 1 + 5 (the two sums) + d atan2(5, x0 - 2)/dx0 = -5 / ((x0 - 2)^2 + 25)
    assert grad[0] == pytest.approx(6.0 - 5.0 / (4.0 + 25.0), rel=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ">f8", np.int64])
def test_array_of_another_dtype_changed_in_place_is_captured_again(dtype):
    """Converted to float64 when captured; a later change, even of a zero's sign only, is seen."""
    c = np.array([1.0, 0.0, 2.0]).astype(dtype)

    def f(x):
        a = np.sum(np.arctan2(c, x - 2.0))
        c[1] = -c[1] if c.dtype.kind == "f" else 3
        b = np.sum(np.arctan2(c, x - 2.0))
        c[1] = 0
        return a * b

    x = np.array([0.5, 0.25, 1.0])
    assert tj.compile(f, x, cache=False).value_and_grad(x)[0] == pytest.approx(f(x), rel=1e-6)


# -- a small MLP ------------------------------------------------------------------------------------
D_IN, D_HID, D_OUT = 5, 8, 3
_r = rng(3)
W1, B1 = _r.normal(size=(D_HID, D_IN)) / np.sqrt(D_IN), _r.normal(size=D_HID) * 0.1
W2, B2 = _r.normal(size=(D_OUT, D_HID)) / np.sqrt(D_HID), _r.normal(size=D_OUT) * 0.1
TARGET = _r.normal(size=D_OUT)


def mlp_loss(x):
    """Captured weights; the input is the active argument."""
    h = np.tanh(W1 @ x + B1)
    out = W2 @ h + B2
    return 0.5 * np.sum((out - TARGET) ** 2)


def mlp_params_loss(w1, b1, w2, b2, x):
    h = np.tanh(w1 @ x + b1)
    out = np.tanh(w2 @ h + b2)  # a second nonlinearity in this variant
    return np.mean((out - TARGET) ** 2)


def mlp_backprop(w1, b1, w2, b2, x):
    """Hand-written backprop of mlp_params_loss: (dw1, db1, dw2, db2, dx)."""
    h = np.tanh(w1 @ x + b1)
    out = np.tanh(w2 @ h + b2)
    d_out = 2.0 * (out - TARGET) / D_OUT
    d_z2 = d_out * (1 - out**2)
    d_h = w2.T @ d_z2
    d_z1 = d_h * (1 - h**2)
    return np.outer(d_z1, x), d_z1, np.outer(d_z2, h), d_z2, w1.T @ d_z1


@pytest.fixture(scope="module")
def mlp_grad():
    return tj.compile(mlp_loss, rng(4).normal(size=D_IN))


@pytest.fixture(scope="module")
def mlp_params_grad():
    return tj.compile(
        mlp_params_loss, W1, B1, W2, B2, rng(5).normal(size=D_IN), argnums=(0, 1, 2, 3)
    )


def test_mlp_gradient_wrt_input(mlp_grad):
    r = rng(6)
    for _ in range(3):
        x = r.normal(size=D_IN) * 2
        g = mlp_grad(x)
        assert_fd(g, central4(mlp_loss, x))
        h = np.tanh(W1 @ x + B1)  # hand backprop as a second, tighter reference
        assert_exact_formula(g, W1.T @ ((W2.T @ (W2 @ h + B2 - TARGET)) * (1 - h**2)))
        assert mlp_grad.value_and_grad(x)[0] == pytest.approx(mlp_loss(x), rel=1e-13)


def test_mlp_gradient_wrt_weights(mlp_params_grad):
    r = rng(7)
    for _ in range(2):
        params = [p + r.normal(scale=0.1, size=p.shape) for p in (W1, B1, W2, B2)]
        x = r.normal(size=D_IN)  # an inactive runtime input: new values each call
        grads = mlp_params_grad(*params, x)
        assert isinstance(grads, tuple) and [a.shape for a in grads] == [p.shape for p in params]
        refs = mlp_backprop(*params, x)
        for k, (gk, ref) in enumerate(zip(grads, refs)):
            assert_exact_formula(gk, ref)

            def fk(pk, k=k):
                return mlp_params_loss(*params[:k], pk, *params[k + 1 :], x)

            assert_fd(gk, central4(fk, params[k]))


def test_mlp_single_weight_argnums():
    x = rng(8).normal(size=D_IN)
    g = tj.compile(mlp_params_loss, W1, B1, W2, B2, x, argnums=2)
    gw2 = g(W1, B1, W2, B2, x)
    assert isinstance(gw2, np.ndarray) and gw2.shape == W2.shape
    assert_exact_formula(gw2, mlp_backprop(W1, B1, W2, B2, x)[2])


# -- Rosenbrock ----------------------------------------------------------------------------------------
def rosenbrock(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def rosenbrock_grad(x):
    g = np.zeros_like(x)
    t = x[1:] - x[:-1] ** 2
    g[:-1] += -400.0 * x[:-1] * t - 2.0 * (1.0 - x[:-1])
    g[1:] += 200.0 * t
    return g


@pytest.mark.parametrize("n", [2, 3, 10, 200])
def test_rosenbrock(n):
    g = tj.compile(rosenbrock, rng(n).uniform(-2, 2, n))
    r = rng(200 + n)
    for x in (r.uniform(-2, 2, n), np.ones(n), r.normal(1.0, 0.01, n)):
        ref = rosenbrock_grad(x)
        got = g(x)
        if not ref.any():  # the minimum: exactly zero
            np.testing.assert_array_equal(got, 0.0)
        else:
            assert_exact_formula(got, ref, rtol=1e-11)
        assert g.value_and_grad(x)[0] == pytest.approx(rosenbrock(x), rel=1e-12, abs=1e-300)
    x = r.uniform(-2, 2, n)
    if n <= 10:
        assert_fd(g(x), central4(rosenbrock, x))


# -- Python loops over elements ----------------------------------------------------------------------
def exp_loop(x):
    s = 0.0
    for i in range(x.shape[0]):
        s = s + np.exp(x[i])
    return s


@pytest.mark.parametrize("n", [1, 2, 50])
def test_element_loop(n):
    g = tj.compile(exp_loop, rng(n).random(n))
    x = rng(300 + n).uniform(-3, 3, n)
    np.testing.assert_allclose(g(x), np.exp(x), rtol=1e-13)
    value, _ = g.value_and_grad(x)
    assert value == pytest.approx(np.exp(x).sum(), rel=1e-13)


def lennard_jones(x):
    """Pair potential over the points x[i] (rows of a (k, 3) array), a Python double loop."""
    e = 0.0
    for i in range(x.shape[0]):
        for j in range(i + 1, x.shape[0]):
            d = x[i] - x[j]
            inv6 = 1.0 / np.sum(d * d) ** 3
            e = e + 4.0 * (inv6 * inv6 - inv6)
    return e


def lennard_jones_grad(x):
    d = x[:, None, :] - x[None, :, :]
    r2 = np.sum(d * d, axis=-1)
    np.fill_diagonal(r2, 1.0)
    de_dr2 = 4.0 * (-6.0 * r2**-7 + 3.0 * r2**-4)  # E_pair = 4 (r2^-6 - r2^-3)
    np.fill_diagonal(de_dr2, 0.0)
    return np.sum(2.0 * de_dr2[:, :, None] * d, axis=1)  # d r2 / d x_i = 2 (x_i - x_j)


def lattice(k: int, r: np.random.Generator) -> np.ndarray:
    """k points near a cubic lattice of spacing 1.1 (pair distances ~0.9 .. 4: finite energies)."""
    grid = np.array([(i, j, l) for i in range(3) for j in range(3) for l in range(3)], float)[:k]
    return 1.1 * grid + r.uniform(-0.1, 0.1, (k, 3))


@pytest.fixture(scope="module")
def lj_grad():
    return tj.compile(lennard_jones, lattice(6, rng(9)))


def test_lennard_jones_pairs(lj_grad):
    r = rng(10)
    for _ in range(3):
        x = lattice(6, r)
        g = lj_grad(x)
        assert g.shape == (6, 3)
        assert_exact_formula(g, lennard_jones_grad(x), rtol=1e-11)
        np.testing.assert_allclose(g.sum(axis=0), 0.0, atol=1e-10 * np.abs(g).max())  # no net force
        assert lj_grad.value_and_grad(x)[0] == pytest.approx(lennard_jones(x), rel=1e-12)
    # r^-12 has large high derivatives: a smaller step keeps the h^4 truncation below 1e-9
    assert_fd(lj_grad(x), central4(lennard_jones, x, h=1e-4))


# -- inactive arguments -------------------------------------------------------------------------------
def with_data(x, y):
    return np.sum(x * y) + np.sum(np.sin(y)) * np.sum(x * x)


def test_inactive_second_argument_is_a_runtime_input():
    r = rng(11)
    g = tj.compile(with_data, r.random(4), r.random(4))  # argnums=0: y is inactive
    gy = tj.compile(with_data, r.random(4), r.random(4), argnums=1)
    for _ in range(3):
        x, y = r.normal(size=4), r.normal(size=4)  # y changes every call, not a snapshot
        gx = g(x, y)
        assert isinstance(gx, np.ndarray)
        assert_exact_formula(gx, y + np.sum(np.sin(y)) * 2 * x)
        assert_exact_formula(gy(x, y), x + np.cos(y) * np.sum(x * x))
        value, _ = g.value_and_grad(x, y)
        assert value == pytest.approx(with_data(x, y), rel=1e-13)


def test_inactive_scalar_argument():
    def f(x, t):
        return np.sum(np.exp(-t * x))

    g = tj.compile(f, np.ones(3), 0.5)
    x = rng(12).random(3)
    for t in (0.5, 2.0, -1.0):
        np.testing.assert_allclose(g(x, t), -t * np.exp(-t * x), rtol=1e-13)


# -- matmul with every combination of 1-d and 2-d operands --------------------------------------------
def sin_matmul(a, b):
    return np.sum(np.sin(a @ b))


MATMUL = {  # name -> (shape of a, shape of b, reference (da, db) given cotangent C = cos(a @ b))
    "2d @ 1d": ((4, 3), (3,), lambda a, b, C: (np.outer(C, b), a.T @ C)),
    "1d @ 2d": ((4,), (4, 3), lambda a, b, C: (b @ C, np.outer(a, C))),
    "2d @ 2d": ((4, 3), (3, 2), lambda a, b, C: (C @ b.T, a.T @ C)),
    "1d @ 1d": ((5,), (5,), lambda a, b, C: (C * b, C * a)),
    "1x1 @ 1d": ((1, 1), (1,), lambda a, b, C: (np.outer(C, b), a.T @ C)),
}


@pytest.mark.parametrize("case", list(MATMUL))
def test_matmul_operand_combinations(case):
    sa, sb, ref = MATMUL[case]
    r = rng(13)
    g = tj.compile(sin_matmul, r.normal(size=sa), r.normal(size=sb), argnums=(0, 1))
    for _ in range(2):
        a, b = r.normal(size=sa), r.normal(size=sb)
        da, db = g(a, b)
        ra, rb = ref(a, b, np.cos(a @ b))
        assert da.shape == sa and db.shape == sb
        assert_exact_formula(da, ra)
        assert_exact_formula(db, rb)


@pytest.mark.parametrize("spelling", ["np.dot", "method dot", "np.matmul", "captured left"])
def test_matmul_spellings(spelling):
    r = rng(14)
    M = r.normal(size=(4, 3))
    f = {
        "np.dot": lambda v: np.sum(np.sin(np.dot(M, v))),
        "method dot": lambda v: np.sum(np.sin(v.dot(M.T))),  # M.dot(v): see test_errors.py
        "np.matmul": lambda v: np.sum(np.sin(np.matmul(M, v))),
        "captured left": lambda v: np.sum(np.sin(M @ v)),
    }[spelling]
    g = tj.compile(f, r.normal(size=3))
    v = r.normal(size=3)
    assert_exact_formula(g(v), M.T @ np.cos(M @ v))


# -- the lazy API ----------------------------------------------------------------------------------------
def test_lazy_grad_and_value_and_grad():
    lazy = tj.grad(eam)
    lazy_v = tj.value_and_grad(eam)
    r = rng(15)
    for n in (3, 8, 3):
        x = r.random(n)
        np.testing.assert_allclose(lazy(x), eam_grad(x), rtol=1e-12)
        value, grad = lazy_v(x)
        assert value == pytest.approx(eam(x), rel=1e-13)
        np.testing.assert_allclose(grad, eam_grad(x), rtol=1e-12)
        o = np.empty(n)
        assert lazy(x, out=o) is o
        np.testing.assert_allclose(o, eam_grad(x), rtol=1e-12)
    assert len(lazy.specialisations) == 2


def test_lazy_grad_with_tuple_argnums():
    lazy = tj.grad(with_data, argnums=(0, 1))
    x, y = rng(16).normal(size=(2, 5))
    gx, gy = lazy(x, y)
    assert_exact_formula(gx, y + np.sum(np.sin(y)) * 2 * x)
    assert_exact_formula(gy, x + np.cos(y) * np.sum(x * x))


# -- out= ---------------------------------------------------------------------------------------------------
def test_out_is_written_and_returned(eam_grads, mlp_params_grad):
    g = eam_grads[100]
    x = rng(17).random(100)
    o = np.full(100, np.nan)
    assert g(x, out=o) is o
    np.testing.assert_allclose(o, eam_grad(x), rtol=1e-12)
    o2 = np.full(100, np.nan)
    value, res = g.value_and_grad(x, out=o2)
    assert res is o2 and value == pytest.approx(eam(x), rel=1e-13)
    np.testing.assert_array_equal(o2, o)
    # tuple argnums: a tuple of outputs, each returned as given
    params = (W1, B1, W2, B2)
    x = rng(18).normal(size=D_IN)
    outs = tuple(np.full(p.shape, np.nan) for p in params)
    res = mlp_params_grad(*params, x, out=outs)
    assert isinstance(res, tuple) and all(a is b for a, b in zip(res, outs))
    for gk, ref in zip(outs, mlp_backprop(*params, x)):
        assert_exact_formula(gk, ref)


def test_out_for_a_scalar_argument():
    g = tj.compile(lambda p, x: np.sum(np.exp(p * x)), 0.3, np.ones(4))
    x = rng(19).random(4)
    o = np.full((), np.nan)
    assert g(0.3, x, out=o) is o
    assert float(o) == pytest.approx(np.sum(x * np.exp(0.3 * x)), rel=1e-13)


# -- threads ----------------------------------------------------------------------------------------------
def test_threads_call_one_compiled_function_concurrently(eam_grads, mlp_params_grad):
    """Each thread its own inputs and outputs, all paths (fast out=, Python path, value_and_grad,
    tuple outputs); results identical to the same calls made on one thread."""
    g = eam_grads[1000]
    threads, rounds = 4, 200
    xs = [rng(40 + t).random(1000) for t in range(threads)]
    refs = [g(x) for x in xs]
    params = [[p + rng(50 + t).normal(scale=0.1, size=p.shape) for p in (W1, B1, W2, B2)]
              for t in range(threads)]  # fmt: skip
    mlp_x = [rng(60 + t).normal(size=D_IN) for t in range(threads)]
    mlp_refs = [mlp_params_grad(*p, x) for p, x in zip(params, mlp_x)]
    for ref, x in zip(refs, xs):
        np.testing.assert_allclose(ref, eam_grad(x), rtol=1e-12)
    barrier = threading.Barrier(threads)
    failures: list[str] = []

    def work(t: int) -> None:
        x, ref, o = xs[t], refs[t], np.empty(1000)
        outs = tuple(np.empty(p.shape) for p in params[t])
        barrier.wait()
        try:
            for k in range(rounds):
                if not np.array_equal(g(x, out=o), ref):
                    failures.append(f"thread {t} round {k}: out= path")
                if k % 10 == 0:
                    if not np.array_equal(g(x), ref):
                        failures.append(f"thread {t} round {k}: Python path")
                    value, grad = g.value_and_grad(x)
                    if not np.array_equal(grad, ref) or value != pytest.approx(eam(x), rel=1e-13):
                        failures.append(f"thread {t} round {k}: value_and_grad")
                mlp_params_grad(*params[t], mlp_x[t], out=outs)
                if not all(np.array_equal(a, b) for a, b in zip(outs, mlp_refs[t])):
                    failures.append(f"thread {t} round {k}: tuple out")
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append(f"thread {t}: {e!r}")

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not failures, failures[:5]


def test_threads_compiling_lazily_at_once():
    """tj.grad used from several threads with different shapes: each compiles its own
    specialisation concurrently and gets the right gradient."""
    lazy = tj.grad(eam)
    sizes = (3, 4, 5, 6)
    barrier = threading.Barrier(len(sizes))
    failures: list[str] = []

    def work(n: int) -> None:
        r = rng(70 + n)
        barrier.wait()
        try:
            for _ in range(3):
                x = r.random(n)
                if not np.allclose(lazy(x), eam_grad(x), rtol=1e-12, atol=0):
                    failures.append(f"n={n}: wrong gradient")
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append(f"n={n}: {e!r}")

    workers = [threading.Thread(target=work, args=(n,)) for n in sizes]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not failures, failures
    assert sorted(lazy.specialisations) == [((n,),) for n in sizes]
