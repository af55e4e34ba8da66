"""The soak monitor (adarl/bench/soak.py): which processes it sees, what it calls them, and how
it measures growth."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from adarl.bench.soak import growth, markdown, snapshot
from adarl.reaper import REAPER_TOKEN_ENV


def test_snapshot_sees_this_process_and_the_marked_ones_only() -> None:
    code = "import time; time.sleep(60)"
    marked = subprocess.Popen(
        [sys.executable, "-c", code], env={**os.environ, REAPER_TOKEN_ENV: "soak-test"}
    )
    unmarked = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 10
        while len(seen := snapshot("soak-test")) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert set(seen) == {f"driver:{os.getpid()}", f"python:{marked.pid}"}
        assert all(rss > 0 for rss in seen.values())
        assert seen[f"driver:{os.getpid()}"] > 10 << 20  # bytes: this interpreter is > 10 MiB
    finally:
        for process in (marked, unmarked):
            process.kill()
            process.wait()


def test_growth_compares_the_windows_of_processes_alive_throughout() -> None:
    mib = 1 << 20
    samples = [
        {
            "step": step,
            "rss": {
                "ray::Learner:7": (100 + (step >= 60) * 4) * mib,  # +4 MiB once, then flat
                "ray::VLLMEngine:8": (200 + step) * mib,  # a leak: 1 MiB per step
                **({"ray::IDLE:9": 50 * mib} if step < 80 else {}),  # gone before the end
            },
        }
        for step in range(0, 201)
    ]
    rows = {r["process"]: r for r in growth(samples, from_step=50, window=10)}
    assert set(rows) == {"ray::Learner:7", "ray::VLLMEngine:8"}
    # Steps 45-55 average 100 + 4·0 = 100 MiB; the last 10 steps 104 MiB.
    assert rows["ray::Learner:7"]["growth"] == pytest.approx(0.04)
    # 245-255 (mean 250) to 391-400 (mean 395.5).
    assert rows["ray::VLLMEngine:8"]["growth"] == pytest.approx(395.5 / 250 - 1)
    table = markdown(list(rows.values()), from_step=50, last=200)
    assert "| `ray::VLLMEngine` | 250 | 396 | 400 | +58.2% |" in table
