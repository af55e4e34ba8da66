"""The dynamic filter: refills prompts, never raises on hard data, carries surplus groups."""

from __future__ import annotations

import logging

import pytest
from _allocator_world import FakeWorld, StepTrace

from adarl.allocator import build_allocator
from adarl.allocator.metrics import is_mixed
from adarl.config.allocator import AllocatorConfig, DynamicFilterConfig, GroupConfig


def filter_config(target: int, **overrides) -> AllocatorConfig:
    return AllocatorConfig(
        sampler="dynamic_filter",
        prompts_per_step=target,
        uniform_samples_per_prompt=4,
        dynamic_filter=overrides.pop("dynamic_filter", DynamicFilterConfig()),
        group=GroupConfig(group_size=4, advantage="grpo"),
        **overrides,
    )


@pytest.mark.parametrize("with_refill", [True, False])
def test_all_zero_pass_data_finishes_every_step(
    with_refill: bool, caplog: pytest.LogCaptureFixture
) -> None:
    target = 8
    world = FakeWorld([0.0] * 400)
    refill = iter(world.examples[target:])
    allocator = build_allocator(filter_config(target))
    with caplog.at_level(logging.WARNING, logger="adarl.allocator"):
        for step in range(3):
            trace = StepTrace()
            result = world.run_step(
                allocator,
                step,
                world.examples[:target] if step == 0 else [next(refill) for _ in range(target)],
                refill=refill if with_refill else None,
                trace=trace,
            )
            assert result is not None
            assert result.groups == ()
            assert result.metrics["signal/groups_short"] == target
            assert result.metrics["signal/groups_trained"] == 0
            drawn = sum(len(r) for r in trace.rewards.values())
            if with_refill:  # the default budget: 4 x target x samples_per_prompt
                assert result.budget_exhausted and drawn == 4 * target * 4
            else:
                assert result.metrics["sampling/prompt_source_exhausted"] == 1.0 and drawn == 32
    shortfalls = [r for r in caplog.records if "short of the target" in r.getMessage()]
    assert len(shortfalls) == 3
    assert ("sample budget exhausted" if with_refill else "prompt source empty") in shortfalls[
        0
    ].getMessage()


def test_refills_until_the_step_has_its_groups() -> None:
    target = 6
    world = FakeWorld([0.0, 0.5, 1.0, 0.2] * 50)
    refill = iter(world.examples[target:])
    allocator = build_allocator(filter_config(target))
    trace = StepTrace()
    result = world.run_step(allocator, 0, world.examples[:target], refill=refill, trace=trace)
    assert result is not None
    assert len(result.groups) == target
    assert all(is_mixed(g) for g in result.groups)
    assert result.metrics["signal/mixed_group_fraction"] == 1.0
    assert result.metrics["sampling/prompts"] > target  # it had to over-sample
    assert result.metrics["signal/filtered_prompts"] > 0


def test_surplus_groups_are_carried_with_their_weight_version_and_expire() -> None:
    target = 3
    world = FakeWorld([0.5] * 60)
    batches = [world.examples[i * 10 : (i + 1) * 10] for i in range(3)]  # 10 prompts for 3 groups
    allocator = build_allocator(
        filter_config(target, dynamic_filter=DynamicFilterConfig(max_carry_age_steps=1))
    )
    results = []
    for step, batch in enumerate(batches):
        world.engine.update_weights(step, {})  # policy version = step
        result = world.run_step(allocator, step, batch)
        assert result is not None
        results.append(result)
    first, second, third = results
    assert first.carried_in == 0 and first.carried_out >= 4
    assert len(first.groups) == target
    # Step 1 trains step 0's surplus first (oldest first), sampled by policy version 0.
    assert second.carried_in == target and len(second.groups) == target
    step0_prompts = {e.prompt_id for e in batches[0]}
    for group in second.groups:
        assert group.prompt_id in step0_prompts
        assert {s.rollout.weight_version for s in group.rollouts} == {0}
    assert second.metrics["sampling/carried_age_max_steps"] == 1
    # By step 2, what is left of step 0's surplus is 2 steps old: expired, never trained.
    assert third.metrics["sampling/carried_expired_groups"] == first.carried_out - target
    assert all(g.prompt_id not in step0_prompts for g in third.groups)


def test_no_carry_discards_surplus_like_dapo() -> None:
    world = FakeWorld([0.5] * 10)
    allocator = build_allocator(
        filter_config(3, dynamic_filter=DynamicFilterConfig(max_carry_age_steps=0))
    )
    result = world.run_step(allocator, 0)
    assert result is not None
    assert result.carried_out == 0 and result.metrics["sampling/carried_expired_groups"] >= 4
    assert allocator.state_dict()["carry"] == []
