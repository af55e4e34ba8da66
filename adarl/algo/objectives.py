"""Per-prompt objectives J_f = E_x f(p(x)) and their weights w = f'.

Every estimator in adarl estimates, per prompt, w(p)·∇p for some weight w; the objective it
optimises is then f = ∫ w. Table (seed 000 "f-objectives", seed 001 §"Which nonlinear
objective", `shared/MATH.md` §Objectives):

    name       f(p)            w(p) = f'(p)
    linear     p               1
    log        log p           1/p                 (RAFT's implicit objective)
    arcsin     2·arcsin √p     1/√(p(1-p))         (GRPO's implicit objective, n → ∞)
    power α    p^α             α·p^(α-1)
    pass_at_k  1 - (1-p)^k     k·(1-p)^(k-1)       (pass@k of k samples; `shared/MATH.md`
                                                    §Coverage, arXiv 2511.16231)
    logit      log(p/(1-p))    1/(p(1-p))          (log p for coverage + -log(1-p) for accuracy;
                                                    docs/algorithms.md §Coverage)

`Objective.f` and `Objective.w` accept numpy arrays *or* torch tensors (so tests can
differentiate J_f through a softmax policy with autograd); numpy inputs come back as float64.
`power` takes its exponent α (`alpha`), `pass_at_k` its integer k ≥ 1 (`objective_k`, in samples:
the attempts pass@k counts). Weights of log/arcsin/power diverge at p ∈ {0, 1}: finite-sample
estimates p̂ must be clipped (`clip_pass_rate`) or Beta-smoothed (`beta_smoothed_pass_rate`)
before calling `w`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

ArrayLike = Any  # np.ndarray | torch.Tensor | float


def _as_array(p: ArrayLike) -> np.ndarray | torch.Tensor:
    """Torch tensors pass through (autograd); everything else becomes float64 numpy."""
    if isinstance(p, torch.Tensor):
        return p
    return np.asarray(p, dtype=np.float64)


def _log(p: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
    return torch.log(p) if isinstance(p, torch.Tensor) else np.log(p)


def _sqrt(p: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
    return torch.sqrt(p) if isinstance(p, torch.Tensor) else np.sqrt(p)


def _arcsin(p: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
    return torch.asin(p) if isinstance(p, torch.Tensor) else np.arcsin(p)


@dataclass(frozen=True)
class Objective:
    """A per-prompt objective f(p) and its weight w(p) = f'(p).

    Both callables map a pass rate array `p  # [...]` to an array of the same shape.
    """

    name: str
    f: Callable[[ArrayLike], ArrayLike]
    w: Callable[[ArrayLike], ArrayLike]


def _linear_f(p: ArrayLike) -> ArrayLike:
    return _as_array(p) * 1.0


def _linear_w(p: ArrayLike) -> ArrayLike:
    p = _as_array(p)
    return p * 0.0 + 1.0


def _log_f(p: ArrayLike) -> ArrayLike:
    return _log(_as_array(p))


def _log_w(p: ArrayLike) -> ArrayLike:
    return 1.0 / _as_array(p)


def _arcsin_f(p: ArrayLike) -> ArrayLike:
    return 2.0 * _arcsin(_sqrt(_as_array(p)))


def _arcsin_w(p: ArrayLike) -> ArrayLike:
    p = _as_array(p)
    return 1.0 / _sqrt(p * (1.0 - p))


def _logit_f(p: ArrayLike) -> ArrayLike:
    p = _as_array(p)
    return _log(p) - _log(1.0 - p)


def _logit_w(p: ArrayLike) -> ArrayLike:
    p = _as_array(p)
    return 1.0 / (p * (1.0 - p))


OBJECTIVES: dict[str, Objective] = {
    "linear": Objective("linear", _linear_f, _linear_w),
    "log": Objective("log", _log_f, _log_w),
    "arcsin": Objective("arcsin", _arcsin_f, _arcsin_w),
    "logit": Objective("logit", _logit_f, _logit_w),
}
"""The parameter-free objectives by name; `power` is built by `power_objective(alpha)`,
`pass_at_k` by `pass_at_k_objective(k)`."""

OBJECTIVE_NAMES: tuple[str, ...] = (*OBJECTIVES, "power", "pass_at_k")


def power_objective(alpha: float) -> Objective:
    """f(p) = p^α, w(p) = α·p^(α-1) (seed 001, "power family"; α = 1 is linear, α → 0 is log)."""
    if not (math.isfinite(alpha) and alpha > 0.0):
        raise ValueError(f"power objective needs alpha > 0 (got alpha={alpha}); try alpha=0.5")

    def f(p: ArrayLike) -> ArrayLike:
        return _as_array(p) ** alpha

    def w(p: ArrayLike) -> ArrayLike:
        return alpha * _as_array(p) ** (alpha - 1.0)

    return Objective(f"power({alpha:g})", f, w)


def check_objective_k(k: int) -> int:
    """k of pass@k as an int ≥ 1 (a bool or a non-integral number is refused)."""
    if isinstance(k, bool) or not float(k).is_integer() or int(k) < 1:
        raise ValueError(f"pass@k needs an integer k >= 1 (got k={k!r}); e.g. objective_k=8")
    return int(k)


def pass_at_k_objective(k: int) -> Objective:
    """f(p) = 1 - (1-p)^k, the probability that one of k samples is correct; w(p) = k·(1-p)^(k-1)
    (`shared/MATH.md` §Coverage; ∇pass@k = k(1-p)^(k-1)·∇p, arXiv 2511.16231). k = 1 is linear.
    Finite on [0, 1]: w(0) = k, w(1) = 0 (1 for k = 1)."""
    k = check_objective_k(k)

    def f(p: ArrayLike) -> ArrayLike:
        return 1.0 - (1.0 - _as_array(p)) ** k

    def w(p: ArrayLike) -> ArrayLike:
        return k * (1.0 - _as_array(p)) ** (k - 1)

    return Objective(f"pass@{k}", f, w)


def get_objective(name: str, *, alpha: float = 0.5, objective_k: int = 8) -> Objective:
    """The objective called `name` (one of `OBJECTIVE_NAMES`); `alpha` is used only by "power",
    `objective_k` only by "pass_at_k"."""
    if name == "power":
        return power_objective(alpha)
    if name == "pass_at_k":
        return pass_at_k_objective(objective_k)
    try:
        return OBJECTIVES[name]
    except KeyError:
        raise ValueError(
            f"unknown objective {name!r}; valid names: {', '.join(OBJECTIVE_NAMES)}"
        ) from None


def objective_weight(
    p: ArrayLike, *, objective: str, alpha: float = 0.5, objective_k: int = 8
) -> np.ndarray:
    """w(p) = f'(p) for the named objective, float64.  p: [...] pass rates in (0, 1)."""
    chosen = get_objective(objective, alpha=alpha, objective_k=objective_k)
    return np.asarray(chosen.w(np.asarray(p, np.float64)))


