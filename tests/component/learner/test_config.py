"""`LearnerConfig` validation names the key and the fix; the builder makes a working group."""

from __future__ import annotations

import pytest

from adarl.config.learner import LearnerConfig, PolicyLossConfig, WeightSyncConfig
from adarl.learner import build_learner_group

from .conftest import small_batch


def test_defaults_are_valid() -> None:
    LearnerConfig().validate()


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (LearnerConfig(zero_stage=4), "learner.zero_stage=4"),
        (LearnerConfig(precision="fp16"), "learner.precision='fp16'"),
        (LearnerConfig(max_tokens_per_micro_batch=0), "learner.max_tokens_per_micro_batch"),
        (LearnerConfig(logprob_chunk_tokens=0), "learner.logprob_chunk_tokens=0"),
        (LearnerConfig(loss=PolicyLossConfig(aggregation="mean")), "learner.loss.aggregation"),
        (LearnerConfig(loss=PolicyLossConfig(dual_clip=0.9)), "learner.loss.dual_clip"),
        (
            LearnerConfig(loss=PolicyLossConfig(tis_cap=2.0)),
            "tis_cap needs learner.loss.ratio_reference=learner",
        ),
        (LearnerConfig(loss=PolicyLossConfig(kl_estimator="k4")), "learner.loss.kl_estimator"),
        (
            LearnerConfig(weight_sync=WeightSyncConfig(method="nfs")),
            "learner.weight_sync.method='nfs'",
        ),
    ],
)
def test_invalid_values_name_the_key(config: LearnerConfig, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        config.validate()


@pytest.mark.slow
def test_builder_starts_a_group_from_config(tiny_policy_dir: str) -> None:
    config = LearnerConfig(
        zero_stage=2,
        learning_rate=1e-3,
        max_tokens_per_micro_batch=64,
        logprob_chunk_tokens=3,
        activation_checkpointing=True,
        loss=PolicyLossConfig(aggregation="sequence_mean", ratio_reference="learner", tis_cap=2.0),
    )
    group = build_learner_group(
        config, model_path=tiny_policy_dir, temperature=0.7, in_process=True
    )
    try:
        settings = group.rank0_submit(
            lambda learner: (
                learner.settings.temperature,
                learner.settings.logprob_chunk_tokens,
                learner.settings.activation_checkpointing,
                learner.module.model.layers[0].gradient_checkpointing,
            )
        ).result()
        result = group.train_step(small_batch())
    finally:
        group.shutdown()
    assert settings == (0.7, 3, True, True)
    assert group.max_tokens_per_micro_batch == 64
    assert result.metrics["train/learning_rate"] == pytest.approx(1e-3)
    assert result.metrics["train/ratio_mean"] == pytest.approx(1.0)  # against the learner itself
    assert 0.0 < result.metrics["train/is_weight_mean"] <= 2.0  # TIS is on
