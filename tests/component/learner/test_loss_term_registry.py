"""The loss-term registry (adarl/learner/loss_terms.py): a new term is its component, its key on
the loss config and its builder, nothing else. The last test adds one here only, an SFT-style
pull on the policy's own samples, and the config accepts its key (and refuses a misspelt one),
the learner trains it through the real loss (its value adds up in `train/loss`, and it moves
the weights), and the run declares it."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError

from adarl.algo.loss import LossInputs, PolicyTokens, Surrogate, TermNeeds, TermValue
from adarl.allocator.objective import declare_objective
from adarl.config.allocator import AllocatorConfig, RehearsalConfig
from adarl.config.learner import LearnerConfig, PolicyLossConfig
from adarl.learner import LearnerGroup
from adarl.learner.loss_terms import (
    LOSS_TERMS,
    build_loss_terms,
    declare_learner_terms,
    loss_term,
)

from .conftest import small_batch


def test_the_registry_holds_what_adarl_ships_in_the_order_the_loss_adds_them() -> None:
    assert list(LOSS_TERMS) == ["kl_anchor", "simko", "entropy", "rehearsal"]
    everything = LearnerConfig(loss=PolicyLossConfig(kl_coef=0.1, simko_alpha=0.01))
    terms = build_loss_terms(everything, rehearsal=RehearsalConfig(enabled=True))
    assert [term.name for term in terms] == list(LOSS_TERMS)
    # A default run: the entropy term alone, logged only, which adds no declared line.
    (entropy,) = build_loss_terms(LearnerConfig())
    assert entropy.name == "entropy" and entropy.declare() is None
    assert not entropy.needs.entropy_grad and not entropy.needs.reference
    with pytest.raises(ValueError, match="registered twice"):
        loss_term("entropy")(LOSS_TERMS["entropy"])


# -- a term added here only -------------------------------------------------------------------


@dataclass(frozen=True)
class SamplePull:
    """+ν·Agg_t[-log π_θ(y_t)]: the negative log-likelihood of the policy's own samples (an SFT
    loss on them), ν = `coef`."""

    coef: float
    name: str = "sample_pull"

    @property
    def needs(self) -> TermNeeds:
        return TermNeeds()

    def shape(
        self, surrogate: Surrogate, inputs: LossInputs, tokens: PolicyTokens
    ) -> tuple[Surrogate, dict[str, float]]:
        return surrogate, {}

    def add(self, inputs: LossInputs, tokens: PolicyTokens) -> TermValue:
        nll = tokens.agg(-inputs.logprobs)
        value = float(nll.detach())
        return TermValue(
            self.coef * nll, {"train/sample_nll": value, "train/sample_pull": self.coef * value}
        )

    def declare(self) -> str:
        return f"sample pull: plus {self.coef:g}·NLL of the policy's samples: declares no f(p)"


@dataclass
class LossWithPull(PolicyLossConfig):
    """The loss config with the term's key, as its field would be added to PolicyLossConfig."""

    sample_pull_coef: float = 0.0


@pytest.mark.usefixtures("registries")
def test_a_new_term_is_its_component_its_key_and_its_builder(tiny_policy_dir: str) -> None:
    @loss_term("sample_pull")
    def _build(learner: LearnerConfig, rehearsal: RehearsalConfig) -> SamplePull | None:
        coef = getattr(learner.loss, "sample_pull_coef", 0.0)
        return SamplePull(coef=coef) if coef > 0 else None

    # The config accepts its key, through the structured schema, and refuses a misspelt one.
    schema = OmegaConf.structured(LearnerConfig(loss=LossWithPull()))
    config = OmegaConf.to_object(
        OmegaConf.merge(schema, OmegaConf.from_dotlist(["loss.sample_pull_coef=0.5"]))
    )
    assert isinstance(config, LearnerConfig) and config.loss.sample_pull_coef == 0.5  # type: ignore[attr-defined]
    with pytest.raises(ConfigKeyError, match="sample_pull_coeff"):
        OmegaConf.merge(schema, OmegaConf.from_dotlist(["loss.sample_pull_coeff=0.5"]))
    terms = build_loss_terms(config)
    assert [term.name for term in terms] == ["entropy", "sample_pull"]
    assert build_loss_terms(LearnerConfig(loss=LossWithPull())) == terms[:1]  # off at 0

    # Declared: its own line, in the run's declaration.
    lines = declare_learner_terms(config, terms)
    assert lines == ("sample pull: plus 0.5·NLL of the policy's samples: declares no f(p)",)
    declaration = declare_objective(AllocatorConfig().plan(), learner_terms=lines)
    assert declaration.console().splitlines()[1:] == [f"  learner: {lines[0]}"]

    # Trained by the real learner through the real loss, with nothing else written for it.
    results, weights = {}, {}
    for name, with_term in (("with", terms), ("without", terms[:1])):
        group = LearnerGroup(
            in_process=True, model_path=tiny_policy_dir, learning_rate=1e-2, terms=with_term
        )
        try:
            results[name] = group.train_step(small_batch(seed=2)).metrics
            weights[name] = group.get_weights()
        finally:
            group.shutdown()
    metrics = results["with"]
    assert metrics["train/sample_nll"] > 0  # -log π of sampled tokens
    assert metrics["train/sample_pull"] == pytest.approx(0.5 * metrics["train/sample_nll"])
    parts = metrics["train/policy_loss"] + metrics["train/entropy_loss"]
    assert metrics["train/loss"] == pytest.approx(parts + metrics["train/sample_pull"], rel=1e-6)
    assert "train/sample_nll" not in results["without"]
    moved = [
        float((weights["with"][name] - weights["without"][name]).abs().max())
        for name in weights["with"]
    ]
    assert max(moved) > 1e-4  # the term changed the update
