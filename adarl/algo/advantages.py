"""Advantages of one uniform group (all samples of a prompt kept), and their one registry.

Each function maps the rewards of one group, `rewards: np.ndarray  # [G]`, to per-sample
advantages `# [G]` float64; the learner multiplies ∇log π(a_j|x) by A_j. With the per-prompt
estimator ĝ = (1/G) Σ_j A_j ∇log π(a_j|x) (see `adarl.algo.selection`), `implied_weight`
gives the w(p) each one optimises; closed forms are quoted below.

`UNIFORM_ESTIMATORS` maps each config name (`allocator.group.advantage`) to a `UniformEstimator`:
a function of one `GroupInputs` record (what is known about the group: its rewards, its labels'
threshold, the prompt's prior pass rate, the sampler's estimate, k, the samples' behaviour
log-probs, the run's options) declared
with `@uniform_estimator(...)` right below the equation it reads, with what the rest of adarl
needs to know about it: whether F-GRPO's factor applies, the group size it needs, the objective
it optimises (in words, with its closed-form weight where there is one) and whether it takes
real-valued rewards. Config validation, the group builder, `implied_weight` and the objective
declaration read the registry, so adding an estimator is one function, its entry and its test
(plus a field on `GroupInputs` when it needs an input no estimator read before). The pooled
family (`POOL_ADVANTAGE`, Reinforce-Ada's pool baseline with its correction) is
`adarl.algo.selection.downsample_and_correct`, not a uniform-group estimator. What may follow any
of them, a likelihood-aware reweighting of the positives, is `adarl.algo.reweighting`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from math import comb

import numpy as np

from adarl.algo.objectives import check_objective_k

GRPO_EPS = 1e-6  # verl `compute_grpo_outcome_advantage` default epsilon
W_REINFORCE_LAMBDA = 0.1  # arXiv 2506.01347's λ (TianHongZXY/RLVR-Decomposed's examples)
PASSK_TRAINING_EPS = 1e-6  # RUCAIBox/Passk_Training `code/passk_adv.py`: σ + 1e-6
PKPO_BASELINES = ("loo_minus_one", "loo", "none")
RAFT_NORMALIZATIONS = ("group", "positives", "estimate")
POOL_ADVANTAGE = "pool"  # the pooled family's config name (selection.downsample_and_correct)


@dataclass(frozen=True)
class AdvantageOptions:
    """The run's estimator parameters, the same for every group (`allocator.group` keys and
    Ada-Est's ε, `allocator.estimation.epsilon`); each estimator reads the ones it has."""

    raft_normalization: str = "group"  # raft: "group", "positives" or "estimate" (GVM-RAFT)
    pkpo_baseline: str = "loo_minus_one"  # pkpo: one of PKPO_BASELINES
    ada_est_eps: float = 1e-6  # ada_est: ε in (r - r̄)/√(r̄ + ε)
    grpo_eps: float = GRPO_EPS  # grpo: ε in (r - μ)/(σ + ε)
    focal_gamma: float = 0.0  # F-GRPO's γ on a group-relative estimator; 0 = off
    w_reinforce_lambda: float = W_REINFORCE_LAMBDA  # w_reinforce: a positive's advantage λ


@dataclass(frozen=True)
class GroupInputs:
    """What is known about one uniform group when its advantages are computed: the one record
    every estimator receives, each reading what it needs. A new input is a field here."""

    rewards: np.ndarray  # [G] the group's rewards, in sampling order
    k: int = 8  # pass@k's k (allocator.group.objective_k)
    positive_threshold: float = 0.5  # a sample is positive iff reward > this
    prior_pass_rate: float | None = None  # the prompt's estimate from earlier steps (its EMA)
    sampler_estimate: float | None = None  # what the sampler allocated by (GVM's pilot p_i)
    true_pass_rate: float | None = None  # the true p: known only to analysis (implied_weight)
    pool_weight: int | None = None  # sequences a whole pool weighs in the loss (GVM-RAFT's n̄)
    # [G] each sample's mean-token behaviour log-prob (the likelihood-aware reweightings, adarl.
    # algo.reweighting); None where no response exists (implied_weight's enumeration)
    mean_logprobs: np.ndarray | None = None
    # [G] bool, the verifier's labels, set where `rewards` were reshaped (the unlikeliness reward
    # lowers a correct sample's reward, never its label)
    verifier_labels: np.ndarray | None = None
    options: AdvantageOptions = field(default_factory=AdvantageOptions)

    @property
    def labels(self) -> np.ndarray:  # [G] bool
        if self.verifier_labels is not None:
            return self.verifier_labels
        return _labels(self.rewards, self.positive_threshold)


@dataclass(frozen=True)
class GroupSpec:
    """The uniform group an implied objective is stated for: n samples, pass@k's k, options."""

    size: int
    k: int
    options: AdvantageOptions


