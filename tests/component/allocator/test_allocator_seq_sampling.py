"""Seq-Pos / Seq-Balance through the real allocator, fake engine and verifier, for known p."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
from _allocator_world import FakeWorld, StepTrace

from adarl.allocator import build_allocator
from adarl.allocator.metrics import is_mixed
from adarl.config.allocator import AllocatorConfig, GroupConfig, SequentialConfig


def seq_config(**overrides) -> AllocatorConfig:
    sequential = overrides.pop("sequential", SequentialConfig(k_pos=2, k_neg=2))
    group = overrides.pop("group", GroupConfig(group_size=4))
    return AllocatorConfig(
        sampler=overrides.pop("sampler", "seq_balance"),
        prompts_per_step=overrides.pop("prompts_per_step", 64),
        max_samples_per_prompt=overrides.pop("max_samples_per_prompt", 32),
        sequential=sequential,
        group=group,
        **overrides,
    )


def stopping_time_law(p: float, k_pos: int, k_neg: int, cap: int) -> tuple[float, float]:
    """Mean and variance of min(N*, cap), N* the first n with ≥ k⁺ positives and ≥ k⁻
    negatives among n Bernoulli(p) samples: E[T] = Σ_{n<cap} P(N* > n),
    E[T²] = Σ_{n<cap} (2n + 1) P(N* > n)."""
    mean = second = 0.0
    for n in range(cap):
        done = sum(math.comb(n, x) * p**x * (1 - p) ** (n - x) for x in range(k_pos, n - k_neg + 1))
        mean += 1.0 - done
        second += (2 * n + 1) * (1.0 - done)
    return mean, second - mean**2


def first_exit(rewards: list[float], k_pos: int, k_neg: int) -> int | None:
    pos = neg = 0
    for i, r in enumerate(rewards, start=1):
        pos, neg = pos + (r > 0.5), neg + (r <= 0.5)
        if pos >= k_pos and neg >= k_neg:
            return i
    return None


def test_trains_only_balanced_mixed_groups_when_the_pool_meets_both_quotas() -> None:
    pass_rates = [0.0, 0.02, 0.1, 0.3, 0.5, 0.7, 0.9, 0.98, 1.0] * 4
    world = FakeWorld(pass_rates)
    allocator = build_allocator(seq_config(prompts_per_step=len(pass_rates)))
    trace = StepTrace()
    result = world.run_step(allocator, 0, trace=trace)
    assert result is not None
    by_prompt = {g.prompt_id: g for g in result.groups}
    reached = 0
    for pid, rewards in trace.rewards.items():
        positives = sum(r > 0.5 for r in rewards)
        if positives >= 2 and len(rewards) - positives >= 2:
            reached += 1
            group = by_prompt[pid]
            assert group.resolved and is_mixed(group)
            assert sorted(s.reward for s in group.rollouts) == [0.0, 0.0, 1.0, 1.0]
        else:
            assert not by_prompt[pid].resolved
    assert reached >= 16  # the 0.1-0.9 prompts nearly always reach both quotas within 32
    # p = 0 and p = 1 prompts can never resolve: each is unresolved at its cap and counted.
    for pid, p in world.pass_rates.items():
        if p in (0.0, 1.0):
            assert len(trace.rewards[pid]) == 32 and not by_prompt[pid].resolved
    assert result.unresolved_prompts == len(pass_rates) - reached
    assert result.metrics["signal/unresolved_prompts"] == result.unresolved_prompts
    assert result.metrics["signal/groups_trained"] == len(pass_rates)  # keep_available


@pytest.mark.parametrize(
    ("sampler", "k_pos", "k_neg", "p"),
    [("seq_pos", 2, 0, 0.2), ("seq_balance", 2, 2, 0.3), ("seq_balance", 2, 2, 0.8)],
)
def test_samples_per_prompt_follow_the_seq_rule(
    sampler: str, k_pos: int, k_neg: int, p: float
) -> None:
    """max_overshoot_fraction=0 draws exactly the stopping time N* of the rule; the cap (200)
    is out of reach (P(N* > 200) < 1e-15 here). Tolerance: 4 standard errors of the mean of
    n = 600 prompts, with the variance of N* computed exactly (a 5% bias in E[N*] is 4-6 SE)."""
    n_prompts, cap = 600, 200
    world = FakeWorld([p] * n_prompts, engine_seed=11)
    config = seq_config(
        sampler=sampler,
        prompts_per_step=n_prompts,
        max_samples_per_prompt=cap,
        sequential=SequentialConfig(k_pos=k_pos, k_neg=k_neg, max_overshoot_fraction=0),
    )
    trace = StepTrace()
    result = world.run_step(build_allocator(config), 0, trace=trace)
    assert result is not None and result.unresolved_prompts == 0
    drawn = np.array([len(r) for r in trace.rewards.values()], dtype=float)
    for rewards in trace.rewards.values():
        assert first_exit(rewards, k_pos, k_neg) == len(rewards)  # no overshoot
    mean, var = stopping_time_law(p, k_pos, k_neg, cap)
    if sampler == "seq_pos":
        assert mean == pytest.approx(k_pos / p, rel=1e-9)  # negative binomial: E[N] = k/p
    se = math.sqrt(var / n_prompts)
    assert abs(drawn.mean() - mean) < 4 * se, (drawn.mean(), mean, se)

    # The default chunks: the rule's stopping point follows the same law (same tolerance), and
    # the draws overshoot it by little (the exact law of the draws: tests/component/allocator/
    # test_allocator_exact_bandit.py).
    world = FakeWorld([p] * n_prompts, engine_seed=12)
    config.sequential = SequentialConfig(k_pos=k_pos, k_neg=k_neg)
    trace = StepTrace()
    world.run_step(build_allocator(config), 0, trace=trace)
    exits = np.array([first_exit(r, k_pos, k_neg) for r in trace.rewards.values()], dtype=float)
    drawn = np.array([len(r) for r in trace.rewards.values()], dtype=float)
    assert abs(exits.mean() - mean) < 4 * se
    assert (drawn >= exits).all() and drawn.mean() < 1.2 * mean + 4 * se


def test_caps_and_the_global_budget_are_never_exceeded() -> None:
    pass_rates = [0.0, 0.05, 0.2, 0.5, 1.0] * 6
    budget = 300  # far below 30 prompts x cap 32: the budget binds
    world = FakeWorld(pass_rates)
    config = seq_config(prompts_per_step=len(pass_rates), max_samples_per_step=budget)
    allocator = build_allocator(config)
    for step in range(2):
        trace = StepTrace()
        result = world.run_step(allocator, step, trace=trace, order_seed=step)
        assert result is not None
        assert sum(len(r) for r in trace.rewards.values()) <= budget
        assert sum(r.num_samples for r in trace.requests) <= budget
        assert max(len(r) for r in trace.rewards.values()) <= 32
        assert result.metrics["sampling/budget_used"] <= budget
        assert result.metrics["sampling/budget_cap"] == budget
        assert result.metrics["sampling/unresolved_by_budget"] > 0
        # Every prompt ended resolved or unresolved, and is counted once.
        assert result.resolved_prompts + result.unresolved_prompts == len(pass_rates)


@pytest.mark.parametrize("policy", ["drop", "zero_advantage", "keep_available"])
def test_unresolved_prompts_follow_the_policy(
    policy: str, caplog: pytest.LogCaptureFixture
) -> None:
    pass_rates = [0.0, 0.0, 0.5, 0.5, 1.0]
    world = FakeWorld(pass_rates)
    config = seq_config(
        prompts_per_step=len(pass_rates), group=GroupConfig(group_size=4, unresolved_policy=policy)
    )
    with caplog.at_level(logging.WARNING):
        result = world.run_step(build_allocator(config), 0)
    assert result is not None
    unresolved = {pid for pid, p in world.pass_rates.items() if p in (0.0, 1.0)}
    assert result.unresolved_prompts == 3 == result.metrics["signal/unresolved_prompts"]
    trained = {g.prompt_id: g for g in result.groups}
    if policy == "drop":
        assert not unresolved & set(trained)
        assert result.dropped_prompts == 3
    else:
        assert unresolved <= set(trained)
        for pid in unresolved:
            assert len(trained[pid].rollouts) == 4 and not trained[pid].resolved
            # all-equal rewards: zero advantage either way (r - p̃ = 0)
            assert trained[pid].advantages == (0.0,) * 4


def test_engine_utilisation_is_logged_with_the_step() -> None:
    world = FakeWorld([0.5, 0.5])
    allocator = build_allocator(seq_config(prompts_per_step=2))
    pending = allocator.start_step(0, world.examples)
    while not allocator.step_complete():
        request = pending.pop()
        pending += allocator.observe(request.request_id, world.generate(request))
    result = allocator.finish_step(engine_utilisation=0.75)
    assert result.metrics["sampling/engine_utilisation"] == 0.75
    assert allocator.metrics() == result.metrics
    with pytest.raises(RuntimeError, match="no step is open"):
        allocator.observe("0:q0:0", [])
