"""Learners: DeepSpeed ZeRO ranks (`Learner`), their data-parallel group, and the builder."""

from adarl.learner.build import build_learner_group, policy_loss_settings
from adarl.learner.group import LearnerGroup, PromptGradNorms, TrainStepResult
from adarl.learner.learner import Learner, PolicyLossSettings, RankStepResult, WeightInfo

__all__ = [
    "Learner",
    "LearnerGroup",
    "PolicyLossSettings",
    "PromptGradNorms",
    "RankStepResult",
    "TrainStepResult",
    "WeightInfo",
    "build_learner_group",
    "policy_loss_settings",
]
