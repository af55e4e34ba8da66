"""Prompt text <-> engine tokens: the one place that knows how a task prompt is laid out.

The layout matches the warm start (`adarl.models.tiny`): `<bos> prompt [hint]`, and the model
answers `answer <eos>`. A hint, when the hint generator gives one, is appended to the prompt
text between the prompt and the answer, exactly as it will be seen during training on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from transformers import PreTrainedTokenizerBase

from adarl.types import (
    GenerationRequest,
    GenerationResult,
    PromptRequest,
    Rollout,
    SamplingParams,
)


@dataclass
class PromptCodec:
    tokenizer: PreTrainedTokenizerBase
    sampling: SamplingParams
    # Prompt text -> token ids: a prompt is drawn several times per step (streaming follow-ups)
    # and again in later epochs; tokenizing it once saves the driver's time. Bounded.
    _token_cache: dict[str, tuple[int, ...]] = field(default_factory=dict, repr=False)
    _cache_limit: int = 100_000

    @property
    def pad_token_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else self.tokenizer.eos_token_id)

    def prompt_token_ids(self, text: str) -> tuple[int, ...]:
        cached = self._token_cache.get(text)
        if cached is not None:
            return cached
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        bos = self.tokenizer.bos_token_id
        tokens = tuple(([bos] if bos is not None else []) + list(ids))
        if len(self._token_cache) >= self._cache_limit:
            self._token_cache.clear()
        self._token_cache[text] = tokens
        return tokens

    def generation_request(
        self, request: PromptRequest, *, sampling: SamplingParams | None = None
    ) -> GenerationRequest:
        text = request.example.prompt + (request.hint or "")
        return GenerationRequest(
            request_id=request.request_id,
            prompt_token_ids=self.prompt_token_ids(text),
            num_samples=request.num_samples,
            sampling=sampling or self.sampling,
            seed=request.seed,
        )

    def generation_requests(self, requests: Sequence[PromptRequest]) -> list[GenerationRequest]:
        return [self.generation_request(r) for r in requests]

    @staticmethod
    def rollouts(
        request: PromptRequest, sent: GenerationRequest, result: GenerationResult
    ) -> list[Rollout]:
        """One `Rollout` per completion of `sent` (the engine request made from `request`)."""
        return [
            Rollout(
                request_id=request.request_id,
                prompt_id=request.example.prompt_id,
                prompt_token_ids=sent.prompt_token_ids,
                completion=completion,
                weight_version=result.weight_version,
                hint_level=request.hint_level,
            )
            for completion in result.completions
        ]
