"""The group builder: a prompt's pool ─► downsample to n ─► correction ─► advantages ─► `Group`.

Only `adarl.algo` decides anything numeric here; this module chooses which function to call and
wraps the result in the typed record the learner consumes (`TrainBatch.from_groups`).

Two families of advantage, picked by `advantage`:

* `pool` (Reinforce-Ada): `selection.downsample_and_correct`: a balanced group of n from the
  whole pool, advantages from the pool baseline p̃ under `correction` (`none` is the released
  script's A = r - p̃; `selection` makes the group estimate w(p̃)∇p for the declared objective).
  With `group_size=None` the whole pool of N is trained on instead (no sample discarded): the
  pool is the group, its advantages are scaled by n/N and each of its sequences counts n/N in the
  loss normalisers (`Group.sequence_weight`, n = `pool_weight`), so every prompt weighs what
  a kept group of n would and the declared objective is unchanged (the selection correction is
  unbiased for any kept split).
* a uniform-group estimator, any name of `adarl.algo.advantages.UNIFORM_ESTIMATORS`, applied to
  the kept group: the builder hands it one `GroupInputs` record (the kept rewards, the labels'
  threshold, k = `objective_k`, the prompt's pass-rate estimate from earlier steps, the sampler's
  estimate, the pool weight, the run's `AdvantageOptions`) and the estimator reads what it needs;
  with `focal_gamma` > 0 a group-relative one is multiplied by F-GRPO's (1 - p̂)^γ. A pool larger
  than n is first cut to n by the same balanced downsample, which changes what these estimators
  estimate: use them with samplers whose pool is the group (uniform, dynamic filter, knapsack).

The pool's pass rate p̃ in "pool" advantages is, by default (`pass_rate_estimate="unbiased"`), the
estimate that is exactly unbiased under the sampler's real draws (`adarl.algo.drawing.
unbiased_pass_rate`, given the sampler's `SequentialLaw`), not the pool mean N⁺/N, which a stopping
rule biases (`pass_rate_estimate="pool"`, the released code).

Either family may be followed by a likelihood-aware reweighting of the positives
(`positive_reweighting`, one of `adarl.algo.reweighting.POSITIVE_REWEIGHTINGS`), which reads the
kept samples' behaviour log-probs: UCPO reshapes the advantages of any estimator, the unlikeliness
reward the rewards a real-valued estimator reads.

With a `CoveragePhase`, every step that starts before its number of training rollouts were
observed (the allocator's count, `rollouts_before`) is built by the phase's own builder (a coverage
objective or estimator), every later one by this one.

Unresolved prompts follow `unresolved_policy` in both families (`selection.UnresolvedPolicy`).
Random downsampling is seeded from (seed, step, prompt id): no RNG state to checkpoint, and a
resumed run picks the same samples.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from adarl.algo.advantages import (
    PKPO_BASELINES,
    POOL_ADVANTAGE,
    RAFT_NORMALIZATIONS,
    W_REINFORCE_LAMBDA,
    AdvantageOptions,
    GroupInputs,
    get_uniform_estimator,
    group_relative_estimators,
)
from adarl.algo.drawing import unbiased_pass_rate
from adarl.algo.objectives import check_objective_k
from adarl.algo.reweighting import REWEIGHTING_OFF, get_positive_reweighting
from adarl.algo.selection import (
    Correction,
    DownsampleOrder,
    UnresolvedPolicy,
    balanced_downsample,
    downsample_and_correct,
    positive_mask,
)
from adarl.allocator.samplers.base import SequentialLaw, derive_seed
from adarl.types import Group, ScoredRollout


@dataclass(frozen=True)
class CoveragePhase:
    """Coverage first, accuracy after: `builder` builds the groups of every step that starts
    before `rollouts` training rollouts were observed (the allocator counts them), the run's own
    builder every step after (docs/algorithms.md §14)."""

    rollouts: int
    builder: GroupBuilder


class GroupBuilder:
    """Turns one prompt's pool of scored rollouts into its training `Group` (or None)."""

    def __init__(
        self,
        *,
        group_size: int | None,
        advantage: str = POOL_ADVANTAGE,
        correction: Correction | str = Correction.NONE,
        objective: str = "log",
        alpha: float = 0.5,
        objective_k: int = 8,
        focal_gamma: float = 0.0,
        pkpo_baseline: str = "loo_minus_one",
        unresolved_policy: UnresolvedPolicy | str = UnresolvedPolicy.KEEP_AVAILABLE,
        downsample_order: DownsampleOrder | str = DownsampleOrder.RANDOM,
        raft_normalization: str = "group",
        positive_threshold: float = 0.5,
        clip_delta: float = 1e-3,
        ada_est_eps: float = 0.05,
        pass_rate_estimate: str = "unbiased",
        pool_weight: int = 4,
        w_reinforce_lambda: float = W_REINFORCE_LAMBDA,
        positive_reweighting: str = REWEIGHTING_OFF,
        ucpo_tau: float = 0.2,
        unlikeliness_beta: float = 0.25,
        coverage_phase: CoveragePhase | None = None,
        seed: int = 0,
    ) -> None:
        if group_size is not None and group_size < 1:
            raise ValueError(
                f"group_size must be >= 1 or None (keep whole pools), got {group_size}"
            )
        self.group_size = group_size
        self.advantage = advantage
        # None: the pooled family (selection.downsample_and_correct); else the registry's entry
        self.estimator = None if advantage == POOL_ADVANTAGE else get_uniform_estimator(advantage)
        self.correction = Correction(correction)
        self.objective = objective
        self.alpha = alpha
        self.objective_k = check_objective_k(objective_k)
        if not (np.isfinite(focal_gamma) and focal_gamma >= 0):
            raise ValueError(f"focal_gamma must be >= 0 (0 = off), got {focal_gamma}")
        if focal_gamma > 0 and (self.estimator is None or not self.estimator.group_relative):
            raise ValueError(
                f"focal_gamma={focal_gamma} (F-GRPO) applies to the group-relative advantages "
                f"{list(group_relative_estimators())}, not {advantage!r}"
            )
        if pkpo_baseline not in PKPO_BASELINES:
            raise ValueError(
                f"pkpo_baseline must be one of {PKPO_BASELINES}, got {pkpo_baseline!r}"
            )
        self.unresolved_policy = UnresolvedPolicy(unresolved_policy)
        self.downsample_order = DownsampleOrder(downsample_order)
        if raft_normalization not in RAFT_NORMALIZATIONS:
            raise ValueError(
                f"raft_normalization must be one of {RAFT_NORMALIZATIONS}, got "
                f"{raft_normalization!r}"
            )
        self.positive_threshold = positive_threshold
        self.clip_delta = clip_delta
        if pass_rate_estimate not in ("unbiased", "pool"):
            raise ValueError(
                f"pass_rate_estimate must be 'unbiased' or 'pool', got {pass_rate_estimate!r}"
            )
        self.pass_rate_estimate = pass_rate_estimate
        if pool_weight < 1:
            raise ValueError(f"pool_weight must be >= 1, got {pool_weight}")
        self.pool_weight = pool_weight
        # the uniform estimators' parameters, as every group hands them over
        self.options = AdvantageOptions(
            raft_normalization=raft_normalization,
            pkpo_baseline=pkpo_baseline,
            ada_est_eps=ada_est_eps,
            focal_gamma=focal_gamma,
            w_reinforce_lambda=w_reinforce_lambda,
            ucpo_tau=ucpo_tau,
            unlikeliness_beta=unlikeliness_beta,
        )
        # None: the estimator's advantages as they are; else applied to each kept group
        self.reweighting = get_positive_reweighting(positive_reweighting, advantage=advantage)
        if coverage_phase is not None and coverage_phase.rollouts < 1:
            raise ValueError(
                f"coverage_phase.rollouts must be >= 1 (got {coverage_phase.rollouts}); pass "
                "coverage_phase=None for none"
            )
        self.coverage_phase = coverage_phase
        self.seed = seed

    def in_coverage_phase(self, rollouts_before: int) -> bool:
        """Whether a step that starts after `rollouts_before` observed training rollouts trains
        on the coverage phase's builder."""
        phase = self.coverage_phase
        return phase is not None and rollouts_before < phase.rollouts

    def build(
        self,
        *,
        prompt_id: str,
        pool: Sequence[ScoredRollout],
        resolved: bool,
        step: int,
        prior_pass_rate: float,
        law: SequentialLaw | None = None,
        estimate: float | None = None,
        rollouts_before: int = 0,
    ) -> Group | None:
        """The kept group of `pool` (in sampling order), or None when nothing is kept.

        `prior_pass_rate` is the prompt's estimate from earlier steps (the allocator's EMA; read
        by `reinforce_baseline`). `law`: how the sampler drew the pool (None: a size fixed
        before its labels were seen), which the unbiased pass-rate estimate conditions on.
        `estimate`: the pass rate the sampler allocated the pool by (GVM's pilot p_i; read by
        `raft` with `raft_normalization="estimate"`). `rollouts_before`: the training rollouts
        observed before this step (the coverage phase's clock).
        """
        if self.in_coverage_phase(rollouts_before):
            assert self.coverage_phase is not None
            return self.coverage_phase.builder.build(
                prompt_id=prompt_id,
                pool=pool,
                resolved=resolved,
                step=step,
                prior_pass_rate=prior_pass_rate,
                law=law,
                estimate=estimate,
            )
        if not pool:
            return None
        rewards = np.array([s.reward for s in pool], dtype=np.float64)  # [N]
        pass_rate = self.pool_pass_rate(rewards, law)
        group_size = self.group_size if self.group_size is not None else len(pool)
        rng = np.random.default_rng(derive_seed(self.seed, step, prompt_id, "downsample"))
        reweighting = self.reweighting
        if self.estimator is None:
            kept, advantages = downsample_and_correct(
                rewards,
                resolved=resolved,
                group_size=group_size,
                unresolved_policy=self.unresolved_policy,
                correction=self.correction,
                objective=self.objective,
                alpha=self.alpha,
                objective_k=self.objective_k,
                pass_rate=pass_rate,
                positive_threshold=self.positive_threshold,
                clip_delta=self.clip_delta,
                rng=rng,
                order=self.downsample_order.value,
            )
        else:
            if not resolved and self.unresolved_policy is UnresolvedPolicy.DROP:
                return None
            kept = balanced_downsample(
                rewards,
                group_size=group_size,
                positive_threshold=self.positive_threshold,
                rng=rng,
                order=self.downsample_order.value,
            )
            if not resolved and self.unresolved_policy is UnresolvedPolicy.ZERO_ADVANTAGE:
                advantages = np.zeros(kept.size)
            else:
                inputs = self._inputs(pool, kept, rewards, prior_pass_rate, estimate)
                if reweighting is not None and reweighting.stage == "rewards":
                    inputs = dataclasses.replace(
                        inputs,
                        rewards=reweighting.apply(inputs, inputs.rewards),
                        verifier_labels=inputs.labels,
                    )
                    reweighting = None  # done: the estimator reads the reshaped rewards
                advantages = self.estimator.advantages(inputs)
        if kept.size == 0:
            return None
        if reweighting is not None:  # on the advantages, after whichever estimator ran
            advantages = reweighting.apply(
                self._inputs(pool, kept, rewards, prior_pass_rate, estimate), advantages
            )
        weight = 1.0
        if self.estimator is None and self.group_size is None:
            # A whole pool of N trains as `pool_weight` sequences' worth, whatever N: its
            # estimate (1/N)Σ_j A_j ∇log π_j is scaled by n/N, and each of its sequences counts
            # n/N in the loss normalisers, so a prompt weighs what a kept group of n would.
            weight = self.pool_weight / len(pool)
            advantages = advantages * weight
        return Group(
            prompt_id=prompt_id,
            rollouts=tuple(pool[int(i)] for i in kept),
            advantages=tuple(float(a) for a in advantages),
            pool_size=len(pool),
            pool_positives=int(
                positive_mask(rewards, positive_threshold=self.positive_threshold).sum()
            ),
            resolved=resolved,
            sequence_weight=weight,
        )

    def _inputs(
        self,
        pool: Sequence[ScoredRollout],
        kept: np.ndarray,
        rewards: np.ndarray,
        prior_pass_rate: float,
        estimate: float | None,
    ) -> GroupInputs:
        """The kept group as the estimators and the reweightings read it (the behaviour
        log-probs only where a reweighting reads them)."""
        mean_logprobs = None
        if self.reweighting is not None:
            mean_logprobs = np.array([_mean_logprob(pool[int(i)]) for i in kept])
        return GroupInputs(
            rewards=rewards[kept],
            k=self.objective_k,
            positive_threshold=self.positive_threshold,
            prior_pass_rate=prior_pass_rate,
            sampler_estimate=estimate,
            pool_weight=self.pool_weight,
            mean_logprobs=mean_logprobs,
            options=self.options,
        )

    def pool_pass_rate(self, rewards: np.ndarray, law: SequentialLaw | None) -> float | None:
        """p̂ for "pool" advantages: the unbiased estimate under the sampler's draws, or None
        (the corrections then use the pool mean): with `pass_rate_estimate="pool"`, for pools of
        a size fixed before their labels (the mean is unbiased), and for a pool cut by the step
        budget before its rule stopped (no unbiased estimate exists; counted by the sampler as
        `sampling/unresolved_by_budget`)."""
        if self.pass_rate_estimate == "pool" or law is None:
            return None
        labels = positive_mask(rewards, positive_threshold=self.positive_threshold)
        return unbiased_pass_rate(list(labels), law.rule, round_size=law.round_size)


def _mean_logprob(scored: ScoredRollout) -> float:
    """The response's mean-token behaviour log-prob (0 for an empty response: probability 1)."""
    logprobs = scored.rollout.completion.logprobs
    return float(np.mean(logprobs)) if logprobs else 0.0
