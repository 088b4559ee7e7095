"""codegen.mathlib's exp (``_exp``: reduction by ln2/2, the table 2^(j/2), degree-9 polynomial).

Checked against mpmath (correctly rounded references, 40 digits) on the documented domain,
including the edges where the result overflows or becomes subnormal or zero, and the points
where the table index j flips (x near multiples of ln2/2), and the worst case of the error
bound (T = 1 and r near -ln2/4: results just below a power of two). Its constants and the fitted
polynomial are checked against mpmath too. Finally the AVX2 build (``TAPEJIT_CPU_FEATURES=
-avx512f``, compiled in a subprocess) and the host build must give bitwise-equal results:
the algorithm is the same on every target, only the vector width differs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib
from fractions import Fraction

import numpy as np
import pytest
from llvmlite import ir
from tapejit.codegen.mathlib import exp as mathlib

from tapejit.core.ops import Op
from test_mathlib import Compiled

mp = pytest.importorskip("mpmath")

F64 = ir.DoubleType()
I64 = ir.IntType(64)
SAMPLES = 20_000  # points per domain (mpmath is the slow part)
#: the contract (MATH[Op.EXP].ulp_ld), and the bound derived in ``_exp``'s docstring for normal
#: results, 0.96 ulp (measured 0.951; subnormal results are rounded twice: y, then the scaling
#: product, measured 0.86)
BOUND, BOUND_NORMAL = mathlib.MATH[Op.EXP].ulp_ld, 0.96


class ExpKernels:
    """exp's vectorised loop (``kernels(x)``, inline=True) and scalar call (``kernels.scalar(v)``,
    inline=False), compiled for the host by tests/test_mathlib.py's :class:`Compiled`."""

    def __init__(self):
        self.compiled = Compiled([Op.EXP])
        self.llvm_ir = self.compiled.llvm_ir

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self.compiled(Op.EXP, x)

    def scalar(self, v: float) -> float:
        return self.compiled.scalars[Op.EXP](v, v)


@pytest.fixture(scope="module")
def kernels() -> ExpKernels:
    return ExpKernels()


def _samples(kind: str, lo: float, hi: float, n: int = SAMPLES) -> np.ndarray:
    rng = np.random.default_rng(zlib.crc32(f"{kind} {lo} {hi}".encode()))
    if kind == "uniform":
        return rng.uniform(lo, hi, n)
    if kind == "log":  # magnitudes 10^lo..10^hi, both signs
        return rng.choice([-1.0, 1.0], n) * 10.0 ** rng.uniform(lo, hi, n)
    if kind == "flips":  # next to x = k ln2/2 (+- 2^-40 relative), where j and r flip
        k = rng.integers(int(lo / 0.34657), int(hi / 0.34657), n)
        x = k * (np.log(2) / 2)
        return x * (1 + rng.uniform(-(2.0**-40), 2.0**-40, n))
    if kind == "edge":  # n even (T = 1), r in [-ln2/4, -0.12]: the largest error
        k = rng.integers(int(lo / 0.69315), int(hi / 0.69315), n)
        return k * np.log(2) + rng.uniform(-0.17328, -0.12, n)
    raise ValueError(kind)


def ulp_error_mp(x: np.ndarray, got: np.ndarray) -> np.ndarray:
    """|got - exp(x)| in ulps of the correctly rounded double (subnormal ulp below 2^-1022)."""
    out = np.empty(x.size)
    with mp.workdps(40):
        for i, (xi, gi) in enumerate(zip(x.tolist(), got.tolist())):
            ref = mp.exp(mp.mpf(xi))
            r = float(ref)
            ulp = np.spacing(r) if r != 0.0 else 5e-324
            if np.isinf(r):  # the exact value is above the overflow threshold
                out[i] = 0.0 if np.isinf(gi) else np.inf
                continue
            out[i] = float(abs(mp.mpf(gi) - ref) / ulp)
    return out


DOMAINS = [  # (label, kind, lo, hi, results are normal)
    ("[-745.2, 709.8]", "uniform", -745.2, 709.78, False),
    ("[-1, 1]", "uniform", -1.0, 1.0, True),
    ("[-30, 30]", "uniform", -30.0, 30.0, True),
    ("near overflow [700, 709.78]", "uniform", 700.0, 709.782712893384, True),
    ("normal results near 2^-1022", "uniform", -708.39, -700.0, True),
    ("subnormal results", "uniform", -745.13, -708.4, False),
    ("underflow to 0 / 2^-1074", "uniform", -745.2, -744.0, False),
    ("|x| in 1e-20..1e-2", "log", -20, -2, True),
    ("j flips, |x| < 700", "flips", -700.0, 700.0, True),
    ("T = 1, r near -ln2/4", "edge", -700.0, 700.0, True),
]


