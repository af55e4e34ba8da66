"""The one evaluator builder (adarl/evaluation/build.py) and `python -m adarl.evaluate`'s table:
the settings travel from the config, the levels are named as the task names them."""

from __future__ import annotations

import json
from pathlib import Path

from adarl.config import AdarlConfig
from adarl.config.tasks import TaskConfig
from adarl.evaluation import build_evaluator, format_table, level_names
from adarl.models.tokenizer import build_char_tokenizer
from adarl.reward.exact import ExactMatchVerifier
from adarl.rollout.codec import PromptCodec
from adarl.tasks.arithmetic import DEFAULT_LEVELS
from adarl.tasks.build import build_prompt_source
from adarl.types import SamplingParams


def test_the_arithmetic_levels_are_named_by_their_difficulty_labels() -> None:
    names = level_names(TaskConfig())
    # Level i's prompts carry difficulty float(i), labelled "i" (`difficulty_label`).
    assert names == {str(i): level.name for i, level in enumerate(DEFAULT_LEVELS)}
    assert names["4"] == "2d+-2d"
    assert level_names(TaskConfig(source="jsonl", path="train.jsonl")) == {}  # own numbers


def _table() -> dict:
    """An `EvalResult.table()` of two levels, "4" and "9", at k = 1, 2 (no guesser for "9")."""
    entry = {"pass_at_k": {"1": 0.25, "2": 0.5}, "guess_pass_at_k": {"1": 0.0, "2": 0.0}}
    return {
        "num_prompts": 3,
        "pass_at_k": {"1": 0.5, "2": 0.75},
        "guess_pass_at_k": {"1": 0.0, "2": 0.0},
        "coverage": 0.75,
        "greedy_accuracy": 0.5,
        "by_level": {
            "4": {"num_prompts": 2, **entry},
            "9": {"num_prompts": 1, "pass_at_k": {"1": 1.0, "2": 1.0}, "guess_pass_at_k": {}},
        },
    }


def test_the_table_prints_level_names_and_keeps_unnamed_labels() -> None:
    lines = format_table(_table(), {"4": "1d+-1d+-1d"}).splitlines()
    # The level column widens to the longest name (10 characters + 2).
    assert lines[0] == "  level        prompts    pass@1    pass@2"
    assert lines[1] == "  all                3     50.0%     75.0%"
    assert lines[3] == "  1d+-1d+-1d         2     25.0%     50.0%"
    assert lines[5] == "  9                  1    100.0%    100.0%"  # no name: its label
    # Without names (or none longer than the column) the table is as it always was.
    plain = format_table(_table()).splitlines()
    assert plain[0] == "  level    prompts    pass@1    pass@2"
    assert plain[3] == "  4              2     25.0%     50.0%"
    # One level only (a file without a difficulty column): its row would repeat "all".
    single = {**_table(), "by_level": {"none": {"num_prompts": 3, **_table()}}}
    lines = format_table(single).splitlines()
    assert [line.split()[0] for line in lines[1:3]] == ["all", "guess"]
    assert lines[3].startswith("  coverage")


def test_the_builder_carries_the_eval_settings_and_the_runs_data(tmp_path: Path) -> None:
    config = AdarlConfig()
    config.eval.num_prompts, config.eval.samples_per_prompt = 5, 3
    config.eval.final_samples_per_prompt, config.eval.max_new_tokens = 7, 6
    codec = PromptCodec(tokenizer=build_char_tokenizer(), sampling=SamplingParams())
    verifier = ExactMatchVerifier()
    train = build_prompt_source(config.task).examples
    evaluator = build_evaluator(
        config, codec=codec, verifier=verifier, check_prompt=None, train_examples=train
    )
    assert evaluator is not None
    assert len(evaluator.examples) == 5 and evaluator.codec is codec
    assert (evaluator.samples_per_prompt, evaluator.final_samples_per_prompt) == (3, 7)
    assert (evaluator.max_new_tokens, evaluator.temperature) == (6, config.eval.temperature)
    assert evaluator.seed == config.eval.seed and evaluator.train_examples is train
    assert evaluator.verifier is verifier  # the best constant answer is scored

    # A file task with no held-out set: no evaluator (reported as n/a, never as 0).
    rows = tmp_path / "train.jsonl"
    rows.write_text(
        "".join(json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(4))
    )
    config.task = TaskConfig(
        source="jsonl", path=str(rows), verifier="exact_match", test_fraction=0.0
    )
    assert (
        build_evaluator(
            config, codec=codec, verifier=verifier, check_prompt=None, train_examples=train
        )
        is None
    )
