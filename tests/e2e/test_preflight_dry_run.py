"""`python -m adarl.preflight --dry-run` with the GPU preset: every check that can run on the CPU
runs for real (adarl/preflight/checks.py) on a small model built with adarl's own code, through
the preset's real-model guards: the compiled CPU vLLM engine, a learner pushing to an engine over
gloo, and one session step; tests/gpu is skipped for want of CUDA. 4½ to 7 minutes on the 2-core
machine: heavy (`pytest -m heavy`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(1500)]


def test_dry_run_of_the_gpu_preset(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "adarl.preflight",
            "--dry-run",
            "+experiment=qwen2_5_math_1_5b_seq_balance",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=1400,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((out / "preflight.json").read_text())
    verdicts = {v["check"]: v for v in report["checks"]}
    statuses = {name: v["status"] for name, v in verdicts.items()}
    assert statuses == {
        "environment": "PASS",
        "engine": "PASS",
        "tests_gpu": "SKIPPED",
        "weight_push": "PASS",
        "session": "PASS",
    }, report
    engine = verdicts["engine"]["values"]
    assert engine["engine"] == "VLLMEngine" and engine["settings"]["enforce_eager"] is False
    assert engine["samples"] == 32 and engine["tokens"] > 0
    push = verdicts["weight_push"]["values"]
    assert push["plan"] == "Ray actors on the CPU, gloo broadcast"
    assert push["learner_moved"]["mean"] > 1e-3  # the step moved the policy...
    assert push["engine_moved"]["mean"] > 1e-3  # ...the engine saw it...
    assert push["decoded_after_vs_learner"]["max"] < 1e-4  # ...and samples from it
    assert push["engine_versions"] == [1]
    session = verdicts["session"]["values"]
    assert session["metrics"]["train/weight_version"] == 1 and session["engine_versions"] == [1]
    assert session["metrics"]["train/mismatch_kl"] < 1e-4  # fp32 engine and learner
    checkpoints = Path(session["run_dir"]) / "checkpoints"  # the manager makes the directory
    assert not checkpoints.exists() or not any(checkpoints.iterdir())  # ...and nothing in it
