"""Pickling compiled gradients: round trips, deepcopy, specialisations, a missing ``f``, another
host, damaged payloads, spawned processes, a process pool and a real Dask cluster."""

from __future__ import annotations

import copy
import multiprocessing
import pickle
import threading
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest

import tapejit as tj
from tapejit.runtime import pickling

RNG = np.random.default_rng(5)


def eam(x):
    rho = np.sum(np.exp(-3.0 * (x + 1.0)))
    return rho**2 + rho**3 + 0.25 * rho**4


def eam_grad(x):
    rho = np.sum(np.exp(-3.0 * (x + 1.0)))
    return (2 * rho + 3 * rho**2 + rho**3) * -3.0 * np.exp(-3.0 * (x + 1.0))


def branchy(x):
    if x[0] > 0:
        return np.sum(x * x)
    return np.sum(np.exp(x))


W = RNG.random((50, 50))


def captured(x, s):
    return np.sum(np.tanh(W @ x)) * s


def _call(args):
    """Run in a worker process: the pickled gradient at x."""
    g, x = args
    return g(x), g.value_and_grad(x)[0]


def test_round_trip_protocol_5_with_out_of_band_buffers():
    x = RNG.random(50)
    g = tj.compile(captured, x, 0.5, argnums=(0, 1), cache=False)
    buffers = []
    data = pickle.dumps(g, protocol=5, buffer_callback=buffers.append)
    assert buffers  # the captured constant travels out of band
    h = pickle.loads(data, buffers=buffers)
    assert isinstance(h, tj.GradientFunction) and h is not g
    for a, b in zip(h(x, 0.5), g(x, 0.5)):
        np.testing.assert_array_equal(a, b)
    assert h.value_and_grad(x, 0.5)[0] == g.value_and_grad(x, 0.5)[0]
    X = RNG.random((7, 50))
    np.testing.assert_array_equal(h.batch(X, np.full(7, 0.5))[0], g.batch(X, np.full(7, 0.5))[0])
    assert h.ir("trace") == g.ir("trace") and h.argnums == (0, 1) and h.name == "captured"
    assert h._dispatcher.compiles == g._dispatcher.compiles


def test_deepcopy_and_plain_pickle():
    x = RNG.random(30)
    g = tj.compile(eam, x, cache=False)
    for h in (copy.deepcopy(g), pickle.loads(pickle.dumps(g))):
        np.testing.assert_array_equal(h(x), g(x))
        np.testing.assert_allclose(h(x), eam_grad(x), rtol=1e-12)


def test_specialisations_travel_and_f_recompiles_a_new_one():
    a, b = np.ones(6), -np.ones(6)
    g = tj.compile(branchy, a, cache=False)
    g(b)
    h = pickle.loads(pickle.dumps(g))
    n = h._dispatcher.compiles
    np.testing.assert_allclose(h(a), 2 * a)
    np.testing.assert_allclose(h(b), np.exp(b))
    assert h._dispatcher.compiles == n  # both branches came compiled
    k = pickle.loads(pickle.dumps(tj.compile(branchy, a, cache=False)))
    np.testing.assert_allclose(k(b), np.exp(b))  # f came along: the other branch compiles
    assert k._dispatcher.compiles == 2


def _unpicklable_f():
    lock = threading.Lock()  # neither pickle nor cloudpickle can take a lock

    def f(x):
        with lock:
            pass
        return np.sum(x * x) if x[0] > 0 else np.sum(np.exp(x))

    return f


def test_a_gradient_whose_f_cannot_be_pickled_says_why_at_a_guard_failure():
    f = _unpicklable_f()
    g = tj.compile(f, np.ones(4), cache=False)
    h = pickle.loads(pickle.dumps(g))
    np.testing.assert_allclose(h(np.ones(4)), 2 * np.ones(4))
    with pytest.raises(tj.GuardError, match="cannot recompile here: f could not be pickled"):
        h(-np.ones(4))


