"""ProRL's reference reset (learner.reference_reset_every_steps): the KL reference becomes the
current policy every N training steps, and a checkpoint carries the moved reference."""

from __future__ import annotations

from pathlib import Path

import pytest

from adarl.config.learner import PolicyLossConfig
from adarl.learner import LearnerGroup
from adarl.learner.checkpoint import REFERENCE_STATE_FILE

from .conftest import small_batch

pytestmark = pytest.mark.slow


def _group(model_dir: str, zero_stage: int, every: int | None) -> LearnerGroup:
    return LearnerGroup(
        in_process=True,
        model_path=model_dir,
        zero_stage=zero_stage,
        learning_rate=1e-2,
        loss=PolicyLossConfig(kl_coef=0.1),
        reference_reset_every_steps=every,
    )


@pytest.mark.parametrize("zero_stage", [1, 3])  # a plain reference module, a frozen engine
def test_the_reference_moves_to_the_policy_and_is_checkpointed(
    tiny_policy_dir: str, zero_stage: int, tmp_path: Path
) -> None:
    kl = {}
    for every in (None, 2):
        group = _group(tiny_policy_dir, zero_stage, every)
        try:
            steps = [group.train_step(small_batch(seed)) for seed in range(3)]
            kl[every] = [s.metrics["train/kl"] for s in steps]
            if every is not None:
                assert [s.metrics["train/reference_reset"] for s in steps] == [0.0, 1.0, 0.0]
                tag = group.save_checkpoint(tmp_path)
                after_three = group.train_step(small_batch(3)).metrics["train/kl"]
        finally:
            group.shutdown()
    # Step 3 trains on the weights of step 2, which the reset made the reference: KL 0 there,
    # while the fixed reference has drifted from the policy by then.
    assert kl[2][:2] == pytest.approx(kl[None][:2], rel=1e-6)
    assert kl[2][2] == pytest.approx(0.0, abs=1e-7) and kl[None][2] > 1e-4
    # A new group loading the checkpoint (taken after step 3) has the step-2 reference: step 4
    # sees the KL the uninterrupted group saw.
    resumed = _group(tiny_policy_dir, zero_stage, 2)
    try:
        resumed.load_checkpoint(tmp_path, tag=tag)
        assert resumed.train_step(small_batch(3)).metrics["train/kl"] == pytest.approx(
            after_three, rel=1e-6
        )
    finally:
        resumed.shutdown()
    # Without the checkpointed reference the group keeps its initial one: another KL, so the
    # check above sees the checkpointed reference, not the policy's.
    (tmp_path / tag / REFERENCE_STATE_FILE).unlink()
    initial_reference = _group(tiny_policy_dir, zero_stage, 2)
    try:
        initial_reference.load_checkpoint(tmp_path, tag=tag)
        other = initial_reference.train_step(small_batch(3)).metrics["train/kl"]
    finally:
        initial_reference.shutdown()
    assert abs(other - after_three) > 1e-4 * max(other, after_three)
