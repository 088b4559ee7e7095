"""Small matrices inside element loops: a 3-D tetrahedral element's edge matrix (``np.stack``),
deformation gradient (``@``), ``det`` and ``inv`` per element.

``det``/``inv``/``solve`` up to 4 x 4 are the cofactor expansion and the adjugate
(:data:`tapejit.frontend.numpy.numpy_linalg.COFACTOR_MAX`): polynomials and one division, so
the gradient needs no hand-given rule and is defined at singular matrices (the cofactor
matrix). An element loop computing with such small arrays is vectorised with its small
values split into scalars (:mod:`tapejit.passes.small_arrays`): the traced graph is
elementwise code over the elements — no loop, no batched ``matmul``, no scatters of
``(n, 3, 3)`` arrays. References: numpy's values, float64 central differences (rtol 1e-6)
and the closed-form gradient of det, ``det(a) inv(a)^T`` (rtol 1e-12)."""

from __future__ import annotations

import numpy as np
import pytest

import tapejit as tj
from tapejit.core.ops import Op
from tapejit.frontend.tracing import trace

from oracles import central

RNG = np.random.default_rng(20261208)


def _tets(k: int):
    """A k x k x k cube of unit cells, six tetrahedra per cell (positive volumes): node
    coordinates (m, 3), connectivity (6 k^3, 4), inverse reference edge matrices and volumes."""
    g = np.arange((k + 1) ** 3).reshape(k + 1, k + 1, k + 1)
    tets = []
    for i, j, l in np.ndindex(k, k, k):
        c = [g[i + a, j + b, l + e] for a in (0, 1) for b in (0, 1) for e in (0, 1)]
        for p, q in ((1, 3), (3, 2), (2, 6), (6, 4), (4, 5), (5, 1)):
            tets.append([c[0], c[p], c[q], c[7]])
    X0 = np.stack(np.meshgrid(*[np.arange(k + 1.0)] * 3, indexing="ij"), -1).reshape(-1, 3)
    tets = np.array(tets)
    Dm = np.stack([X0[tets[:, m]] - X0[tets[:, 0]] for m in (1, 2, 3)], axis=2)
    flip = np.linalg.det(Dm) < 0
    tets[flip, 1], tets[flip, 2] = tets[flip, 2].copy(), tets[flip, 1].copy()
    Dm = np.stack([X0[tets[:, m]] - X0[tets[:, 0]] for m in (1, 2, 3)], axis=2)
    return X0, tets, np.linalg.inv(Dm), np.linalg.det(Dm) / 6.0


def neo_hookean(k: int, variant: str):
    """The compressible neo-Hookean energy of the deformed cube, written element by element
    as a finite-element code writes it; ``variant`` "det" uses J = det F, "inv" the right
    Cauchy-Green tensor C = F^T F with sqrt(det C) and a tr(C^-1) term."""
    X0, tets, DmInv, vol = _tets(k)
    mu, lam = 1.0, 2.0

    def energy(x):
        X = x.reshape(-1, 3)
        W = 0.0
        for t in range(len(tets)):
            a, b, c, d = tets[t]
            Ds = np.stack([X[b] - X[a], X[c] - X[a], X[d] - X[a]], axis=1)
            F = Ds @ DmInv[t]
            if variant == "inv":
                C = F.T @ F
                J = np.sqrt(np.linalg.det(C))
                extra = 0.01 * np.trace(np.linalg.inv(C))
                I1 = np.trace(C)
            else:
                J = np.linalg.det(F)
                extra = 0.0
                I1 = np.sum(F * F)
            W = W + vol[t] * (0.5 * mu * (I1 - 3) - mu * np.log(J)
                              + 0.5 * lam * np.log(J) ** 2 + extra)  # fmt: skip
        return W

    x = (X0 + 0.05 * RNG.standard_normal(X0.shape)).reshape(-1)
    return energy, x


def _all_nodes(graph):
    todo, out = [graph], []
    while todo:
        g = todo.pop()
        for n in g.nodes:
            out.append(n)
            if n.op == Op.LOOP:
                todo.append(n.attrs[0].body)
    return out


def _assert_scalarised(nodes):
    """No loop is left and no small array is batched: nothing but (n,)-shaped element code
    and the gathers of the node coordinates."""
    assert not [n for n in nodes if n.op == Op.LOOP], "the element loop was not vectorised"
    batched = [n.op for n in nodes if n.ndim >= 2 and n.op in (
        Op.MATMUL, Op.SCATTER, Op.SCATTER_ADD, Op.TRANSPOSE, Op.REDUCE_SUM)]  # fmt: skip
    assert not batched, batched


