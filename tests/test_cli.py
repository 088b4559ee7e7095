"""The command line (tapejit/tools/cli.py), run as a separate process the way a user runs it:
``python -m tapejit.tools.cli`` and the ``tapejit`` console script. Every stage of examples/eam.py:eam
prints something characteristic of that stage (the IR stages exactly what ``grad.ir(stage)``
prints in-process for the same example input); ``--help`` lists the commands and stages;
``--format dot|svg|png`` draws the graph stages; ``stats`` prints a table (``--json``: JSON); the
asm stage names the plan part of each function; every bad input exits nonzero with one error
line on stderr and no traceback."""

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
from tapejit.tools import cli

ROOT = Path(__file__).resolve().parent.parent
EAM = str(ROOT / "examples" / "eam.py")
TARGET = f"{EAM}:eam"
SCRIPT = Path(sys.executable).with_name("tapejit")


def run(*args: str, exe: list[str] | None = None) -> subprocess.CompletedProcess:
    """The CLI in a fresh process (inherits the test session's private TAPEJIT_CACHE_DIR)."""
    cmd = (exe or [sys.executable, "-m", "tapejit.tools.cli"]) + list(args)
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
    p = run("stats", TARGET, "--arg", "f64[100]", "--json")  # the table is the default now
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
    assert ep.value == "tapejit.tools.cli:main" and ep.load() is cli.main


def test_closed_stdout_is_not_a_traceback():
    """`tapejit dump ... | head -1`: the reader goes away before the CLI writes."""
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tapejit.tools.cli",
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


