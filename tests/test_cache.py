"""The on-disk cache of compiled objects: hits and misses, corruption, concurrent writers,
bit-identical results, the switches, and the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tapejit as tj
from tapejit.codegen.cache import MAGIC, ObjectCache, cache_key

RNG = np.random.default_rng(3)


def eam(x):
    rho = np.sum(np.exp(-3.0 * (x + 1.0)))
    return rho**2 + rho**3 + 0.25 * rho**4


def _entry(cache):
    (path,) = cache.entries()
    return path


def test_miss_then_hit_gives_bit_identical_results(tmp_path):
    cache = ObjectCache(tmp_path)
    x = RNG.random(37)
    cold = tj.compile(eam, x, cache=cache)
    warm = tj.compile(eam, x, cache=cache)
    off = tj.compile(eam, x, cache=False)
    assert (cold.stats["cache"], warm.stats["cache"], off.stats["cache"]) == ("miss", "hit", "off")
    assert "llvm_opt" not in warm.stats["timings"] and "cache_load" in warm.stats["timings"]
    for _ in range(3):
        x = RNG.random(37)
        np.testing.assert_array_equal(warm(x), cold(x))
        np.testing.assert_array_equal(warm(x), off(x))
    assert warm.ir("llvm-opt") == cold.ir("llvm-opt")
    assert "vfmadd" in warm.ir("asm") or "mul" in warm.ir("asm")
    assert cache.info()["entries"] == 1


def test_a_different_program_is_a_different_entry(tmp_path):
    cache = ObjectCache(tmp_path)
    tj.compile(eam, RNG.random(10), cache=cache)
    tj.compile(eam, RNG.random(11), cache=cache)
    tj.compile(lambda x: np.sum(np.sin(x)), RNG.random(10), cache=cache)
    assert cache.info()["entries"] == 3
    assert cache_key("m", "tapejit-1") != cache_key("m", "tapejit-2")


def test_the_key_tells_apart_what_changes_the_code(tmp_path):
    """The key is built from node digests, not the printed trace: it must still separate
    constants (including the sign of zero), operand order of non-commutative ops, a loop body's
    contents and argument order, and must not separate ``x*y`` from ``y*x``."""
    cache = ObjectCache(tmp_path)
    x, y = RNG.random(4), RNG.random(4)
    variants = [
        lambda x, y: np.sum(x * y),
        lambda x, y: np.sum(x * y + 0.0),
        lambda x, y: np.sum(x * y + -0.0),
        lambda x, y: np.sum(x - y),
        lambda x, y: np.sum(y - x),
        lambda x, y: tj.fori_loop(0, 3, lambda i, c: c * x, y).sum(),
        lambda x, y: tj.fori_loop(0, 3, lambda i, c: c + x, y).sum(),
        lambda x, y: tj.fori_loop(0, 4, lambda i, c: c + x, y).sum(),
    ]
    for f in variants:
        tj.compile(f, x, y, argnums=(0, 1), cache=cache)
    tj.compile(variants[0], x, y, argnums=(1, 0), cache=cache)
    assert cache.info()["entries"] == len(variants) + 1
    again = tj.compile(lambda x, y: np.sum(y * x), x, y, argnums=(0, 1), cache=cache)
    assert again.stats["cache"] == "hit"
    assert cache.info()["entries"] == len(variants) + 1


def _garble(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _truncate(path):
    path.write_bytes(path.read_bytes()[: len(MAGIC) + 40])


def _foreign(path):
    path.write_bytes(b"not a tapejit entry at all")


def _other_key(path):
    # a valid entry of another module stored under this key's name
    other = tj.compile(
        lambda x: np.sum(np.cos(x)), RNG.random(5), cache=ObjectCache(path.parent / "o")
    )
    (src,) = ObjectCache(path.parent / "o").entries()
    path.write_bytes(src.read_bytes())
    del other


@pytest.mark.parametrize("damage", [_garble, _truncate, _foreign, _other_key])
def test_a_damaged_entry_is_ignored_and_replaced(tmp_path, damage):
    cache = ObjectCache(tmp_path)
    x = RNG.random(16)
    ref = tj.compile(eam, x, cache=cache)(x)
    path = _entry(cache)
    damage(path)
    again = tj.compile(eam, x, cache=cache)
    assert again.stats["cache"] == "miss"
    np.testing.assert_array_equal(again(x), ref)
    assert tj.compile(eam, x, cache=cache).stats["cache"] == "hit"  # replaced by a good entry


def _fifo(path):
    path.unlink()
    os.mkfifo(path)  # opened for reading in blocking mode, it waits for a writer forever


def _dev_zero(path):
    path.unlink()
    path.symlink_to("/dev/zero")  # read to its end, it never ends


def _link_to_a_good_entry(path):
    good = path.parent / "elsewhere.bin"
    path.rename(good)
    path.symlink_to(good)  # not written by the cache: not followed


def _directory(path):
    path.unlink()
    path.mkdir()


def _bounded(fn, seconds=120):
    """``fn()``, failing (not hanging) the test when it takes longer than ``seconds``."""
    import threading

    result = []
    t = threading.Thread(target=lambda: result.append(fn()), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{fn} did not return within {seconds} s"
    return result[0]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX special files")
@pytest.mark.parametrize("special", [_fifo, _dev_zero, _link_to_a_good_entry])
def test_an_entry_that_is_not_a_regular_file_is_a_miss_and_replaced(tmp_path, special):
    """A FIFO made the next compile wait forever for a writer, a symlink to /dev/zero read
    without bound: an entry is opened without following links or blocking and must be a
    regular file, else it is a miss, and the next store replaces it with a regular file."""
    if special is _dev_zero and not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    cache = ObjectCache(tmp_path)
    x = RNG.random(16)
    ref = tj.compile(eam, x, cache=cache)(x)
    path = _entry(cache)
    key = path.name[: -len(".tjo")]
    special(path)
    assert _bounded(lambda: cache.load(key), 30) is None
    again = _bounded(lambda: tj.compile(eam, x, cache=cache))
    assert again.stats["cache"] == "miss"
    np.testing.assert_array_equal(again(x), ref)
    assert path.is_file() and not path.is_symlink()
    assert tj.compile(eam, x, cache=cache).stats["cache"] == "hit"
    assert cache.info()["entries"] == 1


def test_an_entry_that_is_a_directory_is_a_miss(tmp_path):
    cache = ObjectCache(tmp_path)
    x = RNG.random(16)
    tj.compile(eam, x, cache=cache)
    path = _entry(cache)
    _directory(path)
    assert cache.load(path.name[: -len(".tjo")]) is None
    assert _bounded(lambda: tj.compile(eam, x, cache=cache)).stats["cache"] == "miss"


def test_switches(tmp_path, monkeypatch):
    x = RNG.random(8)
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(tmp_path / "env"))
    assert tj.compile(eam, x).stats["cache"] == "miss"
    assert tj.compile(eam, x).stats["cache"] == "hit"
    assert tj.compile(eam, x, cache=False).stats["cache"] == "off"
    assert tj.compile(eam, x, cache=str(tmp_path / "explicit")).stats["cache"] == "miss"
    monkeypatch.setenv("TAPEJIT_CACHE", "0")
    assert tj.compile(eam, x).stats["cache"] == "off"


def test_unwritable_cache_only_costs_a_recompile(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache directory should be")
    g = tj.compile(eam, RNG.random(8), cache=ObjectCache(blocker / "sub"))
    assert g.stats["cache"] == "miss"
    assert g(np.ones(8)).shape == (8,)


SCRIPT = textwrap.dedent(
    """
    import sys, numpy as np, tapejit as tj
    def eam(x):
        rho = np.sum(np.exp(-3.0 * (x + 1.0)))
        return rho**2 + rho**3 + 0.25 * rho**4
    x = np.linspace(0.0, 1.0, 200)
    g = tj.compile(eam, x)
    np.save(sys.argv[1], g(x))
    print(g.stats["cache"])
    """
)


def test_two_processes_compiling_at_once(tmp_path):
    env = {**os.environ, "TAPEJIT_CACHE_DIR": str(tmp_path / "c")}
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(tmp_path / f"g{i}.npy")],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), results
    third = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "g2.npy")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert third.stdout.strip() == "hit", third
    gs = [np.load(tmp_path / f"g{i}.npy") for i in range(3)]
    np.testing.assert_array_equal(gs[0], gs[1])
    np.testing.assert_array_equal(gs[0], gs[2])
    assert ObjectCache(tmp_path / "c").info()["entries"] == 1
    assert not [p for p in (tmp_path / "c").iterdir() if p.name.startswith(".tmp-")]


def test_cli_cache_info_and_clear(tmp_path):
    env = {**os.environ, "TAPEJIT_CACHE_DIR": str(tmp_path)}
    tj.compile(eam, RNG.random(5), cache=ObjectCache(tmp_path))
    run = lambda *a: subprocess.run(
        [sys.executable, "-m", "tapejit.tools.cli", "cache", *a],  # noqa: E731
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    info = run("info")
    assert info.returncode == 0 and "entries:   1" in info.stdout and str(tmp_path) in info.stdout
    cleared = run("clear")
    assert cleared.returncode == 0 and "removed 1" in cleared.stdout
    assert ObjectCache(tmp_path).info()["entries"] == 0


def test_lazy_grad_compiles_once_per_signature():
    g = tj.grad(eam)
    x5, x6 = RNG.random(5), RNG.random(6)
    a = g(x5)
    first = g.specialisations[((5,),)]
    np.testing.assert_array_equal(g(x5), a)
    g(x6)
    assert g.specialisations[((5,),)] is first and len(g.specialisations) == 2


def test_generated_code_is_deterministic_within_a_process():
    x = RNG.random(12)
    a, b = tj.compile(eam, x, cache=False), tj.compile(eam, x, cache=False)
    assert a.ir("llvm") == b.ir("llvm")


def test_a_hit_skips_everything_after_tracing(tmp_path):
    """The key is the trace, so a hit runs no reverse mode, passes, lowering or LLVM; the later
    stages are still printable (recomputed on demand) and agree with a cold compile."""
    cache = ObjectCache(tmp_path)
    x = RNG.random(20)
    cold = tj.compile(eam, x, cache=cache)
    warm = tj.compile(eam, x, cache=cache)
    assert set(warm.stats["timings"]) == {"trace", "cache_key", "cache_load"}
    assert {"autodiff", "passes", "plan", "lower", "llvm_opt"} <= set(cold.stats["timings"])
    for stage in ("grad", "opt", "plan", "llvm", "llvm-opt"):
        assert warm.ir(stage) == cold.ir(stage), stage
    for key in ("kernels", "workspace_bytes", "work", "nodes", "passes"):
        assert warm.stats[key] == cold.stats[key], key


def test_captured_constants_are_part_of_the_key(tmp_path):
    """A changed captured array is a different trace binding, hence a miss; constants the passes
    fold (``c[1:3] * 2``) and captured arrays used as they are both come back right on a hit."""
    cache = ObjectCache(tmp_path)
    x = RNG.random(6)
    for c in (RNG.random(6), RNG.random(6)):
        f = lambda p, c=c: np.sum(np.sin(p) * c) + np.sum(c[1:3] * 2.0) * p[0]  # noqa: E731
        ref = np.cos(x) * c
        ref[0] += np.sum(c[1:3] * 2.0)
        cold, warm = tj.compile(f, x, cache=cache), tj.compile(f, x, cache=cache)
        assert (cold.stats["cache"], warm.stats["cache"]) == ("miss", "hit")
        np.testing.assert_allclose(warm(x), ref, rtol=1e-13)
        np.testing.assert_array_equal(warm(x), cold(x))
    assert cache.info()["entries"] == 2


def test_an_entry_that_does_not_decode_is_a_miss(tmp_path):
    """A well-framed entry whose description is broken (e.g. written by a future version under
    the same key) is not trusted: recompiled and replaced."""
    cache = ObjectCache(tmp_path)
    x = RNG.random(9)
    ref = tj.compile(eam, x, cache=cache)(x)
    path = _entry(cache)
    key = path.name[: -len(".tjo")]
    parts = cache.load(key)
    cache.store(key, {**parts, "meta": b"{not json"})
    again = tj.compile(eam, x, cache=cache)
    assert again.stats["cache"] == "miss"
    np.testing.assert_array_equal(again(x), ref)
    assert tj.compile(eam, x, cache=cache).stats["cache"] == "hit"
