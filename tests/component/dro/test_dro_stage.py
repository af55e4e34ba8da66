"""DRO through the real rollout phase: `collect_groups` with the real allocator, group builder,
reward pool (exact verifier) and variance filter, the R3 stage and a simulated rollout pool over
the scripted `FakeEngine`.

The fake engine plays the policy twice: it answers the arithmetic prompts at scripted pass rates,
and it answers the R3 restatements "c+0=" (adarl/reward/arithmetic_reflection.py) with c at
probability Q = 0.81, else one of c's three scripted neighbours. The fake spreads a response's
log-probability evenly over its tokens, so scored after the restatement of a rollout's answer c,
each of the reference's L tokens ("a<eos>", L = len(a) + 1) has probability

    Q^(1/L)                  when c = a (the rollout was right: 0.9 for L = 2),
    ((1 - Q)/3)^(1/L)        when a is one of c's neighbours (c = a ± 1: 0.2517 for L = 2),
    ≈ 0 (floor e^-50)        otherwise (c = a + 10),

all tokens alike, so every token weight is 1/L and R3 is that probability: a table by hand.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np
import pytest

from adarl.algo.dro import LOGPROB_FLOOR, pearson
from adarl.allocator import build_allocator
from adarl.allocator.allocator import BudgetAllocator
from adarl.allocator.samplers.base import PromptStatus
from adarl.allocator.variance_filter import VarianceFilter
from adarl.config.allocator import AllocatorConfig, GroupConfig
from adarl.driver.rollout_phase import PhaseParts, RolloutPhase, collect_groups
from adarl.models.tokenizer import build_char_tokenizer
from adarl.reward.arithmetic_reflection import RESTATEMENT_SUFFIX, ArithmeticRestatement
from adarl.reward.exact import ExactMatchVerifier
from adarl.reward.pool import RewardPool
from adarl.reward.r3 import R3PoolReward
from adarl.rollout.codec import PromptCodec
from adarl.rollout.fake import FakeEngine, FakePrompt, wrong_answers
from adarl.rollout.simulated import LatencyModel, SimulatedRolloutPool
from adarl.types import GenerationRequest, SamplingParams, TaskExample

Q = 0.81
LATENCY = LatencyModel(engines=4, slots=64, median_response_tokens=20, max_response_tokens=64)
SAMPLES = 8
# q3 always right, q4 always wrong, the rest at 0.5.
PASS_RATES = {3: 1.0, 4: 0.0, 5: 0.5, 6: 0.5, 7: 0.5, 8: 0.5, 9: 0.5, 10: 0.5}


def _example(i: int) -> TaskExample:
    return TaskExample(prompt_id=f"q{i}", prompt=f"{i}+{i}=", answer=str(2 * i), task="arithmetic")


def _r3_by_hand(rollout_answer: str, reference: str) -> float:
    tokens = len(reference) + 1
    if rollout_answer == reference:
        return Q ** (1 / tokens)
    if reference in wrong_answers(rollout_answer, 3):
        return ((1 - Q) / 3) ** (1 / tokens)
    return math.exp(LOGPROB_FLOOR)


class World:
    def __init__(self) -> None:
        self.tokenizer = build_char_tokenizer()
        self.codec = PromptCodec(
            tokenizer=self.tokenizer, sampling=SamplingParams(max_new_tokens=8)
        )
        self.examples = {i: _example(i) for i in PASS_RATES}
        script = {
            e.prompt: FakePrompt(pass_rate=PASS_RATES[i], answer=e.answer)
            for i, e in self.examples.items()
        }
        for e in self.examples.values():  # the restatement of every answer the policy can give
            for said in (e.answer, *wrong_answers(e.answer, 3)):
                script[said + RESTATEMENT_SUFFIX] = FakePrompt(pass_rate=Q, answer=said)
        self.engine = FakeEngine(tokenizer=self.tokenizer, script=script, seed=5)
        self.requested: list[str] = []

    def is_correct(self, request: GenerationRequest, completion) -> bool:
        return False  # only sets simulated lengths

    def run_step(
        self,
        allocator: BudgetAllocator,
        stage: R3PoolReward,
        step: int,
        ids: Sequence[int],
        refill: Iterator[TaskExample] | None = None,
    ) -> tuple[RolloutPhase, SimulatedRolloutPool]:
        pool = SimulatedRolloutPool(
            engine=self.engine, latency=LATENCY, is_correct=self.is_correct, seed=step
        )
        world = self

        class Source:
            def next_batch(self, n: int) -> list[TaskExample]:
                return [] if refill is None else [e for _, e in zip(range(n), refill, strict=False)]

            def metrics(self) -> dict[str, float]:
                return {}

        class Tracing:
            def __getattr__(self, name):
                return getattr(pool, name)

            def submit(self, requests):
                world.requested += [r.request_id.split(":")[1] for r in requests]
                pool.submit(requests)

        with RewardPool(verifiers={"arithmetic": ExactMatchVerifier()}, num_workers=1) as rewards:
            phase = collect_groups(
                step,
                [self.examples[i] for i in ids],
                PhaseParts(
                    allocator=allocator,
                    rollout=Tracing(),
                    rewards=rewards,
                    prompts=Source(),
                    codec=self.codec,
                    pool_reward=stage,
                    clock=pool.now,
                ),
            )
        return phase, pool


@pytest.fixture
def world() -> World:
    return World()


def _allocator(**filter_settings) -> BudgetAllocator:
    allocator = build_allocator(
        AllocatorConfig(
            sampler="uniform",
            uniform_samples_per_prompt=SAMPLES,
            prompts_per_step=6,
            group=GroupConfig(group_size=None, advantage="grpo"),
        )
    )
    allocator.sampler = VarianceFilter(allocator.sampler, **filter_settings)
    return allocator


def test_r3_replaces_the_verifier_and_the_filter_drops_what_cannot_teach(world: World) -> None:
    allocator = _allocator(drop_fraction=0.2, interval_steps=1, carry_forward_fraction=0.5)
    stage = R3PoolReward(template=ArithmeticRestatement(tokenizer=world.tokenizer), top_k=2)
    phase, _ = world.run_step(allocator, stage, 1, [3, 4, 5, 6, 7, 8])
    result = phase.result
    # Every trained rollout's reward is R3 from the table, not the verifier's 0/1.
    answers = {f"q{i}": e.answer for i, e in world.examples.items()}
    for group in result.groups:
        for scored in group.rollouts:
            expected = _r3_by_hand(scored.rollout.completion.text, answers[group.prompt_id])
            assert scored.reward == pytest.approx(expected, rel=1e-9)
    # q3 (all right: σ = 0, the lowest of the 6, ⌊0.2·6⌋ = 1 dropped) and q4 (never right; its
    # wrong rollouts give the 2-token reference "8<eos>" p = 0.2517 < 1/3 per token, short of the
    # top-2 certificate) are filtered now.
    sampler = allocator.sampler
    assert {g.prompt_id for g in result.groups} == {"q5", "q6", "q7", "q8"}
    m = {**result.metrics, **phase.metrics}
    assert m["signal/variance_filter_dropped_now"] == 2.0
    assert m["signal/variance_filter_top_k_failures"] == 1.0
    assert m["signal/filtered_prompts"] == 2.0
    assert set(sampler.dropped) == {"q3", "q4"}
    # The mixed prompts: R3 is higher on every right rollout than on any wrong one.
    for group in result.groups:
        right = [
            s.reward
            for s in group.rollouts
            if s.rollout.completion.text == answers[group.prompt_id]
        ]
        wrong = [
            s.reward
            for s in group.rollouts
            if s.rollout.completion.text != answers[group.prompt_id]
        ]
        assert right and wrong and min(right) > max(wrong)
    # The logged correlation is R3's with the verifier over every rescored rollout (6 × 8).
    assert m["sampling/r3_pools"] == 6.0 and m["sampling/r3_scored_pairs"] == 48.0
    assert m["signal/r3_verifier_correlation"] > 0.9
    # The scoring pass costs one simulated prefill per pair, spread over 4 engines: 12 × 4 ms.
    assert m["timing/pool_reward_s"] == pytest.approx(12 * LATENCY.prefill_s_per_request)


def test_the_logged_correlation_is_recomputable_from_the_rollouts(world: World) -> None:
    allocator = _allocator(drop_fraction=0.0, interval_steps=1, carry_forward_fraction=0.0)
    stage = R3PoolReward(template=ArithmeticRestatement(tokenizer=world.tokenizer))
    phase, _ = world.run_step(allocator, stage, 1, [5, 6, 7])
    answers = {f"q{i}": e.answer for i, e in world.examples.items()}
    r3, exact = [], []
    for group in phase.result.groups:
        for s in group.rollouts:
            r3.append(s.reward)
            exact.append(float(s.rollout.completion.text == answers[group.prompt_id]))
    assert phase.metrics["signal/r3_verifier_correlation"] == pytest.approx(pearson(r3, exact))
    assert phase.metrics["signal/r3_mean"] == pytest.approx(float(np.mean(r3)))


def test_dropped_prompts_are_skipped_without_rollouts_and_replaced(world: World) -> None:
    allocator = _allocator(drop_fraction=0.2, interval_steps=1, carry_forward_fraction=0.5)
    stage = R3PoolReward(template=ArithmeticRestatement(tokenizer=world.tokenizer), top_k=2)
    world.run_step(allocator, stage, 1, [3, 4, 5, 6, 7, 8])
    world.requested.clear()
    # Step 2 serves q3 (dropped) with q9: q3 costs no rollout; q10 is drawn in its place.
    phase, _ = world.run_step(allocator, stage, 2, [3, 9], refill=iter([world.examples[10]]))
    assert "q3" not in world.requested
    assert sorted(world.requested) == ["q10", "q9"]
    metrics = phase.result.metrics
    assert metrics["signal/variance_filter_skipped_prompts"] == 1.0
    assert metrics["sampling/rollouts"] == 2 * SAMPLES
    # The step's verdicts: q3 filtered at entry; q9 and q10 measured and kept.
    assert {g.prompt_id for g in phase.result.groups} == {"q9", "q10"}
    # Renewed drop set: ⌊0.5·2⌋ = 1 of {q3 (σ 0), q4} carried: q3 (lowest deviation first)...
    # plus this application's own drop, the lowest of {q9, q10} (⌊0.2·2⌋ = 0: none).
    assert set(allocator.sampler.dropped) == {"q3"}
    assert allocator.sampler.verdict("q3") is PromptStatus.FILTERED
