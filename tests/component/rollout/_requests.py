"""Requests over a few arithmetic prompts, and their completions as a learner's batch: shared by
the engine contract tests and the compiled-engine test."""

from __future__ import annotations

import torch
from transformers import PreTrainedTokenizerBase

from adarl.types import GenerationRequest, GenerationResult, SamplingParams, TrainBatch

PROMPTS = ("12+7=", "45*3=", "100-1=", "3+4=", "99*99=", "250+250=")


def make_requests(
    tokenizer: PreTrainedTokenizerBase,
    *,
    n: int = 4,
    seed: int = 0,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    max_new_tokens: int = 8,
    prompts: tuple[str, ...] = PROMPTS,
) -> list[GenerationRequest]:
    sampling = SamplingParams(
        temperature=temperature, top_k=top_k, top_p=top_p, max_new_tokens=max_new_tokens
    )
    return [
        GenerationRequest(
            request_id=f"{prompt}#{seed}",
            prompt_token_ids=tuple(tokenizer(prompt)["input_ids"]),
            num_samples=n,
            sampling=sampling,
            seed=seed + 1000 * i,
        )
        for i, prompt in enumerate(prompts)
    ]


def rollouts_batch(requests: list[GenerationRequest], results: list[GenerationResult]):
    """The completions as a right-padded TrainBatch with the engine's log-probs as behaviour."""
    rows = [
        (request.prompt_token_ids, completion)
        for request, result in zip(requests, results, strict=True)
        for completion in result.completions
    ]
    length = max(len(prompt) + len(c.token_ids) for prompt, c in rows)
    batch = TrainBatch(
        input_ids=torch.zeros(len(rows), length, dtype=torch.long),
        attention_mask=torch.zeros(len(rows), length, dtype=torch.bool),
        response_mask=torch.zeros(len(rows), length, dtype=torch.bool),
        behaviour_logprobs=torch.zeros(len(rows), length),
        advantages=torch.zeros(len(rows), length),
        prompt_index=torch.arange(len(rows)),
    )
    for row, (prompt, completion) in enumerate(rows):
        end = len(prompt) + len(completion.token_ids)
        batch.input_ids[row, :end] = torch.tensor(list(prompt) + list(completion.token_ids))
        batch.attention_mask[row, :end] = True
        batch.response_mask[row, len(prompt) : end] = True
        batch.behaviour_logprobs[row, len(prompt) : end] = torch.tensor(completion.logprobs)
    return batch
