"""The group builder: a prompt's pool ─► downsample to n ─► correction ─► advantages ─► `Group`.

Only `adarl.algo` decides anything numeric here; this module chooses which function to call and
wraps the result in the typed record the learner consumes (`TrainBatch.from_groups`).

Two families of advantage, picked by `advantage`:

* `pool` (Reinforce-Ada): `selection.downsample_and_correct`: a balanced group of n from the
  whole pool, advantages from the pool baseline p̃ under `correction` (`none` is the released
  script's A = r - p̃; `selection` makes the group estimate w(p̃)∇p for the declared objective).
  With `group_size=None` the whole pool of N is trained on instead (no sample discarded): the
  pool is the group, its advantages are scaled by n/N and each of its sequences counts n/N in the
  loss normalisers (`Group.sequence_weight`, n = `pool_sequences`), so every prompt weighs what
  a kept group of n would and the declared objective is unchanged (the selection correction is
  unbiased for any kept split).
* a uniform-group estimator (`grpo`, `dr_grpo`, `rloo`, `raft`, `reinforce_baseline`, `ada_est`,
  `passk_training`, `pkpo`, from `adarl.algo.advantages`) applied to the kept group. A pool larger
  than n is first cut to n by the same balanced downsample, which changes what these estimators
  estimate: use them with samplers whose pool is the group (uniform, dynamic filter, knapsack).
  `reinforce_baseline` uses the prompt's pass-rate estimate from earlier steps (independent of
  this group) as baseline; `passk_training` and `pkpo` use k = `objective_k`; with
  `focal_gamma` > 0 the group-relative ones (`grpo`, `dr_grpo`, `rloo`) are multiplied by F-GRPO's
  (1 - p̂)^γ, p̂ the group's success rate (`adarl.algo.advantages.focal_scale`).

The pool's pass rate p̃ in "pool" advantages is, by default (`pass_rate_estimate="unbiased"`), the
estimate that is exactly unbiased under the sampler's real draws (`adarl.algo.drawing.
unbiased_pass_rate`, given the sampler's `SequentialLaw`), not the pool mean N⁺/N, which a stopping
rule biases (`pass_rate_estimate="pool"`, the released code).

Unresolved prompts follow `unresolved_policy` in both families (`selection.UnresolvedPolicy`).
Random downsampling is seeded from (seed, step, prompt id): no RNG state to checkpoint, and a
resumed run picks the same samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

import numpy as np

from adarl.algo.advantages import (
    PKPO_BASELINES,
    ada_est_advantages,
    dr_grpo_advantages,
    focal_scale,
    grpo_advantages,
    passk_training_advantages,
    pkpo_advantages,
    raft_advantages,
    reinforce_baseline_advantages,
    rloo_advantages,
)
from adarl.algo.drawing import unbiased_pass_rate
from adarl.algo.objectives import check_objective_k
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


class AdvantageMode(str, Enum):
    POOL = "pool"
    GRPO = "grpo"
    DR_GRPO = "dr_grpo"
    RLOO = "rloo"
    RAFT = "raft"
    REINFORCE_BASELINE = "reinforce_baseline"
    ADA_EST = "ada_est"
    PASSK_TRAINING = "passk_training"
    PKPO = "pkpo"


FOCAL_MODES = (AdvantageMode.GRPO, AdvantageMode.DR_GRPO, AdvantageMode.RLOO)


class GroupBuilder:
    """Turns one prompt's pool of scored rollouts into its training `Group` (or None)."""

    def __init__(
        self,
        *,
        group_size: int | None,
        advantage: AdvantageMode | str = AdvantageMode.POOL,
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
        pool_sequences: int = 4,
        seed: int = 0,
    ) -> None:
        if group_size is not None and group_size < 1:
            raise ValueError(
                f"group_size must be >= 1 or None (keep whole pools), got {group_size}"
            )
        self.group_size = group_size
        self.advantage = AdvantageMode(advantage)
        self.correction = Correction(correction)
        self.objective = objective
        self.alpha = alpha
        self.objective_k = check_objective_k(objective_k)
        if not (np.isfinite(focal_gamma) and focal_gamma >= 0):
            raise ValueError(f"focal_gamma must be >= 0 (0 = off), got {focal_gamma}")
        if focal_gamma > 0 and self.advantage not in FOCAL_MODES:
            raise ValueError(
                f"focal_gamma={focal_gamma} (F-GRPO) applies to the group-relative advantages "
                f"{[m.value for m in FOCAL_MODES]}, not {self.advantage.value!r}"
            )
        self.focal_gamma = focal_gamma
        if pkpo_baseline not in PKPO_BASELINES:
            raise ValueError(
                f"pkpo_baseline must be one of {PKPO_BASELINES}, got {pkpo_baseline!r}"
            )
        self.pkpo_baseline = pkpo_baseline
        self.unresolved_policy = UnresolvedPolicy(unresolved_policy)
        self.downsample_order = DownsampleOrder(downsample_order)
        if raft_normalization not in ("group", "positives", "estimate"):
            raise ValueError(
                "raft_normalization must be 'group', 'positives' or 'estimate', got "
                f"{raft_normalization!r}"
            )
        self.raft_normalization = raft_normalization
        self.positive_threshold = positive_threshold
        self.clip_delta = clip_delta
        self.ada_est_eps = ada_est_eps
        if pass_rate_estimate not in ("unbiased", "pool"):
            raise ValueError(
                f"pass_rate_estimate must be 'unbiased' or 'pool', got {pass_rate_estimate!r}"
            )
        self.pass_rate_estimate = pass_rate_estimate
        if pool_sequences < 1:
            raise ValueError(f"pool_sequences must be >= 1, got {pool_sequences}")
        self.pool_sequences = pool_sequences
        self.seed = seed

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
    ) -> Group | None:
        """The kept group of `pool` (in sampling order), or None when nothing is kept.

        `prior_pass_rate` is the prompt's estimate from earlier steps (the allocator's EMA), used
        only by `reinforce_baseline`. `law`: how the sampler drew the pool (None: a size fixed
        before its labels were seen), which the unbiased pass-rate estimate conditions on.
        `estimate`: the pass rate the sampler allocated the pool by (GVM's pilot p_i), used by
        `raft` with `raft_normalization="estimate"`.
        """
        if not pool:
            return None
        rewards = np.array([s.reward for s in pool], dtype=np.float64)  # [N]
        pass_rate = self.pool_pass_rate(rewards, law)
        group_size = self.group_size if self.group_size is not None else len(pool)
        rng = np.random.default_rng(derive_seed(self.seed, step, prompt_id, "downsample"))
        if self.advantage is AdvantageMode.POOL:
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
                advantages = self._uniform_advantages(rewards[kept], prior_pass_rate, estimate)
        if kept.size == 0:
            return None
        weight = 1.0
        if self.advantage is AdvantageMode.POOL and self.group_size is None:
            # A whole pool of N trains as `pool_sequences` sequences' worth, whatever N: its
            # estimate (1/N)Σ_j A_j ∇log π_j is scaled by n/N, and each of its sequences counts
            # n/N in the loss normalisers, so a prompt weighs what a kept group of n would.
            weight = self.pool_sequences / len(pool)
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

    def _uniform_advantages(
        self, rewards: np.ndarray, prior_pass_rate: float, estimate: float | None
    ) -> np.ndarray:
        advantages = self._uniform_unscaled(rewards, prior_pass_rate, estimate)
        if self.focal_gamma > 0:  # F-GRPO: validated to be a group-relative advantage
            advantages = advantages * focal_scale(
                rewards, gamma=self.focal_gamma, positive_threshold=self.positive_threshold
            )
        return advantages

    def _uniform_unscaled(
        self, rewards: np.ndarray, prior_pass_rate: float, estimate: float | None
    ) -> np.ndarray:
        mode = self.advantage
        if mode is AdvantageMode.PASSK_TRAINING:
            return passk_training_advantages(
                rewards, k=self.objective_k, positive_threshold=self.positive_threshold
            )
        if mode is AdvantageMode.PKPO:
            return pkpo_advantages(
                rewards,
                k=self.objective_k,
                baseline=self.pkpo_baseline,
                positive_threshold=self.positive_threshold,
            )
        if mode is AdvantageMode.RAFT and self.raft_normalization == "estimate":
            # GVM-RAFT: Σ_i (1/(n_i p_i)) Σ_accepted ∇log π, p_i the sampler's estimate; the
            # factor n̄ = pool_sequences keeps the scale of a group of n̄ (the loss averages
            # over every sequence of the batch).
            if estimate is None or estimate <= 0:
                raise ValueError(
                    "raft_normalization='estimate' needs the sampler's pass-rate estimate (the "
                    "gvm sampler gives its pilot's p_i); use it with allocator.sampler=gvm"
                )
            accepted = positive_mask(rewards, positive_threshold=self.positive_threshold)
            return accepted * self.pool_sequences / (rewards.size * estimate)
        if mode is AdvantageMode.GRPO:
            return grpo_advantages(rewards)
        if mode is AdvantageMode.DR_GRPO:
            return dr_grpo_advantages(rewards)
        if mode is AdvantageMode.RLOO:
            return rloo_advantages(rewards)
        if mode is AdvantageMode.RAFT:
            return raft_advantages(
                rewards,
                positive_threshold=self.positive_threshold,
                normalization=self.raft_normalization,
            )
        if mode is AdvantageMode.REINFORCE_BASELINE:
            return reinforce_baseline_advantages(rewards, baseline=prior_pass_rate)
        return ada_est_advantages(rewards, eps=self.ada_est_eps)
