"""Every Python block in README.md and in the pages of docs/ runs, so the documentation cannot
rot; model functions README defines are checked against central differences. The compiler
listings of docs/how-it-works.md are compared with what `tapejit dump` prints, the benchmark
plot's parser with bench/RESULTS.md, and, when the documentation toolchain is installed
(`pip install -e '.[docs]'`), the site is built with `mkdocs build --strict`."""

from __future__ import annotations

import importlib.util
import linecache
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
# docs/: every ```python block of a page runs, in order, in one namespace per page (a block may use
# names an earlier block of the same page defined), with np and tj imported. Output, shell and C
# listings use other fences (```text, ```sh, ```c) and are not run.


def python_blocks(page: pathlib.Path) -> list[str]:
    return [
        textwrap.dedent(b)
        for b in re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.DOTALL)
    ]


def run_page(page: pathlib.Path) -> dict:
    env = {"np": np, "tj": tj, "__name__": f"docs.{page.stem}"}
    for k, src in enumerate(python_blocks(page)):
        filename = f"docs/{page.name} block {k}"
        # Source lines for tracebacks and for the hints in tapejit's error messages
        linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
        exec(compile(src, filename, "exec"), env)
    return env


PAGES_WITH_CODE = [p for p in PAGES if python_blocks(p)]


def test_docs_pages_have_python_blocks():
    names = {p.name for p in PAGES_WITH_CODE}
    assert {"index.md", "tutorial.md", "how-it-works.md", "sharp-bits.md", "jax.md"} <= names


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda p: p.name)
def test_docs_page_runs(page, capsys):
    run_page(page)


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
