"""`uniform(n)`: GRPO-style sampling, one draw of n responses per prompt, no stopping rule.

With a rollout budget (`rollouts_per_step`, allocator.rollouts_per_step) the step spends exactly
that many rollouts: it asks for prompts until ⌈left / n⌉ more would spend the rest (the last one
drawn with what is left), so a skip stage in front of it (adarl/allocator/curation.py) never
shrinks the step.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from adarl.allocator.samplers.base import (
    PromptHistory,
    PromptStatus,
    check_new_prompt_ids,
)
from adarl.allocator.samplers.ledger import LedgerSampler, StepLedger


class UniformSampler(LedgerSampler):
    """Every prompt gets exactly `samples_per_prompt` responses in one draw.

    There is no exit condition, so every drawn prompt counts as resolved; a prompt the step
    budget could not fully pay for is drawn with what was left, and one it could not pay for at
    all is unresolved (never drawn).
    """

    name = "uniform"

    def __init__(
        self,
        *,
        samples_per_prompt: int,
        max_samples_per_step: int | None = None,
        rollouts_per_step: int | None = None,
        positive_threshold: float = 0.5,
    ) -> None:
        if samples_per_prompt < 1:
            raise ValueError(f"uniform: samples_per_prompt must be >= 1, got {samples_per_prompt}")
        if rollouts_per_step is not None and rollouts_per_step < 1:
            raise ValueError(f"uniform: rollouts_per_step must be >= 1, got {rollouts_per_step}")
        self.samples_per_prompt = samples_per_prompt
        self.rollouts_per_step = rollouts_per_step
        # A rollout budget is spent exactly, so it is the step's cap too.
        self.max_samples_per_step = (
            rollouts_per_step if rollouts_per_step is not None else max_samples_per_step
        )
        self.positive_threshold = positive_threshold
        self.step = -1
        self.source_exhausted = False
        self._ledger = StepLedger(
            budget_cap=self.max_samples_per_step, positive_threshold=positive_threshold
        )

    @property
    def steps_independent(self) -> bool:  # type: ignore[override]
        """start_step resets the ledger and the source flag; refills (a rollout budget) would
        ask the driver for prompts in a step it is not waiting for."""
        return self.rollouts_per_step is None

    def start_step(
        self,
        step: int,
        prompt_ids: Sequence[str],
        history: Mapping[str, PromptHistory],
        *,
        carried_groups: int = 0,
    ) -> None:
        self.step = step
        self.source_exhausted = False
        self._ledger = StepLedger(
            budget_cap=self.max_samples_per_step, positive_threshold=self.positive_threshold
        )
        if prompt_ids:  # none at the start (a skip took them all) is not an exhausted source
            self.add_prompts(prompt_ids, history)

    def add_prompts(self, prompt_ids: Sequence[str], history: Mapping[str, PromptHistory]) -> None:
        if not prompt_ids:
            self.source_exhausted = True
            return
        check_new_prompt_ids(prompt_ids, self._ledger.tallies, what="uniform")
        self._ledger.add(prompt_ids)
        for pid in prompt_ids:
            if self._ledger.dispatch(pid, self.samples_per_prompt) is None:
                self._ledger.settle(pid, PromptStatus.UNRESOLVED)

    def needs_prompts(self) -> int:
        """With a rollout budget: the prompts that would spend what is left of it."""
        left = self._ledger.budget.left
        if self.rollouts_per_step is None or self.source_exhausted or not left:
            return 0
        return math.ceil(left / self.samples_per_prompt)

    def done(self) -> bool:
        return super().done() and self.needs_prompts() == 0

    def observe(self, prompt_id: str, rewards: Sequence[float]) -> None:
        self._ledger.record(prompt_id, rewards)
        self._ledger.settle(prompt_id, PromptStatus.RESOLVED)

    # -- HintHost ------------------------------------------------------------------------------

    def prompt_allowance(self) -> int:
        return self.samples_per_prompt

    def fund(self, prompt_ids: Sequence[str]) -> None:
        self._ledger.budget.extend(len(prompt_ids) * self.prompt_allowance())

    def abandon(self, prompt_id: str) -> None:
        self._ledger.abandon(prompt_id)

    # -- reporting and checkpointing -----------------------------------------------------------

    def metrics(self) -> dict[str, float]:
        return self._ledger.metrics()

    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "source_exhausted": self.source_exhausted,
            "ledger": self._ledger.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.step = int(state["step"])
        self.source_exhausted = bool(state.get("source_exhausted", False))
        self._ledger.load_state_dict(state["ledger"])