@dataclass(frozen=True)
class ImpliedObjective:
    """What an estimator optimises on a uniform group of n: E[ĝ] = w(p)·∇p.

    `describe`: the objective in words, with its weight. `closed_form`: w(p) in closed form, or
    None where there is none (the words then name a limit; `implied_weight`'s enumeration is
    still exact), checked against the enumeration before a run calls its statement exact.
    `needs_sampler`: set where a uniform group alone does not state the objective because the
    estimator is half of an allocation rule (Ada-Est's n_i ∝ 1/√(p̂_i + ε)): that sampler's
    declaration states it, any other sampler gets the words without weights."""

    describe: Callable[[GroupSpec], str]
    closed_form: Callable[[np.ndarray, GroupSpec], np.ndarray | None]
    needs_sampler: str | None = None


@dataclass(frozen=True)
class UniformEstimator:
    """One registry entry: the estimator (a function of `GroupInputs`) and what adarl needs to
    know about it, declared once with `@uniform_estimator` next to its equation."""

    name: str  # its config name, allocator.group.advantage
    compute: Callable[[GroupInputs], np.ndarray]
    implied: ImpliedObjective
    objective: str  # the f (an OBJECTIVES name) its weight serves: the knapsack's declared value
    group_relative: bool  # centred on the group's own rewards: F-GRPO's factor applies
    real_valued_rewards: bool  # defined for rewards beyond pass/fail (DRO's R3)
    # the fewest samples a group needs given pass@k's k and the options; None: any size, no k
    min_group_size: Callable[[int, AdvantageOptions], int] | None

    def advantages(self, group: GroupInputs) -> np.ndarray:  # [G] float64
        """The group's advantages, times F-GRPO's (1 - p̂)^γ when `options.focal_gamma` > 0."""
        advantages = self.compute(group)
        gamma = group.options.focal_gamma
        if gamma:
            if not self.group_relative:
                raise ValueError(
                    f"focal_gamma={gamma} (F-GRPO) applies to the group-relative estimators "
                    f"{group_relative_estimators()}, not {self.name!r}"
                )
            # the success rate of the verifier's labels, as 0/1 rewards (reshaped rewards keep them)
            advantages = advantages * focal_scale(group.labels.astype(np.float64), gamma=gamma)
        return advantages


UNIFORM_ESTIMATORS: dict[str, UniformEstimator] = {}
"""Every uniform-group advantage estimator by config name (`@uniform_estimator`)."""


def uniform_estimator(
    name: str,
    *,
    implied: ImpliedObjective,
    objective: str,
    group_relative: bool = False,
    real_valued_rewards: bool = False,
    min_group_size: Callable[[int, AdvantageOptions], int] | None = None,
) -> Callable[[Callable[[GroupInputs], np.ndarray]], Callable[[GroupInputs], np.ndarray]]:
    """Register the decorated function of `GroupInputs` as the estimator `name` (fields:
    `UniformEstimator`)."""
    if name == POOL_ADVANTAGE:
        raise ValueError(f"{POOL_ADVANTAGE!r} names the pooled family, not a uniform estimator")

    def register(
        compute: Callable[[GroupInputs], np.ndarray],
    ) -> Callable[[GroupInputs], np.ndarray]:
        if name in UNIFORM_ESTIMATORS:
            raise ValueError(f"uniform estimator {name!r} is registered twice")
        UNIFORM_ESTIMATORS[name] = UniformEstimator(
            name=name,
            compute=compute,
            implied=implied,
            objective=objective,
            group_relative=group_relative,
            real_valued_rewards=real_valued_rewards,
            min_group_size=min_group_size,
        )
        return compute

    return register


def get_uniform_estimator(name: str) -> UniformEstimator:
    """The estimator registered as `name`; an unknown name raises, listing the valid ones."""
    try:
        return UNIFORM_ESTIMATORS[name]
    except KeyError:
        raise ValueError(
            f"unknown uniform-group advantage {name!r}; valid: {', '.join(UNIFORM_ESTIMATORS)}"
        ) from None


def advantage_names() -> tuple[str, ...]:
    """Every value `allocator.group.advantage` accepts: the pooled family and the registry."""
    return (POOL_ADVANTAGE, *UNIFORM_ESTIMATORS)


def group_relative_estimators() -> tuple[str, ...]:
    """The estimators F-GRPO's factor applies to."""
    return tuple(name for name, entry in UNIFORM_ESTIMATORS.items() if entry.group_relative)


def real_valued_estimators() -> tuple[str, ...]:
    """The estimators defined for real-valued rewards (DRO's R3)."""
    return tuple(name for name, entry in UNIFORM_ESTIMATORS.items() if entry.real_valued_rewards)


def _no_closed_form(p: np.ndarray, spec: GroupSpec) -> None:
    return None


def _constant_weight(value: Callable[[GroupSpec], float]) -> Callable[..., np.ndarray | None]:
    """A closed form w(p) = value(n) that F-GRPO's factor (no closed form) turns off."""

    def closed_form(p: np.ndarray, spec: GroupSpec) -> np.ndarray | None:
        return None if spec.options.focal_gamma else np.full_like(p, value(spec))

    return closed_form