# -- bad input -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args,patterns",
    [
        (["dump", "no_such_file.py:eam", "--arg", "f64[3]"], [r"FileNotFoundError", r"no_such_file\.py"]),
        (["dump", f"{EAM}:nope", "--arg", "f64[3]"], [r"no function 'nope'", r"eam\.py"]),
        (["stats", f"{EAM}:np", "--arg", "f64[3]"], [r"no function 'np'"]),  # a module, not callable
        (["dump", EAM, "--arg", "f64[3]"], [r"bad target", r"FILE\.py:FUNC"]),
        (["dump", TARGET, "--arg", "c128[3]"], [r"bad --arg 'c128\[3\]'", r"unknown dtype", r"f64, f32"]),
        (["dump", TARGET, "--arg", "bool[3]"], [r"bad --arg 'bool\[3\]'", r"real numbers", r"i64"]),
        (["dump", TARGET, "--arg", "f64[3]", "--mode", "grad_aux"], [r"--mode", r"invalid choice"]),
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
    ids=["missing file", "missing function", "not a function", "no colon", "bad dtype", "bool",
         "has_aux mode",
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
    from tapejit.core import ops

    r = run("ops")
    assert r.returncode == 0, r.stderr
    for name, op in ops.OPS.items():
        if op.group != "leaf":
            assert f"| `{name}` | {op.group} |" in r.stdout
    assert "| `erf` | unary | – | yes | yes | ≤ 1.5 ulp (vectorised IR) |" in r.stdout
    assert "| `floor` | unary | `floor` | no cotangent (piecewise constant) | zero tangent |" in r.stdout


# -- help ------------------------------------------------------------------------------------------
def test_help_lists_the_commands_and_every_stage():
    p = run("--help")
    assert p.returncode == 0 and p.stderr == ""
    for command in ("dump", "stats", "cache", "ops"):
        assert re.search(rf"^\s+{command}\s+\S", p.stdout, re.M), command
    stages = p.stdout[p.stdout.index("\nstages ") : p.stdout.index("\nmodes ")]
    for stage in tj.STAGES:  # one line each, saying what the stage is
        (line,) = [ln for ln in stages.splitlines() if re.match(rf"^\s+{re.escape(stage)}\s", ln)]
        assert len(line.split()) >= 5, line
        assert cli.STAGE_HELP[stage] in line
    assert set(cli.STAGE_HELP) == set(tj.STAGES)


def test_version():
    p = run("--version")
    assert p.returncode == 0 and p.stderr == ""
    assert p.stdout == f"tapejit {tj.__version__}\n"


def test_help_lists_every_mode():
    p = run("--help")
    assert p.returncode == 0 and p.stderr == ""
    assert set(cli.MODE_HELP) == set(cli._modes()) == set(tj.transforms.MODES) - {"grad_aux"}
    modes = p.stdout[p.stdout.index("\nmodes ") : p.stdout.index("\nexamples:")]
    for mode in cli._modes():  # one line each, with the compiled function's call
        (line,) = [ln for ln in modes.splitlines() if re.match(rf"^\s+{mode}\s+\(", ln)]
        assert cli.MODE_HELP[mode] in re.sub(r"\s+", " ", line), line


@pytest.mark.parametrize(
    "command,marks",
    [
        ("dump", ["--stage", "--format", "dot", "svg", "-o FILE", "--arg SPEC", "f64[d0,d1,...]",
                  "--argnums", "llvm-opt", "cluster"]),
        ("stats", ["--json", "--arg SPEC", "time each compile stage", "each pass", "--mode"]),
        ("cache", ["info", "clear", "TAPEJIT_CACHE_DIR"]),
        ("ops", ["primitive", "accuracy"]),
    ],
)  # fmt: skip
def test_each_command_has_informative_help(command, marks):
    p = run(command, "--help")
    assert p.returncode == 0 and p.stderr == ""
    text = re.sub(r"\s+", " ", p.stdout)  # argparse wraps lines
    for mark in marks:
        assert mark in text, (command, mark)


# -- models with rolled loops (written to a file, as a user's would be) ----------------------------
LOOP_MODELS = """
import numpy as np
import tapejit as tj


def fori(x):
    def body(i, c):
        return c * np.sin(x) + 0.1 * i * np.tanh(c)

    c = tj.fori_loop(2, 9, body, x)
    return np.sum(c * c)


def nested(x):
    def inner(j, d):
        return d * 0.5 + np.cos(d)

    def body(i, c):
        return tj.fori_loop(0, 3, inner, c * np.sin(x))

    c = tj.fori_loop(0, 4, body, x)
    return np.sum(c * c)


def whiled(x):
    c = tj.while_loop(lambda c: np.sum(c) < 10.0, lambda c: c * 1.5 + 0.1, x, max_steps=64)
    return np.sum(c * c)


def scalars(x):
    s = 0.0
    for i in range(len(x) - 1):
        s = s + np.exp(-((x[i + 1] - x[i]) ** 2)) * x[i]
    return s


def layers(x):
    W = np.random.default_rng(1).normal(size=(6, 4, 4)) * 0.3
    h = x
    for k in range(6):
        h = np.tanh(W[k] @ h) + h
    return np.sum(h * h)
"""


@pytest.fixture(scope="module")
def loop_file(tmp_path_factory):
    f = tmp_path_factory.mktemp("models") / "loop_models.py"
    f.write_text(LOOP_MODELS)
    return str(f)


def _plan(target: str, *shape: int):
    x = np.random.default_rng(0).uniform(0.1, 1.0, shape)
    return cli.front_end(cli.load_function(target), [x], (0,))["plan"]


# -- loop bodies in the printed stages -------------------------------------------------------------
@pytest.mark.parametrize("stage", ["trace", "grad", "opt", "plan"])
def test_dump_prints_loop_bodies_at_every_stage(loop_file, stage):
    p = run("dump", f"{loop_file}:fori", "--arg", "f64[5]", "--stage", stage)
    assert p.returncode == 0, p.stderr
    text = p.stdout
    x = np.random.default_rng(0).uniform(0.1, 1.0, (5,))
    assert text == tj.compile(cli.load_function(f"{loop_file}:fori"), x).ir(stage) + "\n"
    if stage == "plan":  # the body's graph and program under "body of %k"
        assert re.search(r"^  body of %\d+ .*:\n    graph body\(", text, re.M)
        assert re.search(r"^    program body: \d+ loop kernels", text, re.M)
        return
    # the loop node, then its body graph indented under it, with the body's own nodes
    m = re.search(
        r"^  (%\d+) = loop .*\n    body:\n      graph body\((.*)\n((?:        .*\n)+)", text, re.M
    )
    assert m, text
    assert re.search(r"^        %\d+ = tanh %l1c0 : f64\[5\]$", m.group(3), re.M)
    assert re.search(r"^        return ", m.group(3), re.M)
    if stage != "trace":  # the backward loop's body too
        assert re.search(r"^    body:\n      graph body\.vjp\(", text, re.M)


def test_nested_loop_bodies_and_conditions_are_printed_recursively(loop_file):
    p = run("dump", f"{loop_file}:nested", "--arg", "f64[4]", "--stage", "trace")
    assert p.returncode == 0, p.stderr
    # the inner loop inside the outer body, its body two levels deep
    assert re.search(
        r"^        %\d+ = loop .*\n          body:\n            graph body\(", p.stdout, re.M
    )
    assert re.search(r"^              %\d+ = cos ", p.stdout, re.M)
    p = run("dump", f"{loop_file}:whiled", "--arg", "f64[4]", "--stage", "opt")
    assert p.returncode == 0, p.stderr
    assert re.search(r"^    condition:\n      graph cond\(.*\) -> \(bool\[\]\)\n", p.stdout, re.M)


# -- DOT -------------------------------------------------------------------------------------------
def _dot_structure(text: str):
    """Check DOT text structurally (braces balanced outside string literals, statements
    well formed) and return its clusters as ``{name: (label, parent)}``, its node ids and its
    edges."""
    assert text.startswith("digraph ") and text.rstrip().endswith("}")
    unquoted = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)
    depth, stack, clusters, nodes, edges = 0, [None], {}, set(), []
    for line in unquoted.splitlines():
        line = line.strip()
        m = re.match(r"subgraph (cluster_\w+) \{$", line)
        if m:
            clusters[m.group(1)] = [None, stack[-1]]
            stack.append(m.group(1))
        elif line == "}":
            stack.pop()
        elif m := re.match(r"(n\d+) -> (n\d+)", line):
            edges.append((m.group(1), m.group(2)))
        elif m := re.match(r"(n\d+) \[label=", line):
            assert m.group(1) not in nodes, f"node {m.group(1)} declared twice"
            nodes.add(m.group(1))
        depth += line.count("{") - line.count("}")
        assert depth >= 0
    assert depth == 0 and stack == [], "unbalanced braces"
    labels = dict(re.findall(r'subgraph (cluster_\w+) \{\n\s*label="((?:[^"\\]|\\.)*)"', text))
    for name in clusters:
        clusters[name][0] = labels[name]
    for a, b in edges:
        assert a in nodes and b in nodes, (a, b)
    return {k: tuple(v) for k, v in clusters.items()}, nodes, edges


def test_dot_plan_has_one_cluster_per_fused_kernel():
    """EAM's plan is two fused loops: two kernel clusters, each labelled with its space."""
    p = run("dump", TARGET, "--arg", "f64[100]", "--stage", "plan", "--format", "dot")
    assert p.returncode == 0, p.stderr
    clusters, nodes, _ = _dot_structure(p.stdout)
    kernels = {k: v for k, v in clusters.items() if re.fullmatch(r"cluster_k\d+", k)}
    prog = _plan(TARGET, 100)
    assert len(kernels) == sum(k.is_loop for k in prog.kernels) == 2
    for j, k in enumerate(prog.kernels):
        assert kernels[f"cluster_k{j}"] == (f"kernel {j}: loop [100]", None)
    # every IR node once, labelled as the plan stage names it
    assert len(nodes) >= len(prog.graph.nodes)
    assert re.search(r'label="%4 = exp\\nf64\[100\]\\n-> out\[1\]"', p.stdout)


@pytest.mark.parametrize("stage", ["trace", "grad", "opt"])
def test_dot_graph_stages(stage):
    p = run("dump", TARGET, "--arg", "f64[100]", "--stage", stage, "--format", "dot")
    assert p.returncode == 0, p.stderr
    clusters, nodes, edges = _dot_structure(p.stdout)
    assert not clusters  # no loops in EAM
    x = np.random.default_rng(0).uniform(0.1, 1.0, (100,))
    g = cli.front_end(cli.load_function(TARGET), [x], (0,), upto=stage)[stage]
    outputs = len(g.outputs)
    assert len(nodes) == len(g.nodes) + outputs  # one per IR node (inputs included), one per result
    assert len(edges) == sum(len(n.args) for n in g.nodes) + outputs


def test_dot_loop_bodies_are_nested_clusters(loop_file):
    p = run("dump", f"{loop_file}:nested", "--arg", "f64[4]", "--stage", "trace", "--format", "dot")
    assert p.returncode == 0, p.stderr
    clusters, _, _ = _dot_structure(p.stdout)
    (outer,) = [k for k, (label, parent) in clusters.items() if parent is None]
    assert clusters[outer][0].startswith("body of %")
    (inner,) = [k for k, (_, parent) in clusters.items() if parent == outer]
    assert clusters[inner][0].startswith("body of %")
    # the plan: the loop nodes' kernels hold their body programs, whose kernels are clusters
    p = run("dump", f"{loop_file}:fori", "--arg", "f64[5]", "--stage", "plan", "--format", "dot")
    assert p.returncode == 0, p.stderr
    clusters, _, _ = _dot_structure(p.stdout)
    prog = _plan(f"{loop_file}:fori", 5)
    top = [k for k in clusters if re.fullmatch(r"cluster_k\d+", k)]
    assert len(top) == sum(k.is_loop for k in prog.kernels)
    bodies = [k for k, (label, _) in clusters.items() if label.startswith("body of %")]
    assert len(bodies) == 2  # the forward loop and the backward loop
    for b in bodies:
        kernel = clusters[b][1]
        assert re.fullmatch(r"cluster_k\d+", kernel) and "= " in clusters[kernel][0]
        assert any(
            parent == b and "kernel 0: loop [5]" in label for label, parent in clusters.values()
        )


def test_dot_while_loop_condition_cluster(loop_file):
    p = run("dump", f"{loop_file}:whiled", "--arg", "f64[4]", "--stage", "plan", "--format", "dot")
    assert p.returncode == 0, p.stderr
    clusters, _, _ = _dot_structure(p.stdout)
    assert any(label.startswith("condition of %") for label, _ in clusters.values())


def test_dot_for_a_text_only_stage_is_a_usage_error():
    p = run("dump", TARGET, "--arg", "f64[3]", "--stage", "asm", "--format", "dot")
    assert p.returncode == 2
    assert_clean_failure(p, r"--format dot draws the stages trace, grad, opt, plan")
    p = run("dump", TARGET, "--arg", "f64[3]", "--stage", "plan", "--format", "svg")
    assert p.returncode == 2
    assert_clean_failure(p, r"-o FILE")


def _have_graphviz() -> bool:
    import shutil

    try:
        import graphviz  # noqa: F401
    except ImportError:
        return False
    return shutil.which("dot") is not None


@pytest.mark.skipif(not _have_graphviz(), reason="needs the graphviz package and the dot program")
@pytest.mark.parametrize("fmt,magic", [("svg", b"<svg"), ("png", b"\x89PNG")])
def test_render_picture(tmp_path, loop_file, fmt, magic):
    out = tmp_path / f"plan.{fmt}"
    p = run("dump", f"{loop_file}:fori", "--arg", "f64[5]", "--stage", "plan", "--format", fmt,
            "-o", str(out))  # fmt: skip
    assert p.returncode == 0 and p.stdout == "" and p.stderr == "", p.stderr
    data = out.read_bytes()
    assert magic in data[:400]
    if fmt == "svg":
        assert b"kernel 0: loop [5]" in data and b"body of %" in data


@pytest.mark.skipif(not _have_graphviz(), reason="needs the graphviz package and the dot program")
@pytest.mark.parametrize("stage", ["trace", "grad", "opt", "plan"])
def test_graphviz_accepts_the_dot_text(loop_file, stage):
    """Graphviz itself parses every stage's DOT (nested clusters, escaped labels)."""
    import graphviz

    target = f"{loop_file}:nested"
    x = np.random.default_rng(0).uniform(0.1, 1.0, (4,))
    from tapejit.tools import dot

    text = dot.to_dot(cli.front_end(cli.load_function(target), [x], (0,), upto=stage)[stage])
    assert graphviz.Source(text).pipe(format="svg").lstrip().startswith(b"<")


def test_missing_graphviz_package_is_a_clear_error(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "graphviz", None)  # import graphviz -> ImportError
    out = tmp_path / "plan.svg"
    status = cli.main(["dump", TARGET, "--arg", "f64[100]", "--stage", "plan", "--format", "svg",
                       "-o", str(out)])  # fmt: skip
    err = capsys.readouterr()
    assert status == 2 and err.out == "" and not out.exists()
    assert "Traceback" not in err.err
    (line,) = err.err.strip().splitlines()
    assert line.startswith("tapejit: error: --format svg needs")
    assert "pip install graphviz" in line and "apt-get install graphviz" in line


def test_missing_dot_program_is_a_clear_error(monkeypatch, tmp_path, capsys):
    pytest.importorskip("graphviz")
    monkeypatch.setenv("PATH", str(tmp_path))  # no 'dot' there
    out = tmp_path / "plan.png"
    status = cli.main(["dump", TARGET, "--arg", "f64[100]", "--stage", "trace", "--format", "png",
                       "-o", str(out)])  # fmt: skip
    err = capsys.readouterr()
    assert status == 2 and err.out == "" and not out.exists()
    (line,) = err.err.strip().splitlines()
    assert "'dot' program" in line and "apt-get install graphviz" in line


# -- stats -----------------------------------------------------------------------------------------
def test_stats_table_and_json_agree():
    table = run("stats", TARGET, "--arg", "f64[100]")
    js = run("stats", TARGET, "--arg", "f64[100]", "--json")
    assert table.returncode == 0 and js.returncode == 0, table.stderr + js.stderr
    stats = json.loads(js.stdout)
    assert set(stats) >= {"nodes", "passes", "workspace_bytes", "kernels", "work", "buffers",
                          "recomputed", "loops", "constants_bytes", "cache", "timings"}  # fmt: skip
    with pytest.raises(json.JSONDecodeError):
        json.loads(table.stdout)
    text = table.stdout
    rows, section = {}, None
    for line in text.splitlines():
        if line and not line.startswith(" "):
            section = line
        m = re.match(r"^  (\S+(?: \S+)?)\s{2,}(\S+)(?:\s{3}.*)?$", line)
        if m and section != "passes":  # the passes have a table of their own
            rows.setdefault(m.group(1), (m.group(2), line))
    for stage, n in stats["nodes"].items():
        assert rows[stage][0] == str(n)
    assert rows["kernels"][0] == str(stats["kernels"])
    assert rows["workspace bytes"][0] == str(stats["workspace_bytes"])
    assert rows["work"][0] == str(stats["work"])
    assert rows["cache"][0] in ("hit", "miss", "off")
    for section in ("nodes per stage", "plan", "memory", "passes", "timings (ms)"):
        assert re.search(rf"^{re.escape(section)}$", text, re.M), section
    for name in stats["passes"]:
        assert re.search(rf"^  {name}\s+\d+\s+\d+\s+\d+\.\d\d\b", text, re.M), name
    # (the two runs may differ in timings: the second finds the first's machine code cached)
    timings = text[text.index("\ntimings (ms)\n") :].splitlines()[2:]
    assert timings and all(re.fullmatch(r"  \w+\s+\d+\.\d\d", t) for t in timings), timings
    # aligned: the values of the key/value rows end in one column
    ends = {line.index(value) + len(value) for value, line in rows.values() if value != "-"}
    assert len(ends) == 1, ends


def test_stats_table_shows_every_figure(in_process):
    stats = in_process.stats
    text = cli.format_stats(stats)
    for stage, seconds in stats["timings"].items():  # in ms, rounded to 0.01
        assert re.search(rf"^  {stage}\s+{seconds * 1e3:.2f}$", text, re.M), stage
    total = sum(stats["timings"].values()) * 1e3
    assert re.search(rf"^  total\s+{total:.2f}$", text, re.M)
    for name, d in stats["passes"].items():
        line = re.search(rf"^  {name}\s.*$", text, re.M).group(0)
        assert line.split()[1:4] == [str(d["nodes_before"]), str(d["nodes_after"]),
                                     f"{d['seconds'] * 1e3:.2f}"]  # fmt: skip
        for rule, count in d.get("rules", {}).items():
            assert f"{rule} {count}" in line
    assert re.search(rf"^  constants bytes\s+{stats['constants_bytes']}\b", text, re.M)
    assert re.search(rf"^  loop nodes\s+{stats['loops']}\b", text, re.M)


def test_format_stats_shows_unknown_keys():
    text = cli.format_stats({"nodes": {"trace": 3}, "kernels": 1, "novel": {"a": 1}}, "t")
    assert text.splitlines()[0] == "t"
    assert re.search(r"^other\n  novel\s+\{\"a\": 1\}$", text, re.M)


# -- annotated assembly ----------------------------------------------------------------------------
def _kernel_mentions(comments: list[str], where: str = "") -> set[int]:
    """Kernel indices named in the asm comments (``kernel 3`` / ``kernels 1, 4-6``) of the
    program at ``where`` (``""``: the top one; else e.g. ``loop body of %1``)."""
    found: set[int] = set()
    for line in comments:
        text = re.sub(r"^#\s*(inlined: |runs )?", "", line)
        prefix = f"{where}: " if where else ""
        if where and not text.startswith(prefix):
            continue
        if not where and text.startswith("loop "):
            continue
        m = re.match(re.escape(prefix) + r"(?:runs )?kernels? ([\d, -]+):", text)
        if m:
            for part in m.group(1).split(","):
                lo, _, hi = part.strip().partition("-")
                found.update(range(int(lo), int(hi or lo) + 1))
    return found


def _loop_kernels(prog) -> set[int]:
    return {j for j, k in enumerate(prog.kernels) if k.is_loop}


def _check_function_headers(asm: str) -> list[str]:
    """Every function of ``asm`` is preceded by a comment naming what it implements; returns
    the comment lines."""
    lines = asm.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^\s*\.type\s+\S+,\s*@function", line):
            j = i - 1
            while not lines[j].startswith("#"):
                assert re.match(r"^\s*\.(globl|p2align|section|text)\b", lines[j]), lines[j]
                j -= 1
            while lines[j].startswith("#  "):
                j -= 1
            assert re.match(r"^# (entry|kernel|loop|fast-call|batch|call-tape|math)", lines[j])
    return [line for line in lines if line.startswith("#")]


def test_asm_is_annotated_with_the_plan(in_process):
    p = run("dump", TARGET, "--arg", "f64[100]", "--stage", "asm")
    assert p.returncode == 0 and p.stderr == "", p.stderr
    comments = _check_function_headers(p.stdout)
    assert (
        comments[0] == "# entry: tj_eam, the gradient function (straight-line code, kernel calls)"
    )
    # a long loop of polynomial math is a function of its own; the short one is inlined
    assert "# kernel 0: loop [100]: add, mul, exp, reduce_sum" in comments
    assert "#   inlined: kernel 1: loop [100]: 2 mul" in comments
    assert _kernel_mentions(comments) == _loop_kernels(_plan(TARGET, 100)) == {0, 1}
    assert "# fast-call entry: checks a Python call's arguments, then runs tj_eam" in comments
    assert not re.search(r"^# ", in_process.ir("asm"), re.M)  # grad.ir("asm") stays as it was
    raw = run("dump", TARGET, "--arg", "f64[100]", "--stage", "asm", "--no-annotate")
    assert raw.returncode == 0 and not re.search(r"^# ", raw.stdout, re.M)


@pytest.mark.parametrize("model,shape", [("fori", 5), ("nested", 4), ("whiled", 4), ("layers", 4)])
def test_asm_annotation_names_every_kernel(loop_file, model, shape):
    target = f"{loop_file}:{model}"
    p = run("dump", target, "--arg", f"f64[{shape}]", "--stage", "asm")
    assert p.returncode == 0 and p.stderr == "", p.stderr
    comments = _check_function_headers(p.stdout)
    prog = _plan(target, shape)
    assert _kernel_mentions(comments) == _loop_kernels(prog)
    names = {}
    from tapejit.core.ir import format_graph

    format_graph(prog.graph, names)
    for n in prog.graph.nodes:  # every loop body's program, one level down
        lp = prog.loops.get(id(n))
        if lp is not None:
            where = f"loop body of {names[id(n)]}"
            assert any(c.lstrip("# ").removeprefix("inlined: ").startswith(where) for c in comments)
            assert _kernel_mentions(comments, where) == _loop_kernels(lp.body), where


def test_asm_annotation_of_shared_and_chunked_functions(loop_file, monkeypatch):
    """Kernel functions shared by identical kernels list them all; straight-line chunks say
    where in the plan they start (annotate_asm in-process, so lower.py can be patched)."""
    import tapejit.codegen.lower.chunks as lower

    target = f"{loop_file}:layers"
    x = np.random.default_rng(0).uniform(0.1, 1.0, (4,))
    prog = _plan(target, 4)
    g = tj.compile(cli.load_function(target), x, cache=False)
    comments = _check_function_headers(cli.annotate_asm(g.ir("asm"), prog))
    assert any(re.match(r"^# kernels 0, 2, 4, 6, 8, 10: matmul f64\[4\] \(own loop nest\)$", c)
               for c in comments), comments  # fmt: skip
    monkeypatch.setattr(lower, "CHUNK_NODES", 10)
    from tapejit.frontend.loops import loop_source

    monkeypatch.setattr(loop_source, "ENABLED", False)  # its element loop as straight-line code
    target = f"{loop_file}:scalars"
    x = np.random.default_rng(0).uniform(0.1, 1.0, (12,))
    prog = cli.front_end(cli.load_function(target), [x], (0,))["plan"]
    g = tj.compile(cli.load_function(target), x, cache=False)
    comments = _check_function_headers(cli.annotate_asm(g.ir("asm"), prog))
    chunks = [c for c in comments if c.startswith("# entry, continued: straight-line code from ")]
    assert len(chunks) >= 2, comments
    assert all(re.search(r"from %\d+ on \(kernel \d+, before its loop\)$|from kernel \d+ on$", c)
               for c in chunks), chunks  # fmt: skip
    assert _kernel_mentions(comments) == _loop_kernels(prog)


# -- export ----------------------------------------------------------------------------------------
def test_export_writes_the_object_header_and_library(tmp_path):
    p = run("export", TARGET, "--arg", "f64[100]", "-o", str(tmp_path), "--shared")
    assert p.returncode == 0, p.stderr
    for name in ("eam.o", "eam.h", "libeam.so"):
        assert (tmp_path / name).is_file() and f"wrote {tmp_path / name}" in p.stdout
    assert "EAM_WORKSPACE_BYTES" in (tmp_path / "eam.h").read_text()


def test_export_reports_bad_names_and_paths():
    p = run("export", TARGET, "--arg", "f64[100]", "-o", "/tmp", "--name", "2bad")
    assert p.returncode == 2 and "C identifier" in p.stderr
    p = run("export", TARGET, "--arg", "f64[100]", "-o", "/etc/hostname/x")
    assert p.returncode == 1 and "/etc/hostname/x" in p.stderr and "Traceback" not in p.stderr


# -- --arg dtypes ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "spec,dtype,shape",
    [("f64[2,3]", np.float64, (2, 3)), ("f32[4]", np.float32, (4,)), ("float32[4]", np.float32, (4,)),
     ("f16[2]", np.float16, (2,)), ("i64[5]", np.int64, (5,)), ("i32[]", np.int32, ()),
     ("int16[3]", np.int16, (3,)), ("u8[3]", np.uint8, (3,)), ("I64[2]", np.int64, (2,))],
)  # fmt: skip
def test_arg_spec_dtypes(spec, dtype, shape):
    (a,) = cli._example_args([spec])
    assert np.shape(a) == shape and np.asarray(a).dtype == dtype
    if np.dtype(dtype).kind == "f":
        assert np.all((0.1 <= np.asarray(a)) & (np.asarray(a) < 1.0))
    else:  # integers: away from zero, so that 1/x and log are defined
        assert np.all((1 <= np.asarray(a)) & (np.asarray(a) < 10))


