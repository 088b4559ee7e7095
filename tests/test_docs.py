"""Every Python block in README.md and in the pages of docs/ runs, so the documentation cannot
rot; each page runs as one script in a fresh interpreter and what its blocks print is compared
with the ```text blocks that show it; model functions README defines are checked against central
differences. The compiler listings of docs/how-it-works.md are compared with what `tapejit dump`
prints, the benchmark plot's parser with bench/RESULTS.md, and the site is built with `mkdocs
build --strict` (the test extra installs the documentation toolchain)."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tapejit as tj

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))


def test_readme_has_python_blocks():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("k", range(len(BLOCKS)))
def test_readme_block_runs(k, capsys):
    env = {"np": np, "tj": tj}
    exec(compile(textwrap.dedent(BLOCKS[k]), f"README.md block {k}", "exec"), env)
    rng = np.random.default_rng(k)
    for name in ("energy",):
        f = env.get(name)
        if f is None:
            continue
        x = rng.uniform(0.5, 1.5, 8)
        grad = tj.compile(f, x, cache=False)
        g = grad(x)
        for _ in range(3):
            v = rng.standard_normal(x.shape)
            fd = (f(x + 1e-6 * v) - f(x - 1e-6 * v)) / 2e-6
            assert np.vdot(g, v) == pytest.approx(fd, rel=1e-6, abs=1e-8)


def test_readme_lists_exactly_the_supported_numpy_names():
    from tapejit.frontend.numpy import numpy_api

    text = README.read_text()
    block = text.split("<!-- supported:begin -->\n")[1].split("\n<!-- supported:end -->")[0]
    assert block == numpy_api.supported_markdown(), (
        "README's supported list is stale; regenerate it with "
        "python -c 'import tapejit.frontend.numpy.numpy_api as m; print(m.supported_markdown())'"
    )


def test_readme_lists_exactly_the_primitives():
    from tapejit.tools import cli

    text = README.read_text()
    block = text.split("<!-- primitives:begin -->\n")[1].split("\n<!-- primitives:end -->")[0]
    assert block == cli.primitives_markdown(), (
        "README's table of primitives is stale; regenerate it with `tapejit ops`"
    )


# ------------------------------------------------------------------------------------------------
# docs/: each page runs as one script in a fresh interpreter (a subprocess): its ```python blocks
# in order, in one namespace (a block may use names an earlier block of the page defined), with
# nothing imported for them, so a page's first block imports what the page uses. A ```text block
# whose nearest preceding fenced block is a ```python block shows what that block prints, and is
# compared with it after masking what differs between hosts and runs (MASKS). A listing marked
# <!-- dump:S --> or <!-- excerpt:S --> is compared with `tapejit dump` instead (below); a text
# block marked <!-- host-dependent: 1, 3 --> has every number on the listed lines (1-based)
# masked too. Shell and C listings use other fences (```sh, ```c) and are not run.

FENCE = re.compile(
    r"^([ \t]*)```(\w*)[ \t]*\n(.*?)^[ \t]*```[ \t]*$", flags=re.DOTALL | re.MULTILINE
)
NOTE = re.compile(r"<!--\s*(.*?)\s*-->\s*\Z")

# Applied to the printed and the documented text alike, in order; then runs of blanks become one.
NUMBER = r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?"
MASKS = [
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "<address>"),  # pointers, object ids
    (re.compile(r"\b[0-9a-f]{16,}\b"), "<hash>"),  # digests, cache keys
    (re.compile(rf"(?<![\w.]){NUMBER}\s?(?:s|ms|µs|us|ns)\b"), "<time>"),  # timings
    (re.compile(r"(?<![\w.])\d+(?:\.\d+)?x\b"), "<ratio>"),  # speed-ups ("17x the time")
]


def fenced_blocks(page: pathlib.Path) -> list[tuple[str, str, str]]:
    """The page's fenced blocks as (language, dedented text, HTML comment just before or '')."""
    text = page.read_text()
    blocks = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip()
        note = NOTE.search(before)
        blocks.append((m.group(2), textwrap.dedent(m.group(3)), note.group(1) if note else ""))
    return blocks


