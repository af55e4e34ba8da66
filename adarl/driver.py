"""The step loop. One named call per stage; which algorithm runs is decided by which objects were
built (`adarl.run`), never by a branch here.

    PromptSource ─► BudgetAllocator ─ PromptRequest ─► RolloutPool (engines)
       ▲               ▲   │                              │ GenerationResult ─► Rollout
       │               │   └─ collapsed? ─► hint slot ────┘
       │               │                                   ▼
       │               └── observe(ScoredRollout) ◄── RewardPool
       │                                                   ▼
       │                GroupBuilder (inside the allocator): pool ─► downsample ─► correct
       │                                                   │ Group ─► TrainBatch
       │                                                   ▼
       │                LearnerGroup (DeepSpeed ZeRO): one generic loss, one optimizer step
       │                     │ per-prompt gradient norms ─► BudgetAllocator
       └── Checkpoint ◄── WeightSync ─► engines (new weight version)

A step:

    examples = prompts.next_batch(prompts_per_step)
    groups   = collect_groups(step, examples)      # allocator ⇄ rollout pool ⇄ reward pool
    batch    = TrainBatch.from_groups(groups)
    trained  = learners.train_step(batch)          # + per-prompt gradient norms to the allocator
    version  = sync_weights()                      # learners ─► engines
    evaluate / log / checkpoint
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from adarl.allocator.allocator import BudgetAllocator, StepResult
from adarl.learner.group import LearnerGroup
from adarl.rollout.codec import PromptCodec
from adarl.types import (
    GenerationRequest,
    GenerationResult,
    PromptRequest,
    Rollout,
    SamplingParams,
    ScoredRollout,
    TaskExample,
    TrainBatch,
)
from adarl.weight_sync.base import WeightSync


class PromptSourceLike(Protocol):
    def next_batch(self, num_examples: int) -> list[TaskExample]: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...
    def metrics(self) -> dict[str, float]: ...


class RolloutPoolLike(Protocol):
    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]: ...
    def submit(self, requests: Sequence[GenerationRequest]) -> None: ...
    def drain_completed(self) -> list[GenerationResult]: ...
    def metrics(self) -> dict[str, float]: ...


class RewardPoolLike(Protocol):
    def score(
        self, rollouts: Sequence[Rollout], examples: Sequence[TaskExample]
    ) -> list[ScoredRollout]: ...
    def metrics(self) -> dict[str, float]: ...


class HintSlot(Protocol):
    """Optional: rewrites requests of collapsed prompts (SAGE). None = no hints."""

    def __call__(self, requests: list[PromptRequest]) -> list[PromptRequest]: ...


@dataclass
class StageTimer:
    """Wall time per named stage, accumulated over the run and per step."""

    step_seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    total_seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            self.step_seconds[name] += elapsed
            self.total_seconds[name] += elapsed

    def pop_step(self) -> dict[str, float]:
        out = {f"timing/{name}_s": seconds for name, seconds in self.step_seconds.items()}
        self.step_seconds = defaultdict(float)
        return out


@dataclass(frozen=True)
class EvalResult:
    accuracy: float  # mean reward over samples at the eval temperature
    greedy_accuracy: float | None
    num_prompts: int
    samples_per_prompt: int
    completions: list[dict[str, Any]]

    def metrics(self) -> dict[str, float]:
        out = {"eval/accuracy": self.accuracy, "eval/num_prompts": float(self.num_prompts)}
        if self.greedy_accuracy is not None:
            out["eval/greedy_accuracy"] = self.greedy_accuracy
        return out


@dataclass
class Evaluator:
    """Held-out accuracy with no hint: mean over samples at temperature T, plus greedy."""

    examples: Sequence[TaskExample]
    codec: PromptCodec
    samples_per_prompt: int
    temperature: float
    max_new_tokens: int
    greedy: bool
    completions_to_log: int
    seed: int

    def evaluate(
        self, rollout: RolloutPoolLike, rewards: RewardPoolLike, *, step: int
    ) -> EvalResult:
        sampled = self._accuracy(
            rollout,
            rewards,
            step=step,
            num_samples=self.samples_per_prompt,
            sampling=SamplingParams(
                temperature=self.temperature, max_new_tokens=self.max_new_tokens
            ),
            tag="sample",
        )
        greedy = (
            self._accuracy(
                rollout,
                rewards,
                step=step,
                num_samples=1,
                sampling=SamplingParams(temperature=0.0, max_new_tokens=self.max_new_tokens),
                tag="greedy",
            )
            if self.greedy
            else None
        )
        scores, scored = sampled
        return EvalResult(
            accuracy=float(np.mean(scores)) if scores else 0.0,
            greedy_accuracy=(float(np.mean(greedy[0])) if greedy and greedy[0] else None),
            num_prompts=len(self.examples),
            samples_per_prompt=self.samples_per_prompt,
            completions=[
                {
                    "step": step,
                    "prompt": ex.prompt,
                    "answer": ex.answer,
                    "completion": s.rollout.completion.text,
                    "reward": s.reward,
                }
                for ex, s in scored[: self.completions_to_log]
            ],
        )

    def _accuracy(
        self,
        rollout: RolloutPoolLike,
        rewards: RewardPoolLike,
        *,
        step: int,
        num_samples: int,
        sampling: SamplingParams,
        tag: str,
    ) -> tuple[list[float], list[tuple[TaskExample, ScoredRollout]]]:
        requests = [
            PromptRequest(
                request_id=f"eval-{tag}-{step}-{index}",
                example=example,
                num_samples=num_samples,
                step=step,
                seed=self.seed + 1_000_003 * index,  # the same eval draws at every step
            )
            for index, example in enumerate(self.examples)
        ]
        sent = [self.codec.generation_request(r, sampling=sampling) for r in requests]
        per_prompt: list[float] = []
        shown: list[tuple[TaskExample, ScoredRollout]] = []
        for request, generation, result in zip(requests, sent, rollout.generate(sent), strict=True):
            scored = rewards.score(
                PromptCodec.rollouts(request, generation, result),
                [request.example] * len(result.completions),
            )
            per_prompt.append(float(np.mean([s.reward for s in scored])))
            shown.extend((request.example, s) for s in scored[:1])
        return per_prompt, shown


@dataclass
class StepOutcome:
    step: int
    metrics: dict[str, float]
    result: StepResult


class Driver:
    """Runs steps; owns no algorithm. `adarl.session.TrainingSession` builds it from config."""

    def __init__(
        self,
        *,
        prompts: PromptSourceLike,
        codec: PromptCodec,
        allocator: BudgetAllocator,
        rollout: RolloutPoolLike,
        rewards: RewardPoolLike,
        learners: LearnerGroup,
        weight_sync: WeightSync,
        prompts_per_step: int,
        positive_threshold: float,
        hints: HintSlot | None = None,
        on_step_end: Callable[[StepOutcome], None] | None = None,
    ) -> None:
        self.prompts = prompts
        self.codec = codec
        self.allocator = allocator
        self.rollout = rollout
        self.rewards = rewards
        self.learners = learners
        self.weight_sync = weight_sync
        self.prompts_per_step = prompts_per_step
        self.positive_threshold = positive_threshold
        self.hints = hints
        self.on_step_end = on_step_end
        self.timer = StageTimer()
        self.rollouts_generated = 0
        self.tokens_generated = 0

    # -- one step, stage by stage ---------------------------------------------------------------

    def step(self, step: int) -> StepOutcome:
        with self.timer.stage("data"):
            examples = self.prompts.next_batch(self.prompts_per_step)
        with self.timer.stage("rollout"):
            result, rollout_metrics = self.collect_groups(step, examples)
        with self.timer.stage("batch"):
            batch = TrainBatch.from_groups(result.groups, pad_token_id=self.codec.pad_token_id)
        with self.timer.stage("train"):
            train_metrics = self.train(step, batch, result)
        sync_metrics: dict[str, float] = {}
        if train_metrics["train/skipped_empty_batch"] == 0.0:  # new weights exist only then
            with self.timer.stage("weight_sync"):
                sync_metrics = self.sync_weights()
        metrics = {
            **result.metrics,
            **train_metrics,
            **sync_metrics,
            **rollout_metrics,
            **self.rewards.metrics(),
            **self.prompts.metrics(),
            **self.timer.pop_step(),
            "perf/rollouts_total": float(self.rollouts_generated),
            "perf/tokens_total": float(self.tokens_generated),
        }
        outcome = StepOutcome(step=step, metrics=metrics, result=result)
        if self.on_step_end is not None:
            self.on_step_end(outcome)
        return outcome

    def collect_groups(
        self, step: int, examples: Sequence[TaskExample]
    ) -> tuple[StepResult, dict[str, float]]:
        """Stream requests through the engines until the allocator says the step is complete.

        Returns the allocator's step result and the rollout pool's metrics for the phase.
        """
        self.rollout.metrics()  # opens the measurement window of this rollout phase
        pending: dict[str, tuple[PromptRequest, GenerationRequest]] = {}
        self.dispatch(self.allocator.start_step(step, examples), pending)
        while not self.allocator.step_complete():
            wanted = self.allocator.needs_prompts()
            if wanted:
                self.dispatch(self.allocator.add_prompts(self.prompts.next_batch(wanted)), pending)
                continue
            if not pending:
                raise RuntimeError(
                    f"step {step}: the allocator is waiting for results but no request is in "
                    "flight; this is a bug in the sampler (it neither finished nor asked for more)"
                )
            # Take every result that is already back before dispatching follow-ups, so that
            # follow-ups travel to the engines in few, large calls.
            follow_ups: list[PromptRequest] = []
            for result in self.rollout.drain_completed():
                follow_ups += self.observe(result, pending)
            self.dispatch(follow_ups, pending)
        pool_metrics = self.rollout.metrics()
        result = self.allocator.finish_step(
            engine_utilisation=pool_metrics.get("perf/rollout_engine_utilisation")
        )
        return result, pool_metrics

    def observe(
        self,
        result: GenerationResult,
        pending: dict[str, tuple[PromptRequest, GenerationRequest]],
    ) -> list[PromptRequest]:
        """Score one engine result and hand it to the allocator; returns its follow-ups."""
        request, sent = pending.pop(result.request_id)
        rollouts = PromptCodec.rollouts(request, sent, result)
        self.rollouts_generated += len(rollouts)
        self.tokens_generated += sum(len(r.completion.token_ids) for r in rollouts)
        scored = self.rewards.score(rollouts, [request.example] * len(rollouts))
        return self.allocator.observe(result.request_id, scored)

    def dispatch(
        self,
        requests: list[PromptRequest],
        pending: dict[str, tuple[PromptRequest, GenerationRequest]],
    ) -> None:
        if self.hints is not None and requests:
            requests = self.hints(requests)
        sent = [self.codec.generation_request(r) for r in requests]
        for request, generation in zip(requests, sent, strict=True):
            pending[request.request_id] = (request, generation)
        if sent:
            self.rollout.submit(sent)

    def train(self, step: int, batch: TrainBatch, result: StepResult) -> dict[str, float]:
        if batch.num_sequences == 0:
            # Nothing to learn from (e.g. every prompt collapsed): a deliberate, logged skip.
            return {"train/skipped_empty_batch": 1.0, "train/sequences": 0.0}
        # GVM-style allocators need per-prompt gradient norms of the correct samples.
        mask = None
        if self.allocator.wants_gradient_norms():
            mask = torch.tensor(
                [
                    s.reward > self.positive_threshold
                    for group in result.groups
                    for s in group.rollouts
                ],
                dtype=torch.bool,
            )
        trained = self.learners.train_step(batch, grad_norm_mask=mask)
        if trained.prompt_grad_norms is not None:
            norms = {
                result.groups[index].prompt_id: norm
                for index, norm in trained.prompt_grad_norms.mean.items()
            }
            self.allocator.report_gradient_norms(norms, step=step)
        return {**trained.metrics, "train/skipped_empty_batch": 0.0}

    def sync_weights(self) -> dict[str, float]:
        """Push the learners' weights to every engine (their version travels with rollouts)."""
        return self.weight_sync.push(self.learners).metrics()
