"""The driver's rollout phase for real (allocator, in-process rollout pool, reward pool) on the
scripted fake engine: training metrics count training rollouts only, names never collide."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from adarl.allocator import build_allocator
from adarl.config.allocator import AllocatorConfig, GroupConfig
from adarl.driver.rollout_phase import PhaseParts, collect_groups
from adarl.evaluation import EvalKind, EvalResult, Evaluator, eval_reward_metrics
from adarl.models.tokenizer import build_char_tokenizer
from adarl.reward.exact import ExactMatchVerifier
from adarl.reward.pool import RewardPool
from adarl.rollout.codec import PromptCodec
from adarl.rollout.fake import FakeEngine, FakePrompt
from adarl.rollout.pool import RolloutPool
from adarl.step_metrics import merge_metrics
from adarl.tasks.source import PromptSource
from adarl.types import SamplingParams, TaskExample


def _examples(start: int, count: int, *, difficulty: float) -> list[TaskExample]:
    return [
        TaskExample(
            prompt_id=f"q{i}",
            prompt=f"{i}+{i}=",
            answer=str(2 * i),
            task="arithmetic",
            difficulty=difficulty,
        )
        for i in range(start, start + count)
    ]


@pytest.fixture
def world():
    train = _examples(0, 8, difficulty=0.0)
    held_out = _examples(100, 4, difficulty=1.0) + _examples(200, 4, difficulty=2.0)
    # Held-out prompts always solved, training prompts at p = 0.25: eval traffic leaking into
    # the training counters would be visible in the reward and the response count.
    script = {e.prompt: FakePrompt(pass_rate=0.25, answer=e.answer) for e in train}
    script |= {e.prompt: FakePrompt(pass_rate=1.0, answer=e.answer) for e in held_out}
    tokenizer = build_char_tokenizer()
    codec = PromptCodec(tokenizer=tokenizer, sampling=SamplingParams(max_new_tokens=8))
    engine = FakeEngine(tokenizer=tokenizer, script=script, seed=3)
    with (
        RolloutPool.in_process([engine], max_samples_per_call=64) as rollout,
        RewardPool(verifiers={"arithmetic": ExactMatchVerifier()}, num_workers=2) as rewards,
    ):
        yield train, held_out, codec, rollout, rewards


def _evaluator(examples: list[TaskExample], codec: PromptCodec) -> Evaluator:
    return Evaluator(
        examples=examples,
        codec=codec,
        samples_per_prompt=4,
        temperature=1.0,
        max_new_tokens=8,
        greedy=True,
        completions_to_log=2,
        seed=11,
    )


def test_training_metrics_after_an_eval_count_training_rollouts_only(world) -> None:
    train, held_out, codec, rollout, rewards = world
    evaluation = _evaluator(held_out, codec).evaluate(rollout, rewards, step=0)
    assert evaluation.accuracy == 1.0
    # 8 prompts × 4 samples plus 8 greedy samples, all counted as evaluation.
    assert evaluation.metrics()["eval/reward_responses"] == 40.0

    allocator = build_allocator(
        AllocatorConfig(
            sampler="uniform",
            prompts_per_step=8,
            uniform_samples_per_prompt=4,
            group=GroupConfig(group_size=None, advantage="grpo"),
        )
    )
    phase = collect_groups(
        1,
        train,
        PhaseParts(
            allocator=allocator,
            rollout=rollout,
            rewards=rewards,
            prompts=PromptSource(examples=train, seed=0),
            codec=codec,
        ),
    )
    metrics = merge_metrics({"allocator": phase.result.metrics, "rollout phase": phase.metrics})
    trained = [s.reward for g in phase.result.groups for s in g.rollouts]
    assert phase.rollouts == len(trained) == 32  # uniform groups keep every rollout
    assert metrics["sampling/reward_responses"] == 32.0  # not 72: no eval response counted
    assert metrics["sampling/engine_samples"] == 32.0
    assert metrics["signal/reward_mean"] == pytest.approx(float(np.mean(trained)))
    assert metrics["sampling/scored_reward_mean"] == pytest.approx(float(np.mean(trained)))
    assert metrics["signal/reward_mean"] < 1.0  # the held-out prompts (all correct) left out
    assert metrics["timing/rollout_wait_s"] >= 0.0 and metrics["timing/allocator_s"] > 0.0
    # The token budget's counts: what the learner will read, prompt and response, per response.
    sequences = [s.rollout for g in phase.result.groups for s in g.rollouts]
    assert phase.tokens == sum(len(r.completion.token_ids) for r in sequences)
    assert phase.prompt_tokens == sum(len(r.prompt_token_ids) for r in sequences)
    assert phase.prompt_tokens >= 32 * min(len(codec.prompt_token_ids(e.prompt)) for e in train)


@pytest.mark.parametrize(
    ("max_rollouts", "max_sequence_tokens", "reached"),
    [
        (None, None, [False, False, False]),
        (100, None, [False, True, True]),  # 100 rollouts reached with the second phase
        (None, 1_000, [False, False, True]),  # 1,000 tokens with the third (100 + 500 + 500)
        (1_000, 1_000, [False, False, True]),  # whichever comes first
    ],
)
def test_the_run_budget_is_rollouts_or_sequence_tokens_whichever_comes_first(
    max_rollouts: int | None, max_sequence_tokens: int | None, reached: list[bool]
) -> None:
    from adarl.driver.step_loop import Driver

    driver = Driver(
        parts=None,  # type: ignore[arg-type]  # the budget reads only the driver's counts
        learners=None,  # type: ignore[arg-type]
        weight_sync=None,  # type: ignore[arg-type]
        prompts_per_step=1,
        max_rollouts=max_rollouts,
        max_sequence_tokens=max_sequence_tokens,
    )
    # Three phases of 50 rollouts: 100, 500 and 500 prompt + response tokens.
    for tokens, answer in zip((100, 500, 500), reached, strict=True):
        driver.rollouts_generated += 50
        driver.sequence_tokens_generated += tokens
        assert driver.budget_reached() is answer
    # A phase sampled ahead counts before it trains: no further step is sampled for it.
    driver.rollouts_generated = driver.sequence_tokens_generated = 0
    assert driver.budget_reached(rollouts_ahead=150, sequence_tokens_ahead=1_100) is any(reached)


def test_evaluation_reports_accuracy_by_difficulty(world) -> None:
    _, held_out, codec, rollout, rewards = world
    result = _evaluator(held_out, codec).evaluate(rollout, rewards, step=5)
    metrics = result.metrics()
    assert metrics["eval/accuracy_by_difficulty/1"] == 1.0
    assert metrics["eval/accuracy_by_difficulty/2"] == 1.0
    assert metrics["eval/num_prompts"] == 8.0


def test_the_base_and_final_evaluations_draw_their_own_sample_count(world) -> None:
    _, held_out, codec, rollout, rewards = world
    evaluator = dataclasses.replace(_evaluator(held_out, codec), final_samples_per_prompt=6)
    drawn = {
        kind: evaluator.evaluate(rollout, rewards, step=0, kind=kind).samples_per_prompt
        for kind in EvalKind
    }
    assert drawn == {EvalKind.BASE: 6, EvalKind.PERIODIC: 4, EvalKind.FINAL: 6}
    # None (eval.final_samples_per_prompt=null): every evaluation draws samples_per_prompt.
    plain = _evaluator(held_out, codec)
    assert plain.evaluate(rollout, rewards, step=0, kind=EvalKind.FINAL).samples_per_prompt == 4


def test_evaluation_reports_the_best_constant_answer_and_checkpoints_it(world, tmp_path) -> None:
    _, held_out, codec, rollout, rewards = world
    # Training answers: "200" three times, "400" twice. Held-out answers are 2i for i in 100..103
    # and 200..203, so "200" is right on exactly one of the 8 held-out prompts.
    train = [
        TaskExample(prompt_id=f"t{i}", prompt=f"t{i}", answer=a, task="arithmetic")
        for i, a in enumerate(["200", "400", "200", "400", "200"])
    ]
    evaluator = dataclasses.replace(
        _evaluator(held_out, codec), train_examples=train, verifier=ExactMatchVerifier()
    )
    result = evaluator.evaluate(rollout, rewards, step=0)
    assert result.best_constant == ("200", 1 / 8)
    assert result.metrics()["eval/best_constant_accuracy"] == 1 / 8
    assert result.table()["best_constant"] == {"answer": "200", "accuracy": 1 / 8}
    # The checkpoint loads object pieces with weights_only=True: plain containers only.
    torch.save(result.state_dict(), tmp_path / "eval.pt")
    restored = EvalResult.from_state_dict(torch.load(tmp_path / "eval.pt", weights_only=True))
    assert restored == result
    assert _evaluator(held_out, codec).evaluate(rollout, rewards, step=0).best_constant is None


def test_merge_metrics_names_both_components_of_a_collision() -> None:
    with pytest.raises(ValueError, match="'signal/x' is emitted by both allocator and rewards"):
        merge_metrics({"allocator": {"signal/x": 1.0}, "rewards": {"signal/x": 2.0}})
    assert merge_metrics({"a": {"x/1": 1.0}, "b": {"x/2": 2.0}}) == {"x/1": 1.0, "x/2": 2.0}


def test_eval_reward_counters_get_their_own_names() -> None:
    renamed = eval_reward_metrics(
        {"sampling/reward_responses": 4.0, "timing/reward_s": 0.5, "sampling/reward_errors": 1.0}
    )
    assert renamed == {
        "eval/reward_responses": 4.0,
        "timing/eval_reward_s": 0.5,
        "eval/reward_errors": 1.0,
    }


class _Counting:
    """Counts the calls made on `inner` by method name (everything else passes through)."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> object:
        attribute = getattr(self.inner, name)
        if not callable(attribute):
            return attribute

        def counted(*args: object, **kwargs: object) -> object:
            self.calls[name] = self.calls.get(name, 0) + 1
            return attribute(*args, **kwargs)

        return counted


