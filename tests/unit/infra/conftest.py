"""Fixtures of the infra tests: W&B confined to tmp_path and cut off from any network."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest


@pytest.fixture
def isolated_wandb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No API key, no netrc, W&B's own dirs under tmp_path, server URL on a closed local port:
    whatever W&B tries, it cannot reach the network or write to the home directory."""
    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_ENTITY", "WANDB_PROJECT", "WANDB_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "wandb_home"
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        (home / name.lower()).mkdir(parents=True)
        monkeypatch.setenv(name, str(home / name.lower()))
    monkeypatch.setenv("NETRC", str(home / "no-netrc"))
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setenv("WANDB_SILENT", "true")
    return home


@pytest.fixture
def closed_port() -> int:
    """A local TCP port nothing listens on (connections are refused at once)."""
    return _closed_port()


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
