"""The learner's terms in a run's declaration: each term built from config (adarl/learner/
loss_terms.py, the registry) writes its own line (`LossTerm.declare`), which appears when its
term is on, and only then; `declare_learner_terms` adds the mini-batch updates."""

from __future__ import annotations

import dataclasses

import pytest

from adarl.allocator.objective import declare_objective
from adarl.config.allocator import AllocatorConfig, RehearsalConfig
from adarl.config.learner import LearnerConfig, PolicyLossConfig
from adarl.learner.loss_terms import build_loss_terms, declare_learner_terms

# The one phrase that names each term's line.
TERMS = {
    "kl": "KL anchor",
    "simko": "SimKO",
    "rehearsal": "DPH-RL rehearsal",
    "entropy": "entropy term",
    "mini_batches": "mini-batch updates",
}


def _settings(term: str) -> tuple[LearnerConfig, RehearsalConfig]:
    """A learner (and rehearsal) config with only `term` on."""
    learner, rehearsal = LearnerConfig(), RehearsalConfig()
    if term == "kl":
        learner.loss = PolicyLossConfig(kl_coef=0.1)
    elif term == "simko":
        learner.loss = PolicyLossConfig(simko_alpha=0.01)
    elif term == "rehearsal":
        rehearsal = RehearsalConfig(enabled=True)
    elif term == "entropy":
        learner.loss = PolicyLossConfig(entropy_coef=0.001)
    elif term == "mini_batches":
        learner.mini_batches_per_step = 4
    return learner, rehearsal


def _declare(learner: LearnerConfig, rehearsal: RehearsalConfig | None = None) -> tuple[str, ...]:
    return declare_learner_terms(learner, build_loss_terms(learner, rehearsal=rehearsal))


def test_nothing_is_declared_for_one_plain_clipped_step() -> None:
    assert _declare(LearnerConfig(), RehearsalConfig()) == ()


@pytest.mark.parametrize("term", list(TERMS))
def test_each_term_is_declared_when_set_and_not_otherwise(term: str) -> None:
    learner, rehearsal = _settings(term)
    (line,) = _declare(learner, rehearsal)
    assert TERMS[term] in line
    assert not [other for key, other in TERMS.items() if key != term and other in line]


def test_the_lines_say_what_each_term_optimises() -> None:
    learner = LearnerConfig(
        mini_batches_per_step=2,
        epochs_per_step=3,
        reference_model="/models/base",
        loss=PolicyLossConfig(
            kl_coef=0.1, kl_estimator="k2", simko_alpha=0.01, rehearsal_coef=0.03
        ),
    )
    learner.reference_reset_every_steps = 50
    kl, simko, rehearsal, mini = _declare(
        learner, RehearsalConfig(enabled=True, min_samples=8, per_step=16)
    )
    assert "0.1·KL(π_θ ‖ π_ref)" in kl and "k2" in kl and "/models/base" in kl
    assert "reset to the current policy every 50 training steps" in kl
    assert "declares no f(p) objective: moves probability to the top-K candidates" in simko
    assert "0.03·KL(π_ref ‖ π_θ)" in rehearsal and "≥ 8 samples" in rehearsal
    assert "declares no f(p) objective" in rehearsal
    assert "(2 mini-batches × 3 epochs per training step)" in mini
    assert "first mini-batch: the declared objective; later ones: clipped" in mini
    # Epochs alone are several optimizer steps too.
    only_epochs = dataclasses.replace(LearnerConfig(), epochs_per_step=2)
    assert "(1 mini-batch × 2 epochs" in _declare(only_epochs)[0]


def test_the_declaration_carries_the_learner_terms_to_the_console_and_the_summary() -> None:
    allocator = AllocatorConfig(rehearsal=RehearsalConfig(enabled=True))
    plain = declare_objective(allocator.plan())
    assert plain.learner_terms == () and plain.to_json()["learner_terms"] == []
    learner = LearnerConfig(loss=PolicyLossConfig(kl_coef=0.1))
    declared = declare_objective(
        allocator.plan(), learner_terms=_declare(learner, allocator.rehearsal)
    )
    kl, rehearsal = declared.learner_terms
    assert "KL anchor" in kl and "DPH-RL rehearsal" in rehearsal
    assert declared.to_json()["learner_terms"] == [kl, rehearsal]
    first, *rest = declared.console().splitlines()
    assert first.startswith("this run optimises ") and first == plain.console()
    assert rest == [f"  learner: {kl}", f"  learner: {rehearsal}"]