@pytest.mark.parametrize("variant", ["det", "inv"])
def test_tet_element_loop_is_elementwise_code(variant):
    f, x = neo_hookean(2, variant)  # 48 tetrahedra, 81 coordinates
    nodes = _all_nodes(trace(f, [x], [0]))
    _assert_scalarised(nodes)
    grad = tj.compile(f, x, cache=False)
    np.testing.assert_allclose(grad(x), central(f, x), rtol=1e-6, atol=1e-8)
    value, _ = grad.value_and_grad(x)
    assert value == pytest.approx(f(x), rel=1e-12)


def test_a_large_array_assembled_in_an_element_loop_is_batched():
    """A 6 x 6 array per element (36 entries: kept whole) built with np.stack: the scatters
    are batched over the elements (one (n, 6, 6) array), not run iteration by iteration."""
    n = 20
    idx = RNG.integers(0, 12, (n, 6))

    def f(x):
        s = 0.0
        for e in range(n):
            v = x[idx[e]]
            m = np.stack([v * v[k] for k in range(6)], axis=0) + np.eye(6)
            s = s + np.sum(np.sin(m) * m)
        return s

    x = RNG.normal(size=12)
    assert not [m for m in _all_nodes(trace(f, [x], [0])) if m.op == Op.LOOP]
    grad = tj.compile(f, x, cache=False)
    np.testing.assert_allclose(grad(x), central(f, x), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize(
    "shape", [(1, 1), (2, 2), (3, 3), (4, 4), (4, 3, 3), (2, 5, 2, 2), (3, 4, 4)]
)
def test_det_values_and_gradient_are_the_cofactors(shape):
    a = RNG.normal(size=shape)
    grad = tj.compile(lambda a: np.sum(np.linalg.det(a)), a, cache=False)
    value, g = grad.value_and_grad(a)
    assert value == pytest.approx(np.sum(np.linalg.det(a)), rel=1e-13)
    want = np.linalg.det(a)[..., None, None] * np.swapaxes(np.linalg.inv(a), -1, -2)
    np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_det_of_a_singular_matrix_is_zero_with_the_adjugate_gradient(n):
    """numpy's det of an exactly singular matrix is 0; the gradient there is the cofactor
    matrix (nonzero for rank n - 1), which central differences of the polynomial reproduce."""
    a = np.round(RNG.normal(size=(n, n)) * 8) / 8  # eighths: the expansion is exact
    a[-1] = 2.0 * a[0]  # rank n - 1
    grad = tj.compile(lambda a: np.linalg.det(a), a, cache=False)
    value, g = grad.value_and_grad(a)
    assert value == 0.0 and not np.signbit(value)
    assert np.linalg.det(a) == pytest.approx(0.0, abs=1e-12)
    cof = central(lambda m: np.linalg.det(m), a)
    assert np.abs(g).max() > 0.1
    np.testing.assert_allclose(g, cof, rtol=1e-6, atol=1e-8)


def test_det_zero_is_positive_zero():
    a = np.array([[-0.0, 1.0], [0.0, 1.0]])  # the expansion is -0.0 - 0.0 = -0.0
    value = tj.compile(lambda a: np.linalg.det(a), a, cache=False).value_and_grad(a)[0]
    assert value == 0.0 and not np.signbit(value)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_small_inv_and_solve_match_numpy_with_gradients(n):
    a = RNG.normal(size=(n, n)) + 2.0 * np.eye(n)
    b = RNG.normal(size=(n, 2))
    w = RNG.normal(size=(n, n))

    def f(a):
        return np.sum(w * np.linalg.inv(a)) + np.sum(np.sin(np.linalg.solve(a, b)))

    grad = tj.compile(f, a, cache=False)
    value, g = grad.value_and_grad(a)
    assert value == pytest.approx(f(a), rel=1e-12)
    np.testing.assert_allclose(g, central(f, a), rtol=1e-6, atol=1e-8)
    vec = RNG.normal(size=n)
    s = tj.compile(lambda a: np.linalg.solve(a, vec) @ vec, a, cache=False).value_and_grad(a)[0]
    assert s == pytest.approx(np.linalg.solve(a, vec) @ vec, rel=1e-12)


def test_singular_inverse_raises_at_the_call_also_in_an_element_loop():
    n = 8
    m = RNG.normal(size=(n, 2, 2)) + 3.0 * np.eye(2)

    def f(x):
        s = 0.0
        for e in range(n):
            s = s + np.sum(np.linalg.inv(m[e] * x[e]))
        return s

    x = RNG.uniform(1.0, 2.0, n)
    grad = tj.compile(f, x, cache=False)
    np.testing.assert_allclose(grad(x), central(f, x), rtol=1e-6, atol=1e-8)
    bad = x.copy()
    bad[3] = 0.0  # element 3's matrix is zero
    with pytest.raises(np.linalg.LinAlgError):
        f(bad)
    where = r"Singular matrix.*numpy\.linalg\.inv at .*test_small_linalg_loops\.py"
    with pytest.raises(np.linalg.LinAlgError, match=where):
        grad(bad)
    np.testing.assert_allclose(grad(x), central(f, x), rtol=1e-6, atol=1e-8)  # still works


def test_small_array_forms_in_an_element_loop():
    """Each op the scalarisation splits, on the forms numpy allows: reversed and strided
    slices, transposes, row writes and ``+=`` into a small array, sums over an axis,
    broadcasting, matrix @ vector and vector @ matrix, reshapes."""
    n = 15
    idx = RNG.integers(0, 9, (n, 3))
    w = RNG.normal(size=(n, 3))

    def f(x):
        X = x.reshape(-1, 3)
        s = 0.0
        for e in range(n):
            M = np.stack([X[idx[e, 0]], X[idx[e, 1]], X[idx[e, 2]]], axis=0)
            R = M[::-1, ::-1]
            T = M[1:, ::-2]
            A = np.zeros_like(x, shape=(3, 3))
            A[0, :] = M[2] * w[e]
            A[1:, 1] += M[0, :2]
            A[2, 2] = 1.0
            v = A @ w[e] + w[e] @ R - np.sum(M, axis=0) * M[:, 1]
            s = s + np.sum(R @ M.T * M) + np.sum(T ** 2) + np.linalg.det(R + A.T)
            s = s + np.sum(np.tanh(v.reshape(3, 1) * v)) + np.sum(M.reshape(9)[2::3])
        return s

    x = RNG.normal(size=27)
    _assert_scalarised(_all_nodes(trace(f, [x], [0])))
    grad = tj.compile(f, x, cache=False)
    np.testing.assert_allclose(grad(x), central(f, x), rtol=1e-6, atol=1e-8)
    assert grad.value_and_grad(x)[0] == pytest.approx(f(x), rel=1e-12)


def test_four_by_four_matrices_in_an_element_loop():
    """A tetrahedron's 4 x 4 matrix of homogeneous node coordinates [1, x, y, z]: its det (six
    times the signed volume) and its inverse (the shape-function gradients), per element."""
    X0, tets, _, vol0 = _tets(2)  # 48 elements (a loop of fewer than 8 is unrolled)
    one = np.ones(1)

    def f(x):
        X = x.reshape(-1, 3)
        s = 0.0
        for t in range(len(tets)):
            M = np.stack([np.concatenate([one, X[tets[t, m]]]) for m in range(4)], axis=0)
            v = np.linalg.det(M) / 6.0
            G = np.linalg.inv(M)[1:, :]
            s = s + (v - vol0[t]) ** 2 + 0.1 * np.sum(G * G)
        return s

    x = (X0 + 0.05 * RNG.standard_normal(X0.shape)).reshape(-1)
    _assert_scalarised(_all_nodes(trace(f, [x], [0])))
    grad = tj.compile(f, x, cache=False)
    np.testing.assert_allclose(grad(x), central(f, x), rtol=1e-6, atol=1e-8)
    assert grad.value_and_grad(x)[0] == pytest.approx(f(x), rel=1e-12)
    flat = x.reshape(-1, 3).copy()
    flat[tets[2, 1]] = flat[tets[2, 0]]  # element 2 degenerate: two equal rows, det exactly 0
    bad = flat.reshape(-1)
    with pytest.raises(np.linalg.LinAlgError):
        f(bad)
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        grad(bad)


@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (3, 3), (4, 4), (5, 3, 3), (2, 2, 4, 4)])
@pytest.mark.parametrize("scale", [1.0, 1e200, 1e-200])
def test_slogdet_is_scaled_and_its_gradient_is_the_inverse_transpose(shape, scale):
    """slogdet up to 4 x 4 is the cofactor expansion of a / 2^e, 2^e ~ sum|a|: entries of 1e200
    (whose det overflows) and 1e-200 (underflows) give numpy's log|det|; the gradient of log|det| is
    inv(a)^T, of the sign 0."""
    a = RNG.normal(size=shape) * scale
    grad = tj.compile(lambda a: np.sum(np.linalg.slogdet(a)[1]), a, cache=False)
    value, g = grad.value_and_grad(a)
    sign, logabs = np.linalg.slogdet(a)
    assert value == pytest.approx(np.sum(logabs), rel=1e-13, abs=1e-13)
    want = np.swapaxes(np.linalg.inv(a), -1, -2)
    np.testing.assert_allclose(g, want, rtol=1e-10, atol=1e-12 * np.abs(want).max())
    got_sign = tj.jvp(lambda a: np.linalg.slogdet(a)[0], (a,), (a,))[0]
    np.testing.assert_array_equal(got_sign, sign)


