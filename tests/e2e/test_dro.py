"""`+experiment=dro` end to end in the embedded default (Ray actors, vLLM engine, DeepSpeed
learner, allocator actor): the R3 scoring pass runs on the engines every step, its rewards are
trained on, and the variance filter's metrics are logged (metrics.jsonl and W&B offline)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from _launch import launch, output_tail

from adarl.logging import read_metrics_jsonl, read_wandb_offline_metrics

# The small settings of tests/e2e/test_training_run.py: a short warm start, few prompts.
SMALL = [
    "model.tiny.sft_steps=120",
    "eval.num_prompts=16",
    "eval.samples_per_prompt=4",
    "eval.every_steps=0",
    "allocator.prompts_per_step=8",
]
FILTER_METRICS = (
    "signal/variance_filter_fraction",
    "signal/variance_filter_dropped_now",
    "signal/variance_filter_skipped_prompts",
    "signal/variance_filter_top_k_failures",
    "signal/variance_filter_drop_set_size",
)


@pytest.mark.slow
@pytest.mark.heavy  # ~40 s; keeps make test within its 15 minutes (docs/operations.md, Tests)
@pytest.mark.timeout(900)
def test_dro_runs_three_steps_with_its_filter_metrics(tmp_path: Path) -> None:
    proc = launch(
        tmp_path,
        "+experiment=dro",
        "trainer.total_steps=3",
        "rollout=vllm",
        "cluster.num_cpus=2",
        *SMALL,
    )
    assert proc.returncode == 0, output_tail(proc)

    steps = {row["step"]: row for row in read_metrics_jsonl(tmp_path / "metrics.jsonl")}
    assert sorted(steps) == [0, 1, 2, 3]
    for step in (1, 2, 3):
        row = steps[step]
        for name in FILTER_METRICS:
            assert name in row, (step, name)
        assert 0.0 <= row["signal/variance_filter_fraction"] <= 1.0
        assert row["signal/variance_filter_applied"] == 1.0  # interval 1: every step
        # Every drawn prompt's pool was rescored, one scoring pair per rollout, on the engines.
        assert row["sampling/r3_pools"] == row["sampling/prompts_drawn"]
        assert row["sampling/r3_scored_pairs"] == row["sampling/rollouts"]
        assert row["timing/pool_reward_s"] > 0.0 and row["timing/r3_scoring_s"] > 0.0
        # Trained groups are the prompts the filter kept (uniform sampling: none unresolved).
        assert (
            row["signal/groups_trained"] == row["sampling/prompts"] - row["signal/filtered_prompts"]
        )
        # The allocator saw R3 (probability certainties, in [0, 1]), not the verifier's 0/1.
        assert row["signal/r3_mean"] == pytest.approx(row["signal/reward_mean"])
        assert 0.0 <= row["signal/r3_mean"] <= 1.0
        if 0.0 < row["sampling/scored_reward_mean"] < 1.0:  # the verifier saw both outcomes
            assert -1.0 <= row["signal/r3_verifier_correlation"] <= 1.0
        assert math.isfinite(row["train/loss"])
    assert "eval/accuracy" in steps[3]  # held-out accuracy is the exact verifier's

    wandb_rows = {
        row["_step"] if "_step" in row else row["step"]: row
        for row in read_wandb_offline_metrics(tmp_path)
    }
    for step in (1, 2, 3):
        assert set(FILTER_METRICS) <= set(wandb_rows[step])
