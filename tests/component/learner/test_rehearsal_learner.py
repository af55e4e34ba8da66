"""DPH-RL's rehearsal rows in the learner: the registry builds the rehearsal term for
`allocator.rehearsal.enabled` (for the rows the allocator's store lays out under its name), the
frozen reference is loaded for it without a KL term, and training steps (one, or mini-batches of
whole groups) equal the textbook steps of test_learner.py's reference, whose `policy_loss` gets
the term, its rows, the log-probs of a frozen copy of the initial policy and the (mini-)batch's
counts of its rows."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from adarl.allocator.rehearsal import REHEARSAL_TERM
from adarl.config.allocator import RehearsalConfig
from adarl.config.learner import LearnerConfig, PolicyLossConfig
from adarl.learner import LearnerGroup
from adarl.learner.batching import split_mini_batches
from adarl.learner.loss_terms import build_loss_terms
from adarl.learner.synthetic import concatenate, synthetic_train_batch
from adarl.models.tokenizer import build_char_tokenizer
from adarl.types import TrainBatch

from .conftest import small_batch
from .test_learner import (
    ADAM_EPS,
    LR,
    MAX_GRAD_NORM,
    _plain_reference_steps,
    comparable,
    relative_error,
)

pytestmark = pytest.mark.slow

# Large enough that the term moves the weights far beyond the comparison's tolerance.
ETA = 2.0
LOSS = PolicyLossConfig(clip_low=0.2, clip_high=0.28, rehearsal_coef=ETA)
TERMS = build_loss_terms(LearnerConfig(loss=LOSS), rehearsal=RehearsalConfig(enabled=True))


def batch_with_rehearsal(seed: int) -> TrainBatch:
    """small_batch's 3 groups of 4, then 3 rehearsal rows (groups 3-5 of one row each, their
    advantages 0), laid out as TrainBatch.from_groups lays them out."""
    stored = synthetic_train_batch(
        num_prompts=3,
        samples_per_prompt=1,
        prompt_length=(3, 6),
        response_length=(2, 10),
        vocab_size=len(build_char_tokenizer()),
        seed=100 + seed,
    )
    stored.term_rows = {REHEARSAL_TERM: torch.ones(stored.num_sequences, dtype=torch.bool)}
    return concatenate([small_batch(seed), stored])


@pytest.mark.parametrize("mini_batches", [1, 2])
def test_rehearsal_steps_equal_the_textbook_steps(tiny_policy_dir: str, mini_batches: int) -> None:
    batches = [batch_with_rehearsal(seed) for seed in range(3)]
    plain = [mini for batch in batches for mini in split_mini_batches(batch, mini_batches)]
    expected_norms, expected = _plain_reference_steps(tiny_policy_dir, plain, LOSS)
    no_term = dataclasses.replace(LOSS, rehearsal_coef=0.0)
    _, without_term = _plain_reference_steps(tiny_policy_dir, plain, no_term)
    group = LearnerGroup(
        in_process=True,
        model_path=tiny_policy_dir,
        zero_stage=1,
        learning_rate=LR,
        adam_eps=ADAM_EPS,
        max_grad_norm=MAX_GRAD_NORM,
        max_tokens_per_micro_batch=40,  # micro-batches: the term's shares add up
        loss=LOSS,  # kl_coef = 0: the reference is loaded for the rehearsal rows alone
        mini_batches_per_step=mini_batches,
        terms=TERMS,
    )
    try:
        results = [group.train_step(batch) for batch in batches]
        weights = group.get_weights()
    finally:
        group.shutdown()
    steps = [expected_norms[k : k + mini_batches] for k in range(0, len(plain), mini_batches)]
    for result, norms in zip(results, steps, strict=True):
        assert result.grad_norm == pytest.approx(sum(norms) / len(norms), rel=1e-5)
        assert result.metrics["train/rehearsal_rows"] == 3.0
        assert result.metrics["train/sequences"] == 12.0  # the groups' rows only
    # The first optimizer step's policy is the reference (term 0); later ones have moved away
    # (with two mini-batches, the first training step's second optimizer step already has).
    first = results[0].metrics["train/rehearsal_kl"]
    assert first == pytest.approx(0.0, abs=1e-6) if mini_batches == 1 else first > 1e-6
    assert results[2].metrics["train/rehearsal_kl"] > 1e-4
    for name, tensor in comparable(weights).items():
        assert relative_error(tensor, expected[name]) < 1e-5, name
    # ...and the term mattered: without it the weights end elsewhere.
    assert relative_error(without_term["lm_head.weight"], expected["lm_head.weight"]) > 1e-3


def test_the_store_s_rows_are_the_rehearsal_term_s() -> None:
    assert [term.name for term in TERMS] == ["entropy", REHEARSAL_TERM]
    assert TERMS[1].needs.reference and TERMS[1].needs.owns_rows
    assert REHEARSAL_TERM not in [t.name for t in build_loss_terms(LearnerConfig(loss=LOSS))]


def test_rehearsal_rows_need_their_term(tiny_policy_dir: str) -> None:
    group = LearnerGroup(in_process=True, model_path=tiny_policy_dir, zero_stage=1, loss=LOSS)
    try:
        with pytest.raises(RuntimeError, match="'rehearsal' but this learner has no such term"):
            group.train_step(batch_with_rehearsal(0))
    finally:
        group.shutdown()
