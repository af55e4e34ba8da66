"""`seq_pos(k)` and `seq_balance(k_pos, k_neg)`: Reinforce-Ada-Seq, streaming or in rounds.

Both sample a prompt until its stopping rule (`adarl.algo.stopping.StoppingRule`: the exit
condition, the cap, and the futility stop of a mixed pool that can no longer resolve) stops it, or
until the step's global budget does (UNRESOLVED). Two dispatch modes:

**streaming** (adarl's default). Each prompt has one draw in flight; the moment it returns, the
rule is checked and, if the prompt continues, its next draw is dispatched at once: no barrier, so
prompts that resolve early free the engines for the ones that need more. Draw sizes follow
`adarl.algo.drawing.DrawRule`: each draw's expected overshoot (samples the one-at-a-time rule
would not have drawn) is at most `max_overshoot_fraction` times the pool's useful samples, under
the posterior predictive of the prompt's outcomes (Jeffreys prior, the prompt's counts, and its
history in earlier steps as pseudo-counts). So the sampler draws about (1 + ε)× the one-at-a-time
rule's samples (ε = 0.03 by default: ≤ 1.13× at every pass rate, exactly, at cap 16), a
hopeless-looking prompt takes most of its cap in a few draws, and a p ≈ ½ prompt near its exit one
or two more. The draw law depends on the prompt alone, never on the engines' occupancy, so the
declared objective and the cost hold on any cluster (`adarl.algo.drawing.draw_law`).

**rounds** (the reference implementation, RLHFlow/Reinforce-Ada `_generate_multi_round_adaptive_
downsampling`, as described in MATH.md): every still-active prompt gets `round_repeat` samples
per round; the next round starts only after the whole round returned (a barrier); every sample
of a round is counted, even those after the exit condition was met; after `max_rounds` rounds,
prompts not resolved are unresolved (no futility stop). The cap is round_repeat × max_rounds.

**A rollout budget** (`rollouts_per_step`, streaming only): the step admits prompts, the
driver's batch first and then more as they settle (`needs_prompts`), while its committed samples
are under the budget: a settled prompt commits what it drew, an open one that has drawn d the
mean size of the run's settled pools larger than d (E[N | N > d], one pseudo-pool at the cap:
pessimistic until pools settle). Admission reads the other prompts' counts, never an admitted
prompt's own future, and an admitted prompt runs its stopping rule to the end (nothing is cut
by the budget), so every prompt's draw law, hence the declared objective, is the one without a
budget. A step spends at least the budget and about it (over it by what its last admitted
prompts draw past their reserve). This gives a sequential sampler the optimizer steps per
rollout of a uniform sampler with the same budget, on any task.

Estimates: `sequential_law()` tells the group builder how pools were drawn, so that its unbiased
pass-rate estimate (`adarl.algo.drawing.unbiased_pass_rate`) conditions on the right stopping time;
`sampling/overshoot_samples` counts the samples drawn past it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any

from adarl.algo.drawing import DrawRule
from adarl.algo.stopping import StopDecision, StoppingRule
from adarl.allocator.samplers.base import (
    Draw,
    PromptHistory,
    PromptStatus,
    SequentialLaw,
    check_new_prompt_ids,
)
from adarl.allocator.samplers.ledger import LedgerSampler, PromptTally, StepLedger


class DispatchMode(str, Enum):
    STREAMING = "streaming"
    ROUNDS = "rounds"


class SequentialSampler(LedgerSampler):
    """Seq-Balance(k_pos, k_neg); Seq-Pos(k) is the special case k_neg = 0.

    Seq-Pos(k) and Seq-Balance(k, 0) are the same rule (stop at k positives), so one class with
    one `StoppingRule` serves both; `name` says which was configured.
    """

    def __init__(
        self,
        *,
        k_pos: int,
        k_neg: int,
        max_samples_per_prompt: int,
        max_samples_per_step: int | None = None,
        mode: DispatchMode | str = DispatchMode.STREAMING,
        initial_samples: int | None = None,
        max_overshoot_fraction: float = 0.03,
        use_history: bool = True,
        round_repeat: int = 8,
        max_rounds: int = 4,
        positive_threshold: float = 0.5,
        rollouts_per_step: int | None = None,
    ) -> None:
        self.mode = DispatchMode(mode)
        if rollouts_per_step is not None:
            if self.mode is not DispatchMode.STREAMING:
                raise ValueError(
                    "a sequential rollout budget (rollouts_per_step) admits prompts as others "
                    "settle: it needs the streaming mode, not rounds"
                )
            if rollouts_per_step < 1:
                raise ValueError(f"rollouts_per_step must be >= 1 (got {rollouts_per_step})")
        if k_pos < 0 or k_neg < 0 or k_pos + k_neg < 1:
            raise ValueError(
                f"sequential sampler: need k_pos, k_neg >= 0, not both 0 "
                f"(got k_pos={k_pos}, k_neg={k_neg})"
            )
        if self.mode is DispatchMode.ROUNDS:
            if round_repeat < 1 or max_rounds < 1:
                raise ValueError(
                    f"rounds mode: round_repeat and max_rounds must be >= 1 "
                    f"(got {round_repeat}, {max_rounds})"
                )
            if max_samples_per_prompt != round_repeat * max_rounds:
                raise ValueError(
                    f"rounds mode: max_samples_per_prompt={max_samples_per_prompt} must equal "
                    f"round_repeat * max_rounds = {round_repeat * max_rounds}"
                )
        if max_samples_per_prompt < k_pos + k_neg:
            raise ValueError(
                f"max_samples_per_prompt={max_samples_per_prompt} < k_pos + k_neg = "
                f"{k_pos + k_neg}: no prompt could ever resolve; raise the cap"
            )
        self.k_pos = k_pos
        self.k_neg = k_neg
        self.name = "seq_pos" if k_neg == 0 else "seq_balance"
        self.max_samples_per_prompt = max_samples_per_prompt
        self.max_samples_per_step = max_samples_per_step
        streaming = self.mode is DispatchMode.STREAMING
        self.rule = StoppingRule(
            k_pos=k_pos, k_neg=k_neg, max_samples=max_samples_per_prompt, futility=streaming
        )
        self.draw_rule = DrawRule(
            rule=self.rule,
            max_overshoot_fraction=max_overshoot_fraction,
            initial_samples=initial_samples,
        )
        self.use_history = use_history
        self.rollouts_per_step = rollouts_per_step
        self.source_exhausted = False
        # How many of the run's settled pools had each size 0..cap: an open prompt's reserve.
        self.settled_sizes = [0] * (max_samples_per_prompt + 1)
        self.round_repeat = round_repeat
        self.max_rounds = max_rounds
        self.positive_threshold = positive_threshold
        self.step = -1
        self.rounds_done = 0
        self.unresolved_by_budget = 0
        self._history: dict[str, tuple[float, float]] = {}  # pseudo-counts of this step's prompts
        self._ledger = StepLedger(
            budget_cap=max_samples_per_step, positive_threshold=positive_threshold
        )

    @property
    def steps_independent(self) -> bool:  # type: ignore[override]
        """start_step resets the ledger, the rounds and the step's priors; a rollout budget's
        refills would ask the driver for prompts in a step it is not waiting for."""
        return self.rollouts_per_step is None

    def sequential_law(self) -> SequentialLaw:
        if self.mode is DispatchMode.ROUNDS:
            return SequentialLaw(rule=self.rule, round_size=self.round_repeat)
        return SequentialLaw(rule=self.rule, round_size=1)

    def _decision(self, tally: PromptTally) -> StopDecision:
        return self.rule.decision(tally.positives, tally.negatives)

    def _next_chunk(self, prompt_id: str, tally: PromptTally) -> int:
        return self.draw_rule.chunk(
            positives=tally.positives,
            negatives=tally.negatives,
            history=self._history.get(prompt_id, (0.0, 0.0)),
        )

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
        self.rounds_done = 0
        self.unresolved_by_budget = 0
        self.source_exhausted = False
        self._history = {}
        self._ledger = StepLedger(
            budget_cap=self.max_samples_per_step, positive_threshold=self.positive_threshold
        )
        self.add_prompts(prompt_ids, history)

    def add_prompts(self, prompt_ids: Sequence[str], history: Mapping[str, PromptHistory]) -> None:
        if not prompt_ids and self.step_started():
            self.source_exhausted = True  # the answer to needs_prompts: the source has no more
        check_new_prompt_ids(prompt_ids, self._ledger.tallies, what=self.name)
        if self.mode is DispatchMode.ROUNDS and self.rounds_done > 0 and prompt_ids:
            raise ValueError(f"{self.name} rounds mode: prompts can only join before round 1")
        self._ledger.add(prompt_ids)
        for pid in prompt_ids:
            known = history.get(pid)
            if self.use_history and known is not None:
                self._history[pid] = (known.ema_positives, known.ema_negatives)
        for pid in prompt_ids:
            if self.mode is DispatchMode.ROUNDS:
                self._dispatch_or_stop(pid, self.round_repeat, minimum=1)
            else:
                tally = self._ledger.tallies[pid]
                self._dispatch_or_stop(
                    pid, self._next_chunk(pid, tally), minimum=self.rule.min_additional(0, 0)
                )

    def _dispatch_or_stop(self, prompt_id: str, wanted: int, *, minimum: int) -> None:
        """Dispatch `wanted` samples if the budget still covers `minimum`; else stop the prompt."""
        left = self._ledger.budget.left
        if left is not None and left < minimum:
            self._ledger.settle(prompt_id, PromptStatus.UNRESOLVED)
            self.unresolved_by_budget += 1
            return
        self._ledger.dispatch(prompt_id, wanted)

    def step_started(self) -> bool:
        return bool(self._ledger.order)

    def reserve(self, drawn: int) -> float:
        """What an open prompt that has drawn `drawn` commits: E[N | N > drawn] over the run's
        settled pools, with one pseudo-pool at the cap (so at least `drawn` + 1)."""
        cap = self.max_samples_per_prompt
        if drawn >= cap:
            return float(cap)
        sizes = range(drawn + 1, cap + 1)
        count = 1 + sum(self.settled_sizes[n] for n in sizes)
        total = cap + sum(n * self.settled_sizes[n] for n in sizes)
        return total / count

    def committed(self) -> float:
        """The step's samples: drawn by settled prompts, the reserve of open ones."""
        return sum(
            t.drawn if t.status is not PromptStatus.SAMPLING else self.reserve(t.drawn)
            for t in self._ledger.tallies.values()
        )

    def needs_prompts(self) -> int:
        """With a rollout budget: the prompts whose reserves fill what is left of it."""
        if self.rollouts_per_step is None or self.source_exhausted:
            return 0
        left = self.rollouts_per_step - self.committed()
        return math.ceil(left / self.reserve(0)) if left > 0 else 0

    def done(self) -> bool:
        return super().done() and self.needs_prompts() == 0

    def next(self) -> list[Draw]:
        return self._ledger.take_pending()

    def _settled(self, tally: PromptTally) -> None:
        self.settled_sizes[tally.drawn] += 1

    def observe(self, prompt_id: str, rewards: Sequence[float]) -> None:
        # The ledger dates the rule's one-at-a-time stopping time T' (`exit_index`).
        tally = self._ledger.record(prompt_id, rewards, exit_reached=self.rule.stops)
        if self.mode is DispatchMode.STREAMING:
            self._settle_streaming(prompt_id, tally)
        elif self._ledger.in_flight == 0:
            self._close_round()

    def _settle_streaming(self, prompt_id: str, tally: PromptTally) -> None:
        decision = self._decision(tally)
        if decision is StopDecision.RESOLVED:
            self._ledger.settle(prompt_id, PromptStatus.RESOLVED)
            self._settled(tally)
            return
        if decision is StopDecision.UNRESOLVED:
            self._ledger.settle(prompt_id, PromptStatus.UNRESOLVED)
            self._settled(tally)
            return
        minimum = self.rule.min_additional(tally.positives, tally.negatives)
        left = self._ledger.budget.left
        if left is not None and left < minimum:
            # The budget cannot pay for a draw after which the prompt could resolve.
            self._ledger.settle(prompt_id, PromptStatus.UNRESOLVED)
            self._settled(tally)
            self.unresolved_by_budget += 1
            return
        self._ledger.dispatch(prompt_id, self._next_chunk(prompt_id, tally))

    def _close_round(self) -> None:
        """Rounds mode, at the barrier: decide every active prompt, start the next round."""
        self.rounds_done += 1
        for pid in self._ledger.open_prompts():
            tally = self._ledger.tallies[pid]
            decision = self._decision(tally)
            if decision is StopDecision.RESOLVED:
                self._ledger.settle(pid, PromptStatus.RESOLVED)
            elif decision is StopDecision.UNRESOLVED or self.rounds_done >= self.max_rounds:
                self._ledger.settle(pid, PromptStatus.UNRESOLVED)
            else:
                self._dispatch_or_stop(pid, self.round_repeat, minimum=1)

    # -- HintHost ------------------------------------------------------------------------------

    def prompt_allowance(self) -> int:
        return self.max_samples_per_prompt

    def fund(self, prompt_ids: Sequence[str]) -> None:
        self._ledger.budget.extend(len(prompt_ids) * self.prompt_allowance())

    def abandon(self, prompt_id: str) -> None:
        if self.mode is DispatchMode.ROUNDS:
            raise ValueError(
                "seq rounds mode cannot abandon a prompt mid-round; hints need the streaming mode"
            )
        self._ledger.abandon(prompt_id)

    # -- reporting and checkpointing -----------------------------------------------------------

    def metrics(self) -> dict[str, float]:
        stops = [t.exit_index for t in self._ledger.tallies.values() if t.exit_index is not None]
        overshoot = [
            t.drawn - t.exit_index
            for t in self._ledger.tallies.values()
            if t.exit_index is not None
        ]
        budget = {}
        if self.rollouts_per_step is not None:
            budget = {
                "sampling/rollout_budget": float(self.rollouts_per_step),
                "sampling/prompts_admitted": float(len(self._ledger.order)),
                "sampling/admission_reserve": self.reserve(0),
            }
        return {
            **self._ledger.metrics(),
            **budget,
            "sampling/unresolved_by_budget": float(self.unresolved_by_budget),
            "sampling/rounds": float(self.rounds_done),
            # T': where the one-at-a-time rule would have stopped; the rest is overshoot.
            "sampling/stop_index_mean": sum(stops) / len(stops) if stops else 0.0,
            "sampling/overshoot_samples": float(sum(overshoot)),
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "rounds_done": self.rounds_done,
            "unresolved_by_budget": self.unresolved_by_budget,
            "source_exhausted": self.source_exhausted,
            "settled_sizes": list(self.settled_sizes),
            "history": {pid: list(counts) for pid, counts in self._history.items()},
            "ledger": self._ledger.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.step = int(state["step"])
        self.rounds_done = int(state["rounds_done"])
        self.unresolved_by_budget = int(state["unresolved_by_budget"])
        self.source_exhausted = bool(state.get("source_exhausted", False))
        self.settled_sizes = [int(n) for n in state.get("settled_sizes", self.settled_sizes)]
        self._history = {pid: (float(a), float(b)) for pid, (a, b) in state["history"].items()}
        self._ledger.load_state_dict(state["ledger"])
