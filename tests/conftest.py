"""Session-wide test settings."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def shared_model_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One cache of built models (the tiny warm starts, the mid-size model and its tokenizer) for
    the whole session (all its parallel workers), so each is trained once rather than once per
    test module; every test and every run it launches reads `$ADARL_CACHE_DIR`. Set it yourself
    to keep builds between sessions."""
    if os.environ.get("ADARL_CACHE_DIR"):
        yield
        return
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # Parallel workers (make test runs two) share one cache under their common base
        # directory; a model's builder holds a file lock, so each is still trained once.
        cache = tmp_path_factory.getbasetemp().parent / "adarl-model-cache"
        cache.mkdir(exist_ok=True)
    else:
        cache = tmp_path_factory.mktemp("adarl-model-cache")
    os.environ["ADARL_CACHE_DIR"] = str(cache)
    try:
        yield
    finally:
        del os.environ["ADARL_CACHE_DIR"]