def python_blocks(page: pathlib.Path) -> list[str]:
    return [src for lang, src, _ in fenced_blocks(page) if lang == "python"]


def documented_outputs(page: pathlib.Path) -> dict[int, tuple[str, str]]:
    """{k: (text, note)}: the ```text block that shows what python block k prints."""
    out, k, prev = {}, -1, None
    for lang, src, note in fenced_blocks(page):
        if lang == "text" and prev == "python" and not re.match(r"(dump|excerpt):", note):
            out[k] = (src, note)
        k += lang == "python"
        prev = lang
    return out


def masked(text: str, host_lines: set[int] = frozenset()) -> str:
    lines = []
    for n, line in enumerate(text.rstrip("\n").splitlines(), 1):
        for pattern, repl in MASKS:
            line = pattern.sub(repl, line)
        if n in host_lines:
            line = re.sub(rf"(?<![\w<]){NUMBER}", "<n>", line)
        lines.append(" ".join(line.split()))
    return "\n".join(lines)


SEP = "\x1e-- end of block --\x1e"
RUNNER = f"""
import json, linecache, sys, traceback, types
blocks = json.load(sys.stdin)
main = types.ModuleType("__main__")
sys.modules["__main__"] = main
for filename, src in blocks:
    # source lines for tracebacks and for the hints in tapejit's error messages
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    try:
        exec(compile(src, filename, "exec"), main.__dict__)
    except BaseException:
        sys.stdout.flush()
        traceback.print_exc()
        sys.exit(1)
    print({SEP!r}, flush=True)
"""


def run_page(page: pathlib.Path) -> list[str]:
    """Run the page's python blocks as one script in a fresh interpreter, as a first-time reader
    would (an empty on-disk cache: what a page prints of compile timings depends on it); what
    each printed."""
    import tempfile

    blocks = [(f"docs/{page.name} block {k}", src) for k, src in enumerate(python_blocks(page))]
    with tempfile.TemporaryDirectory() as cache:
        r = subprocess.run(
            [sys.executable, "-c", RUNNER],
            input=json.dumps(blocks),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "TAPEJIT_CACHE_DIR": cache},
        )
    printed = r.stdout.split(SEP + "\n")
    assert r.returncode == 0, (
        f"docs/{page.name} block {len(printed) - 1} failed:\n{r.stdout}\n{r.stderr}"
    )
    return printed[:-1]


PAGES_WITH_CODE = [p for p in PAGES if python_blocks(p)]


def test_docs_pages_have_python_blocks():
    names = {p.name for p in PAGES_WITH_CODE}
    assert {"index.md", "tutorial.md", "how-it-works.md", "sharp-bits.md", "jax.md"} <= names


def test_masks():
    assert masked("compiled in 0.13 s") == masked("compiled in 2.40 s") == "compiled in <time>"
    assert masked("tapejit gradient      2.03 µs") == "tapejit gradient <time>"
    assert masked("35.01 µs   (17x the tapejit time)") == "<time> (<ratio> the tapejit time)"
    assert masked("2000 steps: tapejit 5.5 ms") == "2000 steps: tapejit <time>"
    assert masked("at 0x7f3a2c001000, key 3f2a9c0d1e2b4a5f6") == "at <address>, key <hash>"
    assert masked("E = -65.5344 (27, 3)", {1}) == "E = <n> (<n>, <n>)"
    assert masked("E = -65.5344", {2}) == "E = -65.5344"


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda p: p.name)
def test_docs_page_prints_what_it_shows(page):
    """Every block runs, and prints what the ```text block after it shows."""
    printed = run_page(page)
    stale = []
    for k, (shown, note) in documented_outputs(page).items():
        host = re.fullmatch(r"host-dependent:\s*([\d,\s]+)", note)
        host_lines = {int(n) for n in re.findall(r"\d+", host.group(1))} if host else set()
        if masked(printed[k], host_lines) != masked(shown, host_lines):
            stale.append(
                f"docs/{page.name} block {k} printed:\n{printed[k]}\nthe page shows:\n{shown}"
            )
    assert not stale, "\n\n".join(stale)


