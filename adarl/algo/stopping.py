"""Sequential stopping rules of Reinforce-Ada-Seq, as pure decisions on counts.

A prompt is sampled in chunks; after each chunk the sampler asks the rule whether the prompt is
done. Rules (seed 001 §"Reinforce-Ada-Seq", `shared/MATH.md` §Stopping rules):

* Seq-Pos(k): stop once k positives were seen. Without a cap N ~ NegBin, E[N] = k/p.
* Seq-Balance(k⁺, k⁻): stop once k⁺ positives and k⁻ negatives were seen;
  E[N] grows like 1/(p(1-p)).

Both carry a per-prompt cap `max_samples`: a prompt that reaches the cap without meeting the exit
condition is UNRESOLVED. The exit condition is checked before the cap, so a prompt whose last
allowed sample meets the condition is RESOLVED. Counts above the cap are an error: the cap is
never exceeded, and `min_additional_samples_*` never asks for more than the cap leaves.

Released code (RLHFlow/Reinforce-Ada): balanced exit is "≥ n//2 positives and ≥ n - n//2
negatives", positive-focused exit is "≥ 1 positive"; rounds of 8 samples, up to 4 rounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from functools import cached_property

import numpy as np


class StopDecision(str, Enum):
    CONTINUE = "continue"  # exit condition not met and the cap leaves room: sample more
    RESOLVED = "resolved"  # exit condition met
    UNRESOLVED = "unresolved"  # cap reached without the exit condition


def _check_counts(*, positives: int, total: int, max_samples: int) -> None:
    if positives < 0 or total < 0 or positives > total:
        raise ValueError(
            f"counts must satisfy 0 <= positives <= total (got positives={positives}, "
            f"total={total})"
        )
    if total > max_samples:
        raise ValueError(
            f"total={total} exceeds max_samples={max_samples}: the sampler overshot the cap; "
            "size chunks with min_additional_samples_*/the remaining budget"
        )


def seq_pos_decision(*, positives: int, total: int, k: int, max_samples: int) -> StopDecision:
    """Seq-Pos(k): RESOLVED iff N⁺ ≥ k; else UNRESOLVED iff N ≥ max_samples; else CONTINUE."""
    if k < 1:
        raise ValueError(f"Seq-Pos needs k >= 1 positives (got k={k})")
    if max_samples < k:
        raise ValueError(f"max_samples={max_samples} < k={k}: Seq-Pos could never resolve")
    _check_counts(positives=positives, total=total, max_samples=max_samples)
    if positives >= k:
        return StopDecision.RESOLVED
    if total >= max_samples:
        return StopDecision.UNRESOLVED
    return StopDecision.CONTINUE


def seq_balance_decision(
    *, positives: int, negatives: int, k_pos: int, k_neg: int, max_samples: int
) -> StopDecision:
    """Seq-Balance(k⁺, k⁻): RESOLVED iff N⁺ ≥ k⁺ and N⁻ ≥ k⁻; else UNRESOLVED iff
    N⁺ + N⁻ ≥ max_samples; else CONTINUE."""
    if k_pos < 0 or k_neg < 0 or k_pos + k_neg < 1:
        raise ValueError(f"Seq-Balance needs k_pos, k_neg >= 0, not both 0 (got {k_pos}, {k_neg})")
    if max_samples < k_pos + k_neg:
        raise ValueError(
            f"max_samples={max_samples} < k_pos + k_neg={k_pos + k_neg}: Seq-Balance could "
            "never resolve"
        )
    if negatives < 0:
        raise ValueError(f"negatives must be >= 0 (got {negatives})")
    total = positives + negatives
    _check_counts(positives=positives, total=total, max_samples=max_samples)
    if positives >= k_pos and negatives >= k_neg:
        return StopDecision.RESOLVED
    if total >= max_samples:
        return StopDecision.UNRESOLVED
    return StopDecision.CONTINUE


def min_additional_samples_seq_pos(*, positives: int, total: int, k: int, max_samples: int) -> int:
    """Fewest further samples after which Seq-Pos(k) could resolve: min(k - N⁺, cap - N).

    0 when the rule already stopped (resolved or unresolved). A sampler that draws this many
    never overshoots the stopping time nor the cap.
    """
    decision = seq_pos_decision(positives=positives, total=total, k=k, max_samples=max_samples)
    if decision is not StopDecision.CONTINUE:
        return 0
    return min(k - positives, max_samples - total)


def min_additional_samples_seq_balance(
    *, positives: int, negatives: int, k_pos: int, k_neg: int, max_samples: int
) -> int:
    """Fewest further samples after which Seq-Balance could resolve:
    min(max(0, k⁺ - N⁺) + max(0, k⁻ - N⁻), cap - N); 0 when the rule already stopped."""
    decision = seq_balance_decision(
        positives=positives, negatives=negatives, k_pos=k_pos, k_neg=k_neg, max_samples=max_samples
    )
    if decision is not StopDecision.CONTINUE:
        return 0
    missing = max(0, k_pos - positives) + max(0, k_neg - negatives)
    return min(missing, max_samples - positives - negatives)


@dataclass(frozen=True)
class StoppingRule:
    """Seq-Balance(k⁺, k⁻) with a cap, as one object (Seq-Pos(k) is k⁻ = 0), with a futility stop.

    Checked after every sample, the rule stops a prompt at the first N where

        RESOLVED     N⁺ ≥ k⁺ and N⁻ ≥ k⁻                                   (the exit condition)
        UNRESOLVED   N = cap, or
                     the pool is mixed (N⁺ ≥ 1, N⁻ ≥ 1) and cannot resolve any more:
                     max(0, k⁺ - N⁺) + max(0, k⁻ - N⁻) > cap - N              (futility)

    The futility stop applies only to mixed pools: their gate is already open, and further samples
    could only reshuffle the kept split. A pool with one label keeps sampling to the cap, because
    one more sample of the other label opens its gate. That is what makes the log objective's
    gate exactly 1 - (1-p)^(cap-1) with an unbiased pass-rate estimate
    (`adarl.algo.drawing`, docs/algorithms.md). The stopping time of this rule, sample by sample,
    is the "one-at-a-time" reference that chunked sampling is measured against.
    """

    k_pos: int
    k_neg: int
    max_samples: int
    futility: bool = True

    def __post_init__(self) -> None:
        if self.k_pos < 0 or self.k_neg < 0 or self.k_pos + self.k_neg < 1:
            raise ValueError(
                f"stopping rule needs k_pos, k_neg >= 0, not both 0 (got {self.k_pos}, "
                f"{self.k_neg})"
            )
        if self.max_samples < self.k_pos + self.k_neg:
            raise ValueError(
                f"max_samples={self.max_samples} < k_pos + k_neg={self.k_pos + self.k_neg}: the "
                "rule could never resolve"
            )

    def missing(self, positives: int, negatives: int) -> int:
        """Samples the exit condition still needs at the least."""
        return max(0, self.k_pos - positives) + max(0, self.k_neg - negatives)

    def decision(self, positives: int, negatives: int) -> StopDecision:
        total = positives + negatives
        _check_counts(positives=positives, total=total, max_samples=self.max_samples)
        if positives >= self.k_pos and negatives >= self.k_neg:
            return StopDecision.RESOLVED
        if total >= self.max_samples:
            return StopDecision.UNRESOLVED
        if (
            self.futility
            and positives >= 1
            and negatives >= 1
            and self.missing(positives, negatives) > self.max_samples - total
        ):
            return StopDecision.UNRESOLVED
        return StopDecision.CONTINUE

    def stops(self, positives: int, negatives: int) -> bool:
        return self.decision(positives, negatives) is not StopDecision.CONTINUE

    def min_additional(self, positives: int, negatives: int) -> int:
        """Fewest further samples after which the exit condition could hold (capped by the
        room left); 0 once the rule stopped."""
        if self.stops(positives, negatives):
            return 0
        total = positives + negatives
        return max(1, min(self.missing(positives, negatives), self.max_samples - total))

    def min_additional_to_any_stop(self, positives: int, negatives: int) -> int:
        """Fewest further samples after which the rule can have stopped by any outcome (the exit,
        the cap, or futility once the pool turns mixed): at most `min_additional`; 0 once the
        rule stopped."""
        room = self.max_samples - positives - negatives
        if self.stops(positives, negatives):
            return 0
        for extra in range(1, room + 1):
            if any(self.stops(positives + j, negatives + extra - j) for j in range(extra + 1)):
                return extra
        return room

    def stop_index(self, labels: Sequence[bool]) -> int | None:
        """The rule's stopping time on `labels` taken one at a time in this order: the 1-based
        index of the sample after which it stops, or None if it has not stopped by the end."""
        positives = negatives = 0
        if self.stops(0, 0):
            return 0
        for index, label in enumerate(labels, start=1):
            if label:
                positives += 1
            else:
                negatives += 1
            if self.stops(positives, negatives):
                return index
        return None

    def stop_grid(self) -> tuple[np.ndarray, np.ndarray]:
        """(stop, resolved), both bool [cap + 1, cap + 1] indexed [N, N⁺] (N⁺ ≤ N); read-only."""
        return self._grids

    @cached_property
    def _grids(self) -> tuple[np.ndarray, np.ndarray]:
        cap = self.max_samples
        stop = np.zeros((cap + 1, cap + 1), dtype=bool)
        resolved = np.zeros((cap + 1, cap + 1), dtype=bool)
        for n in range(cap + 1):
            for pos in range(n + 1):
                decision = self.decision(pos, n - pos)
                stop[n, pos] = decision is not StopDecision.CONTINUE
                resolved[n, pos] = decision is StopDecision.RESOLVED
        stop.setflags(write=False)
        resolved.setflags(write=False)
        return stop, resolved


def seq_pos_unbiased_pass_rate(*, positives: int, total: int) -> float:
    """(k - 1)/(N - 1): the unbiased pass-rate estimate when sampling one at a time stopped at
    exactly the k-th positive (k ≥ 2). The naive N⁺/N = k/N is biased upwards (MATH.md)."""
    if positives < 2 or total < positives:
        raise ValueError(
            f"(k-1)/(N-1) needs k >= 2 positives and N >= k (got k={positives}, N={total})"
        )
    return (positives - 1) / (total - 1)
