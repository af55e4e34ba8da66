"""The registry of loss terms: each term built once from config, in the order the loss runs them.

`LOSS_TERMS` maps a term's name to its builder, a function of the learner's config (and DPH-RL's
`allocator.rehearsal`, whose store feeds the rehearsal term) that returns the term
(`adarl.algo.loss_terms`) or None when its keys leave it off. `build_loss_terms` runs every
builder; the learners train with the result (`Learner(terms=...)`, adarl/learner/build.py), and
the run's start-up declaration prints each term's own line (`declare_learner_terms`).

Adding a term is three files and its test: its component (a frozen record with `needs`,
`shape`/`add` and `declare`, adarl/algo/loss_terms.py), its keys on `PolicyLossConfig`
(adarl/config/learner.py, documented and validated there), and its builder here, registered with
`@loss_term`. Nothing else names it: the learner reads what to load and compute from the terms'
`needs` (a reference model, the entropy's gradient, the top-K log-probs), a term that trains
rows of its own finds them in `TrainBatch.term_rows` under its name, and the learner group
reports each such row set (`train/<name>_rows`).
tests/component/learner/test_loss_term_registry.py adds one inside the test.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from adarl.algo.loss import LossTerm
from adarl.algo.loss_terms import Entropy, KLAnchor, Rehearsal, SimKO
from adarl.config.allocator import RehearsalConfig
from adarl.config.learner import LearnerConfig

TermBuilder = Callable[[LearnerConfig, RehearsalConfig], LossTerm | None]

LOSS_TERMS: dict[str, TermBuilder] = {}
"""Every loss term's builder by name, in the order the loss runs them (`@loss_term`)."""


def loss_term(name: str) -> Callable[[TermBuilder], TermBuilder]:
    """Register the decorated builder as the term `name` (it must build terms of that name)."""

    def register(build: TermBuilder) -> TermBuilder:
        if name in LOSS_TERMS:
            raise ValueError(f"loss term {name!r} is registered twice")
        LOSS_TERMS[name] = build
        return build

    return register


def build_loss_terms(
    learner: LearnerConfig, *, rehearsal: RehearsalConfig | None = None
) -> tuple[LossTerm, ...]:
    """The terms `learner` (and `rehearsal`, DPH-RL's store: off by default) turn on, in
    registry order."""
    rehearsal = rehearsal if rehearsal is not None else RehearsalConfig()
    terms = []
    for name, build in LOSS_TERMS.items():
        term = build(learner, rehearsal)
        if term is None:
            continue
        if term.name != name:
            raise ValueError(f"the builder of loss term {name!r} built {term.name!r}")
        terms.append(term)
    return tuple(terms)


def declare_learner_terms(learner: LearnerConfig, terms: Sequence[LossTerm]) -> tuple[str, ...]:
    """What the learner adds to the declared objective, one line per term that adds something,
    then its mini-batch updates (none for the plain clipped surrogate of one optimizer step per
    training step)."""
    lines = [line for line in (term.declare() for term in terms) if line is not None]
    mini, epochs = learner.mini_batches_per_step, learner.epochs_per_step
    if mini > 1 or epochs > 1:
        lines.append(
            f"mini-batch updates ({mini} mini-batch{'es' if mini > 1 else ''} × {epochs} "
            f"epoch{'s' if epochs > 1 else ''} per training step): first mini-batch: the declared "
            "objective; later ones: clipped off-policy steps of it (docs/algorithms.md §14.1)"
        )
    return tuple(lines)


@loss_term("kl_anchor")
def _kl_anchor(learner: LearnerConfig, rehearsal: RehearsalConfig) -> KLAnchor | None:
    loss = learner.loss
    if not loss.kl_coef > 0:
        return None
    return KLAnchor(
        coef=loss.kl_coef,
        estimator=loss.kl_estimator,  # type: ignore[arg-type]  # validated by the config
        reference=learner.reference_model or "the initial policy",
        reset_every_steps=learner.reference_reset_every_steps,
    )


@loss_term("simko")
def _simko(learner: LearnerConfig, rehearsal: RehearsalConfig) -> SimKO | None:
    loss = learner.loss
    if not loss.simko_alpha > 0:
        return None
    return SimKO(
        alpha=loss.simko_alpha,
        top_k=loss.simko_top_k,
        entropy_quantile=loss.simko_entropy_quantile,
        negative_scale=loss.simko_negative_scale,
    )


@loss_term("entropy")
def _entropy(learner: LearnerConfig, rehearsal: RehearsalConfig) -> Entropy:
    return Entropy(coef=learner.loss.entropy_coef)  # with coefficient 0: logged only


@loss_term("rehearsal")
def _rehearsal(learner: LearnerConfig, rehearsal: RehearsalConfig) -> Rehearsal | None:
    if not rehearsal.enabled:
        return None
    return Rehearsal(
        coef=learner.loss.rehearsal_coef,
        rows_per_step=rehearsal.per_step,
        min_samples=rehearsal.min_samples,
        reference=learner.reference_model or "the base",
    )
