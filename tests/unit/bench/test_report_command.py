"""`python -m adarl.report` on run directories written by the real `MetricsLogger` (the
report reads the run record the bench reads): its table over steps, runs told apart, and the
one-line refusal of a path that is not a run. Its figures are drawn on a real run in
tests/e2e/test_front_door.py (matplotlib would add seconds here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adarl.report.command import describe, labels, load_run_dir, main

from ._runs import write_run


def _finished_run(run_dir: Path, *, name: str, final: float) -> Path:
    write_run(
        run_dir,
        rollouts_per_step=32,
        accuracy_at_step={0: 0.2, 2: 0.3, 4: final},
        steps=4,
        finished=False,
    )
    summary = {
        "name": name,
        "steps": 4,
        "rollouts_generated": 128,
        "wall_time_s": 21.0,
        "stop_reason": "budget",
    }
    (run_dir / "summary.json").write_text(json.dumps(summary) + "\n")
    return run_dir


def test_one_run_prints_its_evaluations_over_steps_and_its_outcome(tmp_path: Path) -> None:
    run = _finished_run(tmp_path / "run", name="grpo_anchored", final=0.45)
    (loaded,) = [load_run_dir(run)]
    lines = describe(loaded, *labels([loaded])).splitlines()
    assert lines[0] == f"grpo_anchored: {run}"
    assert lines[1].split() == ["step", "rollouts", "pass@1", "greedy", "constant"]
    rows = [line.split() for line in lines[2:5]]
    assert rows == [["0", "0", "20.0%", "30.0%"], ["2", "64", "30.0%", "40.0%"],
                    ["4", "128", "45.0%", "55.0%"]]  # fmt: skip
    assert "  4 steps, 128 training rollouts, 21 s; stopped by budget" in lines
    # A run still going (no summary.json yet) is read too, named by its config.yaml.
    going = tmp_path / "going"
    write_run(going, rollouts_per_step=32, accuracy_at_step={0: 0.2}, steps=3, finished=False)
    (going / "config.yaml").write_text("name: maxrl_anchored\nseed: 0\n")
    text = describe(load_run_dir(going), "maxrl_anchored")
    assert text.endswith("still running (no summary.json): 3 steps logged")


def test_runs_of_the_same_name_are_told_apart_by_their_directory(tmp_path: Path) -> None:
    a = _finished_run(tmp_path / "a", name="grpo_anchored", final=0.45)
    b = _finished_run(tmp_path / "b", name="grpo_anchored", final=0.35)
    c = _finished_run(tmp_path / "c", name="maxrl_anchored", final=0.40)
    runs = [load_run_dir(d) for d in (a, b, c)]
    assert labels(runs) == [f"grpo_anchored ({a})", f"grpo_anchored ({b})", "maxrl_anchored"]


def test_a_path_that_is_not_a_run_is_one_line_naming_the_runs_inside_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere"
    assert main([str(missing)]) == 2
    assert capsys.readouterr().err == (
        f"adarl.report: {missing} does not exist: give the directory of a run "
        "(runs/<name>/<time>/, or the hydra.run.dir a run was started with)\n"
    )
    # One level too high (runs/<name>/ instead of runs/<name>/<time>/): the runs it holds.
    run = _finished_run(tmp_path / "runs" / "grpo_anchored" / "t1", name="grpo_anchored", final=0.4)
    assert main([str(tmp_path / "runs" / "grpo_anchored")]) == 2
    err = capsys.readouterr().err
    assert "has no metrics.jsonl" in err and err.rstrip().endswith(f"the runs inside it: {run}")
    assert main([str(tmp_path / "runs")]) == 2  # two levels: still found
    assert capsys.readouterr().err.rstrip().endswith(f"the runs inside it: {run}")
