"""Shared test set-up: the on-disk cache of compiled code goes to a temporary directory, so the
tests neither read a developer's cache nor leave entries behind."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_cache_dir(tmp_path_factory):
    old = os.environ.get("TAPEJIT_CACHE_DIR")
    os.environ["TAPEJIT_CACHE_DIR"] = str(tmp_path_factory.mktemp("tapejit-cache"))
    yield
    if old is None:
        os.environ.pop("TAPEJIT_CACHE_DIR", None)
    else:
        os.environ["TAPEJIT_CACHE_DIR"] = old
