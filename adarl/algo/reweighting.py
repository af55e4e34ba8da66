"""Likelihood-aware reweighting of a group's correct samples, and its one registry.

GRPO-like estimators give every correct sample of a group the same advantage, so the update
reinforces a correct answer in proportion to how likely it already is: the likely ones grow, the
rare ones are left behind and the policy sharpens (arXiv 2506.02355's "rank bias"). The options
here move a group's positive signal toward its less likely correct samples, by their behaviour
log-probs (`GroupInputs.mean_logprobs`: each sample's mean-token log π_behaviour(y|x), the
reference codes' length-normalised log-prob). Each is one function of the kept group and of its
one parameter, and one entry of `POSITIVE_REWEIGHTINGS` (`allocator.group.positive_reweighting`;
its parameter is the `allocator.group` key the entry names), applied at one stage:

    "advantages"  after the estimator, whatever it is (the pooled family with its correction and
                  whole pools included), before the learner: A ← reweight(A)
    "rewards"     before the estimator: r ← reweight(r), then an estimator that reads reward
                  values (`UniformEstimator.real_valued_rewards`: GRPO, Dr. GRPO, RLOO); the
                  labels stay the verifier's (`GroupInputs.verifier_labels`)

**No declared f(p) objective.** The counting identity (★) behind every implied weight needs each
advantage to depend on labels and counts only; these make it depend on the response itself (its
likelihood), so E[ĝ] is the gradient reweighted among the correct responses of a prompt toward
its rare ones, which is not w(p)·∇p in general. The run says so (`NO_OBJECTIVE`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from adarl.algo.advantages import POOL_ADVANTAGE, UNIFORM_ESTIMATORS, GroupInputs

REWEIGHTING_OFF = "none"
REWEIGHT_STAGES = ("advantages", "rewards")
UCPO_MIN_Q = 1e-6  # AnamikaLochab/UCPO clamps q at 1e-6 before 1/q
NO_OBJECTIVE = (
    "declares no f(p) objective: it moves the gradient among a prompt's correct samples by their "
    "likelihood, so E[ĝ] is not w(p)·∇p in general"
)


Apply = Callable[[GroupInputs, np.ndarray, float], np.ndarray]  # (group, values [G], parameter)


@dataclass(frozen=True)
class PositiveReweighting:
    """One registry entry: the reweighting (a function of the kept group, the values it
    reshapes: the advantages or the rewards, `stage`, and its parameter), the name of that
    parameter (the `allocator.group` key that sets it) and its words for the declaration."""

    name: str  # its config name, allocator.group.positive_reweighting
    stage: str  # one of REWEIGHT_STAGES
    parameter: str  # its parameter's name: the allocator.group key, e.g. "ucpo_tau"
    apply: Apply  # (group, values [G], parameter) -> values [G]
    describe: Callable[[float], str]  # what it does, with its parameter's value

    def bind(self, value: float) -> Reweighting:
        """This reweighting at `value` of its parameter: what the group builder applies."""
        return Reweighting(entry=self, value=value)


@dataclass(frozen=True)
class Reweighting:
    """A registry entry bound to its parameter's value (`PositiveReweighting.bind`)."""

    entry: PositiveReweighting
    value: float

    @property
    def stage(self) -> str:
        return self.entry.stage

    def apply(self, group: GroupInputs, values: np.ndarray) -> np.ndarray:  # [G] -> [G]
        return self.entry.apply(group, values, self.value)

    def describe(self) -> str:
        return self.entry.describe(self.value)


POSITIVE_REWEIGHTINGS: dict[str, PositiveReweighting] = {}
"""Every likelihood-aware reweighting by config name (`@positive_reweighting`)."""


def positive_reweighting(
    name: str, *, stage: str, parameter: str, describe: Callable[[float], str]
) -> Callable[[Apply], Apply]:
    """Register the decorated function of (`GroupInputs`, values, parameter) as the
    reweighting `name`, its parameter set by the `allocator.group` key `parameter`."""
    if stage not in REWEIGHT_STAGES:
        raise ValueError(f"stage must be one of {REWEIGHT_STAGES} (got {stage!r})")
    if name == REWEIGHTING_OFF:
        raise ValueError(f"{REWEIGHTING_OFF!r} means no reweighting; pick another name")

    def register(apply: Apply) -> Apply:
        if name in POSITIVE_REWEIGHTINGS:
            raise ValueError(f"positive reweighting {name!r} is registered twice")
        POSITIVE_REWEIGHTINGS[name] = PositiveReweighting(name, stage, parameter, apply, describe)
        return apply

    return register