def _focal_words(text: str, spec: GroupSpec) -> str:
    """A group-relative estimator's words, with F-GRPO's factor when it is on."""
    gamma = spec.options.focal_gamma
    if not gamma:
        return text
    return (
        f"{text} with each group weighted by (1 - K/n)^{gamma:g}, K its positives (F-GRPO's "
        "factor; weight by p enumerated over K ~ Bin(n, p))"
    )


def _binomial(p: float, n: int) -> np.ndarray:  # [n + 1] Pr[K = j], K ~ Bin(n, p)
    return np.array([comb(n, j) * p**j * (1.0 - p) ** (n - j) for j in range(n + 1)])


def _group(rewards: np.ndarray) -> np.ndarray:
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 1 or r.size == 0:
        raise ValueError(f"rewards must be a non-empty 1-D group [G] (got shape {r.shape})")
    return r


def grpo_advantages(rewards: np.ndarray, *, eps: float = GRPO_EPS) -> np.ndarray:
    """GRPO: A_j = (r_j - μ)/(σ + ε), σ the unbiased (ddof=1) group std.

    A group of one uses μ = 0, σ = 1 (verl `compute_grpo_outcome_advantage`). Implied weight
    (binary r, K ~ Bin(G, p)): w(p) = E[K(G-K)/(G²(σ_K + ε))]/(p(1-p)) → 1/√(p(1-p)) (arcsin)
    as G → ∞ (seed 001 §"Why arcsin").
    """
    r = _group(rewards)
    if r.size == 1:
        return (r - 0.0) / (1.0 + eps)
    return (r - r.mean()) / (r.std(ddof=1) + eps)


def _grpo_words(spec: GroupSpec) -> str:
    gamma = spec.options.focal_gamma
    if not gamma:
        return "GRPO's implicit objective (2·arcsin √p as n → ∞; small groups gate it flat)"
    n = spec.size
    return (
        f"GRPO's implicit objective with each group weighted by (1 - K/n)^{gamma:g}, K its "
        f"positives (F-GRPO): w(p) = E[(1 - K/n)^{gamma:g}·K({n} - K)/({n}²(σ_K + 1e-6))]/"
        f"(p(1 - p)), K ~ Bin({n}, p)"
    )


def _grpo_closed_form(p: np.ndarray, spec: GroupSpec) -> np.ndarray | None:
    """F-GRPO's weight has a closed form (`focal_grpo_weight`); GRPO's own is a limit."""
    gamma = spec.options.focal_gamma
    if not gamma:
        return None
    return focal_grpo_weight(p, group_size=spec.size, gamma=gamma, eps=spec.options.grpo_eps)


@uniform_estimator(
    "grpo",
    implied=ImpliedObjective(_grpo_words, _grpo_closed_form),
    objective="arcsin",
    group_relative=True,
    real_valued_rewards=True,
)
def _grpo(group: GroupInputs) -> np.ndarray:
    return grpo_advantages(group.rewards, eps=group.options.grpo_eps)


def dr_grpo_advantages(rewards: np.ndarray) -> np.ndarray:
    """Dr. GRPO: A_j = r_j - μ (no std division; size-1 group: μ = 0, as verl).

    Implied weight: E[K(G-K)]/(G² p(1-p)) = (G-1)/G, i.e. the linear objective scaled.
    """
    r = _group(rewards)
    if r.size == 1:
        return r.copy()
    return r - r.mean()


@uniform_estimator(
    "dr_grpo",
    implied=ImpliedObjective(
        lambda spec: _focal_words("p (weight (n-1)/n)", spec),
        _constant_weight(lambda spec: (spec.size - 1) / spec.size),
    ),
    objective="linear",
    group_relative=True,
    real_valued_rewards=True,
)
def _dr_grpo(group: GroupInputs) -> np.ndarray:
    return dr_grpo_advantages(group.rewards)


def rloo_advantages(rewards: np.ndarray) -> np.ndarray:
    """RLOO: A_j = r_j - (1/(G-1)) Σ_{i≠j} r_i (leave-one-out baseline; verl
    `compute_rloo_outcome_advantage`, which leaves a size-1 group's reward unchanged).

    Unbiased for ∇p: implied weight 1 (linear objective).
    """
    r = _group(rewards)
    if r.size == 1:
        return r.copy()
    g = r.size
    return r - (r.sum() - r) / (g - 1)


@uniform_estimator(
    "rloo",
    implied=ImpliedObjective(
        lambda spec: _focal_words("p (weight 1)", spec), _constant_weight(lambda spec: 1.0)
    ),
    objective="linear",
    group_relative=True,
    real_valued_rewards=True,
)
def _rloo(group: GroupInputs) -> np.ndarray:
    return rloo_advantages(group.rewards)


