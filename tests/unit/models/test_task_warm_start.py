"""The tiny model on a task other than the built-in: its vocabulary, its warm start (training
split only, stopped above the answers' prior or by its budget, recorded, cached by the task's
content) and the refusal of tasks that do not fit."""

from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path

import pytest
import torch

from adarl.config import AdarlConfig
from adarl.config.model import TINY_ARITHMETIC, TinyModelConfig
from adarl.config.tasks import ReasoningGymConfig, TaskConfig
from adarl.models import loading, tiny
from adarl.models.task_warm_start import (
    STOPPED_ABOVE_PRIOR,
    STOPPED_BY_MINUTES,
    STOPPED_BY_STEPS,
    TaskWarmStartData,
    TaskWarmStartStats,
    read_task_warm_start,
    task_warm_start_data,
    warm_start_until_above_prior,
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
    sft_max_steps=3,
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
    assert info is not None and info["warm_start"]["stopped_by"] in ("above_prior", "max_steps")
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
    # the task warm start's own settings are not part of it.
    builtin = loading.resolve_model_path(TINY_ARITHMETIC, cache_dir=tmp_path / "b", tiny=MICRO)
    assert builtin == loading.resolve_model_path(
        TINY_ARITHMETIC, cache_dir=tmp_path / "b", tiny=MICRO, task=TaskConfig()
    )
    other = dataclasses.replace(
        MICRO, sft_max_steps=2, sft_max_minutes=1.0, sft_stop_lead=0.5, sft_stop_lead_se=1
    )
    assert builtin == loading.resolve_model_path(
        TINY_ARITHMETIC, cache_dir=tmp_path / "b", tiny=other, task=TaskConfig()
    )
    # On a task they are: the stop rule and the budget shape its weights.
    assert loading.resolve_model_config(dataclasses.replace(model, tiny=other), task=task) != first
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


def _digit_task(answers: str) -> TaskWarmStartData:
    """Prompts `<d><x>?` of a digit d and a letter x. `answers="copy"`: the answer is d (a task to
    learn, whose answers are spread evenly, 10% each); `"prior"`: a random digit, '1' on 46% of
    prompts (nothing to learn but the answers' prior: letter_counting's '1' is 37%)."""
    rng = random.Random(0)

    def answer(digit: int) -> str:
        if answers == "copy":
            return str(digit)
        return "1" if rng.random() < 0.4 else str(rng.randrange(10))

    letters = "abcdefghijklm"
    examples = [
        TaskExample(f"q{i}", f"{i % 10}{letters[i % 13]}?", answer(i % 10), task="exact_match")
        for i in range(256)
    ]
    return task_warm_start_data(examples, probe_prompts=64)


def _warm_start(
    data: TaskWarmStartData, *, max_steps: int, max_minutes: float = 10.0
) -> TaskWarmStartStats:
    tokenizer = build_task_char_tokenizer(data.characters)
    return warm_start_until_above_prior(
        tiny.build_tiny_qwen2(MICRO, tokenizer),
        tokenizer,
        data,
        min_lead=0.05,
        min_lead_in_se=3.0,
        max_steps=max_steps,
        max_minutes=max_minutes,
        check_every_steps=10,
        batch_size=16,
        learning_rate=1e-2,
        weight_decay=0.0,
        seed=0,
    )


def test_a_policy_that_learns_only_the_prior_does_not_stop_the_warm_start() -> None:
    """The answers do not depend on the prompt. The policy learns their prior and passes a
    quarter of the held-aside prompts (the old rule, 15%, stopped it at step 20), now and then
    above the guesser (sampling '1' more often than the prior does), but never above the constant
    answer '1', which passes more than half of them: it runs to its step budget."""
    stats = _warm_start(_digit_task("prior"), max_steps=100)
    assert stats.best_constant_answer == "1" and stats.best_constant_accuracy > 0.5
    assert 0.2 < stats.guesser_accuracy < 0.3
    assert max(check.accuracy for check in stats.checks) > 0.15  # it learned the prior
    assert stats.stopped_by == STOPPED_BY_STEPS and stats.steps == 100 and not stats.above_prior
    assert [check.step for check in stats.checks] == list(range(10, 101, 10))
    assert all(check.lead_over_constant < -0.1 for check in stats.checks)


def test_a_policy_that_learns_the_task_stops_the_warm_start() -> None:
    """The answer is the prompt's first character: the constant answer and the guesser pass 10%,
    a policy that copies it passes nearly all: it stops at the first check clearly above both."""
    stats = _warm_start(_digit_task("copy"), max_steps=400)
    assert stats.stopped_by == STOPPED_ABOVE_PRIOR and stats.above_prior and stats.steps < 400
    assert stats.best_constant_accuracy < 0.2 and stats.guesser_accuracy < 0.2
    last = stats.checks[-1]
    assert last.step == stats.steps and last.accuracy == stats.held_aside_accuracy
    for lead, se in (
        (last.lead_over_constant, last.lead_over_constant_se),
        (last.lead_over_guesser, last.lead_over_guesser_se),
    ):
        assert lead >= 0.05 and lead >= 3 * se
    # Every check before it was not clear on one of the two.
    for check in stats.checks[:-1]:
        assert (
            min(check.lead_over_constant, check.lead_over_guesser) < 0.05
            or min(
                check.lead_over_constant / check.lead_over_constant_se,
                check.lead_over_guesser / check.lead_over_guesser_se,
            )
            < 3
        )


def test_the_warm_start_stops_when_its_minutes_run_out() -> None:
    """A step budget it cannot reach in 2 seconds of wall clock: it stops on the clock, after a
    last check, and says so."""
    stats = _warm_start(_digit_task("prior"), max_steps=100_000, max_minutes=2 / 60)
    assert stats.stopped_by == STOPPED_BY_MINUTES and 1 <= stats.steps < 100_000
    assert stats.seconds >= 2.0 and stats.checks[-1].step == stats.steps
    assert stats.minutes_budget == 2 / 60 and stats.step_budget == 100_000


def test_a_split_too_small_to_probe_runs_to_its_budget() -> None:
    """Three training prompts: one is held aside, and one prompt has no standard error, so the
    rule cannot call the policy clearly above anything and the budget ends the warm start."""
    examples = [TaskExample(f"q{i}", f"{i}?", str(i), task="exact_match") for i in range(3)]
    stats = _warm_start(task_warm_start_data(examples), max_steps=10)
    assert (stats.probe_prompts, stats.examples) == (1, 2)
    assert stats.stopped_by == STOPPED_BY_STEPS and math.isnan(stats.lead_over_constant)


def test_the_warm_start_is_recorded_with_the_built_model(tmp_path: Path) -> None:
    """What a run reads before it spends its budget: the record in adarl_build.json, whole."""
    task = _jsonl_task(tmp_path, _mod_rows(80))
    model = dataclasses.replace(AdarlConfig().model, cache_dir=str(tmp_path / "cache"), tiny=MICRO)
    path = loading.resolve_model_config(model, task=task)
    record = read_task_warm_start(path)
    assert record is not None
    info = tiny.read_build_info(path)
    assert info is not None and TaskWarmStartStats.from_record(info["warm_start"]) == record
    assert record.steps == record.step_budget == MICRO.sft_max_steps  # 3: the budget binds
    assert record.stopped_by == STOPPED_BY_STEPS and record.minutes_budget == MICRO.sft_max_minutes
    assert record.probe_prompts == 30 and len(record.checks) == 1  # a check at the last step
    data, _ = loading.task_warm_start(MICRO, task)
    assert record.best_constant_answer == max(
        sorted(set(data.pair_answers)), key=list(data.pair_answers).count
    )
    assert 0 <= record.best_constant_accuracy <= 1 and 0 <= record.guesser_accuracy <= 1
    check = record.checks[-1]
    assert (check.accuracy, check.lead_over_constant) == (
        record.held_aside_accuracy,
        record.lead_over_constant,
    )
    assert record.lead_over_constant == pytest.approx(
        record.held_aside_accuracy - record.best_constant_accuracy
    )
    assert record.seconds > 0 and record.cpu_seconds > 0
    # The built-in task's model has no task warm start record.
    builtin = loading.resolve_model_path(TINY_ARITHMETIC, cache_dir=tmp_path / "b", tiny=MICRO)
    assert read_task_warm_start(builtin) is None


def test_the_builtin_vocabulary_is_untouched() -> None:
    config = AdarlConfig()  # the built-in task: the fixed character tokenizer, as always
    assert loading.policy_tokenizer(config).get_vocab() == build_char_tokenizer().get_vocab()