def reweighting_names() -> tuple[str, ...]:
    """Every value `allocator.group.positive_reweighting` accepts."""
    return (REWEIGHTING_OFF, *POSITIVE_REWEIGHTINGS)


def get_positive_reweighting(name: str, *, advantage: str) -> PositiveReweighting | None:
    """The reweighting `name` to follow `advantage` (None: "none"). A "rewards" one needs an
    estimator that reads reward values; any other pairing, or an unknown name, raises."""
    if name == REWEIGHTING_OFF:
        return None
    if name not in POSITIVE_REWEIGHTINGS:
        raise ValueError(
            f"unknown positive reweighting {name!r}; valid: {', '.join(reweighting_names())}"
        )
    entry = POSITIVE_REWEIGHTINGS[name]
    if entry.stage == "rewards":
        readers = tuple(n for n, e in UNIFORM_ESTIMATORS.items() if e.real_valued_rewards)
        if advantage not in readers:
            composable = [n for n, e in POSITIVE_REWEIGHTINGS.items() if e.stage == "advantages"]
            what = (
                "the pooled family's corrections read labels and counts, not reward values"
                if advantage == POOL_ADVANTAGE
                else f"{advantage!r} reads labels, not reward values"
            )
            raise ValueError(
                f"positive reweighting {name!r} reshapes the rewards an estimator reads, but {what}"
                f"; use it with advantage one of {readers}, or use {composable} (applied to the "
                "advantages of any estimator)"
            )
    return entry


def _check_group(values: np.ndarray, mean_logprobs: np.ndarray | None, name: str) -> np.ndarray:
    if mean_logprobs is None:
        raise ValueError(
            f"{name} needs each sample's behaviour log-prob (GroupInputs.mean_logprobs)"
        )
    logprobs = np.asarray(mean_logprobs, dtype=np.float64)
    if logprobs.shape != values.shape or values.ndim != 1:
        raise ValueError(
            f"{name}: values {values.shape} and mean_logprobs {logprobs.shape} must be one "
            "group [G]"
        )
    if not np.all(np.isfinite(logprobs)):
        raise ValueError(f"{name}: the behaviour log-probs must be finite (got {logprobs})")
    return logprobs


def ucpo_advantages(
    advantages: np.ndarray,  # [G] the estimator's advantages of one kept group
    *,
    mean_logprobs: np.ndarray,  # [G] each sample's mean-token behaviour log-prob
    positive: np.ndarray,  # [G] bool: the correct samples
    tau: float,
) -> np.ndarray:  # [G] float64
    """UCPO (arXiv 2605.00365; AnamikaLochab/UCPO, estimator `iq`,
    `compute_dgrpo_advantage_outcome_invq_l`): among the group's n_c correct samples,

        q_i = softmax_i(ℓ_i),   ℓ_i = mean-token log π_old(y_i),   q_i clamped at 1e-6
        A_i ← (1 - τ)·A_i + τ·S·(1/q_i)/Σ_j(1/q_j),   S = Σ_correct A_j

    so the positive mass S is kept and a share τ of it is moved toward the unlikely correct
    samples (1/q_i ∝ exp(-ℓ_i)); wrong samples and groups with fewer than two correct samples are
    unchanged. For GRPO's equal A_i = A_base this is the reference's A_base·n_c·[(1 - τ)/n_c +
    τ(1/q_i)/Σ_j(1/q_j)]; written with S it applies to any advantage (the pooled family's
    ±n/n±, W-REINFORCE's λ). τ = 0 is off, τ = 1 all of S by 1/q. The reference runs τ = 0.2.
    """
    values = np.asarray(advantages, dtype=np.float64)
    logprobs = _check_group(values, mean_logprobs, "UCPO")
    if not 0.0 <= tau <= 1.0:
        raise ValueError(f"UCPO's tau must be in [0, 1] (got {tau}); the paper uses 0.2")
    correct = np.flatnonzero(np.asarray(positive, dtype=bool))
    out = values.copy()
    if correct.size < 2 or tau == 0.0:
        return out
    scaled = logprobs[correct]
    log_q = scaled - (scaled.max() + np.log(np.exp(scaled - scaled.max()).sum()))
    inverse = 1.0 / np.maximum(np.exp(log_q), UCPO_MIN_Q)
    mass = values[correct].sum()
    out[correct] = (1.0 - tau) * values[correct] + tau * mass * inverse / inverse.sum()
    return out


