"""The built-in tiny policy fits the task by itself (issue 48.8): its lengths and positions come
from the task's prompts and answers unless the command line sets them, and a verifier that
gives its own answers no reward is refused naming task.verifier (issue 48.1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from adarl.config import AdarlConfig
from adarl.errors import InputError
from adarl.launch import CONFIG_DIR, load_config
from adarl.models.fit import fit_builtin_policy


def _config(*overrides: str) -> AdarlConfig:
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return load_config(compose(config_name="config", overrides=list(overrides)))


def _task(tmp_path: Path, answer_chars: int, prompt_chars: int = 20) -> Path:
    """40 rows whose answers are `answer_chars` characters and prompts about `prompt_chars`."""
    path = tmp_path / "long.jsonl"
    with path.open("w") as file:
        for i in range(40):
            prompt = f"Spell {i:02d} " + "x" * (prompt_chars - 9)
            answer = (f"{i:02d}" + "ab" * answer_chars)[:answer_chars]
            file.write(json.dumps({"prompt": prompt, "answer": answer}) + "\n")
    return path


def test_a_task_longer_than_the_defaults_raises_every_length_to_fit(tmp_path: Path) -> None:
    # 30-character answers (31 tokens with <eos>) where training generates 16, evaluation 8;
    # 300-character prompts (301 tokens with <bos>) where the context holds 256.
    config = _config("task=jsonl", f"task.path={_task(tmp_path, 30, 300)}")
    changes = fit_builtin_policy(config)
    assert (config.rollout.max_new_tokens, config.eval.max_new_tokens) == (31, 31)
    assert config.rollout.max_model_len == 301 + 31
    assert config.model.tiny.max_position_embeddings == 301 + 31
    assert changes == [
        "rollout.max_new_tokens 16 -> 31",
        "eval.max_new_tokens 8 -> 31",
        "rollout.max_model_len 256 -> 332",
        "model.tiny.max_position_embeddings 256 -> 332",
    ]


def test_lengths_that_fit_are_kept(tmp_path: Path) -> None:
    config = _config("task=jsonl", f"task.path={_task(tmp_path, 4)}", "eval.max_new_tokens=12")
    assert fit_builtin_policy(config) == []
    assert (config.rollout.max_new_tokens, config.eval.max_new_tokens) == (16, 12)


def test_an_explicit_key_wins_and_is_refused_when_too_small(tmp_path: Path) -> None:
    path = _task(tmp_path, 30)
    config = _config("task=jsonl", f"task.path={path}", "rollout.max_new_tokens=20")
    with pytest.raises(InputError) as refused:
        fit_builtin_policy(config, explicit={"rollout.max_new_tokens"})
    message = str(refused.value)
    assert "its longest answer is 31 tokens with <eos>" in message
    assert "rollout.max_new_tokens=20" in message and "set rollout.max_new_tokens=31" in message
    assert config.rollout.max_new_tokens == 20  # never changed
    # A larger explicit value is kept as given.
    config = _config("task=jsonl", f"task.path={path}", "rollout.max_new_tokens=40")
    fit_builtin_policy(config, explicit={"rollout.max_new_tokens"})
    assert config.rollout.max_new_tokens == 40 and config.eval.max_new_tokens == 31


def test_the_built_in_task_and_a_real_model_are_left_as_they_are(tmp_path: Path) -> None:
    config = _config()
    assert fit_builtin_policy(config) == []
    assert config.rollout.max_new_tokens == 16
    real = _config("+experiment=qwen2_5_math_1_5b_grpo", f"task.path={_task(tmp_path, 30)}")
    assert fit_builtin_policy(real) == []  # its lengths are the user's (adarl/config/real_model.py)


def test_the_verifier_follows_the_policy(tmp_path: Path) -> None:
    path = _task(tmp_path, 4)
    assert _config("task=jsonl", f"task.path={path}").task.verifier == "exact_match"
    real = _config("+experiment=qwen2_5_math_1_5b_grpo", "task=jsonl", f"task.path={path}")
    assert real.task.verifier == "math"
    chosen = _config("task=jsonl", f"task.path={path}", "task.verifier=code")
    assert chosen.task.verifier == "code"


def test_a_verifier_that_gives_the_policys_answers_nothing_is_refused(tmp_path: Path) -> None:
    config = _config("task=jsonl", f"task.path={_task(tmp_path, 4)}", "task.verifier=math")
    with pytest.raises(InputError) as refused:
        fit_builtin_policy(config)
    message = str(refused.value)
    assert message.startswith("task.verifier=math gives 36 of the first 36 training examples")
    assert "set task.verifier=exact_match" in message
    # Answers the math verifier reads as the policy writes them (\boxed{...}) are accepted.
    boxed = tmp_path / "boxed.jsonl"
    boxed.write_text(
        "".join(
            json.dumps({"prompt": f"{i}+1", "answer": f"\\boxed{{{i + 1}}}"}) + "\n"
            for i in range(40)
        )
    )
    config = _config("task=jsonl", f"task.path={boxed}", "task.verifier=math")
    fit_builtin_policy(config)
