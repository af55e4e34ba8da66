"""A learner rank's forward passes: log π_T, entropy and (for SimKO) the top-K log-probs of a
micro-batch (`forward`), the micro-batches a rank runs (`micro_batches`), and the two statistics
taken at the current weights without training: GVM's per-row gradient norms
(`sample_gradient_norms`) and every position's log-prob (`score_positions`).

Log-probs and entropy come from `TokenScorer` (adarl/learner/logprobs.py): the output head runs
only at the scored positions, `logprob_chunk_tokens` rows at a time under activation
checkpointing, so no [B, T, V] tensor is ever formed. Every function here is called on every
rank with the same number of passes: ZeRO-3 gathers parameters collectively in each.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from adarl.learner.batching import plan_micro_batches, sequence_lengths
from adarl.learner.grad_norms import per_sequence_embedding_grad_norms, response_nll
from adarl.learner.logprobs import TokenScorer
from adarl.types import TrainBatch

MicroBatch = tuple[list[int], TrainBatch]  # (the rows of the shard, those rows as a batch)


class Forward(NamedTuple):
    """What `forward` returns (on the rank's device)."""

    logprobs: torch.Tensor  # [B, T] log π_T at the scored positions, 0 elsewhere
    entropy: torch.Tensor  # [B, T] H(π_T) there
    input_ids: torch.Tensor  # [B, T]
    attention_mask: torch.Tensor  # [B, T] long
    top_logprobs: torch.Tensor | None = None  # [B, T, K] with top_k > 0
    is_top1: torch.Tensor | None = None  # [B, T] bool with top_k > 0


def forward(
    model: Any,
    micro: TrainBatch | None,
    *,
    device: torch.device,
    score: str = "response",
    entropy_grad: bool = False,
    top_k: int = 0,
) -> Forward:
    """log π_T [B, T], entropy [B, T], input_ids and attention_mask on `device`, and with
    `top_k` > 0 the K largest log-probs [B, T, K] and top-1 flags [B, T].

    `model` is a `TokenScorer` or a DeepSpeed engine around one. `score` picks the positions:
    "response" (the response tokens: what the loss needs) or "all" (every real token after
    the first). `None` runs a two-token pass whose output is multiplied by zero by the
    caller: ranks with fewer micro-batches take part in ZeRO's per-pass collectives without
    changing gradients (its one scored token reaches every parameter).
    """
    if micro is None:
        input_ids = torch.zeros(1, 2, dtype=torch.long, device=device)
        attention_mask = torch.ones(1, 2, dtype=torch.long, device=device)
        scored = torch.tensor([[False, True]], device=device)
    else:
        input_ids = micro.input_ids.to(device)
        attention_mask = micro.attention_mask.to(device, dtype=torch.long)
        if score == "response":
            scored = micro.response_mask.to(device)
        else:
            scored = attention_mask.bool()
            scored[:, 0] = False
    scores = model(input_ids, attention_mask, scored, entropy_grad=entropy_grad, top_k=top_k)
    return Forward(*scores[:2], input_ids, attention_mask, *scores[2:])


def micro_batches(
    batch: TrainBatch, num_micro_batches: int, *, max_tokens: int, rank: int
) -> list[MicroBatch | None]:
    """(rows, micro-batch) pairs of `batch` by the token budget, padded with None (an empty
    pass) to `num_micro_batches`, the number the group planned for every rank."""
    plan = plan_micro_batches(sequence_lengths(batch), max_tokens)
    if len(plan) > num_micro_batches:
        raise ValueError(
            f"rank {rank} needs {len(plan)} micro-batches but the group planned "
            f"{num_micro_batches}; the group and the learners must use the same "
            "max_tokens_per_micro_batch"
        )
    parts: list[MicroBatch | None] = [(rows, batch.select(rows)) for rows in plan]
    return parts + [None] * (num_micro_batches - len(plan))


def sample_gradient_norms(
    scorer: TokenScorer, parts: list[MicroBatch | None], *, num_rows: int, device: torch.device
) -> torch.Tensor:  # [num_rows] float32
    """‖∇_E NLL_b‖ per row (adarl.learner.grad_norms): the GVM statistic, weights unchanged.

    One forward and one backward (w.r.t. the embedding output only) per micro-batch of `parts`;
    no parameter gradient is formed, so the next training step is unaffected. `scorer` is the
    bare module, not the engine: DeepSpeed's engine forward hooks its outputs so that only
    `engine.backward` may differentiate them (ZeRO-3's parameter gathering lives on the
    submodules and still runs).
    """
    module = scorer.hf_model
    embedding = module.get_input_embeddings()  # the same module inside the scorer
    vocab_size = int(module.config.vocab_size)
    captured: list[torch.Tensor] = []
    hook = embedding.register_forward_hook(lambda _m, _i, output: captured.append(output))
    norms = torch.zeros(num_rows, dtype=torch.float32)
    try:
        for part in parts:
            captured.clear()
            scores = forward(scorer, None if part is None else part[1], device=device)
            (embedded,) = captured
            if part is None:
                torch.autograd.grad(scores.logprobs.sum() * 0.0, embedded)
                continue
            rows, micro = part
            nll = response_nll(scores.logprobs, micro.response_mask.to(device))
            (grads,) = torch.autograd.grad(nll.sum(), embedded)
            norms[torch.tensor(rows)] = per_sequence_embedding_grad_norms(
                grads, scores.input_ids, scores.attention_mask.bool(), vocab_size=vocab_size
            ).cpu()
    finally:
        hook.remove()
    return norms


@torch.no_grad()
def score_positions(
    scorer: TokenScorer, batch: TrainBatch, *, max_tokens: int, device: torch.device
) -> torch.Tensor:  # [B, T] float32
    """log π_T at every real position of `batch` (0 at position 0 and on padding)."""
    out = torch.zeros(batch.input_ids.shape, dtype=torch.float32)
    for rows in plan_micro_batches(sequence_lengths(batch), max_tokens):
        scores = forward(scorer, batch.select(rows), device=device, score="all")
        out[torch.tensor(rows), : scores.input_ids.shape[1]] = scores.logprobs.cpu()
    return out
