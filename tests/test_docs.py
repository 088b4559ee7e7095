"""Every Python block in README.md runs, so the documentation cannot rot; model functions it
defines are checked against central differences."""

from __future__ import annotations

import pathlib
import re
import textwrap

import numpy as np
import pytest

import tapejit as tj

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


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
    from tapejit import numpy_api

    text = README.read_text()
    block = text.split("<!-- supported:begin -->\n")[1].split("\n<!-- supported:end -->")[0]
    assert block == numpy_api.supported_markdown(), (
        "README's supported list is stale; regenerate it with "
        "python -c 'import tapejit.numpy_api as m; print(m.supported_markdown())'"
    )


def test_readme_lists_exactly_the_primitives():
    from tapejit import cli

    text = README.read_text()
    block = text.split("<!-- primitives:begin -->\n")[1].split("\n<!-- primitives:end -->")[0]
    assert block == cli.primitives_markdown(), (
        "README's table of primitives is stale; regenerate it with `tapejit ops`"
    )
