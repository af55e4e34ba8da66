"""`TaskConfig` → prompt source and held-out examples, and the config's validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adarl.config.tasks import ArithmeticConfig, ArithmeticLevelConfig, FieldsConfig, TaskConfig
from adarl.tasks import BadRowError, build_prompt_source, build_test_examples
from adarl.tasks.arithmetic import arithmetic_test_split, generate_examples


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