def test_another_host_recompiles_from_f_or_raises(monkeypatch):
    x = RNG.random(20)
    data = pickle.dumps(tj.compile(eam, x, cache=False))
    other = dict(pickling.host_key(), cpu="some-other-cpu")
    monkeypatch.setattr(pickling, "host_key", lambda: other)
    h = pickle.loads(data)  # recompiled here from f: never runs code built for another CPU
    np.testing.assert_allclose(h(x), eam_grad(x), rtol=1e-12)
    bad = pickle.dumps(tj.compile(_unpicklable_f(), np.ones(4), cache=False))
    monkeypatch.setattr(pickling, "host_key", lambda: dict(other, cpu="a-third-cpu"))
    with pytest.raises(pickling.GradientUnpicklingError, match="cpu.*f could not be pickled"):
        pickle.loads(bad)


def _parts(g):
    """``(state dict, constants)`` of ``g``'s pickle: what pickle surgery edits."""
    fmt, _, data, consts = g.__reduce__()[1]
    assert fmt == pickling.FORMAT
    return pickle.loads(data), list(consts)


def _forge(state, consts):
    """A payload with ``state`` and ``consts`` whose digest is recomputed (a forgery, not
    damage: only the consistency checks can catch it)."""
    data = pickle.dumps(state)
    consts = tuple(consts)
    return pickling.restore(pickling.FORMAT, pickling.digest(data, consts), data, consts)


