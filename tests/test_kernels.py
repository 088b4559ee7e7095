"""Length-polymorphic kernel functions (``codegen/lower/kernels.py``: ``Interface``, ``SHARE_MIN``).

A kernel function is keyed on the kernel's body, not on its sizes: kernels that differ only in
their trip count, or in the offsets and strides at which they read their operands, share one
LLVM function, which takes the sizes that differ as i64 arguments (from a direct call or from
a call tape's records). So a Python loop over slices of changing length — each iteration a
kernel of another length — compiles to a number of kernel functions that does not grow with
the loop. Every model here is checked against the interpreter (the numpy oracle, on the
unoptimised joint graph) and against central differences of the model itself.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

import tapejit as tj
from tapejit.ad import autodiff
from tapejit.core import interpret
from tapejit import passes
from tapejit.frontend import tracing
from tapejit.codegen import lower as lowering
from tapejit.passes.memplan import plan

RNG = np.random.default_rng(20261124)


@pytest.fixture(autouse=True)
def unrolled(monkeypatch):
    """Re-rolling off: these are the kernels of loops compiled as traced (what a loop the
    re-rolling pass leaves alone compiles to; tests/test_reroll*.py test the re-rolled ones —
    the LJ rows form, for one, is re-rolled into one flat sum)."""
    from tapejit.passes.reroll import driver as reroll

    monkeypatch.setattr(reroll, "ENABLED", False)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from pair_potential import lj_rows  # noqa: E402  (the model as examples/ writes it)


# ----------------------------------------------------------------------------------------------
# Models: Python loops whose iterations are kernels of different lengths


def lattice(n):
    """n points on a jittered cubic lattice (spacing 1.5: no pair closer than ~1.2)."""
    side = int(np.ceil(n ** (1 / 3)))
    grid = np.stack(np.meshgrid(*[np.arange(side)] * 3, indexing="ij"), -1).reshape(-1, 3)
    return grid[:n] * 1.5 + 0.1 * RNG.random((n, 3))


def growing(x):
    """Prefixes of growing length, read forwards and backwards (a gather with stride -1 that
    starts at a different offset every iteration)."""
    s = 0.0
    for i in range(2, len(x) + 1):
        w = x[:i]
        s = s + np.sum(np.tanh(w) * w[::-1]) / i
    return s


def windows(x):
    """Windows of one length at every offset, contiguous and strided; each depends on the
    running sum, so each is a kernel of its own."""
    s = 0.0
    for i in range(len(x) - 16):
        s = s + 0.1 * np.sum(np.sin(x[i : i + 8] + 0.1 * s))
        s = s + 0.1 * np.sum(np.cos(x[i : i + 16 : 2] * np.tanh(s)))
    return s


def row_reductions(m):
    """Column sums and row sums of a growing block of rows: partial reductions (kernels with
    their own loop nest) over different lengths, and the maps between them."""
    s = 0.0
    for i in range(2, len(m)):
        block = m[:i] * 1.5
        cols = np.sum(block * block, axis=0)  # (3,) from i rows
        rows = np.sum(np.sin(block), axis=1)  # (i,)
        s = s + np.sum(cols * cols) + np.sum(rows * rows)
    return s


def products(m):
    """Matrix-vector and vector-matrix products of growing blocks (matmul over sizes that
    change from call to call)."""
    v = np.array([0.5, -1.0, 2.0])
    s = 0.0
    for i in range(2, len(m)):
        block = m[:i]
        mv = block @ v  # (i, 3) @ (3,)
        vm = np.tanh(mv) @ block  # (i,) @ (i, 3)
        s = s + np.sum(vm * vm) + np.sum(mv)
    return s


def transposes(x):
    """Transposed views of growing (3, i) blocks: a gather whose stride is the length."""
    s = 0.0
    for i in range(2, len(x) // 3 + 1):
        t = x[: 3 * i].reshape(3, i).T  # (i, 3), strides (1, i)
        s = s + np.sum(np.tanh(t) * np.arange(3.0))
    return s


def suffix_updates(x):
    """In-place updates of suffixes of growing length (scatters into one buffer)."""
    y = np.zeros_like(x)
    for i in range(1, len(x)):
        y[i:] += np.sin(x[: len(x) - i]) * (1.0 + 0.1 * y[i - 1])
    return np.sum(y * y)


MODELS = {
    "lj_rows": (lj_rows, lambda n: lattice(n)),
    "growing": (growing, lambda n: RNG.normal(size=n)),
    "windows": (windows, lambda n: RNG.normal(size=n + 16)),
    "row_reductions": (row_reductions, lambda n: RNG.normal(size=(n, 3))),
    "products": (products, lambda n: RNG.normal(size=(n, 3)) * 0.5),
    "transposes": (transposes, lambda n: RNG.normal(size=3 * n)),
    "suffix_updates": (suffix_updates, lambda n: RNG.normal(size=n)),
}
SIZES = (8, 16, 32, 64)
EXACT = ("lj_rows", "growing")  # the brief's two models: the same count at every size


# ----------------------------------------------------------------------------------------------
# Helpers


def kernel_functions(llvm: str) -> list[str]:
    """Names of the kernel functions (``NAME.kJ``) defined in LLVM IR text."""
    return re.findall(r'^define internal void @"?([\w.]+\.k\d+)"?\(', llvm, re.M)


def signatures(llvm: str) -> dict[str, str]:
    """Kernel function name -> its parameter list."""
    return dict(re.findall(r'^define internal void @"?([\w.]+\.k\d+)"?\((.*?)\)', llvm, re.M))


def program(f, x):
    joint = autodiff.vjp_graph(tracing.trace(f, (x,), (0,)))
    opt, _ = passes.optimise(joint)
    return joint, plan(opt)


def check_against_oracles(f, x, grad, rtol=1e-10):
    """Native value and gradient = the interpreter's (unoptimised joint graph) and central
    differences of ``f`` along random directions."""
    joint, _ = program(f, x)
    ref_value, ref_grad = interpret.evaluate(joint, [x])
    value, g = grad.value_and_grad(x)
    np.testing.assert_allclose(value, ref_value, rtol=rtol, atol=1e-12)
    np.testing.assert_allclose(g, ref_grad, rtol=rtol, atol=1e-12 * np.max(np.abs(ref_grad)))
    assert value == pytest.approx(f(x), rel=1e-11, abs=1e-12)
    h = 1e-6 * max(1.0, float(np.max(np.abs(x))))
    for _ in range(2):
        d = RNG.normal(size=x.shape)
        fd = (f(x + h * d) - f(x - h * d)) / (2 * h)
        assert np.sum(g * d) == pytest.approx(fd, rel=1e-5, abs=1e-7 * max(1.0, abs(fd)))


# ----------------------------------------------------------------------------------------------
# The number of kernel functions does not grow with the loop


@pytest.mark.parametrize("name", sorted(MODELS))
def test_kernel_functions_do_not_grow_with_the_loop(name):
    f, make = MODELS[name]
    counts, kernels = {}, {}
    for n in SIZES:
        x = make(n)
        grad = tj.compile(f, x, cache=False)
        llvm = grad.ir("llvm")
        counts[n] = len(kernel_functions(llvm))
        kernels[n] = grad.stats["kernels"]
        check_against_oracles(f, x, grad)
    assert kernels[64] > 4 * kernels[8]  # the loop's kernels grow with n ...
    if name in EXACT:  # ... the functions do not (at n = 8 some variants do not occur yet)
        assert counts[8] <= counts[16] == counts[32] == counts[64], counts
    else:  # (fusion packs the loop's first or last iterations differently: +-1 or 2)
        assert max(counts.values()) <= min(counts.values()) + 2, counts
    assert counts[64] <= 24


def test_lj_rows_share_one_function_per_kernel_shape():
    """The LJ model of the brief: N - 1 kernels of each shape; one function takes them all,
    the row count as its one size argument."""
    x = lattice(64)
    _, prog = program(lj_rows, x)
    module, _ = lowering.lower(prog, "lj")
    text = str(module)
    sig = signatures(text)
    uses = module._tapejit_kernels
    shared = {
        name: {k.space or k.op.args[-1].shape for _, k in kernels}
        for name, kernels in uses.items()
        if len(kernels) > 1
    }
    # the fused loop over (m, 3), its row reduction, the loop over (m,) and the backward ones:
    # each one function over many lengths (m = 1 is its own: a size of 1 is no argument)
    wide = {name: spaces for name, spaces in shared.items() if len(spaces) >= 40}
    assert len(wide) >= 5, shared
    for name in wide:
        assert sig[name].count("i64") == 1, (name, sig[name])  # the row count, nothing else
    assert len(kernel_functions(text)) <= 16
    # every kernel of the plan is computed by exactly one function
    computed = [k for kernels in uses.values() for _, k in kernels]
    assert (
        len(computed) == len({id(k) for k in computed}) == sum(1 for k in prog.kernels if k.is_loop)
    )


def test_offsets_into_one_buffer_share_a_function_without_size_arguments():
    """Windows of one length at every offset of x (contiguous views and strided gathers):
    one function each, the offset folded into the pointer the caller passes."""
    x = RNG.normal(size=48)
    _, prog = program(windows, x)
    module, _ = lowering.lower(prog, "w")
    sig = signatures(str(module))
    uses = module._tapejit_kernels
    busiest = sorted(uses, key=lambda name: len(uses[name]), reverse=True)[:2]
    for name in busiest:
        # one kernel per window (the first cotangent into zeros writes its block: its own)
        assert len(uses[name]) >= 31
        assert "i64" not in sig[name]  # same length: no size argument
    grad = tj.compile(windows, x, cache=False)
    check_against_oracles(windows, x, grad)


def test_a_reduction_and_a_map_over_different_lengths_share_functions():
    """Partial reductions (own loop nests, axis 0 and axis 1) and fused maps over 2..n-1 rows:
    each kind is one function taking the row count."""
    m = RNG.normal(size=(24, 3))
    _, prog = program(row_reductions, m)
    module, _ = lowering.lower(prog, "r")
    sig = signatures(str(module))
    uses = module._tapejit_kernels

    def lengths(name):
        return {(k.op.args[0].shape if k.op is not None else k.space) for _, k in uses[name]}

    reductions = [
        name
        for name in uses
        if all(k.op is not None and k.op.op in ("reduce_sum", "reduce_max") for _, k in uses[name])
        and len(lengths(name)) > 10
    ]
    maps = [
        name
        for name in uses
        if all(k.op is None for _, k in uses[name]) and len(lengths(name)) > 10
    ]
    axes = {k.op.attrs[0] for name in reductions for _, k in uses[name]}
    assert axes == {(0,), (1,)}, axes  # both reductions are shared over lengths
    assert maps
    for name in reductions + maps:
        assert 1 <= sig[name].count("i64") <= 2, (name, sig[name])
    grad = tj.compile(row_reductions, m, cache=False)
    check_against_oracles(row_reductions, m, grad)


def test_a_varying_stride_is_a_size_argument():
    """x[:3i].reshape(3, i).T reads with strides (1, i): the stride is an argument too."""
    x = RNG.normal(size=60)
    _, prog = program(transposes, x)
    module, _ = lowering.lower(prog, "t")
    text = str(module)
    uses = module._tapejit_kernels
    gathers = [
        name
        for name, kernels in uses.items()
        if len(kernels) > 10 and all(any(n.op == "transpose" for n in k.body) for _, k in kernels)
    ]
    assert gathers
    strides = {
        lowering.gather_affine(n)[1]
        for name in gathers
        for _, k in uses[name]
        for n in k.body
        if n.op == "transpose"
    }
    assert len(strides) > 10  # one stride per length, one function for all of them
    assert "i64" in signatures(text)[gathers[0]]


def test_sizes_that_agree_stay_constants():
    """A key that occurs with one set of sizes is specialised as before (no size argument),
    so fixed-size models such as EAM compile to exactly the code they did."""

    def eam(x):
        rho = np.sum(np.exp(-3.0 * (x + 1.0)))
        return rho**2 + rho**3 + 0.25 * rho**4

    x = RNG.random(100)
    _, prog = program(eam, x)
    text = str(lowering.lower(prog, "eam")[0])
    assert "i64 %" not in "".join(signatures(text).values())
    assert "icmp slt i64" in text and ", 100" in text  # the trip count is a constant


@pytest.fixture
def rows_as_blocks(monkeypatch):
    """The LJ rows model with its (n, 3) blocks kept as such (no column split,
    tapejit/passes/columns.py): kernels of many lengths over blocks, and a backward pass of
    pointer-only calls — the mechanisms the next tests check."""
    from tapejit.passes import columns

    monkeypatch.setattr(columns, "MAX_COLUMNS", 1)


def test_call_tapes_carry_the_sizes(rows_as_blocks):
    """The backward pass of the LJ model is a run of pointer-only calls of different lengths:
    one tape, whose records carry each call's row count, walked once."""
    x = lattice(48)
    grad = tj.compile(lj_rows, x, cache=False)
    llvm = grad.ir("llvm")
    walker = re.search(r'^define internal void @"?[\w.]+\.walk"?\(.*?^}', llvm, re.M | re.S)
    assert walker, "no call tape"
    sig = signatures(llvm)
    called = set(re.findall(r'call void @"?([\w.]+\.k\d+)"?\(', walker.group(0)))
    assert any("i64" in sig[name] for name in called)  # a shared function called from the tape
    for name in called:  # from the tape only: not also called straight from the entry
        assert not re.search(rf'call void @"?{re.escape(name)}"?\(', llvm[: walker.start()])
    assert len(re.findall(r"\.walk\"?\(i64\*", llvm)) >= 1
    check_against_oracles(lj_rows, x, grad)


