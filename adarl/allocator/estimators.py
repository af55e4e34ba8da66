"""The group builder's options as built components: its estimator, with its own parameters, and
the reweighting of the positives that may follow it.

* `PooledAdvantage`: Reinforce-Ada's pooled family (`allocator.group.advantage="pool"`): a
  balanced downsample of the pool with advantages from the pool baseline under its correction
  (`adarl.algo.selection.downsample_and_correct`), the pass rate estimated unbiasedly under the
  sampler's draws (`pass_rate_estimate="unbiased"`) or as the pool mean.
* `UniformAdvantage`: an entry of `adarl.algo.advantages.UNIFORM_ESTIMATORS` bound to its own
  parameters (`AdvantageOptions`: W-REINFORCE's λ, PKPO's baseline, RAFT's normalisation, Ada-Est's
  ε, F-GRPO's γ) and pass@k's k.
* `adarl.algo.reweighting.Reweighting`: an entry of `POSITIVE_REWEIGHTINGS` (UCPO, the
  unlikeliness reward) bound to its parameter, the `allocator.group` key the entry names.

`build_estimator` and `build_reweighting` translate `allocator.group` into them, once: the group
builder (adarl/allocator/group_builder.py) and the objective declaration read the components,
never the keys. A new estimator or reweighting is its function and registry entry in
adarl/algo, its keys on `GroupConfig` (adarl/config/group.py), and nothing here: an estimator's
parameter is a field of `AdvantageOptions` that `AllocatorConfig.advantage_options` fills, a
reweighting's parameter the key its entry names.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from adarl.algo.advantages import (
    PKPO_BASELINES,
    POOL_ADVANTAGE,
    RAFT_NORMALIZATIONS,
    AdvantageOptions,
    GroupInputs,
    UniformEstimator,
    get_uniform_estimator,
    group_relative_estimators,
)
from adarl.algo.drawing import unbiased_pass_rate
from adarl.algo.objectives import check_objective_k
from adarl.algo.reweighting import Reweighting, get_positive_reweighting
from adarl.algo.selection import Correction, positive_mask
from adarl.allocator.samplers.base import SequentialLaw
from adarl.config.allocator import AllocatorConfig
from adarl.config.group import GroupConfig

PASS_RATE_ESTIMATES = ("unbiased", "pool")


@dataclass(frozen=True)
class PooledAdvantage:
    """Reinforce-Ada's pooled family: pool baseline p̃ and `correction` (`selection` makes a kept
    group estimate w(p̃)∇p for the declared `objective`, with power's `alpha` and pass@k's
    `objective_k`; pass rates in weights clipped to [δ, 1-δ], δ = `clip_delta`)."""

    correction: Correction | str = Correction.NONE
    objective: str = "log"
    alpha: float = 0.5
    objective_k: int = 8
    clip_delta: float = 1e-3
    pass_rate_estimate: str = "unbiased"

    def __post_init__(self) -> None:
        object.__setattr__(self, "correction", Correction(self.correction))
        check_objective_k(self.objective_k)
        if self.pass_rate_estimate not in PASS_RATE_ESTIMATES:
            raise ValueError(
                f"pass_rate_estimate must be 'unbiased' or 'pool', got {self.pass_rate_estimate!r}"
            )

    @property
    def name(self) -> str:
        return POOL_ADVANTAGE

    def pool_pass_rate(
        self, rewards: np.ndarray, law: SequentialLaw | None, *, positive_threshold: float
    ) -> float | None:
        """p̂: the unbiased estimate under the sampler's draws, or None (the corrections then
        use the pool mean): with `pass_rate_estimate="pool"`, for pools of a size fixed before
        their labels (the mean is unbiased), and for a pool cut by the step budget before its
        rule stopped (no unbiased estimate exists; counted by the sampler as
        `sampling/unresolved_by_budget`)."""
        if self.pass_rate_estimate == "pool" or law is None:
            return None
        labels = positive_mask(rewards, positive_threshold=positive_threshold)
        return unbiased_pass_rate(list(labels), law.rule, round_size=law.round_size)


@dataclass(frozen=True)
class UniformAdvantage:
    """A uniform-group estimator (the registry's `entry`) bound to its own parameters
    (`options`) and pass@k's k (`objective_k`): its advantages are a function of one kept
    group's `GroupInputs`."""

    entry: UniformEstimator
    options: AdvantageOptions = field(default_factory=AdvantageOptions)
    objective_k: int = 8

    def __post_init__(self) -> None:
        check_objective_k(self.objective_k)
        gamma = self.options.focal_gamma
        if not (np.isfinite(gamma) and gamma >= 0):
            raise ValueError(f"focal_gamma must be >= 0 (0 = off), got {gamma}")
        if gamma > 0 and not self.entry.group_relative:
            raise ValueError(
                f"focal_gamma={gamma} (F-GRPO) applies to the group-relative advantages "
                f"{list(group_relative_estimators())}, not {self.entry.name!r}"
            )
        if self.options.pkpo_baseline not in PKPO_BASELINES:
            raise ValueError(
                f"pkpo_baseline must be one of {PKPO_BASELINES}, got {self.options.pkpo_baseline!r}"
            )
        if self.options.raft_normalization not in RAFT_NORMALIZATIONS:
            raise ValueError(
                f"raft_normalization must be one of {RAFT_NORMALIZATIONS}, got "
                f"{self.options.raft_normalization!r}"
            )

    @staticmethod
    def named(name: str, *, objective_k: int = 8, **options: object) -> UniformAdvantage:
        """The registry's estimator `name` with these `AdvantageOptions` fields."""
        return UniformAdvantage(
            get_uniform_estimator(name),
            AdvantageOptions(**options),
            objective_k,  # type: ignore[arg-type]
        )

    @property
    def name(self) -> str:
        return self.entry.name

    def advantages(self, group: GroupInputs) -> np.ndarray:  # [G] float64
        return self.entry.advantages(group)


GroupAdvantage = PooledAdvantage | UniformAdvantage


def build_estimator(config: AllocatorConfig) -> GroupAdvantage:
    """`allocator.group`'s estimator, built with its parameters."""
    group = config.group
    if group.advantage == POOL_ADVANTAGE:
        return PooledAdvantage(
            correction=group.correction,
            objective=group.objective,
            alpha=group.objective_alpha,
            objective_k=group.objective_k,
            clip_delta=group.clip_delta,
            pass_rate_estimate=group.pass_rate_estimate,
        )
    return UniformAdvantage(
        get_uniform_estimator(group.advantage),
        options=config.advantage_options(),
        objective_k=group.objective_k,
    )


def build_reweighting(group: GroupConfig) -> Reweighting | None:
    """`allocator.group.positive_reweighting` bound to the value of the key its entry names;
    None for "none"."""
    entry = get_positive_reweighting(group.positive_reweighting, advantage=group.advantage)
    return None if entry is None else entry.bind(float(getattr(group, entry.parameter)))
