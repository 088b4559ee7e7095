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
    """4 threads x 1000 batches of a model with a workspace: every row as in a single call
    (sharing the object's batch workspaces, ~98 % of the batches had wrong rows)."""
    w0, x0 = RNG.standard_normal(32), RNG.standard_normal((5, 4))
    g = tj.compile(mlp_loss, w0, x0, cache=False)
    assert g.workspace_bytes > 0
    W, X = RNG.standard_normal((256, 32)), RNG.standard_normal((256, 5, 4))
    want = np.stack([g(W[r], X[r]) for r in range(256)])  # single-threaded single calls
    bad = []

    def work():
        for _ in range(1000):
            got = g.batch(W, X)
            if not np.array_equal(got, want):
                bad.append(np.max(np.abs(got - want)))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad, f"{len(bad)} of 4000 batches had wrong rows"


def test_batch_with_a_scalar_argument_across_a_guard():
    def f(s, x):
        return (s * s if s > 0 else -s) * np.sum(x)

    g = tj.compile(f, 1.5, np.ones(3), cache=False)
    S = np.array([1.5, -2.0, 0.5, -0.25])
    X = RNG.standard_normal((4, 3))
    G = g.batch(S, X)
    np.testing.assert_allclose(G, [(2 * s if s > 0 else -1.0) * np.sum(x) for s, x in zip(S, X)])


def test_a_captured_array_with_a_zero_length_axis_has_a_cache_key(tmp_path):
    """The array stays a captured constant of the trace (``np.sum(empty)`` alone is folded
    away) and is hashed into the disk cache key (``memoryview.cast`` raised TypeError)."""

    def closing_over(empty):
        def f(x):
            return np.sum(x * x) + np.sum(empty * x)

        return f

    for empty in (np.zeros((0, 3)), np.zeros((2, 0, 3))):
        f = closing_over(empty)
        g = tj.compile(f, np.ones(3), cache=str(tmp_path))
        captured = g._primary.stages()["trace"].bindings.values()
        assert any(np.shape(a) == empty.shape for a in captured)
        np.testing.assert_allclose(g(np.ones(3)), 2 * np.ones(3))
        assert tj.compile(f, np.ones(3), cache=str(tmp_path)).stats["cache"] == "hit"


def test_the_disk_cache_key_covers_the_compilers_sources(tmp_path, monkeypatch):
    """An entry written by a compiler with other sources (same version string) is not loaded."""
    from tapejit import pipeline

    def f(x):
        return np.sum(np.exp(x))

    x = RNG.random(5)
    tj.compile(f, x, cache=str(tmp_path))
    before = {p.name for p in tmp_path.rglob("*") if p.is_file()}
    assert tj.compile(f, x, cache=str(tmp_path)).stats["timings"].get("cache_load") is not None
    monkeypatch.setattr(pipeline, "compiler_digest", lambda: "a-changed-compiler")
    g = tj.compile(f, x, cache=str(tmp_path))
    assert "cache_load" not in g.stats["timings"]  # compiled, not loaded
    after = {p.name for p in tmp_path.rglob("*") if p.is_file()}
    assert after > before
    np.testing.assert_allclose(g(x), np.exp(x), rtol=1e-14)


def test_the_compiler_digest_is_cheap_and_stable():
    import time

    from tapejit import pipeline

    t0 = time.perf_counter()
    d = pipeline.compiler_digest()
    assert time.perf_counter() - t0 < 0.05 and d == pipeline.compiler_digest() and len(d) == 16


def test_a_guard_at_a_threshold_follows_the_native_decision():
    """numpy sums pairwise, native code in vector lanes: at a threshold equal to numpy's sum of
    the example the two decide differently. The variant traced by numpy fails its own guard on
    the input it was traced for; the retrace follows the native decision (it raised
    RuntimeError before). The comparison is chosen so that numpy and native code disagree."""
    total = tj.compile(lambda x: np.sum(x) * 1.0, np.ones(1000), cache=False)
    rng = np.random.default_rng(3)
    for _ in range(200):
        x0 = rng.standard_normal(1000) * 1e3
        native = total.value_and_grad(x0)[0]
        if native != float(np.sum(x0)):
            break
    else:
        pytest.skip("no input found where numpy's and the native summation orders differ")
    T = float(np.sum(x0))  # numpy: sum >= T and sum <= T both hold; natively one does not
    if native < T:

        def f(x):
            return np.sum(x * x) if np.sum(x) >= T else np.sum(x)
    else:

        def f(x):
            return np.sum(x * x) if np.sum(x) <= T else np.sum(x)

    g = tj.compile(f, x0, cache=False)
    assert g.specialisations[0]["guards"][0]["outcome"] is True  # numpy's decision
    value, grad = g.value_and_grad(x0)
    assert value == pytest.approx(native, rel=1e-12)  # the else branch, as native code decides
    np.testing.assert_array_equal(grad, np.ones(1000))
    assert g.specialisations[0]["guards"][0]["outcome"] is False
    compiles = g._dispatcher.compiles
    np.testing.assert_array_equal(g(x0), np.ones(1000))  # no further compile
    assert g._dispatcher.compiles == compiles