@positive_reweighting(
    "ucpo",
    stage="advantages",
    parameter="ucpo_tau",
    describe=lambda tau: (
        f"UCPO (τ = {tau:g}) moves a share τ of each group's positive advantage "
        "toward its less likely correct samples (by 1/softmax of their mean-token behaviour "
        "log-probs), the positive mass kept"
    ),
)
def _ucpo(group: GroupInputs, advantages: np.ndarray, tau: float) -> np.ndarray:
    return ucpo_advantages(
        advantages,
        mean_logprobs=group.mean_logprobs,  # type: ignore[arg-type]  # checked there
        positive=group.labels,
        tau=tau,
    )


def unlikeliness_rewards(
    rewards: np.ndarray,  # [G] the group's rewards
    *,
    mean_logprobs: np.ndarray,  # [G] each sample's mean-token behaviour log-prob
    beta: float,
) -> np.ndarray:  # [G] float64
    """The unlikeliness reward (He, Fried & Welleck 2025, arXiv 2506.02355; AndreHe02/rewarding-
    unlikely-release, `RayLeanTrainer._compute_advantages` with `lean.rank_penalty` = β = 0.25):

        r_i ← r_i·(1 - β·rank_i/G),   rank_i ∈ {0..G-1} by ascending ℓ_i (0 = least likely)

    ℓ_i the mean-token behaviour log-prob, ranked among all G samples of the group; then GRPO on
    the reshaped rewards. A wrong sample's reward (0) stays 0; among the correct ones the rarest
    keeps its reward and each likelier one loses β/G per rank, so rarer correct samples get the
    larger advantage. Choices, from the reference code (the paper's text was not retrieved; MATH.md
    wrote r_i(1 - β·rank_i), a third-party reimplementation r_i(1 + β·rank/G) with rank 0 = most
    likely): the rank is divided by G, which keeps every reward in [1 - β(G-1)/G, 1]·r for any
    group size (without it β = 0.25 would make a correct sample's reward negative from rank 5 of
    8 on); ℓ is the mean-token log-prob (the reference's masked mean), not the summed one, so a
    longer answer is not "unlikely" for its length alone; ties rank in sampling order (the
    reference's argsort leaves them to the device).
    """
    values = np.asarray(rewards, dtype=np.float64)
    logprobs = _check_group(values, mean_logprobs, "the unlikeliness reward")
    if not 0.0 <= beta <= 1.0:
        raise ValueError(
            f"the unlikeliness reward's beta must be in [0, 1] (got {beta}); paper: 0.25"
        )
    order = np.argsort(logprobs, kind="stable")  # least likely first
    rank = np.empty(values.size, dtype=np.float64)
    rank[order] = np.arange(values.size)
    return values * (1.0 - beta * rank / values.size)


@positive_reweighting(
    "unlikeliness",
    stage="rewards",
    parameter="unlikeliness_beta",
    describe=lambda beta: (
        f"the unlikeliness reward (β = {beta:g}) lowers each correct "
        "sample's reward by its likelihood rank in the group, r(1 - β·rank/G) with rank 0 the "
        "least likely (mean-token behaviour log-prob), before the estimator"
    ),
)
def _unlikeliness(group: GroupInputs, rewards: np.ndarray, beta: float) -> np.ndarray:
    return unlikeliness_rewards(
        rewards,
        mean_logprobs=group.mean_logprobs,  # type: ignore[arg-type]  # checked there
        beta=beta,
    )
