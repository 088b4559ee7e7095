"""Defects found by a held-out reliability harness: each test failed before its fix."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tapejit as tj

RNG = np.random.default_rng(77)


def mlp_loss(w, x):
    h = np.tanh(x @ w.reshape(4, 8))
    return np.sum(h * h) + np.sum(np.exp(-h))


def test_concurrent_batches_do_not_share_workspaces():
    """4 threads x 200 batches of a model with a workspace: every row as in a single call."""
    w0, x0 = RNG.standard_normal(32), RNG.standard_normal((5, 4))
    g = tj.compile(mlp_loss, w0, x0, cache=False)
    assert g.workspace_bytes > 0
    W = RNG.standard_normal((16, 32))
    X = np.broadcast_to(x0, (16, 5, 4)).copy()
    want = np.stack([g(W[r], X[r]) for r in range(16)])
    errors = []

    def work():
        for _ in range(200):
            got = g.batch(W, X)
            if not np.array_equal(got, want):
                errors.append(np.max(np.abs(got - want)))
                return

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_batch_with_a_scalar_argument_across_a_guard():
    def f(s, x):
        return (s * s if s > 0 else -s) * np.sum(x)

    g = tj.compile(f, 1.5, np.ones(3), cache=False)
    S = np.array([1.5, -2.0, 0.5, -0.25])
    X = RNG.standard_normal((4, 3))
    G = g.batch(S, X)
    np.testing.assert_allclose(G, [(2 * s if s > 0 else -1.0) * np.sum(x) for s, x in zip(S, X)])


def test_a_captured_array_with_a_zero_length_axis_has_a_cache_key(tmp_path):
    empty = np.zeros((0, 3))

    def f(x):
        return np.sum(x * x) + np.sum(empty)

    g = tj.compile(f, np.ones(3), cache=str(tmp_path))
    np.testing.assert_allclose(g(np.ones(3)), 2 * np.ones(3))


def test_the_disk_cache_key_covers_the_compilers_sources(tmp_path, monkeypatch):
    """An entry written by a compiler with other sources (same version string) is not loaded."""
    from tapejit import api

    def f(x):
        return np.sum(np.exp(x))

    x = RNG.random(5)
    tj.compile(f, x, cache=str(tmp_path))
    before = {p.name for p in tmp_path.rglob("*") if p.is_file()}
    assert tj.compile(f, x, cache=str(tmp_path)).stats["timings"].get("cache_load") is not None
    monkeypatch.setattr(api, "_compiler_digest", lambda: "a-changed-compiler")
    g = tj.compile(f, x, cache=str(tmp_path))
    assert "cache_load" not in g.stats["timings"]  # compiled, not loaded
    after = {p.name for p in tmp_path.rglob("*") if p.is_file()}
    assert after > before
    np.testing.assert_allclose(g(x), np.exp(x), rtol=1e-14)


def test_the_compiler_digest_is_cheap_and_stable():
    import time

    from tapejit import api

    t0 = time.perf_counter()
    d = api._compiler_digest()
    assert time.perf_counter() - t0 < 0.05 and d == api._compiler_digest() and len(d) == 16
