"""Compiled gradients as Dask sees them: ``dask.delayed``, tokenizing, and a
``distributed.Client``'s ``submit``/``scatter``/``map`` (in-process, so the test stays fast).

Dask reads ``func``, ``args`` and ``keywords`` of every ``functools.partial`` (to name a task,
``dask.utils.funcname``, and to tokenize it); ``GradientFunction`` derives from
``functools.partial`` for its C-level calls and used to hide them, so every Dask entry point
raised ``AttributeError: 'GradientFunction' object has no attribute 'func'``."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import tapejit as tj

dask = pytest.importorskip("dask")

RNG = np.random.default_rng(17)


def eam(x):
    rho = np.sum(np.exp(-3.0 * (x + 1.0)))
    return rho**2 + rho**3 + 0.25 * rho**4


@pytest.fixture(scope="module")
def g():
    return tj.compile(eam, RNG.random(12), cache=False)


def test_the_partial_protocol_is_the_gradient(g):
    x = RNG.random(12)
    assert g.args == () and g.keywords == {} and g.func.__name__ == "eam"
    np.testing.assert_array_equal(functools.partial(g.func, *g.args, **g.keywords)(x), g(x))
    assert dask.utils.funcname(g) == "eam"


def test_tokens_are_deterministic_and_tell_gradients_apart(g):
    from dask.base import tokenize

    assert tokenize(g) == tokenize(g)
    assert tokenize(g) != tokenize(tj.compile(eam, RNG.random(13), cache=False))
    assert tokenize(g) != tokenize(tj.compile(lambda x: np.sum(x**3), RNG.random(12), cache=False))


def test_delayed_on_the_threaded_scheduler(g):
    xs = [RNG.random(12) for _ in range(4)]
    tasks = [dask.delayed(g)(x) for x in xs]
    got = dask.compute(*tasks, scheduler="threads")
    for x, r in zip(xs, got):
        np.testing.assert_array_equal(r, g(x))
    lazy = dask.delayed(g, traverse=False)
    np.testing.assert_array_equal(lazy(xs[0]).compute(scheduler="sync"), g(xs[0]))


def test_a_client_submits_scatters_and_maps(g):
    distributed = pytest.importorskip("distributed")
    xs = [RNG.random(12) for _ in range(3)]
    with distributed.Client(processes=False, dashboard_address=None) as client:
        np.testing.assert_array_equal(client.submit(g, xs[0]).result(), g(xs[0]))
        remote = client.scatter(g)
        got = client.submit(lambda h, x: h(x), remote, xs[1]).result()
        np.testing.assert_array_equal(got, g(xs[1]))
        for x, r in zip(xs, client.gather(client.map(g, xs))):
            np.testing.assert_array_equal(r, g(x))
