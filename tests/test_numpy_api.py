"""The numpy surface (tapejit/frontend/numpy/numpy_api.py): every function a case in one table, each checked on
random inputs in its domain — the compiled value against numpy itself, the gradient against
float64 central differences in random directions and against the IR interpreter.

A case is ``(id, f, shapes, (lo, hi))``: ``f`` takes arrays of ``shapes`` drawn uniformly from
``[lo, hi]`` and returns a scalar; it is plain numpy code, so numpy is its reference.
"""

from __future__ import annotations

import numpy as np
import pytest

import tapejit as tj
from tapejit.ad import autodiff
from tapejit.core import interpret
from tapejit.frontend import tracing

W = np.random.default_rng(5).standard_normal((4, 4))  # a fixed weight to make outputs scalar


def wsum(y):
    """A scalar that depends on every element of ``y`` with a distinct weight."""
    y = np.asarray(y) if not isinstance(y, tracing.Tracer) else y
    k = np.arange(1.0, 1.0 + np.size(y)).reshape(np.shape(y)) / np.size(y)
    return np.sum(y * np.sin(k + 0.5))


POS = (0.5, 2.0)
ANY = (-2.0, 2.0)
UNIT = (-0.9, 0.9)

CASES = [
    # assembly
    ("concatenate", lambda a, b: wsum(np.concatenate([a, b * b])), [(3,), (4,)], ANY),
    ("concatenate_axis1", lambda a, b: wsum(np.concatenate([a, b], axis=1)), [(2, 3), (2, 2)], ANY),
    ("concatenate_none", lambda a, b: wsum(np.concatenate([a, b], axis=None)), [(2, 3), (2,)], ANY),
    ("stack", lambda a, b: wsum(np.stack([a, b * a])), [(3,), (3,)], ANY),
    ("stack_axis1", lambda a, b: wsum(np.stack([a, b], axis=1)), [(2, 3), (2, 3)], ANY),
    ("stack_axis_neg", lambda a: wsum(np.stack([a, a * a], axis=-1)), [(2, 3)], ANY),
    ("vstack", lambda a, b: wsum(np.vstack([a, b])), [(3,), (2, 3)], ANY),
    ("hstack", lambda a, b: wsum(np.hstack([a, b])), [(3,), (2,)], ANY),
    ("hstack_2d", lambda a, b: wsum(np.hstack([a, b])), [(2, 3), (2, 1)], ANY),
    ("column_stack", lambda a, b: wsum(np.column_stack([a, b])), [(3,), (3, 2)], ANY),
    ("column_stack_of_an_array", lambda a: wsum(np.column_stack(a)) + wsum(np.column_stack(a[None, :] * a)), [(3,)], ANY),
    ("append", lambda a, b: wsum(np.append(a, b)), [(2, 2), (3,)], ANY),
    ("append_axis", lambda a, b: wsum(np.append(a, b, axis=0)), [(2, 2), (1, 2)], ANY),
    # gather indexing
    ("int_array_index", lambda a: wsum(a[[0, 2, 2, -1]] ** 2), [(5,)], ANY),
    ("int_array_2d", lambda a: wsum(a[np.array([[0, 1], [1, 1]])]), [(3, 2)], ANY),
    ("int_arrays_pair", lambda a: wsum(a[[0, 2, 1], [1, 1, 0]]), [(3, 2)], ANY),
    ("int_array_second_axis", lambda a: wsum(a[:, [2, 0, 0]]), [(2, 3)], ANY),
    ("int_array_separated", lambda a: wsum(a[[0, 1], :, [1, 0]]), [(2, 3, 2)], ANY),
    ("bool_mask", lambda a: wsum(a[np.array([True, False, True, True])]), [(4,)], ANY),
    ("bool_mask_2d", lambda a: wsum(a[np.array([[True, False], [False, True]])]), [(2, 2)], ANY),
    ("take", lambda a: wsum(np.take(a, [3, 0, 3])), [(2, 2)], ANY),
    ("take_axis", lambda a: wsum(np.take(a, [1, 1], axis=1)), [(2, 3)], ANY),
    ("take_along_axis", lambda a: wsum(np.take_along_axis(a, np.array([[1, 0], [2, 2]]), 1)), [(2, 3)], ANY),
    ("int_array_write", lambda a: wsum(_write_gather(a)), [(4,)], ANY),
    ("int_and_array_apart", lambda a: wsum(a[1, 2:, [1, 0, 1]]) + wsum(a[:, 1, [2, 0]] ** 2), [(2, 4, 3)], ANY),
    ("int_and_array_apart_write", lambda a: wsum(_write_apart(a)), [(2, 4, 3)], ANY),
    # None and shapes
    ("newaxis", lambda a: wsum(a[:, None] * a[None, :]), [(3,)], ANY),
    ("newaxis_middle", lambda a: wsum(a[1:, np.newaxis, ::2]), [(3, 4)], ANY),
    ("expand_dims", lambda a: wsum(np.expand_dims(a, (0, 2)) * 2.0), [(3,)], ANY),
    ("squeeze", lambda a: wsum(np.squeeze(a) * a.squeeze(0)), [(1, 3)], ANY),
    ("swapaxes", lambda a: wsum(np.swapaxes(a, 0, 2) * 1.5), [(2, 3, 1)], ANY),
    ("moveaxis", lambda a: wsum(np.moveaxis(a, 0, -1)), [(2, 3, 4)], ANY),
    ("broadcast_to", lambda a: wsum(np.broadcast_to(a, (2, 3)) ** 2), [(3,)], ANY),
    ("atleast_2d", lambda a: wsum(np.atleast_2d(a) @ np.ones((3, 1))), [(3,)], ANY),
    ("atleast_1d", lambda a: wsum(np.atleast_1d(a[0] * a[1])), [(2,)], ANY),
    # products
    ("dot_scalar", lambda a, b: wsum(np.dot(a[0], b)), [(2,), (3,)], ANY),
    ("matmul_batched", lambda a, b: wsum(a @ b), [(2, 3, 4), (4, 2)], ANY),
    ("matmul_batched_both", lambda a, b: wsum(np.matmul(a, b)), [(2, 2, 3), (2, 3, 2)], ANY),
    ("matmul_batched_vec", lambda a, b: wsum(a @ b), [(2, 3, 4), (4,)], ANY),
    ("dot_nd", lambda a, b: wsum(np.dot(a, b)), [(2, 3), (2, 3, 2)], ANY),
    ("einsum_ij_jk", lambda a, b: wsum(np.einsum("ij,jk->ik", a, b)), [(2, 3), (3, 2)], ANY),
    ("einsum_trace", lambda a: np.einsum("ii", a), [(3, 3)], ANY),
    ("einsum_sublists", lambda a, b: wsum(np.einsum(a, [0, 1], b, [1, 30])) + wsum(np.einsum(a, [0, 1], b, [1, 2], [2, 0]))
        + wsum(np.einsum(a, [..., 1], b.T, [..., 1])), [(2, 3), (3, 2)], ANY),
    ("einsum_implicit", lambda a, b: wsum(np.einsum("ij,j", a, b)), [(2, 3), (3,)], ANY),
    ("einsum_batch", lambda a, b: wsum(np.einsum("bij,bjk->bki", a, b)), [(2, 2, 3), (2, 3, 2)], ANY),
    ("einsum_outer", lambda a, b: wsum(np.einsum("i,j->ij", a, b)), [(2,), (3,)], ANY),
    ("einsum_ellipsis", lambda a, b: wsum(np.einsum("...ij,...jk->...ik", a, b)), [(2, 2, 3), (2, 3, 2)], ANY),
    ("einsum_ellipsis_broadcast", lambda a, b: wsum(np.einsum("...ij,...jk->...ik", a, b)), [(2, 1, 2, 3), (3, 3, 2)], ANY),
    ("einsum_ellipsis_implicit", lambda a, b: wsum(np.einsum("...ij,jk", a, b)), [(2, 3, 4), (4, 2)], ANY),
    ("einsum_ellipsis_implicit_order", lambda a, b: wsum(np.einsum("Bi,...i", a, b)), [(2, 3), (4, 3)], ANY),
    ("einsum_ellipsis_trailing", lambda a, b: wsum(np.einsum("i...,i->...", a, b)), [(3, 2, 2), (3,)], ANY),
    ("einsum_ellipsis_middle", lambda a, b: wsum(np.einsum("ij...,j->i...", a, b)), [(2, 3, 2, 2), (3,)], ANY),
    ("einsum_ellipsis_diagonal", lambda a: wsum(np.einsum("...ii->...i", a)), [(2, 3, 3)], ANY),
    ("einsum_ellipsis_empty", lambda a, b: np.einsum("...i,i->", a, b), [(4,), (4,)], ANY),
    ("einsum_ellipsis_sum_batch", lambda a, b: wsum(np.einsum("b...,b...->...", a, b)), [(2, 3), (2, 3)], ANY),
    ("einsum_unit_label", lambda a, b: wsum(np.einsum("ij,jk", a, b)), [(2, 1), (3, 2)], ANY),
    ("tensordot", lambda a, b: wsum(np.tensordot(a, b, axes=([1, 0], [0, 1]))), [(2, 3), (3, 2, 2)], ANY),
    ("tensordot_int", lambda a, b: wsum(np.tensordot(a, b, 1)), [(2, 3), (3, 2)], ANY),
    ("outer", lambda a, b: wsum(np.outer(a, b)), [(3,), (2, 2)], ANY),
    ("inner", lambda a, b: wsum(np.inner(a, b)), [(2, 3), (4, 3)], ANY),
    ("kron", lambda a, b: wsum(np.kron(a, b)), [(2, 2), (2, 3)], ANY),
    ("kron_vec", lambda a, b: wsum(np.kron(a, b)), [(2,), (3,)], ANY),
    ("cross3", lambda a, b: wsum(np.cross(a, b)), [(2, 3), (2, 3)], ANY),
    ("vdot", lambda a, b: np.vdot(a, b), [(2, 2), (4,)], ANY),
    # statistics
    ("var", lambda a: np.var(a), [(5,)], ANY),
    ("var_axis_ddof", lambda a: wsum(np.var(a, axis=0, ddof=1)), [(4, 3)], ANY),
    ("std", lambda a: np.std(a) + wsum(a.std(axis=1, keepdims=True)), [(3, 4)], ANY),
    ("prod", lambda a: np.prod(a), [(7,)], ANY),
    ("prod_axis", lambda a: wsum(np.prod(a, axis=1)) + wsum(a.prod(axis=0, keepdims=True)), [(3, 5)], ANY),
    ("cumsum", lambda a: wsum(np.cumsum(a)), [(2, 3)], ANY),
    ("cumsum_axis", lambda a: wsum(np.cumsum(a, axis=0)) + wsum(a.cumsum(1)), [(5, 3)], ANY),
    ("cumprod", lambda a: wsum(np.cumprod(a)), [(6,)], ANY),
    ("diff", lambda a: wsum(np.diff(a)) + wsum(np.diff(a, n=2, axis=0)), [(4, 3)], ANY),
    ("diff_prepend", lambda a: wsum(np.diff(a, prepend=0.5, append=a[:1])), [(4,)], ANY),
    ("average", lambda a: np.average(a), [(4,)], ANY),
    ("average_weights", lambda a, w: wsum(np.average(a, axis=0, weights=w)), [(3, 2), (3,)], POS),
    # elementwise
    ("tan", lambda a: wsum(np.tan(a)), [(5,)], UNIT),
    ("sinh", lambda a: wsum(np.sinh(a)), [(5,)], ANY),
    ("sinh_small", lambda a: wsum(np.sinh(a * 1e-9)) * 1e9, [(5,)], ANY),
    ("cosh", lambda a: wsum(np.cosh(a)), [(5,)], ANY),
    ("arcsinh", lambda a: wsum(np.arcsinh(a)), [(5,)], ANY),
    ("arctan", lambda a: wsum(np.arctan(a * 3.0)), [(5,)], ANY),
    ("arctan2", lambda a, b: wsum(np.arctan2(a, b)), [(5,), (5,)], ANY),
    ("arcsin_arccos", lambda a: wsum(np.arcsin(a) + 2.0 * np.arccos(a)), [(5,)], UNIT),
    ("arccosh", lambda a: wsum(np.arccosh(a)), [(5,)], (1.5, 3.0)),
    ("arctanh", lambda a: wsum(np.arctanh(a)), [(5,)], UNIT),
    ("exp2", lambda a: wsum(np.exp2(a)), [(5,)], ANY),
    ("log2", lambda a: wsum(np.log2(a)), [(5,)], POS),
    ("log10", lambda a: wsum(np.log10(a)), [(5,)], POS),
    ("logaddexp", lambda a, b: wsum(np.logaddexp(a, b)), [(5,), (5,)], ANY),
    ("logaddexp2", lambda a, b: wsum(np.logaddexp2(a, b)), [(5,), (5,)], ANY),
    ("hypot", lambda a, b: wsum(np.hypot(a, b)), [(5,), (5,)], POS),
    ("sinc", lambda a: wsum(np.sinc(a)), [(5,)], ANY),
    ("deg2rad", lambda a: wsum(np.deg2rad(a) + np.rad2deg(a) + np.radians(a) + np.degrees(a)), [(3,)], ANY),
    ("fmax_fmin", lambda a, b: wsum(np.fmax(a, b) + np.fmin(a, b * 0.5)), [(5,), (5,)], ANY),
    ("nan_to_num", lambda a: wsum(np.nan_to_num(a)), [(3,)], ANY),
    ("heaviside", lambda a: wsum(np.heaviside(a, 0.5) * a), [(5,)], ANY),
    ("clip_arrays", lambda a, lo: wsum(np.clip(a, lo - 1.0, lo + 0.5)), [(5,), (5,)], ANY),
    ("clip_method", lambda a: wsum(a.clip(-0.5, 0.5)), [(5,)], ANY),
    ("select", lambda a: wsum(np.select([a < -1, a > 1], [a * a, np.exp(a)], a)), [(6,)], ANY),
    ("where_broadcast", lambda a, b: wsum(np.where(a > 0, a, b)), [(2, 3), (3,)], ANY),
    # structure
    ("diag_2d", lambda a: wsum(np.diag(a)) + wsum(np.diag(a, 1)) + wsum(np.diag(a, -1)), [(3, 4)], ANY),
    ("diag_1d", lambda a: wsum(np.diag(a) @ W[:3, :3]) + wsum(np.diag(a, -1)), [(3,)], ANY),
    ("diagonal", lambda a: wsum(np.diagonal(a)) + wsum(a.diagonal(1)), [(3, 3)], ANY),
    ("diagonal_3d", lambda a: wsum(np.diagonal(a, 0, 1, 2)), [(2, 3, 3)], ANY),
    ("trace", lambda a: np.trace(a) * a[0, 1] + a.trace(), [(3, 3)], ANY),
    ("tril_triu", lambda a: wsum(np.tril(a) + 2.0 * np.triu(a, 1) + np.tril(a, -1)), [(3, 4)], ANY),
    ("repeat", lambda a: wsum(np.repeat(a, 2)) + wsum(a.repeat(3, axis=0)), [(2, 2)], ANY),
    ("repeat_list", lambda a: wsum(np.repeat(a, [1, 0, 2], axis=1)), [(2, 3)], ANY),
    ("tile", lambda a: wsum(np.tile(a, (2, 1, 2))), [(2, 3)], ANY),
    ("pad", lambda a: wsum(np.pad(a, ((1, 0), (2, 1)), constant_values=0.5)), [(2, 3)], ANY),
    ("flip", lambda a: wsum(np.flip(a) + np.flipud(a) + np.fliplr(a) + np.flip(a, 1)), [(2, 3)], ANY),
    ("roll", lambda a: wsum(np.roll(a, 2)) + wsum(np.roll(a, -1, axis=1)), [(2, 3)], ANY),
    ("roll_multi", lambda a: wsum(np.roll(a, (1, 2), axis=(0, 1))), [(3, 3)], ANY),
    ("split", lambda a: sum(wsum(p * (k + 1)) for k, p in enumerate(np.split(a, 3))), [(6, 2)], ANY),
    ("array_split", lambda a: sum(wsum(p) * (k + 1) for k, p in enumerate(np.array_split(a, 3, axis=1))), [(2, 5)], ANY),
    ("split_indices", lambda a: sum(wsum(p) * (k + 1) for k, p in enumerate(np.split(a, [1, 3]))), [(5,)], ANY),
    ("sort", lambda a: wsum(np.sort(a)), [(7,)], ANY),
    ("sort_axis0", lambda a: wsum(np.sort(a, axis=0)), [(5, 3)], ANY),
    ("sort_none", lambda a: wsum(np.sort(a, axis=None)), [(2, 4)], ANY),
    ("partition_kth", lambda a: np.partition(a, 2)[2] * a[0], [(6,)], ANY),
    ("median", lambda a: np.median(a) + wsum(np.median(a, axis=1)), [(3, 4)], ANY),
    ("median_odd", lambda a: np.median(a) * wsum(np.median(a, axis=0, keepdims=True)), [(5, 2)], ANY),
    ("ndarray_sort_in_place", lambda a: wsum(_sorted_copy(a)), [(5,)], ANY),
    ("atleast_3d", lambda a, b: wsum(np.atleast_3d(a) * 2.0) + wsum(np.atleast_3d(b)), [(3,), (2, 2)], ANY),
    ("meshgrid", lambda a, b: sum(wsum(g * (k + 1.0)) for k, g in enumerate(np.meshgrid(a, b))) + wsum(np.meshgrid(a, b, indexing="ij")[1]), [(3,), (2,)], ANY),
    ("trapezoid", lambda y, x: np.trapezoid(y, x) + np.trapezoid(y * y, dx=0.5) + wsum(np.trapezoid(np.outer(y, x), axis=0)), [(5,), (5,)], ANY),
    ("rot90", lambda a: wsum(np.rot90(a)) + wsum(np.rot90(a, 2)) + wsum(np.rot90(a, -1, axes=(1, 0))), [(2, 3)], ANY),
    ("vsplit_hsplit_dsplit", lambda a: sum(wsum(p) * (k + 1) for k, p in enumerate(np.vsplit(a, 2) + np.hsplit(a, [1]) + np.dsplit(a, 2))), [(2, 2, 2)], ANY),
    ("dstack", lambda a, b: wsum(np.dstack([a, b])), [(2, 3), (2, 3)], ANY),
    ("rollaxis", lambda a: wsum(np.rollaxis(a, 2)) + wsum(np.rollaxis(a, 0, 3)), [(2, 3, 4)], ANY),
    ("quantile", lambda a: np.quantile(a, 0.3) + wsum(np.percentile(a, [10.0, 75.0], axis=1)), [(3, 5)], ANY),
    ("median_via_quantile", lambda a: np.quantile(a, 0.5) - np.median(a), [(6,)], ANY),
    ("nan_reductions", lambda a: np.nansum(a) + np.nanmax(a) * np.nanmin(a) + np.nanprod(np.tanh(a)), [(5,)], ANY),
    ("ptp", lambda a: np.ptp(a) + wsum(np.ptp(a, axis=0)), [(3, 4)], ANY),
    ("real_imag_conj", lambda a: wsum(np.real(a) + np.imag(a) + np.conj(a) * a), [(4,)], ANY),
    ("cbrt", lambda a: wsum(np.cbrt(a)), [(5,)], ANY),
    ("gradient", lambda a: sum(wsum(g) * (k + 1) for k, g in enumerate(np.gradient(a))) + wsum(np.gradient(a, 0.5, axis=-1)), [(4, 3)], ANY),
    ("gradient_edge_order_2", lambda a: wsum(np.gradient(a, edge_order=2)) + wsum(np.gradient(a[:3], 2.0)), [(5,)], ANY),
    ("linspace", lambda a, b: wsum(np.linspace(a, b, 5)) + wsum(np.linspace(a, b, 4, endpoint=False)) + wsum(np.linspace(a, b, 1)), [(), ()], ANY),
    ("linspace_arrays", lambda a, b: wsum(np.linspace(a, b, 3)), [(2,), (2,)], ANY),
    ("angle_real_if_close", lambda a: wsum(np.angle(a) + np.angle(a, deg=True) * a + np.real_if_close(a) ** 2), [(5,)], ANY),
    ("fftshift", lambda a: wsum(np.fft.fftshift(a)) + wsum(np.fft.ifftshift(a, axes=1) ** 2), [(3, 4)], ANY),
    ("std_single_element", lambda a: np.std(a) + wsum(np.std(a[None, :], axis=0)) + wsum(a[:, None].std(1)), [(3,)], ANY),
    # rounding and remainders
    ("floor_ceil", lambda a: wsum(np.floor(a * 3) * a + np.ceil(a * 3) * a * a), [(6,)], ANY),
    ("rint_trunc_fix", lambda a: wsum(np.rint(a * 3) * a + np.trunc(a * 3) + np.fix(a * 2) * a), [(6,)], ANY),
    ("round", lambda a: wsum(np.round(a * 3) * a + np.round(a, 1) + a.round(2) * a), [(6,)], ANY),
    ("mod", lambda a, b: wsum(np.mod(a * 5, b) + a * 7 % b + np.remainder(a, -b)), [(6,), (6,)], POS),
    ("mod_signs", lambda a, b: wsum((a * 5) % (b * 0.5 - 2.0)), [(6,), (6,)], ANY),
    ("fmod", lambda a, b: wsum(np.fmod(a * 5, b * 0.5 - 2.0)), [(6,), (6,)], ANY),
    ("rmod", lambda a: wsum(3.7 % (a * a + 0.5)), [(6,)], ANY),
    # reduction keywords and ufunc methods
    ("sum_where_initial", lambda a: wsum(np.sum(a, axis=0, where=a > 0, initial=0.5)) + a.sum(initial=1.0), [(3, 4)], ANY),
    ("max_where_initial", lambda a: np.max(a, where=a < 1.0, initial=-5.0) + a.min(axis=1, initial=0.0).sum(), [(3, 4)], ANY),
    ("mean_where", lambda a: wsum(np.mean(a, axis=1, where=np.array([True, False, True, True]))), [(3, 4)], ANY),
    ("prod_where", lambda a: np.prod(a, where=np.array([True, False, True])), [(3,)], ANY),
    ("ufunc_reduce", lambda a: np.add.reduce(a) @ np.ones(3) + np.multiply.reduce(a[:, 0]) + np.maximum.reduce(a, axis=1).sum() + np.minimum.reduce(a, axis=None), [(4, 3)], ANY),
    ("logaddexp_reduce", lambda a: wsum(np.logaddexp.reduce(a * 3.0, axis=1)) + np.logaddexp.reduce(a[0]), [(3, 4)], ANY),
    ("ufunc_accumulate", lambda a: wsum(np.add.accumulate(a) + np.multiply.accumulate(a, axis=1)), [(3, 4)], ANY),
    # norms
    ("norm_1", lambda a: np.linalg.norm(a, 1) + np.linalg.norm(a, 3), [(4,)], ANY),
    ("norm_inf", lambda a: np.linalg.norm(a, np.inf) + np.linalg.norm(a, -np.inf), [(4,)], ANY),
    ("norm_axis", lambda a: wsum(np.linalg.norm(a, axis=1)), [(3, 4)], ANY),
    ("norm_fro", lambda a: np.linalg.norm(a, "fro") + np.linalg.norm(a, 1) + np.linalg.norm(a, np.inf), [(3, 4)], ANY),
]  # fmt: skip