def test_f64_example_inputs_unchanged():
    """The seeded f64 inputs are what they were before other dtypes (the tests' in-process
    compiles draw them the same way)."""
    x, s = cli._example_args(["f64[100]", "f64"])
    rng = np.random.default_rng(0)
    assert np.array_equal(x, rng.uniform(0.1, 1.0, (100,))) and s == float(rng.uniform(0.1, 1.0))
    assert type(s) is float


def test_every_dtype_is_one_the_library_accepts():
    """Each --arg dtype converts to float64 as tapejit.compile converts arguments, and bool,
    which the library rejects, is not one of them."""
    f = lambda x: np.sum(x * x)  # noqa: E731
    for name, dtype in cli.DTYPES.items():
        x = np.arange(1, 4).astype(dtype)
        assert np.array_equal(tj.compile(f, x, cache=False)(x), 2.0 * x.astype(np.float64)), name
    with pytest.raises(TypeError):
        tj.compile(f, np.ones(3, dtype=bool), cache=False)


def test_integer_arguments_end_to_end(tmp_path):
    """An integer --arg reaches FUNC converted to float64 as the library converts it: the
    trace prints it as f64, and the CLI's graph is the in-process one for the same input."""
    src = tmp_path / "mixed.py"
    src.write_text("import numpy as np\n\ndef f(x, w, k):\n    return np.sum(np.sin(x) * w) * k\n")
    specs = ["f32[3]", "i64[3]", "i32"]
    p = run("dump", f"{src}:f", *[a for s in specs for a in ("--arg", s)], "--stage", "opt")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("graph f(%x0: f64[3] active, %x1: f64[3] inactive, %x2: f64[] inactive)")
    g = tj.compile(cli.load_function(f"{src}:f"), *cli._example_args(specs), cache=False)
    assert p.stdout == g.ir("opt") + "\n"


