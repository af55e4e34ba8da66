"""Config → components: `build_weight_sync` translates `WeightSyncConfig` into a `WeightSync`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from adarl.weight_sync.base import WeightSync
from adarl.weight_sync.broadcast import BroadcastWeightSync
from adarl.weight_sync.object_store import ObjectStoreWeightSync

if TYPE_CHECKING:
    from adarl.config.learner import WeightSyncConfig


def build_weight_sync(
    config: WeightSyncConfig, *, engines: Sequence[Any], timeout_s: float | None = None
) -> WeightSync:
    """`engines`: engine objects, `InProcessWorker`s around them, or Ray actor handles (the
    rollout pool's live `engine_endpoints()`, so restarted engines get later pushes).
    `timeout_s`: the longest one push may take (faults.weight_sync_timeout_s)."""
    config.validate()
    if config.method == "object_store":
        return ObjectStoreWeightSync(
            engines=engines, bucket_size_bytes=config.bucket_size_bytes, timeout_s=timeout_s
        )
    return BroadcastWeightSync(
        engines=engines,
        bucket_size_bytes=config.bucket_size_bytes,
        backend=config.broadcast_backend,
        timeout_s=config.broadcast_timeout_s,
        wait_timeout_s=timeout_s,
    )