def _sorted_copy(a):
    y = a * 2.0
    y.sort()
    return y


def _write_apart(a):
    y = a * 1.0
    y[1, 2:, [2, 0]] = a[0, :2, [1, 1]] ** 2  # numpy puts the index axis first: a (2, 2) region
    return y


def _write_gather(a):
    y = np.zeros_like(a, shape=(6,))
    y[[0, 3, 5]] = a[:3] * 2.0
    y[np.array([False, True, False, False, True, False])] += a[3]
    return y


RNG = np.random.default_rng(2026)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_numpy_function_matches_numpy_and_finite_differences(case):
    name, f, shapes, (lo, hi) = case
    xs = [RNG.uniform(lo, hi, s) for s in shapes]
    argnums = tuple(range(len(xs)))
    g = tj.compile(f, *xs, argnums=argnums, cache=False)
    value, grads = g.value_and_grad(*xs)
    assert value == pytest.approx(float(f(*[x.copy() for x in xs])), rel=1e-12, abs=1e-12)
    joint = autodiff.vjp_graph(tracing.trace(f, xs, argnums))
    ref = interpret.evaluate(joint, xs)
    for got, want in zip(grads, ref[1:]):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12)
    for _ in range(2):
        vs = [RNG.standard_normal(x.shape) for x in xs]
        h = 1e-6
        fp = f(*[x + h * v for x, v in zip(xs, vs)])
        fm = f(*[x - h * v for x, v in zip(xs, vs)])
        fd = (fp - fm) / (2 * h)
        dot = sum(np.vdot(gr, v) for gr, v in zip(grads, vs))
        assert dot == pytest.approx(fd, rel=1e-6, abs=1e-7), name


