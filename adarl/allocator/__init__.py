"""The budget allocator: adaptive per-prompt sampling and the group builder.

`BudgetAllocator` turns each step's prompts into a stream of `PromptRequest`s, decided by a
sampler (`uniform`, `seq_pos`, `seq_balance` streaming or in rounds, `dynamic_filter`, `ada_est`,
`gvm`), and turns the scored pools into training `Group`s with the `GroupBuilder`.
"""

from adarl.allocator.allocator import BudgetAllocator, CarriedGroup, StepResult, StreamUpdate
from adarl.allocator.build import build_allocator, build_group_builder, build_sampler
from adarl.allocator.group_builder import GroupBuilder
from adarl.allocator.samplers.base import Draw, PromptHistory, PromptStatus, Sampler
from adarl.allocator.samplers.dynamic_filter import DynamicFilterSampler
from adarl.allocator.samplers.estimation import AdaEstSampler, GvmSampler
from adarl.allocator.samplers.sequential import DispatchMode, SequentialSampler
from adarl.allocator.samplers.uniform import UniformSampler
from adarl.allocator.stats import PromptStats, PromptStatsStore

__all__ = [
    "AdaEstSampler",
    "BudgetAllocator",
    "CarriedGroup",
    "DispatchMode",
    "Draw",
    "DynamicFilterSampler",
    "GroupBuilder",
    "GvmSampler",
    "PromptHistory",
    "PromptStats",
    "PromptStatsStore",
    "PromptStatus",
    "Sampler",
    "SequentialSampler",
    "StepResult",
    "StreamUpdate",
    "UniformSampler",
    "build_allocator",
    "build_group_builder",
    "build_sampler",
]