# -- --mode: the transformations -------------------------------------------------------------------
def _argnums_of(mode: str):
    return () if mode == "value" else 0


@pytest.mark.parametrize("mode", ["grad", "jvp", "vjp", "jacfwd", "jacrev", "hvp", "hessian", "value"])
def test_dump_mode_is_compile_with_that_mode(mode):
    """``dump --mode M`` prints what ``tapejit.compile(..., mode=M)`` compiles; the dot stages
    (the front end's pure functions) draw that same program."""
    assert mode in cli._modes()
    x = np.random.default_rng(0).uniform(0.1, 1.0, (5,))
    fn = cli.load_function(TARGET)
    g = tj.compile(fn, x, mode=mode, argnums=_argnums_of(mode), cache=False)
    p = run("dump", TARGET, "--arg", "f64[5]", "--mode", mode, "--stage", "opt")
    assert p.returncode == 0, p.stderr
    assert p.stdout == g.ir("opt") + "\n"
    stages = cli.front_end(fn, [x], cli._argnums(None, 1, mode), mode=mode)
    for stage in ("trace", "grad", "opt", "plan"):
        assert str(stages[stage]) == g.ir(stage), stage


def test_stats_mode_title_and_figures():
    p = run("stats", TARGET, "--arg", "f64[5]", "--mode", "hessian")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0].endswith("(f64[5]), mode hessian wrt argnums (0,)")
    js = run("stats", TARGET, "--arg", "f64[5]", "--mode", "value", "--json")
    assert js.returncode == 0, js.stderr
    assert json.loads(js.stdout)["nodes"]["trace"] > 0
    v = run("stats", TARGET, "--arg", "f64[5]", "--mode", "value")
    assert v.returncode == 0 and "value wrt argnums ()" in v.stdout.splitlines()[0]