def _sym(a):
    return a + np.swapaxes(a, -1, -2)


def _eig_fn(m):
    """v diag(exp(w)) v^T: the matrix exponential, independent of the eigenvectors' signs."""
    w, v = np.linalg.eigh(m)
    return (v * np.exp(w)) @ v.T


def _spd(a):
    return a @ np.swapaxes(a, -1, -2) + 3.0 * np.eye(a.shape[-1])


KS = np.array([0.0, 1.0, 3.0, 7.0])
XS = np.array([0.5, 1.5, 2.5, 4.0])

try:
    import scipy.special as sc
except ImportError:  # scipy is optional
    sc = None

SPECIAL = [] if sc is None else [
    ("expit", lambda a: wsum(sc.expit(a * 10.0)), [(6,)], ANY),
    ("log_expit", lambda a: wsum(sc.log_expit(a * 20.0)), [(6,)], ANY),
    ("logit", lambda a: wsum(sc.logit(a)), [(6,)], (0.1, 0.9)),
    ("xlogy", lambda a, b: wsum(sc.xlogy(a, b)) + sc.xlogy(0.0, b[0]), [(4,), (4,)], POS),
    ("xlog1py", lambda a, b: wsum(sc.xlog1py(a, b)), [(4,), (4,)], POS),
    ("erf", lambda a: wsum(sc.erf(a * 2.0)), [(6,)], ANY),
    ("erfc", lambda a: wsum(sc.erfc(a * 3.0) + sc.erfc(-a)), [(6,)], ANY),
    ("gammaln", lambda a: wsum(sc.gammaln(a * 3.0)) + wsum(sc.gammaln(a - 3.0)), [(6,)], (0.1, 2.9)),
    ("digamma", lambda a: wsum(sc.digamma(a * 3.0) + sc.psi(a + 5.0)) + wsum(sc.digamma(-a)), [(6,)], (0.1, 0.9)),
    ("poisson_loglik", lambda lam: np.sum(KS * np.log(lam) - lam - sc.gammaln(KS + 1.0)), [(4,)], POS),
    ("gamma_logpdf", lambda a: np.sum((a - 1.0) * np.log(XS) - XS - sc.gammaln(a)), [(4,)], POS),
    ("gamma_rgamma", lambda a: wsum(sc.gamma(a * 3.0) + sc.rgamma(a * 3.0) + sc.gamma(-a) * sc.rgamma(a - 2.0)), [(6,)], (0.1, 0.9)),
    ("gammasgn", lambda a: wsum(sc.gammasgn(a * 3.0 - 2.5) * a), [(6,)], (0.1, 0.9)),
    ("erfinv", lambda a: wsum(sc.erfinv(a) + sc.erfinv(a * 0.3) + sc.erfinv(a ** 3 * 0.9999)), [(6,)], (-0.99, 0.99)),
    ("erfcinv", lambda a: wsum(sc.erfcinv(a) + sc.erfcinv(2.0 - a) + sc.erfcinv(a ** 8 * 1e-30)), [(6,)], (0.05, 1.95)),
    ("beta_betaln", lambda a, b: wsum(sc.beta(a, b) + sc.betaln(a, b * 2.0) + sc.beta(-a, b)), [(4,), (4,)], (0.2, 0.8)),
]  # fmt: skip


