"""Errors a user could not act on (issue 29), now supported or clear: dataclass arguments, and
scipy functions that cannot trace named by the user's line and function."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import tapejit as tj


@dataclasses.dataclass
class Params:
    w: np.ndarray
    b: float


@dataclasses.dataclass(frozen=True)
class Frozen:
    a: np.ndarray
    inner: Params


def test_a_standard_library_dataclass_is_a_pytree():
    """Was "p must be a float64 array or a number, got Params"."""
    x = np.array([0.5, -1.0, 2.0])

    def loss(p, x):
        return np.sum(np.tanh(p.w * x + p.b) ** 2)

    p = Params(np.array([1.0, 2.0, 3.0]), 0.25)
    value, grad = tj.value_and_grad(loss)(p, x)
    t = np.tanh(p.w * x + p.b)
    assert value == pytest.approx(np.sum(t**2), rel=1e-14)
    assert isinstance(grad, Params)
    np.testing.assert_allclose(grad.w, 2 * t * (1 - t**2) * x, rtol=1e-13)
    assert grad.b == pytest.approx(np.sum(2 * t * (1 - t**2)), rel=1e-13)

    def nested(f):
        return np.sum(f.a * f.inner.w) * f.inner.b

    fz = Frozen(np.array([1.0, 2.0, 3.0]), Params(np.array([4.0, 5.0, 6.0]), 2.0))
    g = tj.grad(nested)(fz)
    assert isinstance(g, Frozen) and isinstance(g.inner, Params)
    np.testing.assert_allclose(g.a, fz.inner.w * 2.0)
    np.testing.assert_allclose(g.inner.w, fz.a * 2.0)
    assert g.inner.b == pytest.approx(np.sum(fz.a * fz.inner.w))


def test_scipy_code_that_cannot_trace_names_the_users_line_and_the_function():
    scipy_linalg = pytest.importorskip("scipy.linalg")

    def f(x):
        a = x.reshape(2, 2) @ x.reshape(2, 2).T + np.eye(2)
        return np.sum(scipy_linalg.sqrtm(a))  # HERE (cho_factor, expm & co. trace: test_linalg_*)

    with pytest.raises(tj.TracingError) as e:
        tj.grad(f)(np.array([1.0, 2.0, 3.0, 4.0]))
    msg = str(e.value)
    line = next(i for i, t in enumerate(open(__file__), 1) if "# HERE" in t and "scipy_linalg.sqrtm" in t)
    assert msg.startswith(f"{__file__}:{line} in f()"), msg
    assert "scipy.linalg.sqrtm" in msg and "np.linalg" in msg


@dataclasses.dataclass
class Layer:
    w: np.ndarray
    activation: str = "tanh"
    bias: np.ndarray | None = None


def test_a_dataclass_fields_that_are_metadata_are_not_leaves():
    """A string or None field is part of the structure (another value: another specialisation),
    not an argument that must be an array."""

    def loss(layer, x):
        act = np.tanh if layer.activation == "tanh" else np.sin
        z = layer.w * x if layer.bias is None else layer.w * x + layer.bias
        return np.sum(act(z) ** 2)

    x = np.array([0.5, -1.0, 2.0])
    layer = Layer(np.array([1.0, 2.0, 3.0]))
    g = tj.grad(loss)(layer, x)
    assert isinstance(g, Layer) and g.activation == "tanh" and g.bias is None
    t = np.tanh(layer.w * x)
    np.testing.assert_allclose(g.w, 2 * t * (1 - t**2) * x, rtol=1e-13)
    other = Layer(np.array([1.0, 2.0, 3.0]), "sin", np.ones(3))  # another structure
    g2 = tj.grad(loss)(other, x)
    z = other.w * x + 1.0
    np.testing.assert_allclose(g2.w, 2 * np.sin(z) * np.cos(z) * x, rtol=1e-13)
    np.testing.assert_allclose(g2.bias, 2 * np.sin(z) * np.cos(z), rtol=1e-13)
