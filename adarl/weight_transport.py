"""How weights travel between processes: size-bounded buckets, their flat wire layout, and the
broadcast group that carries them.

Both sync paths move weights bucket by bucket so that no single message, gather or buffer holds
more than `bucket_size_bytes` (a tensor larger than the bound travels alone). The plan depends
only on the weights' names, shapes and dtypes, so sender and receivers compute the same one.
The broadcast group and its two ends are the GPU path's transport (adarl/weight_sync/broadcast.py
has the design).

Shared by the learner (rank 0 sends) and adarl/weight_sync (plans, receives); it imports neither,
so that weight_sync → learner stays the one direction between them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

import torch


class WeightSpec(Protocol):
    """What a bucket plan needs to know about one weight (`adarl.learner.WeightInfo`)."""

    @property
    def name(self) -> str: ...

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> torch.dtype: ...

    @property
    def num_bytes(self) -> int: ...


@dataclass(frozen=True)
class BucketEntry:
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    offset: int  # elements into the flat buffer of its dtype
    numel: int


@dataclass(frozen=True)
class BucketLayout:
    """One bucket: its weights and where each sits in the flat buffer of its dtype."""

    entries: tuple[BucketEntry, ...]
    numel_per_dtype: tuple[tuple[torch.dtype, int], ...]  # buffers in this order on the wire

    @property
    def names(self) -> list[str]:
        return [entry.name for entry in self.entries]

    @property
    def num_bytes(self) -> int:
        return sum(
            numel * torch.empty((), dtype=dtype).element_size()
            for dtype, numel in self.numel_per_dtype
        )


def plan_buckets(weights: Sequence[WeightSpec], bucket_size_bytes: int) -> list[BucketLayout]:
    """Consecutive weights grouped so each bucket's bytes ≤ `bucket_size_bytes` (order kept)."""
    if bucket_size_bytes < 1:
        raise ValueError(f"bucket_size_bytes must be >= 1, got {bucket_size_bytes}")
    groups: list[list[WeightSpec]] = []
    size = 0
    for weight in weights:
        if groups and groups[-1] and size + weight.num_bytes <= bucket_size_bytes:
            groups[-1].append(weight)
            size += weight.num_bytes
        else:
            groups.append([weight])
            size = weight.num_bytes
    return [_layout(group) for group in groups]


def _layout(weights: Sequence[WeightSpec]) -> BucketLayout:
    dtypes = sorted({w.dtype for w in weights}, key=str)
    offsets = dict.fromkeys(dtypes, 0)
    entries = []
    for weight in weights:
        numel = 1
        for size in weight.shape:
            numel *= size
        entries.append(
            BucketEntry(
                weight.name, tuple(weight.shape), weight.dtype, offsets[weight.dtype], numel
            )
        )
        offsets[weight.dtype] += numel
    return BucketLayout(
        entries=tuple(entries), numel_per_dtype=tuple((d, offsets[d]) for d in dtypes)
    )


def flatten_bucket(
    layout: BucketLayout, tensors: Mapping[str, torch.Tensor], *, device: torch.device
) -> list[torch.Tensor]:
    """One contiguous buffer per dtype of the layout, filled with `tensors` (sender side)."""
    buffers = empty_buffers(layout, device=device)
    by_dtype = dict(zip([d for d, _ in layout.numel_per_dtype], buffers, strict=True))
    for entry in layout.entries:
        tensor = tensors[entry.name]
        if tuple(tensor.shape) != entry.shape or tensor.dtype != entry.dtype:
            raise ValueError(
                f"weight {entry.name!r} is {tuple(tensor.shape)} {tensor.dtype}, the bucket plan "
                f"says {entry.shape} {entry.dtype}"
            )
        flat = by_dtype[entry.dtype]
        flat[entry.offset : entry.offset + entry.numel].copy_(tensor.reshape(-1))
    return buffers


def empty_buffers(layout: BucketLayout, *, device: torch.device) -> list[torch.Tensor]:
    """Uninitialised flat buffers for `layout` (receiver side)."""
    return [
        torch.empty(numel, dtype=dtype, device=device) for dtype, numel in layout.numel_per_dtype
    ]


def unflatten_bucket(
    layout: BucketLayout, buffers: Sequence[torch.Tensor]
) -> dict[str, torch.Tensor]:
    """Views into `buffers`, one per weight, named and shaped as planned."""
    by_dtype = dict(zip([d for d, _ in layout.numel_per_dtype], buffers, strict=True))
    return {
        e.name: by_dtype[e.dtype][e.offset : e.offset + e.numel].view(e.shape)
        for e in layout.entries
    }


# -- the broadcast group --------------------------------------------------------------------

STORE_PREFIX = "adarl_weight_broadcast"


def create_broadcast_group(
    *,
    master_addr: str,
    master_port: int,
    rank: int,
    world_size: int,
    backend: str,
    timeout_s: float,
) -> Any:
    """A standalone torch.distributed backend (not the default group); blocks until all join."""
    import torch.distributed as dist

    timeout = timedelta(seconds=timeout_s)
    store = dist.TCPStore(
        master_addr, master_port, world_size, is_master=rank == 0, timeout=timeout
    )
    prefixed = dist.PrefixStore(STORE_PREFIX, store)
    if backend == "gloo":
        return dist.ProcessGroupGloo(prefixed, rank, world_size, timeout)
    if backend == "nccl":
        if not torch.cuda.is_available() or not hasattr(dist, "ProcessGroupNCCL"):
            raise RuntimeError("weight_sync backend 'nccl' needs CUDA and a CUDA build of torch")
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        return dist.ProcessGroupNCCL(prefixed, rank, world_size, options)
    raise ValueError(f"broadcast backend must be 'nccl' or 'gloo', got {backend!r}")


def broadcast_buffers(group: Any, buffers: Sequence[torch.Tensor]) -> None:
    """Broadcast every buffer in place from rank 0 of `group`."""
    import torch.distributed as dist

    options = dist.BroadcastOptions()
    options.rootRank = 0
    for buffer in buffers:
        group.broadcast([buffer], options).wait()


class WeightBroadcastSender:
    """Learner rank 0's end: packs and broadcasts buckets."""

    def __init__(self, *, group: Any, device: torch.device) -> None:
        self._group = group
        self._device = device

    def send(self, layout: BucketLayout, tensors: dict[str, torch.Tensor]) -> None:
        broadcast_buffers(self._group, flatten_bucket(layout, tensors, device=self._device))


class WeightBroadcastReceiver:
    """An engine's end: receives buckets into fresh buffers and returns named views."""

    def __init__(self, *, group: Any, device: torch.device) -> None:
        self._group = group
        self._device = device
        self.buckets_received = 0  # over this receiver's life

    def stream(self, layouts: Sequence[BucketLayout]) -> Iterator[tuple[str, torch.Tensor]]:
        """(name, tensor) in plan order; bucket k+1 is received only after every tensor of
        bucket k was taken, and a bucket's buffers live only as long as the consumer keeps
        views of them."""
        for layout in layouts:
            buffers = empty_buffers(layout, device=self._device)
            broadcast_buffers(self._group, buffers)
            self.buckets_received += 1
            yield from unflatten_bucket(layout, buffers).items()
            del buffers

    def receive(self, layouts: Sequence[BucketLayout]) -> dict[str, torch.Tensor]:
        """Every bucket, materialised as one dict (a full extra copy; prefer `stream`)."""
        return dict(self.stream(layouts))