@pytest.mark.skipif(sc is None, reason="scipy is not installed")
@pytest.mark.parametrize("case", SPECIAL, ids=[c[0] for c in SPECIAL])
def test_scipy_special_matches_scipy_and_finite_differences(case):
    test_numpy_function_matches_numpy_and_finite_differences(case)


LINALG = [
    ("solve", lambda a, b: wsum(np.linalg.solve(a, b)), [(4, 4), (4,)], ANY),
    ("solve_matrix", lambda a, b: wsum(np.linalg.solve(a, b)), [(3, 3), (3, 2)], ANY),
    ("solve_batched", lambda a, b: wsum(np.linalg.solve(a, b)), [(2, 3, 3), (2, 3, 1)], ANY),
    ("inv", lambda a: wsum(np.linalg.inv(a)), [(4, 4)], ANY),
    ("pinv_tall_wide", lambda a: wsum(np.linalg.pinv(a)) + wsum(np.linalg.pinv(a.T) ** 2), [(4, 2)], ANY),
    ("pinv_batched", lambda a: wsum(np.linalg.pinv(a)), [(2, 3, 4)], ANY),
    ("inv_1x1", lambda a: wsum(np.linalg.inv(a)), [(1, 1)], POS),
    ("det", lambda a: np.linalg.det(a), [(4, 4)], ANY),
    ("det_batched", lambda a: wsum(np.linalg.det(a)), [(3, 2, 2)], ANY),
    ("slogdet", lambda a: np.linalg.slogdet(a)[1] * np.linalg.slogdet(a)[0], [(3, 3)], ANY),
    ("cholesky", lambda a: wsum(np.linalg.cholesky(_spd(a))), [(4, 4)], ANY),
    ("cholesky_upper", lambda a: wsum(np.linalg.cholesky(_spd(a), upper=True)), [(3, 3)], ANY),
    ("eigvalsh", lambda a: wsum(np.linalg.eigvalsh(_sym(a))), [(4, 4)], ANY),
    ("eigh_invariant", lambda a: wsum(_eig_fn(_sym(a))), [(3, 3)], ANY),
    ("eigh_batched", lambda a: wsum(np.linalg.eigh(_sym(a))[0]), [(2, 3, 3)], ANY),
    ("eigh_one_triangle", lambda a: wsum(np.linalg.eigvalsh(a)) + wsum(np.linalg.eigvalsh(a, UPLO="U") ** 2), [(3, 3)], ANY),
    ("matrix_power", lambda a: wsum(np.linalg.matrix_power(a, 3)) + wsum(np.linalg.matrix_power(a, 0)), [(3, 3)], ANY),
    ("matrix_power_neg", lambda a: wsum(np.linalg.matrix_power(_spd(a), -2)), [(3, 3)], ANY),
    ("multi_dot", lambda a, b, c: wsum(np.linalg.multi_dot([a, b, c])), [(2, 3), (3, 4), (4,)], ANY),
    ("gaussian_logpdf", lambda a, x: -0.5 * x @ np.linalg.solve(_spd(a), x)
        - 0.5 * np.linalg.slogdet(_spd(a))[1], [(3, 3), (3,)], ANY),
]  # fmt: skip


