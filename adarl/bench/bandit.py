"""Exact softmax bandits through the real rollout phase: does a configuration optimise what it
declares? (`python -m adarl.bench objective`; the statistical tests use the same functions.)

Each prompt x is a tabular softmax policy over 4 responses, π_x = softmax(θ_x) = [p, q, q, q]
with q = (1 - p)/3, response 0 the only correct one. For a sampled response a,
∇_θ log π_x(a) = e_a - π_x and ∇_θ p = p·(e_0 - π_x), so a group's gradient estimate
ĝ_x = (1/n)·Σ_j A_j (e_{a_j} - π_x) is known exactly from the responses the real components chose
and the advantages they assigned.

`measure(config, ...)` runs steps of the driver's own rollout phase
(`adarl.driver.rollout_phase.collect_groups`) with the real `BudgetAllocator` (sampler + group
builder) built from `config`, a `RewardPool`, and a
`SimulatedRolloutPool` (`engines × slots` of simulated continuous batching: the order and
concurrency results come back in) over a `BanditEngine`; fresh prompts every step, so every
prompt-step is an independent draw. It returns, per pass rate, the mean of ĝ and its standard
error, the target w(p)·∇p with w the exact implied weight of the configuration under the sampler's
real draw law (`adarl.algo.implied.implied_weight`), the effective weight ŵ = ⟨ĝ, ∇p⟩/|∇p|², and the
mean samples drawn per prompt against the draw law's exact E[N] (`adarl.algo.drawing`).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from adarl.algo.drawing import DrawRule, expected_samples_drawn
from adarl.algo.implied import implied_weight, log_gate
from adarl.algo.loss import LossInputs, policy_loss
from adarl.algo.stopping import StoppingRule
from adarl.allocator import Sampler, build_allocator
from adarl.allocator.allocator import BudgetAllocator
from adarl.allocator.samplers.base import PromptStatus
from adarl.config.allocator import AllocatorConfig
from adarl.driver.rollout_phase import PhaseParts, PromptSourceLike, collect_groups
from adarl.learner.batching import split_mini_batches
from adarl.models.tokenizer import build_char_tokenizer
from adarl.reward.base import VerifierResult
from adarl.reward.pool import RewardPool
from adarl.rollout.codec import PromptCodec
from adarl.rollout.simulated import LatencyModel, SimulatedRolloutPool
from adarl.types import (
    Completion,
    FinishReason,
    GenerationRequest,
    GenerationResult,
    Group,
    SamplingParams,
    StatisticsReply,
    StatisticsRequest,
    TaskExample,
    TrainBatch,
)

RESPONSES = 4  # response 0 is correct


def policy(p: float) -> np.ndarray:  # [4]
    return np.array([p] + [(1.0 - p) / (RESPONSES - 1)] * (RESPONSES - 1))


class BanditEngine:
    """A `RolloutEngine` whose policy for a prompt is `policy(p)`, p read from the prompt text
    ("b<index>:<p>"); response a is the single token of the character str(a)."""

    def __init__(self) -> None:
        self.tokenizer = build_char_tokenizer()
        self._tokens = [self.tokenizer.convert_tokens_to_ids(str(a)) for a in range(RESPONSES)]
        self._version = 0
        self._rates: dict[tuple[int, ...], float] = {}

    def pass_rate(self, prompt_token_ids: Sequence[int]) -> float:
        key = tuple(prompt_token_ids)
        if key not in self._rates:
            text = self.tokenizer.decode(list(prompt_token_ids), skip_special_tokens=True)
            self._rates[key] = float(text.split(":")[1])
        return self._rates[key]

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        results = []
        for request in requests:
            probs = policy(self.pass_rate(request.prompt_token_ids))
            rng = np.random.default_rng(request.seed)
            actions = rng.choice(RESPONSES, size=request.num_samples, p=probs)
            completions = tuple(
                Completion(
                    token_ids=(self._tokens[a],),
                    logprobs=(math.log(probs[a]),),
                    finish_reason=FinishReason.STOP,
                    text=str(a),
                )
                for a in actions
            )
            results.append(GenerationResult(request.request_id, completions, self._version))
        return results

    def score(
        self,
        prompt_token_ids: Sequence[Sequence[int]],
        response_token_ids: Sequence[Sequence[int]],
        *,
        temperature: float = 1.0,
    ) -> list[list[float]]:
        """Log-probs of given responses (temperature 1: the bandit's policy has no logits)."""
        out = []
        for prompt, response in zip(prompt_token_ids, response_token_ids, strict=True):
            probs = policy(self.pass_rate(prompt))
            out.append([math.log(probs[self._tokens.index(t)]) for t in response])
        return out

    def update_weights(self, version: int, weights: Mapping[str, torch.Tensor]) -> None:
        self._version = int(version)

    def weight_version(self) -> int:
        return self._version


class BanditVerifier:
    def verify(self, response: str, example: TaskExample) -> VerifierResult:
        return VerifierResult(reward=1.0 if response == "0" else 0.0)


@dataclass(frozen=True)
class WeightCheck:
    """What the real components estimated for prompts of pass rate p, against the exact target."""

    p: float
    trials: int  # prompt-steps
    mean_gradient: np.ndarray  # [4] mean of ĝ
    se_gradient: np.ndarray  # [4] its standard error
    target_gradient: np.ndarray  # [4] w_implied(p)·∇p
    implied_weight: float  # w of the configuration under the real draw law
    effective_weight: float  # ŵ = ⟨mean ĝ, ∇p⟩/|∇p|²
    se_effective_weight: float
    samples_drawn: float  # mean pool size
    se_samples_drawn: float
    expected_samples: float | None  # the draw law's exact E[N] (sequential samplers)

    @property
    def z_scores(self) -> np.ndarray:  # [4]
        return (self.mean_gradient - self.target_gradient) / self.se_gradient


def implied_weight_of(config: AllocatorConfig, p: float) -> float:
    group, seq = config.group, config.sequential
    plan = config.plan()
    if config.sampler in ("seq_pos", "seq_balance"):
        rounds = seq.mode == "rounds"
        kwargs = (
            {"k": seq.k_pos}
            if config.sampler == "seq_pos"
            else {
                "k_pos": seq.k_pos,
                "k_neg": seq.k_neg,
            }
        )
        if rounds:
            kwargs |= {"round_size": seq.round_repeat}
        else:
            kwargs |= {
                "max_overshoot_fraction": seq.max_overshoot_fraction,
                "initial_samples": seq.initial_samples,
            }
        return float(
            implied_weight(
                p,
                estimator=config.sampler,
                group_size=group.group_size or plan.pool_weight,
                whole_pool=group.group_size is None,
                correction=group.correction,
                objective=group.objective,
                alpha=group.objective_alpha,
                objective_k=group.objective_k,
                pass_rate_estimate=group.pass_rate_estimate,
                max_samples=plan.max_samples_per_prompt,
                unresolved_policy=group.unresolved_policy,
                clip_delta=group.clip_delta,
                **kwargs,
            )
        )
    n = plan.planned_samples_per_prompt if group.group_size is None else group.group_size
    return uniform_weight(config, p, n)


def uniform_weight(config: AllocatorConfig, p: float, n: int) -> float:
    """w(p; n) of the configuration's uniform-group advantage for a group of n (its k, F-GRPO's
    γ, PKPO's baseline and RAFT's normalisation included)."""
    group = config.group
    return float(
        implied_weight(
            p,
            estimator=group.advantage,
            group_size=n,
            objective_k=group.objective_k,
            options=config.advantage_options(),
        )
    )


def _expected_samples(config: AllocatorConfig, p: float) -> float | None:
    seq = config.sequential
    if config.sampler not in ("seq_pos", "seq_balance") or seq.mode != "streaming":
        return None
    k_neg = 0 if config.sampler == "seq_pos" else seq.k_neg
    rule = StoppingRule(k_pos=seq.k_pos, k_neg=k_neg, max_samples=config.max_samples_per_prompt)
    draw = DrawRule(
        rule=rule,
        max_overshoot_fraction=seq.max_overshoot_fraction,
        initial_samples=seq.initial_samples,
    )
    return expected_samples_drawn(p, draw)


def measure(
    config: AllocatorConfig,
    *,
    pass_rates: Sequence[float],
    prompts_per_rate: int,
    steps: int,
    latency: LatencyModel,
    seed: int = 0,
    behaviour: Mapping[float, float] | None = None,
    tis_cap: float = 2.0,
    mini_batches: int = 1,
) -> list[WeightCheck]:
    """Run `steps` rollout phases of `config` on fresh bandit prompts (module docstring).

    `behaviour` maps a pass rate p of the current policy to the pass rate of the (stale) policy
    the engine samples from instead: samples lag the learner, as with
    `rollout.max_off_policy_steps`. ĝ is then the real loss's gradient at the current policy
    (`stale_gradient`: decoupled PPO with the ratio against the current policy and each sample
    re-weighted by min(π/μ, tis_cap)), and the target stays the current policy's w(p)·∇p.

    `mini_batches` > 1: only the prompts of the step's first mini-batch count, as the learners
    cut the step's `TrainBatch` (`adarl.learner.batching.split_mini_batches`), each ĝ through the
    real loss on its own (`first_mini_batch_gradient`); the rates are interleaved so that every
    mini-batch holds all of them. (The first optimizer step of a mini-batch update.)"""
    behaviour = behaviour or {}
    engine = BanditEngine()
    codec = PromptCodec(tokenizer=engine.tokenizer, sampling=SamplingParams(max_new_tokens=1))
    group_size = config.group.group_size or config.plan().pool_weight
    per_rate = len(pass_rates) * prompts_per_rate
    config = AllocatorConfig(**{**config.__dict__, "prompts_per_step": per_rate, "seed": seed})
    allocator = build_allocator(config)
    gradients: dict[float, list[np.ndarray]] = {p: [] for p in pass_rates}
    targets: dict[float, list[float]] = {p: [] for p in pass_rates}
    unconditional: dict[float, float] = {}  # w(p) of the configuration, by p
    drawn: dict[float, list[int]] = {p: [] for p in pass_rates}
    with RewardPool(verifiers={"bandit": BanditVerifier()}, num_workers=1) as rewards:
        for step in range(steps):
            rates = (
                [p for p in pass_rates for _ in range(prompts_per_rate)]
                if mini_batches == 1
                else [p for _ in range(prompts_per_rate) for p in pass_rates]
            )
            examples = [
                TaskExample(
                    prompt_id=f"s{step}b{i}",
                    prompt=f"b{i}:{behaviour.get(p, p)!r}",  # the engine samples this rate
                    answer="0",
                    task="bandit",
                )
                for i, p in enumerate(rates)
            ]
            rate = {e.prompt_id: p for e, p in zip(examples, rates, strict=True)}
            # A sampler that admits more prompts (a rollout budget) gets fresh ones, the rates in
            # turn, so that every rate keeps its share of the trials.
            source = BanditPrompts(step=step, pass_rates=pass_rates, behaviour=behaviour)
            pool = SimulatedRolloutPool(
                engine=engine,
                latency=latency,
                is_correct=lambda _request, completion: completion.text == "0",
                seed=seed * 100_003 + step,
            )
            phase = collect_groups(
                step,
                examples,
                bandit_phase(allocator, rewards=rewards, codec=codec, prompts=source, pool=pool),
            )
            rate.update(source.rates)
            groups = {g.prompt_id: g for g in phase.result.groups}
            if mini_batches > 1:
                first = first_mini_batch(phase.result.groups, mini_batches, codec)
                rate = {pid: p for pid, p in rate.items() if pid in first}
            for pid, p in rate.items():
                group = groups.get(pid)
                g = np.zeros(RESPONSES)  # a prompt that kept no group contributes nothing
                if group is not None and mini_batches > 1:
                    g += first_mini_batch_gradient(p, group) * group_size
                    drawn[p].append(group.pool_size)
                elif group is not None and p in behaviour:
                    g += stale_gradient(p, group, tis_cap=tis_cap) * group_size
                    drawn[p].append(group.pool_size)
                elif group is not None:
                    pi = policy(p)
                    for scored, advantage in zip(group.rollouts, group.advantages, strict=True):
                        action = int(scored.rollout.completion.text)
                        g += advantage * (np.eye(RESPONSES)[action] - pi)
                    drawn[p].append(group.pool_size)
                gradients[p].append(g / group_size)
                targets[p].append(_trial_weight(config, p, group, allocator.sampler, unconditional))
    checks = []
    for p in pass_rates:
        g = np.array(gradients[p])  # [T, 4]
        grad_p = p * (np.eye(RESPONSES)[0] - policy(p))
        w_trial = np.array(targets[p])  # [T] implied weight of each trial
        residual = g - w_trial[:, None] * grad_p  # E = 0 if the declared weight is right
        weights = g @ grad_p / (grad_p @ grad_p)  # per-trial projection on ∇p
        w = float(w_trial.mean())
        sizes = np.array(drawn[p] or [0], dtype=float)
        checks.append(
            WeightCheck(
                p=p,
                trials=len(g),
                mean_gradient=g.mean(axis=0),
                se_gradient=residual.std(axis=0, ddof=1) / math.sqrt(len(g)),
                target_gradient=w * grad_p,
                implied_weight=w,
                effective_weight=float(weights.mean()),
                se_effective_weight=float((weights - w_trial).std(ddof=1) / math.sqrt(len(g))),
                samples_drawn=float(sizes.mean()),
                se_samples_drawn=float(sizes.std(ddof=1) / math.sqrt(max(1, len(sizes)))),
                expected_samples=_expected_samples(config, p),
            )
        )
    return checks


def first_mini_batch(groups: Sequence[Group], mini_batches: int, codec: PromptCodec) -> set[str]:
    """The prompts whose groups the learners train in the step's first mini-batch."""
    batch = TrainBatch.from_groups(groups, pad_token_id=codec.pad_token_id)
    first = split_mini_batches(batch, mini_batches)[0]
    return {groups[int(i)].prompt_id for i in first.prompt_index.unique().tolist()}


def first_mini_batch_gradient(p: float, group: Group) -> np.ndarray:  # [4]
    """ĝ of one group through the learner's real loss at its first optimizer step: the weights
    that sampled (ρ = 1), each sequence counting its `sequence_weight` in the normaliser, as
    `BatchCounts` counts it: ĝ = -∇_θ L = (1/n)·Σ_j A_j·(e_{a_j} - π), n = Σ_j weight_j."""
    rows = len(group.rollouts)
    theta = torch.tensor(np.log(policy(p)), dtype=torch.float64, requires_grad=True)  # [4]
    actions = torch.tensor([int(s.rollout.completion.text) for s in group.rollouts])
    logprobs = torch.log_softmax(theta, dim=0)[actions][:, None]  # [N, 1]
    count = rows * group.sequence_weight
    output = policy_loss(
        LossInputs(
            logprobs=logprobs,
            behaviour_logprobs=logprobs.detach(),
            advantages=torch.tensor(group.advantages, dtype=torch.float64)[:, None],
            response_mask=torch.ones((rows, 1), dtype=torch.bool),
            global_num_tokens=count,
            global_num_sequences=count,
        )
    )
    (gradient,) = torch.autograd.grad(output.loss, theta)
    return -gradient.numpy()


def stale_gradient(p: float, group: Group, *, tis_cap: float) -> np.ndarray:  # [4]
    """ĝ of one group through the learner's real loss (`adarl.algo.loss.policy_loss`) at the
    current policy π = policy(p), for samples drawn by a stale engine that reported log μ:

        ĝ = -∇_θ L = (1/n)·Σ_j min(π(a_j)/μ(a_j), C)·A_j·(e_{a_j} - π)

    (ratio against the current policy, `ratio_reference=learner`: 1 with gradient ∇ log π;
    TIS weight C = `tis_cap`), one token per response, normalised by the n trained samples."""
    n = len(group.rollouts)
    theta = torch.tensor(np.log(policy(p)), dtype=torch.float64, requires_grad=True)  # [4]
    actions = torch.tensor([int(s.rollout.completion.text) for s in group.rollouts])
    logprobs = torch.log_softmax(theta, dim=0)[actions][:, None]  # [n, 1]
    output = policy_loss(
        LossInputs(
            logprobs=logprobs,
            behaviour_logprobs=torch.tensor(
                [[s.rollout.completion.logprobs[0]] for s in group.rollouts], dtype=torch.float64
            ),
            advantages=torch.tensor(group.advantages, dtype=torch.float64)[:, None],
            response_mask=torch.ones((n, 1), dtype=torch.bool),
            global_num_tokens=float(n),
            global_num_sequences=float(n),
            proximal_logprobs=logprobs.detach(),
        ),
        tis_cap=tis_cap,
    )
    (gradient,) = torch.autograd.grad(output.loss, theta)
    return -gradient.numpy()


def _trial_weight(
    config: AllocatorConfig,
    p: float,
    group: Group | None,
    sampler: Sampler,
    unconditional: dict[float, float],
) -> float:
    """The implied weight of one prompt-step: the configuration's unconditional w(p), or, for the
    allocation samplers, w conditional on what the sampler decided for this prompt (its trained
    sample count n_i and estimate p̂_i, both fixed before the trained samples' labels):
    Ada-Est and GVM-GRPO (n_i/n̄)·w(p; n_i), GVM-RAFT 1/p̂_i; 0 for a prompt given no samples."""
    if config.sampler not in ("ada_est", "gvm"):
        if p not in unconditional:  # exact and the same for every trial at p: computed once
            unconditional[p] = implied_weight_of(config, p)
        return unconditional[p]
    if group is None:
        return 0.0
    n = len(group.rollouts)
    mean_n = config.mean_samples_per_prompt
    advantage = config.group.advantage
    if advantage == "raft":
        estimate = sampler.pass_rate_estimate(group.prompt_id)
        return 1.0 / estimate
    estimator = "ada_est" if advantage == "ada_est" else "grpo"
    options = config.advantage_options()  # Ada-Est's ε: allocator.estimation.epsilon
    return n / mean_n * float(implied_weight(p, estimator=estimator, group_size=n, options=options))


@dataclass(frozen=True)
class RecurringCheck:
    """Recurring prompts (history matters): the mean over visits of ĝ - target at pass rate p,
    target = w(p; n_x)·∇p per visit (HT: every candidate visit, drawn or not; without 1/π:
    π_x·w(p; n_x)·∇p, the declared-skipped objective), n_x the samples planned for the visit."""

    p: float
    visits: int  # candidate visits (drawn or skipped)
    drawn_fraction: float
    mean_residual: np.ndarray  # [4] mean of ĝ - target
    se_residual: np.ndarray  # [4] its standard error
    mean_target: np.ndarray  # [4]
    mean_inverse_weight: float  # mean of 1{drawn}/π over visits (1 if the draw is honest)
    se_inverse_weight: float


@dataclass(frozen=True)
class RecurringResult:
    checks: list[RecurringCheck]
    step_rollouts: list[int]  # rollouts drawn in each step
    longest_skip_run: int  # the most consecutive visits any prompt was skipped
    prompts_never_drawn: int  # prompts of the population never given a rollout


class CyclingPrompts:
    """A fixed population served once per epoch, in a seeded order reshuffled each epoch (the
    task's prompt source does the same): prompts recur, so their history matters."""

    def __init__(self, examples: Sequence[TaskExample], *, seed: int) -> None:
        self.examples = list(examples)
        self.rng = np.random.default_rng(seed)
        self.queue: list[TaskExample] = []
        self.served: list[str] = []  # prompt ids handed out since last cleared
        self.step_served: set[str] = set()  # prompt ids handed out in the current step

    def start_step(self) -> None:
        self.step_served = set()

    def next_batch(self, num_examples: int) -> list[TaskExample]:
        """The next prompts of the epoch order, none already served this step (an epoch
        boundary inside a step defers them: a repeat would read as an exhausted source)."""
        out: list[TaskExample] = []
        served = self.step_served
        if num_examples + len(served) > len(self.examples):
            raise ValueError(
                f"asked for {num_examples} more prompts in a step that had {len(served)} of "
                f"{len(self.examples)}"
            )
        deferred: list[TaskExample] = []
        while len(out) < num_examples:
            if not self.queue:
                self.queue = [self.examples[i] for i in self.rng.permutation(len(self.examples))]
            example = self.queue.pop()
            if example.prompt_id in served:
                deferred.append(example)
                continue
            served.add(example.prompt_id)
            out.append(example)
        self.queue += deferred[::-1]  # served first in the next step
        self.served += [e.prompt_id for e in out]
        return out

    def metrics(self) -> dict[str, float]:
        return {}


def measure_recurring(
    config: AllocatorConfig,
    *,
    pass_rates: Sequence[float],
    prompts_per_rate: int,
    steps: int,
    latency: LatencyModel,
    seed: int = 0,
    after_step: Callable[[int, Sampler], None] | None = None,
) -> RecurringResult:
    """Steps of the real rollout phase over a fixed population of bandit prompts served epoch by
    epoch (`CyclingPrompts`), so each prompt's skip or split is decided from its history. Per
    candidate visit: ĝ_x = (1/n_x)·Σ_j A_j (e_{a_j} - π_x) from the real groups (0 if skipped),
    and its target from what the sampler planned before any label of the step was seen.
    `after_step(step, sampler)` is called after each step's rollout phase (its plan still held),
    for checks of the allocation itself."""
    engine = BanditEngine()
    codec = PromptCodec(tokenizer=engine.tokenizer, sampling=SamplingParams(max_new_tokens=1))
    allocator = build_allocator(AllocatorConfig(**{**config.__dict__, "seed": seed}))
    sampler = allocator.sampler
    population = [
        TaskExample(
            prompt_id=f"b{i}", prompt=f"b{i}:{p!r}", answer="0", task="bandit", difficulty=float(j)
        )
        for j, p in enumerate(pass_rates)
        for i in range(j * prompts_per_rate, (j + 1) * prompts_per_rate)
    ]
    rate = {e.prompt_id: float(e.prompt.split(":")[1]) for e in population}
    source = CyclingPrompts(population, seed=seed)
    residuals: dict[float, list[np.ndarray]] = {p: [] for p in pass_rates}
    targets: dict[float, list[np.ndarray]] = {p: [] for p in pass_rates}
    inverse: dict[float, list[float]] = {p: [] for p in pass_rates}
    drawn: dict[float, list[bool]] = {p: [] for p in pass_rates}
    weights: dict[tuple[float, int], float] = {}
    step_rollouts: list[int] = []
    skip_run: dict[str, int] = {}
    longest_skip_run = 0
    ever_drawn: set[str] = set()
    ht = config.curation.inverse_probability_weights
    with RewardPool(verifiers={"bandit": BanditVerifier()}, num_workers=1) as rewards:
        for step in range(steps):
            pool = SimulatedRolloutPool(
                engine=engine,
                latency=latency,
                is_correct=lambda _request, completion: completion.text == "0",
                seed=seed * 100_003 + step,
            )
            source.start_step()
            phase = collect_groups(
                step,
                source.next_batch(config.prompts_per_step),
                bandit_phase(allocator, rewards=rewards, codec=codec, prompts=source, pool=pool),
            )
            groups = {g.prompt_id: g for g in phase.result.groups}
            step_rollouts.append(int(phase.result.metrics["sampling/rollouts"]))
            if after_step is not None:
                after_step(step, sampler)
            for pid in sampler.prompt_ids():
                p = rate[pid]
                pi = policy(p)
                grad_p = p * (np.eye(RESPONSES)[0] - pi)
                n = int(sampler.planned_samples(pid))
                probability = float(sampler.inclusion_probability(pid))
                group = groups.get(pid)
                g = np.zeros(RESPONSES)
                if group is not None:
                    for scored, advantage in zip(group.rollouts, group.advantages, strict=True):
                        g += advantage * (
                            np.eye(RESPONSES)[int(scored.rollout.completion.text)] - pi
                        )
                    g /= len(group.rollouts)
                if n > 0 and (p, n) not in weights:
                    weights[p, n] = uniform_weight(config, p, n)
                w = weights.get((p, n), 0.0) * (1.0 if ht else probability)
                residuals[p].append(g - w * grad_p)
                targets[p].append(w * grad_p)
                chosen = sampler.verdict(pid) is not PromptStatus.SKIPPED
                drawn[p].append(chosen)
                skip_run[pid] = 0 if chosen else skip_run.get(pid, 0) + 1
                longest_skip_run = max(longest_skip_run, skip_run[pid])
                if chosen:
                    ever_drawn.add(pid)
                inverse[p].append(chosen / probability if probability > 0 else 0.0)
    checks = []
    for p in pass_rates:
        r = np.array(residuals[p])
        inv = np.array(inverse[p])
        checks.append(
            RecurringCheck(
                p=p,
                visits=len(r),
                drawn_fraction=float(np.mean(drawn[p])),
                mean_residual=r.mean(axis=0),
                se_residual=r.std(axis=0, ddof=1) / math.sqrt(len(r)),
                mean_target=np.array(targets[p]).mean(axis=0),
                mean_inverse_weight=float(inv.mean()),
                se_inverse_weight=float(inv.std(ddof=1) / math.sqrt(len(inv))),
            )
        )
    return RecurringResult(
        checks=checks,
        step_rollouts=step_rollouts,
        longest_skip_run=longest_skip_run,
        prompts_never_drawn=len(rate) - len(ever_drawn),
    )


def bandit_gradient_norms(request: StatisticsRequest) -> StatisticsReply:
    """GVM's statistic for the bandit: ‖∇_θ log π_x(a)‖ = ‖e_a - π_x‖ for each sample."""
    engine = BanditEngine()
    values = []
    for scored in request.rollouts:
        p = engine.pass_rate(scored.rollout.prompt_token_ids)
        action = int(scored.rollout.completion.text)
        values.append(float(np.linalg.norm(np.eye(RESPONSES)[action] - policy(p))))
    return StatisticsReply(kind=request.kind, values=tuple(values), weight_version=0)


def bandit_phase(
    allocator: BudgetAllocator,
    *,
    rewards: RewardPool,
    codec: PromptCodec,
    prompts: PromptSourceLike,
    pool: SimulatedRolloutPool,
) -> PhaseParts:
    """A bandit step's rollout phase: on `pool`'s virtual clock, GVM's statistics exact."""
    return PhaseParts(
        allocator=allocator,
        rollout=pool,
        rewards=rewards,
        prompts=prompts,
        codec=codec,
        statistics=bandit_gradient_norms,
        clock=pool.now,
    )


class BanditPrompts:
    """Fresh bandit prompts on request, at the given pass rates in turn (`rates` records each
    one's), for samplers that admit prompts mid-step."""

    def __init__(
        self, *, step: int, pass_rates: Sequence[float], behaviour: Mapping[float, float]
    ) -> None:
        self.step = step
        self.pass_rates = list(pass_rates)
        self.behaviour = behaviour
        self.rates: dict[str, float] = {}

    def next_batch(self, num_examples: int) -> list[TaskExample]:
        out = []
        for _ in range(num_examples):
            index = len(self.rates)
            p = self.pass_rates[index % len(self.pass_rates)]
            example = TaskExample(
                prompt_id=f"s{self.step}r{index}",
                prompt=f"r{index}:{self.behaviour.get(p, p)!r}",
                answer="0",
                task="bandit",
            )
            self.rates[example.prompt_id] = p
            out.append(example)
        return out

    def metrics(self) -> dict[str, float]:
        return {}


class NoPrompts:
    """A prompt source with nothing to add (samplers that never ask for more prompts)."""

    def next_batch(self, num_examples: int) -> list[TaskExample]:
        return []

    def metrics(self) -> dict[str, float]:
        return {}


def table(checks: Sequence[WeightCheck], *, cap: int | None = None) -> str:
    rows = [
        "| p | trials | effective w·p (± SE) | implied w·p | gated target 1-(1-p)^(cap-1) | "
        "samples drawn (± SE) | exact E[N] of the draw law |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in checks:
        target = f"{float(log_gate(c.p, max_samples=cap)):.3f}" if cap else "n/a"
        expected = f"{c.expected_samples:.2f}" if c.expected_samples is not None else "n/a"
        rows.append(
            f"| {c.p:g} | {c.trials} | {c.effective_weight * c.p:.3f} ± "
            f"{c.se_effective_weight * c.p:.3f} | {c.implied_weight * c.p:.3f} | {target} | "
            f"{c.samples_drawn:.2f} ± {c.se_samples_drawn:.2f} | {expected} |"
        )
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    from hydra import compose, initialize_config_dir

    from adarl.launch import CONFIG_DIR, load_config

    parser = argparse.ArgumentParser(
        prog="python -m adarl.bench objective", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--experiment", default="ada_seq_balance")
    parser.add_argument("--prompts-per-rate", type=int, default=64)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--engines", type=int, nargs="*", default=[1, 4])
    parser.add_argument("--slots", type=int, default=256)
    parser.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = parser.parse_args(argv)
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        config = load_config(
            compose(
                config_name="config", overrides=[f"+experiment={args.experiment}", *args.overrides]
            )
        ).allocator
    cap = config.max_samples_per_prompt if config.sampler in ("seq_pos", "seq_balance") else None
    for engines in args.engines:
        checks = measure(
            config,
            pass_rates=(0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 0.9),
            prompts_per_rate=args.prompts_per_rate,
            steps=args.steps,
            latency=LatencyModel(engines=engines, slots=args.slots),
        )
        print(f"\n{args.experiment}, {engines} engines × {args.slots} slots")
        print(table(checks, cap=cap))
    return 0


if __name__ == "__main__":
    sys.exit(main())
