"""The compiled transformations: jvp, vjp, Jacobians (forward and reverse), HVP, Hessian,
pytrees and has_aux — each against central differences or an independent formula, on random
inputs; bad input gets a clear error naming the argument."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest

import tapejit as tj

RNG = np.random.default_rng(21)
H = 1e-6
A = RNG.standard_normal((5, 6)) / 3


def eam(x):
    rho = np.sum(np.exp(-3.0 * (x + 1.0)))
    return rho**2 + rho**3 + 0.25 * rho**4


def vec(x):  # R^6 -> R^5
    return np.tanh(A @ x) * x[:5] + np.sum(x**2)


def two_out(x, s):
    return np.sin(x) * s, np.sum(x) * s**2


def mlp(w, X):
    W1, W2 = w[:12].reshape(4, 3), w[12:16]
    return np.mean((np.tanh(X @ W1.T) @ W2 - 1.0) ** 2)


def looped(x):
    def body(i, c):
        return np.tanh(c * x + 0.1 * i)

    c = tj.fori_loop(0, 4, body, x)
    carry, ys = tj.scan(lambda h, r: (np.sin(h * r), h * r), x[:3], np.ones((2, 3)) * 0.5)
    return np.sum(c * c) + np.sum(ys) + np.sum(carry)


def fd_jacobian(f, x):
    cols = []
    for k in range(x.size):
        e = np.zeros(x.size)
        e[k] = H
        e = e.reshape(x.shape)
        cols.append((np.asarray(f(x + e)) - np.asarray(f(x - e))).ravel() / (2 * H))
    y = np.asarray(f(x))
    return np.stack(cols, axis=-1).reshape(y.shape + x.shape)


@pytest.mark.parametrize("mode", ["jacfwd", "jacrev", "auto"])
def test_jacobians_match_central_differences(mode):
    x = RNG.random(6)
    fn = {"jacfwd": tj.jacfwd, "jacrev": tj.jacrev, "auto": tj.jacobian}[mode]
    J = fn(vec)(x)
    assert J.shape == (5, 6)
    np.testing.assert_allclose(J, fd_jacobian(vec, x), rtol=1e-7, atol=1e-8)
    Js = fn(two_out, argnums=(0, 1))(x, 0.7)  # tuple outputs, tuple argnums
    assert len(Js) == 2 and len(Js[0]) == 2
    np.testing.assert_allclose(Js[0][0], np.diag(np.cos(x) * 0.7), atol=1e-12)
    np.testing.assert_allclose(Js[0][1], np.sin(x), atol=1e-12)
    np.testing.assert_allclose(Js[1][0], np.full(6, 0.49), atol=1e-12)
    assert Js[1][1] == pytest.approx(2 * 0.7 * np.sum(x))


def test_jvp_and_vjp_agree_with_each_other_and_with_differences():
    x, v, w = RNG.random(6), RNG.standard_normal(6), RNG.standard_normal(5)
    y, ydot = tj.jvp(vec, (x,), (v,))
    np.testing.assert_allclose(y, vec(x), rtol=1e-13)
    np.testing.assert_allclose(ydot, (vec(x + H * v) - vec(x - H * v)) / (2 * H), rtol=1e-6)
    y2, vjp_fn = tj.vjp(vec, x)
    (xbar,) = vjp_fn(w)
    np.testing.assert_allclose(y2, y, rtol=1e-15)
    assert np.dot(ydot, w) == pytest.approx(np.dot(v, xbar), rel=1e-12)  # <Jv, w> = <v, J'w>
    (ys, ts) = tj.jvp(two_out, (x, 0.7), (v, 1.0))  # tuple outputs
    np.testing.assert_allclose(ts[0], np.cos(x) * 0.7 * v + np.sin(x), rtol=1e-13)


@pytest.mark.parametrize("f, args", [
    (eam, (RNG.random(8),)),
    (mlp, (RNG.random(16), RNG.random((10, 3)))),
    (looped, (RNG.random(4),)),
])  # fmt: skip
def test_hvp_and_hessian_match_differences_of_the_gradient(f, args):
    x = args[0]
    g = tj.compile(f, *args, cache=False)
    v = RNG.standard_normal(x.shape)
    fd = (g(x + H * v, *args[1:]) - g(x - H * v, *args[1:])) / (2 * H)
    hv = tj.hvp(f, args, v)
    np.testing.assert_allclose(hv, fd, rtol=1e-5, atol=1e-7)
    Hm = tj.hessian(f)(*args)
    assert Hm.shape == x.shape + x.shape
    np.testing.assert_allclose(Hm, Hm.T, atol=1e-12)  # symmetric
    np.testing.assert_allclose(Hm @ v, hv, rtol=1e-10, atol=1e-12)


def test_compiled_forms_are_one_native_call_each():
    x, v = RNG.random(8), RNG.standard_normal(8)
    h = tj.compile(eam, x, mode="hvp", cache=False)
    out = np.empty(8)
    assert h(x, v, out=out) is out  # the fast path with out=, as for gradients
    np.testing.assert_allclose(out, tj.hvp(eam, x, v), rtol=1e-14)
    hess = tj.compile(eam, x, mode="hessian", cache=False)
    assert hess.stats["loops"] >= 1  # the basis sweep is a native loop
    with pytest.raises(TypeError, match="value_and_grad is for gradients"):
        h.value_and_grad(x, v)


def test_guards_work_in_transformations():
    def f(x):
        if x[0] > 0:
            return np.sum(x**3)
        return np.sum(np.exp(x))

    a, b = np.ones(4), -np.ones(4)
    hess = tj.compile(f, a, mode="hessian", cache=False)
    np.testing.assert_allclose(hess(a), np.diag(6 * a), atol=1e-12)
    np.testing.assert_allclose(hess(b), np.diag(np.exp(b)), atol=1e-12)  # recompiled


Params = namedtuple("Params", "W b")


def net(p, x):
    return np.sum(np.tanh(p["layer"].W @ x + p["layer"].b) ** 2) + p["scale"] ** 2


def test_pytree_arguments_round_trip_and_match_the_flat_gradient():
    p = {"layer": Params(RNG.random((3, 4)), RNG.random(3)), "scale": 0.5}
    x = RNG.random(4)
    g = tj.grad(net)(p, x)
    assert isinstance(g["layer"], Params) and g["layer"].W.shape == (3, 4)
    assert g["scale"] == pytest.approx(1.0)

    def flat(W, b, x):
        return np.sum(np.tanh(W @ x + b) ** 2)

    gW, gb = tj.compile(flat, p["layer"].W, p["layer"].b, x, argnums=(0, 1), cache=False)(
        p["layer"].W, p["layer"].b, x
    )
    np.testing.assert_allclose(g["layer"].W, gW, rtol=1e-14)
    np.testing.assert_allclose(g["layer"].b, gb, rtol=1e-14)
    c = tj.compile(net, p, x, argnums=(0, 1), cache=False)
    gp, gx = c(p, x)
    out = ({"layer": Params(np.empty((3, 4)), np.empty(3)), "scale": np.empty(())}, np.empty(4))
    c(p, x, out=out)
    np.testing.assert_allclose(out[0]["layer"].W, gp["layer"].W, rtol=1e-15)
    np.testing.assert_allclose(out[1], gx, rtol=1e-15)


def test_a_list_of_arrays_is_a_pytree_and_a_list_of_numbers_is_not():
    layers = [RNG.random((5, 6)), RNG.random((4, 3)), RNG.random((2, 4))]

    def loss(ws):
        return np.sum(np.sin(ws[0])) + np.sum(np.cos(ws[1]) * ws[1])

    g = tj.compile(loss, layers, cache=False)(layers)
    assert isinstance(g, list) and [a.shape for a in g] == [(5, 6), (4, 3), (2, 4)]
    np.testing.assert_allclose(g[0], np.cos(layers[0]), rtol=1e-14)
    np.testing.assert_allclose(g[1], np.cos(layers[1]) - np.sin(layers[1]) * layers[1], rtol=1e-13)
    assert not g[2].any()
    nested = [RNG.random(3), [RNG.random(2), (RNG.random(1),)]]
    gn = tj.grad(lambda t: np.sum(t[0] ** 2) + np.sum(t[1][0]) * t[1][1][0][0])(nested)
    np.testing.assert_allclose(gn[1][0], np.full(2, nested[1][1][0][0]), rtol=1e-15)
    with pytest.raises(TypeError, match=r"argument 0.*got list.*np\.asarray"):
        tj.compile(lambda x: np.sum(x), [1.0, 2.0])


def test_has_aux_returns_aux_from_the_same_call():
    def loss(w, x):
        h = np.tanh(w * x)
        return np.sum(h**2), {"h": h, "mean": np.mean(h)}

    w, x = RNG.random(5), RNG.random(5)
    g, aux = tj.grad(loss, has_aux=True)(w, x)
    np.testing.assert_allclose(aux["h"], np.tanh(w * x), rtol=1e-14)
    h = np.tanh(w * x)
    np.testing.assert_allclose(g, 2 * h * (1 - h**2) * x, rtol=1e-12)
    (value, aux2), g2 = tj.value_and_grad(loss, has_aux=True)(w, x)
    assert value == pytest.approx(np.sum(h**2)) and aux2["mean"] == pytest.approx(np.mean(h))


def test_bad_input_names_the_argument_path():
    p = {"layer": Params(RNG.random((3, 4)), RNG.random(3)), "scale": 0.5}
    x = RNG.random(4)
    c = tj.compile(net, p, x, cache=False)
    bad = {"layer": Params(RNG.random((3, 5)), RNG.random(3)), "scale": 0.5}
    with pytest.raises(ValueError, match=r"p\['layer'\]\[0\] must have shape \(3, 4\)"):
        c(bad, x)
    with pytest.raises(ValueError, match="structure"):
        c({"layer": Params(RNG.random((3, 4)), RNG.random(3))}, x)
    with pytest.raises(TypeError, match=r"p\['scale'\] must be a float64 array or a number"):
        tj.compile(net, {"layer": p["layer"], "scale": "big"}, x)
    with pytest.raises(ValueError, match=r"tangents\[0\] must have the shape"):
        tj.jvp(eam, (x,), (np.ones(5),))
    y, vjp_fn = tj.vjp(vec, RNG.random(6))
    with pytest.raises(ValueError, match="cotangent 0 must have the output's shape"):
        vjp_fn(np.ones(4))
    with pytest.raises(ValueError, match="v must have the shape of argument 0"):
        tj.hvp(eam, x, np.ones(3))
    with pytest.raises(tj.TracingError, match=r"must return \(value, aux\)"):
        tj.grad(eam, has_aux=True)(x)
    with pytest.raises(ValueError, match="mode must be one of"):
        tj.compile(eam, x, mode="jacobian-please")


def test_pytrees_without_optree_name_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "optree", None)
    with pytest.raises(ImportError, match=r"tapejit\[pytrees\]"):
        tj.compile(net, {"layer": Params(np.ones((3, 4)), np.ones(3)), "scale": 0.5}, np.ones(4))
    g = tj.compile(eam, np.ones(3), cache=False)  # plain arrays need no optree
    np.testing.assert_allclose(g(np.ones(3)), tj.grad(eam)(np.ones(3)))


def test_newton_example_converges_quadratically():
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / "newton.py"
    spec = importlib.util.spec_from_file_location("newton_example", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    X, y = mod.make_data(300, 6)
    w, H = mod.newton(X, y, iters=8)
    g = tj.grad(mod.loss)(w, X, y)
    assert np.linalg.norm(g) < 1e-12
    np.testing.assert_allclose(H, mod.hessian_by_hand(w, X, y), atol=1e-13)


def _tree_model():
    p = {"layer": Params(RNG.random((3, 4)), RNG.random(3)), "s": 0.5}
    return p, RNG.random(4)


def tree_out(p, x):
    return {"h": np.tanh(p["layer"].W @ x + p["layer"].b) * p["s"], "n": np.sum(x) * p["s"]}


def tree_loss(p, x):
    return np.sum(np.tanh(p["layer"].W @ x + p["layer"].b) ** 2) * p["s"] ** 2


def _flat(p):
    return np.concatenate([p["layer"].W.ravel(), p["layer"].b, [p["s"]]])


def _unflat(v):
    return {"layer": Params(v[:12].reshape(3, 4), v[12:15]), "s": v[15]}


def test_transformations_of_pytree_functions_match_their_flat_forms():
    p, x = _tree_model()
    v = _tree_model()[0]

    def flat_loss(w, x):
        return tree_loss(_unflat(w), x)

    def flat_out(w, x):
        o = tree_out(_unflat(w), x)
        return np.concatenate([o["h"], [o["n"]]])

    w, vw = _flat(p), _flat(v)
    J = tj.jacobian(tree_out)(p, x)  # output structure outside, argument structure inside
    Jf = tj.jacrev(flat_out)(w, x)
    np.testing.assert_allclose(J["h"]["layer"].W, Jf[:3, :12].reshape(3, 3, 4), rtol=1e-13)
    np.testing.assert_allclose(J["n"]["s"], Jf[3, 15], rtol=1e-13)
    H = tj.hessian(tree_loss)(p, x)
    Hf = tj.hessian(flat_loss)(w, x)
    np.testing.assert_allclose(H["layer"].b["s"], Hf[12:15, 15], rtol=1e-12)
    hv = tj.hvp(tree_loss, (p, x), v)
    np.testing.assert_allclose(_flat(hv), Hf @ vw, rtol=1e-12)
    y, yd = tj.jvp(tree_out, (p, x), (v, np.zeros(4)))
    _, ydf = tj.jvp(flat_out, (w, x), (vw, np.zeros(4)))
    np.testing.assert_allclose(yd["h"], ydf[:3], rtol=1e-13)
    y2, vjp_fn = tj.vjp(tree_out, p, x)
    gp, gx = vjp_fn({"h": np.ones(3), "n": 1.0})
    np.testing.assert_allclose(_flat(gp), Jf[:, :16].sum(0), rtol=1e-12)
    with pytest.raises(ValueError, match="structure"):
        vjp_fn({"h": np.ones(3)})
    with pytest.raises(ValueError, match="hvp: v"):
        tj.hvp(tree_loss, (p, x), {"layer": Params(np.ones((3, 5)), np.ones(3)), "s": 1.0})


def test_compiled_transformations_batch_over_rows():
    X, V = RNG.random((6, 8)), RNG.standard_normal((6, 8))
    h = tj.compile(eam, X[0], mode="hvp", cache=False)
    np.testing.assert_array_equal(h.batch(X, V), np.stack([h(x, v) for x, v in zip(X, V)]))
    hess = tj.compile(eam, X[0], mode="hessian", cache=False)
    np.testing.assert_array_equal(hess.batch(X), np.stack([hess(x) for x in X]))
    jf = tj.compile(vec, RNG.random(6), mode="jvp", cache=False)
    ys, ts = jf.batch(RNG.random((4, 6)), RNG.random((4, 6)))
    assert ys.shape == ts.shape == (4, 5)


def test_vjp_of_a_scalar_loss_of_a_pytree():
    """A scalar output of a function of a dict: its cotangent is a number (found by review:
    the zero cotangent was built with shape (1,) and the call refused it)."""
    p = {"w": np.arange(3.0), "b": np.array([0.5])}
    y, vjp_fn = tj.vjp(lambda q: np.sum(q["w"] ** 2) + q["b"][0], p)
    assert y == pytest.approx(5.5)
    (ct,) = vjp_fn(2.0)
    np.testing.assert_allclose(ct["w"], 4.0 * p["w"])
    np.testing.assert_allclose(ct["b"], [2.0])