@pytest.mark.parametrize("case", LINALG, ids=[c[0] for c in LINALG])
def test_linalg_matches_numpy_and_finite_differences(case):
    test_numpy_function_matches_numpy_and_finite_differences(case)


def test_pivoting_is_needed_and_done():
    """A zero leading entry: elimination without row exchanges would divide by zero."""
    a = np.array([[0.0, 2.0, 1.0], [1.0, 1.0, 0.0], [3.0, 0.5, 2.0]])
    b = np.array([1.0, 2.0, 3.0])
    g = tj.compile(lambda a: np.sum(np.linalg.solve(a, b)), a, cache=False)
    value, grad = g.value_and_grad(a)
    assert value == pytest.approx(np.sum(np.linalg.solve(a, b)), rel=1e-12)
    ainv = np.linalg.inv(a)  # d sum(A^-1 b)/dA = -A^-T 1 (A^-1 b)^T (Giles 2008)
    np.testing.assert_allclose(grad, -np.outer(ainv.T @ np.ones(3), ainv @ b), rtol=1e-10)
    assert float(tj.compile(lambda a: np.linalg.det(a), a, cache=False).value_and_grad(a)[0]) == pytest.approx(np.linalg.det(a), rel=1e-12)


def test_singular_matrices_raise_as_numpy_and_det_is_zero():
    """numpy raises LinAlgError for the inverse of an exactly singular matrix; so does the
    compiled function, at the call, naming the line; det is 0 (not NaN)."""
    a = np.array([[1.0, 2.0], [2.0, 4.0]])
    with pytest.raises(np.linalg.LinAlgError):
        np.linalg.inv(a)
    g = tj.compile(lambda a: np.sum(np.linalg.inv(a)), a, cache=False)
    with pytest.raises(np.linalg.LinAlgError, match=r"Singular matrix.*test_numpy_api\.py"):
        g.value_and_grad(a)
    d = tj.compile(lambda a: np.linalg.det(a), a, cache=False).value_and_grad(a)[0]
    assert d == 0.0