def w_reinforce_advantages(
    rewards: np.ndarray,  # [G] rewards of one group
    *,
    positive_weight: float = W_REINFORCE_LAMBDA,
    positive_threshold: float = 0.5,
) -> np.ndarray:  # [G] float64
    """W-REINFORCE (Zhu et al. 2025, arXiv 2506.01347; TianHongZXY/RLVR-Decomposed
    `compute_psr_nsr_outcome_advantage`, advantage="weighted"): A = λ on a correct sample,
    -1 on a wrong one; no baseline, no std, so an all-wrong group still pushes its samples down
    and an all-correct one still pulls them up (λ = `positive_weight`).

    The reference multiplies a correct sample's return (1) by λ and subtracts 1 from a wrong
    one's (0); with labels r > `positive_threshold` (the reference tests r == 1 and r == 0) this
    is the same for 0/1 rewards. Implied weight, by (★): E[λ K(1-p) + (G-K)p]/(G p(1-p)) = 1 + λ,
    the linear objective scaled (λ = 0: NSR, negatives only; λ = 1: REINFORCE with reward ±1).
    """
    if not (np.isfinite(positive_weight) and positive_weight >= 0):
        raise ValueError(
            f"W-REINFORCE's λ must be >= 0 (got {positive_weight}); the paper uses 0.1"
        )
    labels = _labels(_group(rewards), positive_threshold)
    return np.where(labels, positive_weight, -1.0)


@uniform_estimator(
    "w_reinforce",
    implied=ImpliedObjective(
        lambda spec: (
            f"p (weight 1 + λ = {1.0 + spec.options.w_reinforce_lambda:g}; W-REINFORCE: "
            f"A = {spec.options.w_reinforce_lambda:g} on a correct sample, -1 on a wrong one)"
        ),
        _constant_weight(lambda spec: 1.0 + spec.options.w_reinforce_lambda),
    ),
    objective="linear",
)
def _w_reinforce(group: GroupInputs) -> np.ndarray:
    return w_reinforce_advantages(
        group.rewards,
        positive_weight=group.options.w_reinforce_lambda,
        positive_threshold=group.positive_threshold,
    )


def raft_advantages(
    rewards: np.ndarray,
    *,
    positive_threshold: float = 0.5,
    normalization: str = "group",
) -> np.ndarray:
    """RAFT (rejection-sampling fine-tuning): train on positives only.

    normalization="group":     A = 1 on positives (r > threshold), 0 otherwise; with ĝ's 1/G
                               this is (1/G) Σ_{pos} ∇log π, unbiased for ∇p: w = 1 (linear).
    normalization="positives": A = G/K on positives, i.e. the SFT loss averaged over the K
                               accepted samples (RAFT as run); E = Pr[K>0]·∇p/p, so
                               w(p) = (1 - (1-p)^G)/p: log p behind a gate (seed 000).
    """
    r = _group(rewards)
    positive = r > positive_threshold
    if normalization == "group":
        return positive.astype(np.float64)
    if normalization == "positives":
        k = int(positive.sum())
        return positive * (r.size / k) if k else np.zeros(r.size)
    raise ValueError(f"normalization must be 'group' or 'positives' (got {normalization!r})")


def gvm_raft_advantages(
    rewards: np.ndarray,  # [G] rewards of one group
    *,
    estimate: float | None,
    mean_samples: int | None,
    positive_threshold: float = 0.5,
) -> np.ndarray:  # [G] float64
    """GVM-RAFT (arXiv 2505.02391): A = n̄/(G·p_i) on accepted samples (r > threshold), 0 else,
    p_i the pass rate the sampler allocated the prompt by (GVM's pilot) and n̄ = `mean_samples`
    the scale of a group of n̄: Σ_i (1/(n_i p_i)) Σ_accepted ∇log π, the log objective when
    p_i = p (the loss averages over every sequence of the batch)."""
    if estimate is None or estimate <= 0:
        raise ValueError(
            "raft_normalization='estimate' needs the sampler's pass-rate estimate (the gvm "
            "sampler gives its pilot's p_i); use it with allocator.sampler=gvm"
        )
    if mean_samples is None:
        raise ValueError("raft_normalization='estimate' needs the pool weight n̄ (mean_samples)")
    r = _group(rewards)
    accepted = _labels(r, positive_threshold)
    return accepted * mean_samples / (r.size * estimate)


def _raft_words(spec: GroupSpec) -> str:
    if spec.options.raft_normalization == "group":
        return "p (weight 1)"
    return f"log p (weight 1/p), gated by 1 - (1 - p)^{spec.size}"


def _raft_closed_form(p: np.ndarray, spec: GroupSpec) -> np.ndarray | None:
    normalization = spec.options.raft_normalization
    if normalization == "group":
        return np.ones_like(p)
    if normalization == "positives":
        return (1.0 - (1.0 - p) ** spec.size) / p
    return None  # GVM-RAFT: its weight depends on the sampler's estimate (gvm declares it)


