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


@pytest.fixture
def registries() -> Iterator[None]:
    """adarl's registries (uniform estimators, reweightings of the positives, loss terms) as
    they were before the test: whatever a test registers leaves with it."""
    from adarl.algo.advantages import UNIFORM_ESTIMATORS
    from adarl.algo.reweighting import POSITIVE_REWEIGHTINGS
    from adarl.learner.loss_terms import LOSS_TERMS

    kept = [
        (registry, dict(registry))
        for registry in (UNIFORM_ESTIMATORS, POSITIVE_REWEIGHTINGS, LOSS_TERMS)
    ]
    yield
    for registry, entries in kept:
        registry.clear()
        registry.update(entries)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files with long tests first (end-to-end runs, then files holding a `slow` test), each
    file's tests in their own order: `make test`'s workers take whole files in this order
    (`--dist loadfile`), so a long file never starts last and leaves one core idle at the end."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}

    def rank(item: pytest.Item) -> int:
        if "e2e" in item.path.parts:
            return 0
        return 1 if item.path in slow_files else 2

    items.sort(key=rank)  # stable: the order within a rank, and within a file, is kept
