"""The training run end to end: launch, Ray actors (vLLM engine, DeepSpeed learner, allocator),
metrics in metrics.jsonl and the W&B offline run, summary, checkpoint and exact resume."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from safetensors.torch import load_file

from adarl.driver.step_loop import StepOutcome
from adarl.export import read_export_info
from adarl.launch import CONFIG_DIR, load_config
from adarl.logging import read_metrics_jsonl, read_wandb_offline_metrics

# A short warm start keeps the tiny-model build to seconds; the embedded default uses the full one.
SMALL = [
    "model.tiny.sft_steps=120",
    "eval.num_prompts=16",
    "eval.samples_per_prompt=4",
    "eval.every_steps=0",
    "allocator.prompts_per_step=8",
]


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    configured = os.environ.get("ADARL_CACHE_DIR")
    return configured or str(tmp_path_factory.mktemp("adarl-cache"))


def _launch(run_dir: Path, cache: str, *overrides: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "OMP_NUM_THREADS": "1",
        "RAY_AUTH_MODE": "disabled",
    }
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "adarl.launch",
            *overrides,
            *SMALL,
            f"model.cache_dir={cache}",
            f"hydra.run.dir={run_dir}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("experiment", "extra"),
    [
        # The GPU presets' weight sync, with gloo on CPU: the session's own builders wire the
        # engines' endpoints into the broadcast group (a group is fixed: no engine restarts).
        (
            "ada_seq_balance",
            [
                "learner.weight_sync.method=broadcast",
                "learner.weight_sync.broadcast_backend=gloo",
                "faults.engine_failure=fail",
            ],
        ),
        # The short warm start leaves most prompts at p ≈ 0: 8 samples give GRPO a mixed group.
        # The same pipeline under another experiment: `pytest -m heavy`, outside make test's time.
        pytest.param("grpo", ["allocator.uniform_samples_per_prompt=8"], marks=pytest.mark.heavy),
    ],
)
def test_three_steps_on_ray_with_vllm_and_deepspeed(
    experiment: str, extra: list[str], tmp_path: Path, model_cache: str
) -> None:
    proc = _launch(
        tmp_path,
        model_cache,
        f"+experiment={experiment}",
        *extra,
        "trainer.total_steps=3",
        "rollout=vllm",
        "cluster.num_cpus=2",
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]

    rows = read_metrics_jsonl(tmp_path / "metrics.jsonl")
    steps = {row["step"]: row for row in rows}
    assert sorted(steps) == [0, 1, 2, 3]
    for step in (1, 2, 3):
        row = steps[step]
        assert math.isfinite(row["train/loss"]) and math.isfinite(row["train/grad_norm"])
        if row["signal/mixed_group_fraction"] > 0:  # a mixed group carries a gradient
            assert row["train/grad_norm"] > 0, row
        assert row["train/weight_version"] == step  # one optimizer step per step, pushed
        assert row["perf/weight_sync_buckets"] >= 1
        # The weights arrived: the step's samples were drawn by the version the learners held
        # (no lag), and the engine's log-probs of them are the learners'. Measured: at most
        # 3.2e-9 here; 2.4e-4 and 1.7e-3 at steps 2 and 3 with an engine that kept its first
        # weights while reporting each new version.
        assert row["train/staleness_max"] == 0
        assert row["train/mismatch_kl"] < 1e-6, row["train/mismatch_kl"]
        assert row["sampling/rollouts"] > 0
        # Training counters count training rollouts only (evaluation ran before step 1 and after
        # step 3): every training response was scored once, none from the evaluation.
        assert row["sampling/reward_responses"] == row["sampling/rollouts"]
        assert row["sampling/scored_reward_mean"] == pytest.approx(row["signal/reward_mean"])
        assert row["perf/rollouts_total"] == sum(
            steps[s]["sampling/rollouts"] for s in range(1, step + 1)
        )
    # Signal was present: some trained group had mixed outcomes.
    assert max(steps[s]["signal/mixed_group_fraction"] for s in (1, 2, 3)) > 0
    assert "eval/accuracy" in steps[0] and "eval/accuracy" in steps[3]

    wandb_rows = {
        row["_step"] if "_step" in row else row["step"]: row
        for row in read_wandb_offline_metrics(tmp_path)
    }
    for step in (1, 2, 3):
        logged = set(wandb_rows[step])
        assert "signal/mixed_group_fraction" in logged and "timing/rollout_s" in logged

    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["steps"] == 3
    assert summary["rollouts_generated"] == steps[3]["perf/rollouts_total"]
    assert summary["final_accuracy"] == steps[3]["eval/accuracy"]
    rise = summary["pass_at_1_rise"]  # paired over the same 16 prompts, base and final
    assert rise["prompts"] == 16 and rise["se"] >= 0.0
    base_pass1 = summary["base_evaluation"]["pass_at_k"]["1"]
    assert rise["rise"] == pytest.approx(summary["final_evaluation"]["pass_at_k"]["1"] - base_pass1)
    assert {"rollout", "train", "eval"} <= set(summary["time_per_stage_s"])
    assert (tmp_path / "config.yaml").is_file()
    assert (tmp_path / "checkpoints" / "step_000003" / "manifest.json").is_file()


def _record_draws(source, draws: list[list[str]]) -> None:
    """Make the driver's prompt source record each batch it hands out (prompt ids, in order).
    The source is wrapped in place: the driver's parts, shared by its phases, hold it."""
    next_batch = source.next_batch

    def recorded(num_examples: int):
        batch = next_batch(num_examples)
        draws.append([e.prompt_id for e in batch])
        return batch

    source.next_batch = recorded


