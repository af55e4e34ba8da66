"""How a TrainBatch is cut: into mini-batches of whole groups (one optimizer step each), each of
those across data-parallel ranks, then into micro-batches by a token budget.

Every cut is a deterministic function of the batch (its groups and sequence lengths), so a
resumed run cuts a step's batch as the first run did, and the group can compute every rank's
number of micro-batches without asking the ranks (all ranks must run the same number of
forward/backward passes: ZeRO-2/3 reduce gradients and ZeRO-3 gathers parameters collectively in
every one of them).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from adarl.types import TrainBatch


class RowCounts(NamedTuple):
    """The whole batch's counts of the rows one loss term trains alone."""

    tokens: int  # their response tokens
    sequences: int  # those of them with at least one response token


@dataclass(frozen=True)
class BatchCounts:
    """Whole-batch normalisers of the loss (adarl.algo.loss): the same on every rank.

    `loss_tokens` / `loss_sequences` are the counts the loss divides by: each sequence counts
    `TrainBatch.sequence_weights[b]` (1 by default), so a whole pool of N samples can train as n
    sequences' worth (adarl.allocator.group_builder). The rows a loss term trains alone
    (`TrainBatch.term_rows`) are counted apart, one each, by term (`term_rows`): that term is
    normalised by their counts, every other term by the rest's.
    """

    num_tokens: int  # response tokens (term rows' excluded)
    num_sequences: int  # sequences with at least one response token (term rows excluded)
    loss_tokens: float  # Σ_b w_b · (response tokens of b), term rows excluded
    loss_sequences: float  # Σ_b w_b over sequences with at least one response token, the same
    term_rows: dict[str, RowCounts] = field(default_factory=dict)  # by term name

    @staticmethod
    def of(batch: TrainBatch) -> BatchCounts:
        response_lengths = batch.response_mask.sum(dim=1)
        has_response = response_lengths > 0
        owned = term_owned_rows(batch)
        trained = has_response & ~owned
        if batch.sequence_weights is None:
            weights = trained.float()
        else:
            weights = batch.sequence_weights.float() * trained
        return BatchCounts(
            num_tokens=int(response_lengths[~owned].sum()),
            num_sequences=int(trained.sum()),
            loss_tokens=float((weights * response_lengths).sum()),
            loss_sequences=float(weights.sum()),
            term_rows={
                name: RowCounts(
                    tokens=int(response_lengths[rows].sum()),
                    sequences=int((has_response & rows).sum()),
                )
                for name, rows in batch.term_rows.items()
            },
        )


def term_owned_rows(batch: TrainBatch) -> torch.Tensor:  # [B] bool
    """The rows some loss term trains alone (`TrainBatch.term_rows`, any term)."""
    owned = torch.zeros(batch.num_sequences, dtype=torch.bool)
    for rows in batch.term_rows.values():
        owned = owned | rows.bool()
    return owned


@dataclass(frozen=True)
class MiniBatchShard:
    """One rank's part of one mini-batch, with what every rank must agree on for its step."""

    shard: TrainBatch  # this rank's rows of the mini-batch
    num_micro_batches: int  # the same on every rank (the most any rank needs)
    global_num_tokens: float  # the mini-batch's loss normalisers (`BatchCounts`), all ranks
    global_num_sequences: float
    # the normalisers of each term that trains rows alone, all ranks
    term_rows: dict[str, RowCounts] = field(default_factory=dict)


def group_runs(batch: TrainBatch) -> list[range]:
    """The rows of each group (`prompt_index`), in batch order; a group's rows must be
    contiguous, as `TrainBatch.from_groups` lays them out."""
    index = batch.prompt_index.tolist()
    runs: list[range] = []
    start = 0
    for row in range(1, len(index) + 1):
        if row == len(index) or index[row] != index[start]:
            runs.append(range(start, row))
            start = row
    seen = [index[run.start] for run in runs]
    if len(set(seen)) != len(seen):
        raise ValueError(
            "TrainBatch.prompt_index is not contiguous: a group's rows must be adjacent (as "
            "TrainBatch.from_groups lays them out) for mini-batches to keep groups whole"
        )
    return runs


