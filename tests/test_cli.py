"""The command line (tapejit/cli.py), run as a separate process the way a user runs it:
``python -m tapejit.cli`` and the ``tapejit`` console script. Every stage of examples/eam.py:eam
prints something characteristic of that stage (the IR stages exactly what ``grad.ir(stage)``
prints in-process for the same example input); ``stats`` prints JSON; every bad input exits
nonzero with one error line on stderr and no traceback."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tapejit as tj
from tapejit import cli

ROOT = Path(__file__).resolve().parent.parent
EAM = str(ROOT / "examples" / "eam.py")
TARGET = f"{EAM}:eam"
SCRIPT = Path(sys.executable).with_name("tapejit")


def run(*args: str, exe: list[str] | None = None) -> subprocess.CompletedProcess:
    """The CLI in a fresh process (inherits the test session's private TAPEJIT_CACHE_DIR)."""
    cmd = (exe or [sys.executable, "-m", "tapejit.cli"]) + list(args)
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, cwd=ROOT, env=dict(os.environ)
    )


def assert_clean_failure(p: subprocess.CompletedProcess, *patterns: str) -> str:
    """Nonzero exit, nothing on stdout, no traceback, exactly one error line on stderr (argparse
    usage lines aside) matching every pattern; returns that line."""
    assert p.returncode != 0, p.stdout
    assert p.stdout == ""
    assert "Traceback" not in p.stderr, p.stderr
    errors = [line for line in p.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, p.stderr
    for pat in patterns:
        assert re.search(pat, errors[0]), f"{pat!r} not in {errors[0]!r}"
    return errors[0]


@pytest.fixture(scope="module")
def in_process():
    """The gradient the CLI compiles for --arg 'f64[100]' (same seeded example input)."""
    x = np.random.default_rng(0).uniform(0.1, 1.0, (100,))
    return tj.compile(cli.load_function(TARGET), x, cache=False)


# What each stage must show for eam on f64[100], beyond being non-empty.
STAGE_MARKS = {
    "trace": [r"^graph eam\(%x: f64\[100\] active\) -> \(f64\[\]\)", r"= exp ", r"reduce_sum"],
    "grad": [r"^graph eam\(%x: f64\[100\] active\) -> \(f64\[\], f64\[100\]\)", r"= exp "],
    "opt": [r"^graph eam\(.*\) -> \(f64\[\], f64\[100\]\)", r"= exp "],
    "plan": [r"loop \[100\]", r"-> out\[1\]"],
    "llvm": [r'define i32 @"tj_eam"\(', r"\bfmul double\b"],
    "llvm-opt": [r"define .*@tj_eam\(", r"\bret i32\b"],
    "asm": [r"^\s+(retq?|ret)\b", r"^\s+(v?mul[sp]d|fmul)\s"],
}


def test_stage_marks_cover_every_stage():
    assert set(STAGE_MARKS) == set(tj.STAGES)


@pytest.mark.parametrize("stage", tj.STAGES)
def test_dump_every_stage(stage, in_process):
    p = run("dump", TARGET, "--arg", "f64[100]", "--stage", stage)
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    assert p.stdout.strip()
    for pat in STAGE_MARKS[stage]:
        assert re.search(pat, p.stdout, re.M), f"{pat!r} not in the {stage} stage"
    if stage in ("trace", "grad", "opt", "plan", "llvm"):  # deterministic text
        assert p.stdout == in_process.ir(stage) + "\n"


def test_one_exp_per_element_after_the_passes():
    """The optimised EAM gradient computes exp once per element (the forward value is reused by
    the backward pass), as README promises; the joint graph before the passes may have more."""
    p = run("dump", TARGET, "--arg", "f64[100]", "--stage", "opt")
    assert p.returncode == 0, p.stderr
    assert len(re.findall(r"= exp %", p.stdout)) == 1


def test_dump_default_stage_is_grad(in_process):
    p = run("dump", TARGET, "--arg", "f64[100]")
    assert p.returncode == 0 and p.stdout == in_process.ir("grad") + "\n"


def test_stats_prints_json():
    p = run("stats", TARGET, "--arg", "f64[100]")
    assert p.returncode == 0, p.stderr
    stats = json.loads(p.stdout)
    assert {"nodes", "passes", "kernels", "work", "workspace_bytes", "timings"} <= set(stats)
    assert stats["nodes"]["trace"] > 0 and stats["kernels"] >= 1
    assert stats["workspace_bytes"] == 0  # README: the EAM plan needs no workspace
    assert all(t >= 0 for t in stats["timings"].values())


def test_two_arguments_with_argnums(tmp_path):
    src = tmp_path / "two.py"
    src.write_text("import numpy as np\n\ndef f(x, s):\n    return np.sum(np.sin(x) * s) + s * s\n")
    p = run(
        "dump",
        f"{src}:f",
        "--arg",
        "f64[3]",
        "--arg",
        "f64",
        "--argnums",
        "0",
        "1",
        "--stage",
        "trace",
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("graph f(%x0: f64[3] active, %x1: f64[] active)")


@pytest.mark.skipif(not SCRIPT.exists(), reason="the tapejit console script is not installed here")
def test_console_script():
    p = run("dump", TARGET, "--arg", "f64[100]", "--stage", "trace", exe=[str(SCRIPT)])
    assert p.returncode == 0, p.stderr
    assert re.search(STAGE_MARKS["trace"][0], p.stdout)
    bad = run("dump", f"{EAM}:nope", "--arg", "f64[3]", exe=[str(SCRIPT)])
    assert_clean_failure(bad, r"no function 'nope'")


def test_console_script_entry_point():
    from importlib.metadata import entry_points

    (ep,) = entry_points(group="console_scripts", name="tapejit")
    assert ep.value == "tapejit.cli:main" and ep.load() is cli.main


def test_closed_stdout_is_not_a_traceback():
    """`tapejit dump ... | head -1`: the reader goes away before the CLI writes."""
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tapejit.cli",
            "dump",
            TARGET,
            "--arg",
            "f64[100]",
            "--stage",
            "asm",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    p.stdout.close()  # before the child has even imported numpy: its first write gets EPIPE
    err = p.stderr.read()
    p.wait(timeout=120)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


# -- bad input ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args,patterns",
    [
        (["dump", "no_such_file.py:eam", "--arg", "f64[3]"], [r"FileNotFoundError", r"no_such_file\.py"]),
        (["dump", f"{EAM}:nope", "--arg", "f64[3]"], [r"no function 'nope'", r"eam\.py"]),
        (["stats", f"{EAM}:np", "--arg", "f64[3]"], [r"no function 'np'"]),  # a module, not callable
        (["dump", EAM, "--arg", "f64[3]"], [r"bad target", r"FILE\.py:FUNC"]),
        (["dump", TARGET, "--arg", "f32[3]"], [r"bad --arg 'f32\[3\]'", r"f64\[d0,d1,\.\.\.\]"]),
        (["dump", TARGET, "--arg", "f64[3"], [r"bad --arg 'f64\[3'"]),
        (["dump", TARGET, "--arg", "f64[a]"], [r"bad --arg 'f64\[a\]'"]),
        (["dump", TARGET, "--arg", "f64[-3]"], [r"bad --arg 'f64\[-3\]'"]),
        (["stats", TARGET, "--arg", "float"], [r"bad --arg 'float'"]),
        (["dump", TARGET], [r"give at least one --arg"]),
        (["dump", TARGET, "--arg", "f64[3]", "--argnums", "4"], [r"argnums entry 4"]),
        (["dump", f"{EAM}:main", "--arg", "f64[3]"], [r"TypeError", r"main\(\)"]),
        (["dump", TARGET, "--arg", "f64[3]", "--stage", "bogus"], [r"--stage", r"invalid choice: 'bogus'", r"asm"]),
        (["bogus"], [r"invalid choice: 'bogus'"]),
        ([], [r"required"]),
        (["cache", "bogus"], [r"invalid choice: 'bogus'"]),
    ],
    ids=["missing file", "missing function", "not a function", "no colon", "bad dtype",
         "unclosed bracket", "bad dim", "negative dim", "bad spec word", "no --arg",
         "bad argnums", "wrong arity", "bad stage", "bad command", "no command", "bad cache action"],
)  # fmt: skip
def test_bad_input(args, patterns):
    assert_clean_failure(run(*args), *patterns)


@pytest.mark.parametrize(
    "source,patterns",
    [
        (
            "import numpy as np\ndef f(x):\n    return np.sum(np.argsort(x) * x)\n",
            [r"TracingError", r"\.py:3 in f\(\)", r"numpy\.argsort"],
        ),
        ("def f(x):\n    return x * 2.0\n", [r"TracingError", r"must return a scalar float"]),
        ("def f(x) = 1\n", [r"SyntaxError"]),
        (
            "import no_such_module_for_tapejit\n",
            [r"ModuleNotFoundError", r"no_such_module_for_tapejit"],
        ),
    ],
    ids=["unsupported numpy", "non-scalar result", "syntax error", "import error"],
)
def test_failing_target(tmp_path, source, patterns):
    f = tmp_path / "target.py"
    f.write_text(source)
    assert_clean_failure(run("dump", f"{f}:f", "--arg", "f64[3]"), r"^tapejit: error: ", *patterns)


def test_ops_lists_every_primitive_with_its_accuracy():
    from tapejit import ops

    r = run("ops")
    assert r.returncode == 0, r.stderr
    for name, op in ops.OPS.items():
        if op.group != "leaf":
            assert f"| `{name}` | {op.group} |" in r.stdout
    assert "| `erf` | unary | – | yes | ≤ 1.5 ulp (vectorised IR) |" in r.stdout