def _session_steps(
    run_dir: Path, cache: str, total_steps: int, *extra: str, draws: list | None = None
) -> list[dict]:
    """Run in-process (no Ray) and record each step's data order and allocator decisions (and
    every batch the driver draws, into `draws`, when given)."""
    from adarl.session import TrainingSession

    overrides = [
        "+experiment=ada_seq_balance",
        *SMALL,
        f"model.cache_dir={cache}",
        "cluster=in_process",
        "rollout=hf",
        f"trainer.total_steps={total_steps}",
        "checkpoint.every_steps=2",
        "logger.mode=offline",
        *extra,
    ]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        config = load_config(compose(config_name="config", overrides=overrides))
    seen: list[dict] = []

    def record(outcome: StepOutcome) -> None:
        seen.append(
            {
                "step": outcome.step,
                "prompts": [g.prompt_id for g in outcome.result.groups],
                "pools": [
                    (g.pool_size, g.pool_positives, g.resolved) for g in outcome.result.groups
                ],
                "advantages": [
                    tuple(round(a, 6) for a in g.advantages) for g in outcome.result.groups
                ],
                "requests": outcome.metrics["sampling/requests"],
                # What the learner did: the resumed run must reproduce these too.
                "learner": tuple(
                    round(outcome.metrics[k], 5)
                    for k in ("train/loss", "train/grad_norm", "train/learning_rate")
                ),
                # How many versions the trained samples lag (sampling ahead, if any).
                "staleness": outcome.metrics["train/staleness_max"],
                "pipeline_metrics": sorted(
                    k
                    for k in outcome.metrics
                    if k.startswith(("sampling/dropped_stale", "sampling/steps_sampled_ahead"))
                    or k == "timing/rollout_ahead_s"
                ),
            }
        )

    with TrainingSession(config, run_dir=run_dir, on_step_end=record) as session:
        if draws is not None:
            _record_draws(session.driver.parts.prompts, draws)
        before = session.learners.get_weights()
        summary = session.train()
        after = session.learners.get_weights()
        # The engines serve the trained version.
        served = set(session.rollout.weight_versions())
        assert served == {session.learners.weight_version().version}
    assert any(not torch.equal(before[name], after[name]) for name in before)  # it learned
    # Every run, a resumed one too, ends with its final policy as a Hugging Face model.
    assert summary.model_dir == str((run_dir / "model").absolute())
    final = load_file(run_dir / "model" / "model.safetensors")
    assert all(torch.equal(final[name], after[name]) for name in final)
    assert read_export_info(run_dir / "model")["step"] == total_steps  # type: ignore[index]
    return seen


