"""The hint stage of the allocator (SAGE): collapse is an allocator verdict, a hint is a re-roll.

One prompt, one step:

    sample x (level 0) ─► its pool shows no positive after `collapse_after_samples` samples, or
        when its sampling ended (uniform: the one draw; streaming: a cap or futility stop)
        ─► collapsed: the schedule picks a level ℓ (sage: 1, 2, 3 on the 1st, 2nd, 3rd collapse
           of the step; sage_light: the prompt's stored level; off: never) ─► the sampler
           abandons x's current condition (queued draws refunded) ─► HintRequest(x, ℓ)
        ─► the driver asks the HintGenerator ─► Hint(x, ℓ, text)
        ─► the sampler gets a fresh prompt "x@h<ℓ>" for the condition (x, h): its own pool, cap
           and stopping rule; its requests carry h, so rollouts, log-probs and the PPO ratio are
           all taken on the hinted prompt (on-policy for (x, h))
        ─► if (x, h) collapses too, the next level; the trained group is the last condition's
           (one hint per prompt per step: mixing hints lowers the expected gate)

The group keeps x's prompt id, its rollouts carry the hint level, and its correction uses the
hinted pool's pass rate. Per-prompt statistics (the EMA pass rate) record only unhinted pools:
they estimate the deployment condition. Evaluation never sees a hint (adarl.evaluation.Evaluator).
A plain object of the `BudgetAllocator`; its state is part of the allocator's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from adarl.algo.curation import beta_moment
from adarl.allocator.samplers.base import PromptHistory, is_positive
from adarl.config.hints import HintsConfig
from adarl.hints.collapse import CollapseRule, build_collapse_rule
from adarl.hints.schedule import HintSchedule, build_hint_schedule
from adarl.hints.types import Hint, HintRequest
from adarl.types import ScoredRollout, TaskExample

HINT_MARK = "@h"  # the sampler-side id of prompt x under hint level ℓ is f"{x}@h{ℓ}"


@dataclass
class _Condition:
    prompt_id: str  # the task prompt x
    level: int  # 0 = no hint
    text: str | None  # appended to the prompt (None at level 0)


@dataclass
class HintStage:
    schedule: HintSchedule
    collapse: CollapseRule
    positive_threshold: float = 0.5
    # A step grants a hint only if its hinted conditions, each counted at the most it may draw
    # until it ends (then at what it drew), stay within this fraction of the unhinted samples
    # dispatched so far; None = no limit.
    max_extra_rollouts_fraction: float | None = None
    # The most one condition may draw in a step (the sampler's `prompt_allowance`; set by the
    # allocator).
    samples_per_condition: int = 0
    # Hints ahead of need: a coming prompt whose P(collapse) reaches this gets its hints written
    # while the step before it trains (`predicted_collapses`).
    write_ahead_min_collapse_probability: float = 0.5
    # -- per step --
    step: int = -1
    conditions: dict[str, _Condition] = field(default_factory=dict)  # sampler id -> condition
    current: dict[str, str] = field(default_factory=dict)  # x -> its current sampler id
    attempts: dict[str, int] = field(default_factory=dict)  # x -> hints asked this step
    abandoned: set[str] = field(default_factory=set)  # sampler ids given up on
    waiting: dict[str, HintRequest] = field(default_factory=dict)  # x -> request in the air
    unsent: list[HintRequest] = field(default_factory=list)  # requests not yet handed out
    # -- counters of the step --
    requested_by_level: dict[int, int] = field(default_factory=dict)
    samples_unhinted: int = 0
    samples_hinted: int = 0
    committed: int = 0  # hinted samples drawn or still allowed (see max_extra_rollouts_fraction)
    settled: set[str] = field(default_factory=set)  # hinted conditions whose cost is final
    refused_by_budget: int = 0

    def start_step(self, step: int, prompt_ids: list[str]) -> None:
        self.step = step
        self.conditions = {pid: _Condition(pid, 0, None) for pid in prompt_ids}
        self.current = {pid: pid for pid in prompt_ids}
        self.attempts, self.abandoned, self.waiting, self.unsent = {}, set(), {}, []
        self.requested_by_level = {}
        self.samples_unhinted = self.samples_hinted = self.refused_by_budget = 0
        self.committed, self.settled = 0, set()

    def add_prompts(self, prompt_ids: list[str]) -> None:
        for pid in prompt_ids:
            self.conditions[pid] = _Condition(pid, 0, None)
            self.current[pid] = pid

    def collapse_probabilities(self, histories: Mapping[str, PromptHistory]) -> dict[str, float]:
        """P(the unhinted condition collapses) for each prompt of `histories` (prompt id ->
        record), from its record:

            P(collapse) = E[(1-p)^m] = B(a, b + m) / B(a, b)

        with p ~ Beta(a, b) the prompt's posterior (pooled prior plus discounted record,
        adarl/allocator/stats.py) and m = min(collapse.after_samples, samples_per_condition),
        the samples without a positive that declare a collapse (a sampler that stops a prompt
        earlier, a futility stop, makes it collapse at least this often)."""
        m = float(min(self.collapse.after_samples, max(1, self.samples_per_condition)))
        out = {}
        for pid, history in histories.items():
            alpha, beta = history.posterior()
            out[pid] = float(beta_moment(alpha, beta, x=0.0, y=m))
        return out

    def predicted_collapses(self, histories: Mapping[str, PromptHistory]) -> list[str]:
        """The coming prompts (`histories`, in step order) whose hints are worth writing ahead:
        P(collapse) ≥ write_ahead_min_collapse_probability (`collapse_probabilities`).

        Every such prompt, not only as many as a hint budget can grant: writing ahead never
        changes which collapsed prompts get a hint (the budget goes in arrival order, as without
        it), so a hint is ready for whichever of them are granted."""
        probability = self.collapse_probabilities(histories)
        threshold = self.write_ahead_min_collapse_probability
        return [pid for pid in histories if probability[pid] >= threshold]

    def condition(self, sampler_id: str) -> _Condition:
        return self.conditions[sampler_id]

    def record_dispatch(self, sampler_id: str, num_samples: int) -> None:
        if self.conditions[sampler_id].level:
            self.samples_hinted += num_samples
        else:
            self.samples_unhinted += num_samples

    def after_observe(
        self,
        sampler_id: str,
        pool: list[ScoredRollout],
        example: TaskExample,
        *,
        sampling_ended: bool,
    ) -> bool:
        """Check the condition's pool after one of its draws returned; True if it collapsed and a
        hint was asked for (the caller then abandons `sampler_id` in the sampler).

        Collapsed: no positive after `collapse.after_samples` samples, or no positive when the
        sampler ended the condition's sampling earlier (a uniform draw, a futility stop)."""
        cond = self.conditions[sampler_id]
        x = cond.prompt_id
        if cond.level and sampling_ended:
            self._settle(sampler_id, drawn=len(pool))
        if self.current.get(x) != sampler_id or x in self.waiting:
            return False
        positives = sum(is_positive(s.reward, self.positive_threshold) for s in pool)
        if positives or not (
            sampling_ended or self.collapse.collapsed(samples=len(pool), positives=positives)
        ):
            return False
        attempt = self.attempts.get(x, 0) + 1
        level = self.schedule.level(x, attempt)
        if level is None:
            return False
        fraction = self.max_extra_rollouts_fraction
        if fraction is not None and (
            self.committed + self.samples_per_condition > fraction * self.samples_unhinted
        ):
            self.refused_by_budget += 1  # asked again after its next draw, if still collapsed
            return False
        if cond.level:
            self._settle(sampler_id, drawn=len(pool))  # abandoned: it draws no more
        self.committed += self.samples_per_condition
        self.attempts[x] = attempt
        self.abandoned.add(sampler_id)
        request = HintRequest(prompt_id=x, example=example, level=level, step=self.step)
        self.waiting[x] = request
        self.unsent.append(request)
        self.requested_by_level[level] = self.requested_by_level.get(level, 0) + 1
        return True

    def _settle(self, sampler_id: str, *, drawn: int) -> None:
        """A hinted condition ended (or was abandoned): its cost is what it drew."""
        if sampler_id not in self.settled:
            self.settled.add(sampler_id)
            self.committed -= self.samples_per_condition - drawn

    def take_requests(self) -> list[HintRequest]:
        requests, self.unsent = self.unsent, []
        return requests

    def on_hint(self, hint: Hint) -> str | None:
        """A hint arrived: the sampler id of the new condition (x, h), or None if unusable."""
        request = self.waiting.pop(hint.prompt_id, None)
        if request is None or request.level != hint.level:
            raise ValueError(
                f"hint for {hint.prompt_id!r} at level {hint.level} answers no open request; "
                "pass each HintRequest's Hint exactly once"
            )
        if hint.text is None:
            self.committed -= self.samples_per_condition  # nothing will be drawn for it
            return None  # counted by the generator (sampling/hints_unavailable)
        sampler_id = f"{hint.prompt_id}{HINT_MARK}{hint.level}"
        if sampler_id in self.conditions:  # a level given twice in one step (sage_light)
            sampler_id = f"{sampler_id}.{self.attempts[hint.prompt_id]}"
        self.conditions[sampler_id] = _Condition(hint.prompt_id, hint.level, hint.text)
        self.current[hint.prompt_id] = sampler_id
        return sampler_id

    def busy(self) -> bool:
        """Hints asked for and not yet answered: the step cannot end."""
        return bool(self.waiting)

    def finish(self, pools: Mapping[str, list[ScoredRollout]]) -> dict[str, float]:
        """After the step: tell the schedule each prompt's accuracy at every level it was rolled
        at (in order, unhinted first), and the step's hint metrics."""
        accuracy: dict[str, float] = {}  # sampler id -> its pool's pass rate
        for sid, cond in self.conditions.items():  # insertion order: the order rolled
            pool = pools.get(sid)
            if pool:
                positives = sum(is_positive(s.reward, self.positive_threshold) for s in pool)
                accuracy[sid] = positives / len(pool)
                self.schedule.observe(cond.prompt_id, level=cond.level, accuracy=accuracy[sid])
        rescued = zero_before = zero_after = 0
        for x, sid in self.current.items():
            zero_before += accuracy.get(x) == 0.0
            final = accuracy.get(sid)  # the trained condition's pass rate
            zero_after += final is None or final == 0.0
            if sid != x and final is not None and 0.0 < final < 1.0:
                rescued += 1  # the hinted pool has both labels: its gate opened
        count = max(1, len(self.current))
        metrics = {
            f"sampling/hint_activations/level{level}": float(self.requested_by_level.get(level, 0))
            for level in (1, 2, 3)
        }
        metrics |= {
            "sampling/hinted_rollouts": float(self.samples_hinted),
            "sampling/hints_refused_by_budget": float(self.refused_by_budget),
            "signal/prompts_rescued_by_hints": float(rescued),
            "signal/zero_pass_share_unhinted": zero_before / count,
            "signal/zero_pass_share_after_hints": zero_after / count,
            **self.schedule.metrics(),
        }
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {
            "schedule": self.schedule.state_dict(),
            "step": self.step,
            "conditions": {k: (c.prompt_id, c.level, c.text) for k, c in self.conditions.items()},
            "current": dict(self.current),
            "attempts": dict(self.attempts),
            "abandoned": sorted(self.abandoned),
            "waiting": dict(self.waiting),
            "unsent": list(self.unsent),
            "requested_by_level": dict(self.requested_by_level),
            "samples": (self.samples_unhinted, self.samples_hinted, self.refused_by_budget),
            "committed": (self.committed, sorted(self.settled)),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.schedule.load_state_dict(dict(state["schedule"]))
        self.step = int(state["step"])
        self.conditions = {k: _Condition(*v) for k, v in state["conditions"].items()}
        self.current = dict(state["current"])
        self.attempts = dict(state["attempts"])
        self.abandoned = set(state["abandoned"])
        self.waiting = dict(state["waiting"])
        # The driver that asked for the open hints is gone: ask for all of them again.
        self.unsent = list(self.waiting.values())
        self.requested_by_level = dict(state["requested_by_level"])
        self.samples_unhinted, self.samples_hinted, self.refused_by_budget = state["samples"]
        committed, settled = state["committed"]
        self.committed, self.settled = int(committed), set(settled)


def build_hint_stage(config: HintsConfig, *, positive_threshold: float) -> HintStage | None:
    """The allocator's hint stage `hints` describes; None when `hints.schedule` is off."""
    if config.schedule == "off":
        return None
    return HintStage(
        schedule=build_hint_schedule(config),
        collapse=build_collapse_rule(config),
        positive_threshold=positive_threshold,
        max_extra_rollouts_fraction=config.max_extra_rollouts_fraction,
        write_ahead_min_collapse_probability=config.write_ahead_min_collapse_probability,
    )
