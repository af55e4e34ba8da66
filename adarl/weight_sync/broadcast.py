"""GPU weight sync: a broadcast group from learner rank 0 to the rollout engines, bucketed.

Design (the usual one for colocated-free GPU RL, cf. OpenRLHF/verl's NCCL weight update):

* One extra process group, separate from the learners' data-parallel group and from each
  engine's own: rank 0 is learner rank 0, ranks 1..K are the K engines. It is created with its
  own TCPStore at learner rank 0's address, so no process's default group is touched (vLLM and
  DeepSpeed each own theirs).
* Per push, bucket by bucket (`plan_buckets`, bounded by `bucket_size_bytes`): every learner rank
  takes part in gathering the bucket's weights (ZeRO-3 all-gather), rank 0 packs them into one
  flat device buffer per dtype and broadcasts those buffers; each engine receives into
  preallocated buffers of the same layout and unpacks views. One collective per dtype per bucket,
  not one per tensor. Layouts are computed by the driver from the weight names/shapes/dtypes and
  sent to both sides, so nothing else needs to be agreed on.
* The engine receives as it loads: `receive_broadcast` hands the engine a stream that receives
  bucket k+1 only when bucket k's tensors have been consumed (`load_weight_stream`, which the
  vLLM and HF engines implement), so besides the engine's own weights at most about one bucket is
  held, never a full extra copy of the model (measured: `python -m adarl.bench scaling`). An
  engine without `load_weight_stream` gets the whole dict through `update_weights` as before.
  If loading fails part-way, the remaining buckets are still received (the sender and the other
  engines are in the same collectives) before the error propagates.

The group works with backend "nccl" (GPUs; NCCL needs one distinct GPU per member) or "gloo"
(CPU tensors, or CUDA tensors staged through the host; what the CPU tests use, and the fallback
for a learner and an engine sharing one GPU). The wire itself (bucket layout, the group, its
sender and receiver ends) is adarl/weight_transport.py, which the learner imports too.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from adarl.weight_sync.base import WeightSyncReport, call_on_engine, is_actor_handle, wait_all
from adarl.weight_transport import (
    STORE_PREFIX,
    BucketLayout,
    WeightBroadcastReceiver,
    create_broadcast_group,
    plan_buckets,
)

if TYPE_CHECKING:
    from adarl.learner.group import LearnerGroup

# Receivers living in this (engine) process, by group name: the engine object itself stays
# untouched, and a process can serve several groups (e.g. after a learner restart).
_RECEIVERS: dict[str, WeightBroadcastReceiver] = {}


def join_broadcast_group(
    _engine: Any,
    group_name: str,
    master_addr: str,
    master_port: int,
    rank: int,
    world_size: int,
    backend: str,
    timeout_s: float,
    device: str,
) -> None:
    """Engine side of set-up (runs in the engine's process via `call_on_engine`). `device`:
    where the engine receives; "auto" is its GPU when its process has one, else the CPU."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    group = create_broadcast_group(
        master_addr=master_addr,
        master_port=master_port,
        rank=rank,
        world_size=world_size,
        backend=backend,
        timeout_s=timeout_s,
    )
    _RECEIVERS[group_name] = WeightBroadcastReceiver(group=group, device=torch.device(device))


def receive_broadcast(
    engine: Any, group_name: str, version: int, layouts: Sequence[BucketLayout]
) -> int:
    """Engine side of a push: receive every bucket, load them, return the engine's version."""
    receiver = _RECEIVERS.get(group_name)
    if receiver is None:
        raise RuntimeError(f"this engine process has not joined weight broadcast {group_name!r}")
    load_stream = getattr(engine, "load_weight_stream", None)
    if load_stream is None:
        engine.update_weights(version, receiver.receive(layouts))
        return int(engine.weight_version())
    stream = receiver.stream(layouts)
    try:
        load_stream(version, [name for layout in layouts for name in layout.names], stream)
    except BaseException:
        # Take part in the rest of the push, so that the sender and the other engines are not
        # left waiting in a collective until the timeout; then report the engine's error.
        for _ in stream:
            pass
        raise
    return int(engine.weight_version())


