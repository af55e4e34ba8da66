"""`HistorySkip`: skip prompts before rollout by their history, wrapped around any sampler.

A step's prompts arrive as candidates. Each candidate is drawn with a probability π from its
record (`PromptHistory`: every earlier outcome, a prior pooled from prompts like it, its
zero-variance streak, its visits skipped since its last rollout), decided once, with a seeded
uniform draw (`derive_seed(seed, step, prompt, "skip")`, so a resumed run decides the same):

* `greso` (GRESO, Zheng et al. 2025; `adarl.algo.curation.greso_skip_probability`): π = max(q^z,
  0.01) for a prompt whose last z visits were all correct (q = `p_easy`) or all wrong
  (q = `p_hard`); 1 with no streak. After every step whose candidates had been seen before, each
  q moves by `step_size` towards a target share of such groups among the step's drawn prompts
  (`greso_adapt`; targets ⅓ and ⅔ of `target_zero_variance`, GRESO's split).
* `posterior` (adarl): π = max(π_min, 1 - P_zv), P_zv = E[p^n + (1-p)^n] the posterior
  probability that a group of n (the sampler's per-prompt allowance) comes back all equal: a
  prompt predicted to carry no signal is skipped, one predicted to mix always drawn.

In both, a prompt skipped `max_skipped_visits` times in a row is drawn at its next visit (π = 1),
so every prompt returns within `max_skipped_visits` + 1 of its visits (epochs, for a prompt source
that serves each prompt once per epoch): none is starved.

What it optimises. A prompt drawn with probability π contributes E[ĝ | drawn] = w_n(p)·∇p, so
the step's gradient estimates Σ_x π_x·w_n(p_x)·∇p_x: skipping re-weights the objective by π
unless the drawn prompts' advantages are multiplied by 1/π (`inverse_probability_weights`,
Horvitz-Thompson), in which case E[1{drawn}/π · ĝ] = w_n(p)·∇p and the declared objective is kept
exactly (`advantage_weight`). The allocator applies the factor to the groups and records every
visit with weight 1/π in the pooled priors, so the pools describe all their prompts, not only the
chosen ones.

Skipped prompts are SKIPPED: never drawn, no group. The wrapped sampler must have a rollout budget
(allocator.rollouts_per_step): it asks for more prompts until the budget is spent, so a skip never
shrinks the step. At most `max_candidates_per_step` candidates are looked at per step; past that
the wrapped sampler is told the source has no more (counted: `sampling/candidate_cap_reached`).
Everything else is the wrapped sampler's (attribute delegation, as `VarianceFilter`; its
capabilities are found through `inner`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from adarl.algo.curation import greso_adapt, greso_skip_probability, zero_variance_probability
from adarl.allocator.samplers.base import (
    InclusionWeigher,
    PromptHistory,
    PromptStatus,
    Sampler,
    capability,
    derive_seed,
    is_positive,
)

SKIP_RULES = ("greso", "posterior")
# GRESO splits its target zero-variance share: a third to all-correct groups, two thirds to
# all-wrong ones (hard prompts are likelier to change; `ray_trainer.py`).
GRESO_EASY_SHARE = 1.0 / 3.0


class HistorySkip:
    """A `Sampler` wrapper that draws each candidate with a probability set by its history."""

    steps_independent = False  # its skip/filter state spans steps (not delegated)

    def __init__(
        self,
        inner: Sampler,
        *,
        rule: str,
        seed: int,
        inverse_probability_weights: bool,
        max_skipped_visits: int | None,
        max_candidates_per_step: int,
        samples_per_prompt: int,
        min_inclusion_probability: float = 0.05,
        greso_p_easy: float = 0.5,
        greso_p_hard: float = 0.5,
        greso_target_zero_variance: float = 0.25,
        greso_step_size: float = 0.01,
        greso_min_p: float = 0.05,
        greso_max_p: float = 0.95,
        positive_threshold: float = 0.5,
    ) -> None:
        if rule not in SKIP_RULES:
            raise ValueError(f"history skip: rule must be one of {SKIP_RULES}, got {rule!r}")
        if max_skipped_visits is not None and max_skipped_visits < 0:
            raise ValueError(
                f"history skip: max_skipped_visits must be >= 0 or None, got {max_skipped_visits}"
            )
        if max_candidates_per_step < 1:
            raise ValueError(
                f"history skip: max_candidates_per_step must be >= 1, got {max_candidates_per_step}"
            )
        if not 0.0 < min_inclusion_probability <= 1.0:
            raise ValueError(
                "history skip: min_inclusion_probability must be in (0, 1], got "
                f"{min_inclusion_probability}"
            )
        if samples_per_prompt < 1:
            raise ValueError(
                f"history skip: samples_per_prompt must be >= 1, got {samples_per_prompt}"
            )
        self._inner = inner
        self.rule = rule
        self.seed = seed
        self.inverse_probability_weights = inverse_probability_weights
        self.max_skipped_visits = max_skipped_visits
        self.max_candidates_per_step = max_candidates_per_step
        self.samples_per_prompt = samples_per_prompt
        self.min_inclusion_probability = min_inclusion_probability
        self.greso_target_zero_variance = greso_target_zero_variance
        self.greso_step_size = greso_step_size
        self.greso_min_p = greso_min_p
        self.greso_max_p = greso_max_p
        self.positive_threshold = positive_threshold
        self.name = f"{rule}_skip({inner.name})"
        # Across steps: GRESO's exploration probabilities (all correct, all wrong).
        self.p_easy = greso_p_easy
        self.p_hard = greso_p_hard
        self.step = -1
        self._reset_step()

    def _reset_step(self) -> None:
        self._order: list[str] = []  # this step's candidates, skipped ones included
        self._probability: dict[str, float] = {}  # candidate -> π
        self._skipped: set[str] = set()
        self._forced = 0
        self._seen_before = 0  # candidates with history (GRESO adapts only then)
        self._cap_reached = False
        # Drawn prompts' returned labels this step: GRESO's zero-variance shares.
        self._counts: dict[str, list[int]] = {}

    # -- the Sampler protocol: the parts the wrapper changes -----------------------------------

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    @property
    def inner(self) -> Sampler:
        """The wrapped sampler: its capabilities are this wrapper's too (`capability`)."""
        return self._inner

    def start_step(
        self,
        step: int,
        prompt_ids: Sequence[str],
        history: Mapping[str, PromptHistory],
        *,
        carried_groups: int = 0,
    ) -> None:
        if self.rule == "greso" and self._seen_before:
            self._adapt()
        self._reset_step()
        self.step = step
        admitted = self._admit(prompt_ids, history)
        self._inner.start_step(
            step, admitted, {pid: history[pid] for pid in admitted}, carried_groups=carried_groups
        )
        self._check_cap()

    def add_prompts(self, prompt_ids: Sequence[str], history: Mapping[str, PromptHistory]) -> None:
        if not prompt_ids:
            self._inner.add_prompts([], history)
            return
        admitted = self._admit(prompt_ids, history)
        if admitted:  # an empty list would tell the wrapped sampler the source is exhausted
            self._inner.add_prompts(admitted, {pid: history[pid] for pid in admitted})
        self._check_cap()

    def _check_cap(self) -> None:
        if not self._cap_reached and len(self._order) >= self.max_candidates_per_step:
            self._cap_reached = True
            if self._inner.needs_prompts() > 0:
                self._inner.add_prompts([], {})  # stop asking: the step trains what it has

    def needs_prompts(self) -> int:
        wanted = self._inner.needs_prompts()
        room = self.max_candidates_per_step - len(self._order)
        return max(0, min(wanted, room))

    def done(self) -> bool:
        return self._inner.done() and self.needs_prompts() == 0

    def observe(self, prompt_id: str, rewards: Sequence[float]) -> None:
        self._inner.observe(prompt_id, rewards)
        counts = self._counts.setdefault(prompt_id, [0, 0])
        for reward in rewards:
            counts[0 if is_positive(reward, self.positive_threshold) else 1] += 1

    def verdict(self, prompt_id: str) -> PromptStatus:
        if prompt_id in self._skipped:
            return PromptStatus.SKIPPED
        return self._inner.verdict(prompt_id)

    def prompt_ids(self) -> list[str]:
        return list(self._order)

    # -- InclusionWeigher: the skip's probability times the wrapped sampler's own --------------

    def inclusion_probability(self, prompt_id: str) -> float:
        inner = capability(self._inner, InclusionWeigher)
        own = self._probability.get(prompt_id, 1.0)
        return own * (1.0 if inner is None else inner.inclusion_probability(prompt_id))

    def advantage_weight(self, prompt_id: str) -> float:
        inner = capability(self._inner, InclusionWeigher)
        own = (
            1.0 / self._probability.get(prompt_id, 1.0) if self.inverse_probability_weights else 1.0
        )
        return own * (1.0 if inner is None else inner.advantage_weight(prompt_id))

    def planned_samples(self, prompt_id: str) -> int:
        """The samples the candidate gets if drawn: the wrapped sampler's allowance."""
        return self.samples_per_prompt

    # -- the rule ------------------------------------------------------------------------------

    def probability(self, known: PromptHistory) -> tuple[float, bool]:
        """π for a candidate with record `known`, and whether the skip bound forced it."""
        if self.max_skipped_visits is not None and known.skipped_visits >= self.max_skipped_visits:
            return 1.0, True
        if self.rule == "greso":
            streak = known.zero_variance_streak
            exploration = self.p_easy if streak > 0 else self.p_hard
            return 1.0 - greso_skip_probability(abs(streak), exploration), False
        a, b = known.posterior()
        collapse = float(zero_variance_probability(a, b, samples=self.samples_per_prompt))
        return max(self.min_inclusion_probability, 1.0 - collapse), False

    def _admit(self, prompt_ids: Sequence[str], history: Mapping[str, PromptHistory]) -> list[str]:
        admitted = []
        for pid in prompt_ids:
            known = history[pid]
            self._order.append(pid)
            self._seen_before += int(known.samples > 0)
            probability, forced = self.probability(known)
            self._probability[pid] = probability
            self._forced += int(forced)
            draw = np.random.default_rng(derive_seed(self.seed, self.step, pid, "skip")).random()
            if draw < probability:
                admitted.append(pid)
            else:
                self._skipped.add(pid)
        return admitted

    def _adapt(self) -> None:
        """GRESO's update of p_easy and p_hard from the last step's drawn prompts."""
        drawn = [c for c in self._counts.values() if c[0] + c[1] > 0]
        if not drawn:
            return
        easy = sum(1 for pos, neg in drawn if neg == 0) / len(drawn)
        hard = sum(1 for pos, neg in drawn if pos == 0) / len(drawn)
        target = self.greso_target_zero_variance
        bounds = {
            "step_size": self.greso_step_size,
            "low": self.greso_min_p,
            "high": self.greso_max_p,
        }
        self.p_easy = greso_adapt(
            self.p_easy, observed_share=easy, target_share=target * GRESO_EASY_SHARE, **bounds
        )
        self.p_hard = greso_adapt(
            self.p_hard, observed_share=hard, target_share=target * (1 - GRESO_EASY_SHARE), **bounds
        )

    # -- reporting and checkpointing -----------------------------------------------------------

    def metrics(self) -> dict[str, float]:
        candidates = len(self._order)
        probabilities = list(self._probability.values())
        drawn = [p for pid, p in self._probability.items() if pid not in self._skipped]
        return {
            **self._inner.metrics(),
            "sampling/candidates": float(candidates),
            "sampling/skipped_prompts": float(len(self._skipped)),
            "sampling/skipped_fraction": len(self._skipped) / candidates if candidates else 0.0,
            "sampling/skip_forced_prompts": float(self._forced),
            "sampling/candidate_cap_reached": float(self._cap_reached),
            "sampling/inclusion_probability_mean": (
                float(np.mean(probabilities)) if probabilities else 0.0
            ),
            "sampling/inverse_probability_weight_max": (
                max(1.0 / p for p in drawn) if drawn and self.inverse_probability_weights else 1.0
            ),
            "sampling/greso_p_easy": self.p_easy,
            "sampling/greso_p_hard": self.p_hard,
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "inner": self._inner.state_dict(),
            "p_easy": self.p_easy,
            "p_hard": self.p_hard,
            "step": {
                "step": self.step,
                "order": list(self._order),
                "probability": dict(self._probability),
                "skipped": sorted(self._skipped),
                "forced": self._forced,
                "seen_before": self._seen_before,
                "cap_reached": self._cap_reached,
                "counts": {pid: list(c) for pid, c in self._counts.items()},
            },
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._inner.load_state_dict(state["inner"])
        self.p_easy = float(state["p_easy"])
        self.p_hard = float(state["p_hard"])
        step = state["step"]
        self.step = int(step["step"])
        self._order = list(step["order"])
        self._probability = {pid: float(p) for pid, p in step["probability"].items()}
        self._skipped = set(step["skipped"])
        self._forced = int(step["forced"])
        self._seen_before = int(step["seen_before"])
        self._cap_reached = bool(step["cap_reached"])
        self._counts = {pid: [int(c[0]), int(c[1])] for pid, c in step["counts"].items()}
