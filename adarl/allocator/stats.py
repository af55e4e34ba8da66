"""Per-prompt statistics the allocator keeps across steps: each prompt's whole record.

For every prompt ever sampled: lifetime sample and positive counts, the steps it was seen, an
exponential moving average of its counts (Reinforce-Ada-Est, paper v3 Algorithm 1):

    N_tot ← λ·N_tot + n_t,   N_pos ← λ·N_pos + k_t,   p̂ = (N_pos + a) / (N_tot + a + b)

(λ = `ema_decay`, applied once per step the prompt is sampled; Beta(a, b) prior, so an unseen
prompt has p̂ = a / (a + b)), and the last per-prompt gradient norm the learner reported (GVM).

History as a posterior (curation, adarl/allocator/curation.py). Every earlier outcome of a prompt
counts, discounted by its age in optimizer steps (weight 2^(-age / `half_life_steps`),
`adarl.algo.curation.decay_factor`; None = no discount): the prompt's pass rate is

    p ~ Beta(a₀ + Σ d·positives, b₀ + Σ d·negatives)

with Beta(a₀, b₀) pooled from prompts like it: the prompts of its pool (the task's `difficulty`
field, or the whole task), fitted by the method of moments on their visits' pool rates
(`adarl.algo.curation.pooled_beta_prior`), so that a prompt never seen is not judged blind. A
visit enters its pool's moments with weight 1/π, π the probability the prompt was chosen, so
that the moments estimate the whole pool, not only the prompts the allocator preferred. Also
kept: the prompt's latest pool rate, its streak of zero-variance visits (all correct or all
wrong, GRESO's history) and its visits skipped since its last rollout.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from adarl.algo.curation import decay_factor, pooled_beta_prior
from adarl.allocator.samplers.base import PromptHistory

TASK_POOL = "task"  # the pool every prompt also belongs to: the fallback prior
UNIFORM_PRIOR = (1.0, 1.0)  # the prior before any prompt of the pool (or task) was seen


@dataclass
class PromptStats:
    samples: int = 0
    positives: int = 0
    steps_seen: int = 0
    last_step: int = -1
    ema_samples: float = 0.0
    ema_positives: float = 0.0
    grad_norm: float | None = None
    grad_norm_step: int = -1
    # Age-discounted counts as of `last_step` (discounted further when read).
    decayed_positives: float = 0.0
    decayed_negatives: float = 0.0
    last_pass_rate: float | None = None  # the latest visit's pool rate k/n
    # Consecutive latest visits whose pools were all equal: +z all correct, -z all wrong.
    zero_variance_streak: int = 0
    skipped_visits: int = 0  # visits skipped since the last rollout
    # The latest RECENT_LABELS sample labels, oldest first ("1" positive, "0" negative).
    recent_labels: str = ""


RECENT_LABELS = 32  # labels kept per prompt for estimates over its latest rollouts


@dataclass
class PoolMoments:
    """Age-discounted moment sums of one pool's visits (`pooled_beta_prior`'s inputs), as of
    `last_step`."""

    weight: float = 0.0
    mean_sum: float = 0.0
    square_sum: float = 0.0
    noise_sum: float = 0.0
    last_step: int = -1

    def discount(self, factor: float) -> None:
        self.weight *= factor
        self.mean_sum *= factor
        self.square_sum *= factor
        self.noise_sum *= factor


class PromptStatsStore:
    def __init__(
        self,
        *,
        ema_decay: float = 0.9,
        prior_alpha: float = 1.0,
        prior_beta: float = 1.0,
        half_life_steps: float | None = None,
        min_pool_weight: float = 4.0,
        max_prior_strength: float = 50.0,
    ) -> None:
        """`half_life_steps`: the age discount of the posterior counts and pool moments;
        `min_pool_weight`: a pool's prior is used once its visits weigh this much (before, the
        task's; before any visit, Beta(1, 1)); `max_prior_strength`: the most pseudo-samples a
        pooled prior may count (a + b), and never more than the pool's visit weight."""
        if not 0.0 <= ema_decay <= 1.0:
            raise ValueError(f"ema_decay must be in [0, 1], got {ema_decay}")
        if prior_alpha <= 0 or prior_beta <= 0:
            raise ValueError(
                f"prior_alpha and prior_beta must be > 0, got {prior_alpha}, {prior_beta}"
            )
        if half_life_steps is not None and not half_life_steps > 0:
            raise ValueError(f"half_life_steps must be > 0 or None, got {half_life_steps}")
        if not min_pool_weight > 0 or not max_prior_strength > 0:
            raise ValueError(
                f"min_pool_weight and max_prior_strength must be > 0, got {min_pool_weight}, "
                f"{max_prior_strength}"
            )
        self.ema_decay = ema_decay
        self.prior_alpha = prior_alpha
        self.prior_beta = prior_beta
        self.half_life_steps = half_life_steps
        self.min_pool_weight = min_pool_weight
        self.max_prior_strength = max_prior_strength
        self._stats: dict[str, PromptStats] = {}
        self._pools: dict[str, PoolMoments] = {}

    def __len__(self) -> int:
        return len(self._stats)

    def get(self, prompt_id: str) -> PromptStats | None:
        return self._stats.get(prompt_id)

    def _decay(self, age: int) -> float:
        return decay_factor(max(age, 0), half_life_steps=self.half_life_steps)

    def record_step(
        self,
        prompt_id: str,
        *,
        step: int,
        samples: int,
        positives: int,
        pool: str | None = None,
        visit_weight: float = 1.0,
        labels: str | None = None,
    ) -> None:
        """Fold one step's pool of `samples` draws with `positives` positives into the stats;
        with `pool`, into that pool's (and the task's) moments too, weighted by `visit_weight`
        (1/π for a prompt chosen with probability π). `labels`: the pool's labels in sampling
        order ("1"/"0"), kept among the prompt's latest `RECENT_LABELS`."""
        if samples <= 0:
            return
        if labels is not None and (len(labels) != samples or labels.count("1") != positives):
            raise ValueError(
                f"record_step({prompt_id!r}): labels {labels!r} disagree with samples={samples}, "
                f"positives={positives}"
            )
        if not visit_weight > 0:
            raise ValueError(f"visit_weight must be > 0, got {visit_weight}")
        stats = self._stats.setdefault(prompt_id, PromptStats())
        factor = self._decay(step - stats.last_step) if stats.last_step >= 0 else 1.0
        stats.decayed_positives = factor * stats.decayed_positives + positives
        stats.decayed_negatives = factor * stats.decayed_negatives + (samples - positives)
        stats.samples += samples
        stats.positives += positives
        stats.steps_seen += 1
        stats.last_step = step
        stats.ema_samples = self.ema_decay * stats.ema_samples + samples
        stats.ema_positives = self.ema_decay * stats.ema_positives + positives
        rate = positives / samples
        stats.last_pass_rate = rate
        kind = 1 if positives == samples else (-1 if positives == 0 else 0)
        same = kind != 0 and (stats.zero_variance_streak > 0) == (kind > 0)
        stats.zero_variance_streak = (stats.zero_variance_streak + kind) if same else kind
        stats.skipped_visits = 0
        if labels is not None:
            stats.recent_labels = (stats.recent_labels + labels)[-RECENT_LABELS:]
        if pool is not None:
            noise = rate * (1.0 - rate) / (samples - 1) if samples > 1 else 0.0
            for key in {pool, TASK_POOL}:
                moments = self._pools.setdefault(key, PoolMoments())
                if moments.last_step >= 0:
                    moments.discount(self._decay(step - moments.last_step))
                moments.last_step = max(moments.last_step, step)
                moments.weight += visit_weight
                moments.mean_sum += visit_weight * rate
                moments.square_sum += visit_weight * rate * rate
                moments.noise_sum += visit_weight * noise

    def record_skip(self, prompt_id: str) -> None:
        """A visit of the prompt skipped before rollout (its counts are unchanged)."""
        self._stats.setdefault(prompt_id, PromptStats()).skipped_visits += 1

    def pooled_prior(self, pool: str | None, *, step: int) -> tuple[float, float]:
        """Beta(a₀, b₀) pooled from `pool`'s visits (module docstring): the task's while the
        pool weighs less than `min_pool_weight`, Beta(1, 1) while the task does too."""
        for key in (pool, TASK_POOL) if pool is not None else (TASK_POOL,):
            moments = self._pools.get(key)
            if moments is None:
                continue
            factor = self._decay(step - moments.last_step)
            weight = moments.weight * factor
            if weight < self.min_pool_weight:
                continue
            return pooled_beta_prior(
                weight=weight,
                mean_sum=moments.mean_sum * factor,
                square_sum=moments.square_sum * factor,
                noise_sum=moments.noise_sum * factor,
                max_concentration=min(self.max_prior_strength, weight),
            )
        return UNIFORM_PRIOR

    def report_gradient_norms(self, norms: Mapping[str, float], *, step: int) -> None:
        for prompt_id, norm in norms.items():
            if not norm >= 0.0:  # also rejects NaN
                raise ValueError(
                    f"gradient norm of prompt {prompt_id!r} must be a finite number >= 0, "
                    f"got {norm}"
                )
            stats = self._stats.setdefault(prompt_id, PromptStats())
            stats.grad_norm = float(norm)
            stats.grad_norm_step = step

    def pass_rate(self, prompt_id: str) -> float:
        stats = self._stats.get(prompt_id)
        pos, tot = (stats.ema_positives, stats.ema_samples) if stats else (0.0, 0.0)
        return (pos + self.prior_alpha) / (tot + self.prior_alpha + self.prior_beta)

    def history(
        self,
        prompt_ids: Iterable[str],
        *,
        step: int | None = None,
        pools: Mapping[str, str | None] | None = None,
    ) -> dict[str, PromptHistory]:
        """What is known of each prompt. With `step`, the posterior fields too: counts discounted
        to `step` and the prior pooled from the prompt's pool (`pools[pid]`; None: the task)."""
        out: dict[str, PromptHistory] = {}
        priors: dict[str | None, tuple[float, float]] = {}
        for pid in prompt_ids:
            stats = self._stats.get(pid)
            prior, factor = UNIFORM_PRIOR, 1.0
            if step is not None:
                pool = pools.get(pid) if pools is not None else None
                if pool not in priors:
                    priors[pool] = self.pooled_prior(pool, step=step)
                prior = priors[pool]
                if stats is not None and stats.last_step >= 0:
                    factor = self._decay(step - stats.last_step)
            out[pid] = PromptHistory(
                pass_rate=self.pass_rate(pid),
                samples=stats.samples if stats else 0,
                grad_norm=stats.grad_norm if stats else None,
                ema_positives=stats.ema_positives if stats else 0.0,
                ema_negatives=stats.ema_samples - stats.ema_positives if stats else 0.0,
                last_step=stats.last_step if stats else -1,
                prior_alpha=prior[0],
                prior_beta=prior[1],
                decayed_positives=factor * stats.decayed_positives if stats else 0.0,
                decayed_negatives=factor * stats.decayed_negatives if stats else 0.0,
                last_pass_rate=stats.last_pass_rate if stats else None,
                zero_variance_streak=stats.zero_variance_streak if stats else 0,
                skipped_visits=stats.skipped_visits if stats else 0,
                recent_labels=stats.recent_labels if stats else "",
            )
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "stats": {pid: asdict(s) for pid, s in self._stats.items()},
            "pools": {key: asdict(m) for key, m in self._pools.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._stats = {pid: PromptStats(**s) for pid, s in state["stats"].items()}
        self._pools = {key: PoolMoments(**m) for key, m in state.get("pools", {}).items()}
