"""The built-in arithmetic task: correct answers and solutions, disjoint deterministic splits, and
the documented difficulty mix."""

from __future__ import annotations

import re

import pytest

from adarl.reward.exact import ExactMatchVerifier
from adarl.tasks.arithmetic import (
    ALPHABET,
    DEFAULT_LEVELS,
    ArithmeticLevel,
    Split,
    arithmetic_prompt_source,
    arithmetic_test_split,
    digits,
    evaluate,
    generate_examples,
    level_counts,
    render,
    sample_examples,
    split_of,
)

# The mix documented in docs/tasks_and_rewards.md: (name, operand ranges, operators, weight).
DOCUMENTED_MIX = [
    ("3d+-0", ((100, 999), (0, 0)), "+-", 0.10),
    ("3d*1", ((100, 999), (1, 1)), "*", 0.05),
    ("3d+-1", ((100, 999), (1, 1)), "+-", 0.10),
    ("2d+1d", ((10, 99), (0, 9)), "+", 0.20),
    ("2d+-2d", ((10, 99), (10, 99)), "+-", 0.15),
    ("1d+-1d+-1d", ((0, 9), (0, 9), (0, 9)), "+-", 0.10),
    ("2d*1d", ((10, 99), (0, 9)), "*", 0.15),
    ("2d*2d", ((10, 99), (10, 99)), "*", 0.15),
]


def test_default_levels_are_the_documented_mix() -> None:
    assert [(lv.name, lv.operand_ranges, lv.operators, lv.weight) for lv in DEFAULT_LEVELS] == (
        DOCUMENTED_MIX
    )
    assert sum(lv.weight for lv in DEFAULT_LEVELS) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("split", "num_examples"), [("train", 1024), ("train", 100), ("test", 256), ("test", 100)]
)
def test_generated_splits_follow_the_mix(split: Split, num_examples: int) -> None:
    for seed in (0, 1):
        examples = generate_examples(split, num_examples, seed=seed)
        per_level = [sum(e.difficulty == i for e in examples) for i in range(len(DEFAULT_LEVELS))]
        assert per_level == level_counts(DEFAULT_LEVELS, num_examples)
        for count, (_, _, _, weight) in zip(per_level, DOCUMENTED_MIX, strict=True):
            assert abs(count - weight * num_examples) < 1  # largest-remainder rounding
        for example in examples:  # each example matches its level's shape
            name, ranges, operators, _ = DOCUMENTED_MIX[int(example.difficulty)]
            operands = [int(x) for x in re.split(r"[-+*]", example.prompt[:-1])]
            used = re.findall(r"[-+*]", example.prompt)
            assert len(operands) == len(ranges), name
            assert all(lo <= x <= hi for x, (lo, hi) in zip(operands, ranges, strict=True)), name
            assert set(used) <= set(operators), name


def test_level_counts_largest_remainder() -> None:
    levels = [ArithmeticLevel(str(i), (digits(1), digits(1)), "+", 1.0) for i in range(3)]
    assert level_counts(levels, 10) == [4, 3, 3]
    assert level_counts(levels, 2) == [1, 1, 0]


def test_evaluate_uses_precedence_and_records_steps() -> None:
    assert evaluate([12, 7, 3], "+-") == (16, ["12+7=19", "19-3=16"])
    assert evaluate([4, 3, 5], "+*") == (19, ["3*5=15", "4+15=19"])
    assert evaluate([2, 3, 4, 5], "*-*") == (-14, ["2*3=6", "4*5=20", "6-20=-14"])
    assert render([12, 7, 3], "+-") == "12+7-3="


def test_examples_are_correct_short_and_in_the_alphabet() -> None:
    examples = generate_examples("train", 2000, seed=1) + arithmetic_test_split()
    verifier = ExactMatchVerifier()
    for example in examples:
        text = example.prompt + example.answer + (example.reference_solution or "")
        assert set(text) <= set(ALPHABET), example
        assert len(example.prompt) <= 6 and len(example.answer) <= 4  # as documented
        assert example.answer == str(eval(example.prompt[:-1]))  # the ground truth
        assert int(example.answer) >= 0
        last_step = (example.reference_solution or "").split(",")[-1]
        assert last_step.split("=")[-1] == example.answer
        for step in (example.reference_solution or "").split(","):
            expression, value = step.rsplit("=", 1)
            assert str(eval(expression)) == value
        assert example.task == "arithmetic" and example.prompt_id == f"arithmetic/{example.prompt}"
        assert verifier.verify(example.answer, example).reward == 1.0


def test_splits_are_disjoint_and_deterministic() -> None:
    train = generate_examples("train", 1024, seed=0)
    test = arithmetic_test_split()
    assert len({e.prompt for e in train}) == 1024 and len({e.prompt for e in test}) == 256
    assert not {e.prompt for e in train} & {e.prompt for e in test}
    assert all(split_of(e.prompt) == "train" for e in train)
    assert all(split_of(e.prompt) == "test" for e in test)
    assert generate_examples("train", 1024, seed=0) == train
    assert arithmetic_test_split() == test
    # Other training seeds and sizes draw other train prompts, never test ones.
    other = generate_examples("train", 3000, seed=7)
    assert {e.prompt for e in other} != {e.prompt for e in train}
    assert not {e.prompt for e in other} & {e.prompt for e in test}


def test_sampled_warm_start_data_stays_in_the_train_split() -> None:
    sampled = sample_examples("train", 5000, seed=0)
    assert all(split_of(e.prompt) == "train" for e in sampled)
    assert len({e.prompt for e in sampled}) < 5000  # i.i.d.: easy prompts repeat
    fraction_level0 = sum(e.difficulty == 0 for e in sampled) / 5000
    # Binomial(5000, 0.1): standard error 0.0042; allow 4 standard errors.
    assert abs(fraction_level0 - 0.10) < 4 * 0.0042
    assert sample_examples("train", 50, seed=0) == sampled[:50]


def test_prompt_source_over_the_train_split_resumes() -> None:
    source = arithmetic_prompt_source(64, seed=3)
    assert {e.prompt for e in source.examples} == {
        e.prompt for e in generate_examples("train", 64, seed=3)
    }
    source.next_batch(50)
    state = source.state_dict()
    expected = source.next_batch(30)
    resumed = arithmetic_prompt_source(64, seed=3)
    resumed.load_state_dict(state)
    assert resumed.next_batch(30) == expected


def test_small_levels_refuse_more_prompts_than_exist() -> None:
    tiny = [ArithmeticLevel("1d+1d", (digits(1), digits(1)), "+", 1.0)]
    with pytest.raises(ValueError, match=r"has only 2\d distinct test prompts"):
        generate_examples("test", 40, seed=0, levels=tiny)


def test_level_validation() -> None:
    with pytest.raises(ValueError, match="at least 2 operands"):
        ArithmeticLevel("x", (digits(1),), "+", 1.0)
    with pytest.raises(ValueError, match="subset"):
        ArithmeticLevel("x", (digits(1), digits(1)), "/", 1.0)
    with pytest.raises(ValueError, match="operand range"):
        ArithmeticLevel("x", ((5, 2), digits(1)), "+", 1.0)
    with pytest.raises(ValueError, match="weight"):
        ArithmeticLevel("x", (digits(1), digits(1)), "+", 0.0)
