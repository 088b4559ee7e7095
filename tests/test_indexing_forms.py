"""numpy's indexing forms beyond basic indexing (tapejit/frontend/numpy/np_shape.py ``advanced_getitem``,
``advanced_setitem``, ``_take_along_axis``; tapejit/frontend/tracing.py ``_normalise_key``): ``None``
with ``...`` and integers, integer arrays and boolean masks mixed with ``...``, slices and
``None``, nested lists, negative indices, and ``np.take_along_axis`` with broadcasting indices.

Oracles: numpy itself for the value and the result's shape; for the gradient, the hand formula
(the cotangent ``cos(x[key]) * w`` scatter-added with ``np.add.at`` onto the flat positions
``np.arange(x.size).reshape(x.shape)[key]``, which numpy computes) and float64 central
differences in a random direction; for forward mode, ``cos(x[key]) * t[key]``. Errors are
numpy's ``IndexError`` text, raised as a ``TracingError`` that is also an ``IndexError`` and
names the line of this file."""

from __future__ import annotations

import numpy as np
import pytest

import tapejit as tj

RNG = np.random.default_rng(29)
M3 = np.array([True, False, True])
M23 = np.array([[True, False, True], [False, True, True]])
I2 = np.array([[0, 1], [3, -1]])
_ = slice(None)
E = Ellipsis

# (id, array shape, key). "regression": forms that tapejit already handled before, kept so the
# table covers the whole list of issue 29; every other row was refused before.
GETITEM = [
    # None with ... and integers
    ("dots_none",            (3, 4),    (E, None)),
    ("none_dots",            (3, 4),    (None, E)),
    ("int_none_dots",        (3, 4, 5), (0, None, E)),
    ("dots_none_slice",      (3, 4, 5), (E, None, _)),
    ("none_dots_none",       (2, 3),    (None, E, None)),
    ("dots_negint_none",     (3, 4),    (E, -1, None)),
    ("slice_none_int_dots",  (3, 4, 5), (_, None, 1, E)),
    ("none_none_dots_int",   (2, 3),    (None, None, E, -2)),
    ("regression_slice_none_int", (3, 4), (_, None, 1)),
    ("regression_none",      (3, 4),    None),
    # integer arrays mixed with ... and slices
    ("dots_list",            (3, 4),    (E, [0, 2])),
    ("list_dots_int",        (2, 3, 4), ([0, 1], E, 1)),
    ("slice_list_dots",      (3, 4, 5), (slice(1, None), [0, 2], E)),
    ("dots_list_slice",      (3, 4, 5), (E, [-1, 0], _)),
    ("list_dots_list",       (3, 4, 5), ([0, -1], E, [1, 2])),
    ("dots_list_int",        (3, 4, 5), (E, [0, 2], 1)),
    ("int_dots_list",        (3, 4, 5), (1, E, [0, -2])),
    ("idx2d_dots_none",      (4, 3),    (I2, E, None)),
    ("dots_empty_list_none", (3, 4),    (E, [], None)),
    ("regression_slice_list", (3, 4),   (slice(1, None), [0, 2])),
    ("regression_idx2d_slice", (4, 3),  (I2, _)),
    # None between (or beside) integer arrays
    ("list_none_list",       (3, 4),    ([0, 1], None, [1, 2])),
    ("none_list_slice_list", (2, 3, 4), (None, [0, 1], _, [1, 2])),
    ("list_slice_none_list", (2, 3, 4), ([0, 1], _, None, [1, 2])),
    ("slice_list_none_list", (2, 3, 4), (_, [0, 1], None, [-1, 2])),
    ("slice_none_list_list", (2, 3, 4), (_, None, [0, 1], [1, 2])),
    ("list_none_int",        (3, 4),    ([0, 2], None, -1)),
    ("col_none_row",         (3, 4),    ([[0], [2]], None, [1, 2, 3])),
    ("none_list",            (20, 3),   (np.arange(10).reshape(2, 5) - 3, None)),
    # boolean masks with ...
    ("dots_mask",            (4, 3),    (E, M3)),
    ("mask_dots",            (3, 4),    (M3, E)),
    ("mask2d_dots",          (2, 3, 4), (M23, E)),
    ("dots_mask2d",          (4, 2, 3), (E, M23)),
    ("none_mask_dots",       (3, 4),    (None, M3, E)),
    ("mask_dots_int",        (3, 4, 5), (M3, E, 2)),
    ("none_dots_false_mask", (3, 4),    (None, E, np.zeros(4, bool))),
    # nested lists
    ("nested_dots",          (3, 4, 2), ([[0, 1], [1, 0]], E, 1)),
    ("nested_none",          (3, 4),    ([[0], [-1]], None, [[0, 1]])),
    ("regression_nested",    (3, 4),    [[0, 1], [1, 0]]),
    ("regression_nested_pair", (3, 4),  ([[0], [1]], [[0, 1]])),
]  # fmt: skip


