"""The policy that reads hints (`model=tiny_worked`), end to end: its warm start, built here
(minutes: `pytest -m heavy`, not in `make test`), lifts the pass rate of held-out prompts it
fails when shown a hint, well above an unhinted re-roll; and SAGE trains on it through the real
launch command (vLLM engine, DeepSpeed learner, Ray actors), scoring worked solutions."""

from __future__ import annotations

from pathlib import Path

import pytest
from _launch import launch, output_tail

from adarl.bench.hints import measure_model
from adarl.logging import read_metrics_jsonl

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(1200)]


def test_the_worked_policy_reads_its_hints() -> None:
    report = measure_model(
        "model=tiny_worked",
        cache_dir=None,  # the session cache, $ADARL_CACHE_DIR
        prompts=128,
        samples_per_prompt=16,
        retries=2,
        temperature=1.0,
        seed=0,
    )
    quality = report.quality
    assert quality.failed >= 20  # the base leaves prompts at p̂ = 0 for hints to rescue
    assert quality.self_parse_rate > 0.9 and quality.self_leak_rate < 0.05
    rows = {(row.source, row.level): row for row in quality.levels}
    for source in ("template", "self"):
        level3 = rows[(source, 3)]
        # A bias worth caring about: a lift of 0.05 of pass rate, at 3 standard errors.
        assert level3.lift > 0.05 and level3.lift_in_se > 3.0, (source, level3)


def test_sage_trains_the_worked_policy(tmp_path: Path) -> None:
    proc = launch(
        tmp_path,
        "+experiment=sage",
        "model=tiny_worked",
        "eval.num_prompts=32",
        "eval.samples_per_prompt=4",
        "eval.every_steps=3",
        "allocator.prompts_per_step=16",
        "trainer.total_steps=3",
        "cluster.num_cpus=2",
        timeout_s=1000,
    )
    assert proc.returncode == 0, output_tail(proc)
    steps = {row["step"]: row for row in read_metrics_jsonl(tmp_path / "metrics.jsonl")}
    # Worked solutions are scored on their answer: the base is far from 0 (answer-only scoring
    # of the same responses would give exactly 0).
    assert steps[0]["eval/accuracy"] > 0.15
    assert sum(steps[s]["sampling/hints_given"] for s in (1, 2, 3)) > 0
    assert sum(steps[s]["signal/prompts_rescued_by_hints"] for s in (1, 2, 3)) > 0
    assert steps[3]["train/weight_version"] == 3
