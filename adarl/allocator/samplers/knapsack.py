"""`knapsack`: split a step's rollout budget across its candidates by the value of each sample.

The step has a budget of B rollouts (allocator.rollouts_per_step) and looks at C candidates
(`candidates_per_step`, asked of the driver until it has them). Each candidate's sample count is
fixed before any of its labels is seen, in one draw, so its pool mean is unbiased and its group is
the whole pool. Two value rules (`adarl.algo.curation`):

**knapsack_rl** (Knapsack-RL, Li et al. 2025, arXiv 2509.25849; code liziniu/KnapsackRL,
`exploration_utils.py`). p̂ is the prompt's pass rate over its latest rollouts (the last visit, or
the latest 2n̄ labels when that visit was smaller: the code's 16 at n̄ = 8); a prompt with fewer
than n̄ rollouts ever (the code's 8) gets n̄ and stays out of the knapsack (the first epoch is
uniform). Prompts with p̂ ∈ {0, 1} get `min_samples_per_prompt`; the rest get it plus extras
chosen by dynamic programming to maximise Σ (1 - p̂^n - (1-p̂)^n)·p̂(1-p̂)², extras of 0 valued 0
(the code's item values). Fallback (the code's `allow_fallback`): when the knapsack prompts'
costs, Σ min(cap, log(1 - 0.9)/log(max(p̂, 1 - p̂))) (the samples for a 90% chance of a mixed
group), fall short of the budget left, the excess goes to the p̂ = 0 prompts evenly (or, with
none, to every prompt outside the knapsack). C = the step's prompts; nothing is skipped.

**declared** (adarl). Each candidate's pass rate has a Beta posterior (its pooled prior and its
discounted record, adarl/allocator/stats.py) and n samples are worth V(n) = E[h(p)·u_n(p)]: the
expected share of the declared objective's gradient a group of n captures (`declared_value`).
Counts n_i ∈ {0} ∪ [n_min, cap] maximise Σ V_i(n_i) with Σ n_i = B exactly (`knapsack_allocation`)
over C candidates, more than a step trains: candidates worth less than the samples cost get 0.
A reserve of m = ⌊`explore_fraction`·B / n_min⌋ draws of n_min samples is planned first: the
knapsack splits B - m·n_min, and a uniformly random m of the candidates it left out (R) get n_min
each (π = m/|R|; fewer than m left out: all of them, the rest back to the split). A prompt skipped
`max_skipped_visits` visits in a row is required by the split (π = 1). Every candidate's count is
planned before any draw (`planned_samples`: n_min for an exploration candidate, drawn or not).
With `inverse_probability_weights` an explored prompt's advantages are multiplied by 1/π, so the
declared objective is kept exactly: E[1{drawn}/π · ĝ] = w(p; n)·∇p for every candidate
(adarl/allocator/curation.py says the same of skips). Candidates not drawn are SKIPPED.

**hora** (HORA, Wang et al. 2026, arXiv 2605.07114). n more rollouts of a prompt are worth their
hit utility H(n) = 1 - E[(1-p)^n] (`hit_utility`), the posterior probability that at least one is
correct, with p ~ Beta(1 + s, 1 + f): HORA's uniform prior and the prompt's discounted record of
s positives and f negatives (not the pooled prior). Every candidate gets n_i ∈ [n_min, cap] with
Σ n_i = B exactly, maximising Σ H_i(n_i) (`knapsack_allocation`, exact; H is concave, so this is
also the greedy split by the increments E[p(1-p)^(m-1)]). Nothing is skipped or explored (π = 1),
so each prompt's group, of a size fixed before its labels, estimates its advantage's weight at its
planned n: GRPO's w(p; n_x) with GRPO's advantage, as the paper leaves it unchanged. An unseen
prompt has Beta(1, 1), so the first visits are uniform. The paper's own text of the algorithm was
not available to adarl; docs/algorithms.md "Coverage objectives" says what was derived.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from adarl.algo.curation import (
    declared_value,
    hit_utility,
    knapsack_allocation,
    knapsack_rl_value,
)
from adarl.allocator.samplers.base import (
    PromptHistory,
    PromptStatus,
    check_new_prompt_ids,
    derive_seed,
)
from adarl.allocator.samplers.estimation import ESTIMATE_BINS, _estimate_bin
from adarl.allocator.samplers.ledger import LedgerSampler, StepLedger

VALUE_RULES = ("declared", "knapsack_rl", "hora")
HORA_PRIOR = (1.0, 1.0)  # HORA's uniform Beta prior
KNAPSACK_RL_CONFIDENCE = 0.9  # the code's alpha: samples for a 90% chance of a mixed group


class KnapsackSampler(LedgerSampler):
    name = "knapsack"

    def __init__(
        self,
        *,
        value: str,
        rollouts_per_step: int,
        mean_samples_per_prompt: int,
        min_samples_per_prompt: int,
        max_samples_per_prompt: int,
        candidates_per_step: int,
        objective: str = "arcsin",
        objective_alpha: float = 0.5,
        objective_k: int = 8,
        explore_fraction: float = 0.0,
        max_skipped_visits: int | None = None,
        inverse_probability_weights: bool = True,
        seed: int = 0,
        positive_threshold: float = 0.5,
    ) -> None:
        if value not in VALUE_RULES:
            raise ValueError(f"knapsack: value must be one of {VALUE_RULES}, got {value!r}")
        if not 1 <= min_samples_per_prompt <= max_samples_per_prompt:
            raise ValueError(
                f"knapsack: need 1 <= min_samples_per_prompt={min_samples_per_prompt} <= "
                f"max_samples_per_prompt={max_samples_per_prompt}"
            )
        if candidates_per_step * max_samples_per_prompt < rollouts_per_step:
            raise ValueError(
                f"knapsack: {candidates_per_step} candidates of at most {max_samples_per_prompt} "
                f"samples cannot spend rollouts_per_step={rollouts_per_step}; raise "
                "candidates_per_step or max_samples_per_prompt"
            )
        if not 0.0 <= explore_fraction < 1.0:
            raise ValueError(
                f"knapsack: explore_fraction must be in [0, 1), got {explore_fraction}"
            )
        if max_skipped_visits is not None and max_skipped_visits < 0:
            raise ValueError(f"knapsack: max_skipped_visits must be >= 0, got {max_skipped_visits}")
        if mean_samples_per_prompt < 1 or rollouts_per_step < 1:
            raise ValueError("knapsack: mean_samples_per_prompt and rollouts_per_step must be >= 1")
        if value == "hora" and explore_fraction != 0.0:
            raise ValueError(
                f"knapsack: value='hora' draws every candidate; explore_fraction must be 0, got "
                f"{explore_fraction}"
            )
        if value == "hora" and candidates_per_step * min_samples_per_prompt > rollouts_per_step:
            raise ValueError(
                f"knapsack: value='hora' gives each of {candidates_per_step} candidates at least "
                f"{min_samples_per_prompt} samples, over rollouts_per_step={rollouts_per_step}"
            )
        self.value = value
        self.rollouts_per_step = rollouts_per_step
        self.mean_samples_per_prompt = mean_samples_per_prompt
        self.min_samples_per_prompt = min_samples_per_prompt
        self.max_samples_per_prompt = max_samples_per_prompt
        self.candidates_per_step = candidates_per_step
        self.objective = objective
        self.objective_alpha = objective_alpha
        self.objective_k = objective_k
        self.explore_fraction = explore_fraction
        self.max_skipped_visits = max_skipped_visits
        self.inverse_probability_weights = inverse_probability_weights
        self.seed = seed
        self.positive_threshold = positive_threshold
        self.name = {"knapsack_rl": "knapsack_rl", "hora": "hora"}.get(value, "knapsack")
        self.step = -1
        self._reset_step()

    def _reset_step(self) -> None:
        self._ledger = StepLedger(
            budget_cap=self.rollouts_per_step, positive_threshold=self.positive_threshold
        )
        self._candidates: list[str] = []
        self._history: dict[str, PromptHistory] = {}
        self._source_exhausted = False
        self._planned = False
        self._probability: dict[str, float] = {}
        # Samples planned per candidate before any draw (an exploration candidate: n_min,
        # drawn or not); the rest are their allocated counts.
        self._planned_samples: dict[str, int] = {}
        self._allocated: dict[str, int] = {}
        self._estimates: dict[str, float] = {}
        self._explored: list[str] = []
        self._forced = 0
        self._fallback = 0

    # -- the protocol --------------------------------------------------------------------------

    def start_step(
        self,
        step: int,
        prompt_ids: Sequence[str],
        history: Mapping[str, PromptHistory],
        *,
        carried_groups: int = 0,
    ) -> None:
        self.step = step
        self._reset_step()
        self.add_prompts(prompt_ids, history)

    def add_prompts(self, prompt_ids: Sequence[str], history: Mapping[str, PromptHistory]) -> None:
        if self._planned:
            raise ValueError(
                f"{self.name}: prompts arrived after the step's budget was split; it takes "
                f"candidates only until it has {self.candidates_per_step}"
            )
        if not prompt_ids:
            self._source_exhausted = True
        check_new_prompt_ids(prompt_ids, {pid: None for pid in self._candidates}, what=self.name)
        for pid in prompt_ids:
            self._candidates.append(pid)
            self._history[pid] = history[pid]
        if len(self._candidates) >= self.candidates_per_step or self._source_exhausted:
            self._plan()

    def needs_prompts(self) -> int:
        if self._planned or self._source_exhausted:
            return 0
        return self.candidates_per_step - len(self._candidates)

    def done(self) -> bool:
        return self._planned and super().done()

    def observe(self, prompt_id: str, rewards: Sequence[float]) -> None:
        self._ledger.record(prompt_id, rewards)
        self._ledger.settle(prompt_id, PromptStatus.RESOLVED)

    # -- PassRateEstimator and InclusionWeigher ------------------------------------------------

    def pass_rate_estimate(self, prompt_id: str) -> float | None:
        return self._estimates.get(prompt_id)

    def inclusion_probability(self, prompt_id: str) -> float:
        return self._probability.get(prompt_id, 1.0)

    def planned_samples(self, prompt_id: str) -> int:
        """The samples the plan gave the candidate before any random draw: its allocated count,
        or n_min for an exploration candidate (drawn or not). What its weight w(p; n) uses."""
        return self._planned_samples.get(prompt_id, self._allocated.get(prompt_id, 0))

    def advantage_weight(self, prompt_id: str) -> float:
        if not self.inverse_probability_weights:
            return 1.0
        return 1.0 / self._probability.get(prompt_id, 1.0)

    # -- the split -----------------------------------------------------------------------------

    def _plan(self) -> None:
        self._planned = True
        pids = list(self._candidates)
        self._ledger.add(pids)
        if not pids:
            return
        budget = min(self.rollouts_per_step, len(pids) * self.max_samples_per_prompt)
        if self.value == "knapsack_rl":
            counts = self._knapsack_rl(pids, budget)
        elif self.value == "hora":
            counts = self._hora(pids, budget)
        else:
            counts = self._declared(pids, budget)
        for pid in pids:
            n = int(counts[pid])
            self._allocated[pid] = n
            if n == 0:
                self._ledger.settle(pid, PromptStatus.SKIPPED)
            else:
                self._ledger.dispatch(pid, n)

    def _knapsack_rl(self, pids: list[str], budget: int) -> dict[str, int]:
        n_bar, n_min, cap = (
            self.mean_samples_per_prompt,
            self.min_samples_per_prompt,
            self.max_samples_per_prompt,
        )
        counts: dict[str, int] = {}
        inside: list[str] = []  # 0 < p̂ < 1: in the knapsack
        zeros: list[str] = []  # p̂ = 0: the fallback's first recipients
        for pid in pids:
            labels = self._history[pid].recent_labels
            if len(labels) < n_bar:  # unseen (or under-sampled): the uniform count
                counts[pid] = n_bar
                continue
            window = labels[-2 * n_bar :]
            p = window.count("1") / len(window)
            self._estimates[pid] = p
            counts[pid] = n_min
            if p <= 0.0:
                zeros.append(pid)
            elif p < 1.0:
                inside.append(pid)
        left = budget - sum(counts.values())
        if left < 0:  # more prompts than the budget's minimums: trim the last ones
            for pid in reversed(pids):
                take = min(counts[pid], -left)
                counts[pid] -= take
                left += take
                if left == 0:
                    break
            return counts
        p_hat = np.array([self._estimates[pid] for pid in inside])
        spend = left
        if inside:
            cost = np.log(1.0 - KNAPSACK_RL_CONFIDENCE) / np.log(np.maximum(p_hat, 1.0 - p_hat))
            needed = int(np.minimum(cap, cost).astype(np.int64).sum())
            if needed < left:  # fallback: the knapsack gets what it can use, the rest is spread
                spend = needed
        excess = left - spend
        if excess > 0 or not inside:
            self._fallback = excess if inside else left
            takers = zeros or [pid for pid in pids if pid not in set(inside)]
            room = {pid: cap - counts[pid] for pid in takers}
            spread = _spread_evenly(self._fallback, room)
            for pid, extra in spread.items():
                counts[pid] += extra
            spend += self._fallback - sum(spread.values())  # what no taker had room for
            if not inside:
                return counts
        extras = cap - n_min
        values = knapsack_rl_value(p_hat, max_samples=cap)[:, n_min:]  # [K, extras + 1]
        values[:, 0] = 0.0  # the code values "no extras" at 0
        spend = min(spend, len(inside) * extras)
        if extras == 0 or spend == 0:
            return counts
        chosen = knapsack_allocation(values, budget=spend, min_samples=1, max_samples=extras)
        for pid, extra in zip(inside, chosen, strict=True):
            counts[pid] += int(extra)
        return counts

    def hora_posterior(self, prompt_id: str) -> tuple[float, float]:
        """HORA's Beta(1 + s, 1 + f) of a candidate: the uniform prior and its discounted record."""
        history = self._history[prompt_id]
        return (
            HORA_PRIOR[0] + history.decayed_positives,
            HORA_PRIOR[1] + history.decayed_negatives,
        )

    def _hora(self, pids: list[str], budget: int) -> dict[str, int]:
        n_min, cap = self.min_samples_per_prompt, self.max_samples_per_prompt
        posterior = np.array([self.hora_posterior(pid) for pid in pids])  # [C, 2]
        for pid, (a, b) in zip(pids, posterior, strict=True):
            self._estimates[pid] = float(a / (a + b))
            self._probability[pid] = 1.0
        values = hit_utility(posterior[:, 0], posterior[:, 1], max_samples=cap)  # [C, cap + 1]
        counts = knapsack_allocation(
            values,
            budget=budget,
            min_samples=n_min,
            max_samples=cap,
            required=np.ones(len(pids), bool),
        )
        return {pid: int(n) for pid, n in zip(pids, counts, strict=True)}

    def _declared(self, pids: list[str], budget: int) -> dict[str, int]:
        n_min, cap = self.min_samples_per_prompt, self.max_samples_per_prompt
        posterior = np.array([self._history[pid].posterior() for pid in pids])  # [C, 2]
        values = declared_value(
            posterior[:, 0],
            posterior[:, 1],
            max_samples=cap,
            objective=self.objective,
            alpha=self.objective_alpha,
            objective_k=self.objective_k,
        )
        for pid, (a, b) in zip(pids, posterior, strict=True):
            self._estimates[pid] = float(a / (a + b))
        forced = np.array(
            [
                self.max_skipped_visits is not None
                and self._history[pid].skipped_visits >= self.max_skipped_visits
                for pid in pids
            ]
        )
        self._forced = int(forced.sum())
        # The exploration reserve: m candidates of n_min samples each, from those the split
        # leaves out. Planned before any draw, so an explored prompt's n is n_min drawn or not.
        explore = int(self.explore_fraction * budget) // n_min
        explore = min(explore, max(0, (budget - self._forced * n_min) // n_min))
        first = knapsack_allocation(
            values,
            budget=budget - explore * n_min,
            min_samples=n_min,
            max_samples=cap,
            required=forced,
        )
        rest = np.flatnonzero(first == 0)
        counts = {pid: int(n) for pid, n in zip(pids, first, strict=True)}
        for pid in pids:
            self._probability[pid] = 1.0
        if explore and len(rest):
            take = min(explore, len(rest))
            probability = take / len(rest)
            rng = np.random.default_rng(derive_seed(self.seed, self.step, "explore"))
            chosen = rng.choice(rest, size=take, replace=False)
            for i in rest:
                self._probability[pids[int(i)]] = probability
                self._planned_samples[pids[int(i)]] = n_min
            for i in sorted(int(i) for i in chosen):
                counts[pids[i]] = n_min
                self._explored.append(pids[i])
            unspent = (explore - take) * n_min
            if unspent:  # fewer left out than the reserve: the split's prompts take the rest
                kept = np.flatnonzero(first > 0)
                again = knapsack_allocation(
                    values[kept],
                    budget=int(first.sum()) + unspent,
                    min_samples=n_min,
                    max_samples=cap,
                    required=np.ones(len(kept), bool),
                )
                for i, n in zip(kept, again, strict=True):
                    counts[pids[int(i)]] = int(n)
        elif explore:  # nothing left out: the reserve goes back to the split
            counts = {
                pid: int(n)
                for pid, n in zip(
                    pids,
                    knapsack_allocation(
                        values, budget=budget, min_samples=n_min, max_samples=cap, required=forced
                    ),
                    strict=True,
                )
            }
        return counts

    # -- reporting and checkpointing -----------------------------------------------------------

    def metrics(self) -> dict[str, float]:
        drawn = {pid: n for pid, n in self._allocated.items() if n > 0}
        by_bin: dict[str, list[int]] = {f"{lo:g}-{hi:g}": [] for lo, hi in ESTIMATE_BINS}
        for pid, p in self._estimates.items():
            by_bin[_estimate_bin(p)].append(self._allocated.get(pid, 0))
        weights = [1.0 / self._probability[pid] for pid in drawn if pid in self._probability]
        return {
            **self._ledger.metrics(),
            **{
                f"sampling/allocation_by_estimate/{name}": float(np.mean(v)) if v else 0.0
                for name, v in by_bin.items()
            },
            "sampling/candidates": float(len(self._candidates)),
            "sampling/skipped_prompts": float(len(self._candidates) - len(drawn)),
            "sampling/skipped_fraction": (
                1.0 - len(drawn) / len(self._candidates) if self._candidates else 0.0
            ),
            "sampling/explored_prompts": float(len(self._explored)),
            "sampling/skip_forced_prompts": float(self._forced),
            "sampling/knapsack_fallback_samples": float(self._fallback),
            "sampling/inverse_probability_weight_max": (
                max(weights) if weights and self.inverse_probability_weights else 1.0
            ),
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "ledger": self._ledger.state_dict(),
            "candidates": list(self._candidates),
            "history": {pid: dataclasses.asdict(h) for pid, h in self._history.items()},
            "source_exhausted": self._source_exhausted,
            "planned": self._planned,
            "probability": dict(self._probability),
            "planned_samples": dict(self._planned_samples),
            "allocated": dict(self._allocated),
            "estimates": dict(self._estimates),
            "explored": list(self._explored),
            "forced": self._forced,
            "fallback": self._fallback,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.step = int(state["step"])
        self._ledger.load_state_dict(state["ledger"])
        self._candidates = list(state["candidates"])
        self._history = {pid: PromptHistory(**h) for pid, h in state["history"].items()}
        self._source_exhausted = bool(state["source_exhausted"])
        self._planned = bool(state["planned"])
        self._probability = {pid: float(p) for pid, p in state["probability"].items()}
        self._planned_samples = {pid: int(n) for pid, n in state["planned_samples"].items()}
        self._allocated = {pid: int(n) for pid, n in state["allocated"].items()}
        self._estimates = {pid: float(p) for pid, p in state["estimates"].items()}
        self._explored = list(state["explored"])
        self._forced = int(state["forced"])
        self._fallback = int(state["fallback"])


def _spread_evenly(total: int, room: Mapping[str, int]) -> dict[str, int]:
    """`total` samples over the prompts of `room`, evenly (earlier prompts take the remainder),
    none past its room; what nobody has room for stays unspent."""
    out = {pid: 0 for pid in room}
    left = total
    while left > 0:
        open_ = [pid for pid in room if out[pid] < room[pid]]
        if not open_:
            break
        share = max(1, left // len(open_))
        for pid in open_:
            give = min(share, room[pid] - out[pid], left)
            out[pid] += give
            left -= give
            if left == 0:
                break
    return out
