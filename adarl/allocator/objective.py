"""What a configured allocator optimises, said in one line and backed by the exact implied weight.

`declare_objective(plan)` turns an `AllocatorPlan` (`AllocatorConfig.plan()`: the counts the
build uses, resolved once) into an `ObjectiveDeclaration`: the
objective f the run's gradient estimates in expectation (E[ĝ] = w(p)·∇p with w = f' times a gate),
stated with its gate where the gate is unavoidable (the per-prompt cap), and the exact implied
weight w(p) on a grid of pass rates from `adarl.algo.implied.implied_weight` under the sampler's
real draw law. Every run prints it at start and records it in `summary.json` and the W&B config,
e.g. "this run optimises log p (weight 1/p), gated by 1 - (1 - p)^15 at cap 16". The words and
closed forms come from the registries: each uniform estimator's `ImpliedObjective`
(`adarl.algo.advantages`) and each objective's `text` (`adarl.algo.objectives`).

The learner's own terms follow it, one line each, written by the terms themselves
(`LossTerm.declare`; adarl/learner/loss_terms.py `declare_learner_terms`: the KL anchor, SimKO,
the entropy term, DPH-RL's rehearsal term, mini-batch updates), each saying what it adds to the
declared objective or that it declares none.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from adarl.algo.advantages import (
    POOL_ADVANTAGE,
    GroupSpec,
    UniformEstimator,
    get_uniform_estimator,
)
from adarl.algo.implied import implied_weight, log_gate, logit_gate
from adarl.algo.objectives import get_objective
from adarl.algo.reweighting import NO_OBJECTIVE
from adarl.allocator.estimators import build_reweighting
from adarl.config.allocator import SEQUENTIAL_SAMPLERS, AllocatorConfig, AllocatorPlan

PASS_RATES = (0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 0.9)


@dataclass(frozen=True)
class ObjectiveDeclaration:
    statement: str  # one line: what the run optimises
    exact: bool  # the statement is exact (closed form checked against `implied_weight`)
    # implied weight w(p) and, when an objective is declared, w(p)/f'(p) (the gate), by p
    implied_weight: dict[str, float] = field(default_factory=dict)
    gate: dict[str, float] = field(default_factory=dict)
    learner_terms: tuple[str, ...] = ()  # the learner's own terms, a line each

    def to_json(self) -> dict[str, Any]:
        return {
            "statement": self.statement,
            "exact": self.exact,
            "implied_weight": dict(self.implied_weight),
            "gate": dict(self.gate),
            "learner_terms": list(self.learner_terms),
        }

    def console(self) -> str:
        gates = ", ".join(f"{p}: {g:.3f}" for p, g in self.gate.items())
        weights = ", ".join(f"{p}: {w:.3g}" for p, w in self.implied_weight.items())
        line = f"this run optimises {self.statement}"
        if gates:
            line = f"{line} [gate w/f' by p: {gates}]"
        elif weights:
            line = f"{line} [implied weight w by p: {weights}]"
        return "\n".join([line, *(f"  learner: {term}" for term in self.learner_terms)])


def _uniform_estimator(config: AllocatorConfig) -> UniformEstimator | None:
    """The registry entry of the configured advantage; None for the pooled family."""
    advantage = config.group.advantage
    return None if advantage == POOL_ADVANTAGE else get_uniform_estimator(advantage)


def _uniform_statement(
    estimator: UniformEstimator, spec: GroupSpec, p: np.ndarray, weights: np.ndarray
) -> tuple[str, bool]:
    """The estimator's objective in words, and whether its closed form (where it declares one)
    matches the enumerated weights: then the statement is exact."""
    closed = estimator.implied.closed_form(p, spec)
    exact = closed is not None and bool(np.allclose(weights, closed, rtol=1e-9, atol=1e-12))
    return estimator.implied.describe(spec), exact


def sequential_implied_weight(plan: AllocatorPlan, p: np.ndarray) -> np.ndarray:  # [P]
    """The exact implied weight w(p) of a sequential sampler's pooled advantages (the weight the
    run prints), under its real draw law (`adarl.algo.implied.implied_weight`)."""
    config = plan.config
    seq, group = config.sequential, config.group
    kwargs: dict[str, Any] = {"max_samples": plan.max_samples_per_prompt}
    if config.sampler == "seq_pos":
        kwargs["k"] = seq.k_pos
    else:
        kwargs["k_pos"], kwargs["k_neg"] = seq.k_pos, seq.k_neg
    if seq.mode == "rounds":
        kwargs["round_size"] = seq.round_repeat
    else:
        kwargs["max_overshoot_fraction"] = seq.max_overshoot_fraction
        kwargs["initial_samples"] = seq.initial_samples
    whole_pool = group.group_size is None
    return implied_weight(
        p,
        estimator=config.sampler,
        group_size=plan.pool_weight if whole_pool else group.group_size,
        whole_pool=whole_pool,
        correction=group.correction,
        objective=group.objective,
        alpha=group.objective_alpha,
        objective_k=group.objective_k,
        pass_rate_estimate=group.pass_rate_estimate,
        unresolved_policy=group.unresolved_policy,
        clip_delta=group.clip_delta,
        **kwargs,
    )


def declare_objective(
    plan: AllocatorPlan,
    *,
    hint_schedule: str = "off",
    reward: str = "verifier",
    learner_terms: tuple[str, ...] = (),
) -> ObjectiveDeclaration:
    """The objective `plan`'s config optimises (see the module docstring).

    With hints on (`hint_schedule`), a prompt that collapses is trained on its hinted condition
    (x, h) instead: the same f, of the pass rate p(x, h) of the condition trained, through
    π(· | x, h) (adarl/allocator/hint_stage.py). With DRO's R3 (`reward="r3"`) the groups'
    rewards are R3's real-valued ones, so p stands for the prompt's mean R3 reward, not its
    verifier pass rate, and the weights by p (computed for 0/1 rewards) are not exact.
    `learner_terms`: the learner's lines (adarl/learner/loss_terms.py `declare_learner_terms`),
    kept to follow the statement."""
    config = plan.config
    declaration = _declare_update(plan)
    if plan.coverage_phase is not None:
        declaration = _two_phases(plan, _declare_coverage_phase(plan), declaration)
    statement, exact = declaration.statement, declaration.exact
    curated = _curation_clause(config)
    if curated:
        statement = f"{statement}; {curated}"
        exact = exact and config.curation.inverse_probability_weights
    if reward == "r3":
        statement = f"{statement}, with p the mean R3 reward (DRO) instead of the pass rate"
        exact = False
    if hint_schedule != "off":
        statement = (
            f"{statement}; per prompt at the condition trained: p(x) unhinted, p(x, h) after a "
            f"collapse ({hint_schedule} hints)"
        )
    return dataclasses.replace(
        declaration, statement=statement, exact=exact, learner_terms=tuple(learner_terms)
    )


def _declare_update(plan: AllocatorPlan) -> ObjectiveDeclaration:
    """What one phase's group builder optimises: its estimator's objective, or, after a
    likelihood-aware reweighting of the positives, that it declares none (and why)."""
    declaration = _declare(plan)
    reweighting = build_reweighting(plan.config.group)
    if reweighting is None:
        return declaration
    return ObjectiveDeclaration(
        statement=(
            f"{declaration.statement}, reweighted: {reweighting.describe()}, which {NO_OBJECTIVE}"
        ),
        exact=False,
    )


def _declare_coverage_phase(plan: AllocatorPlan) -> ObjectiveDeclaration:
    """The coverage phase's declaration; a refusal of its objective (e.g. one whose exact weight
    under the run's draws is flat, `_refuse_a_different_objective`) names the phase's keys."""
    assert plan.coverage_phase is not None
    group = plan.config.group
    try:
        return _declare_update(plan.coverage_phase)
    except ValueError as error:
        raise ValueError(
            f"the coverage phase (allocator.group.coverage_objective={group.coverage_objective!r}, "
            f"coverage_advantage={group.coverage_advantage!r}; it trains them in place of "
            f"allocator.group.objective and advantage): {error}. Under the default's draws use "
            "allocator.group.coverage_objective=log (weight 1/p)"
        ) from None


def _two_phases(
    plan: AllocatorPlan, first: ObjectiveDeclaration, then: ObjectiveDeclaration
) -> ObjectiveDeclaration:
    """Coverage first, accuracy after: the coverage phase's statement with its weights, then the
    run's own (whose weights the declaration keeps). A first phase whose implied weight is the
    same at every p trains p scaled, not coverage: said, with what to use instead."""
    rollouts = plan.config.group.coverage_phase_rollouts
    weights = ", ".join(f"{p}: {w:.3g}" for p, w in first.implied_weight.items())
    text = f"{first.statement} [implied weight w by p: {weights}]" if weights else first.statement
    values = np.array(list(first.implied_weight.values()))
    if values.size and np.all(values > 0) and values.max() <= 1.05 * values.min():
        text += (
            "; its weight is FLAT in p: this phase trains p scaled, not a coverage objective "
            "(choose one whose weight falls with p: allocator.group.coverage_advantage=pkpo on "
            "uniform groups, allocator.group.coverage_objective=log on pooled advantages)"
        )
    return ObjectiveDeclaration(
        statement=(
            f"for its first {rollouts} training rollouts (to the end of the step that reaches "
            f"them), {text}; after them, {then.statement}"
        ),
        exact=first.exact and then.exact,
        implied_weight=dict(then.implied_weight),
        gate=dict(then.gate),
    )


def _declare(plan: AllocatorPlan) -> ObjectiveDeclaration:
    p = np.array(PASS_RATES)
    labels = [f"{x:g}" for x in PASS_RATES]
    config = plan.config
    group = config.group
    estimator = _uniform_estimator(config)
    if config.sampler in SEQUENTIAL_SAMPLERS and estimator is None:
        weights = sequential_implied_weight(plan, p)
        cap = plan.max_samples_per_prompt
        if group.correction == "selection":
            declared = get_objective(
                group.objective, alpha=group.objective_alpha, objective_k=group.objective_k
            )
            gate = weights / np.asarray(declared.w(p))
            name = declared.text
            _refuse_a_different_objective(plan, name, labels, weights, np.asarray(declared.w(p)))
            if group.objective == "logit" and config.sampler == "seq_balance":
                closed = logit_gate(p, max_samples=cap)
                closed_text = f"1 - p^{cap} - (1 - p)^{cap}"
            else:
                closed = log_gate(p, max_samples=cap)
                closed_text = f"1 - (1 - p)^{cap - 1}"
            exact = bool(
                (
                    (group.objective == "log" and group.pass_rate_estimate == "unbiased")
                    or (group.objective == "logit" and config.sampler == "seq_balance")
                )
                and group.unresolved_policy == "keep_available"
                and np.allclose(gate, closed, rtol=1e-9)
            )
            if exact:
                statement = f"{name}, gated by {closed_text} at cap {cap}"
            elif group.objective == "logit" and group.unresolved_policy == "keep_available":
                # h = 1: no pass-rate estimate enters, so the gate is only the probability that
                # the stopping rule leaves both labels in the pool (exact by p, below).
                exact = True
                statement = (
                    f"{name}, gated by the probability that its pool holds both labels when the "
                    f"stopping rule ends it (cap {cap}; the gate by p)"
                )
            else:
                statement = (
                    f"{name}, times a gate from the cap ({cap}) and the "
                    f"{group.pass_rate_estimate} pass-rate estimate (see the gate by p)"
                )
                if group.objective == "pass_at_k" and group.pass_rate_estimate == "unbiased":
                    k = group.objective_k
                    statement += (
                        f"; its correction h(p) = {k}p(1 - p)^{k} is not linear, so even an "
                        "unbiased p̂ biases h(p̂): the gate is that bias, exact by p"
                    )
            return ObjectiveDeclaration(
                statement=statement,
                exact=exact,
                implied_weight=dict(zip(labels, map(float, weights), strict=True)),
                gate=dict(zip(labels, map(float, gate), strict=True)),
            )
        return ObjectiveDeclaration(
            statement=(
                f"the implied objective of pooled advantages with correction "
                f"{group.correction!r} (no declared f; weight w(p) by p)"
            ),
            exact=False,
            implied_weight=dict(zip(labels, map(float, weights), strict=True)),
        )
    if config.sampler == "ada_est":
        return _ada_est_declaration(config, p, labels)
    if config.sampler == "knapsack":
        return _knapsack_declaration(plan, estimator, p, labels)
    if config.sampler == "gvm":
        return _gvm_declaration(config, p, labels)
    n = plan.planned_samples_per_prompt if group.group_size is None else group.group_size
    spec = GroupSpec(size=n, k=group.objective_k, options=config.advantage_options())
    if estimator is not None and estimator.implied.needs_sampler is None:
        weights = implied_weight(
            p,
            estimator=estimator.name,
            group_size=n,
            objective_k=group.objective_k,
            options=spec.options,
        )
        text, exact = _uniform_statement(estimator, spec, p, weights)
        prefix = ""
        if config.sampler == "dynamic_filter":
            prefix = "on groups with mixed outcomes only (refilled), "
        return ObjectiveDeclaration(
            statement=f"{prefix}{text}, with groups of n = {n}",
            exact=config.sampler == "uniform" and exact,
            implied_weight=dict(zip(labels, map(float, weights), strict=True)),
        )
    text = group.advantage if estimator is None else estimator.implied.describe(spec)
    return ObjectiveDeclaration(statement=f"{text} (sampler {config.sampler!r})", exact=False)


# A gate removes weight (it is the chance that the cap leaves a kept group its signal): the exact
# weight may exceed f'(p) by round-off only. A weight flat within FLAT across p where f' varies
# more than 1.5-fold is the linear objective, whatever the declared name.
GATE_TOLERANCE = 1e-6
FLAT = 1.1


def _refuse_a_different_objective(
    plan: AllocatorPlan,
    name: str,
    labels: list[str],
    weights: np.ndarray,  # [P] the exact implied weight by p
    declared: np.ndarray,  # [P] f'(p)
) -> None:
    """Refuse a selection-corrected configuration whose exact weight by p is not the declared
    objective's f'(p) times a gate: a gate only removes weight, so a weight above f' anywhere,
    or a weight flat in p where f' is not (the linear objective under another name), prints one
    objective and optimises another. E.g. pass@k's, arcsin's or power's correction after the
    default's draw, whose unbiased pass-rate estimate takes only the values 0, ½ and 1 (flat),
    and pass@k's after Seq-Balance(2, 2), whose nonlinear correction the estimate biases upward
    at high p. Computed from the weights the run prints, for any objective, sampler and estimate."""
    gate = weights / declared
    flat = weights.max() <= FLAT * weights.min() and declared.max() > 1.5 * declared.min()
    if not flat and gate.max() <= 1 + GATE_TOLERANCE:
        return
    config = plan.config
    group = config.group
    by_p = ", ".join(f"{x}: {w:.3g}" for x, w in zip(labels, weights, strict=True))
    worst = labels[int(np.argmax(gate))]
    shape = (
        "flat in p: the linear objective p under another name"
        if flat
        else f"above {name}'s weight (at p = {worst}, {gate.max():.3g} times it), which a gate "
        "cannot be"
    )
    raise ValueError(
        f"allocator.group.objective={group.objective!r} is not what this configuration "
        f"optimises: with allocator.sampler={config.sampler!r}, its draws (first "
        f"{config.sequential.initial_samples or 'one round'}, cap {plan.max_samples_per_prompt}) "
        f"and the {group.pass_rate_estimate!r} pass-rate estimate, the selection correction's "
        f"exact weight by p is {{{by_p}}}: {shape}. Choose an objective whose correction holds "
        "here (objective=logit reads no pass-rate estimate; objective=log is linear in it), "
        "or, for pass@k, uniform groups with its unbiased estimator (allocator.sampler=uniform "
        "allocator.group.advantage=pkpo)"
    )


def _curation_clause(config: AllocatorConfig) -> str:
    """What history-based curation does to the objective (adarl/allocator/curation.py): with 1/π
    weights nothing (exact in expectation over the candidates), without them each prompt's term
    is weighted by its probability π_x of being drawn."""
    cur = config.curation
    explores = config.sampler == "knapsack" and cur.knapsack_value == "declared"
    if cur.skip == "none" and not explores:
        return ""
    rule = f"{cur.skip} skip" if cur.skip != "none" else "knapsack exploration"
    if cur.inverse_probability_weights:
        return (
            f"over every candidate prompt: the {rule} draws prompt x with probability π_x from "
            "its history and its advantages are weighted 1/π_x, so skipping leaves the "
            "objective unchanged in expectation"
        )
    return (
        f"re-weighted by the {rule}: Σ_x π_x·f(p_x), π_x the probability prompt x is drawn "
        "given its history (no 1/π correction), so prompts predicted to carry no signal count "
        "less than the declared objective says"
    )


def _knapsack_declaration(
    plan: AllocatorPlan, estimator: UniformEstimator | None, p: np.ndarray, labels: list[str]
) -> ObjectiveDeclaration:
    """Knapsack: each drawn prompt x gets n_x samples in one draw, fixed before its labels, so its
    group estimates w(p_x; n_x)·∇p_x, the advantage's weight at its own planned size, and the
    learner's mean over samples weighs it n_x/n̄; n_x comes from the history, so the weight is per
    prompt (shown here at n = mean_samples_per_prompt, the planned draw)."""
    config = plan.config
    group = config.group
    cur = config.curation
    n = plan.planned_samples_per_prompt
    spec = GroupSpec(size=n, k=group.objective_k, options=config.advantage_options())
    weights = implied_weight(
        p,
        estimator="rloo" if estimator is None else estimator.name,
        group_size=n,
        objective_k=group.objective_k,
        options=spec.options,
    )
    text = group.advantage if estimator is None else estimator.implied.describe(spec)
    value = {
        "knapsack_rl": "Knapsack-RL's value (1-p̂^n-(1-p̂)^n)·p̂(1-p̂)²",
        "hora": (
            "HORA's hit utility 1 - E[(1-p)^n], p ~ Beta(1 + s, 1 + f) from a uniform prior and "
            "the prompt's record, every candidate drawn"
        ),
    }.get(cur.knapsack_value, "the posterior value of each sample for that objective")
    return ObjectiveDeclaration(
        statement=(
            f"{text}, each prompt at its own planned group size n_x (the rollout budget split "
            f"over {config.knapsack_candidates()} candidates by {value}) and weighted n_x/{n} by "
            f"the batch mean over samples; weights by p shown at n = {n}"
        ),
        exact=False,
        implied_weight=dict(zip(labels, map(float, weights), strict=True)),
    )


def _ada_est_declaration(
    config: AllocatorConfig, p: np.ndarray, labels: list[str]
) -> ObjectiveDeclaration:
    """Ada-Est: per-prompt weight (n_i/n̄)·w_ada_est(p; n_i), n_i from the rule at p̂ = p, over
    this grid of pass rates standing in for a batch (the sample-mean loss weighs a prompt by its
    sample count)."""
    est = config.estimation
    eps = est.epsilon
    if est.ada_est_rule == "inverse_sqrt":
        raw = 1.0 / np.sqrt(p + eps)
    elif est.ada_est_rule == "sqrt_odds":
        raw = np.sqrt((1.0 - p) / p)
    else:
        objective = get_objective(
            config.group.objective,
            alpha=config.group.objective_alpha,
            objective_k=config.group.objective_k,
        )
        raw = np.asarray(objective.w(p)) * np.sqrt(p * (1.0 - p))
    mean = config.mean_samples_per_prompt
    sizes = mean * raw / raw.mean()
    options = config.advantage_options()
    weights = np.array(
        [
            (n / mean)
            * float(
                implied_weight(x, estimator="ada_est", group_size=max(2, round(n)), options=options)
            )
            for x, n in zip(p, sizes, strict=True)
        ]
    )
    return ObjectiveDeclaration(
        statement=(
            f"≈ log p (Reinforce-Ada-Est, rule {est.ada_est_rule!r}: samples n_i from p̂_i and "
            f"the advantage (r - r̄)/√(r̄ + ε) weigh a prompt ≈ 1/(p + ε), ε = {eps:g}; small "
            "groups gate it; implied weight by p, relative, for a batch spread over the grid)"
        ),
        exact=False,
        implied_weight=dict(zip(labels, map(float, weights), strict=True)),
    )


def _gvm_declaration(
    config: AllocatorConfig, p: np.ndarray, labels: list[str]
) -> ObjectiveDeclaration:
    """GVM-RAFT: Σ_i (1/(n_i p̂_i)) Σ_accepted ∇log π with p̂_i = k/N' from the pilot: w(p)·p =
    Σ_{k≥1} Bin(k; N', p)·p/(k/N') (prompts with k = 0 get no samples). GVM-GRPO: GRPO's
    advantage on n_i ∝ G_i/√(p_i + α/p_i^(β-1)) samples, no closed-form objective."""
    pilot = config.estimation.gvm_presamples
    if config.group.advantage == "raft":
        k = np.arange(1, pilot + 1)
        binom = np.array([[math.comb(pilot, int(j)) for j in k]])
        mass = binom * p[:, None] ** k * (1.0 - p[:, None]) ** (pilot - k)
        weight_p = (mass * p[:, None] / (k / pilot)).sum(axis=1)
        return ObjectiveDeclaration(
            statement=(
                f"log p (weight 1/p) with the pilot's estimate (N' = {pilot}): "
                "w·p = E[p/p̂; p̂ > 0] (GVM-RAFT)"
            ),
            exact=True,
            implied_weight=dict(zip(labels, map(float, weight_p / p), strict=True)),
            gate=dict(zip(labels, map(float, weight_p), strict=True)),
        )
    return ObjectiveDeclaration(
        statement=(
            "GRPO's implicit objective on GVM's allocation n_i ∝ G_i/√(p_i + α/p_i^(β-1)) "
            f"(pilot N' = {pilot}); GVM chooses n_i to minimise the gradient's variance, the "
            "weights depend on G_i: no closed form"
        ),
        exact=False,
    )
