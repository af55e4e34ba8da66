"""The policy's weights leaving a learner: listed, gathered, broadcast to the engines, exported.

`PolicyWeights` names the policy's tensors as its HF checkpoint does (tied parameters once, plus
the persistent buffers): what the engines' `update_weights` and `save_pretrained` expect. Under
ZeRO-3 every parameter is partitioned, so each gather is a collective: every rank calls the same
method with the same arguments, and rank 0 holds (or sends) the full tensors. Two paths use it:
weight sync (adarl/weight_sync: full CPU copies through the object store, or rank 0 as the root
of a broadcast group, one bucket gathered at a time) and the HF export.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from adarl.weight_transport import BucketLayout, WeightBroadcastSender

# Files that make up a saved tokenizer; copied verbatim into HF exports so that the export
# loads with exactly the tokenizer the policy was trained with.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
)


@dataclass(frozen=True)
class WeightInfo:
    """Name, full shape and dtype of one weight (full even when ZeRO-3 partitions it)."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def num_bytes(self) -> int:
        numel = 1
        for size in self.shape:
            numel *= size
        return numel * torch.empty((), dtype=self.dtype).element_size()


class PolicyWeights:
    """One rank's view of the policy's weights (see the module docstring)."""

    def __init__(
        self, module: torch.nn.Module, *, rank: int, zero_stage: int, device: torch.device
    ) -> None:
        """`module`: the HF model the DeepSpeed engine trains (partitioned under ZeRO-3);
        `device`: where rank 0 packs the buckets it broadcasts."""
        self._module = module
        self._rank = rank
        self._zero_stage = zero_stage
        self._device = device
        self._persistent_buffer_names: set[str] | None = None
        self._sender: WeightBroadcastSender | None = None

    def named(self) -> dict[str, torch.Tensor]:
        """HF-named parameters (tied ones once) and persistent buffers of the policy: the
        tensors of its checkpoint, i.e. what `update_weights` and `save_pretrained` expect."""
        module = self._module
        if self._persistent_buffer_names is None:
            state_keys = set(module.state_dict().keys())
            self._persistent_buffer_names = {
                n for n, _ in module.named_buffers() if n in state_keys
            }
        weights = dict(module.named_parameters())
        for name, buffer in module.named_buffers():
            if name in self._persistent_buffer_names and name not in weights:
                weights[name] = buffer
        return weights

    def infos(self) -> list[WeightInfo]:
        """Every weight's name, full shape and dtype, in a fixed order (no collective)."""
        return [
            WeightInfo(name=name, shape=tuple(getattr(t, "ds_shape", t.shape)), dtype=t.dtype)
            for name, t in self.named().items()
        ]

    def gather(self, names: Sequence[str]) -> dict[str, torch.Tensor]:
        """Full CPU copies of `names` on rank 0 ({} on other ranks). Collective under ZeRO-3."""
        named = self.named()
        missing = [n for n in names if n not in named]
        if missing:
            raise KeyError(f"unknown weight names {missing[:5]}; see weight_infos()")
        tensors = [named[n] for n in names]
        out: dict[str, torch.Tensor] = {}
        with self._gathered([t for t in tensors if hasattr(t, "ds_id")]):
            if self._rank == 0:
                for name, tensor in zip(names, tensors, strict=True):
                    out[name] = tensor.detach().to("cpu", copy=True).contiguous()
        return out

    def join_broadcast(
        self,
        *,
        master_addr: str,
        master_port: int,
        world_size: int,
        backend: str,
        timeout_s: float,
    ) -> None:
        """Rank 0 joins the weight-broadcast group as its root (adarl/weight_sync/broadcast.py)."""
        from adarl.weight_transport import WeightBroadcastSender, create_broadcast_group

        if self._rank != 0:
            raise RuntimeError("only learner rank 0 sends weights")
        group = create_broadcast_group(
            master_addr=master_addr,
            master_port=master_port,
            rank=0,
            world_size=world_size,
            backend=backend,
            timeout_s=timeout_s,
        )
        self._sender = WeightBroadcastSender(group=group, device=self._device)

    def broadcast(self, layouts: Sequence[BucketLayout]) -> None:
        """Every rank gathers each bucket (ZeRO-3); rank 0 broadcasts it to the engines.

        Rank 0 packs straight from the gathered parameters (no intermediate copy), so at most
        one bucket is gathered at a time.
        """
        if self._rank == 0 and self._sender is None:
            raise RuntimeError("init_weight_broadcast was not called on rank 0")
        named = self.named()
        for layout in layouts:
            tensors = {name: named[name] for name in layout.names}
            with self._gathered([t for t in tensors.values() if hasattr(t, "ds_id")]):
                if self._sender is not None:
                    self._sender.send(layout, {n: t.detach() for n, t in tensors.items()})

    def export_hf(self, directory: str, *, tokenizer_source: str) -> None:
        """An HF model directory (config, safetensors, and the tokenizer files found in the
        directory `tokenizer_source`) on rank 0. Collective."""
        weights = self.gather([info.name for info in self.infos()])
        if self._rank == 0:
            save_hf_model(directory, self._module, weights, tokenizer_source=tokenizer_source)

    @contextmanager
    def _gathered(self, params: Sequence[torch.Tensor]) -> Iterator[None]:
        if self._zero_stage != 3 or not params:
            yield
            return
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(params), modifier_rank=None):
            yield


def save_hf_model(
    directory: str | Path,
    model: torch.nn.Module,
    weights: dict[str, torch.Tensor],
    *,
    tokenizer_source: str | Path,
) -> None:
    """An HF model directory: `model`'s config with `weights` as its safetensors (`model` only
    names and ties them: it may live on the meta device), and the tokenizer files found in the
    directory `tokenizer_source`."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(target, state_dict=weights, safe_serialization=True)  # type: ignore[operator]
    source = Path(tokenizer_source)
    for filename in TOKENIZER_FILES:
        if (source / filename).is_file():
            shutil.copy2(source / filename, target / filename)