def test_concurrent_guard_failures_compile_each_specialisation_once():
    def f(x):
        if x[0] > 0:
            return np.sum(x * x)
        return np.sum(np.exp(x))

    g = tj.compile(f, np.array([1.0, 2.0]), cache=False)
    xs = [np.array([-1.0, 2.0]), np.array([1.0, 2.0])]
    barrier = threading.Barrier(8)
    errors = []

    def work(k):
        barrier.wait()
        for i in range(20):
            x = xs[(k + i) % 2]
            got = g(x)
            want = 2 * x if x[0] > 0 else np.exp(x)
            if not np.allclose(got, want, rtol=1e-14):
                errors.append((x, got))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(g.specialisations) == 2
    assert g._dispatcher.compiles == 2


FORK_SCRIPT = r"""
import os, sys, threading, time
import numpy as np
import tapejit as tj

stop = False
def compile_forever():
    k = 0
    while not stop:
        k += 1
        tj.compile(lambda x, k=k: np.sum(np.exp(x * k) + np.sin(x) ** 2), np.ones(50), cache=False)

t = threading.Thread(target=compile_forever, daemon=True)
t.start()
time.sleep(0.3)
for _ in range(8):
    time.sleep(0.05)
    pid = os.fork()
    if pid == 0:
        g = tj.compile(lambda x: np.sum(x * x), np.ones(3), cache=False)
        os._exit(0 if np.allclose(g(np.ones(3)), 2.0) else 3)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        print("child status", status)
        sys.exit(1)
stop = True
print("ok")
"""


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_fork_while_another_thread_compiles_does_not_hang(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "fork.py"
    script.write_text(FORK_SCRIPT)
    cmd = [sys.executable, "-W", "ignore", str(script)]
    r = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


GUARD_FORK_SCRIPT = r"""
import os, threading, time
import numpy as np
import tapejit as tj

def f(x):
    return np.sum(x * x) if x[0] > 0 else np.sum(np.exp(x))

g = tj.compile(f, np.ones(3), cache=False)
held, done = threading.Event(), threading.Event()

def compiling():  # stands for a thread compiling a guard failure's variant at fork time
    with g._dispatcher._compiling():
        held.set()
        done.wait()

threading.Thread(target=compiling, daemon=True).start()
held.wait()
pid = os.fork()
if pid == 0:
    x = -np.ones(3)
    os._exit(0 if np.allclose(g(x), np.exp(x)) else 3)
_, status = os.waitpid(pid, 0)
done.set()
print("ok" if status == 0 else f"child status {status}")
"""


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_a_forked_child_compiles_guard_variants_while_the_parent_holds_the_lock(tmp_path):
    import subprocess
    import sys

    from tapejit.codegen import jit

    assert jit._llvm_lock() is not None  # else fork safety is silently off: see codegen/jit.py
    script = tmp_path / "guard_fork.py"
    script.write_text(GUARD_FORK_SCRIPT)
    cmd = [sys.executable, "-W", "ignore", str(script)]
    r = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


def test_collected_gradients_free_their_engines():
    """Gradients die when dropped (no reference cycle kept alive, no global registry), and the
    process grows by a bounded amount per compile (~5 KB once the heap is warm; docs/runtime.md)."""
    import gc
    import os
    import weakref

    def rss():
        with open(f"/proc/{os.getpid()}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    if not os.path.exists(f"/proc/{os.getpid()}/statm"):
        pytest.skip("needs /proc")
    refs = []
    for k in range(10):
        refs.append(
            weakref.ref(tj.compile(lambda x, k=k: np.sum(np.exp(x * k)), np.ones(8), cache=False))
        )
    gc.collect()
    before = rss()
    for k in range(60):
        g = tj.compile(lambda x, k=k: np.sum(np.sin(x + k) * x), np.ones(8), cache=False)
        refs.append(weakref.ref(g))
        del g
    gc.collect()
    assert all(r() is None for r in refs)
    assert (rss() - before) / 60 < 1024 * 1024  # an engine leak would be megabytes per compile


def _malloc_in_use():
    """Bytes of the C heap in use (glibc's mallinfo2), or None elsewhere. Unlike RSS it does not
    count freed memory the allocator keeps, so a leak shows at once, in any process state."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallinfo2 = libc.mallinfo2
    except (OSError, AttributeError):
        return None

    class Info(ctypes.Structure):
        names = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks")
        _fields_ = [(n, ctypes.c_size_t) for n in (*names, "fordblks", "keepcost")]

    mallinfo2.restype = Info
    info = mallinfo2()
    return info.uordblks + info.hblkhd


def test_the_optimisation_pipeline_frees_its_passes():
    """llvmlite 0.50's ModulePassManager.close() frees nothing (an MRO shadows its dispose), so
    each O3 run leaked its passes and their state: ~107 KB for this module; ~4 KB remain."""
    import gc

    import llvmlite.binding as llvm

    from tapejit.codegen import target

    if _malloc_in_use() is None:
        pytest.skip("needs glibc's mallinfo2")
    g = tj.compile(lambda x: np.sum(np.exp(x * 1.5) + x * x), np.ones(16), cache=False)
    text = g.ir("llvm")
    tm = target.target_machine()
    for _ in range(5):
        target.optimise(llvm.parse_assembly(text), tm)
    gc.collect()
    before = _malloc_in_use()
    for _ in range(40):
        target.optimise(llvm.parse_assembly(text), tm)
    gc.collect()
    assert (_malloc_in_use() - before) / 40 < 32 * 1024
