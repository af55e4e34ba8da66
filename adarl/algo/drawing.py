"""How many samples a prompt draws at once, what that costs, and the exact law of the result.

Sequential sampling (Seq-Pos / Seq-Balance, `adarl.algo.stopping.StoppingRule`) is defined one
sample at a time: draw, check the rule, draw again. Run that way it wastes nothing but waits a
whole response time per sample. A streaming sampler therefore draws *chunks*: c samples at once,
then checks. A chunk that contains the rule's stopping time t* (counted from now) draws c - t*
samples the one-at-a-time rule would not have drawn: the overshoot. Rollouts are compute, so adarl
prices chunks explicitly (seed 001 §"decouple the sampling budget"; MATH.md §Stopping rules):

**The draw rule** (`DrawRule.chunk`). With counts (N⁺, N⁻), N = N⁺ + N⁻, and
ε = `max_overshoot_fraction`,

    c = max{ c ∈ [m, cap - N] : E[(c - t*)⁺] ≤ ε · (N + E[min(c, t*)]) }

i.e. a draw's expected waste is at most ε times the samples of the pool that are useful: the N
already drawn (none was wasted, or the rule would have stopped) plus the draw's own useful ones;
m is the fewest samples after which the rule could have stopped by any outcome: resolved, or
sooner by futility once the pool turns mixed (`StoppingRule.min_additional_to_any_stop`).
Expectations are under the posterior predictive of the prompt's outcomes: a prior over p on a grid
(`PassRatePrior`, Jeffreys by default) updated with the prompt's counts and its history. Only the
draw in which the rule stops wastes anything, so under the model the sampler draws about
(1 + ε)× the one-at-a-time rule's samples (the exact ratio by p: `draw_law`; ≤ 1.15 at the
default ε). Because the bound grows with the pool, a prompt deep into its cap can take large
draws: a prompt that has shown 0 positives in 8 takes most of the rest at once, one that needs
its last positive at p ≈ 0.05 takes a few large draws instead of dribbling one sample per wait,
and a p ≈ ½ prompt near its exit takes one or two. ε = 0 draws only samples that cannot
overshoot; ε = inf draws the whole cap at once.

The rule depends on the prompt's own outcomes and history only, never on the engines' occupancy or
on other prompts, so the law of a prompt's pool is a property of (p, rule, ε, prior, history):
`draw_law` computes it exactly, `expected_samples_drawn` its mean. Whatever the chunks, the first
T' samples of the pool in sampling order are distributed exactly as the one-at-a-time rule's pool
(samples are i.i.d. and chunk sizes depend only on earlier labels): `unbiased_pass_rate`
conditions on them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

import numpy as np

from adarl.algo.gate import rao_blackwell_pass_rate
from adarl.algo.stopping import StopDecision, StoppingRule

_TOLERANCE = 1e-12
_GRID_POINTS = 41  # pass rates 0, 0.025, ..., 1 (exact 0 and 1 included: hopeless prompts exist)


@dataclass(frozen=True)
class PassRatePrior:
    """A discrete prior over a prompt's pass rate: weights on a grid of p values.

    The draw rule predicts a prompt's next outcomes from this prior updated with the prompt's own
    counts and, when it was seen in earlier steps, its history as pseudo-counts (a pool of N⁺
    positives and N⁻ negatives has likelihood p^N⁺(1-p)^N⁻ whatever rule stopped it).
    `jeffreys()`, the default, is uninformative: exact 0 and 1 are on the grid, so a prompt
    that has shown only one label can be recognised as hopeless.
    """

    grid: tuple[float, ...]
    weights: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.grid) != len(self.weights) or not self.grid:
            raise ValueError("PassRatePrior needs one weight per grid point")
        if any(w < 0 for w in self.weights) or not math.isclose(sum(self.weights), 1.0):
            raise ValueError("PassRatePrior weights must be >= 0 and sum to 1")

    @staticmethod
    def jeffreys(points: int = _GRID_POINTS) -> PassRatePrior:
        """Beta(½, ½) on an even grid of `points` pass rates (endpoints included): the mass of
        each cell [p - h/2, p + h/2] ∩ [0, 1] goes to its point."""
        grid = np.linspace(0.0, 1.0, points)
        half = 0.5 / (points - 1)
        edges = np.clip(np.concatenate([grid - half, [1.0]]), 0.0, 1.0)
        cdf = (2.0 / math.pi) * np.arcsin(np.sqrt(edges))  # Beta(½, ½) CDF
        weights = np.diff(cdf)
        return PassRatePrior(tuple(grid.tolist()), tuple((weights / weights.sum()).tolist()))

    def posterior(
        self, *, positives: float, negatives: float
    ) -> np.ndarray:  # [G] weights given counts (pseudo-counts may be fractional)
        log_prior, log_up, log_down, support = self._log_terms
        log_post = log_prior.copy()
        if positives > 0:
            log_post += positives * log_up
        if negatives > 0:
            log_post += negatives * log_down
        log_post -= log_post[support].max()
        post = np.exp(log_post) * support
        return post / post.sum()

    @cached_property
    def _log_terms(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """log prior, log p, log(1 - p) on the grid (-inf at the ends), and the prior's support;
        computed once (the draw rule asks for a posterior at every draw)."""
        grid = np.asarray(self.grid)
        weights = np.asarray(self.weights)
        with np.errstate(divide="ignore"):
            return np.log(np.maximum(weights, 1e-300)), np.log(grid), np.log1p(-grid), weights > 0

    def mean(self) -> float:
        return float(np.dot(self.grid, self.weights))


def stop_time_distribution(
    rule: StoppingRule,
    *,
    positives: int,
    negatives: int,
    pass_rates: np.ndarray,  # [G] candidate pass rates
    weights: np.ndarray | None = None,  # [G] their probabilities (None: one rate, weight 1)
    horizon: int | None = None,
) -> np.ndarray:  # [H + 1] float64, H = min(horizon, R), R = cap - N
    """q[t] = Pr[the rule stops exactly t samples from now], t = 0..H, from counts (N⁺, N⁻), when
    the pass rate is `pass_rates[g]` with probability `weights[g]` (labels i.i.d. given it).

    Over the whole room (H = R) q sums to 1, because the rule always stops at the cap.

        q[t] = Σ_g weights[g] Σ_i C[t, i] · p_g^i (1 - p_g)^(t - i)

    with C[t, i] the number of label sequences from (N⁺, N⁻) that first stop after t samples
    with i of them positive (`_first_stops`: a property of the rule and the counts alone, cached,
    so the per-call work is one O(G·H²) contraction).
    """
    rates = np.atleast_1d(np.asarray(pass_rates, dtype=np.float64))  # [G]
    mix = np.ones(1) if weights is None else np.asarray(weights, dtype=np.float64)
    room = rule.max_samples - positives - negatives
    if horizon is not None:
        room = min(room, horizon)
    if rule.stops(positives, negatives):
        q = np.zeros(room + 1)
        q[0] = 1.0
        return q
    paths = _first_stops(rule, positives, negatives, room)  # [H + 1, H + 1]: C[t, i]
    steps = np.arange(room + 1)
    up = rates[:, None] ** steps  # [G, i]
    down = (1.0 - rates)[:, None] ** steps  # [G, j]
    failures = np.clip(steps[:, None] - steps[None, :], 0, None)  # [t, i]: t - i (0 off the law)
    per_rate = np.einsum("ti,gi,gti->gt", paths, up, down[:, failures])  # [G, t]
    return mix @ per_rate


@lru_cache(maxsize=4_096)
def _first_stops(rule: StoppingRule, positives: int, negatives: int, room: int) -> np.ndarray:
    """C[t, i] (see `stop_time_distribution`), t, i = 0..room; read-only."""
    grid, _ = rule.stop_grid()  # [N, N⁺]
    total = positives + negatives
    paths = np.zeros((room + 1, room + 1))
    active = np.zeros(room + 1)  # label sequences still sampling, by new positives
    active[0] = 1.0
    for t in range(1, room + 1):
        moved = np.zeros(room + 1)
        moved[1 : t + 1] += active[:t]
        moved[:t] += active[:t]
        stop = grid[total + t, positives : positives + t + 1]  # [t + 1]: i new positives
        paths[t, : t + 1][stop] = moved[: t + 1][stop]
        moved[: t + 1][stop] = 0.0
        active = moved
    paths.setflags(write=False)
    return paths


def expected_overshoot(q: np.ndarray) -> np.ndarray:  # [R + 1]: index c
    """E[(c - t*)⁺] for every chunk size c = 0..R, given q[t] = Pr[t* = t]."""
    t = np.arange(q.size)
    stopped = np.cumsum(q)  # Pr[t* ≤ c]
    stopped_t = np.cumsum(t * q)  # E[t*; t* ≤ c]
    return np.maximum(t * stopped - stopped_t, 0.0)


@dataclass(frozen=True)
class DrawRule:
    """The chunk rule of the module docstring for one stopping rule, one price and one prior."""

    rule: StoppingRule
    max_overshoot_fraction: float  # ε: a chunk's expected waste ≤ ε × its expected useful samples
    initial_samples: int | None = None  # floor of the first draw (None: the rule's minimum)
    prior: PassRatePrior = field(default_factory=PassRatePrior.jeffreys)

    def __post_init__(self) -> None:
        if not self.max_overshoot_fraction >= 0:
            raise ValueError(
                "max_overshoot_fraction must be >= 0 (0: never overshoot; inf: the whole cap at "
                f"once), got {self.max_overshoot_fraction}"
            )
        if self.initial_samples is not None and not (
            1 <= self.initial_samples <= self.rule.max_samples
        ):
            raise ValueError(
                f"initial_samples={self.initial_samples} must be in [1, max_samples="
                f"{self.rule.max_samples}]"
            )

    def chunk(
        self,
        *,
        positives: int,
        negatives: int,
        history: tuple[float, float] = (0.0, 0.0),
    ) -> int:
        """Samples to draw next for a prompt that continues.

        `history`: pseudo-counts (positives, negatives) from the prompt's earlier steps, added to
        its counts in the posterior (they sharpen the prediction, never the stopping rule).
        """
        if self.rule.stops(positives, negatives):
            raise ValueError(f"chunk: the rule already stopped at (N⁺={positives}, N⁻={negatives})")
        return _chunk(self, positives, negatives, (float(history[0]), float(history[1])))

    def _chunk(self, positives: int, negatives: int, history: tuple[float, float]) -> int:
        room = self.rule.max_samples - positives - negatives
        # Never past the earliest draw at which the rule could stop, by its exit or another way
        # (futility once the pool turns mixed), so ε = 0 never overshoots.
        floor = self.rule.min_additional_to_any_stop(positives, negatives)
        if positives + negatives == 0 and self.initial_samples is not None:
            floor = max(floor, min(self.initial_samples, room))
        epsilon = self.max_overshoot_fraction
        if math.isinf(epsilon):
            return room
        weights = self.prior.posterior(
            positives=positives + history[0], negatives=negatives + history[1]
        )
        keep = weights > 1e-15  # grid points the counts have ruled out cost nothing
        # waste(c) ≤ ε·useful with useful = the pool's samples so far plus this draw's useful
        # ones, N + c - waste(c). waste is convex in c (its increments are Pr[t* ≤ c]) and the
        # bound linear, so the affordable sizes are an interval [0, c_max]: look ahead by
        # doubling horizons until the bound breaks or the room is used up.
        drawn = positives + negatives
        horizon = max(floor, 8)
        while True:
            waste = expected_overshoot(
                stop_time_distribution(
                    self.rule,
                    positives=positives,
                    negatives=negatives,
                    pass_rates=np.asarray(self.prior.grid)[keep],
                    weights=weights[keep],
                    horizon=horizon,
                )
            )
            bound = epsilon / (1.0 + epsilon) * (drawn + np.arange(waste.size))
            broken = np.flatnonzero(waste[floor:] > bound[floor:] + _TOLERANCE)
            if broken.size:
                return max(floor, floor + int(broken[0]) - 1)
            if horizon >= room:
                return room
            horizon = min(room, 2 * horizon)


@lru_cache(maxsize=65_536)
def _chunk(rule: DrawRule, positives: int, negatives: int, history: tuple[float, float]) -> int:
    # A pure function of its arguments: prompts in the same state share one computation.
    return rule._chunk(positives, negatives, history)


@dataclass(frozen=True)
class DrawCell:
    """One outcome of a prompt's draws, with its probability (`draw_law`)."""

    probability: float
    total: int  # N: samples drawn
    positives: int  # N⁺ in the whole pool
    stop_index: int  # T': the one-at-a-time rule's stopping time within the pool (≤ N)
    stop_positives: int  # positives among the first T' samples
    resolved: bool  # the exit condition was met
    draws: int  # chunks drawn (sequential waits)