@uniform_estimator(
    "raft", implied=ImpliedObjective(_raft_words, _raft_closed_form), objective="linear"
)
def _raft(group: GroupInputs) -> np.ndarray:
    normalization = group.options.raft_normalization
    if normalization == "estimate":
        return gvm_raft_advantages(
            group.rewards,
            estimate=group.sampler_estimate,
            mean_samples=group.pool_weight,
            positive_threshold=group.positive_threshold,
        )
    return raft_advantages(
        group.rewards, positive_threshold=group.positive_threshold, normalization=normalization
    )


def maxrl_advantages(rewards: np.ndarray) -> np.ndarray:  # [G] -> [G] float64
    """MaxRL (Tajwar et al. 2026, arXiv 2602.02710, "Maximum Likelihood RL"): A_j = (r_j - r̄)/r̄
    with r̄ the group's mean reward; A = 0 for a group with r̄ = 0 (nothing to normalise by).

    GRPO's line with the std replaced by the mean: with ĝ = (1/G) Σ_j A_j ∇log π_j this is
    (1/K) Σ_{positives} ∇log π - (1/G) Σ_j ∇log π for binary rewards, K ≥ 1 positives: the
    positives' likelihood (the maximum-likelihood gradient, ∇log p = g⁺) minus a control variate.
    Implied weight, K ~ Bin(G, p): E[ĝ] = Pr[K ≥ 1]·g⁺ - E[1{K ≥ 1}·(1/G)Σ_j ∇log π_j]; the second
    term is -(1-p)^G g⁻ (the all-wrong groups' share of E[Σ ∇log π] = 0) and g⁻ = -p g⁺/(1-p), so
    E[ĝ] = (1 - (1-p)^(G-1))·g⁺ = w(p)·∇p, w(p) = (1 - (1-p)^(G-1))/p = Σ_{t<G} (1-p)^(t-1):
    log p truncated at G - 1 terms of its series -Σ_t (1-p)^t/t (the control variate costs one
    term against RAFT's positives normalisation, truncated at G; G = 1 trains nothing).

    Reference code: the paper's (tajwarfahim/maxrl, verl `compute_maxrl_outcome_advantage`)
    divides by r̄ + 1e-6, which is this within ε/r̄ and 0 on an all-wrong group; prime-rl's
    `MaxRLAlgorithm` guards r̄ ≤ 0 → 0 and divides by r̄ exactly, as here (its tests: [1,0,0,0]
    → [3,-1,-1,-1]). The paper's theorem states order G for the estimator that still subtracts
    the control variate on all-wrong groups; the one it and both codes run (0 there) is order
    G - 1, as derived above and measured on the exact bandit (tests/unit/algo/
    test_exact_gradients.py, tests/component/allocator/test_log_family_exact_bandit.py).
    """
    r = _group(rewards)
    mean = r.mean()
    if mean <= 0.0:
        return np.zeros(r.size)
    return (r - mean) / mean


def maxrl_weight(p: np.ndarray, *, group_size: int) -> np.ndarray:  # [P] -> [P]
    """MaxRL's implied weight on a uniform group of n: w(p) = (1 - (1-p)^(n-1))/p, with its
    limit n - 1 at p = 0 (`maxrl_advantages`)."""
    p = np.asarray(p, dtype=np.float64)
    safe = np.where(p > 0, p, 1.0)
    return np.where(p > 0, (1.0 - (1.0 - p) ** (group_size - 1)) / safe, group_size - 1.0)


def _maxrl_words(spec: GroupSpec) -> str:
    terms = spec.size - 1
    return _focal_words(
        f"log p truncated at n - 1 = {terms} terms of its series (MaxRL: w(p) = (1 - (1 - p)^"
        f"{terms})/p, at most {terms} at p → 0)",
        spec,
    )


def _maxrl_closed_form(p: np.ndarray, spec: GroupSpec) -> np.ndarray | None:
    return None if spec.options.focal_gamma else maxrl_weight(p, group_size=spec.size)


@uniform_estimator(
    "maxrl",
    implied=ImpliedObjective(_maxrl_words, _maxrl_closed_form),
    objective="log",
    group_relative=True,
    min_group_size=lambda k, options: 2,
)
def _maxrl(group: GroupInputs) -> np.ndarray:
    return maxrl_advantages(group.rewards)


def reinforce_baseline_advantages(
    rewards: np.ndarray, *, baseline: float | np.ndarray
) -> np.ndarray:
    """REINFORCE with a baseline independent of the group's own samples: A_j = r_j - b.

    `baseline` is a scalar or per-sample [G] array (e.g. a value estimate or the true p).
    Unbiased for ∇p because E[∇log π] = 0: implied weight 1 (linear).
    """
    r = _group(rewards)
    b = np.broadcast_to(np.asarray(baseline, dtype=np.float64), r.shape)
    return r - b