def test_shared_functions_still_vectorise():
    """A kernel function whose trip count is an argument is still a vector loop."""
    x = RNG.normal(size=400)
    grad = tj.compile(growing, x, cache=False)
    opt = grad.ir("llvm-opt")
    bodies = dict(
        re.findall(
            r'^define internal (?:fastcc )?void @"?([\w.]+\.k\d+)"?\((.*?)^}', opt, re.M | re.S
        )
    )
    shared = [name for name, body in bodies.items() if "i64 %" in body.split("\n", 1)[0]]
    assert shared
    assert any(re.search(r"<\d+ x double>", bodies[name]) for name in shared)
    asm = grad.ir("asm")
    if re.search(r"%[xyz]mm", asm):  # x86-64: packed double instructions in the machine code
        vector = re.compile(r"^\s+v?\w+pd\s.*%[xyz]mm", re.M)
        found = False
        for name in shared:
            m = re.search(rf'^"?{re.escape(name)}"?:.*?^\.Lfunc_end', asm, re.M | re.S)
            found |= bool(m and vector.search(m.group(0)))
        assert found
    check_against_oracles(growing, x, grad)


def test_annotated_asm_names_the_kernels_of_a_shared_function(rows_as_blocks):
    """``tapejit dump --stage asm`` names every plan kernel, each under the one function that
    computes it: kernels of many lengths under their shared function."""
    from tapejit.tools import cli

    x = lattice(12)
    prog = cli.front_end(lj_rows, [x], (0,))["plan"]
    grad = tj.compile(lj_rows, x, cache=False)
    comments = [
        line for line in cli.annotate_asm(grad.ir("asm"), prog).splitlines() if line.startswith("#")
    ]
    named: list[int] = []
    widest = 0
    for line in comments:
        m = re.match(r"^#\s*(?:inlined: )?kernels? ([\d, -]+):", line)
        if m:
            here = []
            for part in m.group(1).split(","):
                lo, _, hi = part.strip().partition("-")
                here += range(int(lo), int(hi or lo) + 1)
            named += here
            widest = max(widest, len({prog.kernels[j].space for j in here}))
    assert set(named) == {j for j, k in enumerate(prog.kernels) if k.is_loop}
    assert widest >= 8  # one function's comment lists kernels over 8+ different spaces


