"""Mini-batch updates: a training step is E passes over its batch cut into M mini-batches of whole
groups, one optimizer step each (learner.mini_batches_per_step, learner.epochs_per_step).

The reference is the textbook one of test_learner.py, stepping on each mini-batch in turn with
the mini-batch's own normalisers; with ratio_reference "learner", π_old is the weights the step
started from, i.e. the behaviour log-probs replaced by the learner's scores before the step.
"""

from __future__ import annotations

import pytest

from adarl.config.learner import PolicyLossConfig
from adarl.learner import LearnerGroup
from adarl.learner.batching import split_mini_batches
from adarl.learner.synthetic import synthetic_train_batch, with_behaviour_logprobs
from adarl.models.tokenizer import build_char_tokenizer
from adarl.types import TrainBatch

from .test_learner import (
    ADAM_EPS,
    LR,
    MAX_GRAD_NORM,
    _plain_reference_steps,
    comparable,
    relative_error,
)

pytestmark = pytest.mark.slow


def batch_of_groups(seed: int) -> TrainBatch:
    """6 prompts × 3 samples: mini-batches of 3, 2 or 1 group(s)."""
    return synthetic_train_batch(
        num_prompts=6,
        samples_per_prompt=3,
        prompt_length=(3, 6),
        response_length=(2, 10),
        vocab_size=len(build_char_tokenizer()),
        seed=seed,
    )


def _group(model_dir: str, *, mini_batches: int, epochs: int, loss: PolicyLossConfig):
    return LearnerGroup(
        in_process=True,
        model_path=model_dir,
        zero_stage=1,
        learning_rate=LR,
        adam_eps=ADAM_EPS,
        max_grad_norm=MAX_GRAD_NORM,
        max_tokens_per_micro_batch=40,  # several micro-batches per mini-batch
        loss=loss,
        mini_batches_per_step=mini_batches,
        epochs_per_step=epochs,
    )


def test_each_mini_batch_is_one_textbook_step(tiny_policy_dir: str) -> None:
    loss = PolicyLossConfig(aggregation="token_mean", clip_low=0.2, clip_high=0.28)
    batches = [batch_of_groups(seed) for seed in (0, 1)]
    # Two training steps of 3 mini-batches × 2 epochs: the textbook steps on each mini-batch of
    # the first batch twice, then on the second's.
    plain = [mini for batch in batches for _ in range(2) for mini in split_mini_batches(batch, 3)]
    expected_norms, expected_weights = _plain_reference_steps(tiny_policy_dir, plain, loss)
    group = _group(tiny_policy_dir, mini_batches=3, epochs=2, loss=loss)
    try:
        results = [group.train_step(batch) for batch in batches]
        weights = group.get_weights()
    finally:
        group.shutdown()
    assert [r.metrics["train/optimizer_steps"] for r in results] == [6.0, 6.0]
    assert [r.weight_version.version for r in results] == [1, 2]  # one version per training step
    for result, norms in zip(results, (expected_norms[:6], expected_norms[6:]), strict=True):
        assert result.grad_norm == pytest.approx(sum(norms) / 6, rel=1e-5)
    for name, tensor in comparable(weights).items():
        assert relative_error(tensor, expected_weights[name]) < 1e-5, name


def test_a_learner_ratio_is_taken_against_the_weights_the_step_started_from(
    tiny_policy_dir: str,
) -> None:
    """ratio_reference "learner" with 2 mini-batches = ratio_reference "behaviour" on the same
    batch whose behaviour log-probs are the learner's scores before the step; and the first
    optimizer step of either is on-policy (ratio 1, no engine mismatch)."""
    batch = batch_of_groups(seed=3)
    runs = {}
    for reference in ("learner", "behaviour"):
        group = _group(
            tiny_policy_dir,
            mini_batches=2,
            epochs=1,
            loss=PolicyLossConfig(ratio_reference=reference, clip_low=0.2, clip_high=0.28),
        )
        try:
            start = group.score(batch)
            given = batch if reference == "learner" else with_behaviour_logprobs(batch, start)
            result = group.train_step(given)
            runs[reference] = (result.metrics, group.get_weights())
        finally:
            group.shutdown()
    (learner_metrics, learner_weights), (behaviour_metrics, behaviour_weights) = runs.values()
    for name, tensor in comparable(learner_weights).items():
        assert relative_error(tensor, behaviour_weights[name]) < 1e-6, name
    assert behaviour_metrics["train/mismatch_kl"] == pytest.approx(0.0, abs=1e-9)
    # Mean of the two steps' token-mean ratios: 1 at the first, off 1 at the second (it moved).
    assert learner_metrics["train/ratio_mean"] != pytest.approx(1.0, abs=1e-4)
    assert learner_metrics["train/ratio_mean"] == pytest.approx(
        behaviour_metrics["train/ratio_mean"], rel=1e-6
    )
