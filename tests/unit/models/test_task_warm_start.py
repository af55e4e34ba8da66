"""The tiny model on a task other than the built-in: its vocabulary, its warm start (training
split only, light, cached by the task's content) and the refusal of tasks that do not fit."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from adarl.config import AdarlConfig
from adarl.config.model import TINY_ARITHMETIC, TinyModelConfig
from adarl.config.tasks import ReasoningGymConfig, TaskConfig
from adarl.models import loading, tiny
from adarl.models.task_warm_start import (
    task_warm_start_data,
    warm_start_to_pass_rate,
)
from adarl.models.tokenizer import build_char_tokenizer, build_task_char_tokenizer
from adarl.types import TaskExample

MICRO = TinyModelConfig(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=64,
    sft_steps=3,
    sft_batch_size=8,
)


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _jsonl_task(tmp_path: Path, rows: list[dict], **overrides: object) -> TaskConfig:
    path = tmp_path / "problems.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    task = TaskConfig(source="jsonl", path=str(path), verifier="exact_match", test_fraction=0.25)
    task.fields.prompt, task.fields.answer, task.fields.id = "question", "solution", "uid"
    for key, value in overrides.items():
        setattr(task, key, value)
    return task


def _mod_rows(count: int = 40) -> list[dict]:
    return [{"uid": f"p{i}", "question": f"{i}%7?", "solution": str(i % 7)} for i in range(count)]


def test_the_vocabulary_is_the_tasks_characters_and_unknown_ones_are_unk() -> None:
    tokenizer = build_task_char_tokenizer("ba\n%?b")
    assert len(tokenizer) == 4 + 5  # the four specials, then \n % ? a b
    ids = tokenizer("a\n\nb")["input_ids"]
    assert ids[0] == tokenizer.bos_token_id and len(ids) == 5  # one token per character
    assert tokenizer.decode(ids, skip_special_tokens=True) == "a\n\nb"
    unknown = tokenizer.encode("aé", add_special_tokens=False)
    assert unknown[1] == tokenizer.unk_token_id  # a held-out-only character: <unk>, no crash


def test_the_warm_start_reads_the_training_split_only(tmp_path: Path) -> None:
    task = _jsonl_task(tmp_path, _mod_rows())
    train, test = loading.task_splits(task)
    data, tokenizer = loading.task_warm_start(MICRO, task)
    held_out = {e.prompt_id for e in test}
    assert held_out and not held_out & {*data.pair_ids, *data.probe_ids}
    assert {*data.pair_ids, *data.probe_ids} == {e.prompt_id for e in train}
    assert len(data.probe) == len(train) // 2  # at most half the split is held aside
    assert set(tokenizer.get_vocab()) >= set("0123456789%?")

    gym = TaskConfig(source="reasoning_gym")
    gym.reasoning_gym = ReasoningGymConfig(name="gcd", num_train_prompts=200, num_test_prompts=50)
    train, test = loading.task_splits(gym)
    data, _ = loading.task_warm_start(MICRO, gym)
    assert not {e.prompt_id for e in test} & {*data.pair_ids, *data.probe_ids}
    assert not {e.prompt for e in test} & {p for p, _ in (*data.pairs, *data.probe)}


def test_the_cache_key_follows_the_tasks_data(tmp_path: Path, monkeypatch) -> None:
    task = _jsonl_task(tmp_path, _mod_rows())
    model = dataclasses.replace(AdarlConfig().model, cache_dir=str(tmp_path / "cache"), tiny=MICRO)
    first = loading.resolve_model_config(model, task=task)
    info = tiny.read_build_info(first)
    assert info is not None and info["warm_start"]["stopped_by"] in ("pass_rate", "max_steps")
    assert info["data_fingerprint"].startswith("task:")

    def no_rebuild(*args, **kwargs):
        raise AssertionError("the same data rebuilt the model")

    with monkeypatch.context() as patch:
        patch.setattr(tiny, "warm_start", no_rebuild)
        assert loading.resolve_model_config(model, task=task) == first
    train, test = loading.task_splits(task)
    rows = _mod_rows()
    # A held-out answer is not the warm start's data; one training answer is.
    held = next(row for row in rows if row["uid"] == test[0].prompt_id)
    held["solution"] = "9"
    assert loading.resolve_model_config(model, task=_jsonl_task(tmp_path, rows)) == first
    trained = next(row for row in rows if row["uid"] == train[0].prompt_id)
    trained["solution"] = "9"
    assert loading.resolve_model_config(model, task=_jsonl_task(tmp_path, rows)) != first
    # The built-in task keeps its recipe and key: no task, or the default arithmetic task, and
    # the task warm start's own setting is not part of it.
    builtin = loading.resolve_model_path(TINY_ARITHMETIC, cache_dir=tmp_path / "b", tiny=MICRO)
    assert builtin == loading.resolve_model_path(
        TINY_ARITHMETIC, cache_dir=tmp_path / "b", tiny=MICRO, task=TaskConfig()
    )
    other = dataclasses.replace(MICRO, sft_stop_pass_rate=0.5)
    assert builtin == loading.resolve_model_path(
        TINY_ARITHMETIC, cache_dir=tmp_path / "b", tiny=other, task=TaskConfig()
    )
    assert tiny.read_build_info(builtin)["data_fingerprint"].startswith("arithmetic:")


def test_a_task_that_does_not_fit_is_refused_with_sizes_and_keys(tmp_path: Path) -> None:
    rows = _mod_rows()
    rows[5]["solution"] = "x" * 20
    config = AdarlConfig()
    config.task = _jsonl_task(tmp_path, rows)
    with pytest.raises(
        ValueError, match=r"longest answer is 21 tokens.*eval.max_new_tokens=8"
    ) as e:
        loading.policy_tokenizer(config)
    assert "To fix: set rollout.max_new_tokens=21 eval.max_new_tokens=21" in str(e.value)
    rows[5]["solution"] = "5"
    rows[6]["question"] = "?" * 300
    config.task = _jsonl_task(tmp_path, rows)
    with pytest.raises(ValueError, match=r"longest prompt is 301 tokens.*needs 317 positions") as e:
        loading.policy_tokenizer(config)
    assert "rollout.max_model_len=317 model.tiny.max_position_embeddings=317" in str(e.value)
    rows[6]["question"] = "6%7?"
    config.task = _jsonl_task(tmp_path, rows)
    assert loading.policy_tokenizer(config).unk_token == "<unk>"  # fits: the task's tokenizer


def test_the_warm_start_stops_at_the_pass_rate() -> None:
    examples = [
        TaskExample(prompt_id=f"q{i}", prompt=f"{i}?", answer="7", task="exact_match")
        for i in range(64)
    ]
    data = task_warm_start_data(examples, probe_prompts=16)
    tokenizer = build_task_char_tokenizer(data.characters)
    model = tiny.build_tiny_qwen2(MICRO, tokenizer)
    stats = warm_start_to_pass_rate(
        model,
        tokenizer,
        data,
        stop_pass_rate=0.5,
        max_steps=300,
        check_every_steps=10,
        batch_size=16,
        learning_rate=1e-2,
        weight_decay=0.0,
        seed=0,
    )
    # One constant answer is learnt in a few dozen steps: it stops there, not at max_steps.
    assert stats.stopped_by == "pass_rate" and stats.steps < 300
    assert stats.probe_pass_rate >= 0.5 > max(rate for _, rate in stats.checks[:-1] or [(0, 0)])
    assert [step for step, _ in stats.checks] == list(range(10, stats.steps + 1, 10))


def test_the_builtin_vocabulary_is_untouched() -> None:
    config = AdarlConfig()  # the built-in task: the fixed character tokenizer, as always
    assert loading.policy_tokenizer(config).get_vocab() == build_char_tokenizer().get_vocab()
