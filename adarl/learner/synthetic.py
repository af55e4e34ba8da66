"""Synthetic TrainBatches of a chosen shape, for the learner benchmark and tests.

Token ids are random, advantages are group-centred random binary rewards (A = r - mean of the
prompt's rewards, the Dr. GRPO / Reinforce-Ada form), and the behaviour log-probs are either
given (e.g. the learner's own, to be on-policy) or a constant. Lengths vary per sequence so
padding, micro-batch packing and rank balancing are exercised.
"""

from __future__ import annotations

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


def with_behaviour_logprobs(batch: TrainBatch, logprobs: torch.Tensor) -> TrainBatch:
    """`batch` with its behaviour log-probs replaced (masked to the response)."""
    return TrainBatch(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        response_mask=batch.response_mask,
        behaviour_logprobs=torch.where(batch.response_mask, logprobs, 0.0),
        advantages=batch.advantages,
        prompt_index=batch.prompt_index,
        weight_versions=batch.weight_versions,
    )
