"""Verifiers by name (the names tasks put in `TaskExample.task`), and the pool builder.

| name | verifier |
|---|---|
| `arithmetic` | `ExactMatchVerifier` (the built-in arithmetic task) |
| `exact_match` | `ExactMatchVerifier` |
| `math` | `MathVerifier` (math-verify, `\\boxed{...}` answers) |
| `code` | `CodeVerifier` (candidate programs in the subprocess sandbox) |
| `reasoning_gym` | `ReasoningGymVerifier` (adarl/reward/reasoning_gym.py: `score_answer`) |

`register_verifier(name, factory)` adds a task-specific verifier: `factory(config)` receives the
whole `RewardConfig`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from adarl.config.reward import RewardConfig
from adarl.reward.arithmetic_work import ArithmeticWorkVerifier
from adarl.reward.base import Verifier
from adarl.reward.code_verifier import CodeVerifier
from adarl.reward.exact import ExactMatchVerifier
from adarl.reward.math_verifier import MathVerifier
from adarl.reward.pool import RewardPool

VerifierFactory = Callable[[RewardConfig], Verifier]


def _exact_match(config: RewardConfig) -> Verifier:
    if config.exact_match.check_arithmetic_work:
        return ArithmeticWorkVerifier(end_markers=tuple(config.exact_match.end_markers))
    return ExactMatchVerifier(
        end_markers=tuple(config.exact_match.end_markers),
        answer_marker=config.exact_match.answer_marker,
    )


def _math(config: RewardConfig) -> Verifier:
    return MathVerifier(max_answer_chars=config.math.max_answer_chars)


def _code(config: RewardConfig) -> Verifier:
    code = config.code
    return CodeVerifier(
        timeout_s=code.timeout_s,
        total_timeout_s=code.total_timeout_s,
        cpu_time_limit_s=code.cpu_time_limit_s,
        memory_limit_mb=code.memory_limit_mb,
        max_output_bytes=code.max_output_bytes,
        partial_credit=code.partial_credit,
        isolation=code.isolation,  # type: ignore[arg-type]  # validated by CodeConfig
        python_executable=code.python_executable,
    )


def _reasoning_gym(config: RewardConfig) -> Verifier:
    # Imported here: it draws entries with reasoning-gym (an optional extra).
    from adarl.reward.reasoning_gym import ReasoningGymVerifier

    return ReasoningGymVerifier(pass_threshold=config.reasoning_gym.pass_threshold)


_REGISTRY: dict[str, VerifierFactory] = {
    "arithmetic": _exact_match,
    "exact_match": _exact_match,
    "math": _math,
    "code": _code,
    "reasoning_gym": _reasoning_gym,
}


def register_verifier(name: str, factory: VerifierFactory) -> None:
    if name in _REGISTRY:
        raise ValueError(f"a verifier named {name!r} is already registered")
    _REGISTRY[name] = factory


def verifier_names() -> list[str]:
    return sorted(_REGISTRY)


def build_verifier(name: str, config: RewardConfig | None = None) -> Verifier:
    """The verifier registered as `name`, configured by `config` (defaults if None)."""
    if name not in _REGISTRY:
        raise ValueError(
            f"unknown verifier {name!r} (task.verifier); registered: {verifier_names()}"
        )
    return _REGISTRY[name](config or RewardConfig())


def build_reward_pool(config: RewardConfig, verifier_names: Iterable[str]) -> RewardPool:
    """A pool holding the verifiers of the given tasks (e.g. `[task_config.verifier_name]`)."""
    config.validate()
    names = sorted(set(verifier_names))
    return RewardPool(
        verifiers={name: build_verifier(name, config) for name in names},
        num_workers=config.num_workers,
        timeout_s=config.timeout_s,
    )
