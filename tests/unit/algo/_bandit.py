"""Tabular softmax bandits and vectorised Monte-Carlo of per-prompt gradient estimators.

Prompt x has logits θ_x ∈ R^A, policy π_x = softmax(θ_x), known 0/1 rewards R[x, a] and pass
rate p_x = Σ_a π_x(a) R[x, a]. For a sampled action a, ∇_{θ_x} log π_x(a) = e_a - π_x, so an
estimator's gradient (1/n) Σ_j A_j ∇log π(a_j) is computed in closed form from action counts.
Exact objective gradients ∇ Σ_x f(p_x(θ)) come from autograd.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from adarl.algo.objectives import get_objective
from adarl.algo.selection import downsample_and_correct


@dataclass(frozen=True)
class Bandit:
    logits: np.ndarray  # [P, A]
    rewards: np.ndarray  # [P, A] in {0, 1}

    @property
    def probs(self) -> np.ndarray:  # [P, A]
        z = np.exp(self.logits - self.logits.max(axis=1, keepdims=True))
        return z / z.sum(axis=1, keepdims=True)

    @property
    def pass_rates(self) -> np.ndarray:  # [P]
        return (self.probs * self.rewards).sum(axis=1)

    @property
    def num_prompts(self) -> int:
        return self.logits.shape[0]

    @property
    def num_actions(self) -> int:
        return self.logits.shape[1]

    def objective_gradient(self, objective: str, alpha: float = 0.5) -> np.ndarray:  # [P, A]
        """∇_θ Σ_x f(p_x(θ)) by autograd."""
        theta = torch.tensor(self.logits, dtype=torch.float64, requires_grad=True)
        p = (torch.softmax(theta, dim=1) * torch.tensor(self.rewards, dtype=torch.float64)).sum(1)
        (grad,) = torch.autograd.grad(get_objective(objective, alpha=alpha).f(p).sum(), theta)
        return grad.numpy()

    def pass_rate_gradient(self) -> np.ndarray:  # [P, A], row x = ∇_{θ_x} p_x
        return self.objective_gradient("linear")

    def weighted_gradient(self, weights: np.ndarray) -> np.ndarray:  # [P] -> [P, A]
        """Σ_x w_x ∇p_x: what an estimator with implied weights w_x should average to."""
        return weights[:, None] * self.pass_rate_gradient()

    def sample_actions(self, prompt: int, shape: tuple[int, ...], rng: np.random.Generator):
        cdf = np.cumsum(self.probs[prompt])
        cdf[-1] = 1.0
        return np.searchsorted(cdf, rng.random(shape), side="right")  # shape, int

    def positive_action_gradient_norm(self) -> np.ndarray:  # [P]
        """G_x = E[‖∇_θ log π(a)‖ | r = 1] = Σ_{a: R=1} π(a)‖e_a - π‖ / p (GVM's Lipschitz term)."""
        norms = np.linalg.norm(np.eye(self.num_actions)[None] - self.probs[:, None, :], axis=2)
        return (self.probs * self.rewards * norms).sum(axis=1) / self.pass_rates


def estimator_gradients(
    bandit: Bandit,
    prompt: int,
    actions: np.ndarray,  # [T, M] sampled actions
    advantages: np.ndarray,  # [T, M] advantage of each sample (0 for samples not kept)
    normalizer: float | np.ndarray,  # n, or [T]
) -> np.ndarray:  # [T, A]
    """Per-trial (1/n) Σ_j A_j (e_{a_j} - π_x)."""
    trials = actions.shape[0]
    num_actions = bandit.num_actions
    flat = (np.arange(trials)[:, None] * num_actions + actions).ravel()
    weighted_counts = np.bincount(
        flat, weights=advantages.ravel(), minlength=trials * num_actions
    ).reshape(trials, num_actions)
    total = advantages.sum(axis=1, keepdims=True)
    return (weighted_counts - total * bandit.probs[prompt]) / np.reshape(normalizer, (-1, 1))


def uniform_group_gradients(
    bandit: Bandit,
    *,
    group_sizes: np.ndarray,  # [P]
    advantage_fn: Callable[[np.ndarray, int], np.ndarray],  # (rewards [n], prompt) -> [n]
    trials: int,
    rng: np.random.Generator,
) -> np.ndarray:  # [T, P, A], per-prompt estimate (1/n_x) Σ_j A_j ∇log π(a_j)
    """Uniform groups; `advantage_fn` runs once per distinct reward row actually sampled."""
    out = np.zeros((trials, bandit.num_prompts, bandit.num_actions))
    for x in range(bandit.num_prompts):
        n = int(group_sizes[x])
        actions = bandit.sample_actions(x, (trials, n), rng)
        rewards = bandit.rewards[x][actions]
        rows, inverse = np.unique(rewards, axis=0, return_inverse=True)
        table = np.stack([advantage_fn(row, x) for row in rows])
        out[:, x] = estimator_gradients(bandit, x, actions, table[inverse.ravel()], n)
    return out


@dataclass(frozen=True)
class Pools:
    """Simulated sequential pools for one prompt: actions/labels of the first `cap` draws."""

    actions: np.ndarray  # [T, cap]
    labels: np.ndarray  # [T, cap] bool
    sizes: np.ndarray  # [T] N at stopping
    resolved: np.ndarray  # [T] bool


def simulate_pools(
    bandit: Bandit,
    prompt: int,
    *,
    k_pos: int,
    k_neg: int,
    max_samples: int,
    round_size: int,
    trials: int,
    rng: np.random.Generator,
) -> Pools:
    """Sample in rounds until ≥k⁺ positives and ≥k⁻ negatives or the cap (independent of DP)."""
    actions = bandit.sample_actions(prompt, (trials, max_samples), rng)
    labels = bandit.rewards[prompt][actions].astype(bool)
    drawn = np.arange(1, max_samples + 1)
    positives = np.cumsum(labels, axis=1)
    done = (positives >= k_pos) & (drawn - positives >= k_neg)
    checkpoint = (drawn % round_size == 0) | (drawn == max_samples)
    done &= checkpoint
    resolved = done.any(axis=1)
    sizes = np.where(resolved, done.argmax(axis=1) + 1, max_samples)
    return Pools(actions=actions, labels=labels, sizes=sizes, resolved=resolved)


def selected_group_gradients(
    bandit: Bandit,
    prompt: int,
    pools: Pools,
    *,
    group_size: int,
    pass_rate: float | Callable[[int, int], float] | None,
    **selection: object,
) -> np.ndarray:  # [T, A]
    """Downsample (earliest order) + correct each simulated pool with the real
    `downsample_and_correct`, called once per distinct (N, N⁺, resolved); the kept mask of every
    trial follows the same first-come rule and is checked against the function's indices.
    `pass_rate`: None (pool mean), the true p, or a function of the pool's (N, N⁺)."""
    cap = int(pools.sizes.max())  # columns past every stopping time are never in a pool
    pools = Pools(pools.actions[:, :cap], pools.labels[:, :cap], pools.sizes, pools.resolved)
    within = np.arange(cap)[None, :] < pools.sizes[:, None]
    labels = pools.labels & within
    negatives = ~pools.labels & within
    n_pos_pool = labels.sum(axis=1)
    pos_rank = np.cumsum(labels, axis=1)  # 1-based rank among positives
    neg_rank = np.cumsum(negatives, axis=1)
    keys = (pools.sizes * (cap + 1) + n_pos_pool) * 2 + pools.resolved  # one int per cell
    codes, inverse = np.unique(keys, return_inverse=True)
    cells = np.stack([codes // 2 // (cap + 1), codes // 2 % (cap + 1), codes % 2], axis=1)
    kept_pos = np.zeros(len(cells), dtype=np.int64)
    kept_neg = np.zeros(len(cells), dtype=np.int64)
    a_pos = np.zeros(len(cells))
    a_neg = np.zeros(len(cells))
    for c, (size, positives, resolved) in enumerate(cells):
        t = int(np.flatnonzero(inverse == c)[0])  # a real pool of this cell, in sampling order
        pool = pools.labels[t, :size].astype(np.float64)
        kept, adv = downsample_and_correct(
            pool,
            resolved=bool(resolved),
            group_size=group_size,
            pass_rate=pass_rate(int(size), int(positives)) if callable(pass_rate) else pass_rate,
            order="earliest",
            **selection,  # type: ignore[arg-type]
        )
        is_pos = pool[kept] > 0.5
        kept_pos[c], kept_neg[c] = int(is_pos.sum()), int((~is_pos).sum())
        if kept_pos[c]:
            a_pos[c] = adv[is_pos][0]
        if kept_neg[c]:
            a_neg[c] = adv[~is_pos][0]
        mask = (labels[t] & (pos_rank[t] <= kept_pos[c])) | (
            negatives[t] & (neg_rank[t] <= kept_neg[c])
        )
        assert np.array_equal(np.flatnonzero(mask), kept), "first-come rule mismatch"
    keep_pos = labels & (pos_rank <= kept_pos[inverse][:, None])
    keep_neg = negatives & (neg_rank <= kept_neg[inverse][:, None])
    advantages = keep_pos * a_pos[inverse][:, None] + keep_neg * a_neg[inverse][:, None]
    return estimator_gradients(bandit, prompt, pools.actions, advantages, group_size)


def within_standard_errors(
    samples: np.ndarray, expected: np.ndarray, *, sigmas: float = 3.0, slack: float = 0.0
) -> tuple[bool, np.ndarray]:
    """(ok, z) for |mean - expected| ≤ sigmas·SE + slack per component; samples [T, ...].

    z = |mean - expected| / SE is returned for the message."""
    mean = samples.mean(axis=0)
    se = samples.std(axis=0, ddof=1) / np.sqrt(samples.shape[0])
    gap = np.abs(mean - expected)
    return bool(np.all(gap <= sigmas * se + slack)), gap / (se + 1e-300)
