"""Errors at the door (issue 48.5): a model, tokenizer or data path that does not exist, a bad
row, a verifier that cannot score what the built-in policy writes: `python -m adarl.launch`
says so in one line naming the key and the fix, exits with status 2, prints no traceback, and
leaves the traceback in RUN_DIR/logs/error.log. Each case stops before any actor or model
starts (a subprocess: the launcher's exit status is the point)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from adarl.launch import ERROR_LOG


def _launch(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}
    env.setdefault("RAY_AUTH_MODE", "disabled")
    return subprocess.run(
        [sys.executable, "-m", "adarl.launch", *overrides, f"hydra.run.dir={run_dir}"],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )


def _rows(path: Path, count: int = 40) -> Path:
    path.write_text(
        "".join(
            json.dumps({"prompt": f"What is {i} plus 2?", "answer": str(i + 2)}) + "\n"
            for i in range(count)
        )
    )
    return path


REAL_MODEL = ("+experiment=qwen2_5_math_1_5b_grpo",)  # as docs/cluster.md runs it


def _cases(tmp: Path) -> dict[str, tuple[list[str], list[str]]]:
    """Case -> (overrides, what its one line must say)."""
    data = _rows(tmp / "train.jsonl")
    math_data = tmp / "math.jsonl"
    math_data.write_text(json.dumps({"prompt": "1+1", "answer": "2"}) + "\n")
    no_tokenizer = tmp / "model_without_tokenizer"
    no_tokenizer.mkdir()
    (no_tokenizer / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    bad = tmp / "bad.jsonl"
    bad.write_text(data.read_text() + "not json\n")
    return {
        "missing model": (
            [*REAL_MODEL, f"model.name_or_path={tmp}/no_such_model", f"task.path={math_data}"],
            [f"model.name_or_path={tmp}/no_such_model: no such directory", "set model.name_or"],
        ),
        "missing tokenizer": (
            [*REAL_MODEL, f"model.name_or_path={no_tokenizer}", f"task.path={math_data}"],
            [f"model.name_or_path={no_tokenizer}: {no_tokenizer} has no tokenizer", "tokenizer"],
        ),
        "missing data": (
            ["task=jsonl", f"task.path={tmp}/no_such.jsonl"],
            [f"task.path={tmp}/no_such.jsonl: no such file or directory", "set task.path to"],
        ),
        "missing test data": (
            ["task=jsonl", f"task.path={data}", f"task.test_path={tmp}/no_test.jsonl"],
            [f"task.test_path={tmp}/no_test.jsonl: no such file", "set task.test_path to"],
        ),
        "bad row": (
            ["task=jsonl", f"task.path={bad}"],
            [f"{bad}, line 41: invalid_json", "task.on_bad_row=skip"],
        ),
        "verifier the policy cannot satisfy": (
            ["task=jsonl", f"task.path={data}", "task.verifier=math"],
            # 4 of the 40 rows are held out for evaluation (task.test_fraction's default)
            ["task.verifier=math gives 36 of the first 36", "set task.verifier=exact_match"],
        ),
    }


@pytest.mark.slow
@pytest.mark.parametrize(
    "case",
    [
        "missing model",
        "missing tokenizer",
        "missing data",
        "missing test data",
        "bad row",
        "verifier the policy cannot satisfy",
    ],
)
def test_an_input_the_run_cannot_start_with_is_one_line_and_exit_status_2(
    case: str, tmp_path: Path
) -> None:
    overrides, expected = _cases(tmp_path)[case]
    run_dir = tmp_path / "run"
    proc = _launch(run_dir, *overrides)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("adarl: ")]
    for part in expected:
        assert part in line, line
    assert line.endswith(f"(traceback: {run_dir / ERROR_LOG})")
    assert "Traceback (most recent call last)" in (run_dir / ERROR_LOG).read_text()
    assert not (run_dir / "metrics.jsonl").exists()  # nothing trained