@pytest.mark.parametrize("label,kind,lo,hi,normal", DOMAINS, ids=[d[0] for d in DOMAINS])
def test_accuracy_vs_mpmath(kernels, label, kind, lo, hi, normal):
    x = _samples(kind, lo, hi)
    err = ulp_error_mp(x, kernels(x))
    bound = BOUND_NORMAL if normal else BOUND
    assert err.max() <= bound, f"exp on {label}: {err.max():.3f} ulp at x = {x[err.argmax()]!r}"


def test_special_values_match_numpy(kernels):
    x = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-300, -1e-300, 5e-324,
                  709.782712893384, 709.7827128933841, 710.0, 1e308,
                  -708.3964185322641, -708.4, -745.1332191019411, -745.1332191019412,
                  -745.2, -746.0, -1e308])  # fmt: skip
    with np.errstate(all="ignore"):
        want = np.exp(x)
    for got in (kernels(x), np.array([kernels.scalar(v) for v in x])):
        assert np.array_equal(got.view(np.int64)[~np.isnan(want)],
                              want.view(np.int64)[~np.isnan(want)]), (x, got, want)  # fmt: skip
        assert np.isnan(got[np.isnan(want)]).all()


def test_exact_powers_of_two_scaling(kernels):
    """x = k ln2/2 (rounded) for every k of the clamped range: every scale 2^(k div 2), both
    table entries, r ~ 0; exp(0) = 1 exactly."""
    k = np.arange(-2150, 2048)
    x = k * (np.log(2) / 2)
    err = ulp_error_mp(x, kernels(x))
    normal = kernels(x) >= 2.0**-1022
    assert err[normal].max() <= BOUND_NORMAL and err.max() <= BOUND
    assert kernels(np.zeros(4))[0] == 1.0


def test_constants():
    with mp.workdps(60):
        ln2_half = mp.log(2) / 2
        hi, lo = mp.mpf(mathlib.LN2_HALF_HI), mp.mpf(mathlib.LN2_HALF_LO)
        assert abs(hi + lo - ln2_half) < mp.mpf(2) ** -100
        # n * LN2_HALF_HI exact for |n| < 2^12: at most 41 significant bits
        assert Fraction(mathlib.LN2_HALF_HI).numerator.bit_length() <= 41
        t = mp.mpf(mathlib.SQRT2_HI) * (1 + mp.mpf(mathlib.SQRT2_TAIL))
        assert abs(t - mp.sqrt(2)) < mp.mpf(2) ** -100


def test_polynomial_fit():
    """1 + r + r^2 Q(r) with the double coefficients EXP_Q: relative error < 2^-54.9 on
    |r| <= ln2/4 (the Remez optimum for degree 7 is 2^-55.0)."""
    with mp.workdps(50):
        a = mp.log(2) / 4
        q = [mp.mpf(c) for c in mathlib.EXP_Q]
        worst = 0
        for i in range(2001):
            r = mp.mpf(float(-a + 2 * a * i / 2000))
            acc = mp.mpf(0)
            for c in reversed(q):
                acc = acc * r + c
            p = 1 + r + r * r * acc
            worst = max(worst, abs(p / mp.exp(r) - 1))
        assert worst < mp.mpf(2) ** -54.9, float(mp.log(worst, 2))


def test_loop_is_vectorised_and_branch_free(kernels):
    body = kernels.llvm_ir.split("define", 2)
    k_exp = next(f for f in body if "@k_exp(" in f)
    assert "<4 x double>" in k_exp or "<8 x double>" in k_exp
    assert "gather" not in k_exp  # the two-entry table is selected by bit masks


# ----------------------------------------------------------------------------------------------
# AVX2 vs host build: the same algorithm, bitwise-equal results.

_CHILD = r"""
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from test_exp_table import ExpKernels, equality_points
from tapejit.codegen import target
k = ExpKernels()
x = equality_points()
print(json.dumps({"features": target.host()[2],
                  "loop": k(x).view(np.int64).tolist(),
                  "scalar": [float(k.scalar(v)).hex() for v in x[:2000]]}))
"""


def equality_points() -> np.ndarray:
    rng = np.random.default_rng(2024)
    return np.concatenate([rng.uniform(-746, 711, 40_000), rng.uniform(-2, 2, 20_000),
                           rng.uniform(-745.2, -708, 10_000),
                           np.array([0.0, np.inf, -np.inf, np.nan, 709.78, -745.13])])  # fmt: skip


def test_avx2_build_matches_host_build(kernels):
    env = dict(os.environ, TAPEJIT_CPU_FEATURES="-avx512f")
    here = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.run([sys.executable, "-c", _CHILD, here], env=env, capture_output=True,
                          text=True, timeout=300, check=True)  # fmt: skip
    child = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "-avx512f" in child["features"]
    x = equality_points()
    host = kernels(x).view(np.int64)
    assert np.array_equal(np.array(child["loop"], dtype=np.int64), host)
    assert child["scalar"] == [float(kernels.scalar(v)).hex() for v in x[:2000]]
    # the straight-line (out-of-line scalar) path agrees with the vector loop too
    assert [float(v).hex() for v in host[:2000].view(np.float64)] == child["scalar"]
