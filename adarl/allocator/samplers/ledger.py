"""Per-prompt bookkeeping shared by the samplers: counts, draws in flight, the step budget.

Every sampler keeps at most one draw in flight per prompt (the next draw of a prompt is decided
from the results of the previous one), so a result always answers the prompt's single open draw.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from adarl.allocator.samplers.base import (
    Draw,
    PromptStatus,
    SequentialLaw,
    StepBudget,
    is_positive,
)


@dataclass
class PromptTally:
    """One prompt's counts within the current step."""

    drawn: int = 0  # samples dispatched (in flight or returned)
    in_flight: int = 0  # samples of the open draw, 0 when none is open
    positives: int = 0
    negatives: int = 0
    draws: int = 0  # draws dispatched: the number of sequential waits this prompt caused
    last_chunk: int = 0
    status: PromptStatus = PromptStatus.SAMPLING
    # 1-based position of the sample after which `exit_reached` first held (the stopping time)
    exit_index: int | None = None

    @property
    def observed(self) -> int:
        return self.positives + self.negatives


class StepLedger:
    """The prompts of one step, their tallies, the draws waiting to be handed out, the budget."""

    def __init__(self, *, budget_cap: int | None, positive_threshold: float) -> None:
        self.positive_threshold = positive_threshold
        self.budget = StepBudget(budget_cap)
        self.tallies: dict[str, PromptTally] = {}
        self.order: list[str] = []
        self._pending: list[Draw] = []
        # Running totals, so that the driver's per-result checks cost O(1), not O(prompts).
        self.in_flight = 0  # samples dispatched and not yet observed
        self.in_flight_prompts = 0
        self.open_count = 0  # prompts still SAMPLING

    def add(self, prompt_ids: Sequence[str]) -> None:
        for pid in prompt_ids:
            self.tallies[pid] = PromptTally()
            self.order.append(pid)
        self.open_count += len(prompt_ids)

    def settle(self, prompt_id: str, status: PromptStatus) -> None:
        """Give a SAMPLING prompt its final status."""
        tally = self.tallies[prompt_id]
        if tally.status is not PromptStatus.SAMPLING or status is PromptStatus.SAMPLING:
            raise AssertionError(f"prompt {prompt_id!r}: cannot settle {tally.status} as {status}")
        if tally.in_flight:
            raise AssertionError(f"prompt {prompt_id!r} settled with a draw in flight")
        tally.status = status
        self.open_count -= 1

    def tally(self, prompt_id: str) -> PromptTally:
        try:
            return self.tallies[prompt_id]
        except KeyError:
            raise KeyError(
                f"prompt {prompt_id!r} is not part of the current step; results of an earlier "
                "step cannot be observed after its finish_step"
            ) from None

    def dispatch(self, prompt_id: str, num_samples: int) -> Draw | None:
        """Queue a draw of up to `num_samples`, trimmed to the step budget; None if none left."""
        tally = self.tallies[prompt_id]
        if tally.in_flight:
            raise AssertionError(f"prompt {prompt_id!r} already has a draw in flight")
        granted = self.budget.grant(num_samples)
        if granted <= 0:
            return None
        draw = Draw(prompt_id=prompt_id, num_samples=granted, index=tally.draws)
        tally.drawn += granted
        tally.in_flight = granted
        tally.draws += 1
        tally.last_chunk = granted
        self.in_flight += granted
        self.in_flight_prompts += 1
        self._pending.append(draw)
        return draw

    def take_pending(self) -> list[Draw]:
        draws, self._pending = self._pending, []
        return draws

    def abandon(self, prompt_id: str) -> None:
        """End a prompt as ABANDONED: its queued (not yet handed out) draws are cancelled and
        refunded to the budget. Its last draw must have returned."""
        tally = self.tally(prompt_id)
        cancelled = [d for d in self._pending if d.prompt_id == prompt_id]
        if tally.in_flight and not cancelled:
            raise AssertionError(f"prompt {prompt_id!r} has a draw in flight: cannot abandon it")
        self._pending = [d for d in self._pending if d.prompt_id != prompt_id]
        for draw in cancelled:
            self.budget.used -= draw.num_samples
            tally.drawn -= draw.num_samples
            tally.draws -= 1
            self.in_flight -= draw.num_samples
            self.in_flight_prompts -= 1
        tally.in_flight = 0
        if tally.status is PromptStatus.SAMPLING:
            self.settle(prompt_id, PromptStatus.ABANDONED)
        else:
            tally.status = PromptStatus.ABANDONED

    def record(
        self,
        prompt_id: str,
        rewards: Sequence[float],
        *,
        exit_reached: Any = None,
    ) -> PromptTally:
        """Count one returned draw. `exit_reached(pos, neg) -> bool` dates the stopping rule."""
        tally = self.tally(prompt_id)
        if tally.in_flight == 0:
            raise ValueError(f"observe: prompt {prompt_id!r} has no draw in flight")
        if len(rewards) != tally.in_flight:
            raise ValueError(
                f"observe: prompt {prompt_id!r} got {len(rewards)} rewards but its open draw has "
                f"{tally.in_flight} samples; pass every rollout of one request together"
            )
        for reward in rewards:
            if is_positive(float(reward), self.positive_threshold):
                tally.positives += 1
            else:
                tally.negatives += 1
            if (
                tally.exit_index is None
                and exit_reached is not None
                and exit_reached(tally.positives, tally.negatives)
            ):
                tally.exit_index = tally.observed
        self.in_flight -= tally.in_flight
        self.in_flight_prompts -= 1
        tally.in_flight = 0
        return tally

    def open_prompts(self) -> list[str]:
        """Prompts still sampling, in step order."""
        return [pid for pid in self.order if self.tallies[pid].status is PromptStatus.SAMPLING]

    def metrics(self) -> dict[str, float]:
        draws = [t.draws for t in self.tallies.values()]
        return {
            "sampling/budget_used": float(self.budget.used),
            "sampling/budget_cap": float(self.budget.cap) if self.budget.cap is not None else -1.0,
            "sampling/budget_exhausted": float(self.budget.exhausted),
            "sampling/draws_per_prompt_max": float(max(draws, default=0)),
            "sampling/draws_per_prompt_mean": float(sum(draws) / len(draws)) if draws else 0.0,
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "budget": self.budget.state_dict(),
            "order": list(self.order),
            "tallies": {
                pid: {**asdict(t), "status": t.status.value} for pid, t in self.tallies.items()
            },
            "pending": [asdict(d) for d in self._pending],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.budget.load_state_dict(state["budget"])
        self.order = list(state["order"])
        self.tallies = {
            pid: PromptTally(**{**t, "status": PromptStatus(t["status"])})
            for pid, t in state["tallies"].items()
        }
        self._pending = [Draw(**d) for d in state["pending"]]
        self.in_flight = sum(t.in_flight for t in self.tallies.values())
        self.in_flight_prompts = sum(1 for t in self.tallies.values() if t.in_flight)
        self.open_count = sum(1 for t in self.tallies.values() if t.status is PromptStatus.SAMPLING)


class LedgerSampler:
    """The `Sampler` protocol's common answers for a sampler that keeps its step in a
    `StepLedger` (`self._ledger`): no refills, no target, pool sizes fixed before their labels
    are seen. Samplers override what they do differently and implement the capabilities they
    have (adarl/allocator/samplers/base.py) themselves."""

    name: str
    _ledger: StepLedger
    # True when `start_step` resets every field: a fresh copy can run a step beside another
    # (the allocator's overlapping steps, `max_open_steps` > 1) and nothing is lost between them.
    steps_independent: bool = False

    def needs_prompts(self) -> int:
        return 0

    def next(self) -> list[Draw]:
        return self._ledger.take_pending()

    def done(self) -> bool:
        return self._ledger.in_flight == 0 and self._ledger.open_count == 0

    def verdict(self, prompt_id: str) -> PromptStatus:
        return self._ledger.tally(prompt_id).status

    def prompt_ids(self) -> list[str]:
        return list(self._ledger.order)

    def target_groups(self) -> int | None:
        return None

    def sequential_law(self) -> SequentialLaw | None:
        return None