def test_power_of_zero_has_a_zero_exponent_derivative():
    """d(x**y)/dy = log(x) x**y is 0 at x = 0 for y > 0 (it was NaN: -inf * 0)."""
    g = tj.compile(lambda y, x: np.sum(np.power(x, y)), np.array([1.5, 2.0]),
                   np.array([0.0, 0.5]), argnums=(0, 1), cache=False)  # fmt: skip
    gy, gx = g(np.array([1.5, 2.0]), np.array([0.0, 0.5]))
    np.testing.assert_allclose(gy, [0.0, np.log(0.5) * 0.25], rtol=1e-14)
    np.testing.assert_allclose(gx, [0.0, 1.0], rtol=1e-14)


@pytest.mark.parametrize(
    "f,pattern",
    [
        (lambda x: np.sum(x, dtype=int), r"numpy\.sum with dtype="),
        (lambda x: np.reshape(x, (2, 2), order="F").sum(), r"order='F'"),
        (lambda x: np.max(x, where=x > 0), r"does not have an identity"),
        (lambda x: np.var(x, where=x > 0), r"numpy\.var with where="),
        (lambda x: np.cumsum(x, out=np.empty(4)).sum(), r"out="),
    ],
)
def test_keywords_that_would_change_the_result_raise(f, pattern):
    with pytest.raises(tj.TracingError, match=pattern):
        tj.compile(f, np.ones(4), cache=False)


