"""Bring your own task: a reasoning-gym generator runs end to end with the embedded tiny policy
(micro sizes, in make test's time), and a jsonl task with its own field names learns from the
embedded default (heavy tier)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from adarl.evaluation import EvalKind
from adarl.launch import CONFIG_DIR, load_config
from adarl.models.tiny import read_build_info
from adarl.reward.registry import build_verifier
from adarl.tasks.baselines import best_constant_answer

# A micro tiny model and a few small steps: the pipeline, not the learning.
MICRO = [
    "model.tiny.hidden_size=32",
    "model.tiny.intermediate_size=64",
    "model.tiny.num_hidden_layers=1",
    "model.tiny.num_attention_heads=2",
    "model.tiny.num_key_value_heads=1",
    "model.tiny.sft_steps=10",
    "model.tiny.sft_max_steps=10",
    "model.tiny.sft_batch_size=16",
    "allocator.prompts_per_step=8",
    "eval.num_prompts=8",
    "eval.samples_per_prompt=2",
    "eval.final_samples_per_prompt=2",
    "eval.greedy=false",
    "trainer.total_steps=2",
    "checkpoint.every_steps=0",
    "cluster=in_process",
    "rollout=hf",
    "logger.mode=disabled",
    # A 10-step warm start never clears the answers' prior; these tests exercise the pipeline.
    "trainer.stop_below_prior=false",
]


def _session(run_dir: Path, overrides: list[str]):
    from adarl.session import TrainingSession

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        config = load_config(compose(config_name="config", overrides=overrides))
    return config, TrainingSession(config, run_dir=run_dir)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_reasoning_gym_task_runs_end_to_end_with_the_embedded_policy(tmp_path: Path) -> None:
    _, session = _session(
        tmp_path / "run",
        [
            "+experiment=ada_seq_balance",
            "task=reasoning_gym",
            "task.reasoning_gym.name=basic_arithmetic",
            "+task.reasoning_gym.config.max_terms=3",
            "+task.reasoning_gym.config.max_digits=1",
            "task.reasoning_gym.num_train_prompts=100",
            "task.reasoning_gym.num_test_prompts=16",
            f"model.cache_dir={tmp_path / 'cache'}",
            *MICRO,
        ],
    )
    with session:
        summary = session.train()
        tokenizer = session.codec.tokenizer
        train = session.prompts.examples
    assert summary.steps == 2
    assert summary.base_accuracy is not None and summary.final_accuracy is not None
    # The policy's vocabulary is the task's: the characters of its training prompts and answers.
    characters = {c for e in train for c in e.prompt + e.answer}
    assert set(tokenizer.get_vocab()) - {"<pad>", "<bos>", "<eos>", "<unk>"} == characters
    assert all(e.task == "reasoning_gym" for e in train)
    assert {e.difficulty for e in train} == {2.0, 3.0}  # num_terms, from the metadata
    models = [p for p in (tmp_path / "cache" / "models").iterdir() if not p.name.startswith(".")]
    info = [read_build_info(p) for p in models]
    assert len(info) == 1 and info[0]["data_fingerprint"].startswith("task:")


def _mod_problems(path: Path) -> None:
    """A problem family of its own, with its own field names: "a mod b" for small numbers."""
    rng = random.Random(0)
    pairs = sorted({(rng.randint(10, 99), rng.randint(2, 9)) for _ in range(4000)})
    rows = [{"key": f"m{a}-{b}", "problem": f"{a}mod{b}", "result": str(a % b)} for a, b in pairs]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


@pytest.mark.heavy
@pytest.mark.timeout(1500)
def test_a_jsonl_task_with_its_own_fields_learns_from_the_embedded_default(
    tmp_path: Path,
) -> None:
    """The make run default (`grpo_anchored`) on a problem family of the user's, with its own field
    names: held-out pass@1 rises by more than 3 standard errors and ends above the best constant
    answer. The SE is paired: the base and final evaluations draw the same seeds on the same
    prompts, so the rise is the mean of per-prompt differences."""
    data = tmp_path / "mod.jsonl"
    _mod_problems(data)
    _, session = _session(
        tmp_path / "run",
        [
            "+experiment=grpo_anchored",
            "task=jsonl",
            f"task.path={data}",
            "task.verifier=exact_match",
            "task.test_fraction=0.3",
            "task.fields.prompt=problem",
            "task.fields.answer=result",
            "task.fields.id=key",
            f"model.cache_dir={tmp_path / 'cache'}",
            "trainer.total_steps=100",
            "eval.every_steps=0",
            "eval.num_prompts=256",
            "eval.final_samples_per_prompt=16",
            "checkpoint.every_steps=0",
            "logger.mode=disabled",
        ],
    )
    with session:
        summary = session.train()
        train = list(session.prompts.examples)
        test = list(session.evaluator.examples) if session.evaluator is not None else []
        base = session.base_eval
        # The run's final evaluation again: the same seeds and weights give the same draws.
        final = session.evaluate(step=summary.steps, kind=EvalKind.FINAL)
    assert base is not None and final is not None
    assert final.accuracy == pytest.approx(summary.final_accuracy)
    constant = best_constant_answer(train, test, build_verifier("exact_match"))
    rise = final.pass_at_1_rise_over(base)
    assert rise is not None and rise == summary.pass_at_1_rise
    assert rise["rise"] > 3 * rise["se"], (base.accuracy, final.accuracy, rise)
    assert final.accuracy > constant.accuracy, (final.accuracy, constant)


def _unsolvable_problems(path: Path) -> None:
    """Prompts whose answers are unrelated 6-digit numbers: every answer the policy can write is
    rejected by the exact-match verifier, so no group ever holds a right answer."""
    rng = random.Random(1)
    rows = [
        {
            "id": f"u{i}",
            "prompt": f"{rng.randint(10, 99)}?",
            "answer": str(rng.randint(10**5, 10**6 - 1)),
        }
        for i in range(400)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def _unsolvable_run(tmp_path: Path, *overrides: str):
    """The embedded default on `_unsolvable_problems` (micro model, up to 50 steps), trained to
    its end; `overrides` come last, so they win over MICRO's."""
    data = tmp_path / "unsolvable.jsonl"
    _unsolvable_problems(data)
    _, session = _session(
        tmp_path / "run",
        [
            "+experiment=grpo_anchored",
            "task=jsonl",
            f"task.path={data}",
            "task.verifier=exact_match",
            "task.test_fraction=0.2",
            f"model.cache_dir={tmp_path / 'cache'}",
            *MICRO,
            "trainer.total_steps=50",
            *overrides,
        ],
    )
    with session:
        return session.train()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_run_without_learning_signal_stops_early_and_says_why(tmp_path: Path) -> None:
    summary = _unsolvable_run(tmp_path, "trainer.signal_check_steps=3")
    assert summary.steps == 3 and summary.stop_reason == "no_learning_signal"
    message = summary.stop_message or ""
    assert "no learning signal: 0.0% of the 24 groups trained in steps 1-3" in message
    assert "base evaluation: held-out pass@1 0.0%" in message
    for fix in ("model.tiny.sft_steps", "model.tiny.hidden_size", "model=hf"):
        assert fix in message
    assert "trainer.min_mixed_group_fraction=0" in message
    # The end is a normal one: final evaluation, checkpoint off here, the model exported.
    assert summary.final_accuracy == 0.0 and summary.model_dir is not None


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_run_starting_below_the_answers_prior_stops_after_its_base_evaluation(
    tmp_path: Path,
) -> None:
    """The same unsolvable task: the warm start runs out of budget below the best constant
    answer (its record says max_steps), so the run stops before any rollout and says why."""
    summary = _unsolvable_run(tmp_path, "trainer.stop_below_prior=true")
    assert summary.steps == 0 and summary.stop_reason == "below_prior"
    assert summary.rollouts_generated == 0
    message = summary.stop_message or ""
    assert "the policy starts below the answers' prior: its warm start ran out of budget" in message
    assert "warm start: held-aside accuracy 0.0%" in message and "stopped by max_steps" in message
    assert "base evaluation: held-out pass@1 0.0%" in message
    for fix in ("model.tiny.sft_max_minutes", "model.tiny.hidden_size", "model=hf"):
        assert fix in message
    assert "trainer.stop_below_prior=false" in message
    assert summary.model_dir is not None  # the warm-started policy, exported as any run's end