# ----------------------------------------------------------------------------------------------
# Random loops over slices: every kind of shared kernel, checked against the interpreter

STEPS = {
    # (n, 3) array x, running scalar s, array y made from x (updated in place); m: a length
    # 1 <= m < n that changes from iteration to iteration (not monotonically), i: the iteration
    "map": lambda x, y, s, i, m: s + np.sum(np.sin(x[:m, 0]) * x[len(x) - m :, 1]),
    "reversed": lambda x, y, s, i, m: s + np.sum(np.tanh(x[m::-1, 2]) * x[: m + 1, 0]),
    "strided": lambda x, y, s, i, m: s + np.sum(np.exp(-x.ravel()[i : i + 2 * m : 2] ** 2)),
    "columns": lambda x, y, s, i, m: s + np.sum(np.sum(x[:m] * x[:m], axis=0) * (1.0 + 0.1 * s)),
    "rows": lambda x, y, s, i, m: s + np.sum(np.max(np.cos(x[i % 2 : i % 2 + m]), axis=1)),
    "matvec": lambda x, y, s, i, m: s + np.sum(np.tanh(x[:m] @ np.array([0.3, -0.2, 0.5]))),
    "vecmat": lambda x, y, s, i, m: s + np.sum((np.sin(x[:m, 0]) @ x[:m]) ** 2) / (i + 1),
    "transpose": lambda x, y, s, i, m: s + np.sum(np.tanh(x[:m].T) * np.arange(1.0, m + 1)),
    "constant": lambda x, y, s, i, m: s + np.sum(np.sin(x[:m, 1] * (0.5 + 0.25 * i))),
}


