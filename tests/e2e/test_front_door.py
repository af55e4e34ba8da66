"""The first hour of a new user (issue 48), as one short run and its report: a bare
`python -m adarl.launch` on their own jsonl, on CPU with the built-in tiny policy, runs the
default experiment, scores with the verifier the policy fits, holds out a share of the file,
counts its progress to where its rollout budget ends it, keeps its console in the run
directory, and `python -m adarl.report` tabulates and plots it."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from _launch import launch, output_tail

from adarl.config import DEFAULT_EXPERIMENT

# A micro tiny model, in-process with the HF engine: the pipeline, not the learning.
MICRO = (
    "model.tiny.hidden_size=32",
    "model.tiny.intermediate_size=64",
    "model.tiny.num_hidden_layers=1",
    "model.tiny.num_attention_heads=2",
    "model.tiny.num_key_value_heads=1",
    "model.tiny.sft_max_steps=25",
    "model.tiny.sft_batch_size=16",
    "allocator.prompts_per_step=8",  # × 4 samples (the default's n): 32 rollouts a step
    "trainer.max_rollouts=64",  # ends the run at step 2 of trainer.total_steps=1000
    "eval.num_prompts=8",
    "eval.samples_per_prompt=2",
    "eval.final_samples_per_prompt=4",
    "checkpoint.every_steps=0",
    "cluster=in_process",
    "rollout=hf",
    "logger.mode=disabled",
    "trainer.stop_below_prior=false",  # a 25-step warm start need not clear the prior
)


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A finished run on a jsonl of 120 sums, and its console output."""
    tmp = tmp_path_factory.mktemp("front_door")
    data = tmp / "sums.jsonl"
    rng = random.Random(0)
    with data.open("w") as file:
        for _ in range(120):
            a, b = rng.randint(1, 30), rng.randint(1, 30)
            file.write(json.dumps({"prompt": f"What is {a} plus {b}?", "answer": str(a + b)}))
            file.write("\n")
    run_dir = tmp / "run"
    proc = launch(run_dir, "task=jsonl", f"task.path={data}", *MICRO)
    assert proc.returncode == 0, output_tail(proc)
    return run_dir, proc.stdout + proc.stderr


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_bare_launch_on_your_own_jsonl_runs_the_default_and_says_so(
    finished: tuple[Path, str],
) -> None:
    run_dir, console = finished
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["name"] == DEFAULT_EXPERIMENT  # no experiment named: make run's
    assert config["task"]["verifier"] == "exact_match"  # the tiny policy writes bare answers
    summary = json.loads((run_dir / "summary.json").read_text())
    # A tenth of the 120 rows held out (none named), so the run reports held-out numbers.
    assert summary["final_evaluation"]["num_prompts"] == 8 and summary["final_accuracy"] is not None
    assert "held-out evaluation on 8 prompts held out of" in console  # eval.num_prompts of 12
    assert "108 training prompts" in console  # the warm start's: 120 rows less the 12 held out
    # The bar and the step lines count to the step the rollout budget ends the run at.
    assert summary["steps"] == 2 and summary["stop_reason"] == "budget"
    step_lines = [line for line in console.splitlines() if line.startswith("step ")]
    assert [line.split(" | ")[0] for line in step_lines] == ["step 0/2", "step 1/2", "step 2/2"]
    # An evaluation step shows the progress keys, not every eval/* number.
    assert "eval/pass@1" in step_lines[-1] and "eval/guess_pass@" not in step_lines[-1]
    assert "final evaluation, by level" in console  # the full table, once, at the end
    # The console is kept in the run directory, line for line.
    saved = (run_dir / "console.log").read_text().splitlines()
    assert [line for line in saved if line.startswith("step ")] == step_lines
    assert any("final evaluation, by level" in line for line in saved)


def _report(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "adarl.report", *args],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_report_tabulates_the_run_and_writes_its_figures(
    finished: tuple[Path, str], tmp_path: Path
) -> None:
    run_dir, _ = finished
    proc = _report(str(run_dir))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == f"{DEFAULT_EXPERIMENT}: {run_dir}"
    assert lines[1].split() == ["step", "rollouts", "pass@1", "pass@4", "greedy", "constant"]
    assert [line.split()[:2] for line in lines[2:4]] == [["0", "0"], ["2", "64"]]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert f"{100 * summary['final_accuracy']:.1f}%" in lines[3]
    assert "final evaluation, by level" in proc.stdout
    for name in ("pass_at_k", "reward", "signal", "time"):
        png = run_dir / "report" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    # Several runs are overlaid in one set of figures (here the same run twice, told apart by
    # its directory).
    out = tmp_path / "both"
    proc = _report(str(run_dir), str(run_dir), "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith(f"{DEFAULT_EXPERIMENT} ({run_dir}): {run_dir}")
    assert (out / "pass_at_k.png").is_file()
    # Not a run directory: one line, exit status 2.
    proc = _report(str(tmp_path))
    assert proc.returncode == 2 and "has no metrics.jsonl" in proc.stderr