def test_the_allocator_is_called_once_per_wave_with_start_and_finish_riding_along(world) -> None:
    """Seq-Balance draws in several waves; the allocator (a Ray actor in a real run: each call a
    round trip) is called once to start and once per wave of returned results, and the step is
    finished by the call that completed it: no separate start_step/finish_step round trips."""
    train, _, codec, rollout, rewards = world
    allocator = _Counting(
        build_allocator(AllocatorConfig(sampler="seq_balance", prompts_per_step=8))
    )
    engines = _Counting(rollout)
    phase = collect_groups(
        1,
        train,
        PhaseParts(
            allocator=allocator,  # type: ignore[arg-type]
            rollout=engines,  # type: ignore[arg-type]
            rewards=rewards,
            prompts=PromptSource(examples=train, seed=0),
            codec=codec,
        ),
    )
    waves = engines.calls["drain_completed"]
    assert waves >= 2  # adaptive: follow-up draws came back in later waves
    assert allocator.calls == {"update": waves + 1}
    assert phase.result.metrics["perf/allocator_calls"] == waves + 1
    assert phase.result.metrics["sampling/engine_utilisation"] > 0.0


def test_an_evaluation_keeps_its_per_prompt_counts(world, tmp_path) -> None:
    """Every held-out prompt's counts, in prompt order: 4 of 4 correct, one distinct correct
    text (the fake engine writes the answer), the answer's length in tokens (+ end of sequence);
    evaluations.jsonl keeps the last row of a (step, kind) written twice (a resumed run)."""
    from adarl.evaluation.records import append_evaluation, read_evaluations

    _, held_out, codec, rollout, rewards = world
    result = _evaluator(held_out, codec).evaluate(rollout, rewards, step=0, kind=EvalKind.BASE)
    assert result.prompt_ids == [e.prompt_id for e in held_out]
    assert result.correct == [4] * 8 and result.distinct_correct == [1] * 8
    lengths = [len(e.answer) for e in held_out]
    assert all(
        tokens >= length for tokens, length in zip(result.response_tokens, lengths, strict=True)
    )
    assert result.metrics()["eval/distinct_correct_per_prompt"] == 1.0
    append_evaluation(tmp_path, step=0, kind=EvalKind.BASE, result=result)
    again = dataclasses.replace(result, correct=[3] * 8)
    append_evaluation(tmp_path, step=0, kind=EvalKind.BASE, result=again)
    append_evaluation(tmp_path, step=5, kind=EvalKind.FINAL, result=result)
    rows = read_evaluations(tmp_path)
    assert [(r["step"], r["kind"]) for r in rows] == [(0, "base"), (5, "final")]
    assert rows[0]["correct"] == [3] * 8 and rows[0]["levels"] == result.levels
