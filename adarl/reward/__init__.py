"""Rewards: verifiers (exact match, math-verify, code in a sandbox) and the `RewardPool`.

A verifier maps (response text, `TaskExample`) to a reward in [0, 1] plus an optional error;
`build_verifier(name)` gives the verifier a task names, `build_reward_pool` the pool that scores
rollouts concurrently. Formats and guarantees: docs/tasks_and_rewards.md.
"""

from adarl.reward.base import GoldChecker, Verifier, VerifierResult, gold_problem
from adarl.reward.code_verifier import CodeVerifier, extract_code, parse_tests
from adarl.reward.exact import ExactMatchVerifier
from adarl.reward.math_verifier import MathVerifier
from adarl.reward.pool import RewardPool
from adarl.reward.registry import (
    build_reward_pool,
    build_verifier,
    register_verifier,
    verifier_names,
)
from adarl.reward.sandbox import Sandbox, SandboxLimits, SandboxResult

__all__ = [
    "CodeVerifier",
    "ExactMatchVerifier",
    "GoldChecker",
    "MathVerifier",
    "RewardPool",
    "Sandbox",
    "SandboxLimits",
    "SandboxResult",
    "Verifier",
    "VerifierResult",
    "build_reward_pool",
    "build_verifier",
    "extract_code",
    "gold_problem",
    "parse_tests",
    "register_verifier",
    "verifier_names",
]