def test_damaged_and_foreign_payloads_raise_clear_errors():
    g = tj.compile(eam, RNG.random(10), cache=False)
    data = pickle.dumps(g)
    with pytest.raises((pickle.UnpicklingError, EOFError)):
        pickle.loads(data[: len(data) // 2])
    fmt, digest, state, consts = g.__reduce__()[1]
    obj = bytearray(state)
    obj[len(obj) // 2] ^= 0xFF
    with pytest.raises(pickling.GradientUnpicklingError, match="damaged"):
        pickling.restore(fmt, digest, bytes(obj), consts)
    with pytest.raises(pickling.GradientUnpicklingError, match="damaged"):
        pickling.restore(fmt, digest, state[:-1], consts)  # truncated
    with pytest.raises(pickling.GradientUnpicklingError, match="unknown format"):
        pickling.restore("tapejit-gradient-999", digest, state, consts)
    with pytest.raises(pickling.GradientUnpicklingError, match="unknown format.*gradient-1"):
        pickling.restore({"format": "tapejit-gradient-1"})  # a pickle of the previous format
    s, c = _parts(g)
    with pytest.raises(pickling.GradientUnpicklingError, match="lacks"):
        _forge({k: v for k, v in s.items() if k != "variants"}, c)
    with pytest.raises(pickling.GradientUnpicklingError):
        pickling.restore("not a state")


W7 = RNG.random((7, 7))


def with_constant(x):
    """A captured constant, two specialisations, guards: every part of a payload is present."""
    if x[0] > 0:
        return np.sum(np.tanh(W7 @ x)) + np.sum(x * x)
    return np.sum(np.exp(W7 @ x))


def _two_variants():
    x = RNG.random(7)
    g = tj.compile(with_constant, x, cache=False)
    g(-x)  # a second specialisation
    return g, x


def _regions(data, g):
    """Byte ranges of ``data`` (a protocol-4 pickle of ``g``) holding the state and the
    constants: a flip there must be caught by the digest."""
    _, _, state, consts = g.__reduce__()[1]
    spans = []
    for blob in (state, *(np.ascontiguousarray(c).tobytes() for c in consts)):
        at = data.find(blob)
        assert at >= 0
        spans.append((at, at + len(blob)))
    return spans


def test_a_flipped_bit_anywhere_is_caught_or_harmless():
    """Flip one byte at a time across the whole pickle: the load raises
    GradientUnpicklingError (always, for a byte of the state or a constant: object code,
    constants, signatures, workspace size, guards, options, the pickled f...), or pickle's own
    error for its framing — or it returns a gradient bitwise equal to the original's. The old
    format checksummed only the object code: a flipped constant restored and gave another
    gradient, a flipped shape was read past its end."""
    g, x = _two_variants()
    want = [g(x), g(-x), g.value_and_grad(x)[0]]
    data = pickle.dumps(g, protocol=4)
    spans = _regions(data, g)
    rng = np.random.default_rng(11)
    sample = set(rng.choice(len(data), size=400, replace=False).tolist())
    for a, b in spans:  # and every field boundary region densely: both ends of each span
        sample |= set(range(a, min(b, a + 40))) | set(range(max(a, b - 40), b))
    caught = 0
    for i in sorted(sample):
        bad = bytearray(data)
        bad[i] ^= 1 << (i % 8)
        inside = any(a <= i < b for a, b in spans)
        try:
            h = pickle.loads(bytes(bad))
        except pickling.GradientUnpicklingError:
            caught += 1
            continue
        except Exception as e:  # noqa: BLE001 - pickle's framing, outside the payload
            assert not inside, f"byte {i} of the payload: {type(e).__name__}: {e}"
            continue
        assert not inside, f"byte {i} of the payload was flipped and the load succeeded"
        got = [h(x), h(-x), h.value_and_grad(x)[0]]
        for u, v in zip(got, want):
            np.testing.assert_array_equal(u, v)
    assert caught >= len([i for i in sample if any(a <= i < b for a, b in spans)])


def test_truncations_raise():
    g, x = _two_variants()
    data = pickle.dumps(g)
    for n in range(0, len(data), max(1, len(data) // 300)):
        with pytest.raises(Exception) as e:
            pickle.loads(data[:n])
        assert isinstance(e.value, (pickle.UnpicklingError, EOFError, ValueError)), e.value
    fmt, digest, state, consts = g.__reduce__()[1]
    for n in range(0, len(state), max(1, len(state) // 100)):
        with pytest.raises(pickling.GradientUnpicklingError, match="damaged"):
            pickling.restore(fmt, digest, state[:n], consts)
    with pytest.raises(pickling.GradientUnpicklingError, match="damaged"):
        pickling.restore(fmt, digest, state, (consts[0][:-1],) + consts[1:])
    # out-of-band buffers cut short
    buffers = []
    data = pickle.dumps(g, protocol=5, buffer_callback=buffers.append)
    short = [memoryview(b.raw())[:-8] for b in buffers]
    with pytest.raises((pickling.GradientUnpicklingError, ValueError)):
        pickle.loads(data, buffers=short)


def test_a_forged_constant_of_the_wrong_length_is_never_read():
    """A constant replaced with a shorter one (digest recomputed: a forgery) was read past its
    end; now its declared shape, and then the calling convention embedded in the object code,
    disagree with it."""
    g, x = _two_variants()
    s, c = _parts(g)
    short = [c[0][:3]] + c[1:]
    with pytest.raises(pickling.GradientUnpicklingError, match=r"constant 0 is <f8\[3, 7\]"):
        _forge(s, short)
    for v in s["variants"]:  # the declaration forged to match as well
        v["consts"] = [(i, d, (3, 7) if i == 0 else sh) for i, d, sh in v["consts"]]
    with pytest.raises(pickling.GradientUnpicklingError, match="calling convention.*consts"):
        _forge(s, short)
    s, c = _parts(g)
    with pytest.raises(pickling.GradientUnpicklingError, match="constant 0 is <i8"):
        _forge(s, [c[0].astype(np.int64)] + c[1:])


def _resize(s, n):
    """Every shape of every variant of ``s`` (a 7-vector function's state) forged to ``(n,)``."""
    for v in s["variants"]:
        v["shapes"] = ((n,),)
        v["out_shapes"] = ((n,),)
        name, _, argnums, tr, dyn, _ = v["signature"]
        v["signature"] = (name, ((n,),), argnums, tr, dyn, ((n,),))


def test_a_forged_signature_is_caught_before_native_code_runs():
    """A signature forged from 7 to 3 elements returned a 3-element gradient for a 7-element
    argument, and the process then crashed: the signature is checked against the kernel's
    declared shapes and those against the calling convention in the machine code."""
    g, x = _two_variants()
    s, c = _parts(g)
    v = s["variants"][0]
    name, _, argnums, tr, dyn, _ = v["signature"]
    v["signature"] = (name, ((3,),), argnums, tr, dyn, ((3,),))
    with pytest.raises(pickling.GradientUnpicklingError, match="result.*3.*7"):
        _forge(s, c)
    s, c = _parts(g)
    _resize(s, 3)
    with pytest.raises(pickling.GradientUnpicklingError, match=r"shapes: \[\[7\]\] in the code"):
        _forge(s, c)
    s, c = _parts(g)
    s["variants"][0]["signature"] = (name, ((7,),), (0,), tr, dyn, ((7, 1),))
    with pytest.raises(pickling.GradientUnpicklingError, match="results"):
        _forge(s, c)
    for field, value in (("workspace_bytes", 0), ("workspace_bytes", 64), ("fast_slots", 99)):
        s, c = _parts(g)
        stats = s["variants"][0]["stats"]
        if stats.get(field, 0) == value:
            continue  # (no workspace to forge away)
        stats[field] = value
        with pytest.raises(pickling.GradientUnpicklingError, match=field):
            _forge(s, c)
    s, c = _parts(g)
    s["variants"][0]["n_inputs"] += 1
    with pytest.raises(pickling.GradientUnpicklingError, match="inputs"):
        _forge(s, c)
    s, c = _parts(g)
    s["current"] = 5
    with pytest.raises(pickling.GradientUnpicklingError, match="inconsistent"):
        _forge(s, c)
    h = _forge(*_parts(g))  # an untouched state, re-pickled, still loads
    np.testing.assert_array_equal(h(x), g(x))


MAIN_SCRIPT = """
import pickle, sys
import numpy as np
import tapejit as tj

def f(x):
    if x[0] > 0:
        return np.sum(np.sin(x) * x)
    return np.sum(x ** 3)

g = tj.compile(f, np.linspace(0.1, 1.0, 5), cache=False)
with open(sys.argv[1], "wb") as fh:
    pickle.dump(g, fh)
np.save(sys.argv[2], g(np.linspace(0.1, 1.0, 5)))
"""

LOAD = """
import pickle, sys
import numpy as np
{prelude}
try:
    with open(sys.argv[1], "rb") as fh:
        g = pickle.load(fh)
except Exception as e:
    print(type(e).__name__, e)
    sys.exit(0)
x = np.linspace(0.1, 1.0, 5)
assert np.array_equal(g(x), np.load(sys.argv[2])), "not the same gradient"
try:
    print(list(g(-x)))
except Exception as e:
    print(type(e).__name__, e)
"""


def _python(*args, cwd):
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=240, cwd=cwd
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_a_gradient_of_a_function_in_main_loads_in_a_fresh_interpreter(tmp_path):
    """f defined in a script's __main__ used to be pickled by reference, so a fresh interpreter
    failed with "Can't get attribute 'f' on <module '__main__'>" although the compiled code
    needs no f: f now travels by value (cloudpickle) and is loaded only optionally."""
    (tmp_path / "make.py").write_text(MAIN_SCRIPT)
    block = "import sys; sys.modules['cloudpickle'] = None"
    for attempt in range(3):  # (a tapejit source edited meanwhile changes the host key)
        _python("make.py", "g.pkl", "g.npy", cwd=tmp_path)
        out = _python("-c", LOAD.format(prelude=""), "g.pkl", "g.npy", cwd=tmp_path)
        # without cloudpickle f cannot be loaded: the compiled branch still runs, the other
        # one says why it cannot recompile
        out2 = _python("-c", LOAD.format(prelude=block), "g.pkl", "g.npy", cwd=tmp_path)
        if "another host or toolchain (compiler:" not in out2:
            break
    x = -np.linspace(0.1, 1.0, 5)
    np.testing.assert_allclose(eval(out), 3 * x**2, rtol=1e-14)  # retraced from f by value
    assert out2.startswith("GuardError") and "cannot recompile here: f was pickled" in out2, out2


def test_f_that_cannot_be_loaded_is_optional(monkeypatch):
    """An f pickled by reference that the loading process cannot import: the compiled variants
    run; a longer dynamic argument (which needs a new specialisation) says why it cannot."""
    import types

    mod = types.ModuleType("tapejit_test_vanishing")
    src = """
import numpy as np
import tapejit as tj

def f(p, seq):
    h, _ = tj.scan(lambda h, row: (np.tanh(p * h + row), None), np.zeros(3), seq)
    return np.sum(h * h)
"""
    exec(src, mod.__dict__)
    monkeypatch.setitem(__import__("sys").modules, mod.__name__, mod)
    p, seq = RNG.random(3), RNG.random((5, 3))
    g = tj.compile(mod.f, p, seq, dynamic_argnums=1, cache=False)
    data = pickle.dumps(g)
    monkeypatch.delitem(__import__("sys").modules, mod.__name__)
    h = pickle.loads(data)
    assert h.fn is None
    np.testing.assert_array_equal(h(p, seq), g(p, seq))
    n = h._primary.signature.dynamic[1]
    with pytest.raises(tj.GuardError, match="cannot recompile here: f was pickled.*tapejit_test"):
        h(p, RNG.random((n + 1, 3)))


def test_spawned_pool_and_process_pool_executor():
    x = [RNG.random(40) for _ in range(4)]
    g = tj.compile(eam, x[0], cache=False)
    want = [(g(v), g.value_and_grad(v)[0]) for v in x]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:  # (a worker that fails to unpickle a task would hang the pool)
        got = pool.map_async(_call, [(g, v) for v in x]).get(timeout=300)
    with ProcessPoolExecutor(2, mp_context=ctx) as ex:
        got2 = list(ex.map(_call, [(g, v) for v in x], timeout=300))
    for (ga, va), (gb, vb), (gc, vc) in zip(want, got, got2):
        np.testing.assert_array_equal(ga, gb)
        np.testing.assert_array_equal(ga, gc)
        assert va == vb == vc


def test_dask_sweep_on_a_local_cluster_ships_the_gradient_once_per_worker():
    distributed = pytest.importorskip("distributed")
    import tapejit.tools.dask as tjd

    def model(x):  # a closure: travels by value (cloudpickle), not by module reference
        return eam(x) + 0.5 * np.sum(x * x)

    x = RNG.random(30)
    g = tj.compile(model, x, cache=False)
    X = RNG.random((4000, 30))
    want = g.batch(X)
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster, distributed.Client(cluster) as client:
        got = tjd.batch(g, X, rows_per_task=500)  # 8 tasks
        np.testing.assert_array_equal(got, want)
        counts = client.run(
            lambda: __import__("tapejit.runtime.pickling").runtime.pickling.restored
        )
        assert 1 <= sum(counts.values()) <= len(counts)  # once per worker that ran a task
    with pytest.raises(ValueError, match=r"X must have shape \(m, 30\)"):
        tjd.batch(g, RNG.random((5, 31)))


def test_a_transformation_pickles_and_recompiles_with_its_mode(monkeypatch):
    x, v = RNG.random(8), RNG.standard_normal(8)
    h = tj.compile(eam, x, mode="hvp", cache=False)
    h2 = pickle.loads(pickle.dumps(h))
    np.testing.assert_array_equal(h2(x, v), h(x, v))
    data = pickle.dumps(h)
    here = pickling.host_key()
    monkeypatch.setattr(pickling, "host_key", lambda: dict(here, cpu="elsewhere"))
    h3 = pickle.loads(data)  # recompiled for "this" host, in the same mode
    np.testing.assert_allclose(h3(x, v), h(x, v), rtol=1e-14)