def draw_law(
    p: float, draw_rule: DrawRule, *, history: tuple[float, float] = (0.0, 0.0)
) -> list[DrawCell]:
    """The exact law of a prompt's pool under `draw_rule` when its pass rate is p (and its
    history pseudo-counts are `history`, as the sampler passes them to `DrawRule.chunk`).

    Dynamic programming over chunk boundaries (state: the counts) and, inside each chunk, over
    its samples (tracking where the one-at-a-time rule stopped). Cells with equal outcomes are
    merged.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"pass rate p must be in [0, 1] (got {p})")
    rule = draw_rule.rule
    cells: dict[tuple[int, int, int, int, int], float] = defaultdict(float)
    frontier: dict[tuple[int, int, int], float] = {(0, 0, 0): 1.0}  # (N⁺, N⁻, draws) -> mass
    while frontier:
        next_frontier: dict[tuple[int, int, int], float] = defaultdict(float)
        for (pos, neg, draws), mass in frontier.items():
            size = draw_rule.chunk(positives=pos, negatives=neg, history=history)
            # Inside the chunk: (new positives, stop index or -1, positives at the stop).
            inside: dict[tuple[int, int, int], float] = {(0, -1, -1): mass}
            for t in range(1, size + 1):
                stepped: dict[tuple[int, int, int], float] = defaultdict(float)
                for (new_pos, stop_at, stop_pos), m in inside.items():
                    for label, weight in ((1, p), (0, 1.0 - p)):
                        if weight == 0.0:
                            continue
                        a, b = pos + new_pos + label, neg + (t - new_pos - label)
                        at, ap = stop_at, stop_pos
                        if at < 0 and rule.stops(a, b):
                            at, ap = pos + neg + t, a
                        stepped[(new_pos + label, at, ap)] += m * weight
                inside = stepped
            for (new_pos, stop_at, stop_pos), m in inside.items():
                a, b = pos + new_pos, neg + size - new_pos
                if stop_at >= 0:
                    cells[(a + b, a, stop_at, stop_pos, draws + 1)] += m
                else:
                    next_frontier[(a, b, draws + 1)] += m
        frontier = next_frontier
    return [
        DrawCell(
            probability=prob,
            total=total,
            positives=positives,
            stop_index=stop_at,
            stop_positives=stop_pos,
            resolved=rule.decision(stop_pos, stop_at - stop_pos) is StopDecision.RESOLVED,
            draws=draws,
        )
        for (total, positives, stop_at, stop_pos, draws), prob in cells.items()
    ]


def expected_samples_drawn(
    p: float, draw_rule: DrawRule, *, history: tuple[float, float] = (0.0, 0.0)
) -> float:
    """E[N] under the draw rule (compare `adarl.algo.gate.terminal_counts(...)` for the
    one-at-a-time rule's E[T'])."""
    return float(sum(c.probability * c.total for c in draw_law(p, draw_rule, history=history)))


def expected_draws(
    p: float, draw_rule: DrawRule, *, history: tuple[float, float] = (0.0, 0.0)
) -> float:
    """E[number of chunks]: the sequential waits one prompt causes."""
    return float(sum(c.probability * c.draws for c in draw_law(p, draw_rule, history=history)))


def unbiased_pass_rate(
    labels: Sequence[bool], rule: StoppingRule, *, round_size: int = 1
) -> float | None:
    """An exactly unbiased pass-rate estimate of a pool drawn under `rule`.

    `labels`: the pool's positive flags in sampling order.

    * Chunked draws (round_size 1, any `DrawRule`): with T' the rule's one-at-a-time stopping
      time on the labels (`StoppingRule.stop_index`), the first T' labels are distributed as the
      one-at-a-time rule's pool, so p̂ = Pr[r₁ = 1 | T', N⁺_{T'}] (Rao–Blackwell,
      `adarl.algo.gate.rao_blackwell_pass_rate`) has E[p̂] = p; the overshoot is left out.
    * Rounds of `round_size` (the reference code: the rule checked after each round, no futility
      stop, every sample of a round counted): the pool stops at a round's end, so
      p̂ = Pr[r₁ = 1 | N, N⁺] under that law.

    None when the pool stopped before the rule did (e.g. the step's budget ran out): no unbiased
    estimate exists then, and callers fall back to the pool mean (and count it).
    """
    if round_size == 1:
        stop = rule.stop_index(labels)
        if stop is None:
            return None
        kept = labels[:stop]
    else:
        kept = labels
    try:
        return rao_blackwell_pass_rate(
            positives=int(sum(bool(x) for x in kept)),
            total=len(kept),
            k_pos=rule.k_pos,
            k_neg=rule.k_neg,
            max_samples=rule.max_samples,
            round_size=round_size,
            futility=rule.futility and round_size == 1,
        )
    except ValueError:  # not a stopping point of the rounds' law (e.g. cut by the budget)
        if round_size == 1:
            raise
        return None
