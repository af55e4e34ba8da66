"""The rollout-engine protocol: every engine (vLLM, HF, fake) implements exactly this."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

import torch

from adarl.types import GenerationRequest, GenerationResult


@runtime_checkable
class RolloutEngine(Protocol):
    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Sample every request; results in the order of `requests`. Each token's log-prob is
        that of the distribution that drew it (adarl/rollout/common.py).

        Seeded: the same requests (ids, seeds, params) on the same weights give the same tokens.
        """
        ...

    def score(
        self,
        prompt_token_ids: Sequence[Sequence[int]],
        response_token_ids: Sequence[Sequence[int]],
        *,
        temperature: float = 1.0,
    ) -> list[list[float]]:
        """Teacher-forced log π_T(response_i[t] | prompt_i, response_i[:t]) for each pair, with
        π_T = softmax(logits / temperature) (adarl/rollout/common.py)."""
        ...

    def update_weights(self, version: int, weights: Mapping[str, torch.Tensor]) -> None:
        """Load a full set of HF-named weights and tag later generations with `version`."""
        ...

    def weight_version(self) -> int: ...
