"""Differential fuzzer: random numpy programs (tests/fuzzgen.py), each compiled and checked —
its value against plain numpy (rel 1e-9), its gradient against float64 central differences in
random directions (JAX's ``check_grads`` method: ``<grad, v>`` vs ``(f(x+hv) - f(x-hv)) / 2h``,
rel 1e-5 + abs 1e-6 of the scale), at the example input and at a second input (which may take
another branch of a guard: a recompile). Forward mode on the trace, by the interpreter, at the
example input: the JVP (``tapejit.ad.forward.jvp_graph``) against the same central difference,
and the Hessian-vector product (forward over reverse: ``jvp_graph(vjp_graph(trace))``) against
central differences of the trace's gradient ``(g(x+hv) - g(x-hv)) / 2h`` (h = 1e-5: rel 1e-5
+ abs 1e-6 of the gradient's scale), unless the program sits on a kink there.

A clear error from tapejit (``TracingError``, ``TypeError``/``ValueError`` naming what is wrong)
is counted, not failed; an internal error or a mismatch fails, printing the program as
standalone Python with its inputs. A finite difference that changes with its step (the program
sits on a kink of ``max``, ``where`` or a guard) is counted as non-smooth and skipped.

CI runs a bounded, derandomised profile; ``TAPEJIT_FUZZ_EXAMPLES=20000`` runs a long random one
(its seed is printed). Counts go to stdout (``-s``) and ``$TMPDIR/tapejit-fuzz-counts.json``.
"""

from __future__ import annotations

import collections
import json
import linecache
import os
import tempfile
import warnings

import numpy as np
import pytest
from fuzzgen import program
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import tapejit as tj
from tapejit.ad import autodiff, forward
from tapejit.core import interpret
from tapejit.frontend import tracing

LONG = int(os.environ.get("TAPEJIT_FUZZ_EXAMPLES", "0"))
EXAMPLES = LONG or 150
#: the long profile's random seed (TAPEJIT_FUZZ_SEED replays one)
SEED = int(os.environ.get("TAPEJIT_FUZZ_SEED", int.from_bytes(os.urandom(4), "little")))
COUNTS: collections.Counter = collections.Counter()
FEATURES: collections.Counter = collections.Counter()