def test_modes_take_the_functions_their_transformation_takes(tmp_path):
    """jacfwd takes a vector FUNC (its Jacobian); hvp wants a scalar one: a clean failure."""
    src = tmp_path / "vec.py"
    src.write_text("import numpy as np\n\ndef f(x):\n    return np.sin(x) * 2.0\n")
    p = run("dump", f"{src}:f", "--arg", "f64[3]", "--mode", "jacfwd", "--stage", "trace")
    assert p.returncode == 0, p.stderr
    assert re.match(r"graph \w+\(%x: f64\[3\] .*\) -> \(f64\[3,3\]\)$", p.stdout.splitlines()[0])
    bad = run("dump", f"{src}:f", "--arg", "f64[3]", "--mode", "hvp")
    assert_clean_failure(bad, r"TracingError", r"scalar")


# -- the stats table's width -----------------------------------------------------------------------
def test_stats_table_fits_in_100_columns():
    """The widest model of examples/ (a pair loop: re-rolled, its figures a long row)."""
    target = str(ROOT / "examples" / "pair_potential.py") + ":lj_pairs"
    p = run("stats", target, "--arg", "f64[20,3]")
    assert p.returncode == 0, p.stderr
    table = p.stdout.splitlines()[1:]  # (the title names the file: as long as its path)
    assert max(map(len, table)) <= 100, max(table, key=len)
    assert re.search(r"^  re-rolled\s+iterations \d+, loops \d+", p.stdout, re.M)


def test_format_stats_wraps_long_values_at_100_columns():
    stats = {"nodes": {"trace": 3}, "kernels": 1,
             "passes": {"simplify": {"nodes_before": 9, "nodes_after": 3, "seconds": 0.001,
                                     "rules": {f"rule_{k}": k for k in range(30)}}},
             "reroll": {f"figure_{k}": k for k in range(30)}, "novel": list(range(100))}  # fmt: skip
    text = cli.format_stats(stats, "t")
    assert max(map(len, text.splitlines())) <= 100
    flat = re.sub(r"\s+", " ", text)
    assert all(f"rule_{k} {k}" in flat and f"figure_{k} {k}" in flat for k in range(30))
    assert json.dumps(list(range(100))) in flat