def split_mini_batches(batch: TrainBatch, num_mini_batches: int) -> list[TrainBatch]:
    """The batch cut into `num_mini_batches` mini-batches of whole groups, in batch order, of
    equal numbers of groups: with G groups, mini-batch k holds groups ⌊kG/M⌋ .. ⌊(k+1)G/M⌋ - 1
    (verl's mini-batches are likewise counted in prompts). A group is never split: its
    advantages are relative to each other and its correction assumes the whole kept group is
    trained. The cut depends only on a group's position, never on its outcomes or pool size
    (the allocator lays groups out in prompt order), so the first mini-batch is an unbiased
    sample of the step's prompts and its gradient estimates the declared objective's. With
    fewer groups than M, each group is a mini-batch. M = 1 is the batch itself.

    Rows a loss term trains alone (`TrainBatch.term_rows`: DPH-RL's rehearsal rows) are not
    groups of the step: the groups are cut as without them, and those rows are dealt to the
    mini-batches in turn (row r to mini-batch r mod M', M' the number of mini-batches), so every
    optimizer step trains that term when there are enough rows and the first does whenever there
    is one."""
    if num_mini_batches < 1:
        raise ValueError(f"num_mini_batches must be >= 1, got {num_mini_batches}")
    if num_mini_batches == 1:
        return [batch]
    owned = term_owned_rows(batch).nonzero().flatten().tolist()
    runs = group_runs(batch)
    if owned:
        apart = set(owned)
        if any(len({row in apart for row in run}) > 1 for run in runs):
            raise ValueError(
                "TrainBatch.term_rows flags part of a group: a group's rows are trained by the "
                "policy or by one term (TrainBatch.from_groups lays groups out so)"
            )
        runs = [run for run in runs if run.start not in apart] or [range(0)]
    parts = min(num_mini_batches, len(runs))
    bounds = [len(runs) * k // parts for k in range(parts + 1)]
    return [
        batch.select(
            torch.tensor(
                [row for run in runs[lo:hi] for row in run] + owned[part::parts],
                dtype=torch.long,
            )
        )
        for part, (lo, hi) in enumerate(itertools.pairwise(bounds))
    ]


def plan_mini_batch_shards(
    batch: TrainBatch, *, num_mini_batches: int, world_size: int, max_tokens: int
) -> list[list[MiniBatchShard]]:
    """Per rank, its shard of every mini-batch of `batch` (`split_mini_batches`), each balanced
    across ranks by tokens (`shard_batch`) with its own normalisers and micro-batch count."""
    plans: list[list[MiniBatchShard]] = [[] for _ in range(world_size)]
    for mini in split_mini_batches(batch, num_mini_batches):
        counts = BatchCounts.of(mini)
        if counts.num_tokens == 0 and not any(c.tokens for c in counts.term_rows.values()):
            continue  # groups without a response token: nothing to train, no step to take
        shards = shard_batch(mini, world_size)
        num_micro = max_micro_batches(shards, max_tokens)
        for rank, shard in enumerate(shards):
            plans[rank].append(
                MiniBatchShard(
                    shard=shard,
                    num_micro_batches=num_micro,
                    global_num_tokens=counts.loss_tokens,
                    global_num_sequences=counts.loss_sequences,
                    term_rows=counts.term_rows,
                )
            )
    return plans


def sequence_lengths(batch: TrainBatch) -> list[int]:
    """Real (unpadded) length of each sequence, prompt included."""
    return [int(n) for n in batch.attention_mask.sum(dim=1)]


def split_across_ranks(lengths: Sequence[int], world_size: int) -> list[list[int]]:
    """Row indices per rank, balancing tokens: longest sequence first onto the lightest rank.

    Ties break by rank index and original order, so the split is deterministic. A rank may get
    no rows when there are fewer sequences than ranks.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    loads = [0] * world_size
    shards: list[list[int]] = [[] for _ in range(world_size)]
    for i in order:
        rank = min(range(world_size), key=lambda r: (loads[r], r))
        shards[rank].append(i)
        loads[rank] += lengths[i]
    return [sorted(shard) for shard in shards]


def plan_micro_batches(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Row indices per micro-batch so that rows × longest row ≤ `max_tokens` (the padded size).

    Rows are packed longest first, which keeps padding low; a row longer than the budget gets a
    micro-batch of its own (it cannot be split: a sequence is the unit of the loss).
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    micro_batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        longest = lengths[current[0]] if current else lengths[i]
        if current and (len(current) + 1) * longest > max_tokens:
            micro_batches.append(current)
            current = []
        current.append(i)
    if current:
        micro_batches.append(current)
    return micro_batches


def shard_batch(batch: TrainBatch, world_size: int) -> list[TrainBatch]:
    """`split_across_ranks` applied to a batch (each shard trimmed to its longest row)."""
    return [
        batch.select(torch.tensor(rows, dtype=torch.long))
        for rows in split_across_ranks(sequence_lengths(batch), world_size)
    ]


def max_micro_batches(shards: Sequence[TrainBatch], max_tokens: int) -> int:
    """The number of micro-batches every rank runs: the most any shard needs (at least 1)."""
    return max([1, *(len(plan_micro_batches(sequence_lengths(s), max_tokens)) for s in shards)])


def validate_train_batch(batch: TrainBatch) -> None:
    """Shapes and masks the learner relies on; raises ValueError naming the field."""
    b, t = batch.input_ids.shape
    for name in ("attention_mask", "response_mask", "behaviour_logprobs", "advantages"):
        shape = tuple(getattr(batch, name).shape)
        if shape != (b, t):
            raise ValueError(f"TrainBatch.{name} has shape {shape}, expected ({b}, {t})")
    if tuple(batch.prompt_index.shape) != (b,):
        raise ValueError(f"TrainBatch.prompt_index has shape {tuple(batch.prompt_index.shape)}")
    if b == 0 or not bool(batch.response_mask.any()):
        raise ValueError(
            "TrainBatch has no response tokens; the group builder must keep at least one group"
        )
    if bool((batch.response_mask & ~batch.attention_mask).any()):
        raise ValueError("TrainBatch.response_mask is True on padding (attention_mask False)")
    if t and bool(batch.response_mask[:, 0].any()):
        raise ValueError(
            "TrainBatch.response_mask is True at position 0: every sequence needs a prompt token "
            "before its response (the first token has nothing to be predicted from)"
        )
    # Right padding: real tokens form a prefix of each row.
    lengths = batch.attention_mask.sum(dim=1, keepdim=True)
    positions = torch.arange(t).unsqueeze(0)
    if not torch.equal(batch.attention_mask, positions < lengths):
        raise ValueError("TrainBatch must be right-padded (attention_mask a prefix of each row)")
