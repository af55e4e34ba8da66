"""The pure estimator core of adarl: numpy/torch functions with flat keyword arguments.

Modules, in the order a training step uses them:

* `objectives`  f(p) and w = f' (linear, log, arcsin, power α, pass@k), p̂ clipping and Beta
                smoothing
* `gate`        u_G(p), advantage energy, exact stopping-time laws and expected samples
* `allocation`  samples per prompt: uniform, variance-optimal, Ada-Est, √odds, GVM; exact budgets
* `stopping`    Seq-Pos / Seq-Balance decisions on counts, with caps
* `selection`   balanced downsampling, unresolved policies, correction modes
* `advantages`  uniform-group advantages: GRPO, Dr. GRPO, RLOO, RAFT, REINFORCE, Ada-Est, Pass@k
                Training, PKPO, F-GRPO's factor
* `implied`     the weight w(p) any configuration optimises in expectation
* `curation`    history as a Beta posterior, values of n samples (declared, Knapsack-RL, HORA's
                hit utility), the knapsack split, GRESO's skip

`docs/algorithms.md` maps every equation to its function.
"""

from adarl.algo.advantages import (
    GRPO_EPS,
    UNIFORM_ESTIMATORS,
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
from adarl.algo.allocation import (
    ada_est_allocation,
    ema_pass_rate_update,
    equal_prompt_weight_scale,
    gvm_allocation,
    gvm_weights,
    round_to_budget,
    sqrt_odds_allocation,
    uniform_allocation,
    variance_optimal_allocation,
)
from adarl.algo.gate import (
    TerminalCounts,
    advantage_energy,
    expected_samples_seq_balance,
    expected_samples_seq_pos,
    mixed_group_probability,
    rao_blackwell_pass_rate,
    terminal_counts,
    unresolved_probability_seq_balance,
    unresolved_probability_seq_pos,
)
from adarl.algo.implied import (
    ESTIMATORS,
    PASS_RATE_ESTIMATES,
    balanced_none_objective,
    balanced_none_weight,
    focal_grpo_weight,
    implied_weight,
    passk_training_weight,
)
from adarl.algo.objectives import (
    OBJECTIVE_NAMES,
    OBJECTIVES,
    Objective,
    beta_smoothed_pass_rate,
    clip_pass_rate,
    get_objective,
    objective_value,
    objective_weight,
    pass_at_k_objective,
    power_objective,
    selection_weight,
)
from adarl.algo.selection import (
    Correction,
    DownsampleOrder,
    UnresolvedPolicy,
    balanced_downsample,
    corrected_advantages,
    downsample_and_correct,
    positive_mask,
)
from adarl.algo.stopping import (
    StopDecision,
    min_additional_samples_seq_balance,
    min_additional_samples_seq_pos,
    seq_balance_decision,
    seq_pos_decision,
    seq_pos_unbiased_pass_rate,
)

__all__ = [
    "ESTIMATORS",
    "GRPO_EPS",
    "OBJECTIVES",
    "OBJECTIVE_NAMES",
    "PASS_RATE_ESTIMATES",
    "UNIFORM_ESTIMATORS",
    "Correction",
    "DownsampleOrder",
    "Objective",
    "StopDecision",
    "TerminalCounts",
    "UnresolvedPolicy",
    "ada_est_advantages",
    "ada_est_allocation",
    "advantage_energy",
    "balanced_downsample",
    "balanced_none_objective",
    "balanced_none_weight",
    "beta_smoothed_pass_rate",
    "clip_pass_rate",
    "corrected_advantages",
    "downsample_and_correct",
    "dr_grpo_advantages",
    "ema_pass_rate_update",
    "equal_prompt_weight_scale",
    "expected_samples_seq_balance",
    "expected_samples_seq_pos",
    "focal_grpo_weight",
    "focal_scale",
    "get_objective",
    "grpo_advantages",
    "gvm_allocation",
    "gvm_weights",
    "implied_weight",
    "min_additional_samples_seq_balance",
    "min_additional_samples_seq_pos",
    "mixed_group_probability",
    "objective_value",
    "objective_weight",
    "pass_at_k_objective",
    "passk_training_advantages",
    "passk_training_weight",
    "pkpo_advantages",
    "positive_mask",
    "power_objective",
    "raft_advantages",
    "rao_blackwell_pass_rate",
    "reinforce_baseline_advantages",
    "rloo_advantages",
    "round_to_budget",
    "selection_weight",
    "seq_balance_decision",
    "seq_pos_decision",
    "seq_pos_unbiased_pass_rate",
    "sqrt_odds_allocation",
    "terminal_counts",
    "uniform_allocation",
    "unresolved_probability_seq_balance",
    "unresolved_probability_seq_pos",
    "variance_optimal_allocation",
]
