"""Secrets stay out of everything a run writes: config.yaml, metrics.jsonl, completions.jsonl,
console lines and the W&B run (its config included)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from adarl.config import AdarlConfig
from adarl.launch import save_resolved_config
from adarl.logging import MetricsLogger
from adarl.redact import REDACTED, is_secret_name, redact_config, redact_text

API_KEY = "0123456789abcdef0123456789abcdef01234567"  # shaped like a W&B key (40 characters)


@pytest.mark.parametrize(
    "name",
    [
        "WANDB_API_KEY",
        "api_key",
        "apikey",
        "key",
        "wandb_key",
        "HF_TOKEN",
        "hub.token",
        "AWS_SECRET_ACCESS_KEY",
        "client_secret",
        "db_password",
        "PGPASSWORD",
        "credentials",
    ],
)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "max_new_tokens",
        "stop_token_ids",
        "eos_token",
        "pad_token",
        "num_key_value_heads",
        "progress_keys",
        "monkey",
        "RAY_AUTH_MODE",
        "TOKENIZERS_PARALLELISM",
    ],
)
def test_names_that_are_not_secrets(name: str) -> None:
    assert not is_secret_name(name)


def test_redact_config_replaces_secret_entries_and_secret_values_anywhere() -> None:
    environ = {"WANDB_API_KEY": API_KEY, "SHORT_TOKEN": "1", "HOME": "/home/me"}
    config = {
        "logger": {"api_key": "typed-in-the-config", "project": "adarl", "tags": [f"k={API_KEY}"]},
        "model": {"eos_token": "</s>", "max_new_tokens": 16, "hf_token": None},
        "note": f"started with WANDB_API_KEY={API_KEY}",
        "seed": 1,
    }
    assert redact_config(config, environ=environ) == {
        "logger": {"api_key": REDACTED, "project": "adarl", "tags": [f"k={REDACTED}"]},
        "model": {"eos_token": "</s>", "max_new_tokens": 16, "hf_token": None},
        "note": f"started with WANDB_API_KEY={REDACTED}",
        "seed": 1,
    }
    assert config["logger"]["api_key"] == "typed-in-the-config"  # a copy; the input is untouched
    # A 1-character "secret" would blank out ordinary text: too short to count.
    assert redact_text("step 1 of 10", environ=environ) == "step 1 of 10"


@pytest.mark.slow
def test_nothing_a_run_writes_contains_the_wandb_key(
    tmp_path: Path, isolated_wandb: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_API_KEY", API_KEY)
    run_dir = tmp_path / "run"
    config = AdarlConfig()
    config.logger.run_name = f"leaky-{API_KEY}"  # a user pasted the key into a config value
    save_resolved_config(config, run_dir)
    console = io.StringIO()
    with MetricsLogger(
        run_dir=run_dir,
        mode="offline",
        run_name=f"leaky-{API_KEY}",
        config={"logger": {"api_key": API_KEY, "run_name": f"leaky-{API_KEY}"}, "seed": 3},
        console=console,
        progress_bar=False,
    ) as logger:
        logger.log_config({"wandb": {"token": API_KEY}})
        logger.log(1, {"train/loss": 0.5})
        logger.log_completions(1, [{"prompt": "1+1=", "completion": f"my key is {API_KEY}"}])
        logger.log(2, {"train/loss": 0.25})

    written = [path for path in run_dir.rglob("*") if path.is_file()]
    assert any(path.name == "config.yaml" and path.parent == run_dir for path in written)
    assert any(path.suffix == ".wandb" for path in written)  # the W&B run log is scanned too
    leaks = [str(path) for path in written if API_KEY.encode() in path.read_bytes()]
    assert leaks == []
    assert REDACTED in (run_dir / "config.yaml").read_text()
    assert REDACTED in (run_dir / "completions.jsonl").read_text()
    assert API_KEY not in console.getvalue()
