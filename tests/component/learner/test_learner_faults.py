"""Learner faults, in-process: a training step whose loss or gradients are not finite is
skipped, counted, and a streak of them stops the run (adarl/learner/learner.py, group.py), at
every ZeRO stage; every learner and weight-sync wait is bounded; a restarted engine is resynced
to the current weights; on one machine the checkpoint directory passes the shared-directory
check and shard verification.

Stage 0 in fp32 is the case DeepSpeed does not guard: its client optimizer (torch AdamW) would
step on NaN gradients and poison every weight for good.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
import torch

from adarl.cluster import InProcessWorker
from adarl.learner.group import LearnerGroup, NonFiniteUpdatesError
from adarl.rollout.hf_engine import HFEngine
from adarl.types import TrainBatch
from adarl.weight_sync.object_store import ObjectStoreWeightSync

from .conftest import small_batch

pytestmark = pytest.mark.slow


def nan_advantages(batch: TrainBatch) -> TrainBatch:
    return dataclasses.replace(batch, advantages=torch.full_like(batch.advantages, float("nan")))


def one_nan_behaviour_logprob(batch: TrainBatch) -> TrainBatch:
    # One response token whose engine log-prob is NaN: the clamped PPO ratio is NaN there.
    logprobs = batch.behaviour_logprobs.clone()
    row, column = batch.response_mask.nonzero()[0].tolist()
    logprobs[row, column] = float("nan")
    return dataclasses.replace(batch, behaviour_logprobs=logprobs)


def one_infinite_advantage(batch: TrainBatch) -> TrainBatch:
    advantages = batch.advantages.clone()
    advantages[0] = float("inf")
    return dataclasses.replace(batch, advantages=advantages)


def group(policy: str, *, stage: int, precision: str, streak: int | None = None) -> LearnerGroup:
    return LearnerGroup(
        in_process=True,
        model_path=policy,
        zero_stage=stage,
        precision=precision,
        learning_rate=1e-2,
        lr_warmup_steps=4,  # the schedule must not advance on a skipped step
        max_nonfinite_streak=streak,
    )


def weights(learners: LearnerGroup) -> dict[str, torch.Tensor]:
    return {name: tensor.float().clone() for name, tensor in learners.get_weights().items()}


@pytest.mark.parametrize(
    ("stage", "precision", "corrupt"),
    [
        (0, "fp32", nan_advantages),
        (0, "fp32", one_nan_behaviour_logprob),
        (0, "fp32", one_infinite_advantage),
        (1, "fp32", nan_advantages),
        (3, "fp32", one_nan_behaviour_logprob),
        (0, "bf16", one_infinite_advantage),
    ],
)
def test_a_nonfinite_step_changes_nothing_and_is_counted(
    tiny_policy_dir: str, stage: int, precision: str, corrupt
) -> None:
    batch = small_batch()
    learners = group(tiny_policy_dir, stage=stage, precision=precision)
    try:
        first = learners.train_step(batch)
        assert first.metrics["train/skipped_nonfinite_updates"] == 0.0
        before = weights(learners)

        bad = learners.train_step(corrupt(batch))
        after = weights(learners)
        assert all(torch.isfinite(t).all() for t in after.values()), "NaN reached the weights"
        assert all(torch.equal(before[name], after[name]) for name in before)
        assert bad.metrics["train/skipped_nonfinite_updates"] == 1.0
        assert bad.weight_version.version == 1  # no update, no new version
        assert learners.state_dict()["skipped_nonfinite_updates"] == 1

        good = learners.train_step(batch)
        assert good.metrics["train/skipped_nonfinite_updates"] == 1.0  # counted over the run
        assert good.weight_version.version == 2
        assert any(not torch.equal(after[n], t.float()) for n, t in learners.get_weights().items())
        # Warm-up factor (s + 1) / 4 at optimizer step s: the skipped step did not advance it,
        # so the second applied update runs at step 1's rate.
        assert good.metrics["train/learning_rate"] == pytest.approx(1e-2 * 2 / 4)
    finally:
        learners.shutdown()


def test_a_streak_of_nonfinite_steps_stops_the_run(tiny_policy_dir: str) -> None:
    batch = small_batch()
    learners = group(tiny_policy_dir, stage=0, precision="fp32", streak=2)
    try:
        learners.train_step(nan_advantages(batch))  # 1 in a row
        learners.train_step(batch)  # a good step resets the streak
        learners.train_step(nan_advantages(batch))  # 1 in a row again
        with pytest.raises(NonFiniteUpdatesError, match=r"faults\.max_nonfinite_streak=2"):
            learners.train_step(nan_advantages(batch))
        assert learners.state_dict()["skipped_nonfinite_updates"] == 3
    finally:
        learners.shutdown()


# -- waits with limits, and resync of a restarted engine ----------------------------------------


def test_a_stuck_learner_call_times_out_naming_the_key(tiny_policy_dir: str) -> None:
    learners = LearnerGroup(in_process=True, model_path=tiny_policy_dir)
    learners.call_timeout_s = 0.5  # after set-up, which takes longer
    try:
        learners.rank0_submit(lambda _learner: time.sleep(3.0))  # the rank is stuck
        with pytest.raises(
            TimeoutError,
            match=r"a learner training step: 1 of 1 calls did not finish within 0\.5 s "
            r"\(faults\.learner_call_timeout_s\)",
        ):
            learners.train_step(small_batch())
    finally:
        learners.shutdown()


def test_weight_sync_waits_are_bounded_and_resync_loads_the_current_weights(
    tiny_policy_dir: str,
) -> None:
    learners = LearnerGroup(in_process=True, model_path=tiny_policy_dir, learning_rate=1e-2)
    engines = [InProcessWorker(HFEngine(model_path=tiny_policy_dir)) for _ in range(2)]
    try:
        sync = ObjectStoreWeightSync(engines=engines, timeout_s=0.5)
        engines[1].submit(time.sleep, 3.0)  # one engine is stuck
        with pytest.raises(TimeoutError, match=r"faults\.weight_sync_timeout_s"):
            sync.push(learners)

        learners.train_step(small_batch())  # version 1: weights the engines do not have
        restarted = InProcessWorker(HFEngine(model_path=tiny_policy_dir))  # starts at v0
        assert sync.resync(restarted, learners) == 1
        assert restarted.obj.weight_version() == 1
        served = restarted.obj.model.state_dict()
        for name, tensor in learners.get_weights().items():
            assert torch.equal(served[name], tensor), name
    finally:
        for engine in engines:
            engine.shutdown()
        learners.shutdown()


def test_on_one_machine_the_checkpoint_directory_is_shared_and_shards_verified(
    tiny_policy_dir: str, tmp_path: Path
) -> None:
    learners = LearnerGroup(in_process=True, model_path=tiny_policy_dir)
    try:
        learners.check_shared_directory(tmp_path)
        assert list(tmp_path.iterdir()) == []  # its probe files are gone
        learners.train_step(small_batch())
        tag = learners.save_checkpoint(tmp_path / "learner")  # verified as it returns
        assert (tmp_path / "learner" / tag).is_dir()
    finally:
        learners.shutdown()
