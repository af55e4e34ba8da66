"""launch/start_head.sh keeps the dashboard / job API on 127.0.0.1 unless told otherwise.

Starting a real Ray head here would be seen by every other Ray user of this machine (`ray.init()`
joins a cluster that `ray start` recorded), so the script runs with `RAY_BIN` pointing at a
recorder that prints the `ray start` command line it was given: what is under test is the
command the script builds."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def recorder(tmp_path: Path) -> Path:
    ray = tmp_path / "bin" / "ray"
    ray.parent.mkdir()
    ray.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@"\n')
    ray.chmod(0o755)
    return ray


def ray_start_args(recorder: Path, *args: str) -> list[str]:
    result = subprocess.run(
        ["bash", str(ROOT / "launch" / "start_head.sh"), *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "RAY_BIN": str(recorder)},
        check=True,
    )
    lines = result.stdout.splitlines()
    return lines[lines.index("start") :]  # the recorder's output follows the script's notes


def test_the_dashboard_listens_on_localhost_by_default(recorder: Path) -> None:
    args = ray_start_args(recorder, "--num-cpus", "2")
    assert "--dashboard-host=127.0.0.1" in args
    assert not any("0.0.0.0" in arg for arg in args)
    assert args[-2:] == ["--num-cpus", "2"]  # other options pass through


def test_the_dashboard_host_is_configurable(recorder: Path) -> None:
    args = ray_start_args(recorder, "--dashboard-host", "10.0.0.5")
    assert "--dashboard-host=10.0.0.5" in args
    assert "--dashboard-host=127.0.0.1" not in args