MINI_BATCHES = (
    "learner.mini_batches_per_step=2",
    "learner.epochs_per_step=2",
    "learner.loss.ratio_reference=learner",
)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_resume_repeats_the_uninterrupted_run(tmp_path: Path, model_cache: str) -> None:
    """With the recipe's mini-batch updates (2 mini-batches × 2 epochs, π_old scored by the
    learner before the step's first update): the optimizer, its schedule and the cut of each
    batch into mini-batches all resume as they were."""
    uninterrupted = _session_steps(tmp_path / "a", model_cache, 4, *MINI_BATCHES)
    first_half = _session_steps(tmp_path / "b", model_cache, 2, *MINI_BATCHES)  # stops at 2
    resumed = _session_steps(tmp_path / "b", model_cache, 4, *MINI_BATCHES)  # resume=auto

    assert [s["step"] for s in first_half] == [1, 2]
    assert [s["step"] for s in resumed] == [3, 4]  # continued, did not start over
    assert first_half == uninterrupted[:2]
    assert resumed == uninterrupted[2:]  # same prompts, same pools, same advantages
    rows = read_metrics_jsonl(tmp_path / "b" / "metrics.jsonl")
    assert [row["step"] for row in rows] == [0, 1, 2, 3, 4]  # nothing lost, nothing logged twice
    assert all(row["train/optimizer_steps"] == 4 for row in rows[1:])
    # The synchronous loop (rollout.max_off_policy_steps=0) trains on current weights only and
    # never samples ahead.
    assert all(s["staleness"] == 0 and s["pipeline_metrics"] == [] for s in uninterrupted)


SAMPLE_AHEAD = (
    "rollout.max_off_policy_steps=1",
    "learner.loss.ratio_reference=learner",
    "learner.loss.tis_cap=2",
)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sampling_ahead_lags_one_version_and_resumes_exactly(
    tmp_path: Path, model_cache: str
) -> None:
    """k = 1: while step 1 trains, step 2 is sampled on version 0 and trained on version 1; no
    sampling crosses the checkpoint at step 2, so a resumed run repeats the uninterrupted one:
    every prompt trained once, none lost."""
    uninterrupted = _session_steps(tmp_path / "a", model_cache, 4, *SAMPLE_AHEAD)
    first_half = _session_steps(tmp_path / "b", model_cache, 2, *SAMPLE_AHEAD)
    resumed = _session_steps(tmp_path / "b", model_cache, 4, *SAMPLE_AHEAD)

    assert [s["staleness"] for s in uninterrupted] == [0, 1, 0, 1]
    assert all("sampling/dropped_stale_groups" in s["pipeline_metrics"] for s in uninterrupted)
    assert first_half == uninterrupted[:2]
    assert resumed == uninterrupted[2:]
    steps = [row["step"] for row in read_metrics_jsonl(tmp_path / "b" / "metrics.jsonl")]
    assert steps == [0, 1, 2, 3, 4]
    rows = {row["step"]: row for row in read_metrics_jsonl(tmp_path / "a" / "metrics.jsonl")}
    assert rows[2]["sampling/dropped_stale_groups"] == 0  # lag 1 ≤ k: nothing dropped
    assert "timing/rollout_ahead_s" in rows[1] and "timing/rollout_ahead_s" not in rows[2]


