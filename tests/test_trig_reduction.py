"""sin and cos for every finite argument: the Payne-Hanek path of codegen/mathlib/trig.py (|x| > 2^50)
and its seam with the Cody-Waite path, against mpmath (the independent oracle, 200 bits).

Values through the mathlib loop kernels and the scalar copies of tests/test_mathlib.py;
derivatives through ``tapejit.compile`` (the gradient of sum(sin(x)) is cos(x), of sum(cos(x))
is -sin(x)). Errors are fractional ulps of the double nearest the exact value, held to the
op's registered ``ulp_ld`` bound (the bound of the normal range; mathlib.MATH).
"""

from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np
import pytest

import tapejit as tj
from tapejit.codegen.mathlib import core as mathlib
from test_mathlib import Compiled

mpmath.mp.prec = 200
REF = {"sin": mpmath.sin, "cos": mpmath.cos}
BOUND = {op: mathlib.MATH[op].ulp_ld for op in REF}
#: x with x 2/pi closest to an integer among all doubles (|x mod pi/2| ~ 2^-61; Muller,
#: "Elementary Functions", the classic worst case for reduction by pi/2)
WORST = 6381956970095103 * 2.0**797


def _ulp_error(got: np.ndarray, x: np.ndarray, op: str) -> np.ndarray:
    """|got - f(x)| in ulps of the double nearest the exact f(x)."""
    out = np.empty(len(x))
    for i, (xi, gi) in enumerate(zip(x.tolist(), got.tolist())):
        exact = REF[op](mpmath.mpf(xi))
        out[i] = float(abs(mpmath.mpf(gi) - exact) / np.spacing(abs(float(exact))))
    return out


def _spread(rng, n: int) -> np.ndarray:
    """n doubles with exponents uniform in [-30, 1023], random significands, both signs."""
    e = rng.integers(-30, 1024, n)
    return np.ldexp(rng.uniform(1.0, 2.0, n), e) * rng.choice([-1.0, 1.0], n)


def _near_multiples(rng, n: int) -> np.ndarray:
    """Doubles next to multiples k pi/2 for k up to 2^1000 (hard cases for the reduction)."""
    out = []
    for _ in range(n):
        k = int(rng.integers(1, 2**62)) << int(rng.integers(0, 960))
        c = float(k * (mathlib._pi_fixed(1200) * Fraction(1, 2**1201)))
        out.append(np.nextafter(c, [-np.inf, np.inf][int(rng.integers(2))]))
    return np.array(out) * rng.choice([-1.0, 1.0], n)


def _seam() -> np.ndarray:
    """Around the switch from Cody-Waite to Payne-Hanek at 2^50, and around 2^51, 2^52."""
    out = []
    for p in (50, 51, 52, 53):
        c = 2.0**p
        out += [c, np.nextafter(c, 0), np.nextafter(c, np.inf)]
        out += [np.nextafter(c, 0) - k for k in range(1, 40)] + [c + 4 * k for k in range(40)]
    out = np.array(out)
    return np.concatenate([out, -out])


def _cases() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(20)
    big = np.finfo(np.float64).max
    return {
        "2^-30..2^1023": _spread(rng, 4000),
        "near k pi/2": _near_multiples(rng, 500),
        "2^50 seam": _seam(),
        "extremes": np.array([WORST, -WORST, big, -big, np.nextafter(big, 0), 2.0**1023,
                              WORST * 2.0**-797, 1e300, 1e22, 2.0**60]),  # fmt: skip
    }


CASES = _cases()


@pytest.fixture(scope="module")
def lib():
    return Compiled()


@pytest.mark.parametrize("label", CASES)
@pytest.mark.parametrize("op", ["sin", "cos"])
def test_values(lib, op, label):
    """Loop (vectorised, cold path for the lanes beyond 2^50) and scalar code agree bit for bit,
    and are within the normal-range bound of mpmath everywhere."""
    x = CASES[label]
    got = lib(op, x)
    scalar = np.array([lib.scalars[op](v, 0.0) for v in x])
    assert np.array_equal(got.view(np.int64), scalar.view(np.int64))
    err = _ulp_error(got, x, op)
    assert err.max() <= BOUND[op], (x[err.argmax()], err.max())


def test_worst_case_reduction(lib):
    """The closest double to a multiple of pi/2 (an odd one): cos is ~5e-19, still correctly
    rounded (all ~58 cancelled bits of x 2/pi recovered)."""
    x = np.array([WORST, -WORST])
    assert abs(lib("cos", x)[0]) < 1e-18
    for op in ("sin", "cos"):
        assert _ulp_error(lib(op, x), x, op).max() <= 0.5


def test_mixed_lanes(lib):
    """Vectors mixing normal and huge arguments, inf and NaN: each lane from its own path."""
    rng = np.random.default_rng(3)
    x = rng.uniform(-10, 10, 1003)
    x[::7] = _spread(rng, len(x[::7]))
    x[5], x[11], x[12] = np.inf, -np.inf, np.nan
    for op in ("sin", "cos"):
        got = lib(op, x)
        assert np.isnan(got[[5, 11, 12]]).all()
        fin = np.isfinite(x)
        assert _ulp_error(got[fin], x[fin], op).max() <= BOUND[op]


def test_nan_to_num_of_max():
    """np.sin(np.nan_to_num(x)) in user code: DBL_MAX and friends, through tapejit.compile."""
    x = np.array([np.inf, -np.inf, np.nan, 1.0, 1e300])
    f = tj.compile(lambda x: np.sum(np.sin(np.nan_to_num(x))), x)
    want = np.sin(np.nan_to_num(x))
    assert f.value_and_grad(x)[0] == pytest.approx(want.sum(), rel=1e-15)


@pytest.mark.parametrize("op", ["sin", "cos"])
def test_derivatives(op):
    """The gradient of sum(sin(x)) is cos(x) and of sum(cos(x)) is -sin(x), for all exponents."""
    rng = np.random.default_rng(5)
    x = np.concatenate([_spread(rng, 600), _seam()[::5], [WORST, -WORST]])
    fn = getattr(np, op)
    g = tj.compile(lambda x: np.sum(fn(x)), x)
    out = np.empty_like(x)
    g(x, out=out)
    if op == "sin":
        err = _ulp_error(out, x, "cos")
    else:
        err = _ulp_error(-out, x, "sin")
    assert err.max() <= BOUND["cos" if op == "sin" else "sin"], x[err.argmax()]


def test_table_matches_mpmath():
    """Rows of the 2/pi table sum to (2^k 2/pi) mod 4 within 2^-200, on their fixed grids."""
    mpmath.mp.prec = 1400
    try:
        two_over_pi = 2 / mpmath.pi
        for k in (-2, -1, 0, 1, 52, 300, 745, 971):
            t = mathlib.TRIG_TABLE[4 * (k + 2) : 4 * (k + 3)]
            for v, grid in zip(t[:3], (50, 100, 150)):
                assert (Fraction(v) * 2**grid).denominator == 1
            exact = mpmath.fmod(mpmath.ldexp(two_over_pi, k), 4)
            got = sum(Fraction(v) for v in t)
            assert abs(mpmath.mpf(got.numerator) / got.denominator - exact) < mpmath.mpf(2) ** -200
    finally:
        mpmath.mp.prec = 200