def test_slogdet_of_singular_and_zero_matrices():
    for a in (np.zeros((3, 3)), np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])):
        sign, logabs = tj.jvp(lambda a: np.linalg.slogdet(a), (a,), (a,))[0]
        assert (sign, logabs) == (0.0, -np.inf)
        assert tuple(np.linalg.slogdet(a)) == (0.0, -np.inf)


def test_an_element_s_nodes_read_with_its_table_row():
    """``P = X[conn[e]]`` (a traced integer array as the index: numpy's result has its shape)
    and ``X[conn[e], 1]``: one read at a traced position per node, each checked; the loop is
    vectorised, and an out-of-range entry is an IndexError naming the line."""
    n = 24
    conn = RNG.integers(0, 9, (n, 4))

    def f(x):
        X = x.reshape(-1, 2)
        s = 0.0
        for e in range(n):
            P = X[conn[e]]  # (4, 2)
            c = P.mean(axis=0)
            d = P - c
            inertia = d.T @ d + np.eye(2)
            s = s + np.linalg.slogdet(inertia)[1] + np.sum(X[conn[e], 1] ** 2)
        return s

    x = RNG.normal(size=18)
    _assert_scalarised(_all_nodes(trace(f, [x], [0])))
    grad = tj.compile(f, x, cache=False)
    np.testing.assert_allclose(grad(x), central(f, x), rtol=1e-6, atol=1e-8)

    def g(x, k):  # a 2-D traced index array outside any loop, from the data
        pos = np.floor(k).reshape(2, 2)
        return np.sum(x[pos] ** 2)

    k = np.array([0.5, 3.2, 8.9, 1.0])
    gx = tj.compile(g, x, k, cache=False)
    want = np.zeros_like(x)
    np.add.at(want, [0, 3, 8, 1], 2.0 * x[[0, 3, 8, 1]])
    np.testing.assert_allclose(gx(x, k), want, rtol=1e-14)
    with pytest.raises(IndexError, match="test_small_linalg_loops"):
        gx(x, np.array([0.5, 3.2, 18.0, 1.0]))


