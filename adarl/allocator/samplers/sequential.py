"""`seq_pos(k)` and `seq_balance(k_pos, k_neg)`: Reinforce-Ada-Seq, streaming or in rounds.

Both sample a prompt until its stopping rule (`adarl.algo.stopping`) says RESOLVED, or until its
per-prompt cap or the step's global budget stops it (UNRESOLVED). Two dispatch modes:

**streaming** (adarl's default). Each prompt has one draw in flight; the moment it returns, the
rule is checked and, if the prompt continues, its next draw is dispatched at once: no barrier,
so prompts that resolve early free the engines for the ones that need more. A wait costs a whole
response time (the longest sample of the draw), so a draw is sized to *finish* the prompt with
high probability rather than on average. With N⁺/N⁻ the prompt's positives/negatives so far and
m = `min_additional_samples_*` (the fewest samples after which the rule could resolve):

    first draw:  c₀ = max(initial_samples, min(cap, ⌊T / B⌋))    (T: target_in_flight_samples,
                 B: prompts in the step; without T, c₀ = initial_samples, default k⁺ + k⁻)
    later draws: c  = the fewest samples with P(meet both remaining quotas) ≥ q,
                      P under the posterior predictive p ~ Beta(N⁺ + ½, N⁻ + ½)
                      (`resolve_probability`; q = chunk_confidence, default 0.9),
                 clipped to [m, max(m, ⌊growth · c_prev⌋, T - in flight)]
    and always   c ≤ cap - N and c ≤ the step budget left; a prompt for which m samples are
                 no longer affordable stops UNRESOLVED without drawing more.

So chunks grow with the evidence (after 0 positives in 8, the posterior still allows p ≈ 0.1 and
the rule asks for the rest of the cap), by at most `growth`× per wait while the engines are full,
and into every idle slot when they are not (idle slots cost no wall time). Under k⁺ = k⁻ = 2,
cap 32: a p ≈ ½ prompt usually stops after one or two draws; a p = 0 prompt draws 4, 16, 12
without spare slots (three waits; the reference's rounds take four) and 8, 24 when the engines
have room for a first draw of 8 (two waits). `chunk_growth = 0` disables speculation: every draw
is exactly m samples, the stopping sample is always a draw's last, and the number of samples
drawn is exactly the Seq rule's stopping time (negative binomial for Seq-Pos), at the cost of
more waits.

**rounds** (the reference implementation, RLHFlow/Reinforce-Ada `_generate_multi_round_adaptive_
downsampling`, as described in MATH.md): every still-active prompt gets `round_repeat` samples
per round; the next round starts only after the whole round returned (a barrier); every sample
of a round is counted, even those after the exit condition was met; after `max_rounds` rounds,
prompts not resolved are unresolved. The cap is therefore round_repeat × max_rounds.

Estimates: the allocator's pool estimate is p̃ = N⁺/N over every drawn sample, which under a
stopping rule is biased (MATH.md); `sampling/exit_index_mean` records where the rule was met.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any

from adarl.algo.stopping import (
    StopDecision,
    min_additional_samples_seq_balance,
    seq_balance_decision,
)
from adarl.allocator.samplers.base import (
    Draw,
    PromptHistory,
    PromptStatus,
    check_new_prompt_ids,
)
from adarl.allocator.samplers.ledger import PromptTally, StepLedger


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def resolve_probability(
    chunk: int, *, positives: int, negatives: int, need_pos: int, need_neg: int
) -> float:
    """P(a draw of `chunk` more samples meets both remaining quotas | the prompt's counts).

    Posterior predictive under a Jeffreys prior: p ~ Beta(N⁺ + ½, N⁻ + ½), X | p ~ Bin(chunk, p),
    P = Σ_{k = need_pos}^{chunk - need_neg} C(chunk, k)·B(k + a, chunk - k + b)/B(a, b)
    (beta-binomial). Unlike a plug-in p̂ it stays wide after a few samples, so a prompt with 1
    positive in 8 is not assumed to have p = 1/8.
    """
    low, high = need_pos, chunk - need_neg
    if low > high:
        return 0.0
    a, b = positives + 0.5, negatives + 0.5
    log_norm = _log_beta(a, b)
    total = 0.0
    for k in range(low, high + 1):
        log_comb = math.lgamma(chunk + 1) - math.lgamma(k + 1) - math.lgamma(chunk - k + 1)
        total += math.exp(log_comb + _log_beta(k + a, chunk - k + b) - log_norm)
    return min(1.0, total)


def smallest_resolving_chunk(
    *,
    positives: int,
    negatives: int,
    need_pos: int,
    need_neg: int,
    confidence: float,
    low: int,
    high: int,
) -> int:
    """The fewest samples c in [low, high] with resolve_probability(c) >= confidence (high if
    none). The probability grows with c, so bisection finds it in O(log(high - low)) tries."""

    def prob(c: int) -> float:
        return resolve_probability(
            c, positives=positives, negatives=negatives, need_pos=need_pos, need_neg=need_neg
        )

    if prob(high) < confidence:
        return high
    while low < high:
        mid = (low + high) // 2
        if prob(mid) >= confidence:
            high = mid
        else:
            low = mid + 1
    return low


class DispatchMode(str, Enum):
    STREAMING = "streaming"
    ROUNDS = "rounds"


class SequentialSampler:
    """Seq-Balance(k_pos, k_neg); Seq-Pos(k) is the special case k_neg = 0.

    Seq-Pos(k) and Seq-Balance(k, 0) are the same rule (stop at k positives), so one class with
    `seq_balance_decision` serves both; `name` says which was configured.
    """

    uses_gradient_norms = False

    def __init__(
        self,
        *,
        k_pos: int,
        k_neg: int,
        max_samples_per_prompt: int,
        max_samples_per_step: int | None = None,
        mode: DispatchMode | str = DispatchMode.STREAMING,
        initial_samples: int | None = None,
        chunk_growth: float = 4.0,
        chunk_confidence: float = 0.9,
        target_in_flight_samples: int | None = None,
        round_repeat: int = 8,
        max_rounds: int = 4,
        positive_threshold: float = 0.5,
    ) -> None:
        self.mode = DispatchMode(mode)
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
        if chunk_growth != 0 and chunk_growth < 1:
            raise ValueError(f"chunk_growth must be 0 (exact) or >= 1, got {chunk_growth}")
        self.k_pos = k_pos
        self.k_neg = k_neg
        self.name = "seq_pos" if k_neg == 0 else "seq_balance"
        self.max_samples_per_prompt = max_samples_per_prompt
        self.max_samples_per_step = max_samples_per_step
        self.initial_samples = initial_samples if initial_samples is not None else k_pos + k_neg
        if not 1 <= self.initial_samples <= max_samples_per_prompt:
            raise ValueError(
                f"initial_samples={self.initial_samples} must be in [1, max_samples_per_prompt="
                f"{max_samples_per_prompt}]"
            )
        self.chunk_growth = chunk_growth
        if target_in_flight_samples is not None and target_in_flight_samples < 1:
            raise ValueError(
                f"target_in_flight_samples must be >= 1 or None, got {target_in_flight_samples}"
            )
        self.target_in_flight_samples = target_in_flight_samples
        if not 0.0 < chunk_confidence < 1.0:
            raise ValueError(f"chunk_confidence must be in (0, 1), got {chunk_confidence}")
        self.chunk_confidence = chunk_confidence
        self.round_repeat = round_repeat
        self.max_rounds = max_rounds
        self.positive_threshold = positive_threshold
        self.step = -1
        self.rounds_done = 0
        self.unresolved_by_budget = 0
        self._ledger = StepLedger(
            budget_cap=max_samples_per_step, positive_threshold=positive_threshold
        )

    # -- the stopping rule -------------------------------------------------------------------

    def _exit_reached(self, positives: int, negatives: int) -> bool:
        return positives >= self.k_pos and negatives >= self.k_neg

    def _decision(self, tally: PromptTally) -> StopDecision:
        return seq_balance_decision(
            positives=tally.positives,
            negatives=tally.negatives,
            k_pos=self.k_pos,
            k_neg=self.k_neg,
            max_samples=self.max_samples_per_prompt,
        )

    def _min_additional(self, tally: PromptTally) -> int:
        return min_additional_samples_seq_balance(
            positives=tally.positives,
            negatives=tally.negatives,
            k_pos=self.k_pos,
            k_neg=self.k_neg,
            max_samples=self.max_samples_per_prompt,
        )

    def _streaming_chunk(self, tally: PromptTally, minimum: int, room: int) -> int:
        """The next draw of a continuing prompt (rule in the module docstring); `room` is what
        the cap and the budget still allow (>= minimum)."""
        if self.chunk_growth == 0:
            return minimum
        need_pos = max(0, self.k_pos - tally.positives)
        need_neg = max(0, self.k_neg - tally.negatives)

        ceiling = math.floor(self.chunk_growth * tally.last_chunk)
        if self.target_in_flight_samples is not None:
            ceiling = max(ceiling, self.target_in_flight_samples - self._ledger.in_flight)
        return smallest_resolving_chunk(
            positives=tally.positives,
            negatives=tally.negatives,
            need_pos=need_pos,
            need_neg=need_neg,
            confidence=self.chunk_confidence,
            low=minimum,
            high=max(minimum, min(ceiling, room)),
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
        self._ledger = StepLedger(
            budget_cap=self.max_samples_per_step, positive_threshold=self.positive_threshold
        )
        self.add_prompts(prompt_ids, history)

    def add_prompts(self, prompt_ids: Sequence[str], history: Mapping[str, PromptHistory]) -> None:
        check_new_prompt_ids(prompt_ids, self._ledger.tallies, what=self.name)
        if self.mode is DispatchMode.ROUNDS and self.rounds_done > 0 and prompt_ids:
            raise ValueError(f"{self.name} rounds mode: prompts can only join before round 1")
        self._ledger.add(prompt_ids)
        if self.mode is DispatchMode.ROUNDS:
            first = self.round_repeat
        else:
            first = self.initial_samples
            if self.target_in_flight_samples is not None and self.chunk_growth and prompt_ids:
                # Idle engines make a bigger first draw free in wall time: fill them.
                share = self.target_in_flight_samples // len(prompt_ids)
                first = max(first, min(share, self.max_samples_per_prompt))
        for pid in prompt_ids:
            self._dispatch_or_stop(pid, first, minimum=1)

    def _dispatch_or_stop(self, prompt_id: str, wanted: int, *, minimum: int) -> None:
        """Dispatch `wanted` samples if the budget still covers `minimum`; else stop the prompt."""
        left = self._ledger.budget.left
        if left is not None and left < minimum:
            self._ledger.settle(prompt_id, PromptStatus.UNRESOLVED)
            self.unresolved_by_budget += 1
            return
        self._ledger.dispatch(prompt_id, wanted)

    def needs_prompts(self) -> int:
        return 0

    def next(self) -> list[Draw]:
        return self._ledger.take_pending()

    def observe(self, prompt_id: str, rewards: Sequence[float]) -> None:
        tally = self._ledger.record(prompt_id, rewards, exit_reached=self._exit_reached)
        if self.mode is DispatchMode.STREAMING:
            self._settle_streaming(prompt_id, tally)
        elif self._ledger.in_flight == 0:
            self._close_round()

    def _settle_streaming(self, prompt_id: str, tally: PromptTally) -> None:
        decision = self._decision(tally)
        if decision is StopDecision.RESOLVED:
            self._ledger.settle(prompt_id, PromptStatus.RESOLVED)
            return
        if decision is StopDecision.UNRESOLVED:
            self._ledger.settle(prompt_id, PromptStatus.UNRESOLVED)
            return
        minimum = self._min_additional(tally)
        need_pos = max(0, self.k_pos - tally.positives)
        need_neg = max(0, self.k_neg - tally.negatives)
        if minimum < need_pos + need_neg:
            # The cap leaves fewer samples than the rule still needs: drawing them is futile.
            self._ledger.settle(prompt_id, PromptStatus.UNRESOLVED)
            return
        room = self.max_samples_per_prompt - tally.drawn
        left = self._ledger.budget.left
        if left is not None:
            room = min(room, left)
        if room < minimum:  # the budget cannot pay for a draw that could resolve the prompt
            self._ledger.settle(prompt_id, PromptStatus.UNRESOLVED)
            self.unresolved_by_budget += 1
            return
        self._ledger.dispatch(prompt_id, self._streaming_chunk(tally, minimum, room))

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

    def done(self) -> bool:
        return self._ledger.in_flight == 0 and self._ledger.open_count == 0

    def verdict(self, prompt_id: str) -> PromptStatus:
        return self._ledger.tally(prompt_id).status

    def prompt_ids(self) -> list[str]:
        return list(self._ledger.order)

    def target_groups(self) -> int | None:
        return None

    def metrics(self) -> dict[str, float]:
        exits = [t.exit_index for t in self._ledger.tallies.values() if t.exit_index is not None]
        overshoot = [
            t.drawn - t.exit_index
            for t in self._ledger.tallies.values()
            if t.exit_index is not None
        ]
        return {
            **self._ledger.metrics(),
            "sampling/unresolved_by_budget": float(self.unresolved_by_budget),
            "sampling/rounds": float(self.rounds_done),
            "sampling/exit_index_mean": sum(exits) / len(exits) if exits else 0.0,
            "sampling/overshoot_samples": float(sum(overshoot)),
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "rounds_done": self.rounds_done,
            "unresolved_by_budget": self.unresolved_by_budget,
            "ledger": self._ledger.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.step = int(state["step"])
        self.rounds_done = int(state["rounds_done"])
        self.unresolved_by_budget = int(state["unresolved_by_budget"])
        self._ledger.load_state_dict(state["ledger"])