# objective "log": the knapsack's value has always served log p here, though the weight is 1
# (linear); changing it would change what knapsack runs with this advantage draw.
@uniform_estimator(
    "reinforce_baseline",
    implied=ImpliedObjective(lambda spec: "p (weight 1)", _constant_weight(lambda spec: 1.0)),
    objective="log",
)
def _reinforce_baseline(group: GroupInputs) -> np.ndarray:
    if group.prior_pass_rate is None:
        raise ValueError("reinforce_baseline needs the prompt's prior pass rate as its baseline")
    return reinforce_baseline_advantages(group.rewards, baseline=group.prior_pass_rate)


def ada_est_advantages(
    rewards: np.ndarray, *, eps: float, pass_rate: float | None = None
) -> np.ndarray:
    """Reinforce-Ada-Est (paper v3, Algorithm 1): A_j = (r_j - r̄)/√(r̄ + ε).

    r̄ is the group mean, or `pass_rate` when known. With r̄ = p the implied weight is
    1/√(p+ε); combined with n_i ∝ 1/√(p̂_i+ε) samples and a per-sample mean over the batch the
    prompt's total weight is ∝ 1/(p+ε): the log objective. (Not in any public code.)
    """
    if eps < 0:
        raise ValueError(f"eps must be >= 0 (got {eps})")
    r = _group(rewards)
    mean = r.mean() if pass_rate is None else pass_rate
    if mean + eps <= 0.0:
        return np.zeros(r.size)  # all-zero group with eps = 0: no signal, avoid 0/0
    return (r - mean) / np.sqrt(mean + eps)


@uniform_estimator(
    "ada_est",
    implied=ImpliedObjective(
        lambda spec: "log p (Ada-Est: weight ≈ 1/p with a sample-mean loss)",
        _no_closed_form,
        needs_sampler="ada_est",
    ),
    objective="log",
)
def _ada_est(group: GroupInputs) -> np.ndarray:
    return ada_est_advantages(
        group.rewards, eps=group.options.ada_est_eps, pass_rate=group.true_pass_rate
    )


def _labels(rewards: np.ndarray, positive_threshold: float) -> np.ndarray:
    return np.asarray(rewards, dtype=np.float64) > positive_threshold


def _choose(n: int, k: int) -> int:
    """C(n, k), 0 outside 0 <= k <= n (also for n < 0: scipy's `comb` convention)."""
    return comb(n, k) if 0 <= k <= n else 0


def _check_group_covers_k(size: int, k: int, what: str) -> None:
    if size < k:
        raise ValueError(
            f"{what} needs a group of at least k samples: got {size} < k={k} (the pass@k "
            "estimate 1 - C(N_neg, k)/C(N, k) is undefined; the reference code returns NaN); "
            "raise the group size or lower objective_k"
        )


def passk_training_advantages(
    rewards: np.ndarray,  # [N] rewards of one group
    *,
    k: int,
    positive_threshold: float = 0.5,
    eps: float = PASSK_TRAINING_EPS,
) -> np.ndarray:  # [N] float64
    """Pass@k Training with analytical advantages (Chen et al. 2025, arXiv 2508.10751, eqs. for
    Â_pos/Â_neg; code RUCAIBox/Passk_Training `code/passk_adv.py`). N samples, N_neg negatives:

        R̄ = 1 - C(N_neg, k)/C(N, k)                (the group's unbiased pass@k)
        σ = √(R̄(1 - R̄))
        A⁺ = (1 - R̄)/(σ + ε),   A⁻ = (1 - R̄ - C(N_neg - 1, k - 1)/C(N - 1, k - 1))/(σ + ε)

    ε = 1e-6 added to σ, as the code does. A sample's 1 - C(...)/C(...) term is the mean pass@k
    reward of the k-subsets that contain it, so A is that minus its group mean R̄ (Σ_j A_j = 0).
    Edge cases, as the reference computes them: a one-label group, and any group with
    N_neg < k (every k-subset holds a positive: R̄ = 1), get all zeros; N < k is undefined (the
    reference returns NaN) and raises. k = 1 is GRPO with the population std (ddof 0). Labels are
    r > `positive_threshold` (the reference tests r == 1; identical for 0/1 rewards). Implied
    weight: `passk_training_weight`.
    """
    r = _group(rewards)
    k = check_objective_k(k)
    size = r.size
    _check_group_covers_k(size, k, "Pass@k Training")
    if eps < 0:
        raise ValueError(f"eps must be >= 0 (got {eps})")
    labels = _labels(r, positive_threshold)
    negatives = size - int(labels.sum())
    mean = 1.0 - _choose(negatives, k) / _choose(size, k)
    sigma = float(np.sqrt(mean * (1.0 - mean)))
    if sigma + eps == 0.0:
        return np.zeros(size)  # eps = 0 and one label: no signal, avoid 0/0
    a_pos = (1.0 - mean) / (sigma + eps)
    miss = _choose(negatives - 1, k - 1) / _choose(size - 1, k - 1) if negatives else 0.0
    a_neg = (1.0 - mean - miss) / (sigma + eps)
    return np.where(labels, a_pos, a_neg)


