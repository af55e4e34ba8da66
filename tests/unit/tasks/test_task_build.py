"""`TaskConfig` → prompt source and held-out examples, and the config's validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adarl.config.tasks import (
    DEFAULT_TEST_FRACTION,
    ArithmeticConfig,
    ArithmeticLevelConfig,
    FieldsConfig,
    TaskConfig,
)
from adarl.tasks.arithmetic import arithmetic_test_split, generate_examples
from adarl.tasks.build import build_prompt_source, build_test_examples
from adarl.tasks.files import BadRowError


def test_default_task_is_the_arithmetic_mix() -> None:
    config = TaskConfig()
    source = build_prompt_source(config)
    assert len(source) == 1024
    assert {e.prompt for e in source.examples} == {
        e.prompt for e in generate_examples("train", 1024, seed=0)
    }
    assert build_test_examples(config) == arithmetic_test_split(256)


def test_custom_arithmetic_levels() -> None:
    level = ArithmeticLevelConfig(name="add", operand_ranges=[[10, 99], [10, 99]], operators="+")
    config = TaskConfig(arithmetic=ArithmeticConfig(num_train_prompts=50, levels=[level]))
    examples = build_prompt_source(config).examples
    assert all(e.difficulty == 0.0 and "+" in e.prompt and len(e.prompt) == 6 for e in examples)


def test_file_task(tmp_path: Path) -> None:
    train, test = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    train.write_text("".join(json.dumps({"q": f"{i}?", "a": str(i)}) + "\n" for i in range(5)))
    test.write_text(json.dumps({"q": "", "a": "1"}) + "\n" + json.dumps({"q": "x", "a": "2"}))
    config = TaskConfig(
        source="jsonl",
        verifier="math",
        path=str(train),
        test_path=str(test),
        fields=FieldsConfig(prompt="q", answer="a"),
        seed=4,
    )
    source = build_prompt_source(config)
    assert len(source) == 5 and all(e.task == "math" for e in source.examples)
    with pytest.raises(BadRowError, match=r"test\.jsonl, line 1: empty_prompt"):
        build_test_examples(config)
    config.on_bad_row = "skip"
    assert [e.prompt for e in build_test_examples(config)] == ["x"]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (TaskConfig(source="csv"), "task.source"),
        (TaskConfig(source="jsonl", verifier="math"), "set task.path"),
        (TaskConfig(source="jsonl", path="x.jsonl"), "set task.verifier"),
        (TaskConfig(verifier="math"), "the 'arithmetic' verifier"),
        (TaskConfig(on_bad_row="ignore"), "task.on_bad_row"),
        (TaskConfig(max_prompt_chars=0), "task.max_prompt_chars"),
        (TaskConfig(arithmetic=ArithmeticConfig(test_fraction=1.0)), "test_fraction"),
        (
            TaskConfig(
                arithmetic=ArithmeticConfig(levels=[ArithmeticLevelConfig(operand_ranges=[[1, 2]])])
            ),
            r"levels\[0\].operand_ranges",
        ),
    ],
)
def test_task_config_validation_names_the_key(config: TaskConfig, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        config.validate()


def test_schemas_compose_under_omegaconf() -> None:
    from omegaconf import OmegaConf

    from adarl.config.reward import RewardConfig

    override = {
        "arithmetic": {
            "num_train_prompts": 20,
            "levels": [{"name": "add", "operand_ranges": [[10, 99], [0, 9]], "operators": "+"}],
        }
    }
    config = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(TaskConfig), override))
    assert isinstance(config, TaskConfig)
    assert len(build_prompt_source(config)) == 20
    with pytest.raises(Exception, match="bogus"):
        OmegaConf.merge(OmegaConf.structured(RewardConfig), {"code": {"bogus": 1}})


# ---------------------------------------------------------------------------------------------
# answers the task's verifier cannot read are bad rows at load time


def math_rows(answers: list[str]) -> str:
    return "".join(json.dumps({"q": f"q{i}", "a": a}) + "\n" for i, a in enumerate(answers))


def test_a_math_answer_math_verify_cannot_parse_is_a_bad_row(tmp_path: Path) -> None:
    path = tmp_path / "math.jsonl"
    path.write_text(math_rows(["\\frac{1}{2}", "$$", "42", "\\text{}", "\\boxed{}"]))
    config = TaskConfig(
        source="jsonl",
        verifier="math",
        path=str(path),
        fields=FieldsConfig(prompt="q", answer="a"),
        test_fraction=0.0,  # every usable row trains
    )
    with pytest.raises(BadRowError) as error:
        build_prompt_source(config)
    message = str(error.value)
    assert message.startswith(f"{path}, line 2: unparseable_answer: task.verifier='math'")
    assert "'$$'" in message and "task.fields.answer" in message and "on_bad_row=skip" in message

    config.on_bad_row = "skip"
    source = build_prompt_source(config)
    assert [e.answer for e in source.examples] == ["\\frac{1}{2}", "42"]
    metrics = source.metrics()
    assert metrics["sampling/data_rows_skipped_unparseable_answer"] == 3.0
    assert metrics["sampling/data_rows_skipped"] == 3.0


def test_held_out_answers_are_checked_too_with_the_verifier_given(tmp_path: Path) -> None:
    from adarl.reward.math_verifier import MathVerifier

    train, test = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    train.write_text(math_rows(["1", "2"]))
    test.write_text(math_rows(["3", "$$"]))
    config = TaskConfig(
        source="jsonl",
        verifier="math",
        path=str(train),
        test_path=str(test),
        fields=FieldsConfig(prompt="q", answer="a"),
        on_bad_row="skip",
    )
    assert [e.answer for e in build_test_examples(config, verifier=MathVerifier())] == ["3"]


def test_code_tests_that_are_not_a_test_spec_are_bad_rows(tmp_path: Path) -> None:
    path = tmp_path / "code.jsonl"
    good = json.dumps({"stdio": [{"input": "1\n", "output": "1\n"}]})
    path.write_text(math_rows([good, "not json", json.dumps({"fn_name": "f"})]))
    config = TaskConfig(
        source="jsonl",
        verifier="code",
        path=str(path),
        fields=FieldsConfig(prompt="q", answer="a"),
        on_bad_row="skip",
        test_fraction=0.0,  # every usable row trains
    )
    source = build_prompt_source(config)
    assert [e.answer for e in source.examples] == [good]
    assert source.metrics()["sampling/data_rows_skipped_unparseable_answer"] == 2.0


# ---------------------------------------------------------------------------------------------
# task.test_fraction: a held-out set carved out of the training file


def fraction_config(path: Path, fraction: float, **overrides: object) -> TaskConfig:
    config = TaskConfig(
        source="jsonl",
        verifier="arithmetic",
        path=str(path),
        fields=FieldsConfig(prompt="q", answer="a"),
        test_fraction=fraction,
    )
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


def write_sums(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"q": f"{i}+1=", "a": str(i + 1)}) + "\n" for i in range(n)))
    return path


def test_test_fraction_holds_out_a_stable_disjoint_part_of_the_training_file(
    tmp_path: Path,
) -> None:
    config = fraction_config(write_sums(tmp_path / "sums.jsonl", 200), 0.1)
    train = {e.prompt_id for e in build_prompt_source(config).examples}
    test = [e.prompt_id for e in build_test_examples(config)]
    assert len(test) == 20 and len(set(test)) == 20  # round(0.1 x 200)
    assert train.isdisjoint(test) and len(train) + len(test) == 200
    # The same split in every run, and whatever the root seed derives for task.seed.
    again = fraction_config(Path(config.path or ""), 0.1, seed=12345)
    assert [e.prompt_id for e in build_test_examples(again)] == test
    assert {e.prompt_id for e in build_prompt_source(again).examples} == train
    # split_seed picks another split.
    other = fraction_config(Path(config.path or ""), 0.1, split_seed=1)
    assert set(e.prompt_id for e in build_test_examples(other)) != set(test)


def test_appending_rows_keeps_held_out_prompts_held_out(tmp_path: Path) -> None:
    small = build_test_examples(fraction_config(write_sums(tmp_path / "a.jsonl", 100), 0.2))
    large = build_test_examples(fraction_config(write_sums(tmp_path / "b.jsonl", 150), 0.2))
    # Selection is by prompt text: growing the file only adds prompts to the held-out set.
    assert {e.prompt for e in small} <= {e.prompt for e in large}


def test_duplicate_prompts_never_straddle_the_split(tmp_path: Path) -> None:
    path = tmp_path / "dups.jsonl"
    path.write_text(
        "".join(json.dumps({"q": f"{i % 10}+1=", "a": str(i % 10 + 1)}) + "\n" for i in range(60))
    )
    config = fraction_config(path, 0.25)
    held = {e.prompt for e in build_test_examples(config)}
    trained = {e.prompt for e in build_prompt_source(config).examples}
    assert held and trained and held.isdisjoint(trained)


def test_no_held_out_set_is_an_empty_list_and_too_large_a_fraction_is_refused(
    tmp_path: Path,
) -> None:
    path = write_sums(tmp_path / "sums.jsonl", 3)
    assert build_test_examples(fraction_config(path, 0.0)) == []
    assert len(build_prompt_source(fraction_config(path, 0.0))) == 3
    with pytest.raises(ValueError, match=r"task\.test_fraction=0\.9 holds out all 3"):
        build_prompt_source(fraction_config(path, 0.9))


def test_a_file_without_a_test_file_holds_out_a_tenth_by_default(tmp_path: Path) -> None:
    """Issue 48.1: a file task names its held-out set without being asked (before, a run on 400
    rows reported "held-out accuracy: n/a" after 450 epochs of them)."""
    path = write_sums(tmp_path / "sums.jsonl", 200)
    unset = fraction_config(path, None)  # type: ignore[arg-type]
    assert unset.held_out_fraction == DEFAULT_TEST_FRACTION == 0.1
    assert len(build_test_examples(unset)) == 20 and len(build_prompt_source(unset)) == 180
    # The same split as asking for it, and none with a test file or test_fraction=0.
    held = {e.prompt_id for e in build_test_examples(fraction_config(path, 0.1))}
    assert {e.prompt_id for e in build_test_examples(unset)} == held
    with_file = fraction_config(path, None, test_path=str(path))  # type: ignore[arg-type]
    assert with_file.held_out_fraction == 0.0 and len(build_prompt_source(with_file)) == 200
    assert build_test_examples(fraction_config(path, 0.0)) == []
    assert TaskConfig().held_out_fraction == 0.0  # the arithmetic task has its own split


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (TaskConfig(test_fraction=0.1), "the arithmetic task holds out task.arithmetic"),
        (TaskConfig(source="jsonl", verifier="math", path="x", test_fraction=1.0), r"\[0, 1\)"),
        (
            TaskConfig(source="jsonl", verifier="math", path="x", test_path="y", test_fraction=0.1),
            "set one of them",
        ),
    ],
)
def test_test_fraction_validation_names_the_keys(config: TaskConfig, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        config.validate()
