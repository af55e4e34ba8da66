"""Weight sync from the learners to the rollout engines (protocol: adarl/weight_sync/base.py)."""

from adarl.weight_sync.base import WeightSync, WeightSyncReport
from adarl.weight_sync.broadcast import BroadcastWeightSync
from adarl.weight_sync.build import build_weight_sync
from adarl.weight_sync.object_store import ObjectStoreWeightSync

__all__ = [
    "BroadcastWeightSync",
    "ObjectStoreWeightSync",
    "WeightSync",
    "WeightSyncReport",
    "build_weight_sync",
]
