"""Allocation samplers: per-prompt sample counts decided from live estimates, over the batch.

* `ada_est` (Reinforce-Ada-Est, paper v3 Algorithm 1): n_i from the prompt's pass-rate estimate
  p̂_i by the configured `rule` (`adarl.algo.allocation`): "inverse_sqrt" n ∝ 1/√(p̂ + ε) (the
  paper), "sqrt_odds" n ∝ √((1-p̂)/p̂), or "variance_optimal" n ∝ w(p̂)√(p̂(1-p̂)) for the declared
  objective; clipped to [min, cap] and rounded to the step budget exactly. p̂_i is the
  allocator's EMA (`adarl.allocator.stats`: λ, α, β of the paper) when the prompt was seen within
  `max_age_steps`; otherwise (unseen, or stale) a pilot of `pilot_samples` draws is taken first and
  p̂_i = (pilot positives + α)/(pilot + α + β). The pilot is paid from the step's budget and only
  estimates: the trained samples are the second draw, whose count was fixed before its labels
  were seen (`pilot_samples()` tells the allocator to leave the pilot out of the group).
* `gvm` (RLHFlow/GVM), two stages inside one step: a pilot of `presamples` (N') per prompt; once
  all returned, p_i = N⁺_i/N' and the sampler asks for G_i, the mean over the pilot's accepted
  samples of the gradient norm of their summed NLL, computed by the learner group at the current
  weights (`statistics_wanted()` → the allocator's `StatisticsRequest` → the driver → the
  learners); then n_i ∝ G_i/√(p_i + α/p_i^(β-1)) (0 for p_i = 0 or G_i = 0) with Σ n_i = the
  rest of the budget exactly. As in GVM's code, the pilot only estimates and the second-stage
  samples form the group; `pass_rate_estimate()` gives p_i to the GVM-RAFT advantage
  (A = 1/(n_i p_i) on accepted samples).

Both allocate over the whole batch (a barrier after the pilot), have no stopping rule, and take
no prompts after the step started.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from adarl.algo.allocation import (
    ada_est_allocation,
    gvm_allocation,
    sqrt_odds_allocation,
    variance_optimal_allocation,
)
from adarl.allocator.samplers.base import (
    PromptHistory,
    PromptStatus,
    check_new_prompt_ids,
)
from adarl.allocator.samplers.ledger import LedgerSampler, StepLedger

ADA_EST_RULES = ("inverse_sqrt", "sqrt_odds", "variance_optimal")
# Pass-rate bins of the allocation histogram (sampling/allocation_by_estimate/<bin>).
ESTIMATE_BINS = ((0.0, 0.1), (0.1, 0.3), (0.3, 0.7), (0.7, 0.9), (0.9, 1.0))


def _feasible_budget(budget: int, count: int, low: int, high: int) -> int:
    return int(min(max(budget, count * low), count * high))


def _estimate_bin(p: float) -> str:
    for low, high in ESTIMATE_BINS:
        if p < high or high == 1.0:
            return f"{low:g}-{high:g}"
    raise AssertionError(p)


def _allocation_metrics(
    estimates: Mapping[str, float], counts: Mapping[str, int], observed: Mapping[str, float]
) -> dict[str, float]:
    """Mean second-stage samples by estimate bin, and |estimate - observed| (estimate error)."""
    by_bin: dict[str, list[int]] = {f"{lo:g}-{hi:g}": [] for lo, hi in ESTIMATE_BINS}
    for pid, p in estimates.items():
        by_bin[_estimate_bin(p)].append(counts.get(pid, 0))
    out = {
        f"sampling/allocation_by_estimate/{name}": float(np.mean(v)) if v else 0.0
        for name, v in by_bin.items()
    }
    errors = [abs(estimates[pid] - observed[pid]) for pid in observed if pid in estimates]
    out["sampling/estimate_error_mean"] = float(np.mean(errors)) if errors else 0.0
    return out


class _TwoStage(LedgerSampler):
    """What both samplers share: a pilot per prompt (maybe 0), then one allocated draw each."""

    name = "two_stage"

    def __init__(self, *, max_samples_per_step: int | None, positive_threshold: float) -> None:
        self.max_samples_per_step = max_samples_per_step
        self.positive_threshold = positive_threshold
        self.step = -1
        self.phase = "idle"  # "pilot" -> ("statistics") -> "allocated"
        self._pilot: dict[str, int] = {}  # prompt -> pilot samples
        self._estimates: dict[str, float] = {}  # prompt -> p̂ the allocation used
        self._allocated: dict[str, int] = {}  # prompt -> second-stage samples
        self._ledger = StepLedger(budget_cap=None, positive_threshold=positive_threshold)

    def _start(self, prompt_ids: Sequence[str], budget: int, pilots: Mapping[str, int]) -> None:
        check_new_prompt_ids(prompt_ids, {}, what=self.name)
        self.phase = "pilot"
        self._pilot = {pid: int(pilots.get(pid, 0)) for pid in prompt_ids}
        self._estimates, self._allocated = {}, {}
        self._ledger = StepLedger(budget_cap=budget, positive_threshold=self.positive_threshold)
        self._ledger.add(prompt_ids)
        for pid in prompt_ids:
            if self._pilot[pid] and self._ledger.dispatch(pid, self._pilot[pid]) is None:
                self._ledger.settle(pid, PromptStatus.UNRESOLVED)
                self._pilot[pid] = 0

    def _second_stage(self, counts: Mapping[str, int]) -> None:
        self.phase = "allocated"
        self._allocated = {pid: int(n) for pid, n in counts.items()}
        for pid in self._ledger.open_prompts():
            n = self._allocated.get(pid, 0)
            if n == 0 or self._ledger.dispatch(pid, n) is None:
                # Nothing to train on: the pilot only estimated.
                self._ledger.settle(pid, PromptStatus.UNRESOLVED)
                self._allocated[pid] = 0

    def add_prompts(self, prompt_ids: Sequence[str], history: Mapping[str, PromptHistory]) -> None:
        if prompt_ids:
            raise ValueError(
                f"{self.name} allocates over the whole batch at the start of a step; it takes "
                "no prompts mid-step (needs_prompts() is always 0)"
            )

    def sequential_law(self) -> None:
        return None  # the trained draw's size is fixed before its labels are seen

    # -- PilotDrawer and PassRateEstimator -----------------------------------------------------

    def pilot_samples(self, prompt_id: str) -> int:
        return self._pilot.get(prompt_id, 0)

    def pass_rate_estimate(self, prompt_id: str) -> float | None:
        return self._estimates.get(prompt_id)

    def _observed_second_stage(self) -> dict[str, float]:
        """Each allocated prompt's pass rate over its second-stage samples (for the error)."""
        out = {}
        for pid, n in self._allocated.items():
            tally = self._ledger.tallies[pid]
            pilot = self._pilot.get(pid, 0)
            if n and tally.observed > pilot:
                # tallies count every sample; the pilot's positives are kept apart
                out[pid] = (tally.positives - self._pilot_positives.get(pid, 0)) / (
                    tally.observed - pilot
                )
        return out

    def _metrics(self) -> dict[str, float]:
        return {
            **self._ledger.metrics(),
            **_allocation_metrics(self._estimates, self._allocated, self._observed_second_stage()),
            "sampling/pilot_samples": float(sum(self._pilot.values())),
        }

    def _state(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "phase": self.phase,
            "pilot": dict(self._pilot),
            "pilot_positives": dict(self._pilot_positives),
            "estimates": dict(self._estimates),
            "allocated": dict(self._allocated),
            "ledger": self._ledger.state_dict(),
        }

    def _load(self, state: Mapping[str, Any]) -> None:
        self.step = int(state["step"])
        self.phase = str(state["phase"])
        self._pilot = dict(state["pilot"])
        self._pilot_positives = dict(state["pilot_positives"])
        self._estimates = dict(state["estimates"])
        self._allocated = dict(state["allocated"])
        self._ledger.load_state_dict(state["ledger"])

    _pilot_positives: dict[str, int]


