"""Overlapping steps (`rollout.cross_step_allocation`): the real allocator holds steps t and t+1
(and t+2) at once, the driver's `RolloutStream` routes every wave to its steps, and a step trains
on exactly what it trains on alone whenever nothing it decides reads the steps before it.

Driven through the bench's harness (`adarl.bench.sampler.run_steps`: the stream, the allocator,
the reward pool and a simulated pool of scripted engines in virtual time), one step at a time
against step t+1 (and t+2) opening while step t samples.
"""

from __future__ import annotations

import dataclasses

import pytest

from adarl.allocator.allocator import BudgetAllocator
from adarl.allocator.build import allocator_kwargs, build_sampler
from adarl.bench.sampler import StepsOutcome, run_steps, sampler_configs
from adarl.bench.sampler_world import fake_world
from adarl.config.allocator import AllocatorConfig, SequentialConfig
from adarl.driver.rollout_phase import RolloutPhase
from adarl.rollout.simulated import LatencyModel

PROMPTS, STEPS = 48, 4
LATENCY = LatencyModel(engines=2, slots=64)


def _run(config: AllocatorConfig, *, ahead: int) -> StepsOutcome:
    world = fake_world(PROMPTS * STEPS, seed=3)
    batches = [world.examples[i * PROMPTS : (i + 1) * PROMPTS] for i in range(STEPS)]
    return run_steps(
        config, batches, world=world, latency=LATENCY, seed=3, overlapped=ahead > 0, ahead=ahead
    )


def _trained(phase: RolloutPhase) -> list[tuple]:
    """Everything a step trains on: prompts, responses, rewards, weights and advantages."""
    return [
        (
            g.prompt_id,
            tuple(s.rollout.completion.token_ids for s in g.rollouts),
            tuple(s.reward for s in g.rollouts),
            g.advantages,
            g.pool_size,
            g.pool_positives,
        )
        for g in phase.result.groups
    ]


def _configs() -> dict[str, AllocatorConfig]:
    configs = sampler_configs(prompts=PROMPTS, uniform_n=8, overshoot=0.03)
    streaming = configs["streaming"]
    return {
        "uniform": configs["uniform_same_rollouts"],
        # Draw sizes from this step's labels only: nothing read from earlier steps.
        "seq_balance_no_history": dataclasses.replace(
            streaming,
            sequential=dataclasses.replace(streaming.sequential, use_history=False),
        ),
    }


@pytest.mark.parametrize("name", ["uniform", "seq_balance_no_history"])
def test_overlapped_steps_train_what_they_train_alone(name: str) -> None:
    config = _configs()[name]
    alone = _run(config, ahead=0)
    for ahead in (1, 2):
        overlapped = _run(config, ahead=ahead)
        assert overlapped.most_open == ahead + 1  # the steps really were open together
        assert [p.result.step for p in overlapped.phases] == list(range(STEPS))
        for one, other in zip(alone.phases, overlapped.phases, strict=True):
            assert _trained(other) == _trained(one)
            assert other.rollouts == one.rollouts and other.tokens == one.tokens
        # The engines the one-step-at-a-time tail leaves idle are filled: less time in all.
        assert overlapped.total_s < alone.total_s
        assert overlapped.utilisation > alone.utilisation


def test_with_history_every_wave_reaches_its_own_step() -> None:
    """Seq-Balance reading history (the default): steps now differ from the one-at-a-time run
    (step t+1 opens before step t's records exist), but each step's count of its own rollouts,
    kept by the allocator, equals what the stream routed to it, and every group is of its step's
    prompts."""
    config = sampler_configs(prompts=PROMPTS, uniform_n=8, overshoot=0.03)["streaming"]
    world = fake_world(PROMPTS * STEPS, seed=3)
    run = _run(config, ahead=1)
    assert run.most_open == 2
    for step, phase in enumerate(run.phases):
        batch = {e.prompt_id for e in world.examples[step * PROMPTS : (step + 1) * PROMPTS]}
        assert phase.result.step == step
        assert phase.rollouts == phase.result.metrics["sampling/rollouts"] > 0
        assert {g.prompt_id for g in phase.result.groups} <= batch
        assert phase.result.groups  # it trained on something