def _scatter_add(x, y, s, i, m):
    y[len(y) - m :] += np.sin(x[:m]) * 0.5
    return s


def _scatter_set(x, y, s, i, m):
    y[:m, 1] = np.tanh(y[:m, 1] + x[len(x) - m :, 2])
    return s + 0.1 * np.sum(y[:m, 1])


STEPS["scatter_add"] = _scatter_add
STEPS["scatter_set"] = _scatter_set


def random_loop(kinds, n, mult):
    def f(x):
        s = 0.0
        y = x * 1.0
        for i in range(n - 1):
            m = 1 + (i * mult) % (n - 1)
            for kind in kinds:
                s = STEPS[kind](x, y, s, i, m)
        return s + np.sum(y * y)

    return f


@pytest.mark.slow  # a random sweep; each kind of kernel has its case in the default tier above
def test_random_loops_over_slices_match_the_interpreter():
    """Hypothesis draws loops mixing every kind of kernel over lengths that change from
    iteration to iteration; native value and gradient match the interpreter's."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        kinds=st.lists(st.sampled_from(sorted(STEPS)), min_size=1, max_size=4),
        n=st.integers(3, 14),
        mult=st.integers(1, 7),
        seed=st.integers(0, 2**32 - 1),
    )
    def check(kinds, n, mult, seed):
        f = random_loop(kinds, n, mult)
        x = np.random.default_rng(seed).uniform(-1, 1, (n, 3))
        joint, _ = program(f, x)
        ref_value, ref_grad = interpret.evaluate(joint, [x])
        value, g = tj.compile(f, x, cache=False).value_and_grad(x)
        np.testing.assert_allclose(value, ref_value, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(g, ref_grad, rtol=1e-10, atol=1e-12)

    check()
