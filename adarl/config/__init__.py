"""The one source of truth for configuration: structured dataclasses, registered with Hydra.

Each area documents its fields once, in its own module's docstring:

| key | schema | module |
|---|---|---|
| `model` | `ModelConfig` | adarl/config/model.py |
| `task` | `TaskConfig` | adarl/config/tasks.py |
| `reward` | `RewardConfig` | adarl/config/reward.py |
| `rollout` | `RolloutConfig` | adarl/config/rollout.py |
| `allocator` | `AllocatorConfig` | adarl/config/allocator.py |
| `allocator.group` | `GroupConfig` | adarl/config/group.py |
| `dro` | `DroConfig` | adarl/config/dro.py |
| `hints` | `HintsConfig` | adarl/config/hints.py |
| `learner` | `LearnerConfig` | adarl/config/learner.py |
| `logger` | `LoggerConfig` | adarl/config/logger.py |
| `checkpoint` | `CheckpointConfig` | adarl/config/checkpoint.py |
| `faults` | `FaultsConfig` | adarl/config/faults.py |
| `trainer`, `eval`, `cluster` | `TrainerConfig`, ... | adarl/config/run.py |
| `seed` (root) and derived seeds | | adarl/config/seeds.py |

YAML files under `adarl/conf/` hold only overrides of these defaults. Unknown keys fail when
Hydra composes the config (the schemas are structured); `AdarlConfig.validate()` then checks
values and combinations before any actor starts. Nothing here imports torch or Ray, so an
invalid config fails in about a second.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from adarl.config.allocator import AllocatorConfig
from adarl.config.checkpoint import CheckpointConfig
from adarl.config.dro import DroConfig
from adarl.config.faults import FaultsConfig
from adarl.config.hints import HintsConfig
from adarl.config.learner import LearnerConfig
from adarl.config.logger import LoggerConfig
from adarl.config.model import TINY_ARITHMETIC, WORKED_RESPONSE_TOKENS, ModelConfig
from adarl.config.real_model import check_real_model
from adarl.config.reward import RewardConfig
from adarl.config.rollout import RolloutConfig
from adarl.config.run import ClusterConfig, EvalConfig, TrainerConfig
from adarl.config.seeds import DERIVED_SEEDS, component_seed
from adarl.config.tasks import FILE_SOURCES, TaskConfig

# The experiment a bare `python -m adarl.launch` runs, and so `make run` (its command names none):
# the one place that names adarl's default. The docs that describe the default are checked
# against it (tests/unit/config/test_default_experiment.py).
DEFAULT_EXPERIMENT = "grpo_anchored"

__all__ = [
    "DEFAULT_EXPERIMENT",
    "AdarlConfig",
    "AllocatorConfig",
    "CheckpointConfig",
    "ClusterConfig",
    "DroConfig",
    "EvalConfig",
    "FaultsConfig",
    "HintsConfig",
    "LearnerConfig",
    "LoggerConfig",
    "ModelConfig",
    "RewardConfig",
    "RolloutConfig",
    "TaskConfig",
    "TrainerConfig",
]


@dataclass
class AdarlConfig:
    """Root config. `name` labels the run (experiments set it); `seed` seeds everything: every
    component seed left unset is derived from it when the config is built (adarl/config/seeds.py).
    """

    name: str = "custom"
    seed: int = 0
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    allocator: AllocatorConfig = field(default_factory=AllocatorConfig)
    dro: DroConfig = field(default_factory=DroConfig)
    hints: HintsConfig = field(default_factory=HintsConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    faults: FaultsConfig = field(default_factory=FaultsConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)

    def __post_init__(self) -> None:
        self.resolve_seeds()
        self.resolve_verifier()

    def resolve_verifier(self) -> None:
        """A file task with `task.verifier` unset is scored the way its policy answers: the
        built-in tiny policy writes the answer alone (`exact_match`; its worked solution with
        `model.tiny.sft_response=worked`, scored after `reward.exact_match.answer_marker`), a
        real model its reasoning and a `\\boxed{}` answer (`math`)."""
        task = self.task
        if task.source in FILE_SOURCES and task.verifier is None:
            task.verifier = "exact_match" if self.model.name_or_path == TINY_ARITHMETIC else "math"

    def resolve_seeds(self) -> None:
        """Fill every unset component seed with one derived from the root `seed`."""
        for path in DERIVED_SEEDS:
            area_name, key = path.split(".")
            area = getattr(self, area_name)
            if getattr(area, key) is None:
                setattr(area, key, component_seed(self.seed, path))

    def validate(self) -> None:
        """Static validation: every area, then the combinations no single area can see."""
        for area in (
            self.model,
            self.task,
            self.reward,
            self.rollout,
            self.allocator,
            self.dro,
            self.hints,
            self.learner,
            self.logger,
            self.checkpoint,
            self.faults,
            self.trainer,
            self.eval,
            self.cluster,
        ):
            area.validate()
        validate_combinations(self)


def check_worked_responses(config: AdarlConfig) -> None:
    """A built-in tiny policy taught to write its worked solution (`model.tiny.sft_response=
    worked`) is scored on the answer after the last "=" and needs room for the whole solution."""
    model = config.model
    if model.name_or_path != TINY_ARITHMETIC or model.tiny.sft_response == "answer":
        return
    reward = config.reward.exact_match
    marker = "=" if reward.check_arithmetic_work else reward.answer_marker
    if model.tiny.sft_response == "steps":
        if marker != "=":
            raise ValueError(
                "model.tiny.sft_response=steps: the policy writes its steps (47+38=85,85+15=100) "
                f"but reward.exact_match.answer_marker={marker!r} scores the whole response; set "
                "reward.exact_match.check_arithmetic_work=true (task=worked sets it)"
            )
        return
    if marker != "=":
        raise ValueError(
            "model.tiny.sft_response=worked: the policy writes its worked solution "
            f"(47*30=1410,47*8=376,1410+376=1786) but reward.exact_match.answer_marker={marker!r} "
            "scores the whole response; set reward.exact_match.answer_marker='=' (the preset "
            "model=tiny_worked sets it)"
        )
    if config.task.source == "arithmetic" and config.task.arithmetic.levels is None:
        for key, tokens in (
            ("rollout.max_new_tokens", config.rollout.max_new_tokens),
            ("eval.max_new_tokens", config.eval.max_new_tokens),
        ):
            if tokens < WORKED_RESPONSE_TOKENS:
                raise ValueError(
                    f"model.tiny.sft_response=worked: {key}={tokens} cuts worked solutions off "
                    f"(the default mix's longest is {WORKED_RESPONSE_TOKENS} tokens with "
                    f"<eos>); set {key}={WORKED_RESPONSE_TOKENS} or more (the preset "
                    "model=tiny_worked sets 40)"
                )


def check_cross_step_allocation(config: AdarlConfig) -> None:
    """Overlapping steps (`rollout.cross_step_allocation`) run a fresh copy of the sampler per
    open step and route each wave to its step; what keeps state across steps, or asks the driver
    for something mid-step, cannot take part."""
    alloc = config.allocator
    refusals = []
    if config.rollout.max_off_policy_steps < 1:
        refusals.append(
            "rollout.max_off_policy_steps=0 trains every step on samples of its own weights, so "
            "no step can sample before the one before it trained; set it to 1 or more"
        )
    if alloc.sampler not in ("seq_balance", "seq_pos", "uniform"):
        refusals.append(
            f"allocator.sampler={alloc.sampler!r} keeps state across steps; use seq_balance, "
            "seq_pos or uniform"
        )
    if alloc.rollouts_per_step is not None:
        refusals.append(
            f"allocator.rollouts_per_step={alloc.rollouts_per_step} refills a step with prompts "
            "mid-step; set it to null"
        )
    if alloc.curation.skip != "none":
        refusals.append(
            f"allocator.curation.skip={alloc.curation.skip!r} adapts across steps; set none"
        )
    if config.hints.schedule != "off":
        refusals.append("hints keep one step's collapses and budget; set hints=off")
    if config.dro.filter.enabled or config.dro.reward == "r3":
        refusals.append(
            "DRO rescores or filters a finished step as a whole; turn dro.reward and dro.filter off"
        )
    if refusals:
        raise ValueError(
            "rollout.cross_step_allocation=true: "
            + "; ".join(refusals)
            + " (or rollout.cross_step_allocation=false)"
        )


def check_rehearsal(config: AdarlConfig) -> None:
    """DPH-RL's rehearsal (`allocator.rehearsal`) trains its rows by the learners' forward-KL
    term to the frozen base: the term must weigh something and its anchor must stay the base."""
    if not config.allocator.rehearsal.enabled:
        return
    learner = config.learner
    if learner.loss.rehearsal_coef <= 0:
        raise ValueError(
            f"allocator.rehearsal.enabled=true with learner.loss.rehearsal_coef="
            f"{learner.loss.rehearsal_coef}: the rehearsal rows would train nothing; set "
            "learner.loss.rehearsal_coef > 0 (DPH-RL's 0.01-0.05, default 0.02) or "
            "allocator.rehearsal.enabled=false"
        )
    if learner.reference_reset_every_steps is not None:
        raise ValueError(
            f"allocator.rehearsal.enabled=true with learner.reference_reset_every_steps="
            f"{learner.reference_reset_every_steps}: the reset moves the reference the rehearsal "
            "term anchors to (the base) onto the policy; set "
            "learner.reference_reset_every_steps=null or allocator.rehearsal.enabled=false"
        )


def validate_combinations(config: AdarlConfig) -> None:
    alloc = config.allocator
    lag = config.rollout.max_off_policy_steps
    loss = config.learner.loss
    check_rehearsal(config)
    if lag and (loss.ratio_reference != "learner" or loss.tis_cap is None):
        raise ValueError(
            f"rollout.max_off_policy_steps={lag} trains on samples up to {lag} weight versions "
            f"old, but learner.loss.ratio_reference={loss.ratio_reference!r} and "
            f"learner.loss.tis_cap={loss.tis_cap} do not correct for it; set "
            "learner.loss.ratio_reference=learner learner.loss.tis_cap=2 (decoupled PPO), or "
            "rollout.max_off_policy_steps=0"
        )
    if config.rollout.cross_step_allocation:
        check_cross_step_allocation(config)
    if config.hints.write_ahead and lag:
        raise ValueError(
            f"hints.write_ahead=true with rollout.max_off_policy_steps={lag}: the next steps are "
            "sampled, hints included, while the learners train already; set "
            "hints.write_ahead=false (or max_off_policy_steps=0 to write only hints ahead)"
        )
    if config.hints.schedule != "off":
        streaming = alloc.sampler in ("seq_pos", "seq_balance") and (
            alloc.sequential.mode == "streaming"
        )
        if not (alloc.sampler == "uniform" or streaming):
            raise ValueError(
                f"hints.schedule={config.hints.schedule} with allocator.sampler={alloc.sampler!r}"
                + (f" (mode={alloc.sequential.mode})" if alloc.sampler.startswith("seq_") else "")
                + ": a collapsed prompt is re-rolled on its own, which needs a sampler that "
                "decides per prompt as its results stream in; use allocator=uniform or a "
                "streaming seq_pos / seq_balance, or hints=off"
            )
        if config.dro.reward == "r3":
            raise ValueError(
                f"hints.schedule={config.hints.schedule} with dro.reward=r3: the hint stage "
                "judges collapse, rescue and sage_light levels by pass/fail rewards, which R3 "
                "replaces with real-valued ones at the end of the step; use one or the other"
            )
    if config.dro.reward == "r3" and config.reward.exact_match.answer_marker is not None:
        raise ValueError(
            "dro.reward=r3 restates a rollout's answer as the whole response (the answer-only "
            "format), but reward.exact_match.answer_marker="
            f"{config.reward.exact_match.answer_marker!r} marks answers inside longer responses "
            "(e.g. model=tiny_worked); R3 on worked solutions is not built: use the answer-only "
            "tiny model with dro"
        )
    advantages = [alloc.group.advantage]
    coverage_phase = alloc.coverage_phase_config()
    if coverage_phase is not None:  # it trains its own advantage (issue 38)
        advantages.append(coverage_phase.group.advantage)
    for advantage in advantages:
        config.dro.validate_with(
            sampler=alloc.sampler, advantage=advantage, task_source=config.task.source
        )
    group = alloc.group
    if alloc.sampler == "seq_balance" and group.advantage == "pool" and group.group_size:
        if group.group_size % 2:
            raise ValueError(
                f"allocator.group.group_size={group.group_size} is odd but sampler=seq_balance "
                "keeps balanced groups of n/2 positives and n/2 negatives; use an even "
                "group_size (e.g. 4)"
            )
        quota = min(alloc.sequential.k_pos, alloc.sequential.k_neg)
        if alloc.sequential.mode == "streaming" and group.group_size // 2 > quota:
            raise ValueError(
                f"allocator.group.group_size={group.group_size} needs {group.group_size // 2} "
                f"positives and negatives but the stopping rule only waits for k_pos="
                f"{alloc.sequential.k_pos}, k_neg={alloc.sequential.k_neg}; set "
                f"allocator.sequential.k_pos and k_neg to at least {group.group_size // 2}"
            )
    if alloc.sampler == "ada_est" and group.advantage != "ada_est":
        raise ValueError(
            f"allocator.sampler=ada_est with allocator.group.advantage={group.advantage!r}: "
            "Reinforce-Ada-Est pairs its allocation (more samples for low p̂) with its advantage "
            "(r - r̄)/√(r̄ + ε), which together optimise log p; set allocator.group.advantage="
            "ada_est (+experiment=ada_est), or use another sampler"
        )
    if alloc.sampler == "gvm" and not (
        group.advantage == "grpo"
        or (group.advantage == "raft" and group.raft_normalization == "estimate")
    ):
        raise ValueError(
            f"allocator.sampler=gvm with allocator.group.advantage={group.advantage!r}"
            + (
                f" (raft_normalization={group.raft_normalization!r})"
                if group.advantage == "raft"
                else ""
            )
            + ": GVM is defined with GRPO advantages (+experiment=gvm_grpo) or with RAFT "
            "weighted 1/(n_i p_i) (+experiment=gvm_raft: advantage=raft, "
            "raft_normalization=estimate)"
        )
    if group.raft_normalization == "estimate" and alloc.sampler != "gvm":
        raise ValueError(
            "allocator.group.raft_normalization=estimate weights by the gvm sampler's pilot "
            f"pass rate but allocator.sampler={alloc.sampler!r}; use sampler=gvm or another "
            "raft_normalization"
        )
    if group.advantage != "pool" and group.correction != "none":
        raise ValueError(
            f"allocator.group.correction={group.correction!r} applies to pooled advantages "
            f"(allocator.group.advantage=pool) but advantage={group.advantage!r}; set "
            "allocator.group.correction=none or allocator.group.advantage=pool"
        )
    positions = config.model.builtin_max_positions
    if positions is not None and config.eval.max_new_tokens > positions:
        raise ValueError(
            f"eval.max_new_tokens={config.eval.max_new_tokens} exceeds the model's "
            f"max_position_embeddings={positions}"
        )
    rollout = config.rollout
    if positions is not None and (rollout.max_model_len or 0) > positions:
        raise ValueError(
            f"rollout.max_model_len={rollout.max_model_len} exceeds the built-in model's "
            f"max_position_embeddings={positions}: lower rollout.max_model_len"
        )
    if rollout.max_model_len is not None and config.eval.max_new_tokens >= rollout.max_model_len:
        raise ValueError(
            f"eval.max_new_tokens={config.eval.max_new_tokens} leaves no room for a prompt in "
            f"rollout.max_model_len={rollout.max_model_len}: lower eval.max_new_tokens or raise "
            "rollout.max_model_len"
        )
    tensor_parallel = rollout.tensor_parallel_size
    if tensor_parallel > 1 and config.cluster.gpus_per_engine < tensor_parallel:
        raise ValueError(
            f"rollout.tensor_parallel_size={tensor_parallel} shards each engine over that many "
            f"GPUs but cluster.gpus_per_engine={config.cluster.gpus_per_engine}: set "
            f"cluster.gpus_per_engine={tensor_parallel}"
        )
    check_worked_responses(config)
    check_real_model(config)
    if config.faults.engine_failure != "fail" and config.learner.weight_sync.method == "broadcast":
        raise ValueError(
            f"faults.engine_failure={config.faults.engine_failure} needs "
            "learner.weight_sync.method=object_store: a broadcast group is fixed at its first "
            "push, so a restarted or dropped engine would hang it; set faults.engine_failure=fail "
            "with broadcast"
        )
