"""`read_policy_weights`: the policy's weights read from a learner checkpoint's files, no
learner built, what `python -m adarl.export` writes. At every ZeRO stage and precision the
weights read must be exactly those of the learner that saved them (at ZeRO-3 DeepSpeed's
zero_to_fp32 rebuilds them from the fp32 partitions, which must round to the same bf16
weights), and a directory with no checkpoint is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from adarl.config.learner import PolicyLossConfig
from adarl.learner import LearnerGroup
from adarl.learner.checkpoint import read_policy_weights

from .conftest import small_batch


def _group(path: str, zero_stage: int, precision: str) -> LearnerGroup:
    return LearnerGroup(
        in_process=True,
        model_path=path,
        zero_stage=zero_stage,
        precision=precision,
        learning_rate=1e-2,  # steps large enough to move every weight away from the initial ones
        loss=PolicyLossConfig(ratio_reference="learner"),
    )


@pytest.mark.slow
@pytest.mark.parametrize(("zero_stage", "precision"), [(1, "fp32"), (3, "fp32"), (3, "bf16")])
def test_the_weights_read_are_the_saved_learners(
    tiny_policy_dir: str, tmp_path: Path, zero_stage: int, precision: str
) -> None:
    trained = _group(tiny_policy_dir, zero_stage, precision)
    try:
        initial = trained.get_weights()
        for seed in range(2):
            trained.train_step(small_batch(seed))
        trained.save_checkpoint(tmp_path / "learner")
        saved = trained.get_weights()
    finally:
        trained.shutdown()
    assert any(not torch.equal(initial[name], saved[name]) for name in saved)

    loaded = read_policy_weights(tmp_path / "learner")
    with pytest.raises(FileNotFoundError, match="latest"):
        read_policy_weights(tmp_path)  # no DeepSpeed checkpoint here
    assert loaded.keys() >= saved.keys()  # tied weights under each name
    for name, tensor in saved.items():
        assert loaded[name].dtype == tensor.dtype, name
        assert torch.equal(loaded[name], tensor), name