def _small_programs():
    """Straight-line programs on small arrays (every op the split handles, and ops it keeps
    whole beside them), as (function, example input)."""
    w = RNG.normal(size=(3, 3))

    def stack_matmul(x):
        m = np.stack([x[0:3], x[3:6], x[6:9]], axis=1)
        return np.sum(np.tanh(m @ w @ m.T) * (m.T @ m)) + np.linalg.det(m)

    def scatter_where(x):
        y = np.zeros_like(x, shape=(2, 4))
        y[0, :] = x[:4]
        y[1, 1:3] += x[4:6] * 2.0
        y[:, 3] = tj.where(x[6:8] > 0.0, x[6:8], -x[6:8])
        return np.sum(y.T.reshape(8)[::-3] * np.arange(1.0, 4.0)) + np.max(y)

    def reductions_broadcast(x):
        a = x[:6].reshape(2, 3)
        b = a - np.mean(a, axis=0) + np.sum(a, axis=1, keepdims=True)
        return np.sum(np.exp(-b ** 2)) + np.prod(np.sum(b, axis=0)) + np.sum(b[:, ::-1] @ x[6:9])

    def inverses(x):
        m = x[:9].reshape(3, 3) + 3.0 * np.eye(3)
        q = x[:4].reshape(2, 2) + 2.0 * np.eye(2)
        return (np.sum(np.linalg.inv(m) * w) + np.linalg.solve(q, x[4:6]) @ x[6:8]
                + np.linalg.slogdet(m)[1])  # fmt: skip

    return [stack_matmul, scatter_where, reductions_broadcast, inverses]


@pytest.mark.parametrize("f", _small_programs(), ids=lambda f: f.__name__)
def test_scalarised_graph_agrees_with_the_graph_in_the_interpreter(f):
    """:func:`tapejit.passes.small_arrays.scalarise` on a traced graph and on its gradient
    graph: the IR interpreter gives the same values (rtol 1e-13: only the order of the
    additions of a sum or product of matrices may differ) on random inputs."""
    from tapejit.ad import autodiff
    from tapejit.core import interpret
    from tapejit.passes import small_arrays

    x = RNG.normal(size=9)
    g = trace(f, [x], [0])
    for graph in (g, autodiff.vjp_graph(g, None)):
        split = small_arrays.scalarise(graph)
        assert split is not graph and len(split.outputs) == len(graph.outputs)
        for _ in range(3):
            xs = RNG.normal(size=9)
            for a, b in zip(interpret.evaluate(split, [xs]), interpret.evaluate(graph, [xs])):
                np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)
