"""Allocation samplers: a per-prompt sample count decided up front from estimates.

* `ada_est` (Reinforce-Ada-Est, paper v3 Algorithm 1): n_i ∝ 1/√(p̂_i + ε) with p̂_i the
  allocator's EMA pass-rate estimate from earlier steps (`adarl.allocator.stats`), clipped to
  [min, cap] and rounded to the step budget (`adarl.algo.allocation.ada_est_allocation`). One draw
  per prompt.
* `gvm` (RLHFlow/GVM): phase 1 draws `presamples` (N') per prompt; once all returned (a barrier:
  the allocation normalises over the batch), p_i = N⁺_i/N' and G_i = the prompt's last gradient
  norm reported by the learner (`BudgetAllocator.report_gradient_norms`), or the batch mean of
  the known norms (1 if none is known yet: the rule then allocates by pass rate alone); phase 2
  draws n_i ∝ G_i/√(p_i + α/p_i^(β-1)) (`gvm_allocation`; 0 for p_i = 0) with Σ n_i = the step
  budget. Difference from GVM's code: the pre-samples stay in the prompt's pool and are trained
  on (they are i.i.d. draws of the same policy); GVM re-samples and discards them.

Neither has a stopping rule, so every drawn prompt is resolved; neither accepts prompts after the
step started.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from adarl.algo.allocation import ada_est_allocation, gvm_allocation
from adarl.allocator.samplers.base import (
    Draw,
    PromptHistory,
    PromptStatus,
    check_new_prompt_ids,
)
from adarl.allocator.samplers.ledger import StepLedger


def _feasible_budget(budget: int, count: int, low: int, high: int) -> int:
    return int(min(max(budget, count * low), count * high))


class AdaEstSampler:
    uses_gradient_norms = False
    name = "ada_est"

    def __init__(
        self,
        *,
        mean_samples_per_prompt: int,
        min_samples_per_prompt: int,
        max_samples_per_prompt: int,
        epsilon: float,
        max_samples_per_step: int | None = None,
        positive_threshold: float = 0.5,
    ) -> None:
        if not 1 <= min_samples_per_prompt <= max_samples_per_prompt:
            raise ValueError(
                f"ada_est: need 1 <= min_samples_per_prompt={min_samples_per_prompt} <= "
                f"max_samples_per_prompt={max_samples_per_prompt}"
            )
        self.mean_samples_per_prompt = mean_samples_per_prompt
        self.min_samples_per_prompt = min_samples_per_prompt
        self.max_samples_per_prompt = max_samples_per_prompt
        self.epsilon = epsilon
        self.max_samples_per_step = max_samples_per_step
        self.positive_threshold = positive_threshold
        self.step = -1
        self._ledger = StepLedger(budget_cap=None, positive_threshold=positive_threshold)

    def start_step(
        self,
        step: int,
        prompt_ids: Sequence[str],
        history: Mapping[str, PromptHistory],
        *,
        carried_groups: int = 0,
    ) -> None:
        check_new_prompt_ids(prompt_ids, {}, what=self.name)
        self.step = step
        wanted = self.mean_samples_per_prompt * len(prompt_ids)
        if self.max_samples_per_step is not None:
            wanted = min(wanted, self.max_samples_per_step)
        # A step cap below every prompt's floor drops the floor rather than overspend.
        floor = self.min_samples_per_prompt
        if wanted < floor * len(prompt_ids):
            floor = 0
        budget = _feasible_budget(wanted, len(prompt_ids), floor, self.max_samples_per_prompt)
        self._ledger = StepLedger(budget_cap=budget, positive_threshold=self.positive_threshold)
        self._ledger.add(prompt_ids)
        if not prompt_ids:
            return
        p_hat = np.array([history[pid].pass_rate for pid in prompt_ids])
        counts = ada_est_allocation(
            p_hat,
            budget=budget,
            eps=self.epsilon,
            min_samples=floor,
            max_samples=self.max_samples_per_prompt,
        )
        for pid, count in zip(prompt_ids, counts, strict=True):
            if count == 0 or self._ledger.dispatch(pid, int(count)) is None:
                self._ledger.settle(pid, PromptStatus.UNRESOLVED)

    def add_prompts(self, prompt_ids: Sequence[str], history: Mapping[str, PromptHistory]) -> None:
        if prompt_ids:
            raise ValueError(
                "ada_est allocates over the whole batch at start_step; it takes no "
                "prompts mid-step (needs_prompts() is always 0)"
            )

    def needs_prompts(self) -> int:
        return 0

    def next(self) -> list[Draw]:
        return self._ledger.take_pending()

    def observe(self, prompt_id: str, rewards: Sequence[float]) -> None:
        self._ledger.record(prompt_id, rewards)
        self._ledger.settle(prompt_id, PromptStatus.RESOLVED)

    def done(self) -> bool:
        return self._ledger.in_flight == 0 and self._ledger.open_count == 0

    def verdict(self, prompt_id: str) -> PromptStatus:
        return self._ledger.tally(prompt_id).status

    def prompt_ids(self) -> list[str]:
        return list(self._ledger.order)

    def target_groups(self) -> int | None:
        return None

    def sequential_law(self) -> None:
        return None  # pool sizes are fixed before their labels are seen

    def metrics(self) -> dict[str, float]:
        return self._ledger.metrics()

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step, "ledger": self._ledger.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.step = int(state["step"])
        self._ledger.load_state_dict(state["ledger"])


class GvmSampler:
    uses_gradient_norms = True
    name = "gvm"

    def __init__(
        self,
        *,
        presamples: int,
        mean_samples_per_prompt: int,
        min_samples_per_prompt: int,
        max_samples_per_prompt: int,
        alpha: float = 1e-3,
        beta: float = 2.0,
        max_samples_per_step: int | None = None,
        positive_threshold: float = 0.5,
    ) -> None:
        if presamples < 1:
            raise ValueError(f"gvm: presamples must be >= 1, got {presamples}")
        if not 0 <= min_samples_per_prompt <= max_samples_per_prompt - presamples:
            raise ValueError(
                f"gvm: need min_samples_per_prompt={min_samples_per_prompt} <= "
                f"max_samples_per_prompt - presamples = {max_samples_per_prompt - presamples}"
            )
        self.presamples = presamples
        self.mean_samples_per_prompt = mean_samples_per_prompt
        self.min_samples_per_prompt = min_samples_per_prompt
        self.max_samples_per_prompt = max_samples_per_prompt
        self.alpha = alpha
        self.beta = beta
        self.max_samples_per_step = max_samples_per_step
        self.positive_threshold = positive_threshold
        self.step = -1
        self.phase = 0
        self._grad_norms: dict[str, float | None] = {}
        self._ledger = StepLedger(budget_cap=None, positive_threshold=positive_threshold)

    def start_step(
        self,
        step: int,
        prompt_ids: Sequence[str],
        history: Mapping[str, PromptHistory],
        *,
        carried_groups: int = 0,
    ) -> None:
        check_new_prompt_ids(prompt_ids, {}, what=self.name)
        self.step = step
        self.phase = 1
        self._grad_norms = {pid: history[pid].grad_norm for pid in prompt_ids}
        wanted = (self.presamples + self.mean_samples_per_prompt) * len(prompt_ids)
        if self.max_samples_per_step is not None:
            wanted = min(wanted, self.max_samples_per_step)
        self._ledger = StepLedger(budget_cap=wanted, positive_threshold=self.positive_threshold)
        self._ledger.add(prompt_ids)
        for pid in prompt_ids:
            if self._ledger.dispatch(pid, self.presamples) is None:
                self._ledger.settle(pid, PromptStatus.UNRESOLVED)

    def add_prompts(self, prompt_ids: Sequence[str], history: Mapping[str, PromptHistory]) -> None:
        if prompt_ids:
            raise ValueError(
                "gvm allocates over the whole batch; it takes no prompts mid-step "
                "(needs_prompts() is always 0)"
            )

    def needs_prompts(self) -> int:
        return 0

    def next(self) -> list[Draw]:
        return self._ledger.take_pending()

    def observe(self, prompt_id: str, rewards: Sequence[float]) -> None:
        self._ledger.record(prompt_id, rewards)
        if self.phase == 2:
            self._ledger.settle(prompt_id, PromptStatus.RESOLVED)
        elif self._ledger.in_flight == 0:
            self._allocate()

    def _allocate(self) -> None:
        """Phase 2: allocate the rest of the budget over the pre-sampled prompts."""
        self.phase = 2
        prompts = self._ledger.open_prompts()
        tallies = [self._ledger.tallies[pid] for pid in prompts]
        known = [g for g in self._grad_norms.values() if g is not None]
        fallback = float(np.mean(known)) if known else 1.0
        norms = np.array(
            [g if (g := self._grad_norms.get(pid)) is not None else fallback for pid in prompts]
        )
        pass_rates = np.array([t.positives / t.observed for t in tallies])
        budget_left = self._ledger.budget.left
        assert budget_left is not None
        room = self.max_samples_per_prompt - self.presamples
        active = int(((norms > 0) & (pass_rates > 0)).sum())
        counts = np.zeros(len(prompts), dtype=np.int64)
        if active:
            # A budget too small for every prompt's floor drops the floor rather than overspend.
            floor = (
                self.min_samples_per_prompt
                if budget_left >= active * self.min_samples_per_prompt
                else 0
            )
            counts = gvm_allocation(
                norms,
                pass_rates,
                budget=_feasible_budget(budget_left, active, floor, room),
                alpha=self.alpha,
                beta=self.beta,
                min_samples=floor,
                max_samples=room,
            )
        for pid, count in zip(prompts, counts, strict=True):
            if count == 0 or self._ledger.dispatch(pid, int(count)) is None:
                self._ledger.settle(pid, PromptStatus.RESOLVED)

    def done(self) -> bool:
        return self._ledger.in_flight == 0 and self._ledger.open_count == 0

    def verdict(self, prompt_id: str) -> PromptStatus:
        return self._ledger.tally(prompt_id).status

    def prompt_ids(self) -> list[str]:
        return list(self._ledger.order)

    def target_groups(self) -> int | None:
        return None

    def sequential_law(self) -> None:
        # The second stage's size depends on the pilot's labels: no stopping law to condition
        # on; GVM's advantages (GRPO, RAFT) do not use a pool pass-rate estimate.
        return None

    def metrics(self) -> dict[str, float]:
        return {**self._ledger.metrics(), "sampling/gvm_phase": float(self.phase)}

    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "phase": self.phase,
            "grad_norms": dict(self._grad_norms),
            "ledger": self._ledger.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.step = int(state["step"])
        self.phase = int(state["phase"])
        self._grad_norms = dict(state["grad_norms"])
        self._ledger.load_state_dict(state["ledger"])
