"""`reward.code.isolation` where Linux namespaces do not work: `auto` says so once, with the
reason, and still runs programs; `strict` refuses at start, naming the key.

The machine without namespaces is this one with `unshare` (util-linux) off PATH, as in a slim
container image; the probe then finds no prefix to try."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from adarl.config.reward import CodeConfig, RewardConfig
from adarl.reward import sandbox
from adarl.reward.code_verifier import CodeVerifier
from adarl.reward.registry import build_reward_pool
from adarl.types import TaskExample

PRINTS_OK = TaskExample(
    prompt_id="p",
    prompt="print ok",
    answer=json.dumps({"stdio": [{"input": "", "output": "ok\n"}]}),
    task="code",
)


def _forget_probe() -> None:
    sandbox.probe_namespaces.cache_clear()
    sandbox._warn_python_fallback.cache_clear()


@pytest.fixture
def no_namespaces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    monkeypatch.setenv("PATH", str(empty_bin))
    _forget_probe()
    yield
    _forget_probe()  # the next test probes this machine's real PATH again


def test_auto_falls_back_once_and_says_why(
    no_namespaces: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="adarl.reward.sandbox"):
        first = CodeVerifier(isolation="auto", memory_limit_mb=256, work_root=str(tmp_path))
        second = CodeVerifier(isolation="auto", memory_limit_mb=256, work_root=str(tmp_path))
    assert first.sandbox.isolation == second.sandbox.isolation == "python"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # once per process, not once per verifier
    assert "reward.code.isolation=auto falls back to Python-level isolation" in warnings[0]
    assert "`unshare` (util-linux) is not on PATH" in warnings[0]
    # The fallback still judges programs.
    assert first.verify("```python\nprint('ok')\n```", PRINTS_OK).reward == 1.0


def test_strict_refuses_to_start_without_namespaces(no_namespaces: None) -> None:
    config = RewardConfig(code=CodeConfig(isolation="strict"))
    config.validate()  # a valid setting: the refusal is about this machine
    with pytest.raises(RuntimeError, match=r"reward\.code\.isolation=strict needs") as refused:
        build_reward_pool(config, ["code"])
    assert "`unshare` (util-linux) is not on PATH" in str(refused.value)
    assert "reward.code.isolation=auto" in str(refused.value)  # the way out


def test_python_mode_neither_probes_nor_warns(
    no_namespaces: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="adarl.reward.sandbox"):
        verifier = CodeVerifier(isolation="python", memory_limit_mb=256, work_root=str(tmp_path))
    assert verifier.sandbox.isolation == "python"
    assert caplog.records == []
    assert sandbox.probe_namespaces.cache_info().currsize == 0


def test_strict_and_auto_use_namespaces_where_they_work(tmp_path: Path) -> None:
    if sandbox.namespace_prefix() is None:
        pytest.skip(f"Linux namespaces do not work here: {sandbox.probe_namespaces().failure}")
    for isolation in ("strict", "auto"):
        verifier = CodeVerifier(isolation=isolation, memory_limit_mb=256, work_root=str(tmp_path))
        assert verifier.sandbox.isolation == "namespace"
    assert sandbox.probe_namespaces().failure is None