def test_docs_nav_lists_every_page():
    """mkdocs.yml's nav and docs/*.md name the same pages (a page left out of the nav, or a nav
    entry without a page, fails the strict build only where mkdocs is installed)."""
    nav = re.findall(
        r"^\s+- .*?:\s*(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), flags=re.MULTILINE
    )
    assert sorted(nav) == sorted(p.name for p in PAGES)


def test_docs_have_no_internal_references():
    """Pages are for users: their prose points to no notes outside the project, tracker numbers
    or work logs (code and listings are left out of the check: LLVM IR prints #0)."""
    banned = re.compile(r"DESIGN\.md|\.\./shared|PEERS|\bseeds?[- ]\d|\bissue\b|#\d|\bsessions?\b")
    for page in PAGES:
        prose = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
        for line in prose.splitlines():
            assert not banned.search(line), f"{page.name}: {line.strip()}"


# docs/how-it-works.md pastes `tapejit dump examples/eam.py:eam --arg 'f64[8]' --stage S`: a
# listing marked <!-- dump:S --> must equal it; one marked <!-- excerpt:S --> must be a
# subsequence of its lines ("; ..." lines mark the cuts). The optimised LLVM IR and the assembly
# depend on the CPU and are not compared.
HOW = DOCS / "how-it-works.md"
LISTINGS = re.findall(
    r"<!-- (dump|excerpt):([a-z-]+) -->\n```text\n(.*?)```", HOW.read_text(), flags=re.DOTALL
)


def _dump(stage: str, capsys) -> str:
    from tapejit.tools import cli

    capsys.readouterr()
    argv = ["dump", str(ROOT / "examples" / "eam.py") + ":eam", "--arg", "f64[8]", "--stage", stage]
    assert cli.main(argv) == 0
    return capsys.readouterr().out


def test_how_it_works_has_listings():
    assert {s for kind, s, _ in LISTINGS if kind == "dump"} == {"trace", "grad", "opt", "plan"}
    assert {s for kind, s, _ in LISTINGS if kind == "excerpt"} == {"llvm"}


@pytest.mark.parametrize("kind,stage,text", LISTINGS, ids=[f"{k}:{s}" for k, s, _ in LISTINGS])
def test_how_it_works_listing_is_current(kind, stage, text, capsys):
    real = _dump(stage, capsys)
    if kind == "dump":
        assert text == real, f"docs/how-it-works.md: the {stage} listing is stale; paste:\n{real}"
        return
    lines = iter(real.splitlines())
    for line in text.splitlines():
        if not line.strip() or line.strip().startswith("; ..."):
            continue
        assert any(line == r for r in lines), (
            f"docs/how-it-works.md: the {stage} excerpt line {line!r} is not (in order) in the dump"
        )


# bench/plot.py draws docs/img/benchmarks.png from bench/RESULTS.md; its parser needs no matplotlib


def test_benchmark_plot_parses_results():
    spec = importlib.util.spec_from_file_location("bench_plot", ROOT / "bench" / "plot.py")
    plot = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = plot  # dataclasses look their module up
    try:
        spec.loader.exec_module(plot)
    finally:
        del sys.modules[spec.name]
    header, tables = plot.parse((ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8"))
    assert header.startswith("Run of")
    assert len(tables) >= 5
    for table in tables:
        assert table.bars and all(r > 0 for _, r in table.bars), table.title
        assert "seed" not in table.title
    assert (DOCS / "img" / "benchmarks.png").is_file(), "run: python bench/plot.py"


def test_mkdocs_build_strict(tmp_path):
    """The site builds without a warning (broken links, missing pages, API entries that do not
    resolve). Skipped unless the documentation toolchain is installed."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    pytest.importorskip("mkdocstrings_handlers.python")
    pytest.importorskip("material")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "site" / "api" / "index.html").is_file()