CROSS_STEP = (*SAMPLE_AHEAD, "rollout.cross_step_allocation=true")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_cross_step_allocation_streams_the_steps_and_resumes_with_every_prompt_once(
    tmp_path: Path, model_cache: str
) -> None:
    """k = 1 with the steps' phases streamed into each other: step t+1 opens while step t samples
    and keeps sampling while t trains, nothing opens past the checkpoint at step 2, and every step
    trains on prompts of the batch the synchronous loop draws for it: none repeated or skipped,
    uninterrupted or across a resume. (Which samples land before or after a weight push depends
    on timing, so pools are not compared.)"""
    sync_draws: list[list[str]] = []
    draws: list[list[str]] = []
    resumed_draws: list[list[str]] = []
    _session_steps(tmp_path / "s", model_cache, 4, draws=sync_draws)
    uninterrupted = _session_steps(tmp_path / "a", model_cache, 4, *CROSS_STEP, draws=draws)
    first_half = _session_steps(tmp_path / "b", model_cache, 2, *CROSS_STEP, draws=resumed_draws)
    resumed = _session_steps(tmp_path / "b", model_cache, 4, *CROSS_STEP, draws=resumed_draws)

    assert draws == sync_draws and resumed_draws == sync_draws  # the same batches, each once
    for run in (uninterrupted, first_half + resumed):
        assert [s["step"] for s in run] == [1, 2, 3, 4]
        for s in run:
            assert set(s["prompts"]) <= set(sync_draws[s["step"] - 1]) and s["prompts"]
            assert s["staleness"] <= 1
    rows = {row["step"]: row for row in read_metrics_jsonl(tmp_path / "a" / "metrics.jsonl")}
    # Step 2 opened while step 1 sampled; at the checkpoint (2) and the end (4) nothing is open.
    assert [rows[s]["sampling/steps_sampled_ahead"] for s in (1, 2, 3, 4)] == [1, 0, 1, 0]
    assert rows[2]["sampling/dropped_stale_groups"] == 0
    assert "timing/rollout_ahead_s" in rows[1]


WRITE_AHEAD = ("hints=sage", "hints.max_extra_rollouts_fraction=0.25", "hints.write_ahead=true")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_hints_written_ahead_keep_the_data_order_and_resume_exactly(
    tmp_path: Path, model_cache: str
) -> None:
    """SAGE with hints written while the step before trains: the same prompts every step as
    without, nothing written ahead across the checkpoint at step 2, and a resumed run repeats
    the uninterrupted one."""
    uninterrupted = _session_steps(tmp_path / "a", model_cache, 4, *WRITE_AHEAD)
    first_half = _session_steps(tmp_path / "b", model_cache, 2, *WRITE_AHEAD)
    resumed = _session_steps(tmp_path / "b", model_cache, 4, *WRITE_AHEAD)
    asked = _session_steps(tmp_path / "c", model_cache, 4, *WRITE_AHEAD[:2])

    assert first_half == uninterrupted[:2]
    assert resumed == uninterrupted[2:]
    # Drawing a step's prompts while the step before trains draws the batch it would draw.
    assert [sorted(s["prompts"]) for s in uninterrupted] == [sorted(s["prompts"]) for s in asked]
    rows = {row["step"]: row for row in read_metrics_jsonl(tmp_path / "a" / "metrics.jsonl")}
    # Written while steps 1 and 3 trained (for 2 and 4); not at step 2 (a checkpoint) nor 4 (last).
    assert ["timing/hint_ahead_s" in rows[s] for s in (1, 2, 3, 4)] == [True, False, True, False]
    assert rows[1]["sampling/hints_ahead_predicted"] > 0
    assert rows[1]["sampling/hints_ahead_generations"] >= rows[1]["sampling/hints_ahead_prompts"]
    assert rows[2]["sampling/hint_requests_written_ahead"] > 0  # used by the step it was for
    # Which prompts collapse and get a first hint is decided as without writing ahead (step 2
    # samples on the same weights either way; only the hints' text may differ).
    asked_rows = {row["step"]: row for row in read_metrics_jsonl(tmp_path / "c" / "metrics.jsonl")}
    assert (
        rows[2]["sampling/hint_activations/level1"]
        == asked_rows[2]["sampling/hint_activations/level1"]
    )
