"""IEEE fuzzer: random expressions of correctly rounded operations (``+ - * /``, negation,
``abs``, ``sqrt``, comparisons and ``tj.where``) with explicit parentheses and constants chosen
to overflow, underflow and make signed zeros, compiled (``mode="value"``) and compared with
numpy *bit for bit* on special inputs (±0.0, ±inf, NaN, the extremes of float64): numpy
evaluates each operation once, correctly rounded, so a simplification rule or a folded
constant that changes any result — the sign of a zero, an overflow that reassociation hides —
shows as a mismatch. NaN payloads are not compared (IEEE leaves them open).

The default run checks a fixed set of programs; ``TAPEJIT_FUZZ_EXAMPLES=N`` runs N random ones
(the seed is printed; ``TAPEJIT_FUZZ_SEED`` replays one)."""

from __future__ import annotations

import os
import random
import warnings

import numpy as np
import pytest

import tapejit as tj

LONG = int(os.environ.get("TAPEJIT_FUZZ_EXAMPLES", "0"))
SEED = int(os.environ.get("TAPEJIT_FUZZ_SEED", int.from_bytes(os.urandom(4), "little")))
PROGRAMS = LONG or 40

CONSTANTS = ["0.0", "-0.0", "1.0", "-1.0", "0.5", "2.0", "3.0", "1e200", "1e-200", "1e308",
             "5e-324", "np.inf", "-np.inf"]  # fmt: skip
INPUTS = np.array(
    [0.0, -0.0, 1.0, -1.0, 1.5, -2.5, 1e200, -1e-200, 1e308, 5e-324, np.inf, -np.inf, np.nan,
     3.0, 1e-310, -7.0]
)  # fmt: skip


def _expr(rng: random.Random, depth: int) -> str:
    if depth == 0 or rng.random() < 0.2:
        return rng.choice(["x", "y", "x", "y", rng.choice(CONSTANTS)])
    a, b = _expr(rng, depth - 1), _expr(rng, depth - 1)
    kind = rng.randrange(9)
    if kind < 4:
        return f"({a} {'+-*/'[kind]} {b})"
    if kind == 4:
        return f"(-{a})"
    if kind == 5:
        return f"np.abs({a})"
    if kind == 6:
        return f"np.sqrt({a})"
    if kind == 7:
        c = _expr(rng, depth - 1)
        return f"tj.where({a} > {c}, {b}, {a})"
    return f"({a} {rng.choice('+-*')} {rng.choice(CONSTANTS)})"


def _program(rng: random.Random) -> str:
    lines = ["def f(x, y):"]
    names = []
    for k in range(rng.randint(1, 3)):
        lines.append(f"    t{k} = {_expr(rng, 3)}")
        names.append(f"t{k}")
        if rng.random() < 0.5:  # later expressions read earlier ones
            lines.append(f"    x = t{k} + 0.0" if rng.random() < 0.5 else f"    y = 0.0 - t{k}")
    lines.append(f"    return {' + 0.0 * '.join(names) if len(names) == 1 else names[-1]}")
    return "\n".join(lines)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.broadcast_arrays(np.asarray(a, float), np.asarray(b, float))
    both_nan = np.isnan(a) & np.isnan(b)
    equal = (a.view(np.uint64) == b.view(np.uint64)) | both_nan
    return bool(np.all(equal))


@pytest.mark.parametrize("k", range(PROGRAMS))
def test_random_expressions_match_numpy_bit_for_bit(k):
    rng = random.Random((SEED if LONG else 20261128) * 1000 + k)
    src = _program(rng)
    env = {"np": np, "tj": tj}
    exec(compile(src, f"<ieee fuzz {k}>", "exec"), env)
    f = env["f"]
    gen = np.random.default_rng(k)
    x = gen.choice(INPUTS, size=16)
    y = gen.permutation(INPUTS)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = f(x.copy(), y.copy())
        compiled = tj.compile(f, x, y, mode="value", cache=False)
        got = compiled(x, y)
    got = got[0] if isinstance(got, tuple) else got
    assert _same_bits(got, want), (
        f"seed {SEED if LONG else 'fixed'}, program {k}:\n{src}\nx = {x.tolist()}\n"
        f"y = {y.tolist()}\nnumpy    {np.asarray(want).tolist()}\ncompiled {np.asarray(got).tolist()}"
    )
