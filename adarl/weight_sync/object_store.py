"""CPU weight sync through Ray's object store (see adarl/weight_sync/base.py).

Per push: the learners gather each size-bounded bucket once (every rank takes part, so ZeRO-3
parameters are all-gathered); rank 0's copy of a bucket is the return value of an actor call and
so already sits in the object store — the driver never fetches it. Each engine is then handed
the bucket references; Ray fetches them into the engine's process, where `load_buckets`
assembles them and calls `update_weights`.

In-process learners or engines use the same code: a bucket is then a plain dict, put into the
object store once when any engine is an actor, or handed over directly otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import torch

from adarl.weight_sync.base import (
    WeightSyncReport,
    call_on_engine,
    is_actor_handle,
    load_buckets,
    wait_all,
)
from adarl.weight_sync.buckets import plan_buckets

if TYPE_CHECKING:
    from adarl.learner.group import LearnerGroup


class ObjectStoreWeightSync:
    """`WeightSync` for CPU clusters: buckets through the object store (module docstring)."""

    def __init__(self, *, engines: Sequence[Any], bucket_size_bytes: int = 64 * 1024 * 1024):
        if not engines:
            raise ValueError("weight sync needs at least one engine")
        if bucket_size_bytes < 1:
            raise ValueError(f"bucket_size_bytes must be >= 1, got {bucket_size_bytes}")
        self._engines = list(engines)
        self._bucket_size_bytes = bucket_size_bytes
        self._last: WeightSyncReport | None = None

    def push(self, learners: LearnerGroup) -> WeightSyncReport:
        start = time.perf_counter()
        version = learners.weight_version().version
        layouts = plan_buckets(learners.weight_infos(), self._bucket_size_bytes)
        payloads = [learners.gather_weights(layout.names, keep_remote=True) for layout in layouts]
        # A bucket is now a dict (in-process learners) or an ObjectRef (actors).
        buckets = [p.result() if isinstance(p, Future) else p for p in payloads]
        gathered = time.perf_counter()
        for_actors = _as_refs(buckets) if any(map(is_actor_handle, self._engines)) else []
        in_process = _as_dicts(buckets) if not all(map(is_actor_handle, self._engines)) else []
        versions = wait_all(
            [
                call_on_engine(
                    engine,
                    load_buckets,
                    version,
                    *(for_actors if is_actor_handle(engine) else in_process),
                )
                for engine in self._engines
            ]
        )
        if any(v != version for v in versions):
            raise RuntimeError(f"engines report weight versions {versions} after loading {version}")
        done = time.perf_counter()
        self._last = WeightSyncReport(
            version=version,
            num_bytes=sum(layout.num_bytes for layout in layouts),
            num_buckets=len(layouts),
            gather_s=gathered - start,
            transfer_s=done - gathered,
            total_s=done - start,
        )
        return self._last

    def metrics(self) -> dict[str, float]:
        return self._last.metrics() if self._last is not None else {}


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