class BroadcastWeightSync:
    """`WeightSync` for GPU clusters: learner rank 0 broadcasts to engine actors (module doc).

    `engines` must be Ray actor handles (each engine in its own process). The group is created on
    the first push. `engine_device` is where engines receive: "cuda" (their current GPU), "cpu",
    or "auto" (each engine's GPU if its process has one, else the CPU: what a session uses).
    """

    def __init__(
        self,
        *,
        engines: Sequence[Any],
        bucket_size_bytes: int = 64 * 1024 * 1024,
        backend: str = "nccl",
        timeout_s: float = 600.0,
        engine_device: str = "auto",
        wait_timeout_s: float | None = None,
    ) -> None:
        """`timeout_s`: the group's rendezvous and collectives; `wait_timeout_s`: the longest
        one push may take in all (faults.weight_sync_timeout_s; None = no limit)."""
        if not engines:
            raise ValueError("weight sync needs at least one engine")
        if not all(is_actor_handle(e) for e in engines):
            raise ValueError(
                "BroadcastWeightSync needs every engine as a Ray actor (its own process); use "
                "ObjectStoreWeightSync for in-process engines"
            )
        self._engines = list(engines)
        self._bucket_size_bytes = bucket_size_bytes
        self._backend = backend
        self._timeout_s = timeout_s
        self._engine_device = engine_device
        self._wait_timeout_s = wait_timeout_s
        self._group_name: str | None = None
        self._last: WeightSyncReport | None = None

    def _setup(self, learners: LearnerGroup) -> str:
        from adarl.learner.learner import Learner

        address, port = learners.rendezvous_address()
        world_size = 1 + len(self._engines)
        group_name = f"{STORE_PREFIX}_{address}_{port}"
        futures = [
            learners.rank0_submit(
                Learner.init_weight_broadcast,
                master_addr=address,
                master_port=port,
                world_size=world_size,
                backend=self._backend,
                timeout_s=self._timeout_s,
            ),
            *(
                call_on_engine(
                    engine,
                    join_broadcast_group,
                    group_name,
                    address,
                    port,
                    rank,
                    world_size,
                    self._backend,
                    self._timeout_s,
                    self._engine_device,
                )
                for rank, engine in enumerate(self._engines, start=1)
            ),
        ]
        # Members of one collective: a member's failure is raised at once, since the others
        # would wait for it until learner.weight_sync.broadcast_timeout_s.
        wait_all(
            futures,
            self._wait_timeout_s,
            waiting_for="joining the weight broadcast group",
            fail_fast=True,
        )
        return group_name

    def push(self, learners: LearnerGroup) -> WeightSyncReport:
        from adarl.learner.learner import Learner

        start = time.perf_counter()
        if self._group_name is None:
            self._group_name = self._setup(learners)
        joined = time.perf_counter()
        version = learners.weight_version().version
        layouts = plan_buckets(learners.weight_infos(), self._bucket_size_bytes)
        engine_futures = [
            call_on_engine(engine, receive_broadcast, self._group_name, version, layouts)
            for engine in self._engines
        ]
        learner_futures = learners.all_ranks_submit(Learner.broadcast_weights, layouts)
        results = wait_all(
            [*engine_futures, *learner_futures],
            self._wait_timeout_s,
            waiting_for="a weight broadcast",
            fail_fast=True,  # as when joining
        )
        versions = results[: len(engine_futures)]
        if any(v != version for v in versions):
            raise RuntimeError(f"engines report weight versions {versions} after loading {version}")
        done = time.perf_counter()
        self._last = WeightSyncReport(
            version=version,
            num_bytes=sum(layout.num_bytes for layout in layouts),
            num_buckets=len(layouts),
            gather_s=0.0,  # gathering and broadcasting overlap bucket by bucket
            transfer_s=done - joined,
            total_s=done - start,
        )
        return self._last

    def resync(self, endpoint: Any, learners: LearnerGroup) -> int:
        # The group's membership is fixed when it is created; a restarted engine is not in it.
        raise RuntimeError(
            "learner.weight_sync.method=broadcast cannot take in a restarted engine (the "
            "broadcast group is fixed at its first push); use faults.engine_failure=fail with "
            "broadcast, or learner.weight_sync.method=object_store"
        )

    def metrics(self) -> dict[str, float]:
        return self._last.metrics() if self._last is not None else {}
