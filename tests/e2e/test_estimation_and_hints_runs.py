"""Ada-Est, GVM and SAGE end to end in the embedded default (Ray actors: vLLM engine, DeepSpeed
learner, allocator; the launch command): each runs, and the signal it is about is in
metrics.jsonl and the W&B offline run. Minutes each: `pytest -m heavy` (not in `make test`; the
component tests in tests/component/allocator cover the same wiring in-process)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _launch import launch, output_tail

from adarl.logging import read_metrics_jsonl, read_wandb_offline_metrics

SMALL = [
    "model.tiny.sft_steps=300",  # the embedded default's warm start: prompts at p = 0 exist
    "eval.num_prompts=16",
    "eval.samples_per_prompt=4",
    "eval.every_steps=0",
    "allocator.prompts_per_step=16",
    "trainer.total_steps=3",
    "rollout=vllm",
    "cluster.num_cpus=2",
]

# experiment -> metrics its steps must log (the signal it buys, where its compute went)
EXPECTED = {
    "ada_est": ("sampling/pilot_samples", "sampling/estimate_error_mean"),
    "gvm_grpo": ("sampling/grad_norm_mean", "timing/statistics_s"),
    "gvm_raft": ("sampling/grad_norm_mean", "timing/statistics_s"),
    "ada_seq_balance_sage": (
        "sampling/hint_activations/level1",
        "sampling/hinted_rollouts",
        "signal/zero_pass_share_unhinted",
        "signal/zero_pass_share_after_hints",
        "signal/prompts_rescued_by_hints",
        "sampling/hint_parse_failures",
        "timing/hint_s",
    ),
}


@pytest.mark.heavy
@pytest.mark.timeout(900)
@pytest.mark.parametrize("experiment", sorted(EXPECTED))
def test_experiment_runs_and_logs_its_signal(experiment: str, tmp_path: Path) -> None:
    proc = launch(tmp_path, f"+experiment={experiment}", *SMALL, timeout_s=800)
    assert proc.returncode == 0, output_tail(proc)
    steps = {row["step"]: row for row in read_metrics_jsonl(tmp_path / "metrics.jsonl")}
    wandb = {
        row["_step"] if "_step" in row else row["step"]: row
        for row in read_wandb_offline_metrics(tmp_path)
    }
    for step in (1, 2, 3):
        for name in EXPECTED[experiment]:
            assert name in steps[step], (experiment, step, name)
            assert name in wandb[step], (experiment, step, name)
        assert steps[step]["sampling/rollouts"] > 0
        assert steps[step]["train/weight_version"] == step
    if experiment == "ada_seq_balance_sage":
        # Hints were asked for and given by the policy itself, and every hinted sample is counted
        # in the step's rollouts.
        assert sum(steps[s]["sampling/hints_given"] for s in (1, 2, 3)) > 0
        for s in (1, 2, 3):
            assert steps[s]["sampling/hinted_rollouts"] <= 0.25 * (
                steps[s]["sampling/rollouts"] - steps[s]["sampling/hinted_rollouts"]
            )
    if experiment.startswith("gvm"):
        assert all(steps[s]["sampling/grad_norm_mean"] > 0 for s in (1, 2, 3))
