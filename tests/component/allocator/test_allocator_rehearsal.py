"""DPH-RL's rehearsal store through the real `BudgetAllocator`, the driver's rollout phase, the
scripted `FakeEngine` and the real verifier:

- a prompt joins the store iff its first pool of the run is all correct with at least
  `min_samples` samples, and the first sample of that pool is stored;
- a stored prompt drawn again gets no rollout, counted; a rollout budget is still spent in full
  on the other prompts;
- each step's rehearsal rows cycle through the store in insertion order.

(Exact resume of the store: test_allocator_resume.py's "uniform_rehearsal".)
"""

from __future__ import annotations

from _allocator_world import FakeWorld, StepTrace

from adarl.allocator import build_allocator
from adarl.allocator.rehearsal import REHEARSAL_TERM
from adarl.config.allocator import AllocatorConfig, GroupConfig, RehearsalConfig
from adarl.types import ScoredRollout

# Solved, hopeless, nearly solved (8 of 8 in 43% of pools), even.
PASS_RATES = [1.0, 0.0, 0.9, 1.0, 0.5, 0.9] * 2
ROWS_PER_STEP = 3


def _config(**overrides: object) -> AllocatorConfig:
    return AllocatorConfig(
        sampler="uniform",
        uniform_samples_per_prompt=8,
        prompts_per_step=12,
        group=GroupConfig(group_size=None, advantage="grpo"),
        rehearsal=RehearsalConfig(enabled=True, min_samples=8, per_step=ROWS_PER_STEP),
        **overrides,  # type: ignore[arg-type]
    )


def _all_correct(pool: list[ScoredRollout]) -> bool:
    return len(pool) >= 8 and all(s.reward > 0.5 for s in pool)


def test_first_all_correct_pools_join_the_store_leave_rl_and_rehearse_in_turn() -> None:
    world = FakeWorld(PASS_RATES)
    allocator = build_allocator(_config())
    traces, results = [], []
    for step in range(5):
        world.engine.update_weights(step, {})
        trace = StepTrace()
        result = world.run_step(allocator, step, world.examples, trace=trace)
        assert result is not None
        traces.append(trace)
        results.append(result)

    ids = [e.prompt_id for e in world.examples]
    first = traces[0].scored  # every prompt's first pool: step 0 samples them all
    store = [pid for pid in ids if _all_correct(first[pid])]
    assert {pid for pid in ids if world.pass_rates[pid] == 1.0} <= set(store)
    assert not {pid for pid in store if world.pass_rates[pid] in (0.0, 0.5)}
    # A prompt all correct only after its first pool never joins: the first pool decides.
    late = {pid for t in traces[1:] for pid, pool in t.scored.items() if _all_correct(pool)}
    assert late - set(store), "the seed should give a prompt solved only later"

    for step, (trace, result) in enumerate(zip(traces, results, strict=True)):
        sampled = set(trace.scored)
        skipped = set() if step == 0 else set(store)
        assert sampled == set(ids) - skipped  # no rollout for a stored prompt
        assert {g.prompt_id for g in result.groups} == sampled
        assert result.metrics["sampling/rehearsal_skipped_prompts"] == len(skipped)
        assert result.metrics["sampling/rehearsal_store_size"] == len(store)
        # The store was fed by this step's pools first (at step 0, its first pools), then the
        # step's rows taken in turn, in the order prompts joined it.
        expected = [store[(ROWS_PER_STEP * step + i) % len(store)] for i in range(ROWS_PER_STEP)]
        assert [g.prompt_id for g in result.term_groups] == expected
        for group in result.term_groups:
            assert group.trained_by == REHEARSAL_TERM and group.advantages == (0.0,)
            assert group.rollouts == (first[group.prompt_id][0],)  # the first correct sample


def test_a_rollout_budget_is_spent_on_the_prompts_not_stored() -> None:
    world = FakeWorld(PASS_RATES * 4)
    config = _config(rollouts_per_step=64)
    config.prompts_per_step = 8
    allocator = build_allocator(config)
    stored: set[str] = set()
    for step, batch in enumerate((world.examples[:8], world.examples[8:16])):
        trace = StepTrace()
        world.run_step(allocator, step, batch, trace=trace)  # 8 × 8 = 64: no refill
        stored |= {pid for pid, pool in trace.scored.items() if _all_correct(pool)}
    # Step 2 starts with step 0's prompts (its stored ones left out), so it refills from
    # prompts 8-23, whose stored ones (from step 1) are left out too as they come.
    consumed: list[str] = []

    def refill():  # the prompt source, recording what the step took from it
        for example in world.examples[8:24]:
            consumed.append(example.prompt_id)
            yield example

    trace = StepTrace()
    result = world.run_step(allocator, 2, world.examples[:8], trace=trace, refill=refill())
    assert result is not None
    assert not set(trace.scored) & stored
    assert sum(len(pool) for pool in trace.scored.values()) == 64  # the whole budget
    first_eight = {e.prompt_id for e in world.examples[:8]}
    refilled_stored = stored & set(consumed)
    assert refilled_stored, "a stored prompt should come back among the refills"
    assert result.metrics["sampling/rehearsal_skipped_prompts"] == len(
        (stored & first_eight) | refilled_stored
    )