def test_a_compile_inside_a_traced_function_is_a_clear_error():
    """tj.grad nests (tests/test_nested_grad.py); tj.compile and the other transformations do
    not, and say which do."""

    def inner(x):
        return np.sum(x**3)

    def f(x):
        return np.sum(tj.compile(inner, x)(x) * x)

    with pytest.raises(tj.TracingError, match=r"inner is being compiled .* only tapejit.grad"):
        tj.compile(f, np.ones(3), cache=False)


def test_python_round_floor_ceil_are_guarded_integers():
    """round(x)/math.floor(x)/math.ceil(x) give Python ints (guarded, like int()); round(x, k)
    stays traced."""
    import math

    def f(x):
        k = round(x[0]) + math.floor(x[1]) + math.ceil(x[2])
        return k * np.sum(x * x) + round(x[0] * x[1], 2)

    x = np.array([1.4, 2.7, -0.3])
    g = tj.compile(f, x, cache=False)
    k = round(1.4) + math.floor(2.7) + math.ceil(-0.3)
    np.testing.assert_allclose(g(x), 2 * k * x, rtol=1e-14)
    y = np.array([2.6, 2.7, -0.3])  # round(y[0]) differs: a guard, a recompile
    np.testing.assert_allclose(g(y), 2 * (3 + 2 + 0) * y, rtol=1e-14)


