"""The group builder: a prompt's pool ─► downsample to n ─► correction ─► advantages ─► `Group`.

Only `adarl.algo` decides anything numeric here; this module chooses which function to call and
wraps the result in the typed record the learner consumes (`TrainBatch.from_groups`).

Its options arrive built (adarl/allocator/estimators.py): the estimator with its own parameters
and the reweighting of the positives that may follow it. Two families of estimator:

* `PooledAdvantage` (Reinforce-Ada): `selection.downsample_and_correct`: a balanced group of
  n from the whole pool, advantages from the pool baseline p̃ under `correction` (`none` is the
  released script's A = r - p̃; `selection` makes the group estimate w(p̃)∇p for the declared
  objective).
  With `group_size=None` the whole pool of N is trained on instead (no sample discarded): the
  pool is the group, its advantages are scaled by n/N and each of its sequences counts n/N in the
  loss normalisers (`Group.sequence_weight`, n = `pool_weight`), so every prompt weighs what
  a kept group of n would and the declared objective is unchanged (the selection correction is
  unbiased for any kept split).
* `UniformAdvantage`, any entry of `adarl.algo.advantages.UNIFORM_ESTIMATORS`, applied to the
  kept group: the builder hands it one `GroupInputs` record (the kept rewards, the labels'
  threshold, its k, the prompt's pass-rate estimate from earlier steps, the sampler's estimate,
  the pool weight, its own `AdvantageOptions`) and the estimator reads what it needs;
  with `focal_gamma` > 0 a group-relative one is multiplied by F-GRPO's (1 - p̂)^γ. A pool larger
  than n is first cut to n by the same balanced downsample, which changes what these estimators
  estimate: use them with samplers whose pool is the group (uniform, dynamic filter, knapsack).

The pool's pass rate p̃ in "pool" advantages is, by default (`pass_rate_estimate="unbiased"`), the
estimate that is exactly unbiased under the sampler's real draws (`adarl.algo.drawing.
unbiased_pass_rate`, given the sampler's `SequentialLaw`), not the pool mean N⁺/N, which a stopping
rule biases (`pass_rate_estimate="pool"`, the released code).

Either family may be followed by a likelihood-aware reweighting of the positives
(`reweighting`, an entry of `adarl.algo.reweighting.POSITIVE_REWEIGHTINGS` bound to its
parameter), which reads the kept samples' behaviour log-probs: UCPO reshapes the advantages of
any estimator, the unlikeliness reward the rewards a real-valued estimator reads.

Coverage first, accuracy after is a builder of its own for the first steps
(adarl/allocator/coverage_phase.py), not an option of this one.

Unresolved prompts follow `unresolved_policy` in both families (`selection.UnresolvedPolicy`).
Random downsampling is seeded from (seed, step, prompt id): no RNG state to checkpoint, and a
resumed run picks the same samples.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from adarl.algo.advantages import GroupInputs
from adarl.algo.reweighting import Reweighting, get_positive_reweighting
from adarl.algo.selection import (
    DownsampleOrder,
    UnresolvedPolicy,
    balanced_downsample,
    downsample_and_correct,
    positive_mask,
)
from adarl.allocator.estimators import GroupAdvantage, PooledAdvantage
from adarl.allocator.samplers.base import SequentialLaw, derive_seed
from adarl.types import Group, ScoredRollout


class GroupBuilder:
    """Turns one prompt's pool of scored rollouts into its training `Group` (or None)."""

    def __init__(
        self,
        *,
        group_size: int | None,
        estimator: GroupAdvantage | None = None,
        reweighting: Reweighting | None = None,
        unresolved_policy: UnresolvedPolicy | str = UnresolvedPolicy.KEEP_AVAILABLE,
        downsample_order: DownsampleOrder | str = DownsampleOrder.RANDOM,
        positive_threshold: float = 0.5,
        pool_weight: int = 4,
        seed: int = 0,
    ) -> None:
        """`estimator`: the built estimator (adarl/allocator/estimators.py; None = the pooled
        family without correction, the released script's A = r - p̃). `reweighting`: the
        positives' reweighting after it, bound to its parameter; None = none."""
        if group_size is not None and group_size < 1:
            raise ValueError(
                f"group_size must be >= 1 or None (keep whole pools), got {group_size}"
            )
        if pool_weight < 1:
            raise ValueError(f"pool_weight must be >= 1, got {pool_weight}")
        self.group_size = group_size
        self.estimator = PooledAdvantage() if estimator is None else estimator
        self.reweighting = reweighting
        if reweighting is not None:  # a reshaped reward needs an estimator that reads values
            get_positive_reweighting(reweighting.entry.name, advantage=self.estimator.name)
        self.unresolved_policy = UnresolvedPolicy(unresolved_policy)
        self.downsample_order = DownsampleOrder(downsample_order)
        self.positive_threshold = positive_threshold
        self.pool_weight = pool_weight
        self.seed = seed

    @property
    def pooled(self) -> bool:
        """Whether the estimator is the pooled family (it downsamples and corrects itself)."""
        return isinstance(self.estimator, PooledAdvantage)

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

        `prior_pass_rate` is the prompt's estimate from earlier steps (the allocator's EMA; read
        by `reinforce_baseline`). `law`: how the sampler drew the pool (None: a size fixed
        before its labels were seen), which the unbiased pass-rate estimate conditions on.
        `estimate`: the pass rate the sampler allocated the pool by (GVM's pilot p_i; read by
        `raft` with `raft_normalization="estimate"`).
        """
        if not pool:
            return None
        rewards = np.array([s.reward for s in pool], dtype=np.float64)  # [N]
        group_size = self.group_size if self.group_size is not None else len(pool)
        rng = np.random.default_rng(derive_seed(self.seed, step, prompt_id, "downsample"))
        reweighting = self.reweighting
        estimator = self.estimator
        if isinstance(estimator, PooledAdvantage):
            kept, advantages = downsample_and_correct(
                rewards,
                resolved=resolved,
                group_size=group_size,
                unresolved_policy=self.unresolved_policy,
                correction=estimator.correction,
                objective=estimator.objective,
                alpha=estimator.alpha,
                objective_k=estimator.objective_k,
                pass_rate=estimator.pool_pass_rate(
                    rewards, law, positive_threshold=self.positive_threshold
                ),
                positive_threshold=self.positive_threshold,
                clip_delta=estimator.clip_delta,
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
                advantages = estimator.advantages(inputs)
        if kept.size == 0:
            return None
        if reweighting is not None:  # on the advantages, after whichever estimator ran
            advantages = reweighting.apply(
                self._inputs(pool, kept, rewards, prior_pass_rate, estimate), advantages
            )
        weight = 1.0
        if self.pooled and self.group_size is None:
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
        log-probs only where a reweighting reads them; a uniform estimator's own options)."""
        mean_logprobs = None
        if self.reweighting is not None:
            mean_logprobs = np.array([_mean_logprob(pool[int(i)]) for i in kept])
        estimator = self.estimator
        extra = {} if isinstance(estimator, PooledAdvantage) else {"options": estimator.options}
        return GroupInputs(
            rewards=rewards[kept],
            k=estimator.objective_k,
            positive_threshold=self.positive_threshold,
            prior_pass_rate=prior_pass_rate,
            sampler_estimate=estimate,
            pool_weight=self.pool_weight,
            mean_logprobs=mean_logprobs,
            **extra,  # type: ignore[arg-type]
        )


def _mean_logprob(scored: ScoredRollout) -> float:
    """The response's mean-token behaviour log-prob (0 for an empty response: probability 1)."""
    logprobs = scored.rollout.completion.logprobs
    return float(np.mean(logprobs)) if logprobs else 0.0