def _settings():
    common = dict(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    return settings(derandomize=not LONG, **common)


def _report(src: str, xs, what: str) -> str:
    args = ", ".join(f"np.array({np.asarray(x).tolist()!r})" for x in xs)
    return (
        f"{what}\n--- standalone reproducer ---\nimport numpy as np, tapejit as tj\n\n{src}\n"
        f"xs = [{args}]\n"
        "g = tj.compile(f, *xs, argnums=tuple(range(len(xs))), cache=False)\n"
        "print(g.value_and_grad(*xs), f(*xs))\n"
    )


def _fd(f, xs, vs, h):
    with np.errstate(all="ignore"):
        fp = f(*[x + h * v for x, v in zip(xs, vs)])
        fm = f(*[x - h * v for x, v in zip(xs, vs)])
    return (float(fp) - float(fm)) / (2 * h)


def _against_fd(f, xs, vs, got: float, scale: float) -> tuple[str, float, float]:
    """``got`` (a directional derivative of ``f`` at ``xs`` along ``vs``) against central
    differences: ``("ok" | "kink" | "mismatch", fd at h = 1e-6, fd at h = 1e-7)``. It must match
    the h = 1e-6 difference within 1e-5 relative (+ 1e-6 of the value's scale), or, when that
    one's truncation error shows (steep curvature: sin of a large sum), the h = 1e-7 one within
    the same tolerance; a difference that moves by more than 1e-4 between the steps is not
    smooth there (a kink)."""

    def close(fd: float) -> bool:
        return abs(got - fd) <= 1e-5 * max(abs(fd), abs(got)) + 1e-6 * scale

    fd = _fd(f, xs, vs, 1e-6)
    if close(fd):
        return "ok", fd, fd
    fd2 = _fd(f, xs, vs, 1e-7)
    if close(fd2):
        return "ok", fd, fd2
    if abs(fd2 - fd) > 1e-4 * max(1.0, abs(fd)):
        return "kink", fd, fd2
    return "mismatch", fd, fd2


def _discontinuous(f, xs, want, rng) -> bool:
    """Whether numpy's value of ``f`` changes by more than rounding when ``xs`` move by a few
    ulps: the point sits on a jump (a comparison of two values equal up to rounding, which
    native math within 1 ulp of numpy may decide the other way)."""
    for _ in range(4):
        ys = [x * (1.0 + 1e-13 * rng.standard_normal(np.shape(x))) for x in xs]
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if abs(float(f(*ys)) - want) > 1e-9 * max(1.0, abs(want)):
                return True
    return False


def _check_point(f, g, xs, src, rng) -> str:
    """'ok' or 'kink'; raises AssertionError with a reproducer on a mismatch."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = float(f(*[x.copy() for x in xs]))
        value, grads = g.value_and_grad(*xs)
    if not np.isfinite(want):
        return "nonfinite"
    scale = max(1.0, abs(want))
    if not value == pytest.approx(want, rel=1e-9, abs=1e-9 * scale):
        if _discontinuous(f, xs, want, rng):
            return "kink"  # numpy's own value jumps within rounding of x: a tie in a comparison
        raise AssertionError(_report(src, xs, f"value {value!r} != numpy {want!r}"))
    grads = grads if isinstance(grads, tuple) else (grads,)
    for _ in range(2):
        vs = [rng.standard_normal(np.shape(x)) for x in xs]
        got = sum(float(np.vdot(gr, v)) for gr, v in zip(grads, vs))
        verdict, fd, fd2 = _against_fd(f, xs, vs, got, scale)
        if verdict == "kink":
            return "kink"  # the finite difference depends on its step: not smooth here
        if verdict == "mismatch":
            raise AssertionError(
                _report(src, xs, f"<grad, v> = {got!r}, central difference {fd!r} (h=1e-6), {fd2!r} (h=1e-7)")
            )
    return "ok"


def _report_forward(src: str, xs, vs, what: str) -> str:
    def arr(a):
        return f"np.array({np.asarray(a).tolist()!r})"

    return (
        f"{what}\n--- standalone reproducer ---\nimport numpy as np, tapejit as tj\n"
        "from tapejit import autodiff, forward, interpret, tracing\n\n"
        f"{src}\nxs = [{', '.join(map(arr, xs))}]\nvs = [{', '.join(map(arr, vs))}]\n"
        "g = tracing.trace(f, xs, tuple(range(len(xs))))\n"
        "print(interpret.evaluate(forward.jvp_graph(g), xs + vs))  # (value, J v)\n"
        "print(interpret.evaluate(forward.jvp_graph(autodiff.vjp_graph(g)), xs + vs))"
        "  # (value, grads, <grad, v>, H v)\n"
    )


def _flat(values) -> np.ndarray:
    return np.concatenate([np.ravel(v) for v in values])


def _check_forward(f, xs, src, rng) -> tuple[str, str]:
    """(JVP outcome, HVP outcome) at ``xs``, each 'ok', 'kink' (a finite difference that
    depends on its step) or 'skipped'; raises AssertionError with a reproducer on a mismatch."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = float(f(*[x.copy() for x in xs]))
        g = tracing.trace(f, xs, tuple(range(len(xs))))
        vs = [rng.standard_normal(np.shape(x)) for x in xs]
        try:
            value, tangent = interpret.evaluate(forward.jvp_graph(g), [*xs, *vs])
        except Exception as e:  # noqa: BLE001
            raise AssertionError(_report_forward(src, xs, vs, f"forward mode: {e!r}")) from e
        scale = max(1.0, abs(want))
        if value != pytest.approx(want, rel=1e-9, abs=1e-9 * scale):
            return "kink", "skipped"  # the trace's branch is not numpy's here (a tie)
        got = float(tangent)
        verdict, fd, fd2 = _against_fd(f, xs, vs, got, scale)
        if verdict == "kink":
            return "kink", "skipped"
        if verdict == "mismatch":
            raise AssertionError(
                _report_forward(src, xs, vs, f"JVP {got!r}, central difference {fd!r} (h=1e-6), {fd2!r} (h=1e-7)")
            )
        joint = autodiff.vjp_graph(g)
        try:
            outs = interpret.evaluate(forward.jvp_graph(joint), [*xs, *vs])
        except Exception as e:  # noqa: BLE001
            what = f"forward over reverse: {e!r}"
            raise AssertionError(_report_forward(src, xs, vs, what)) from e
        n = len(joint.outputs)
        grads, hv = _flat(outs[1:n]), _flat(outs[n + 1 :])
        # the tangent of the value is <grad, v>: two exact derivatives, rounded differently
        mag = float(np.sum(np.abs(grads * _flat(vs)))) + abs(got)
        if abs(float(outs[n]) - got) > 1e-8 * mag + 1e-10 * scale:
            raise AssertionError(
                _report_forward(src, xs, vs, f"<grad, v> {float(outs[n])!r} != JVP {got!r}")
            )

        def gfd(h):
            gp = interpret.evaluate(joint, [x + h * v for x, v in zip(xs, vs)])[1:]
            gm = interpret.evaluate(joint, [x - h * v for x, v in zip(xs, vs)])[1:]
            return (_flat(gp) - _flat(gm)) / (2 * h)

        fd = gfd(1e-5)
        gscale = max(1.0, float(np.max(np.abs(grads), initial=0.0)))
        if not np.all(np.isfinite(fd)):
            return "ok", "skipped"
        bad = np.abs(hv - fd) > 1e-5 * np.maximum(np.abs(fd), np.abs(hv)) + 1e-6 * gscale
        if bad.any():
            fd2 = gfd(1e-6)
            # the h = 1e-5 difference's truncation error (large third derivatives, sin of a
            # big sum): every entry must agree, under the same tolerance, with one of the two
            bad &= np.abs(hv - fd2) > 1e-5 * np.maximum(np.abs(fd2), np.abs(hv)) + 1e-6 * gscale
            if not bad.any():
                return "ok", "ok"
            if np.any(np.abs(fd2 - fd) > 1e-4 * np.maximum(1.0, np.abs(fd))):
                return "ok", "kink"
            k = int(np.argmax(bad))
            what = (
                f"(H v)[{k}] = {hv[k]!r}, central difference of the gradient {fd[k]!r} "
                f"(h=1e-5), {fd2[k]!r} (h=1e-6)"
            )
            raise AssertionError(_report_forward(src, xs, vs, what))
    return "ok", "ok"


def _raised_in_codegen(e: BaseException) -> bool:
    """Whether ``e`` was raised inside the lowering to LLVM (or llvmlite): a plan that passed
    every check and still cannot be lowered is tapejit's bug, never a clear error (a
    ``TypeError: 'CastInstr' object is not iterable`` was counted as one once)."""
    tb = e.__traceback__
    last = None
    while tb is not None:
        last = tb.tb_frame.f_code.co_filename
        tb = tb.tb_next
    return last is not None and ("/codegen/" in last or "llvmlite" in last)


@pytest.mark.slow  # 150 programs; by default: test_pipeline_property's and test_fuzz_ieee's
@(seed(SEED) if LONG else lambda f: f)  # the CI profile is derandomised: one fixed set
@_settings()
@given(st.data())
def test_random_programs_match_numpy_and_finite_differences(data):
    src, args, features = program(data)
    seed = data.draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    xs = [rng.uniform(-1.5, 1.5, shape) for _, shape in args]
    env = {"np": np, "tj": tj}
    name = "<fuzz program>"  # readable by inspect, as a notebook cell is: loops are captured
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)
    exec(compile(src, name, "exec"), env)
    f = env["f"]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ref = float(f(*[x.copy() for x in xs]))
        except (ValueError, IndexError, TypeError, FloatingPointError):
            COUNTS["invalid numpy program"] += 1
            return
    if not np.isfinite(ref):
        COUNTS["non-finite value"] += 1
        return
    COUNTS["programs"] += 1
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            g = tj.compile(f, *xs, argnums=tuple(range(len(xs))), cache=False)
    except (tj.TracingError, TypeError, ValueError) as e:
        if "internal" in str(e) or _raised_in_codegen(e):
            # tapejit's own invariant broke (or lowering tripped over a plan it was given): a
            # bug, not the program's
            raise AssertionError(_report(src, xs, f"internal error: {e}")) from e
        COUNTS["clear errors"] += 1
        COUNTS["clear error: " + str(e).split(": ", 1)[-1][:60]] += 1
        if os.environ.get("TAPEJIT_FUZZ_SHOW_ERRORS"):
            print("\n--- clear error ---\n" + src + str(e)[:300])
        return
    except Exception as e:  # noqa: BLE001 - an internal error is a failure, with the program
        raise AssertionError(_report(src, xs, f"internal error {type(e).__name__}: {e}")) from e
    outcomes = []
    for point in range(2):
        pts = xs if point == 0 else [rng.uniform(-1.5, 1.5, np.shape(x)) for x in xs]
        try:
            outcomes.append(_check_point(f, g, pts, src, rng))
        except AssertionError:
            COUNTS["mismatches"] += 1
            raise
        except Exception as e:  # noqa: BLE001
            raise AssertionError(_report(src, pts, f"internal error {type(e).__name__}: {e}")) from e
    COUNTS["passed" if "kink" not in outcomes else "non-smooth (skipped)"] += 1
    COUNTS["loops captured while tracing"] += g.stats["reroll"]["captured"]["loops"]
    COUNTS["guards rolled"] += g.stats["reroll"]["guards"]
    COUNTS["ragged loops re-rolled"] += g.stats["reroll"].get("ragged", 0)
    COUNTS["graph loops re-rolled"] += g.stats["reroll"].get("history", 0)
    jvp, hvp = _check_forward(f, xs, src, rng) if outcomes[0] == "ok" else ("skipped", "skipped")
    COUNTS[f"jvp {jvp}"] += 1
    COUNTS[f"hvp {hvp}"] += 1
    for feat in features:
        FEATURES[feat] += 1


def teardown_module(module):
    summary = {
        "counts": dict(COUNTS),
        "features": dict(FEATURES),
        "examples": EXAMPLES,
        "seed": SEED if LONG else "derandomized",
    }
    path = os.path.join(tempfile.gettempdir(), "tapejit-fuzz-counts.json")
    with open(path, "w") as fh:
        json.dump(summary, fh, indent=1, sort_keys=True)
    print("\nfuzz counts:", json.dumps(summary, sort_keys=True))