def test_fmod_and_mod_divisor_cotangent_where_the_quotient_rounds_low():
    """(x - fmod(x, y)) / y rounds to 2.9999999999999996 here: trunc of it gave -2 instead of
    -3 for d fmod / dy (1.7 % of random inputs); the rule recovers the integer with rint."""
    x = np.array([-9.189785776231307, 7.626143454753798])
    y = np.array([-2.8955118421862336, -1.9263737248951762])
    g = tj.compile(lambda y, x: np.sum(np.fmod(x, y)) + np.sum(np.mod(x, y)) * 2.0, y, x,
                   argnums=(0, 1), cache=False)  # fmt: skip
    gy, gx = g(y, x)
    np.testing.assert_array_equal(gy, -np.trunc(x / y) - 2.0 * np.floor(x / y))
    np.testing.assert_array_equal(gx, [3.0, 3.0])


def test_pinv_of_a_rank_deficient_matrix_without_scipy_is_a_clear_error(monkeypatch):
    """Its derivative needs an SVD (tests/test_svd.py), which needs scipy's LAPACK: without it
    refused at compile time and, through a guard, at run time."""
    from tapejit.frontend.numpy import numpy_linalg

    monkeypatch.setattr(numpy_linalg, "_gesdd_available", lambda: False)
    x = np.random.default_rng(3).standard_normal((3, 4))
    with pytest.raises(tj.TracingError, match="rank-deficient"):
        tj.compile(lambda x: np.sum(np.linalg.pinv(x.T @ x)), x, cache=False)
    g = tj.compile(lambda a: np.sum(np.linalg.pinv(a)), x.T @ x + np.eye(4), cache=False)
    with pytest.raises(tj.TracingError, match="rank-deficient"):
        g(x.T @ x)
