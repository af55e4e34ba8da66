"""The weight-sync protocol, its report, and how an engine is reached (in-process or actor).

A `WeightSync` moves the learners' current weights to every rollout engine and tags them with
the learners' weight version; engines stamp that version on every rollout they generate
afterwards (`GenerationResult.weight_version` → `Rollout.weight_version` →
`TrainBatch.weight_versions`). Two implementations:

* `ObjectStoreWeightSync` (CPU path, adarl/weight_sync/object_store.py): weights gathered once
  from the learners (ZeRO-3 included), in size-bounded buckets that stay in Ray's object store
  until each engine fetches them; the engine assembles the buckets and calls
  `update_weights(version, weights)`.
* `BroadcastWeightSync` (GPU path, adarl/weight_sync/broadcast.py): a process group from learner
  rank 0 to the engines; bucket by bucket, flat device buffers are broadcast from rank 0.

Engines are given as a sequence of endpoints that the sync reads at every push (the pool's live
view, `RolloutPool.engine_endpoints`), so a restarted engine gets later pushes and a dropped one
does not; `resync(endpoint, learners)` loads the current weights into one engine (a restarted
one, before it serves). Every wait is bounded (`timeout_s`, faults.weight_sync_timeout_s).

Engines are plain objects implementing `adarl.rollout.base.RolloutEngine`, reached as one of:
the object itself (called in this thread: only while it is idle), an
`adarl.cluster.InProcessWorker` wrapping it (called on the worker's thread), or a Ray actor
handle (the call runs inside the actor through Ray's `__ray_call__`, so engine classes need no
sync-specific methods).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import torch

from adarl.cluster import InProcessWorker, results_within

if TYPE_CHECKING:
    from adarl.learner.group import LearnerGroup

T = TypeVar("T")


@dataclass(frozen=True)
class WeightSyncReport:
    version: int  # the version every engine now reports
    num_bytes: int  # payload size of the full weights
    num_buckets: int
    gather_s: float  # learners: gathering full weights (ZeRO-3 all-gathers included)
    transfer_s: float  # until every engine had loaded the weights
    total_s: float

    def metrics(self) -> dict[str, float]:
        # The whole push is timed by the driver's stage timer (timing/weight_sync_s); this
        # report adds its parts.
        return {
            "timing/weight_sync_gather_s": self.gather_s,
            "timing/weight_sync_transfer_s": self.transfer_s,
            "perf/weight_sync_bytes": float(self.num_bytes),
            "perf/weight_sync_buckets": float(self.num_buckets),
        }


class WeightSync(Protocol):
    def push(self, learners: LearnerGroup) -> WeightSyncReport:
        """Load the learners' current weights into every engine, tagged with their version."""
        ...

    def resync(self, endpoint: Any, learners: LearnerGroup) -> int:
        """Load the learners' current weights into one engine (e.g. a restarted one); returns
        the version it now reports."""
        ...

    def metrics(self) -> dict[str, float]:
        """The last push's report as `timing/` and `perf/` metrics."""
        ...


def merge_buckets(buckets: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """One state dict from buckets; a name in two buckets is a planning bug."""
    weights: dict[str, torch.Tensor] = {}
    for bucket in buckets:
        for name, tensor in bucket.items():
            if name in weights:
                raise ValueError(f"weight {name!r} arrived in two buckets")
            weights[name] = tensor
    return weights


def load_buckets(engine: Any, version: int, *buckets: Mapping[str, torch.Tensor]) -> int:
    """Engine side of the CPU path: assemble the buckets, load them, return the new version."""
    engine.update_weights(version, merge_buckets(buckets))
    return int(engine.weight_version())


def is_actor_handle(endpoint: Any) -> bool:
    try:
        from ray.actor import ActorHandle
    except ImportError:  # Ray is a dependency, but the in-process path must not need it
        return False
    return isinstance(endpoint, ActorHandle)


def call_on_engine(endpoint: Any, fn: Callable[..., T], /, *args: Any) -> Future[T]:
    """Run `fn(engine, *args)` where the engine lives; Ray resolves top-level ObjectRef args."""
    if is_actor_handle(endpoint):
        return endpoint.__ray_call__.remote(fn, *args).future()
    if isinstance(endpoint, InProcessWorker):
        return endpoint.submit(fn, endpoint.obj, *args)
    future: Future[T] = Future()
    try:
        future.set_result(fn(endpoint, *args))
    except BaseException as error:  # delivered through the future like the other paths
        future.set_exception(error)
    return future


TIMEOUT_KEY = "faults.weight_sync_timeout_s"


def wait_all(
    futures: Sequence[Future[T]],
    timeout_s: float | None = None,
    *,
    waiting_for: str = "weight sync",
    fail_fast: bool = False,
) -> list[T]:
    """Results of all futures within `timeout_s` in all (`TimeoutError` naming `waiting_for`
    and faults.weight_sync_timeout_s after it); the first failure propagates once every call
    has finished, or at once with `fail_fast` (`results_within`)."""
    return results_within(
        futures, timeout_s, waiting_for=waiting_for, key=TIMEOUT_KEY, fail_fast=fail_fast
    )
