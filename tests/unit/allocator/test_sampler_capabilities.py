"""The sampler protocol is small: every sampler implements the core `Sampler` protocol and only
the capabilities it uses, wrappers pass their inner sampler's on, and a sampler with the core
protocol alone runs a whole step through the real `BudgetAllocator`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from adarl.allocator.allocator import BudgetAllocator
from adarl.allocator.build import build_group_builder
from adarl.allocator.build import build_sampler as build_planned_sampler
from adarl.allocator.samplers.base import (
    Draw,
    HintHost,
    InclusionWeigher,
    PassRateEstimator,
    PilotDrawer,
    PoolStatisticsObserver,
    PromptHistory,
    PromptStatus,
    Sampler,
    SamplerHooks,
    SequentialLaw,
    StatisticsRequester,
    capability,
)
from adarl.allocator.variance_filter import VarianceFilter
from adarl.config.allocator import AllocatorConfig, CurationConfig, SequentialConfig
from adarl.types import Completion, FinishReason, Rollout, ScoredRollout, TaskExample


def build_sampler(config: AllocatorConfig) -> Sampler:
    return build_planned_sampler(config.plan())


CAPABILITIES = {
    "statistics": StatisticsRequester,
    "pilots": PilotDrawer,
    "estimates": PassRateEstimator,
    "hints": HintHost,
    "inclusion": InclusionWeigher,
    "pool_statistics": PoolStatisticsObserver,
}


def _filtered(config: AllocatorConfig) -> Sampler:
    sampler = VarianceFilter(
        build_sampler(config), drop_fraction=0.1, interval_steps=1, carry_forward_fraction=0.0
    )
    return sampler  # type: ignore[return-value]  # a Sampler through delegation


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda: build_sampler(AllocatorConfig(sampler="uniform")), {"hints"}),
        (lambda: build_sampler(AllocatorConfig(sampler="seq_balance")), {"hints"}),
        (
            # Rounds mode is a host that refuses to abandon mid-round (hints need streaming).
            lambda: build_sampler(
                AllocatorConfig(sampler="seq_pos", sequential=SequentialConfig(mode="rounds"))
            ),
            {"hints"},
        ),
        (lambda: build_sampler(AllocatorConfig(sampler="dynamic_filter")), set()),
        (lambda: build_sampler(AllocatorConfig(sampler="ada_est")), {"pilots", "estimates"}),
        (
            lambda: build_sampler(AllocatorConfig(sampler="gvm")),
            {"statistics", "pilots", "estimates"},
        ),
        (lambda: build_sampler(AllocatorConfig(sampler="knapsack")), {"estimates", "inclusion"}),
        (
            lambda: build_sampler(
                AllocatorConfig(sampler="uniform", curation=CurationConfig(skip="posterior"))
            ),
            {"hints", "inclusion"},  # the skip's own weights; hosting is the inner uniform's
        ),
        (
            lambda: _filtered(AllocatorConfig(sampler="gvm")),
            {"pool_statistics", "statistics", "pilots", "estimates"},
        ),
    ],
)
def test_each_sampler_has_the_core_protocol_and_only_the_capabilities_it_uses(
    make, expected: set[str]
) -> None:
    sampler = make()
    assert isinstance(sampler, Sampler)
    hooks = SamplerHooks.of(sampler)
    assert {name for name in CAPABILITIES if getattr(hooks, name) is not None} == expected


class _Wrapper:
    """A wrapper that forwards nothing by attribute: its inner sampler's capabilities are found
    through `inner` alone (as `isinstance` sees a delegating wrapper from Python 3.12 on)."""

    def __init__(self, inner: Sampler) -> None:
        self.inner = inner


def test_capability_looks_through_wrappers_and_answers_none_without_it() -> None:
    gvm = build_sampler(AllocatorConfig(sampler="gvm"))
    assert capability(_Wrapper(gvm), StatisticsRequester) is gvm  # type: ignore[arg-type]
    assert capability(_Wrapper(_Wrapper(gvm)), PilotDrawer) is gvm  # type: ignore[arg-type]
    uniform = build_sampler(AllocatorConfig(sampler="uniform"))
    assert capability(uniform, StatisticsRequester) is None
    hooks = SamplerHooks.of(uniform)
    assert hooks.statistics_wanted() == [] and hooks.pilot_samples("x") == 0
    assert hooks.pass_rate_estimate("x") is None
    assert hooks.inclusion_probability("x") == hooks.advantage_weight("x") == 1.0


class TwoDraws:
    """A sampler with the core protocol only: two samples per prompt, then two more if the
    first two agreed (pool sizes then depend on labels, so its law is sequential)."""

    name = "two_draws"

    def __init__(self) -> None:
        self.rewards: dict[str, list[float]] = {}
        self.queued: list[Draw] = []
        self.in_flight = 0

    def start_step(
        self,
        step: int,
        prompt_ids: Sequence[str],
        history: Mapping[str, PromptHistory],
        *,
        carried_groups: int = 0,
    ) -> None:
        self.rewards, self.queued, self.in_flight = {}, [], 0
        self.add_prompts(prompt_ids, history)

    def add_prompts(self, prompt_ids: Sequence[str], history: Mapping[str, PromptHistory]) -> None:
        for pid in prompt_ids:
            self.rewards[pid] = []
            self.queued.append(Draw(prompt_id=pid, num_samples=2, index=0))

    def needs_prompts(self) -> int:
        return 0

    def next(self) -> list[Draw]:
        draws, self.queued = self.queued, []
        self.in_flight += len(draws)
        return draws

    def observe(self, prompt_id: str, rewards: Sequence[float]) -> None:
        self.in_flight -= 1
        self.rewards[prompt_id] += rewards
        if len(self.rewards[prompt_id]) == 2 and len(set(rewards)) == 1:
            self.queued.append(Draw(prompt_id=prompt_id, num_samples=2, index=1))

    def done(self) -> bool:
        return not self.in_flight and not self.queued

    def verdict(self, prompt_id: str) -> PromptStatus:
        rewards = self.rewards[prompt_id]
        if len(rewards) < 2 or (len(rewards) == 2 and len(set(rewards)) == 1):
            return PromptStatus.SAMPLING
        return PromptStatus.RESOLVED if len(set(rewards)) > 1 else PromptStatus.UNRESOLVED

    def prompt_ids(self) -> list[str]:
        return list(self.rewards)

    def target_groups(self) -> int | None:
        return None

    def sequential_law(self) -> SequentialLaw | None:
        return None  # the group builder is asked for pool advantages only (no unbiased p̂)

    def metrics(self) -> dict[str, float]:
        return {"sampling/two_draws_prompts": float(len(self.rewards))}

    def state_dict(self) -> dict[str, Any]:
        return {"rewards": {k: list(v) for k, v in self.rewards.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.rewards = {k: list(v) for k, v in state["rewards"].items()}


def _scored(request_id: str, prompt_id: str, rewards: Sequence[float]) -> list[ScoredRollout]:
    completion = Completion(token_ids=(7,), logprobs=(-0.5,), finish_reason=FinishReason.STOP)
    return [
        ScoredRollout(Rollout(request_id, prompt_id, (1,), completion, weight_version=0), r)
        for r in rewards
    ]


def test_a_sampler_with_the_core_protocol_alone_runs_a_step() -> None:
    sampler = TwoDraws()
    assert isinstance(sampler, Sampler)
    assert all(getattr(SamplerHooks.of(sampler), name) is None for name in CAPABILITIES)
    config = AllocatorConfig(sampler="uniform")
    group = dataclasses.replace(config.group, group_size=None, pass_rate_estimate="pool")
    allocator = BudgetAllocator(
        sampler=sampler,
        group_builder=build_group_builder(dataclasses.replace(config, group=group).plan()),
    )
    examples = [TaskExample(prompt_id=p, prompt=p, answer="1") for p in ("mixed", "wrong")]
    # "mixed" is mixed at once; "wrong" agrees on its first draw, draws again, ends all wrong.
    outcome = {"mixed": [[1.0, 0.0]], "wrong": [[0.0, 0.0], [0.0, 0.0]]}
    update = allocator.update(begin=(0, examples), finish_when_complete=True)
    while update.result is None:
        results = []
        for request in update.requests:
            rewards = outcome[request.example.prompt_id].pop(0)
            results.append(
                (
                    request.request_id,
                    _scored(request.request_id, request.example.prompt_id, rewards),
                )
            )
        update = allocator.update(results=results, finish_when_complete=True)
    result = update.result
    assert (result.resolved_prompts, result.unresolved_prompts) == (1, 1)
    assert {g.prompt_id: g.pool_size for g in result.groups} == {"mixed": 2, "wrong": 4}
    assert result.metrics["sampling/rollouts"] == 6.0
    assert result.metrics["sampling/two_draws_prompts"] == 2.0
    assert allocator.prompt_stats("wrong").samples == 4  # type: ignore[union-attr]
