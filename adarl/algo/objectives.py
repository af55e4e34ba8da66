"""Per-prompt objectives J_f = E_x f(p(x)) and their weights w = f', one registry of them.

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

`OBJECTIVES` maps each config name (`allocator.group.objective`) to its builder, registered with
`@objective("name")` next to it; config validation, the selection correction and the objective
declaration read it, so adding an objective is one builder and its test. A builder takes the
family's parameters by keyword (`alpha`: power's exponent α; `objective_k`: pass@k's integer
k ≥ 1, in samples) and returns an `Objective`: f, w, the selection coefficient h = w·p(1-p) in
closed form, and the objective in words.

`Objective.f` and `Objective.w` accept numpy arrays *or* torch tensors (so tests can
differentiate J_f through a softmax policy with autograd); numpy inputs come back as float64.
This module never imports torch itself (a tensor's own methods do the math), so validating a
config stays light. Weights of log/arcsin/power diverge at p ∈ {0, 1}: finite-sample estimates p̂
must be clipped (`clip_pass_rate`) or Beta-smoothed (`beta_smoothed_pass_rate`) before calling
`w`.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    import torch

ArrayLike = Any  # np.ndarray | torch.Tensor | float


def _is_tensor(p: object) -> bool:
    """A torch tensor, without importing torch: a caller holding one has imported it."""
    torch_module = sys.modules.get("torch")
    return torch_module is not None and isinstance(p, torch_module.Tensor)


def _as_array(p: ArrayLike) -> np.ndarray | torch.Tensor:
    """Torch tensors pass through (autograd); everything else becomes float64 numpy."""
    if _is_tensor(p):
        return p
    return np.asarray(p, dtype=np.float64)


def _log(p: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
    return p.log() if _is_tensor(p) else np.log(p)


def _sqrt(p: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
    return p.sqrt() if _is_tensor(p) else np.sqrt(p)


def _arcsin(p: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
    return p.asin() if _is_tensor(p) else np.arcsin(p)


@dataclass(frozen=True)
class Objective:
    """A per-prompt objective f(p), its weight w(p) = f'(p) and its selection coefficient.

    `f` and `w` map a pass rate array `p  # [...]` to an array of the same shape. `h` is
    h(p) = w(p)·p·(1-p) in closed form, finite on all of [0, 1] (numpy only; see
    `selection_weight`). `text` says the objective in words with its weight, for the run's
    objective declaration (adarl/allocator/objective.py).
    """

    name: str
    f: Callable[[ArrayLike], ArrayLike]
    w: Callable[[ArrayLike], ArrayLike]
    h: Callable[[np.ndarray], np.ndarray]
    text: str


class ObjectiveBuilder(Protocol):
    def __call__(self, *, alpha: float, objective_k: int) -> Objective: ...


OBJECTIVES: dict[str, ObjectiveBuilder] = {}
"""Every objective by config name: its builder (`@objective`), called with the family's
parameters (`alpha`, `objective_k`; each family reads the one it has, if any)."""


def objective(name: str) -> Callable[[ObjectiveBuilder], ObjectiveBuilder]:
    """Register an objective builder under its config name `name`."""

    def register(build: ObjectiveBuilder) -> ObjectiveBuilder:
        if name in OBJECTIVES:
            raise ValueError(f"objective {name!r} is registered twice")
        OBJECTIVES[name] = build
        return build

    return register


def _linear_f(p: ArrayLike) -> ArrayLike:
    return _as_array(p) * 1.0


def _linear_w(p: ArrayLike) -> ArrayLike:
    p = _as_array(p)
    return p * 0.0 + 1.0


@objective("linear")
def linear_objective(*, alpha: float = 0.5, objective_k: int = 8) -> Objective:
    """f(p) = p, w = 1, h = p(1-p): the expected reward itself (RLOO's, REINFORCE's)."""
    return Objective("linear", _linear_f, _linear_w, lambda p: p * (1.0 - p), "p (weight 1)")


def _log_f(p: ArrayLike) -> ArrayLike:
    return _log(_as_array(p))


def _log_w(p: ArrayLike) -> ArrayLike:
    return 1.0 / _as_array(p)


@objective("log")
def log_objective(*, alpha: float = 0.5, objective_k: int = 8) -> Objective:
    """f(p) = log p, w = 1/p, h = 1 - p (linear in p: an unbiased p̂ gives an unbiased h(p̂))."""
    return Objective("log", _log_f, _log_w, lambda p: 1.0 - p, "log p (weight 1/p)")


def _arcsin_f(p: ArrayLike) -> ArrayLike:
    return 2.0 * _arcsin(_sqrt(_as_array(p)))


def _arcsin_w(p: ArrayLike) -> ArrayLike:
    p = _as_array(p)
    return 1.0 / _sqrt(p * (1.0 - p))


@objective("arcsin")
def arcsin_objective(*, alpha: float = 0.5, objective_k: int = 8) -> Objective:
    """f(p) = 2·arcsin √p, w = 1/√(p(1-p)), h = √(p(1-p)) (GRPO's as n → ∞, seed 001)."""
    return Objective(
        "arcsin",
        _arcsin_f,
        _arcsin_w,
        lambda p: np.sqrt(p * (1.0 - p)),
        "2·arcsin √p (weight 1/√(p(1-p)))",
    )


def _logit_f(p: ArrayLike) -> ArrayLike:
    p = _as_array(p)
    return _log(p) - _log(1.0 - p)


def _logit_w(p: ArrayLike) -> ArrayLike:
    p = _as_array(p)
    return 1.0 / (p * (1.0 - p))


@objective("logit")
def logit_objective(*, alpha: float = 0.5, objective_k: int = 8) -> Objective:
    """f(p) = log(p/(1-p)), w = 1/(p(1-p)), h = 1: its correction needs no pass-rate estimate
    (docs/algorithms.md §Coverage)."""
    return Objective(
        "logit",
        _logit_f,
        _logit_w,
        np.ones_like,
        "logit p = log p - log(1 - p) (weight 1/(p(1 - p)))",
    )


@objective("power")
def power_objective(alpha: float, *, objective_k: int = 8) -> Objective:
    """f(p) = p^α, w(p) = α·p^(α-1), h = α·p^α·(1-p) (seed 001, "power family"; α = 1 is linear,
    α → 0 is log)."""
    if not (math.isfinite(alpha) and alpha > 0.0):
        raise ValueError(f"power objective needs alpha > 0 (got alpha={alpha}); try alpha=0.5")

    def f(p: ArrayLike) -> ArrayLike:
        return _as_array(p) ** alpha

    def w(p: ArrayLike) -> ArrayLike:
        return alpha * _as_array(p) ** (alpha - 1.0)

    def h(p: np.ndarray) -> np.ndarray:
        return alpha * p**alpha * (1.0 - p)

    return Objective(f"power({alpha:g})", f, w, h, f"p^{alpha:g}")


def check_objective_k(k: int) -> int:
    """k of pass@k as an int ≥ 1 (a bool or a non-integral number is refused)."""
    if isinstance(k, bool) or not float(k).is_integer() or int(k) < 1:
        raise ValueError(f"pass@k needs an integer k >= 1 (got k={k!r}); e.g. objective_k=8")
    return int(k)


@objective("pass_at_k")
def pass_at_k_objective(objective_k: int, *, alpha: float = 0.5) -> Objective:
    """f(p) = 1 - (1-p)^k, the probability that one of k samples is correct; w(p) = k·(1-p)^(k-1),
    h = k·p·(1-p)^k (`shared/MATH.md` §Coverage; ∇pass@k = k(1-p)^(k-1)·∇p, arXiv 2511.16231).
    k = 1 is linear. Finite on [0, 1]: w(0) = k, w(1) = 0 (1 for k = 1)."""
    k = check_objective_k(objective_k)

    def f(p: ArrayLike) -> ArrayLike:
        return 1.0 - (1.0 - _as_array(p)) ** k

    def w(p: ArrayLike) -> ArrayLike:
        return k * (1.0 - _as_array(p)) ** (k - 1)

    def h(p: np.ndarray) -> np.ndarray:
        return k * p * (1.0 - p) ** k

    return Objective(f"pass@{k}", f, w, h, f"pass@{k}: 1 - (1 - p)^{k} (weight {k}(1 - p)^{k - 1})")


def get_objective(name: str, *, alpha: float = 0.5, objective_k: int = 8) -> Objective:
    """The objective registered as `name` (one of `OBJECTIVES`); `alpha` is used only by "power",
    `objective_k` only by "pass_at_k"."""
    try:
        build = OBJECTIVES[name]
    except KeyError:
        raise ValueError(
            f"unknown objective {name!r}; valid names: {', '.join(OBJECTIVES)}"
        ) from None
    return build(alpha=alpha, objective_k=objective_k)


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

    Closed forms (`Objective.h`), finite on all of [0, 1] so no clipping is needed: linear
    p(1-p), log 1-p, arcsin √(p(1-p)), power α·p^α·(1-p), pass_at_k k·p·(1-p)^k, logit 1. For log,
    h is linear in p, so an unbiased p̂ gives an unbiased h(p̂) (see
    `adarl.algo.gate.rao_blackwell_pass_rate`); pass@k's h is a polynomial of degree k + 1, so an
    unbiased p̂ leaves a bias of order Var(p̂)·h''(p) (reported exactly by
    `adarl.algo.implied.implied_weight`); logit's h is constant, so its correction needs no
    pass-rate estimate at all.  p: [...] -> [...] float64.
    """
    p = np.asarray(p, dtype=np.float64)
    if np.any(p < 0) or np.any(p > 1):
        raise ValueError("pass rates must lie in [0, 1]")
    return get_objective(objective, alpha=alpha, objective_k=objective_k).h(p)


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
