"""CPU weight sync through Ray's object store (see adarl/weight_sync/base.py).

Per push: the learners gather each size-bounded bucket once (every rank takes part, so ZeRO-3
parameters are all-gathered); rank 0's copy of a bucket is the return value of an actor call and
so already sits in the object store — the driver never fetches it. Each engine is then handed
the bucket references; Ray fetches them into the engine's process, where `load_buckets`
assembles them and calls `update_weights`.

In-process learners or engines use the same code: a bucket is then a plain dict, put into the
object store once when any engine is an actor, or handed over directly otherwise.

An engine that died (its actor gone) is skipped by a push, with a warning: the rollout pool
restarts it at its next call and hands it the current weights through `resync` before it serves
(adarl/rollout/pool.py), so no engine ever generates with stale weights.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import torch

from adarl.cluster import is_actor_death
from adarl.weight_sync.base import (
    TIMEOUT_KEY,
    WeightSyncReport,
    call_on_engine,
    is_actor_handle,
    load_buckets,
)
from adarl.weight_transport import plan_buckets

if TYPE_CHECKING:
    from adarl.learner.group import LearnerGroup

log = logging.getLogger(__name__)


class ObjectStoreWeightSync:
    """`WeightSync` for CPU clusters: buckets through the object store (module docstring)."""

    def __init__(
        self,
        *,
        engines: Sequence[Any],
        bucket_size_bytes: int = 64 * 1024 * 1024,
        timeout_s: float | None = None,
    ) -> None:
        """`engines`: read at every push (pass the pool's live `engine_endpoints()`).
        `timeout_s`: the longest a push may take (None = no limit)."""
        if not engines:
            raise ValueError("weight sync needs at least one engine")
        if bucket_size_bytes < 1:
            raise ValueError(f"bucket_size_bytes must be >= 1, got {bucket_size_bytes}")
        self._engines = engines
        self._bucket_size_bytes = bucket_size_bytes
        self._timeout_s = timeout_s
        self._last: WeightSyncReport | None = None

    def push(self, learners: LearnerGroup) -> WeightSyncReport:
        start = time.perf_counter()
        deadline = None if self._timeout_s is None else start + self._timeout_s
        version, num_bytes, num_buckets, gathered = self._load(
            list(self._engines), learners, deadline=deadline, skip_dead=True
        )
        done = time.perf_counter()
        self._last = WeightSyncReport(
            version=version,
            num_bytes=num_bytes,
            num_buckets=num_buckets,
            gather_s=gathered - start,
            transfer_s=done - gathered,
            total_s=done - start,
        )
        return self._last

    def resync(self, endpoint: Any, learners: LearnerGroup) -> int:
        start = time.perf_counter()
        deadline = None if self._timeout_s is None else start + self._timeout_s
        version = self._load([endpoint], learners, deadline=deadline, skip_dead=False)[0]
        log.info(
            "weight sync: version %d loaded into a restarted engine in %.2f s",
            version,
            time.perf_counter() - start,
        )
        return version

    def metrics(self) -> dict[str, float]:
        return self._last.metrics() if self._last is not None else {}

    def _load(
        self,
        engines: list[Any],
        learners: LearnerGroup,
        *,
        deadline: float | None,
        skip_dead: bool,
    ) -> tuple[int, int, int, float]:
        """Gather the learners' weights once and load them into `engines`; returns (version,
        bytes, buckets, time the gather ended). With `skip_dead`, an engine whose actor died is
        left out (the pool restarts it and resyncs it before it serves)."""
        version = learners.weight_version().version
        layouts = plan_buckets(learners.weight_infos(), self._bucket_size_bytes)
        payloads = [learners.gather_weights(layout.names, keep_remote=True) for layout in layouts]
        # A bucket is now a dict (in-process learners) or an ObjectRef (actors).
        buckets = [p.result() if isinstance(p, Future) else p for p in payloads]
        gathered = time.perf_counter()
        for_actors = _as_refs(buckets) if any(map(is_actor_handle, engines)) else []
        in_process = _as_dicts(buckets) if not all(map(is_actor_handle, engines)) else []
        futures = [
            call_on_engine(
                engine,
                load_buckets,
                version,
                *(for_actors if is_actor_handle(engine) else in_process),
            )
            for engine in engines
        ]
        remaining = None if deadline is None else max(0.0, deadline - time.perf_counter())
        _, pending = concurrent.futures.wait(futures, timeout=remaining)
        if pending:
            raise TimeoutError(
                f"weight sync: {len(pending)} of {len(futures)} engines did not load weight "
                f"version {version} within {self._timeout_s:g} s ({TIMEOUT_KEY}); raise "
                f"{TIMEOUT_KEY} for large models, or look for a stuck engine in the Ray logs"
            )
        versions = []
        for future in futures:
            error = future.exception()
            if error is not None and skip_dead and is_actor_death(error):
                log.warning(
                    "weight sync: an engine died before loading version %d (%s); the rollout "
                    "pool restarts it with these weights at its next call",
                    version,
                    type(error).__name__,
                )
                continue
            versions.append(future.result())
        if any(v != version for v in versions):
            raise RuntimeError(f"engines report weight versions {versions} after loading {version}")
        return version, sum(layout.num_bytes for layout in layouts), len(layouts), gathered


def _as_refs(buckets: list[Any]) -> list[Any]:
    """Each bucket as an ObjectRef: in-process dicts are put once, shared by every engine."""
    import ray

    return [ray.put(b) if isinstance(b, dict) else b for b in buckets]


def _as_dicts(buckets: list[Any]) -> list[dict[str, torch.Tensor]]:
    """Each bucket as a dict in this process (fetched if it is an ObjectRef)."""
    if all(isinstance(b, dict) for b in buckets):
        return buckets
    import ray

    return [b if isinstance(b, dict) else ray.get(b) for b in buckets]
