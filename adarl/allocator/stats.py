"""Per-prompt statistics the allocator keeps across steps.

For every prompt ever sampled: lifetime sample and positive counts, the steps it was seen, an
exponential moving average of its counts (Reinforce-Ada-Est, paper v3 Algorithm 1):

    N_tot ← λ·N_tot + n_t,   N_pos ← λ·N_pos + k_t,   p̂ = (N_pos + a) / (N_tot + a + b)

(λ = `ema_decay`, applied once per step the prompt is sampled; Beta(a, b) prior, so an unseen
prompt has p̂ = a / (a + b)), and the last per-prompt gradient norm the learner reported (GVM).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from adarl.allocator.samplers.base import PromptHistory


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


class PromptStatsStore:
    def __init__(
        self, *, ema_decay: float = 0.9, prior_alpha: float = 1.0, prior_beta: float = 1.0
    ) -> None:
        if not 0.0 <= ema_decay <= 1.0:
            raise ValueError(f"ema_decay must be in [0, 1], got {ema_decay}")
        if prior_alpha <= 0 or prior_beta <= 0:
            raise ValueError(
                f"prior_alpha and prior_beta must be > 0, got {prior_alpha}, {prior_beta}"
            )
        self.ema_decay = ema_decay
        self.prior_alpha = prior_alpha
        self.prior_beta = prior_beta
        self._stats: dict[str, PromptStats] = {}

    def __len__(self) -> int:
        return len(self._stats)

    def get(self, prompt_id: str) -> PromptStats | None:
        return self._stats.get(prompt_id)

    def record_step(self, prompt_id: str, *, step: int, samples: int, positives: int) -> None:
        """Fold one step's pool of `samples` draws with `positives` positives into the stats."""
        if samples <= 0:
            return
        stats = self._stats.setdefault(prompt_id, PromptStats())
        stats.samples += samples
        stats.positives += positives
        stats.steps_seen += 1
        stats.last_step = step
        stats.ema_samples = self.ema_decay * stats.ema_samples + samples
        stats.ema_positives = self.ema_decay * stats.ema_positives + positives

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

    def history(self, prompt_ids: Iterable[str]) -> dict[str, PromptHistory]:
        out: dict[str, PromptHistory] = {}
        for pid in prompt_ids:
            stats = self._stats.get(pid)
            out[pid] = PromptHistory(
                pass_rate=self.pass_rate(pid),
                samples=stats.samples if stats else 0,
                grad_norm=stats.grad_norm if stats else None,
                ema_positives=stats.ema_positives if stats else 0.0,
                ema_negatives=stats.ema_samples - stats.ema_positives if stats else 0.0,
                last_step=stats.last_step if stats else -1,
            )
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"stats": {pid: asdict(s) for pid, s in self._stats.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._stats = {pid: PromptStats(**s) for pid, s in state["stats"].items()}
