"""Shared test set-up.

- The on-disk cache of compiled code goes to a temporary directory, so the tests neither read a
  developer's cache nor leave entries behind. Under pytest-xdist (``-n auto`` in pyproject.toml)
  every worker has its own base temporary directory, hence its own cache: workers never race on
  one cache entry (tests/test_cache.py tests concurrent writers on purpose, in its own folders).
- Graphviz's ``dot`` program: when it is not installed, the ``graphviz-pure`` program of the test
  extra (a self-contained port with ``dot``'s command line) is put on PATH under the name ``dot``
  for this process and its subprocesses, so the picture tests run after ``pip install -e
  '.[test]'`` alone. An installed Graphviz is always preferred (``apt-get install graphviz``).
"""

from __future__ import annotations

import atexit
import os
import shlex
import shutil
import sysconfig
import tempfile

import pytest


def _provide_dot() -> None:
    if shutil.which("dot") is not None:
        return
    scripts = sysconfig.get_path("scripts")
    port = shutil.which("graphviz-pure") or shutil.which("graphviz-pure", path=scripts)
    if port is None:
        return  # the picture tests say what to install
    folder = tempfile.mkdtemp(prefix="tapejit-dot-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    dot = os.path.join(folder, "dot")
    with open(dot, "w") as f:  # -q: no warnings (the port has no fontconfig: "no metrics for
        f.write(f"#!/bin/sh\nexec {shlex.quote(port)} -q \"$@\"\n")  # 'monospace'"); errors stay
    os.chmod(dot, 0o755)
    os.environ["PATH"] = folder + os.pathsep + os.environ.get("PATH", "")


_provide_dot()


@pytest.fixture(autouse=True, scope="session")
def _private_cache_dir(tmp_path_factory):
    old = os.environ.get("TAPEJIT_CACHE_DIR")
    os.environ["TAPEJIT_CACHE_DIR"] = str(tmp_path_factory.mktemp("tapejit-cache"))
    yield
    if old is None:
        os.environ.pop("TAPEJIT_CACHE_DIR", None)
    else:
        os.environ["TAPEJIT_CACHE_DIR"] = old


@pytest.fixture
def unconverted(monkeypatch):
    """Loops and branches traced as written (no conversion from the source): for tests of the
    paths conversion now usually bypasses — guards, re-rolling an unrolled trace."""
    from tapejit.frontend.loops import loop_source

    monkeypatch.setattr(loop_source, "CONVERT", False)
    loop_source._rewritten_code.cache_clear()
    yield
    loop_source._rewritten_code.cache_clear()
