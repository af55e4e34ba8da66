"""Synthetic TrainBatches of a chosen shape, for the learner benchmark and tests.

Token ids are random, advantages are group-centred random binary rewards (A = r - mean of the
prompt's rewards, the Dr. GRPO / Reinforce-Ada form), and the behaviour log-probs are either
given (e.g. the learner's own, to be on-policy) or a constant. Lengths vary per sequence so
padding, micro-batch packing and rank balancing are exercised.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch

from adarl.types import TrainBatch


def synthetic_train_batch(
    *,
    num_prompts: int,
    samples_per_prompt: int,
    prompt_length: tuple[int, int],  # inclusive range of prompt lengths
    response_length: tuple[int, int],  # inclusive range of response lengths
    vocab_size: int,
    seed: int,
    first_token_id: int = 4,  # ids below are special tokens (pad/bos/eos/unk in adarl's vocab)
    pad_token_id: int = 0,
    behaviour_logprob: float = -2.0,
    weight_version: int = 0,
) -> TrainBatch:
    """`num_prompts × samples_per_prompt` right-padded sequences; all samples of a prompt share
    its prompt tokens (as in a real group)."""
    if num_prompts < 1 or samples_per_prompt < 1:
        raise ValueError("need num_prompts >= 1 and samples_per_prompt >= 1")
    if prompt_length[0] < 1 or response_length[0] < 1:
        raise ValueError("prompts and responses need at least one token each")
    generator = torch.Generator().manual_seed(seed)

    def randint(low: int, high: int) -> int:
        return int(torch.randint(low, high + 1, (1,), generator=generator))

    rows: list[tuple[list[int], list[int], float, int]] = []
    for prompt in range(num_prompts):
        prompt_ids = torch.randint(
            first_token_id, vocab_size, (randint(*prompt_length),), generator=generator
        ).tolist()
        rewards = (torch.rand(samples_per_prompt, generator=generator) < 0.5).float()
        advantages = rewards - rewards.mean()
        for sample in range(samples_per_prompt):
            response_ids = torch.randint(
                first_token_id, vocab_size, (randint(*response_length),), generator=generator
            ).tolist()
            rows.append((prompt_ids, response_ids, float(advantages[sample]), prompt))
    length = max(len(p) + len(r) for p, r, _, _ in rows)
    b = len(rows)
    input_ids = torch.full((b, length), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((b, length), dtype=torch.bool)
    response_mask = torch.zeros((b, length), dtype=torch.bool)
    advantages = torch.zeros((b, length))
    for i, (prompt_ids, response_ids, advantage, _) in enumerate(rows):
        n_p, n_r = len(prompt_ids), len(response_ids)
        input_ids[i, : n_p + n_r] = torch.tensor(prompt_ids + response_ids)
        attention_mask[i, : n_p + n_r] = True
        response_mask[i, n_p : n_p + n_r] = True
        advantages[i, n_p : n_p + n_r] = advantage
    return TrainBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        response_mask=response_mask,
        behaviour_logprobs=torch.where(response_mask, behaviour_logprob, 0.0),
        advantages=advantages,
        prompt_index=torch.tensor([prompt for _, _, _, prompt in rows], dtype=torch.long),
        weight_versions=torch.full((b,), weight_version, dtype=torch.long),
    )


def concatenate(parts: Sequence[TrainBatch]) -> TrainBatch:
    """The rows of `parts` in order as one right-padded batch (padding: 0, False). Each part's
    prompt indices are shifted past the previous parts' so that its groups stay its own; an
    optional field missing from some parts gets their neutral value (weight 1, no term's row),
    and weight versions are kept only when every part has them."""
    length = max(part.input_ids.shape[1] for part in parts)

    def cat(name: str) -> torch.Tensor:
        return torch.cat(
            [
                torch.nn.functional.pad(getattr(part, name), (0, length - part.input_ids.shape[1]))
                for part in parts
            ]
        )

    def rows(get: Callable[[TrainBatch], torch.Tensor | None], default: float | bool) -> Any:
        if all(get(part) is None for part in parts):
            return None
        return torch.cat(
            [
                torch.full((part.num_sequences,), default) if get(part) is None else get(part)
                for part in parts
            ]
        )

    offsets = [0]
    for part in parts[:-1]:
        offsets.append(offsets[-1] + int(part.prompt_index.max()) + 1)
    versions = [part.weight_versions for part in parts if part.weight_versions is not None]
    return TrainBatch(
        input_ids=cat("input_ids"),
        attention_mask=cat("attention_mask"),
        response_mask=cat("response_mask"),
        behaviour_logprobs=cat("behaviour_logprobs"),
        advantages=cat("advantages"),
        prompt_index=torch.cat(
            [part.prompt_index + offset for part, offset in zip(parts, offsets, strict=True)]
        ),
        weight_versions=torch.cat(versions) if len(versions) == len(parts) else None,
        sequence_weights=rows(lambda part: part.sequence_weights, 1.0),
        term_rows={
            name: rows(lambda part, name=name: part.term_rows.get(name), False)
            for name in dict.fromkeys(name for part in parts for name in part.term_rows)
        },
    )


def with_behaviour_logprobs(batch: TrainBatch, logprobs: torch.Tensor) -> TrainBatch:
    """`batch` with its behaviour log-probs replaced (masked to the response); every other
    field as it was."""
    return dataclasses.replace(
        batch, behaviour_logprobs=torch.where(batch.response_mask, logprobs, 0.0)
    )
