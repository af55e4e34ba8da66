"""Paired comparisons of two runs prompt by prompt (adarl/bench/paired_report.py)."""

from __future__ import annotations

import math

import pytest

from adarl.bench.learning_records import EvalPoint, PromptCounts, RunRecord, prompt_set
from adarl.bench.paired_report import (
    combine,
    equal_steps_table,
    paired_difference,
    paired_table,
)


def _counts(correct: list[int], levels: list[str] | None = None) -> PromptCounts:
    return PromptCounts(
        samples=4,
        prompts=prompt_set([f"p{i}" for i in range(len(correct))]),
        levels=levels or ["0"] * len(correct),
        correct=correct,
        distinct_correct=[min(c, 1) for c in correct],
        response_tokens=[3.0] * len(correct),
    )


def test_paired_difference_by_hand() -> None:
    # pass@1 per prompt = c/4: arm (1, 0.5, 0), reference (0.5, 0.5, 0.25): d = (0.5, 0, -0.25)
    arm, ref = _counts([4, 2, 0]), _counts([2, 2, 1])
    d = paired_difference(arm, ref, k=1)
    assert d.delta == pytest.approx(0.25 / 3)
    sd = math.sqrt(sum((x - 0.25 / 3) ** 2 for x in (0.5, 0.0, -0.25)) / 2)
    assert d.se == pytest.approx(sd / math.sqrt(3))
    # pass@4 of 4 samples: 1 if any correct: arm (1, 1, 0), reference (1, 1, 1)
    assert paired_difference(arm, ref, k=4).delta == pytest.approx(-1 / 3)
    # one level only
    levelled = _counts([4, 2, 0], ["a", "b", "b"])
    assert (
        paired_difference(levelled, _counts([2, 2, 1], ["a", "b", "b"]), k=1, level="a").delta
        == 0.5
    )
    with pytest.raises(ValueError, match="same prompts"):
        paired_difference(arm, _counts([1, 1]), k=1)
    seeds = combine([d, d])
    assert seeds.delta == d.delta and seeds.se == pytest.approx(d.se / math.sqrt(2))


def _run(
    arm: str, correct: list[int], *, steps: int, per_step: int, curve: list[float]
) -> RunRecord:
    evals = [
        EvalPoint(
            step=s,
            rollouts=256.0 * s,
            tokens=0.0,
            wall_s=float(s),
            accuracy=a,
            greedy_accuracy=None,
        )
        for s, a in zip((0, steps // 2, steps), curve, strict=True)
    ]
    return RunRecord(
        arm=arm,
        experiment="grpo",
        seed=0,
        evals=evals,
        mixed_fraction=[],
        steps=steps,
        rollouts=0.0,
        tokens=0.0,
        groups_trained=0.0,
        mixed_groups=0.0,
        discarded_samples=None,
        start_up_s=1.0,
        prompts_by_bin={},
        rollouts_by_bin={},
        timing_s={},
        optimizer_steps_per_step=per_step,
        base_prompts=_counts([0, 0, 0, 0]),
        final_prompts=_counts(correct),
    )


def test_tables_say_which_axis_an_arm_wins_on() -> None:
    reference = _run("ref", [2, 2, 2, 2], steps=100, per_step=4, curve=[0.1, 0.3, 0.5])
    # Half the optimizer steps per rollout: at the reference's 400 steps it has not arrived.
    arm = _run("arm", [4, 4, 4, 3], steps=100, per_step=2, curve=[0.1, 0.4, 0.6])
    table = paired_table([reference, arm], "ref")
    assert "| arm | 0 | +43.8 (6.2) |" in table and "| yes |" in table and "200 / 400" in table
    steps = equal_steps_table([reference, arm], "ref")
    # at 200 optimizer steps: arm's end (60%), the reference's half-way point (30%)
    assert "| 200 | 60.0 / 30.0% | differ |" in steps
