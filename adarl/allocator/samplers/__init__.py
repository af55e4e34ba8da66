"""Samplers: small stateful objects deciding how many responses each prompt gets (see `base`)."""

from adarl.allocator.samplers.base import (
    Draw,
    PromptHistory,
    PromptStatus,
    Sampler,
    StepBudget,
    derive_seed,
)
from adarl.allocator.samplers.dynamic_filter import DynamicFilterSampler
from adarl.allocator.samplers.sequential import DispatchMode, SequentialSampler
from adarl.allocator.samplers.uniform import UniformSampler

__all__ = [
    "DispatchMode",
    "Draw",
    "DynamicFilterSampler",
    "PromptHistory",
    "PromptStatus",
    "Sampler",
    "SequentialSampler",
    "StepBudget",
    "UniformSampler",
    "derive_seed",
]
