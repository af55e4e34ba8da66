"""Structured config of the group builder (`allocator.group`; `adarl.allocator.group_builder` reads
it): which samples of a prompt's pool are trained and with what advantages.

`GroupConfig`
    group_size: responses trained on per prompt (n); None = the whole pool (nothing drawn is
        discarded; with pooled advantages each prompt's pool weighs `pool_weight` sequences in
        the loss, see `adarl.allocator.group_builder`).
    pool_weight: the sequences a whole pool weighs in the loss (pooled advantages with
        group_size null; GVM-RAFT's n̄); null = the sampler's planned draw per prompt:
        uniform_samples_per_prompt, mean_samples_per_prompt, or the sequential first draw
        (sequential.initial_samples, else k_pos + k_neg; rounds: round_repeat).
    advantage: "pool" (Reinforce-Ada: pool baseline + `correction`) or the name of a
        uniform-group estimator, one of `adarl.algo.advantages.UNIFORM_ESTIMATORS` (GRPO, Dr.
        GRPO, RLOO, RAFT, REINFORCE with the prompt's prior as baseline, Ada-Est, Pass@k
        Training's analytical advantages (arXiv 2508.10751) and PKPO's unbiased pass@k gradient
        (arXiv 2505.15201), both with k = objective_k, W-REINFORCE (arXiv 2506.01347);
        docs/algorithms.md). Those that need
        groups of at least k samples (the pass@k ones) need sizes fixed before their labels:
        sampler uniform or dynamic_filter (uniform_samples_per_prompt >= k), or knapsack with
        whole pools and curation.min_samples_per_prompt >= k.
    correction: for "pool": "none" (A = r - p̃, the released script), "std", "selection",
        "inverse_p", "inverse_sqrt_p" (`adarl.algo.selection.Correction`).
    objective, objective_alpha: the declared f for "selection", one of
        `adarl.algo.objectives.OBJECTIVES` ("linear", "log", "arcsin", "logit": log(p/(1-p)),
        whose correction needs no pass-rate estimate (h = 1: A = ±n/n±), "power" with exponent
        objective_alpha, "pass_at_k": 1 - (1-p)^k with k = objective_k); also the f of ada_est's
        "variance_optimal" rule and of the declared knapsack value.
    objective_k: k of pass@k, in samples (the attempts pass@k counts; integer >= 1, default 8):
        the k of objective "pass_at_k" (weight k(1-p)^(k-1)) and of the advantages
        "passk_training" and "pkpo".
    focal_gamma: F-GRPO's exponent γ (arXiv 2602.06717): the group-relative advantages "grpo",
        "dr_grpo" and "rloo" are multiplied by (1 - p̂)^γ, p̂ the group's success rate (its share
        of positives); 0 (default) = off. Refused with other advantages and with the sequential
        samplers (their pools stop on their labels).
    pkpo_baseline: advantage "pkpo" only: "loo_minus_one" (the paper's s^(loo-1): only correct
        samples are weighted, C(n-c, k-1)/C(n, k)·n; n >= k), "loo" (s^(loo): leave-one-out pass@k
        baseline; n > k) or "none" (the raw effective rewards). All three are unbiased for
        ∇pass@k.
    unresolved_policy: prompts stopped without the exit condition: "keep_available" (train on
        min(n, N) of them, the reference), "zero_advantage", "drop".
    downsample_order: "random" or "earliest" (the reference).
    raft_normalization: advantage "raft" only: "group" (A = 1 on positives, ĝ = (1/n)Σ_pos:
        unbiased for ∇p, the linear objective p), "positives" (A = n/K on the K positives:
        the SFT loss averaged over accepted samples, RAFT as usually run: log p gated by
        1 - (1-p)^n; `adarl.algo.advantages.raft_advantages`), or "estimate" (GVM-RAFT:
        A = n̄/(n_i p_i) on accepted samples, p_i the gvm sampler's pilot pass rate, n̄ =
        pool_weight (null: mean_samples_per_prompt): log p when p_i = p).
    clip_delta: pass rates in weights are clipped to [δ, 1-δ].
    pass_rate_estimate: the pool pass rate p̂ that "pool" advantages use: "unbiased" (exactly
        unbiased under the sampler's real draws, chunks and futility stop included:
        `adarl.algo.drawing.unbiased_pass_rate`; for fixed-size pools the pool mean) or "pool"
        (N⁺/N over the whole pool, biased under a stopping rule: the released code).
    w_reinforce_lambda: advantage "w_reinforce" only: λ, a correct sample's advantage (a wrong one's
        is -1; no baseline, no std; arXiv 2506.01347): the linear objective with weight 1 + λ.
        Default 0.1 (the paper's).
    positive_reweighting: "none" (default) or a likelihood-aware reweighting of each kept group's
        correct samples by their mean-token behaviour log-probs (`adarl.algo.reweighting`):
        "ucpo" (arXiv 2605.00365: a share ucpo_tau of the group's positive advantage moved toward
        its less likely correct samples, the mass kept; after any estimator, "pool" included) or
        "unlikeliness" (arXiv 2506.02355: a correct sample's reward × (1 - unlikeliness_beta·
        rank/G), rank 0 the least likely, before an estimator that reads reward values: grpo,
        dr_grpo, rloo; refused with "pool"). Either declares no f(p) objective.
    ucpo_tau: "ucpo"'s τ in [0, 1] (0.2, the paper's; 0 = off, 1 = all of the mass by 1/q).
    unlikeliness_beta: "unlikeliness"'s β in [0, 1] (0.25, the paper's).
    coverage_phase_rollouts: coverage first, accuracy after (arXiv 2508.10751): every step that
        starts before this many training rollouts were observed (the allocator counts every
        rollout of every finished step; kept in its checkpoint) trains with coverage_objective
        and/or coverage_advantage in place of objective and advantage, every later step with the
        run's own. 0 (default) = no coverage phase. The run declares both phases.
    coverage_objective: the coverage phase's declared f (pooled advantages with correction
        "selection"; null = the run's objective). Under the default's Seq-Balance(1, 1) pass_at_k
        is flat in p and refused at start-up (docs/algorithms.md §14.6): use "log" there.
    coverage_advantage: the coverage phase's advantage (e.g. "pkpo" or "passk_training" before
        "grpo"; null = the run's advantage).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from adarl.algo.advantages import (
    PKPO_BASELINES,
    RAFT_NORMALIZATIONS,
    W_REINFORCE_LAMBDA,
    advantage_names,
    group_relative_estimators,
)
from adarl.algo.objectives import OBJECTIVES
from adarl.algo.reweighting import REWEIGHTING_OFF, get_positive_reweighting, reweighting_names

CORRECTIONS = ("none", "std", "selection", "inverse_p", "inverse_sqrt_p")
UNRESOLVED_POLICIES = ("keep_available", "zero_advantage", "drop")
DOWNSAMPLE_ORDERS = ("random", "earliest")
PASS_RATE_ESTIMATES = ("unbiased", "pool")


@dataclass
class GroupConfig:
    group_size: int | None = 4
    advantage: str = "pool"
    correction: str = "none"
    objective: str = "log"
    objective_alpha: float = 0.5
    objective_k: int = 8
    focal_gamma: float = 0.0
    pkpo_baseline: str = "loo_minus_one"
    unresolved_policy: str = "keep_available"
    downsample_order: str = "random"
    raft_normalization: str = "group"
    clip_delta: float = 1e-3
    pass_rate_estimate: str = "unbiased"
    pool_weight: int | None = None
    w_reinforce_lambda: float = W_REINFORCE_LAMBDA
    positive_reweighting: str = REWEIGHTING_OFF
    ucpo_tau: float = 0.2
    unlikeliness_beta: float = 0.25
    coverage_phase_rollouts: int = 0
    coverage_objective: str | None = None
    coverage_advantage: str | None = None

    def validate(self) -> None:
        if self.group_size is not None and self.group_size < 1:
            raise ValueError(
                f"allocator.group.group_size={self.group_size} must be >= 1 (or null: whole pools)"
            )
        if self.pool_weight is not None and self.pool_weight < 1:
            raise ValueError(
                f"allocator.group.pool_weight={self.pool_weight} must be >= 1 or null (the "
                "sampler's planned draw per prompt)"
            )
        for key, value, allowed in (
            ("advantage", self.advantage, advantage_names()),
            ("correction", self.correction, CORRECTIONS),
            ("unresolved_policy", self.unresolved_policy, UNRESOLVED_POLICIES),
            ("downsample_order", self.downsample_order, DOWNSAMPLE_ORDERS),
            ("objective", self.objective, tuple(OBJECTIVES)),
            ("raft_normalization", self.raft_normalization, RAFT_NORMALIZATIONS),
            ("pass_rate_estimate", self.pass_rate_estimate, PASS_RATE_ESTIMATES),
            ("pkpo_baseline", self.pkpo_baseline, PKPO_BASELINES),
            ("positive_reweighting", self.positive_reweighting, reweighting_names()),
        ):
            if value not in allowed:
                raise ValueError(f"allocator.group.{key}={value!r} is not one of {allowed}")
        self.validate_update_options()
        k = self.objective_k
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(
                f"allocator.group.objective_k={k!r} must be an integer >= 1 (k of pass@k, in "
                "samples; e.g. 8)"
            )
        if not (math.isfinite(self.focal_gamma) and self.focal_gamma >= 0):
            raise ValueError(
                f"allocator.group.focal_gamma={self.focal_gamma} must be >= 0 (0 turns F-GRPO's "
                "factor off)"
            )
        if self.focal_gamma > 0 and self.advantage not in group_relative_estimators():
            raise ValueError(
                f"allocator.group.focal_gamma={self.focal_gamma} (F-GRPO) multiplies a "
                f"group-relative advantage, one of {group_relative_estimators()}, but "
                f"allocator.group.advantage={self.advantage!r}; set allocator.group.advantage=grpo "
                "(F-GRPO as "
                "published) or allocator.group.focal_gamma=0"
            )
        if not 0.0 < self.clip_delta < 0.5:
            raise ValueError(f"allocator.group.clip_delta={self.clip_delta} must be in (0, 0.5)")

    def validate_update_options(self) -> None:
        """W-REINFORCE's λ, the positives' reweighting and the coverage phase (issue 38)."""
        for key, value, low, high in (
            ("w_reinforce_lambda", self.w_reinforce_lambda, 0.0, math.inf),
            ("ucpo_tau", self.ucpo_tau, 0.0, 1.0),
            ("unlikeliness_beta", self.unlikeliness_beta, 0.0, 1.0),
        ):
            if not low <= value <= high:
                raise ValueError(f"allocator.group.{key}={value} must be in [{low}, {high}]")
        try:
            get_positive_reweighting(self.positive_reweighting, advantage=self.advantage)
        except ValueError as error:
            raise ValueError(
                f"allocator.group.positive_reweighting={self.positive_reweighting!r} with "
                f"allocator.group.advantage={self.advantage!r}: {error}"
            ) from None
        phase = ("coverage_objective", "coverage_advantage")
        for key, allowed in zip(phase, (tuple(OBJECTIVES), advantage_names()), strict=True):
            if getattr(self, key) not in (None, *allowed):
                raise ValueError(
                    f"allocator.group.{key}={getattr(self, key)!r} is not one of {allowed} (or "
                    "null: the run's own)"
                )
        if self.coverage_phase_rollouts < 0:
            raise ValueError(
                f"allocator.group.coverage_phase_rollouts={self.coverage_phase_rollouts} must be "
                ">= 0 (0: no coverage phase)"
            )
        if not self.coverage_phase_rollouts:
            for key in phase:
                if getattr(self, key) is not None:
                    raise ValueError(
                        f"allocator.group.{key}={getattr(self, key)!r} names the coverage phase's "
                        "choice, but allocator.group.coverage_phase_rollouts=0 (no phase); set the "
                        "rollouts it lasts, or leave it null"
                    )
            return
        if self.coverage_objective is None and self.coverage_advantage is None:
            raise ValueError(
                f"allocator.group.coverage_phase_rollouts={self.coverage_phase_rollouts} needs "
                "the phase's objective or estimator: allocator.group.coverage_objective (pooled "
                "advantages, e.g. log) or allocator.group.coverage_advantage (e.g. pkpo)"
            )
