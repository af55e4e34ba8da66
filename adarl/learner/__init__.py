"""Learners: DeepSpeed ZeRO ranks (`Learner`), their data-parallel group, and the builder."""

from adarl.learner.build import build_learner_group
from adarl.learner.group import LearnerGroup, PromptGradNorms, TrainStepResult
from adarl.learner.learner import Learner, RankStepResult
from adarl.learner.weights import WeightInfo

__all__ = [
    "Learner",
    "LearnerGroup",
    "PromptGradNorms",
    "RankStepResult",
    "TrainStepResult",
    "WeightInfo",
    "build_learner_group",
]