def _ids(table):
    return [row[0] for row in table]


def scatter_reference(shape, key, ct):
    """The adjoint of ``x[key]``: ``ct`` added onto the positions it was read from."""
    pos = np.arange(int(np.prod(shape))).reshape(shape)[key]
    out = np.zeros(int(np.prod(shape)))
    np.add.at(out, pos.ravel(), ct.ravel())
    return out.reshape(shape)


def central_difference(f, x, d, h=1e-6):
    return (f(x + h * d) - f(x - h * d)) / (2 * h)


@pytest.mark.parametrize("name, shape, key", GETITEM, ids=_ids(GETITEM))
def test_getitem_value_and_gradient_match_numpy(name, shape, key):
    x = RNG.normal(size=shape)
    want = x[key]
    w = RNG.normal(size=want.shape)

    def f(x):
        return np.sum(np.sin(x[key]) * w)

    value, grad = tj.value_and_grad(f)(x)
    np.testing.assert_allclose(value, f(x), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grad, scatter_reference(shape, key, np.cos(want) * w), atol=1e-12)
    d = RNG.normal(size=shape)
    np.testing.assert_allclose(np.sum(grad * d), central_difference(f, x, d), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name, shape, key", GETITEM, ids=_ids(GETITEM))
def test_getitem_forward_mode_and_shape_match_numpy(name, shape, key):
    x, t = RNG.normal(size=shape), RNG.normal(size=shape)
    y, y_dot = tj.jvp(lambda x: np.sin(x[key]), (x,), (t,))
    assert np.shape(y) == x[key].shape == np.shape(y_dot)
    np.testing.assert_allclose(y, np.sin(x[key]), atol=1e-12)
    np.testing.assert_allclose(y_dot, np.cos(x[key]) * t[key], atol=1e-12)


# (id, array shape, index shape, axis): indices broadcast against the array off the axis; a
# unit axis of the array used to be indexed past its end ("regression": worked before)
TAKE_ALONG = [
    ("arr_unit_row",      (1, 4),    (3, 2),    1),
    ("arr_unit_mid",      (3, 1, 4), (3, 5, 2), -1),
    ("both_unit",         (3, 1, 4), (1, 5, 6), 2),
    ("arr_unit_axis0",    (4, 1),    (5, 3),    0),
    ("regression_idx_unit_row",  (3, 4),    (1, 2),    1),
    ("regression_idx_unit_last", (2, 3, 4), (2, 2, 1), 1),
    ("regression_same",   (3, 4),    (3, 6),    -1),
    ("regression_flat",   (3, 4),    (7,),      None),
]  # fmt: skip


@pytest.mark.parametrize("name, shape, ishape, axis", TAKE_ALONG, ids=_ids(TAKE_ALONG))
def test_take_along_axis_broadcasts_and_differentiates(name, shape, ishape, axis):
    x = RNG.normal(size=shape)
    n = x.size if axis is None else shape[axis]
    idx = RNG.integers(-n, n, size=ishape)  # negative positions too
    want = np.take_along_axis(x, idx, axis)
    w = RNG.normal(size=want.shape)

    def f(x):
        return np.sum(np.sin(np.take_along_axis(x, idx, axis)) * w)

    value, grad = tj.value_and_grad(f)(x)
    np.testing.assert_allclose(value, f(x), rtol=1e-12, atol=1e-12)
    d = RNG.normal(size=shape)
    np.testing.assert_allclose(np.sum(grad * d), central_difference(f, x, d), rtol=1e-6, atol=1e-8)
    t = RNG.normal(size=shape)
    y, y_dot = tj.jvp(lambda x: np.take_along_axis(x, idx, axis), (x,), (t,))
    assert np.shape(y) == want.shape
    np.testing.assert_allclose(y, want, atol=0)
    np.testing.assert_allclose(y_dot, np.take_along_axis(t, idx, axis), atol=0)


# (id, shape of the array the function creates, key, shape of the value or None for the
# indexing result's shape); each written with = and with +=
SETITEM = [
    ("dots_none",            (3, 4, 1), (E, None),            None),
    ("none_dots",            (3, 4),    (None, E),            (4,)),
    ("list_dots",            (3, 4),    ([0, 1], E),          None),
    ("dots_list",            (3, 4),    (E, [0, -1]),         (2,)),
    ("list_none_list",       (3, 4),    ([0, 1], None, [1, 2]), None),
    ("list_slice_none_list", (2, 3, 4), ([0, 1], _, None, [1, 2]), None),
    ("slice_list_none_list", (2, 3, 4), (_, [0, 1], None, [1, -2]), None),
    ("dots_mask",            (4, 3),    (E, M3),              None),
    ("mask_none",            (3, 4),    (M3, None),           (1, 2, 1, 4)),
    ("repeated_nested_dots", (3, 4),    ([[0, 0], [1, -1]], E), None),
]  # fmt: skip


@pytest.mark.parametrize("op", ["=", "+="])
@pytest.mark.parametrize("name, shape, key, vshape", SETITEM, ids=_ids(SETITEM))
def test_setitem_into_created_array_matches_numpy(name, shape, key, vshape, op):
    vshape = np.zeros(shape)[key].shape if vshape is None else vshape
    weight = RNG.normal(size=shape)

    def f(v):
        y = np.zeros_like(v, shape=shape) + 0.5
        if op == "=":
            y[key] = v
        else:
            y[key] += v
        return np.sum(np.sin(y) * weight)

    v = RNG.normal(size=vshape)
    try:
        f(v)
    except ValueError as e:  # numpy's += keeps the target's shape: no leading unit axes
        with pytest.raises(tj.TracingError, match="non-broadcastable output operand"):
            tj.value_and_grad(f)(v)
        assert "non-broadcastable output operand" in str(e)
        return
    value, grad = tj.value_and_grad(f)(v)
    np.testing.assert_allclose(value, f(v), rtol=1e-12, atol=1e-12)
    d = RNG.normal(size=vshape)
    np.testing.assert_allclose(np.sum(grad * d), central_difference(f, v, d), rtol=1e-6, atol=1e-8)


# keys numpy refuses with IndexError: tapejit raises numpy's message, naming the user's line
REFUSED = [
    ("list_out_of_bounds",       (3, 4), (E, [0, 4])),
    ("negative_out_of_bounds",   (3, 4), ([0, 1], None, [1, -5])),
    ("first_axis_out_of_bounds", (3, 4), ([0, 3], E)),
    ("int_out_of_bounds",        (3, 4), (E, 4, None)),
    ("int_beside_array",         (3, 4), ([0, 1], -5)),
    ("mask_wrong_size",          (3, 4), (E, np.array([True, False]))),
    ("too_many_with_none",       (3, 4), (0, None, 0, 0)),
    ("too_many_basic",           (3, 4), (0, E, 0, 0)),
    ("two_ellipses",             (3, 4), (E, None, E)),
]  # fmt: skip


@pytest.mark.parametrize("name, shape, key", REFUSED, ids=_ids(REFUSED))
def test_refused_key_raises_numpys_index_error(name, shape, key):
    x = np.ones(shape)
    with pytest.raises(IndexError) as numpy_error:
        x[key]
    with pytest.raises(IndexError, match=r"test_indexing_forms\.py:\d+") as ours:
        tj.grad(lambda x: np.sum(x[key]))(x)
    assert isinstance(ours.value, tj.TracingError)
    assert str(numpy_error.value) in str(ours.value)


def test_regression_traced_index_array_is_refused_naming_the_line():
    pattern = r"test_indexing_forms\.py:\d+.*traced array here is not supported.*x\[idx, 0\]"
    with pytest.raises(tj.TracingError, match=pattern):
        tj.grad(lambda x: np.sum(x[E, x[0] > 0]))(np.ones((3, 4)))


def test_traced_position_beside_none_is_refused_naming_the_line():
    with pytest.raises(tj.TracingError, match=r"test_indexing_forms\.py:\d+.*x\[i\]\[None\]"):
        tj.grad(lambda x: tj.fori_loop(0, 3, lambda i, acc: acc + np.sum(x[None, i]), 0.0))(
            np.ones((3, 4))
        )


def test_take_along_axis_refuses_indices_that_do_not_broadcast():
    with pytest.raises(tj.TracingError, match=r"indices of shape \(2, 2\) do not broadcast"):
        tj.grad(lambda x: np.sum(np.take_along_axis(x, np.zeros((2, 2), int), 1)))(np.ones((3, 4)))
