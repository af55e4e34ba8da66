"""Size-bounded buckets of weights, and their flat (one buffer per dtype) wire layout.

Both sync paths move weights bucket by bucket so that no single message, gather or buffer holds
more than `bucket_size_bytes` (a tensor larger than the bound travels alone). The plan depends
only on the weights' names, shapes and dtypes, so sender and receivers compute the same one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

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