def _allocator(config: AllocatorConfig, *, max_open_steps: int, **extra) -> BudgetAllocator:
    return BudgetAllocator(
        **{**allocator_kwargs(config.plan()), "max_open_steps": max_open_steps, **extra}
    )


def test_the_allocator_opens_steps_in_order_up_to_its_limit() -> None:
    config = _configs()["uniform"]
    world = fake_world(12, seed=1)
    batch = world.examples
    allocator = _allocator(config, max_open_steps=2)
    first = allocator.start_step(0, batch[:4])
    second = allocator.update(begin=(1, batch[4:8])).requests
    assert allocator.open_steps() == [0, 1]
    assert {r.step for r in first} == {0} and {r.step for r in second} == {1}
    with pytest.raises(RuntimeError, match="max_open_steps=2 allows"):
        allocator.update(begin=(2, batch[8:]))
    with pytest.raises(RuntimeError, match="checkpointed"):
        allocator.state_dict()
    assert allocator.discard_open_steps() == [0, 1]
    assert allocator.open_steps() == []
    allocator.start_step(5, batch[:4])
    with pytest.raises(RuntimeError, match="increasing order"):
        allocator.update(begin=(4, batch[4:8]))
    single = _allocator(config, max_open_steps=1)
    single.start_step(0, batch[:4])
    with pytest.raises(RuntimeError, match="still open"):
        single.update(begin=(1, batch[4:8]))


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (AllocatorConfig(sampler="ada_est"), "keeps state across steps"),
        (AllocatorConfig(sampler="uniform", rollouts_per_step=64), "keeps state across steps"),
        (
            AllocatorConfig(sampler="seq_balance", sequential=SequentialConfig()),
            "hint stage",
        ),
    ],
)
def test_the_allocator_refuses_what_cannot_overlap(config: AllocatorConfig, message: str) -> None:
    from adarl.allocator.hint_stage import HintStage
    from adarl.hints.collapse import CollapseRule
    from adarl.hints.schedule import SageSchedule

    hints = (
        HintStage(schedule=SageSchedule(), collapse=CollapseRule(after_samples=8))
        if message == "hint stage"
        else None
    )
    with pytest.raises(ValueError, match=message):
        BudgetAllocator(
            sampler=build_sampler(config.plan()),
            group_builder=allocator_kwargs(config.plan())["group_builder"],
            hints=hints,
            max_open_steps=2,
        )


def test_discarding_the_open_steps_waits_for_their_requests_and_closes_them() -> None:
    """At a run's end on its rollout budget (`Driver.end_stream`): the steps still sampling are
    drained and dropped, counted, and the allocator can be checkpointed again."""
    from adarl.bench.bandit import NoPrompts
    from adarl.driver.rollout_phase import PhaseParts, RolloutStream
    from adarl.reward.exact import ExactMatchVerifier
    from adarl.reward.pool import RewardPool
    from adarl.rollout.simulated import SimulatedRolloutPool

    config = sampler_configs(prompts=PROMPTS, uniform_n=8, overshoot=0.03)["streaming"]
    world = fake_world(PROMPTS * 3, seed=5)
    batches = [world.examples[i * PROMPTS : (i + 1) * PROMPTS] for i in range(3)]
    pool = SimulatedRolloutPool(
        engine=world.engine, latency=LATENCY, is_correct=world.is_correct, seed=5
    )
    allocator = _allocator(config, max_open_steps=2)
    with RewardPool(verifiers={"arithmetic": ExactMatchVerifier()}, num_workers=1) as rewards:
        stream = RolloutStream(
            PhaseParts(
                allocator=allocator,
                rollout=pool,
                rewards=rewards,
                prompts=NoPrompts(),
                codec=world.codec,
                clock=pool.now,
            )
        )
        stream.open_step(0, batches[0])
        stream.open_step(1, batches[1])
        stream.run_until_complete(0)
        stream.open_step(2, batches[2])
        in_flight = sum(request.num_samples for request, _ in stream.pending.values())
        assert stream.open_steps() == [1, 2] and in_flight > 0  # both still sampling
        sampled = stream.sampling()
        dropped = stream.discard_open()
    assert dropped == sampled + in_flight
    assert not stream.pending and stream.open_steps() == [] and allocator.open_steps() == []
    assert not pool._sim.busy()
    allocator.state_dict()  # nothing open: checkpointable again
