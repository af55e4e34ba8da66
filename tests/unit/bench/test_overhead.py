"""`python -m adarl.bench overhead` on a synthetic run: which steps count, the share's definition,
its table and docs section."""

from __future__ import annotations

from pathlib import Path

import pytest

from adarl.bench import overhead
from adarl.bench.overhead import measure_overhead
from adarl.logging import read_metrics_jsonl

from ._runs import write_run

# Per step: 1 s, of which 0.9 s is work (0.6 wait + 0.1 reward + 0.15 train + 0.05 sync) and
# 0.1 s is not: 0.04 allocator calls (0.03 inside the allocator, 0.01 round trips) + 0.02
# dispatch + 0.01 batch + 0.01 data + 0.02 left in the loop.
TIMING = {
    "step": 1.0,
    "rollout_wait": 0.6,
    "reward": 0.1,
    "train": 0.15,
    "weight_sync": 0.05,
    "allocator": 0.04,
    "allocator_compute": 0.03,
    "dispatch": 0.02,
    "batch": 0.01,
    "data": 0.01,
}


def test_overhead_excludes_warmup_steps_and_splits_what_is_left(tmp_path: Path) -> None:
    run = write_run(
        tmp_path / "run",
        rollouts_per_step=100,
        accuracy_at_step={0: 0.1, 5: 0.2},
        steps=5,
        step_timing=TIMING,
    )
    rows = read_metrics_jsonl(run / "metrics.jsonl")
    # Step 1 pays the warm-up: ten times slower, all of it outside the work.
    rows[1]["timing/step_s"] = 10.0
    result = measure_overhead(rows, warmup_steps=1)
    assert result.steps == 4
    assert result.share == pytest.approx(0.1)
    assert result.seconds["rest"] == pytest.approx(4 * 0.02)
    assert result.seconds["allocator_compute"] == pytest.approx(4 * 0.03)
    assert result.seconds["allocator_transport"] == pytest.approx(4 * 0.01)
    assert result.per_step_share == pytest.approx([0.1] * 4)
    with_warmup = measure_overhead(rows, warmup_steps=0)
    # (10 + 4) s of steps, 5 × 0.9 s of work -> (14 − 4.5) / 14.
    assert with_warmup.share == pytest.approx((14 - 4.5) / 14)


def test_overhead_names_what_is_missing(tmp_path: Path) -> None:
    run = write_run(
        tmp_path / "run",
        rollouts_per_step=100,
        accuracy_at_step={0: 0.1},
        steps=3,
        step_timing={"step": 1.0, "train": 0.5},
    )
    rows = read_metrics_jsonl(run / "metrics.jsonl")
    with pytest.raises(ValueError, match="timing/rollout_wait_s"):
        measure_overhead(rows, warmup_steps=1)
    with pytest.raises(ValueError, match="--warmup-steps=3"):
        measure_overhead(rows, warmup_steps=3)


def test_overhead_reads_an_existing_run_and_writes_its_docs_section(tmp_path: Path) -> None:
    run = write_run(
        tmp_path / "run",
        rollouts_per_step=100,
        accuracy_at_step={0: 0.1, 6: 0.2},
        steps=6,
        # 0.95 s of work per 1 s step; outside it 0.015 allocator compute, 0.005 allocator
        # round trips, and 3 × 0.01, nothing else.
        step_timing={
            **TIMING,
            "rollout_wait": 0.65,
            "allocator": 0.02,
            "allocator_compute": 0.015,
            "dispatch": 0.01,
        },
    )
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n\n## Learning\n\nkeep\n")
    argv = ["--run-dir", str(run), "--warmup-steps", "2", "--write-docs", str(docs)]
    assert overhead.main(argv) == 0
    text = docs.read_text()
    assert text.startswith("# Benchmarks\n\n## Learning\n\nkeep\n\n## Overhead\n")
    assert "over 4 steps after the warm-up" in text
    assert "**Overhead share: 5.00%** (target ≤ 3%: not met)" in text
    assert "| generation (waiting for engines) | 0.6500 | 65.00% |" in text
    assert "| rest of the driver loop | 0.0000 | 0.00% |" in text
    said = " ".join(text.split())
    assert (
        "The largest part outside the work is allocator compute (sampling, group building): "
        "1.50% of step time, 0.0150 s per step, for steps of 100 rollouts in 25 engine requests "
        "and 0 allocator calls."
    ) in said