def _passk_training_words(spec: GroupSpec) -> str:
    n, k = spec.size, spec.k
    return (
        f"pass@{k}'s direction {k}(1 - p)^{k - 1} scaled per prompt by 1/σ (Pass@k Training): "
        f"w(p) = E[K(1 - R_K)/(σ_K + 1e-6)]/({n}p(1 - p)), K ~ Bin({n}, p), R_K = 1 - "
        f"C({n} - K, {k})/C({n}, {k}) the group's pass@{k}, σ_K = √(R_K(1 - R_K)); without "
        f"the 1/σ it would be (1 - {k}/{n})(1 - p)^{k - 1}"
    )


@uniform_estimator(
    "passk_training",
    implied=ImpliedObjective(
        _passk_training_words,
        lambda p, spec: passk_training_weight(p, group_size=spec.size, k=spec.k),
    ),
    objective="pass_at_k",
    min_group_size=lambda k, options: k,
)
def _passk_training(group: GroupInputs) -> np.ndarray:
    return passk_training_advantages(
        group.rewards, k=group.k, positive_threshold=group.positive_threshold
    )


def pkpo_advantages(
    rewards: np.ndarray,  # [n] rewards of one group
    *,
    k: int,
    baseline: str = "loo_minus_one",
    positive_threshold: float = 0.5,
) -> np.ndarray:  # [n] float64
    """PKPO for binary rewards (Walder & Karkhanis 2025, arXiv 2505.15201): the unbiased gradient
    of pass@k = 1 - (1-p)^k from n ≥ k samples, c correct. With ρ(n, c, k) = 1 - C(n-c, k)/C(n, k)
    (the unbiased pass@k estimate), the paper's effective rewards are

        s_i = k/n                        (correct)
        s_i = (k/n)·ρ(n - 1, c, k - 1)   (wrong)

    and Σ_i s_i ∇log π_i is unbiased for ∇pass@k; s_i is the mean over the k-subsets I ∋ i of
    max_I r, times C(n-1, k-1)/C(n, k). Baselines that keep it unbiased (`baseline`):

        "none"           s_i as above
        "loo"            s_i - (1/(n-1))·Σ_{j≠i} s_j computed on the n - 1 others
                         = s_i - k·ρ(n - 1, c - r_i, k)/(n - 1)        (the paper's s^(loo); n > k)
        "loo_minus_one"  (1/C(n, k))·Σ_{I ∋ i} [max_I r - max_{I∖i} r]  (the paper's s^(loo-1), its
                         lowest-variance form): C(n - c, k - 1)/C(n, k) if correct, 0 if wrong

    adarl's group estimator is ĝ = (1/n)·Σ_j A_j ∇log π_j, so A_i = n·s_i, and E[ĝ] =
    ∇pass@k = k(1-p)^(k-1)·∇p exactly for every baseline (`implied_weight`; tests enumerate all
    label vectors). Equal to Pass@k Training up to a per-prompt scale and baseline (arXiv
    2510.23049): `passk_training_advantages` = (A_none/k - R̄)/(σ + ε). n < k raises (ρ is
    undefined), as does "loo" at n = k.
    """
    r = _group(rewards)
    k = check_objective_k(k)
    n = r.size
    _check_group_covers_k(n, k, "PKPO")
    labels = _labels(r, positive_threshold)
    c = int(labels.sum())

    def rho(size: int, correct: int, subset: int) -> float:
        return 1.0 - _choose(size - correct, subset) / _choose(size, subset)

    if baseline == "loo_minus_one":
        s_pos = _choose(n - c, k - 1) / _choose(n, k)
        return np.where(labels, n * s_pos, 0.0)
    s_pos = k / n
    s_neg = (k / n) * rho(n - 1, c, k - 1) if c < n else 0.0
    s = np.where(labels, s_pos, s_neg)
    if baseline == "none":
        return n * s
    if baseline != "loo":
        raise ValueError(f"PKPO baseline must be one of {PKPO_BASELINES} (got {baseline!r})")
    if n <= k:
        raise ValueError(
            f"PKPO's 'loo' baseline needs n > k (got n={n}, k={k}): it estimates pass@k from "
            "the n - 1 other samples; use baseline='loo_minus_one' (defined for n >= k)"
        )
    b_pos = k * rho(n - 1, c - 1, k) / (n - 1) if c > 0 else 0.0
    b_neg = k * rho(n - 1, c, k) / (n - 1) if c < n else 0.0
    return n * (s - np.where(labels, b_pos, b_neg))


@uniform_estimator(
    "pkpo",
    implied=ImpliedObjective(
        lambda spec: (
            f"pass@{spec.k}: 1 - (1 - p)^{spec.k} (weight {spec.k}(1 - p)^{spec.k - 1}), "
            f"exactly (PKPO, baseline {spec.options.pkpo_baseline})"
        ),
        lambda p, spec: spec.k * (1.0 - p) ** (spec.k - 1),
    ),
    objective="pass_at_k",
    # "loo" estimates pass@k from the n - 1 other samples: n > k
    min_group_size=lambda k, options: k + 1 if options.pkpo_baseline == "loo" else k,
)
def _pkpo(group: GroupInputs) -> np.ndarray:
    return pkpo_advantages(
        group.rewards,
        k=group.k,
        baseline=group.options.pkpo_baseline,
        positive_threshold=group.positive_threshold,
    )


