"""`OpenStep`: what the `BudgetAllocator` holds for one step from its start to its finish, as
one record.

Steps usually run one at a time. With overlapping steps (`max_open_steps` > 1,
`rollout.cross_step_allocation`) up to k + 1 are open at once, each its own record with its own
pools, requests in flight and copy of the sampler, selected by step number (a returned result by
the step holding its request). What outlives a step (per-prompt statistics, carried groups, the
last step's metrics) is the allocator's, not the record's.

`state_dict` / `OpenStep.from_state` are the "step" entry of the allocator's checkpoint in the
format it has always had (`no_open_step_state()` when no step is open), so earlier checkpoints load.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from adarl.allocator.samplers.base import Sampler, SamplerHooks, is_positive
from adarl.types import Group, ScoredRollout, StatisticsReply, StatisticsRequest, TaskExample


@dataclass(frozen=True)
class CarriedGroup:
    """A kept group waiting for a later step: produced at `step` by policy `weight_version`."""

    group: Group
    step: int
    weight_version: int


@dataclass
class OpenRequest:
    """A request dispatched and not yet observed."""

    prompt_id: str  # the sampler's id: the task prompt x, or x@hℓ for a hinted condition
    num_samples: int


@dataclass
class OpenStep:
    step: int
    sampler: Sampler  # runs this step: the allocator's own, or a fresh copy beside another step
    hooks: SamplerHooks  # the sampler's capabilities
    # By the sampler's prompt id (a hinted condition x@hℓ has x's example and its own pool).
    examples: dict[str, TaskExample] = field(default_factory=dict)
    pools: dict[str, list[ScoredRollout]] = field(default_factory=dict)
    in_flight: dict[str, OpenRequest] = field(default_factory=dict)  # by request id
    finish_order: list[str] = field(default_factory=list)  # prompts as their sampling ended
    carried_in: list[CarriedGroup] = field(default_factory=list)  # trained with this step
    carried_expired: int = 0
    requests: int = 0  # dispatched
    duplicates_skipped: int = 0  # refill prompts the step already had
    rehearsal_skipped: list[str] = field(default_factory=list)  # rehearsed prompts left out
    # The open statistics request, the prompts it asks about, and the prompt id of each of its
    # rollouts in order (None: none open; `statistics_asked` keeps the last request's prompts).
    statistics_request: StatisticsRequest | None = None
    statistics_asked: list[str] = field(default_factory=list)
    statistics_prompts: list[str] | None = None
    # Time inside the driver-facing calls of this step, and how many there were: with the
    # allocator an actor, the driver's `timing/allocator_s` minus this is the round trips.
    compute_s: float = 0.0
    calls: int = 0

    @staticmethod
    def open(step: int, sampler: Sampler) -> OpenStep:
        return OpenStep(step=step, sampler=sampler, hooks=SamplerHooks.of(sampler))

    def enter(self, examples: Sequence[TaskExample]) -> None:
        """New prompts of the step, each with an empty pool."""
        for example in examples:
            self.examples[example.prompt_id] = example
            self.pools.setdefault(example.prompt_id, [])

    def count_call(self, started: float) -> None:
        self.compute_s += time.perf_counter() - started
        self.calls += 1

    def ask_statistics(
        self, wanted: Sequence[str], *, positive_threshold: float
    ) -> StatisticsRequest:
        """Open the gradient-norm request for the accepted samples (reward >
        `positive_threshold`) of the prompts `wanted`, in prompt order."""
        accepted = [
            (pid, s)
            for pid in wanted
            for s in self.pools[pid]
            if is_positive(s.reward, positive_threshold)
        ]
        self.statistics_asked = list(wanted)
        self.statistics_prompts = [pid for pid, _ in accepted]
        self.statistics_request = StatisticsRequest(
            step=self.step, kind="gradient_norm", rollouts=tuple(s for _, s in accepted)
        )
        return self.statistics_request

    def answer_statistics(self, reply: StatisticsReply) -> dict[str, float]:
        """Close the open request: each asked prompt's mean over its rollouts' values (0 when it
        had none)."""
        if self.statistics_prompts is None or self.statistics_request is None:
            raise RuntimeError("update(statistics=...): no statistics request is open")
        if len(reply.values) != len(self.statistics_prompts):
            raise ValueError(
                f"statistics reply has {len(reply.values)} values for a request of "
                f"{len(self.statistics_prompts)} rollouts; answer every rollout, in order"
            )
        sums: dict[str, float] = {pid: 0.0 for pid in self.statistics_asked}
        counts: dict[str, int] = {pid: 0 for pid in self.statistics_asked}
        for pid, value in zip(self.statistics_prompts, reply.values, strict=True):
            sums[pid] += float(value)
            counts[pid] += 1
        self.statistics_prompts = None
        self.statistics_request = None
        return {pid: sums[pid] / counts[pid] if counts[pid] else 0.0 for pid in sums}

    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "examples": dict(self.examples),
            "pools": {pid: list(pool) for pid, pool in self.pools.items()},
            "open": {rid: (r.prompt_id, r.num_samples) for rid, r in self.in_flight.items()},
            "finish_order": list(self.finish_order),
            "carried_in": list(self.carried_in),
            "carried_expired": self.carried_expired,
            "requests": self.requests,
            "duplicates_skipped": self.duplicates_skipped,
            "rehearsal_skipped": list(self.rehearsal_skipped),
            "statistics": (
                self.statistics_request,
                list(self.statistics_asked),
                self.statistics_prompts,
            ),
        }

    @staticmethod
    def from_state(state: Mapping[str, Any], sampler: Sampler) -> OpenStep | None:
        """The step `state` holds, run by `sampler` (its state loaded apart); None if none."""
        if state["step"] is None:
            return None
        request, asked, prompts = state["statistics"]
        return OpenStep(
            step=state["step"],
            sampler=sampler,
            hooks=SamplerHooks.of(sampler),
            examples=dict(state["examples"]),
            pools={pid: list(pool) for pid, pool in state["pools"].items()},
            in_flight={rid: OpenRequest(pid, n) for rid, (pid, n) in state["open"].items()},
            finish_order=list(state["finish_order"]),
            carried_in=list(state["carried_in"]),
            carried_expired=int(state["carried_expired"]),
            requests=int(state["requests"]),
            duplicates_skipped=int(state["duplicates_skipped"]),
            # Absent from checkpoints written before the rehearsal store existed.
            rehearsal_skipped=list(state.get("rehearsal_skipped", [])),
            statistics_request=request,
            statistics_asked=list(asked),
            statistics_prompts=None if prompts is None else list(prompts),
        )


def no_open_step_state() -> dict[str, Any]:
    """The "step" entry of a checkpoint taken between steps."""
    return {
        "step": None,
        "examples": {},
        "pools": {},
        "open": {},
        "finish_order": [],
        "carried_in": [],
        "carried_expired": 0,
        "requests": 0,
        "duplicates_skipped": 0,
        "rehearsal_skipped": [],
        "statistics": (None, [], None),
    }
