"""Progress that tells the truth (issue 48.6): the step a run is expected to stop at under a
rollout or token budget, and the console transcript kept in the run directory."""

from __future__ import annotations

import io
import sys
from pathlib import Path

from tqdm import tqdm

from adarl.console import ConsoleTranscript
from adarl.session import expected_last_step


def _last(**kw: object) -> int:
    defaults: dict[str, object] = {
        "step": 0,
        "total_steps": 1000,
        "used": (0, 0),
        "budgets": (180_000, None),
        "per_step": (256, None),
    }
    return expected_last_step(**{**defaults, **kw})  # type: ignore[arg-type]


def test_a_rollout_budget_ends_the_run_before_total_steps() -> None:
    # make run: 64 prompts × 4 samples = 256 rollouts a step; 180,000 / 256 = 703.1 -> step 704
    assert _last() == 704
    # After step 100 at the same rate, still 704; a slower spend from there pushes it out.
    assert _last(step=100, used=(25_600, 0)) == 704
    assert _last(step=100, used=(25_600, 0), per_step=(200, None)) == 100 + 772
    assert _last(step=100, used=(25_600, 0), per_step=(128, None)) == 1000  # past total_steps
    # No budget, or a budget past total_steps: total_steps.
    assert _last(budgets=(None, None)) == 1000
    assert _last(budgets=(10**9, None)) == 1000


def test_the_token_budget_counts_when_it_runs_out_first() -> None:
    # 256 rollouts a step but 10k prompt + response tokens a step against 2.5M: step 250.
    assert _last(budgets=(180_000, 2_500_000), per_step=(256, 10_000)) == 250
    # Before step 1 the token spend is unknown: the rollout budget alone.
    assert _last(budgets=(180_000, 2_500_000), per_step=(256, None)) == 704


def test_the_transcript_keeps_lines_as_a_terminal_leaves_them(tmp_path: Path) -> None:
    real_out, real_err = sys.stdout, sys.stderr
    out, err = io.StringIO(), io.StringIO()
    sys.stdout, sys.stderr = out, err
    try:
        transcript = ConsoleTranscript.install()
        print("before the run directory is known")
        transcript.attach(tmp_path / "console.log")
        bar = tqdm(total=3, file=sys.stdout, mininterval=0, ascii=True)
        for step in range(1, 4):
            bar.update(1)
            bar.write(f"step {step}/3 | train/loss 0.5", file=sys.stdout)
        bar.close()
        print("a warning", file=sys.stderr)
        transcript.uninstall()
    finally:
        sys.stdout, sys.stderr = real_out, real_err
    assert sys.stdout is real_out
    lines = (tmp_path / "console.log").read_text().splitlines()
    assert lines[0] == "before the run directory is known"
    assert [line for line in lines if line.startswith("step")] == [
        f"step {s}/3 | train/loss 0.5" for s in (1, 2, 3)
    ]
    assert lines[-1] == "a warning"
    bars = [line for line in lines if "|" in line and "it" in line and not line.startswith("step")]
    assert len(bars) == 1 and "3/3" in bars[0]  # the bar once, as it ended, not each redraw
    assert out.getvalue().count("\r") > 3  # the terminal itself got every redraw
