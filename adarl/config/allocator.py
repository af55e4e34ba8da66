"""Structured config of the budget allocator (`adarl.allocator.build_allocator` reads it).

`AllocatorConfig`
    sampler: how rollouts are spent per prompt: "uniform" (GRPO: `uniform_samples_per_prompt`
        each),
        "seq_pos" (Reinforce-Ada-Seq: until `sequential.k_pos` positives), "seq_balance"
        (until `k_pos` positives and `k_neg` negatives), "dynamic_filter" (DAPO: keep groups
        with mixed outcomes, refill prompts until `prompts_per_step` groups), "ada_est"
        (Reinforce-Ada-Est: n_i ∝ 1/√(p̂_i + ε) from an EMA), "gvm" (GVM: pre-sample, then
        allocate by pass rate and gradient norm), "knapsack" (split `rollouts_per_step` across
        `curation.candidates_per_step` candidates by each one's history: Knapsack-RL's value, the
        declared objective's, or HORA's hit utility; adarl/allocator/samplers/knapsack.py).
    prompts_per_step: prompts the driver draws per step; the dynamic filter's target number of
        trained groups.
    uniform_samples_per_prompt: each prompt's draw, exactly, for "uniform" and "dynamic_filter"
        (and the draw a curation skip predicts collapse for).
    mean_samples_per_prompt: the mean responses per prompt for "ada_est", "gvm" (second-stage
        samples, after the pilot) and "knapsack" (also its first-visit draw): the step's budget is
        this × prompts_per_step.
    samples_per_prompt: retired (it meant four things); setting it fails, naming the key that
        replaces it for the sampler: uniform_samples_per_prompt, mean_samples_per_prompt,
        sequential.initial_samples (the sequential first draw), group.pool_weight (the weight of
        a whole pool) or rollouts_per_step (the budget).
    max_samples_per_prompt: per-prompt cap for the sequential samplers, "ada_est", "gvm" and
        "knapsack".
    rollouts_per_step: the step's rollout budget, spent to the rollout: prompts are drawn until it
        is (so a step's trained batch varies in prompts). null = prompts_per_step ×
        mean_samples_per_prompt for "knapsack", prompts_per_step × uniform_samples_per_prompt under
        a curation skip (what GRPO with the same prompts spends); for "uniform" without a skip null
        keeps the fixed prompts_per_step (the same spend). For "seq_pos" and "seq_balance"
        (streaming) it is an admission target, not a cap: the step admits the driver's
        prompts_per_step prompts, then more as they settle, while its committed samples (drawn, and
        at least the run's mean per prompt for each open one) are under it; every admitted prompt
        runs its stopping rule to the end, so the declared objective is unchanged and a step spends
        about this many (null: the fixed prompts_per_step batch, capped by max_samples_per_step).
        The other samplers keep their own per-step rules (ada_est and gvm spend
        mean_samples_per_prompt × prompts_per_step already) and refuse a value.
    max_samples_per_step: global cap on responses drawn in one step (counted at dispatch, never
        exceeded); None = prompts_per_step × max_samples_per_prompt for the sequential
        samplers (no cap under their rollouts_per_step, which admits prompts instead),
        4 × prompts_per_step × uniform_samples_per_prompt for "dynamic_filter" (the verl recipe's
        usual max_num_gen_batches), no cap for "uniform".
    positive_threshold: a response is positive iff reward > this (the reference code uses 0.7).
    seed: seeds requests and random downsampling (derived per step/prompt: no RNG state); None
        (default) = derived from the root `seed` (adarl/config/seeds.py).
    sequential: `SequentialConfig`; dynamic_filter: `DynamicFilterConfig`;
    estimation: `EstimationConfig`; group: `GroupConfig`; curation: `CurationConfig`;
    rehearsal: `RehearsalConfig`.

`SequentialConfig` (seq_pos, seq_balance)
    k_pos, k_neg: positives and negatives the exit condition needs (seq_pos uses k_pos only).
    mode: "streaming" (dispatch a prompt's next draw the moment its last one returns; chunk rule
        in `adarl.allocator.samplers.sequential`) or "rounds" (the reference implementation's
        synchronous rounds; the cap becomes round_repeat × max_rounds).
    initial_samples: floor of the first draw per prompt in streaming mode; None = the fewest
        samples after which the rule could resolve (k_pos + k_neg). The first draw is also what
        a whole pool weighs unless group.pool_weight says otherwise.
    max_overshoot_fraction: streaming draw sizes (`adarl.algo.drawing.DrawRule`): a draw's
        expected overshoot (samples the one-at-a-time rule would not have drawn) is at most this
        fraction of the pool's useful samples (those already drawn plus the draw's useful ones),
        under the prompt's posterior predictive; the sampler then draws about (1 + this)× the
        one-at-a-time rule's samples (exact by pass rate at the default 0.03, cap 16: ≤ 1.13×).
        Larger values trade rollouts for fewer sequential waits (the Pareto front in
        docs/benchmarks.md "Sampler"); 0 = never overshoot (most waits); .inf = the whole cap at
        once.
    use_history: streaming mode: a prompt seen in earlier steps adds its EMA counts
        (`estimation.ema_decay`) to its posterior, so a prompt that was hopeless last epoch takes
        its cap at once (draw sizes only: the stopping rule and the estimates ignore history).
    round_repeat, max_rounds: rounds mode: samples per active prompt per round, rounds at most.

`DynamicFilterConfig`
    min_pass_rate, max_pass_rate: keep a group iff its rewards are not all equal and its pass
        rate is in [min, max] (0 and 1: DAPO's std > 0 rule).
    min_keep_rate: floor of the keep-rate estimate used to over-sample prompts (caps the
        over-sampling factor at 1/min_keep_rate).
    max_carry_age_steps: surplus kept groups are trained at most this many steps after they
        were sampled (0 = discard the surplus, as DAPO does).

`EstimationConfig` (ada_est, gvm; the EMA is kept for every sampler and logged)
    ema_decay: λ of the per-prompt count EMA (N ← λN + n_t).
    prior_alpha, prior_beta: Beta prior of the EMA pass-rate estimate.
    epsilon: ε in Ada-Est's n_i ∝ 1/√(p̂_i + ε).
    ada_est_rule: Ada-Est's allocation: "inverse_sqrt" (n ∝ 1/√(p̂ + ε), the paper),
        "sqrt_odds" (n ∝ √((1-p̂)/p̂): variance-optimal for log p with a baseline) or
        "variance_optimal" (n ∝ w(p̂)√(p̂(1-p̂)) for `group.objective`).
    pilot_samples: Ada-Est: a prompt never seen, or not seen within `max_age_steps`, first gets
        this many samples (paid from the step's budget, used only to estimate p̂).
    max_age_steps: Ada-Est: per-prompt statistics older than this many steps are stale and
        re-estimated by a pilot instead; null = never stale.
    min_samples_per_prompt: Ada-Est's floor on responses per prompt (>= 1); GVM's floor on
        second-stage responses per prompt (0 = the reference: prompts with p_i = 0 or G_i = 0
        get none).
    gvm_presamples: GVM's pre-sampling responses per prompt (N').
    gvm_alpha, gvm_beta: GVM's weight w_i = G_i / √(p_i + α / p_i^(β-1)).

`CurationConfig` (history before rollout: adarl/allocator/curation.py, samplers/knapsack.py,
stats.py)
    skip: "none", "greso" (GRESO's rule: a prompt whose last z visits were all correct (all
        wrong) is drawn with probability max(p_easy^z, 0.01) (p_hard^z), p_easy and p_hard
        adapted each step towards a target zero-variance share) or "posterior" (drawn with
        probability max(min_inclusion_probability, 1 - P(all n equal)) under the prompt's Beta
        posterior). Needs "uniform" (it runs under rollouts_per_step, refilling skipped prompts).
    inverse_probability_weights: multiply a kept prompt's advantages by 1/π, π its probability of
        being drawn (skip or knapsack exploration), so the declared objective is kept exactly;
        false: the run optimises the π-reweighted objective, and says so.
    max_skipped_visits: a prompt skipped this many visits in a row is drawn at its next visit
        (π = 1): none is starved; null = no bound (GRESO's 1% floor only). With the declared
        knapsack, candidates_per_step × min_samples_per_prompt must fit the step's budget (every
        candidate of a step may be due at once).
    min_inclusion_probability: skip "posterior": the floor of π (bounds the 1/π weights).
    max_candidates_per_step: the most candidates a step may look at; null = 8 × prompts_per_step
        (past it the step trains what it has, counted: sampling/candidate_cap_reached).
    greso_p_easy, greso_p_hard: GRESO's initial exploration probabilities (0.5, 0.5).
    greso_target_zero_variance: GRESO's target share of zero-variance groups among drawn prompts
        (split ⅓ all-correct, ⅔ all-wrong); greso_step_size: its per-step adjustment;
        greso_min_p, greso_max_p: its clamp.
    knapsack_value: "knapsack" sampler: "knapsack_rl" (Knapsack-RL's value (1-p̂^n-(1-p̂)^n)·
        p̂(1-p̂)² with its last-visit estimate, minimum and fallback), "declared" (adarl: the
        expected share of the declared objective's gradient under the posterior) or "hora"
        (HORA, arXiv 2605.07114: the hit utility 1 - E[(1-p)^n], the posterior probability that
        one of the n rollouts is correct, p ~ Beta(1 + s, 1 + f) from a uniform prior and the
        prompt's discounted record of s positives and f negatives; every candidate gets at least
        min_samples_per_prompt, so explore_fraction must be 0 and candidates_per_step ×
        min_samples_per_prompt must fit the budget).
    candidates_per_step: "knapsack": candidates the budget is split across; null =
        prompts_per_step (Knapsack-RL); more lets the budget fill with prompts that carry signal.
    min_samples_per_prompt: "knapsack": the fewest samples a drawn prompt gets (2).
    explore_fraction: "knapsack" declared: share of the budget spent on candidates the split
        left out, drawn at random (their probability π enters the 1/π weights).
    prior_pool: where an unseen prompt's prior comes from: "difficulty" (the prompts with its
        `difficulty` value; the whole task when rows have none) or "task".
    history_half_life_steps: the age discount of a prompt's record (weight halves every this
        many steps); null = every outcome counts fully.
    max_prior_strength: the most pseudo-samples a pooled prior may weigh (a₀ + b₀).
    min_pool_weight: a pool's prior is used once its visits weigh this much (before: the task's).

`RehearsalConfig` (DPH-RL, arXiv 2509.07430: adarl/allocator/rehearsal.py; docs/algorithms.md
§14.2)
    enabled: the one switch. A prompt whose first pool of the run holds at least `min_samples`
        samples, all correct, joins the rehearsal store (D_pef) with the first correct sample of
        that pool; drawn again, it is not sampled for RL (no rollout; counted:
        sampling/rehearsal_skipped_prompts), and every step trains up to `per_step` stored
        samples as rehearsal rows under the loss's forward-KL term to the learners' frozen
        reference (`learner.loss.rehearsal_coef`, the paper's η; the reference is loaded for it).
        No rollout is drawn for it: the samples are the run's own. false = off.
    min_samples: the fewest samples an all-correct first pool needs (the paper's 8 of 8).
    per_step: stored samples trained per step, cycling through the store in the order prompts
        joined it.

`GroupConfig`: adarl/config/group.py.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from adarl.algo.advantages import POOL_ADVANTAGE, AdvantageOptions, get_uniform_estimator
from adarl.config.group import GroupConfig

SAMPLERS = ("uniform", "seq_pos", "seq_balance", "dynamic_filter", "ada_est", "gvm", "knapsack")
SKIP_RULES = ("none", "greso", "posterior")
KNAPSACK_VALUES = ("declared", "knapsack_rl", "hora")
PRIOR_POOLS = ("difficulty", "task")
# Samplers that spend a rollout budget to the rollout, drawing prompts until it is spent.
BUDGETED_SAMPLERS = ("uniform", "knapsack")
SEQUENTIAL_MODES = ("streaming", "rounds")
SEQUENTIAL_SAMPLERS = ("seq_pos", "seq_balance")
ADA_EST_RULES = ("inverse_sqrt", "sqrt_odds", "variance_optimal")


@dataclass
class SequentialConfig:
    k_pos: int = 2
    k_neg: int = 2
    mode: str = "streaming"
    initial_samples: int | None = None
    max_overshoot_fraction: float = 0.03
    use_history: bool = True
    round_repeat: int = 8
    max_rounds: int = 4

    def validate(self, *, sampler: str, max_samples_per_prompt: int) -> None:
        if self.mode not in SEQUENTIAL_MODES:
            raise ValueError(
                f"allocator.sequential.mode={self.mode!r} is not one of {SEQUENTIAL_MODES}"
            )
        k_neg = 0 if sampler == "seq_pos" else self.k_neg
        if self.k_pos < 0 or k_neg < 0 or self.k_pos + k_neg < 1:
            raise ValueError(
                f"allocator.sequential.k_pos={self.k_pos}, k_neg={k_neg}: need both >= 0 and at "
                "least one positive (seq_pos needs k_pos >= 1)"
            )
        if self.mode == "rounds":
            if self.round_repeat < 1 or self.max_rounds < 1:
                raise ValueError(
                    "allocator.sequential.round_repeat and max_rounds must be >= 1 "
                    f"(got {self.round_repeat}, {self.max_rounds})"
                )
        elif max_samples_per_prompt < self.k_pos + k_neg:
            raise ValueError(
                f"allocator.max_samples_per_prompt={max_samples_per_prompt} < k_pos + k_neg = "
                f"{self.k_pos + k_neg}: no prompt could resolve; raise the cap"
            )
        if self.initial_samples is not None and not (
            1 <= self.initial_samples <= max_samples_per_prompt
        ):
            raise ValueError(
                f"allocator.sequential.initial_samples={self.initial_samples} must be in "
                f"[1, max_samples_per_prompt={max_samples_per_prompt}] or null"
            )
        if not self.max_overshoot_fraction >= 0:
            raise ValueError(
                f"allocator.sequential.max_overshoot_fraction={self.max_overshoot_fraction} must "
                "be >= 0 (0: never draw past the stopping rule; .inf: the whole cap at once)"
            )


@dataclass
class DynamicFilterConfig:
    min_pass_rate: float = 0.0
    max_pass_rate: float = 1.0
    min_keep_rate: float = 0.1
    max_carry_age_steps: int = 1

    def validate(self) -> None:
        if not 0.0 <= self.min_pass_rate <= self.max_pass_rate <= 1.0:
            raise ValueError(
                "allocator.dynamic_filter: need 0 <= min_pass_rate <= max_pass_rate <= 1 "
                f"(got {self.min_pass_rate}, {self.max_pass_rate})"
            )
        if not 0.0 < self.min_keep_rate <= 1.0:
            raise ValueError(
                f"allocator.dynamic_filter.min_keep_rate={self.min_keep_rate} must be in (0, 1] "
                "(e.g. 0.1: over-sample prompts at most 10x)"
            )
        if self.max_carry_age_steps < 0:
            raise ValueError(
                f"allocator.dynamic_filter.max_carry_age_steps={self.max_carry_age_steps} must "
                "be >= 0 (0 discards surplus groups)"
            )


@dataclass
class EstimationConfig:
    ema_decay: float = 0.9
    prior_alpha: float = 1.0
    prior_beta: float = 1.0
    epsilon: float = 0.05
    ada_est_rule: str = "inverse_sqrt"
    pilot_samples: int = 2
    max_age_steps: int | None = 100
    min_samples_per_prompt: int = 2
    gvm_presamples: int = 8
    gvm_alpha: float = 1e-3
    gvm_beta: float = 2.0

    def validate(self) -> None:
        if not 0.0 <= self.ema_decay <= 1.0:
            raise ValueError(f"allocator.estimation.ema_decay={self.ema_decay} must be in [0, 1]")
        if self.prior_alpha <= 0 or self.prior_beta <= 0:
            raise ValueError(
                "allocator.estimation.prior_alpha and prior_beta must be > 0 "
                f"(got {self.prior_alpha}, {self.prior_beta}; 1 and 1 is a uniform prior)"
            )
        if self.epsilon < 0:
            raise ValueError(f"allocator.estimation.epsilon={self.epsilon} must be >= 0")
        if self.ada_est_rule not in ADA_EST_RULES:
            raise ValueError(
                f"allocator.estimation.ada_est_rule={self.ada_est_rule!r} is not one of "
                f"{ADA_EST_RULES}"
            )
        if self.pilot_samples < 1:
            raise ValueError(
                f"allocator.estimation.pilot_samples={self.pilot_samples} must be >= 1"
            )
        if self.max_age_steps is not None and self.max_age_steps < 0:
            raise ValueError(
                f"allocator.estimation.max_age_steps={self.max_age_steps} must be >= 0 or null"
            )
        if self.min_samples_per_prompt < 0:
            raise ValueError(
                f"allocator.estimation.min_samples_per_prompt={self.min_samples_per_prompt} "
                "must be >= 0"
            )
        if self.gvm_presamples < 1:
            raise ValueError(
                f"allocator.estimation.gvm_presamples={self.gvm_presamples} must be >= 1 (GVM "
                "uses 8)"
            )


@dataclass
class CurationConfig:
    skip: str = "none"
    inverse_probability_weights: bool = True
    max_skipped_visits: int | None = 3
    min_inclusion_probability: float = 0.05
    max_candidates_per_step: int | None = None
    greso_p_easy: float = 0.5
    greso_p_hard: float = 0.5
    greso_target_zero_variance: float = 0.25
    greso_step_size: float = 0.01
    greso_min_p: float = 0.05
    greso_max_p: float = 0.95
    knapsack_value: str = "declared"
    candidates_per_step: int | None = None
    min_samples_per_prompt: int = 2
    explore_fraction: float = 0.05
    prior_pool: str = "difficulty"
    history_half_life_steps: float | None = None
    max_prior_strength: float = 50.0
    min_pool_weight: float = 4.0

    def validate(self, *, sampler: str) -> None:
        for key, value, allowed in (
            ("skip", self.skip, SKIP_RULES),
            ("knapsack_value", self.knapsack_value, KNAPSACK_VALUES),
            ("prior_pool", self.prior_pool, PRIOR_POOLS),
        ):
            if value not in allowed:
                raise ValueError(f"allocator.curation.{key}={value!r} is not one of {allowed}")
        if self.skip != "none" and sampler != "uniform":
            raise ValueError(
                f"allocator.curation.skip={self.skip!r} needs allocator.sampler=uniform (it "
                f"refills skipped prompts under rollouts_per_step), got {sampler!r}; the "
                "knapsack sampler skips by itself"
            )
        if self.max_skipped_visits is not None and self.max_skipped_visits < 0:
            raise ValueError(
                f"allocator.curation.max_skipped_visits={self.max_skipped_visits} must be >= 0 "
                "or null (no bound)"
            )
        if not 0.0 < self.min_inclusion_probability <= 1.0:
            raise ValueError(
                "allocator.curation.min_inclusion_probability="
                f"{self.min_inclusion_probability} must be in (0, 1]"
            )
        for key, value in (
            ("max_candidates_per_step", self.max_candidates_per_step),
            ("candidates_per_step", self.candidates_per_step),
        ):
            if value is not None and value < 1:
                raise ValueError(f"allocator.curation.{key}={value} must be >= 1 or null")
        if not (
            0.0 < self.greso_min_p <= self.greso_max_p < 1.0
            and self.greso_min_p <= self.greso_p_easy <= self.greso_max_p
            and self.greso_min_p <= self.greso_p_hard <= self.greso_max_p
        ):
            raise ValueError(
                "allocator.curation: need 0 < greso_min_p <= greso_p_easy, greso_p_hard <= "
                f"greso_max_p < 1 (got {self.greso_min_p}, {self.greso_p_easy}, "
                f"{self.greso_p_hard}, {self.greso_max_p})"
            )
        if not 0.0 <= self.greso_target_zero_variance <= 1.0 or self.greso_step_size < 0:
            raise ValueError(
                "allocator.curation: greso_target_zero_variance must be in [0, 1] and "
                f"greso_step_size >= 0 (got {self.greso_target_zero_variance}, "
                f"{self.greso_step_size})"
            )
        if self.min_samples_per_prompt < 1:
            raise ValueError(
                f"allocator.curation.min_samples_per_prompt={self.min_samples_per_prompt} must "
                "be >= 1"
            )
        if not 0.0 <= self.explore_fraction < 1.0:
            raise ValueError(
                f"allocator.curation.explore_fraction={self.explore_fraction} must be in [0, 1)"
            )
        if self.history_half_life_steps is not None and not self.history_half_life_steps > 0:
            raise ValueError(
                "allocator.curation.history_half_life_steps="
                f"{self.history_half_life_steps} must be > 0 or null (no discount)"
            )
        if not self.max_prior_strength > 0 or not self.min_pool_weight > 0:
            raise ValueError(
                "allocator.curation.max_prior_strength and min_pool_weight must be > 0 (got "
                f"{self.max_prior_strength}, {self.min_pool_weight})"
            )


@dataclass
class RehearsalConfig:
    enabled: bool = False
    min_samples: int = 8
    per_step: int = 16

    def validate(self) -> None:
        if self.min_samples < 1 or self.per_step < 1:
            raise ValueError(
                f"allocator.rehearsal.min_samples={self.min_samples} and per_step="
                f"{self.per_step} must be >= 1 (the paper's 8 of 8; e.g. 16 rows per step)"
            )


@dataclass(frozen=True)
class AllocatorPlan:
    """A validated `AllocatorConfig` and the counts it resolves to (`AllocatorConfig.plan`)."""

    config: AllocatorConfig
    max_samples_per_prompt: int  # the per-prompt cap (rounds: round_repeat × max_rounds)
    max_samples_per_step: int | None  # max_samples_per_step, its null resolved; None: no cap
    rollout_budget: int | None  # rollouts_per_step, its null resolved; None: no budget
    # each prompt's planned draw before its labels: the uniform draw, the mean (ada_est, gvm,
    # knapsack) or the sequential first draw (initial_samples, else k_pos + k_neg; rounds: a round)
    planned_samples_per_prompt: int
    pool_weight: int  # the sequences a whole pool weighs (group.pool_weight, null resolved)
    # the coverage phase's plan (`AllocatorConfig.coverage_phase_config`); None: no phase
    coverage_phase: AllocatorPlan | None = None


@dataclass
class AllocatorConfig:
    sampler: str = "seq_balance"
    prompts_per_step: int = 64
    uniform_samples_per_prompt: int = 4
    mean_samples_per_prompt: int = 4
    max_samples_per_prompt: int = 32
    max_samples_per_step: int | None = None
    rollouts_per_step: int | None = None
    positive_threshold: float = 0.5
    seed: int | None = None
    sequential: SequentialConfig = field(default_factory=SequentialConfig)
    dynamic_filter: DynamicFilterConfig = field(default_factory=DynamicFilterConfig)
    estimation: EstimationConfig = field(default_factory=EstimationConfig)
    group: GroupConfig = field(default_factory=GroupConfig)
    curation: CurationConfig = field(default_factory=CurationConfig)
    rehearsal: RehearsalConfig = field(default_factory=RehearsalConfig)
    samples_per_prompt: int | None = None  # retired: validation names what replaced it

    def rollout_budget(self) -> int | None:
        """The step's rollout budget (`rollouts_per_step`, its null resolved); None: none."""
        if self.rollouts_per_step is not None:
            return self.rollouts_per_step
        if self.sampler == "knapsack":
            return self.prompts_per_step * self.mean_samples_per_prompt
        if self.curation.skip != "none":
            return self.prompts_per_step * self.uniform_samples_per_prompt
        return None

    def candidate_cap(self) -> int:
        """The most candidates a step looks at (curation.max_candidates_per_step resolved)."""
        cap = self.curation.max_candidates_per_step
        return 8 * self.prompts_per_step if cap is None else cap

    def knapsack_candidates(self) -> int:
        """The candidates a knapsack step splits its budget across (null resolved)."""
        count = self.curation.candidates_per_step
        return self.prompts_per_step if count is None else count

    def advantage_options(self) -> AdvantageOptions:
        """The uniform-group estimators' own parameters, bound to the estimator the group
        builder receives (`adarl.allocator.estimators`) and read by the objective declaration
        (`adarl.algo.advantages.AdvantageOptions`)."""
        group = self.group
        return AdvantageOptions(
            raft_normalization=group.raft_normalization,
            pkpo_baseline=group.pkpo_baseline,
            ada_est_eps=self.estimation.epsilon,
            focal_gamma=group.focal_gamma,
            w_reinforce_lambda=group.w_reinforce_lambda,
        )

    def plan(self) -> AllocatorPlan:
        """This config, validated, with every count it leaves to be derived resolved once: the
        builders and the objective declaration read the plan, never these rules again."""
        self.validate()
        seq = self.sequential
        sequential = self.sampler in SEQUENTIAL_SAMPLERS
        cap = self.max_samples_per_prompt
        if sequential and seq.mode == "rounds":
            cap = seq.round_repeat * seq.max_rounds
        step_cap = self.max_samples_per_step
        if step_cap is None and sequential and self.rollouts_per_step is None:
            step_cap = self.prompts_per_step * cap
        elif step_cap is None and self.sampler == "dynamic_filter":
            # the verl recipe's usual max_num_gen_batches: 4 batches' worth
            step_cap = 4 * self.prompts_per_step * self.uniform_samples_per_prompt
        if self.sampler in ("uniform", "dynamic_filter"):
            planned = self.uniform_samples_per_prompt
        elif not sequential:
            planned = self.mean_samples_per_prompt
        elif seq.mode == "rounds":
            planned = seq.round_repeat
        elif seq.initial_samples is not None:
            planned = seq.initial_samples
        else:  # the fewest samples after which the rule could resolve
            planned = seq.k_pos + (0 if self.sampler == "seq_pos" else seq.k_neg)
        pool_weight = self.group.pool_weight
        coverage = self.coverage_phase_config()
        return AllocatorPlan(
            config=self,
            max_samples_per_prompt=cap,
            max_samples_per_step=step_cap,
            rollout_budget=self.rollout_budget(),
            planned_samples_per_prompt=planned,
            pool_weight=planned if pool_weight is None else pool_weight,
            coverage_phase=None if coverage is None else coverage.plan(),
        )

    def coverage_phase_config(self) -> AllocatorConfig | None:
        """This config as its coverage phase trains (`group.coverage_objective` and
        `coverage_advantage` in place of the run's own; a uniform estimator takes no
        correction), or None without a phase."""
        group = self.group
        if not group.coverage_phase_rollouts:
            return None
        advantage = group.coverage_advantage or group.advantage
        phase = dataclasses.replace(
            group,
            advantage=advantage,
            objective=group.coverage_objective or group.objective,
            correction=group.correction if advantage == POOL_ADVANTAGE else "none",
            coverage_phase_rollouts=0,
            coverage_objective=None,
            coverage_advantage=None,
        )
        return dataclasses.replace(self, group=phase)

    def validate_retired_keys(self) -> None:
        """`allocator.samples_per_prompt` meant four things; each has its own key now."""
        if self.samples_per_prompt is None:
            return
        if self.sampler in ("uniform", "dynamic_filter"):
            instead = f"allocator.uniform_samples_per_prompt={self.samples_per_prompt}"
        elif self.sampler in SEQUENTIAL_SAMPLERS:
            instead = (
                f"allocator.sequential.initial_samples={self.samples_per_prompt} (the first "
                f"draw) and/or allocator.group.pool_weight={self.samples_per_prompt} (what a "
                "whole pool weighs)"
            )
        else:
            instead = f"allocator.mean_samples_per_prompt={self.samples_per_prompt}"
        raise ValueError(
            f"allocator.samples_per_prompt is retired (it meant four things); with "
            f"allocator.sampler={self.sampler!r} set {instead}. Its replacements: "
            "allocator.uniform_samples_per_prompt (each prompt's draw: uniform, dynamic_filter), "
            "allocator.mean_samples_per_prompt (the mean: ada_est, gvm, knapsack), "
            "allocator.sequential.initial_samples (the sequential samplers' first draw), "
            "allocator.group.pool_weight (the sequences a whole pool weighs) and "
            "allocator.rollouts_per_step (the step's rollout budget)"
        )

    def validate(self) -> None:
        if self.sampler not in SAMPLERS:
            raise ValueError(f"allocator.sampler={self.sampler!r} is not one of {SAMPLERS}")
        self.validate_retired_keys()
        if self.prompts_per_step < 1:
            raise ValueError(f"allocator.prompts_per_step={self.prompts_per_step} must be >= 1")
        for key, value in (
            ("uniform_samples_per_prompt", self.uniform_samples_per_prompt),
            ("mean_samples_per_prompt", self.mean_samples_per_prompt),
        ):
            if value < 1:
                raise ValueError(f"allocator.{key}={value} must be >= 1")
        if self.sampler == "dynamic_filter" and self.uniform_samples_per_prompt < 2:
            raise ValueError(
                "allocator.uniform_samples_per_prompt must be >= 2 with sampler=dynamic_filter (a "
                "group of one never has mixed outcomes)"
            )
        if self.max_samples_per_prompt < 1:
            raise ValueError(
                f"allocator.max_samples_per_prompt={self.max_samples_per_prompt} must be >= 1"
            )
        if self.max_samples_per_step is not None and self.max_samples_per_step < 1:
            raise ValueError(
                f"allocator.max_samples_per_step={self.max_samples_per_step} must be >= 1 or "
                "null (the sampler's default cap)"
            )
        if not 0.0 <= self.positive_threshold < 1.0:
            raise ValueError(
                f"allocator.positive_threshold={self.positive_threshold} must be in [0, 1) "
                "(rewards are in [0, 1]; a response is positive iff reward > threshold)"
            )
        if self.sampler in SEQUENTIAL_SAMPLERS:
            self.sequential.validate(
                sampler=self.sampler, max_samples_per_prompt=self.max_samples_per_prompt
            )
        est = self.estimation
        if self.sampler == "ada_est" and not (
            1 <= est.min_samples_per_prompt <= self.max_samples_per_prompt
        ):
            raise ValueError(
                f"allocator.estimation.min_samples_per_prompt={est.min_samples_per_prompt} must "
                f"be in [1, allocator.max_samples_per_prompt={self.max_samples_per_prompt}] for "
                "sampler=ada_est"
            )
        if self.sampler == "gvm" and (
            est.min_samples_per_prompt > self.max_samples_per_prompt - est.gvm_presamples
        ):
            raise ValueError(
                f"allocator.estimation.min_samples_per_prompt={est.min_samples_per_prompt} "
                f"(GVM's floor on second-stage samples) exceeds allocator.max_samples_per_prompt"
                f" - estimation.gvm_presamples = {self.max_samples_per_prompt} - "
                f"{est.gvm_presamples}; lower it or raise the cap"
            )
        if self.rollouts_per_step is not None and self.sampler in SEQUENTIAL_SAMPLERS:
            if self.sequential.mode != "streaming":
                raise ValueError(
                    f"allocator.rollouts_per_step={self.rollouts_per_step} with "
                    f"allocator.sampler={self.sampler!r} admits prompts as others settle: set "
                    "allocator.sequential.mode=streaming (rounds have a fixed batch)"
                )
            if self.rollouts_per_step < 1:
                raise ValueError(
                    f"allocator.rollouts_per_step={self.rollouts_per_step} must be >= 1 or null"
                )
        elif self.rollouts_per_step is not None:
            if self.sampler not in BUDGETED_SAMPLERS:
                raise ValueError(
                    f"allocator.rollouts_per_step={self.rollouts_per_step} needs a sampler that "
                    f"spends a budget to the rollout, one of {BUDGETED_SAMPLERS}; "
                    f"{self.sampler!r} has its own per-step rule (max_samples_per_step caps it)"
                )
            if self.rollouts_per_step < 1:
                raise ValueError(
                    f"allocator.rollouts_per_step={self.rollouts_per_step} must be >= 1 or null"
                )
        self.curation.validate(sampler=self.sampler)
        if self.sampler == "knapsack":
            budget = self.rollout_budget()
            assert budget is not None
            cur = self.curation
            if not cur.min_samples_per_prompt <= self.max_samples_per_prompt:
                raise ValueError(
                    f"allocator.curation.min_samples_per_prompt={cur.min_samples_per_prompt} "
                    f"exceeds allocator.max_samples_per_prompt={self.max_samples_per_prompt}"
                )
            if self.knapsack_candidates() * self.max_samples_per_prompt < budget:
                raise ValueError(
                    f"allocator: {self.knapsack_candidates()} knapsack candidates of at most "
                    f"{self.max_samples_per_prompt} samples cannot spend the budget of {budget} "
                    "rollouts; raise curation.candidates_per_step or max_samples_per_prompt"
                )
            # The skip bound draws every candidate skipped max_skipped_visits visits in a row, at
            # min_samples_per_prompt each; a step may find all its candidates due, so only this
            # keeps the bound under any history (else the split fails mid-run).
            candidates = self.knapsack_candidates()
            due = candidates * cur.min_samples_per_prompt
            if (
                cur.knapsack_value == "declared"
                and cur.max_skipped_visits is not None
                and due > budget
            ):
                raise ValueError(
                    f"allocator: curation.max_skipped_visits={cur.max_skipped_visits} draws "
                    "every candidate skipped that often, and a step's "
                    f"{candidates} candidates may all be due: at "
                    f"curation.min_samples_per_prompt={cur.min_samples_per_prompt} each that is "
                    f"{due} rollouts, over the budget of {budget}; lower "
                    f"curation.candidates_per_step to <= {budget // cur.min_samples_per_prompt} "
                    "or set curation.max_skipped_visits=null (no skip bound)"
                )
        self.dynamic_filter.validate()
        self.estimation.validate()
        self.group.validate()
        self.validate_coverage()
        self.validate_coverage_phase()
        self.validate_rehearsal()

    def validate_coverage_phase(self) -> None:
        """The coverage phase is a config of its own that must hold, and differ from the run's."""
        if not self.group.coverage_phase_rollouts:
            return
        if self.sampler in ("ada_est", "gvm"):
            raise ValueError(
                f"allocator.group.coverage_phase_rollouts={self.group.coverage_phase_rollouts} "
                f"with allocator.sampler={self.sampler!r}: its allocation is paired with its own "
                "advantage, which a coverage phase would replace; use another sampler or "
                "allocator.group.coverage_phase_rollouts=0"
            )
        phase = self.coverage_phase_config()
        assert phase is not None
        group, first = self.group, phase.group
        if group.coverage_objective is not None and not (
            first.advantage == POOL_ADVANTAGE and first.correction == "selection"
        ):
            raise ValueError(
                f"allocator.group.coverage_objective={group.coverage_objective!r} is the declared "
                "f of pooled advantages with correction=selection, but the coverage phase trains "
                f"advantage={first.advantage!r} with correction={first.correction!r}; use "
                "allocator.group.coverage_advantage for a uniform estimator (e.g. pkpo)"
            )
        if (first.advantage, first.objective) == (group.advantage, group.objective):
            raise ValueError(
                "allocator.group.coverage_objective/coverage_advantage name what the run trains "
                f"already (advantage={group.advantage!r}, objective={group.objective!r}): the "
                "coverage phase would change nothing; name another, or set "
                "allocator.group.coverage_phase_rollouts=0"
            )
        try:
            phase.validate()
        except ValueError as error:
            raise ValueError(f"the coverage phase (allocator.group.coverage_*): {error}") from None

    def validate_rehearsal(self) -> None:
        """A rehearsal store that no first pool could ever join is refused: a sampler whose pools
        hold fewer samples than `rehearsal.min_samples`."""
        rehearsal = self.rehearsal
        rehearsal.validate()
        if not rehearsal.enabled:
            return
        largest, key = self.max_samples_per_prompt, "allocator.max_samples_per_prompt"
        if self.sampler in ("uniform", "dynamic_filter"):
            largest, key = self.uniform_samples_per_prompt, "allocator.uniform_samples_per_prompt"
        elif self.sampler in SEQUENTIAL_SAMPLERS and self.sequential.mode == "rounds":
            largest = self.sequential.round_repeat * self.sequential.max_rounds
            key = "allocator.sequential.round_repeat × max_rounds"
        if largest < rehearsal.min_samples:
            raise ValueError(
                f"allocator.rehearsal.min_samples={rehearsal.min_samples} but {key} = {largest} "
                "caps every pool below it: no prompt could join the rehearsal store; lower "
                f"allocator.rehearsal.min_samples to at most {largest} or draw more per prompt"
            )

    def validate_coverage(self) -> None:
        """The coverage options' cross-checks (docs/algorithms.md "Coverage objectives")."""
        group, cur = self.group, self.curation
        sequential = self.sampler in SEQUENTIAL_SAMPLERS
        if group.focal_gamma > 0 and sequential:
            raise ValueError(
                f"allocator.group.focal_gamma={group.focal_gamma} with sampler={self.sampler!r}: "
                "F-GRPO weighs a group by its success rate, but a sequential sampler's pool stops "
                "on its labels (its rate is pulled to the stopping rule's quota); use "
                "sampler=uniform (+experiment=f_grpo) or allocator.group.focal_gamma=0"
            )
        estimator = None
        if group.advantage != POOL_ADVANTAGE:
            estimator = get_uniform_estimator(group.advantage)
        if estimator is not None and estimator.min_group_size is not None:
            k = group.objective_k
            least = estimator.min_group_size(k, self.advantage_options())
            if self.sampler in ("uniform", "dynamic_filter"):
                size = self.uniform_samples_per_prompt
                if group.group_size is not None:
                    size = min(size, group.group_size)
                where = "allocator.uniform_samples_per_prompt (and group.group_size)"
            elif self.sampler == "knapsack" and group.group_size is None:
                size = cur.min_samples_per_prompt
                where = "allocator.curation.min_samples_per_prompt"
            else:
                raise ValueError(
                    f"allocator.group.advantage={group.advantage!r} needs uniform groups whose "
                    f"size is fixed before their labels, but sampler={self.sampler!r}"
                    + (" with group.group_size set" if self.sampler == "knapsack" else "")
                    + "; use sampler=uniform or dynamic_filter, or knapsack with "
                    "allocator.group.group_size=null"
                )
            if size < least:
                raise ValueError(
                    f"allocator.group.advantage={group.advantage!r} with objective_k={k} needs "
                    f"groups of at least {least} samples, but {where} allows {size}; raise it "
                    f"or lower allocator.group.objective_k"
                    + (" (or use pkpo_baseline=loo_minus_one)" if least > k else "")
                )
        if self.sampler == "knapsack" and cur.knapsack_value == "hora":
            budget = self.rollout_budget()
            assert budget is not None
            if cur.explore_fraction != 0.0:
                raise ValueError(
                    f"allocator.curation.explore_fraction={cur.explore_fraction} with "
                    "knapsack_value=hora: HORA gives every candidate at least "
                    "min_samples_per_prompt (nothing is left out to explore); set "
                    "allocator.curation.explore_fraction=0"
                )
            due = self.knapsack_candidates() * cur.min_samples_per_prompt
            if due > budget:
                raise ValueError(
                    f"allocator: knapsack_value=hora gives each of {self.knapsack_candidates()} "
                    f"candidates at least curation.min_samples_per_prompt="
                    f"{cur.min_samples_per_prompt}: {due} rollouts, over the budget of {budget}; "
                    f"lower curation.candidates_per_step to <= "
                    f"{budget // cur.min_samples_per_prompt} or min_samples_per_prompt"
                )