class AdaEstSampler(_TwoStage):
    name = "ada_est"

    def __init__(
        self,
        *,
        mean_samples_per_prompt: int,
        min_samples_per_prompt: int,
        max_samples_per_prompt: int,
        epsilon: float,
        rule: str = "inverse_sqrt",
        objective: str = "log",
        objective_alpha: float = 0.5,
        objective_k: int = 8,
        pilot_samples: int = 2,
        max_age_steps: int | None = 100,
        prior_alpha: float = 1.0,
        prior_beta: float = 1.0,
        max_samples_per_step: int | None = None,
        positive_threshold: float = 0.5,
    ) -> None:
        super().__init__(
            max_samples_per_step=max_samples_per_step, positive_threshold=positive_threshold
        )
        if not 1 <= min_samples_per_prompt <= max_samples_per_prompt:
            raise ValueError(
                f"ada_est: need 1 <= min_samples_per_prompt={min_samples_per_prompt} <= "
                f"max_samples_per_prompt={max_samples_per_prompt}"
            )
        if rule not in ADA_EST_RULES:
            raise ValueError(f"ada_est: rule must be one of {ADA_EST_RULES}, got {rule!r}")
        if pilot_samples < 1:
            raise ValueError(f"ada_est: pilot_samples must be >= 1, got {pilot_samples}")
        self.mean_samples_per_prompt = mean_samples_per_prompt
        self.min_samples_per_prompt = min_samples_per_prompt
        self.max_samples_per_prompt = max_samples_per_prompt
        self.epsilon = epsilon
        self.rule = rule
        self.objective = objective
        self.objective_alpha = objective_alpha
        self.objective_k = objective_k
        self.pilot_size = pilot_samples
        self.max_age_steps = max_age_steps
        self.prior_alpha = prior_alpha
        self.prior_beta = prior_beta
        self._history_estimates: dict[str, tuple[float, int]] = {}  # p̂, age
        self._pilot_positives = {}

    def start_step(
        self,
        step: int,
        prompt_ids: Sequence[str],
        history: Mapping[str, PromptHistory],
        *,
        carried_groups: int = 0,
    ) -> None:
        self.step = step
        self._history_estimates = {}
        pilots = {}
        for pid in prompt_ids:
            known = history[pid]
            age = step - known.last_step
            fresh = known.samples > 0 and (self.max_age_steps is None or age <= self.max_age_steps)
            if fresh:
                self._history_estimates[pid] = (known.pass_rate, age)
            else:
                pilots[pid] = self.pilot_size
        budget = self.mean_samples_per_prompt * len(prompt_ids)
        if self.max_samples_per_step is not None:
            budget = min(budget, self.max_samples_per_step)
        self._pilot_positives = {}
        self._start(prompt_ids, budget, pilots)
        if not any(self._pilot.values()):
            self._allocate()

    def observe(self, prompt_id: str, rewards: Sequence[float]) -> None:
        self._ledger.record(prompt_id, rewards)
        if self.phase == "allocated":
            self._ledger.settle(prompt_id, PromptStatus.RESOLVED)
            return
        self._pilot_positives[prompt_id] = self._ledger.tallies[prompt_id].positives
        if self._ledger.in_flight == 0:
            self._allocate()

    def _allocate(self) -> None:
        prompts = self._ledger.open_prompts()
        estimates = {}
        for pid in prompts:
            if pid in self._history_estimates:
                estimates[pid] = self._history_estimates[pid][0]
            else:
                tally = self._ledger.tallies[pid]
                estimates[pid] = (tally.positives + self.prior_alpha) / (
                    tally.observed + self.prior_alpha + self.prior_beta
                )
        self._estimates = estimates
        left = self._ledger.budget.left
        assert left is not None
        counts: dict[str, int] = {}
        if prompts:
            floor = self.min_samples_per_prompt
            if left < floor * len(prompts):  # too little left: drop the floor, never overspend
                floor = 0
            budget = _feasible_budget(left, len(prompts), floor, self.max_samples_per_prompt)
            p_hat = np.array([estimates[pid] for pid in prompts])
            bounds = {
                "budget": budget,
                "min_samples": floor,
                "max_samples": self.max_samples_per_prompt,
            }
            if self.rule == "inverse_sqrt":
                n = ada_est_allocation(p_hat, eps=self.epsilon, **bounds)
            elif self.rule == "sqrt_odds":
                n = sqrt_odds_allocation(p_hat, **bounds)
            else:
                n = variance_optimal_allocation(
                    p_hat,
                    objective=self.objective,
                    alpha=self.objective_alpha,
                    objective_k=self.objective_k,
                    **bounds,
                )
            counts = dict(zip(prompts, (int(x) for x in n), strict=True))
        self._second_stage(counts)

    def metrics(self) -> dict[str, float]:
        ages = [age for _, age in self._history_estimates.values()]
        return {
            **self._metrics(),
            "sampling/estimate_age_mean_steps": float(np.mean(ages)) if ages else 0.0,
            "sampling/estimates_from_pilot": float(sum(1 for n in self._pilot.values() if n)),
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            **self._state(),
            "history_estimates": {k: list(v) for k, v in self._history_estimates.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._load(state)
        self._history_estimates = {
            k: (float(p), int(a)) for k, (p, a) in state["history_estimates"].items()
        }


class GvmSampler(_TwoStage):
    name = "gvm"

    def __init__(
        self,
        *,
        presamples: int,
        mean_samples_per_prompt: int,
        min_samples_per_prompt: int,
        max_samples_per_prompt: int,
        alpha: float = 1e-3,
        beta: float = 2.0,
        max_samples_per_step: int | None = None,
        positive_threshold: float = 0.5,
    ) -> None:
        super().__init__(
            max_samples_per_step=max_samples_per_step, positive_threshold=positive_threshold
        )
        if presamples < 1:
            raise ValueError(f"gvm: presamples must be >= 1, got {presamples}")
        if not 0 <= min_samples_per_prompt <= max_samples_per_prompt - presamples:
            raise ValueError(
                f"gvm: need min_samples_per_prompt={min_samples_per_prompt} <= "
                f"max_samples_per_prompt - presamples = {max_samples_per_prompt - presamples}"
            )
        self.presamples = presamples
        self.mean_samples_per_prompt = mean_samples_per_prompt
        self.min_samples_per_prompt = min_samples_per_prompt
        self.max_samples_per_prompt = max_samples_per_prompt
        self.alpha = alpha
        self.beta = beta
        self._norms: dict[str, float] = {}
        self._pilot_positives = {}

    def start_step(
        self,
        step: int,
        prompt_ids: Sequence[str],
        history: Mapping[str, PromptHistory],
        *,
        carried_groups: int = 0,
    ) -> None:
        self.step = step
        self._norms = {}
        self._pilot_positives = {}
        budget = (self.presamples + self.mean_samples_per_prompt) * len(prompt_ids)
        if self.max_samples_per_step is not None:
            budget = min(budget, self.max_samples_per_step)
        self._start(prompt_ids, budget, {pid: self.presamples for pid in prompt_ids})

    def observe(self, prompt_id: str, rewards: Sequence[float]) -> None:
        self._ledger.record(prompt_id, rewards)
        if self.phase == "allocated":
            self._ledger.settle(prompt_id, PromptStatus.RESOLVED)
            return
        self._pilot_positives[prompt_id] = self._ledger.tallies[prompt_id].positives
        if self._ledger.in_flight == 0:
            self.phase = "statistics"  # the whole pilot is in: G_i next

    # -- StatisticsRequester -------------------------------------------------------------------

    def statistics_wanted(self) -> list[str]:
        """After the whole pilot returned: the prompts with an accepted pilot sample (the rule
        gives the others 0 whatever their G_i)."""
        if self.phase != "statistics":
            return []
        return [pid for pid in self._ledger.open_prompts() if self._pilot_positives.get(pid)]

    def observe_statistics(self, grad_norms: Mapping[str, float]) -> None:
        self._norms = {pid: float(g) for pid, g in grad_norms.items()}
        self._allocate()

    def _allocate(self) -> None:
        prompts = self._ledger.open_prompts()
        pass_rates = {
            pid: self._pilot_positives.get(pid, 0) / self._pilot[pid] if self._pilot[pid] else 0.0
            for pid in prompts
        }
        self._estimates = pass_rates
        left = self._ledger.budget.left
        assert left is not None
        room = self.max_samples_per_prompt - self.presamples
        norms = np.array([self._norms.get(pid, 0.0) for pid in prompts])
        p = np.array([pass_rates[pid] for pid in prompts])
        active = int(((norms > 0) & (p > 0)).sum())
        counts: dict[str, int] = {}
        if active:
            floor = (
                self.min_samples_per_prompt if left >= active * self.min_samples_per_prompt else 0
            )
            n = gvm_allocation(
                norms,
                p,
                budget=_feasible_budget(left, active, floor, room),
                alpha=self.alpha,
                beta=self.beta,
                min_samples=floor,
                max_samples=room,
            )
            counts = dict(zip(prompts, (int(x) for x in n), strict=True))
        self._second_stage(counts)

    def metrics(self) -> dict[str, float]:
        out = self._metrics()
        allocated = [
            (self._norms[pid], n) for pid, n in self._allocated.items() if pid in self._norms
        ]
        if allocated:  # mean second-stage samples by quartile of G_i
            norms = np.array([g for g, _ in allocated])
            counts = np.array([n for _, n in allocated])
            edges = np.quantile(norms, [0.25, 0.5, 0.75])
            quartile = np.searchsorted(edges, norms, side="right")
            for q in range(4):
                mask = quartile == q
                out[f"sampling/allocation_by_grad_norm/q{q + 1}"] = (
                    float(counts[mask].mean()) if mask.any() else 0.0
                )
            out["sampling/grad_norm_mean"] = float(norms.mean())
        out["sampling/grad_norm_age_steps"] = 0.0  # G_i is computed on this step's pilot
        return out

    def state_dict(self) -> dict[str, Any]:
        return {**self._state(), "norms": dict(self._norms)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._load(state)
        self._norms = dict(state["norms"])
