"""task.source=reasoning_gym: splits, ids, difficulty, the verifier and the refusals."""

from __future__ import annotations

import pytest

from adarl.config.reward import RewardConfig
from adarl.config.tasks import ReasoningGymConfig, TaskConfig
from adarl.reward import reasoning_gym as rg
from adarl.reward.registry import build_verifier
from adarl.tasks.build import build_prompt_source, build_test_examples


def _task(name: str = "gcd", **config: object) -> TaskConfig:
    task = TaskConfig(source="reasoning_gym")
    task.reasoning_gym = ReasoningGymConfig(
        name=name, config=dict(config), num_train_prompts=300, num_test_prompts=60
    )
    return task


def test_splits_are_disjoint_and_every_id_draws_its_prompt_again() -> None:
    # gcd of numbers up to 12: a small space, so the seeds' draws repeat questions.
    task = _task("gcd", max_value=12)
    train, test = build_prompt_source(task).examples, build_test_examples(task)
    held_out = {e.prompt for e in test}
    assert not held_out & {e.prompt for e in train}
    assert len({e.prompt for e in train}) == len(train) < 300  # repeats dropped
    assert len(test) == len(held_out)
    for example in (*train[:5], *test[:5]):
        spec, index = rg.parse_prompt_id(example.prompt_id)
        assert rg.entry(spec, index)["question"] == example.prompt
    assert {rg.parse_prompt_id(e.prompt_id)[0].seed for e in train} == {0}
    assert {rg.parse_prompt_id(e.prompt_id)[0].seed for e in test} == {1_000_000_000}


def test_the_verifier_is_the_datasets_score_answer_as_a_binary_pass() -> None:
    task = _task("spell_backward")
    example = build_test_examples(task)[0]
    word = example.answer
    verifier = build_verifier("reasoning_gym")
    assert verifier.verify(word, example).reward == 1.0
    assert verifier.verify(f"<answer>{word}</answer><eos>", example).reward == 1.0
    assert verifier.verify(word[::-1] + "x", example).reward == 0.0
    # Partial credit (the answer inside a longer response scores len(answer)/len(response) = 0.5
    # with reasoning-gym's default scorer) passes only at a threshold at or below it.
    padded = word + "#" * len(word)
    assert verifier.verify(padded, example).reward == 0.0
    lenient = RewardConfig()
    lenient.reasoning_gym.pass_threshold = 0.5
    assert build_verifier("reasoning_gym", lenient).verify(padded, example).reward == 1.0


def test_the_verifier_needs_only_the_example(monkeypatch: pytest.MonkeyPatch) -> None:
    example = build_test_examples(_task("gcd"))[3]
    rg.create.cache_clear()  # as in a process that never built the task
    rg.entry.cache_clear()
    assert build_verifier("reasoning_gym").verify(example.answer, example).reward == 1.0
    moved = type(example)(**{**example.__dict__, "prompt": example.prompt + "?"})
    with pytest.raises(ValueError, match="no longer draws the question"):
        build_verifier("reasoning_gym").verify(example.answer, moved)


def test_difficulty_comes_from_the_generators_metadata() -> None:
    # leg_counting declares num_animals in [min, max] and reports each item's own count.
    legs = build_test_examples(_task("leg_counting", min_animals=1, max_animals=4))
    assert {e.difficulty for e in legs} == {1.0, 2.0, 3.0, 4.0}
    # count_bits declares only the number's range (a magnitude, not a level): one level.
    assert {e.difficulty for e in build_test_examples(_task("count_bits"))} == {None}
    named = _task("gcd")
    named.reasoning_gym.difficulty_key = "result"
    assert all(e.difficulty == float(e.answer) for e in build_test_examples(named))
    named.reasoning_gym.difficulty_key = "no_such_key"
    named.reasoning_gym.num_test_prompts = 61  # a new cache entry
    with pytest.raises(ValueError, match="difficulty_key='no_such_key'"):
        build_test_examples(named)


def test_refusals_name_the_fix() -> None:
    with pytest.raises(ValueError, match=r"closest: \['leg_counting'"):
        build_prompt_source(_task("leg_count"))
    with pytest.raises(
        ValueError, match=r"no such key \(closest: \['max_value'.*its keys: .*min_numbers"
    ):
        build_prompt_source(_task("gcd", max_valu=3))
    with pytest.raises(ValueError, match=r"task\.reasoning_gym\.seed / test_seed"):
        build_prompt_source(_task("gcd", seed=3))
    overlapping = _task("gcd")
    overlapping.reasoning_gym.test_seed = 100
    with pytest.raises(ValueError, match=r"\[0, 300\).*\[100, 160\), which overlap"):
        overlapping.validate()
    with pytest.raises(ValueError, match=r"set task\.reasoning_gym\.name"):
        TaskConfig(source="reasoning_gym").validate()
    with pytest.raises(ValueError, match=r"unset task\.path"):
        TaskConfig(
            source="reasoning_gym", path="x.jsonl", reasoning_gym=_task().reasoning_gym
        ).validate()


def test_extract_answer() -> None:
    assert rg.extract_answer(" 12 <eos>junk") == "12"
    assert rg.extract_answer("think <answer>1</answer> then <answer> 2 </answer>") == "2"
    assert rg.extract_answer("a\nb") == "a\nb"  # answers may span lines
