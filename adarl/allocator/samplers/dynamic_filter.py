"""`dynamic_filter`: DAPO-style dynamic sampling that never crashes a run.

Every prompt gets one draw of `samples_per_prompt`; its group is kept iff its rewards are not all
equal and its pass rate p̃ = N⁺/N lies in [min_pass_rate, max_pass_rate] (the defaults 0 and 1
reduce the rule to DAPO's "std > 0"). The step wants `target_groups` kept groups; groups carried
over from earlier steps count first. While too few are kept or in flight, `needs_prompts()` asks
the driver for more prompts, over-sampling by the measured keep rate:

    want = ⌈(target - carried - kept - ρ̂·in_flight) / ρ̂⌉,   ρ̂ = max(min_keep_rate, (K + 1)/(F + 2))

with K/F the kept/finished prompts over the whole run (a Laplace estimate that persists across
steps). Differences from the verl recipe (MATH.md): the step's sample budget
`max_samples_per_step` ends the search gracefully (the step trains on what it has, and the
`signal/groups_short` / `sampling/budget_exhausted` metrics say so) instead of raising after
`max_num_gen_batches`; surplus kept groups are not discarded but carried to the next step by the
allocator (oldest first, up to an age limit); and prompts are refilled one result at a time
instead of in whole generation batches.
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


class DynamicFilterSampler(LedgerSampler):
    name = "dynamic_filter"

    def __init__(
        self,
        *,
        samples_per_prompt: int,
        target_groups: int,
        max_samples_per_step: int | None,
        min_pass_rate: float = 0.0,
        max_pass_rate: float = 1.0,
        min_keep_rate: float = 0.1,
        positive_threshold: float = 0.5,
    ) -> None:
        if samples_per_prompt < 2:
            raise ValueError(
                f"dynamic_filter: samples_per_prompt must be >= 2 to see mixed outcomes, "
                f"got {samples_per_prompt}"
            )
        if target_groups < 1:
            raise ValueError(f"dynamic_filter: target_groups must be >= 1, got {target_groups}")
        if not 0.0 <= min_pass_rate <= max_pass_rate <= 1.0:
            raise ValueError(
                f"dynamic_filter: need 0 <= min_pass_rate <= max_pass_rate <= 1 "
                f"(got {min_pass_rate}, {max_pass_rate})"
            )
        if not 0.0 < min_keep_rate <= 1.0:
            raise ValueError(
                f"dynamic_filter: min_keep_rate must be in (0, 1], got {min_keep_rate}"
            )
        self.samples_per_prompt = samples_per_prompt
        self._target = target_groups
        self.max_samples_per_step = max_samples_per_step
        self.min_pass_rate = min_pass_rate
        self.max_pass_rate = max_pass_rate
        self.min_keep_rate = min_keep_rate
        self.positive_threshold = positive_threshold
        self.step = -1
        self.carried_groups = 0
        self.source_exhausted = False
        self.kept_this_step = 0
        self.kept_total = 0  # over the run: the keep-rate estimate
        self.finished_total = 0
        self._ledger = StepLedger(
            budget_cap=max_samples_per_step, positive_threshold=positive_threshold
        )

    def start_step(
        self,
        step: int,
        prompt_ids: Sequence[str],
        history: Mapping[str, PromptHistory],
        *,
        carried_groups: int = 0,
    ) -> None:
        self.step = step
        self.carried_groups = carried_groups
        self.source_exhausted = False
        self.kept_this_step = 0
        self._ledger = StepLedger(
            budget_cap=self.max_samples_per_step, positive_threshold=self.positive_threshold
        )
        self._enter(prompt_ids)

    def add_prompts(self, prompt_ids: Sequence[str], history: Mapping[str, PromptHistory]) -> None:
        if not prompt_ids:
            self.source_exhausted = True
            return
        self._enter(prompt_ids)

    def _enter(self, prompt_ids: Sequence[str]) -> None:
        check_new_prompt_ids(prompt_ids, self._ledger.tallies, what=self.name)
        self._ledger.add(prompt_ids)
        for pid in prompt_ids:
            left = self._ledger.budget.left
            if left is not None and left < self.samples_per_prompt:
                # A partial draw would be a smaller, incomparable group: stop it undrawn.
                self._ledger.settle(pid, PromptStatus.UNRESOLVED)
            else:
                self._ledger.dispatch(pid, self.samples_per_prompt)

    def keep_rate(self) -> float:
        return max(self.min_keep_rate, (self.kept_total + 1) / (self.finished_total + 2))

    def needs_prompts(self) -> int:
        if self.source_exhausted:
            return 0
        missing = self._target - self.carried_groups - self.kept_this_step
        if missing <= 0:
            return 0
        left = self._ledger.budget.left
        affordable = math.inf if left is None else left // self.samples_per_prompt
        if affordable == 0:
            return 0
        rate = self.keep_rate()
        in_flight = self._ledger.in_flight_prompts
        want = math.ceil((missing - rate * in_flight) / rate - 1e-9)
        return int(max(0, min(want, affordable)))

    def _keep(self, rewards: Sequence[float], positives: int) -> bool:
        varied = len({float(r) for r in rewards}) > 1  # DAPO: std(rewards) > 0
        pass_rate = positives / len(rewards)
        return varied and self.min_pass_rate <= pass_rate <= self.max_pass_rate

    def observe(self, prompt_id: str, rewards: Sequence[float]) -> None:
        tally = self._ledger.record(prompt_id, rewards)
        keep = self._keep(rewards, tally.positives)
        self._ledger.settle(prompt_id, PromptStatus.RESOLVED if keep else PromptStatus.FILTERED)
        self.kept_this_step += int(keep)
        self.finished_total += 1
        self.kept_total += int(keep)

    def done(self) -> bool:
        return (
            self._ledger.in_flight == 0
            and self._ledger.open_count == 0
            and self.needs_prompts() == 0
        )

    def target_groups(self) -> int | None:
        return self._target

    def metrics(self) -> dict[str, float]:
        statuses = [t.status for t in self._ledger.tallies.values()]
        return {
            **self._ledger.metrics(),
            "sampling/filtered_prompts": float(statuses.count(PromptStatus.FILTERED)),
            "sampling/keep_rate_estimate": self.keep_rate(),
            "sampling/prompt_source_exhausted": float(self.source_exhausted),
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "carried_groups": self.carried_groups,
            "source_exhausted": self.source_exhausted,
            "kept_this_step": self.kept_this_step,
            "kept_total": self.kept_total,
            "finished_total": self.finished_total,
            "ledger": self._ledger.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.step = int(state["step"])
        self.carried_groups = int(state["carried_groups"])
        self.source_exhausted = bool(state["source_exhausted"])
        self.kept_this_step = int(state["kept_this_step"])
        self.kept_total = int(state["kept_total"])
        self.finished_total = int(state["finished_total"])
        self._ledger.load_state_dict(state["ledger"])
