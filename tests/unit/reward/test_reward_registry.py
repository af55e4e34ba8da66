"""Verifier registry, pool builder and the `reward` config's validation."""

from __future__ import annotations

import pytest

from adarl.config.reward import CodeConfig, RewardConfig
from adarl.reward.base import Verifier, VerifierResult
from adarl.reward.code_verifier import CodeVerifier
from adarl.reward.exact import ExactMatchVerifier
from adarl.reward.math_verifier import MathVerifier
from adarl.reward.registry import (
    build_reward_pool,
    build_verifier,
    register_verifier,
    verifier_names,
)
from adarl.types import TaskExample


def test_builtin_verifiers_by_task_name() -> None:
    assert {"arithmetic", "exact_match", "math", "code"} <= set(verifier_names())
    assert isinstance(build_verifier("arithmetic"), ExactMatchVerifier)
    assert isinstance(build_verifier("math"), MathVerifier)
    config = RewardConfig(code=CodeConfig(isolation="python", timeout_s=2.0))
    code = build_verifier("code", config)
    assert isinstance(code, CodeVerifier) and code.sandbox.limits.timeout_s == 2.0
    assert all(isinstance(build_verifier(n), Verifier) for n in ("arithmetic", "math"))
    with pytest.raises(ValueError, match=r"unknown verifier 'nope' \(task.verifier\)"):
        build_verifier("nope")


def test_end_markers_come_from_config() -> None:
    config = RewardConfig()
    config.exact_match.end_markers = ["#"]
    verifier = build_verifier("arithmetic", config)
    example = TaskExample(prompt_id="p", prompt="1+1=", answer="2", task="arithmetic")
    assert verifier.verify("2#junk", example).reward == 1.0
    assert verifier.verify("2<eos>", example).reward == 0.0  # the default markers are gone


def test_register_a_task_verifier() -> None:
    class Always:
        def verify(self, response: str, example: TaskExample) -> VerifierResult:
            return VerifierResult(reward=1.0)

    register_verifier("test-always-right", lambda config: Always())
    with pytest.raises(ValueError, match="already registered"):
        register_verifier("test-always-right", lambda config: Always())
    pool = build_reward_pool(RewardConfig(num_workers=1), ["test-always-right", "arithmetic"])
    pool.close()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_workers": 0}, "reward.num_workers"),
        ({"timeout_s": 10.0}, "must exceed reward.code.total_timeout_s"),
        ({"code": CodeConfig(isolation="docker")}, "reward.code.isolation"),
        ({"code": CodeConfig(memory_limit_mb=16)}, "reward.code.memory_limit_mb"),
        ({"code": CodeConfig(timeout_s=0)}, "reward.code.timeout_s"),
    ],
)
def test_reward_config_validation_names_the_key(change: dict, message: str) -> None:
    config = RewardConfig(**change)
    with pytest.raises(ValueError, match=message):
        config.validate()


def test_default_reward_config_is_valid() -> None:
    RewardConfig().validate()