def focal_scale(
    rewards: np.ndarray,  # [G] rewards of one group
    *,
    gamma: float,
    positive_threshold: float = 0.5,
) -> float:
    """F-GRPO's difficulty weight (Plyusov et al. 2026, arXiv 2602.06717): g = (1 - μ̂_pos)^γ,
    μ̂_pos the group's success rate (its share of samples with r > `positive_threshold`), which
    multiplies a group-relative advantage (GRPO's, and here also Dr. GRPO's and RLOO's). γ = 0 is
    1 (off); larger γ down-weights groups that mostly succeed. Implied weight with GRPO:
    `focal_grpo_weight`."""
    if not (np.isfinite(gamma) and gamma >= 0):
        raise ValueError(f"focal gamma must be >= 0 (got {gamma}); 0 turns the factor off")
    r = _group(rewards)
    success = float(_labels(r, positive_threshold).mean())
    return float((1.0 - success) ** gamma)


def passk_training_weight(
    p: np.ndarray | float,  # [...] pass rates in (0, 1)
    *,
    group_size: int,
    k: int,
    eps: float = PASSK_TRAINING_EPS,
) -> np.ndarray:  # [...] float64
    """Closed form of Pass@k Training's implied weight (arXiv 2508.10751; `passk_training_
    advantages`), n = `group_size` ≥ k, K ~ Bin(n, p), R̄_K = 1 - C(n-K, k)/C(n, k):

        w(p) = E[K·(1 - R̄_K)/(σ_K + ε)] / (n p (1-p)),   σ_K = √(R̄_K(1 - R̄_K)).

    Derivation: by (★), K(1-p)A⁺ - (n-K)pA⁻ = [(1-R̄)(K - np) + (n-K)·p·q]/(σ+ε) with
    q = C(n-K-1, k-1)/C(n-1, k-1), and (n-K)·q = n(1-R̄), so the bracket is K(1-R̄). Without the
    1/(σ + ε) scale, E[K(1-R̄)] = (n-k)·p(1-p)^k and w = (1 - k/n)·(1-p)^(k-1): pass@k's
    direction k(1-p)^(k-1) times (n-k)/(nk), the mean baseline's cost (Dr. GRPO's (n-1)/n at
    k = 1). The 1/σ_K is a per-prompt scale, largest where the group's pass@k is near 0 or 1."""
    p_arr = np.asarray(p, dtype=np.float64)
    if group_size < k:
        raise ValueError(f"Pass@k Training needs group_size >= k (got {group_size} < {k})")
    out = np.empty(p_arr.shape)
    n = group_size
    total = comb(n, k)
    mean = np.array([1.0 - comb(n - j, k) / total for j in range(n + 1)])  # R̄_K by K
    sigma = np.sqrt(mean * (1.0 - mean))
    term = np.arange(n + 1) * (1.0 - mean) / (sigma + eps)
    for index, value in np.ndenumerate(p_arr):
        pv = float(value)
        out[index] = float(_binomial(pv, n) @ term) / (n * pv * (1.0 - pv))
    return out


def focal_grpo_weight(
    p: np.ndarray | float,  # [...] pass rates in (0, 1)
    *,
    group_size: int,
    gamma: float,
    eps: float = GRPO_EPS,
) -> np.ndarray:  # [...] float64
    """Closed form of F-GRPO's implied weight (arXiv 2602.06717): GRPO's advantage times
    (1 - K/n)^γ, n = `group_size` ≥ 2, K ~ Bin(n, p), σ_K = √(K(n-K)/(n(n-1))) (unbiased std):

        w(p) = E[(1 - K/n)^γ · K(n-K)/(n²(σ_K + ε))] / (p(1-p))

    (GRPO's own weight at γ = 0). The factor shrinks each prompt's weight by the expected power of
    its group's failure rate: for large n, ≈ (1-p)^γ times GRPO's 1/√(p(1-p))."""
    if group_size < 2:
        raise ValueError(f"focal_grpo_weight needs group_size >= 2 (got {group_size})")
    p_arr = np.asarray(p, dtype=np.float64)
    n = group_size
    j = np.arange(n + 1, dtype=np.float64)
    sigma = np.sqrt(j * (n - j) / (n * (n - 1)))
    term = (1.0 - j / n) ** gamma * j * (n - j) / (n**2 * (sigma + eps))
    out = np.empty(p_arr.shape)
    for index, value in np.ndenumerate(p_arr):
        pv = float(value)
        out[index] = float(_binomial(pv, n) @ term) / (pv * (1.0 - pv))
    return out