def objective_value(
    p: ArrayLike, *, objective: str, alpha: float = 0.5, objective_k: int = 8
) -> np.ndarray:
    """f(p) for the named objective, float64.  p: [...] pass rates in (0, 1]."""
    chosen = get_objective(objective, alpha=alpha, objective_k=objective_k)
    return np.asarray(chosen.f(np.asarray(p, np.float64)))


def selection_weight(
    p: ArrayLike, *, objective: str, alpha: float = 0.5, objective_k: int = 8
) -> np.ndarray:
    """h(p) = w(p)·p·(1-p), the coefficient of the selection correction (MATH.md §Selection).

    Closed forms, finite on all of [0, 1] so no clipping is needed: linear p(1-p), log 1-p,
    arcsin √(p(1-p)), power α·p^α·(1-p), pass_at_k k·p·(1-p)^k, logit 1. For log, h is linear in
    p, so an unbiased p̂ gives an unbiased h(p̂) (see `adarl.algo.gate.rao_blackwell_pass_rate`);
    pass@k's h is a polynomial of degree k + 1, so an unbiased p̂ leaves a bias of order
    Var(p̂)·h''(p) (reported exactly by `adarl.algo.implied.implied_weight`); logit's h is
    constant, so its correction needs no pass-rate estimate at all.  p: [...] -> [...] float64.
    """
    p = np.asarray(p, dtype=np.float64)
    if np.any(p < 0) or np.any(p > 1):
        raise ValueError("pass rates must lie in [0, 1]")
    if objective == "linear":
        return p * (1.0 - p)
    if objective == "log":
        return 1.0 - p
    if objective == "arcsin":
        return np.sqrt(p * (1.0 - p))
    if objective == "power":
        power_objective(alpha)  # validates alpha
        return alpha * p**alpha * (1.0 - p)
    if objective == "pass_at_k":
        k = check_objective_k(objective_k)
        return k * p * (1.0 - p) ** k
    if objective == "logit":
        return np.ones_like(p)
    get_objective(objective)  # raises the standard unknown-name error
    raise AssertionError("unreachable")


def clip_pass_rate(p_hat: ArrayLike, *, delta: float) -> np.ndarray:
    """p̂ clipped to [δ, 1-δ] so that w(p̂) stays finite (MATH.md §Objectives).  p_hat: [...]."""
    if not 0.0 < delta < 0.5:
        raise ValueError(f"clip delta must be in (0, 0.5) (got delta={delta}); e.g. 1e-3")
    return np.clip(np.asarray(p_hat, dtype=np.float64), delta, 1.0 - delta)


def beta_smoothed_pass_rate(
    positives: ArrayLike, total: ArrayLike, *, a: float, b: float
) -> np.ndarray:
    """Posterior-mean pass rate under a Beta(a, b) prior: (k + a) / (N + a + b).

    positives: [...] counts k; total: [...] counts N ≥ k (MATH.md §Objectives).
    """
    if not (a > 0.0 and b > 0.0):
        raise ValueError(f"Beta prior needs a > 0 and b > 0 (got a={a}, b={b}); e.g. a=b=1")
    k = np.asarray(positives, dtype=np.float64)
    n = np.asarray(total, dtype=np.float64)
    if np.any(k < 0) or np.any(k > n):
        raise ValueError("positives must satisfy 0 <= positives <= total elementwise")
    return (k + a) / (n + a + b)
