"""Typed records on every arrow of the data flow (see docs/architecture.md).

    TaskExample ─► PromptRequest ─► GenerationRequest ─► GenerationResult ─► Rollout
        ─► ScoredRollout ─► Group ─► TrainBatch ─► (learner) ─► WeightVersion
    ScoredRollout ─► StatisticsRequest ─► (learner) ─► StatisticsReply ─► allocator
    ScoredRollout ─► FinishedPool ─► (pool reward stage) ─► RescoredPool ─► allocator

Records are small frozen dataclasses of plain Python values so that they pickle cheaply through
Ray's object store. Only `TrainBatch` holds tensors. Token-level conventions used everywhere:

* a sequence is `prompt_token_ids + response_token_ids`;
* a per-token quantity of the response (log-probability, advantage) is stored at the position of
  the token it scores: `x[b, t]` belongs to `input_ids[b, t]`, and is meaningful only where
  `response_mask[b, t]` is 1. The learner shifts logits by one to match.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported lazily so that config validation stays fast
    import torch


@dataclass(frozen=True)
class TaskExample:
    """One prompt of a task, as read from a prompt source."""

    prompt_id: str
    prompt: str
    answer: str
    reference_solution: str | None = None  # used by the hint generator, never shown in eval
    difficulty: float | None = None
    task: str = ""  # name of the verifier that scores it, e.g. "arithmetic", "math", "code"


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 disables top-k
    max_new_tokens: int = 16
    stop_token_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class GenerationRequest:
    """What an engine is asked to do: `num_samples` completions of one tokenised prompt."""

    request_id: str
    prompt_token_ids: tuple[int, ...]
    num_samples: int
    sampling: SamplingParams
    seed: int


class FinishReason(str, Enum):
    STOP = "stop"  # an end-of-sequence or stop token was produced
    LENGTH = "length"  # max_new_tokens (or the model length) was reached


@dataclass(frozen=True)
class Completion:
    """One sampled response. `logprobs[i]` = log π_behaviour(token_ids[i] | prefix)."""

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: FinishReason
    text: str = ""

    @property
    def truncated(self) -> bool:
        return self.finish_reason is FinishReason.LENGTH


@dataclass(frozen=True)
class GenerationResult:
    request_id: str
    completions: tuple[Completion, ...]
    weight_version: int  # the policy version that produced every completion


@dataclass(frozen=True)
class PromptRequest:
    """Allocator ─► rollout: sample `num_samples` more responses for this prompt."""

    request_id: str
    example: TaskExample
    num_samples: int
    step: int
    seed: int
    hint: str | None = None  # text appended to the prompt by the hint generator
    hint_level: int = 0  # 0 = no hint


@dataclass(frozen=True)
class Rollout:
    """One completion with everything needed to score it and to train on it."""

    request_id: str
    prompt_id: str
    prompt_token_ids: tuple[int, ...]
    completion: Completion
    weight_version: int
    hint_level: int = 0


@dataclass(frozen=True)
class ScoredRollout:
    rollout: Rollout
    reward: float  # in [0, 1]
    reward_error: str | None = None  # set when the verifier failed; the reward is then 0


@dataclass(frozen=True)
class StatisticsRequest:
    """Allocator ─► learners: a statistic of given samples at the current weights.

    kind "gradient_norm": per sample, ‖∇_E Σ_t -log π(y_t | x, y_<t)‖, the norm of the summed
    response NLL's gradient w.r.t. the input-embedding matrix E (GVM's G; adarl/learner/
    grad_norms.py). The driver routes the request to the learner group without knowing which
    sampler asked.
    """

    step: int
    kind: str
    rollouts: tuple[ScoredRollout, ...]


@dataclass(frozen=True)
class StatisticsReply:
    """Learners ─► allocator: one value per rollout of the request, in order."""

    kind: str
    values: tuple[float, ...]
    weight_version: int  # the weights the statistic was computed with


# A pool reward stage (adarl/allocator/pool_reward.py; DRO's R3 in adarl/reward/r3.py) reads a
# step's finished pools and answers with new rewards. Its records live here, not with the
# allocator, because the reward side writes them and the allocator reads them.

# `RolloutPool.score`: teacher-forced log π_T(response_i[t] | prompt_i, response_i[:t]).
ScoreFn = Callable[..., list[list[float]]]


@dataclass(frozen=True)
class FinishedPool:
    """Allocator ─► pool reward stage: one prompt's pool at the end of sampling, in sampling
    order, with the rewards it has."""

    prompt_id: str
    example: TaskExample
    rollouts: tuple[ScoredRollout, ...]


@dataclass(frozen=True)
class RescoredPool:
    """Pool reward stage ─► allocator: a reward per rollout (in the pool's order) and named
    statistics for samplers that read them (e.g. "max_deviation", "reaches_top_k")."""

    rewards: tuple[float, ...]
    statistics: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Group:
    """The kept training group of one prompt and the per-sample advantage (sequence weight)."""

    prompt_id: str
    rollouts: tuple[ScoredRollout, ...]
    advantages: tuple[float, ...]
    pool_size: int  # samples drawn for this prompt this step (kept or not)
    pool_positives: int
    resolved: bool  # whether the stopping rule's exit condition was met
    # How much each rollout of the group counts in the loss normalisers (TrainBatch.
    # sequence_weights): 1, or n/N when a whole pool of N trains as n sequences' worth.
    sequence_weight: float = 1.0
    # The one loss term that trains this group's rows alone (adarl/algo/loss.py, `TermRows`:
    # e.g. DPH-RL's rehearsal rows, stored samples of solved prompts); None = the policy's rows,
    # trained by the clipped surrogate and every term.
    trained_by: str | None = None

    def __post_init__(self) -> None:
        if len(self.rollouts) != len(self.advantages):
            raise ValueError(
                f"Group {self.prompt_id!r}: {len(self.rollouts)} rollouts but "
                f"{len(self.advantages)} advantages"
            )
        if not self.sequence_weight > 0:
            raise ValueError(
                f"Group {self.prompt_id!r}: sequence_weight must be > 0, got {self.sequence_weight}"
            )


@dataclass
class TrainBatch:
    """Right-padded token batch for the learner. Shapes: B sequences, T tokens."""

    input_ids: torch.Tensor  # [B, T] long
    attention_mask: torch.Tensor  # [B, T] bool, True on real tokens
    response_mask: torch.Tensor  # [B, T] bool, True on response tokens (trained on)
    behaviour_logprobs: torch.Tensor  # [B, T] float, engine log-probs at response positions
    advantages: torch.Tensor  # [B, T] float, per-token weight (0 outside the response)
    prompt_index: torch.Tensor  # [B] long, which prompt (group) each sequence belongs to
    weight_versions: torch.Tensor | None = None  # [B] long, policy version of each sequence
    # [B] float, how much each sequence counts in the loss's whole-batch normalisers (token and
    # sequence counts; adarl.learner.batching.BatchCounts); None = 1 each.
    sequence_weights: torch.Tensor | None = None
    # [B] bool per loss term that trains rows alone (`Group.trained_by`), by the term's name:
    # only that term trains them, with its own normalisers; a name appears only with a row.
    term_rows: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def num_sequences(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def num_response_tokens(self) -> int:
        return int(self.response_mask.sum())

    def select(self, index: torch.Tensor | Sequence[int]) -> TrainBatch:
        """Rows `index` of the batch, trimmed to their longest sequence."""
        import torch

        index = torch.as_tensor(index, dtype=torch.long)
        length = int(self.attention_mask[index].sum(dim=1).max()) if len(index) else 0
        return TrainBatch(
            input_ids=self.input_ids[index, :length],
            attention_mask=self.attention_mask[index, :length],
            response_mask=self.response_mask[index, :length],
            behaviour_logprobs=self.behaviour_logprobs[index, :length],
            advantages=self.advantages[index, :length],
            prompt_index=self.prompt_index[index],
            weight_versions=(None if self.weight_versions is None else self.weight_versions[index]),
            sequence_weights=(
                None if self.sequence_weights is None else self.sequence_weights[index]
            ),
            term_rows={name: rows[index] for name, rows in self.term_rows.items()},
        )

    @staticmethod
    def from_groups(groups: Sequence[Group], *, pad_token_id: int) -> TrainBatch:
        """Collate kept groups: each rollout's sequence advantage is broadcast over its tokens.
        The rows of groups a term trains alone are flagged under its name (`term_rows`)."""
        rows: list[tuple[ScoredRollout, float, int]] = [
            (scored, adv, gi)
            for gi, group in enumerate(groups)
            for scored, adv in zip(group.rollouts, group.advantages, strict=True)
        ]
        weights = [groups[g].sequence_weight for _, _, g in rows]
        owners = [groups[g].trained_by for _, _, g in rows]
        return TrainBatch.from_rollouts(
            [r for r, _, _ in rows],
            advantages=[a for _, a, _ in rows],
            prompt_index=[g for _, _, g in rows],
            pad_token_id=pad_token_id,
            sequence_weights=None if all(w == 1.0 for w in weights) else weights,
            term_rows={
                name: [owner == name for owner in owners]
                for name in dict.fromkeys(o for o in owners if o is not None)
            },
        )

    @staticmethod
    def from_rollouts(
        rollouts: Sequence[ScoredRollout],
        *,
        advantages: Sequence[float],
        prompt_index: Sequence[int],
        pad_token_id: int,
        sequence_weights: Sequence[float] | None = None,
        term_rows: Mapping[str, Sequence[bool]] | None = None,
    ) -> TrainBatch:
        import torch

        lengths = [
            len(s.rollout.prompt_token_ids) + len(s.rollout.completion.token_ids) for s in rollouts
        ]
        b, t = len(rollouts), max(lengths, default=0)
        input_ids = torch.full((b, t), pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((b, t), dtype=torch.bool)
        response_mask = torch.zeros((b, t), dtype=torch.bool)
        logprobs = torch.zeros((b, t), dtype=torch.float32)
        token_advantages = torch.zeros((b, t), dtype=torch.float32)
        for i, (scored, adv) in enumerate(zip(rollouts, advantages, strict=True)):
            prompt = scored.rollout.prompt_token_ids
            completion = scored.rollout.completion
            n_p, n_r = len(prompt), len(completion.token_ids)
            input_ids[i, : n_p + n_r] = torch.tensor(prompt + completion.token_ids)
            attention_mask[i, : n_p + n_r] = True
            response_mask[i, n_p : n_p + n_r] = True
            logprobs[i, n_p : n_p + n_r] = torch.tensor(completion.logprobs, dtype=torch.float32)
            token_advantages[i, n_p : n_p + n_r] = float(adv)
        return TrainBatch(
            input_ids=input_ids,
            attention_mask=attention_mask,
            response_mask=response_mask,
            behaviour_logprobs=logprobs,
            advantages=token_advantages,
            prompt_index=torch.tensor(list(prompt_index), dtype=torch.long),
            weight_versions=torch.tensor(
                [s.rollout.weight_version for s in rollouts], dtype=torch.long
            ),
            sequence_weights=(
                None
                if sequence_weights is None
                else torch.tensor(list(sequence_weights), dtype=torch.float32)
            ),
            term_rows={
                name: torch.tensor(list(rows), dtype=torch.bool)
                for name, rows in (term_rows or {}).items()
            },
        )


@dataclass(frozen=True)
class WeightVersion:
    """A policy version: bumped by every optimizer step that is pushed to the engines."""

    version: int
    step: int
