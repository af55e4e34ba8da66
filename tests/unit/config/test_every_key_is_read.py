"""Every config key is read by something outside the schema modules: no key does nothing.

Two checks, over every leaf field of `AdarlConfig` (walked through the nested dataclasses):

* **Dynamic**, for the areas whose builders are cheap to run (allocator with every sampler and
  mode, task, reward with every verifier, rollout with every engine, logger, the built-in model):
  the config dataclasses record every attribute read while those builders run, except reads by
  the schemas' own validation; a key of these areas never read that way fails (so does a key
  that only validation looks at).
* **Static**, for the areas read by the session and the learner group (`trainer`, `eval`,
  `checkpoint`, `cluster`, `learner`), whose builders start actors: `.name` must appear in some
  module outside `adarl/config/`.

Keys read in another way are listed in `READ_ELSEWHERE` with the reason.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import adarl
from adarl.config import AdarlConfig
from adarl.config.allocator import AllocatorConfig, RehearsalConfig, SequentialConfig

PACKAGE = Path(adarl.__file__).resolve().parent
CONFIG_DIR = PACKAGE / "config"
DYNAMIC_AREAS = ("allocator", "task", "reward", "rollout", "logger", "model")

# path -> how it is read, when not by a builder as an attribute outside adarl/config.
READ_ELSEWHERE: dict[str, str] = {
    "seed": "the root seed: AdarlConfig.resolve_seeds derives every component seed from it",
    "name": "labels the run: RunSummary.name, the W&B run (config.name in session.py)",
    "allocator.prompts_per_step": "the driver's batch size (session.py builds the Driver)",
    "allocator.samples_per_prompt": "retired: validation refuses it, naming the keys that "
    "replaced it (uniform_samples_per_prompt, mean_samples_per_prompt, ...)",
    "rollout.max_off_policy_steps": "the driver's sampling-ahead depth (session.py builds the "
    "Driver)",
    "rollout.cross_step_allocation": "the driver's stream of overlapping steps and the "
    "allocator's max_open_steps (session.py builds both)",
    "model.cache_dir": "where built-ins are cached: resolve_model_config passes it on",
    "logger.library_logs": "where the actors' library output goes: the session points "
    "adarl.cluster.spawn_actor at <run dir>/logs before any actor starts (session.py)",
}


def _leaf_paths(cls: type, prefix: str = "") -> list[tuple[str, type, str]]:
    """(path, owning dataclass, field name) of every leaf field."""
    out = []
    for field in dataclasses.fields(cls):
        path = f"{prefix}{field.name}"
        factory = field.default_factory
        value = factory() if factory is not dataclasses.MISSING else None
        if dataclasses.is_dataclass(value):
            out += _leaf_paths(type(value), prefix=f"{path}.")
        else:
            out.append((path, cls, field.name))
    return out


def _config_classes() -> set[type]:
    return {owner for _, owner, _ in _leaf_paths(AdarlConfig)}


def _is_validation(code) -> bool:
    """Reads by the schemas' own validation and seed resolution do not count as use."""
    in_config = CONFIG_DIR in Path(code.co_filename).resolve().parents
    return in_config and code.co_name.startswith(("validate", "resolve_seeds", "__post_init__"))


@contextmanager
def recording_reads() -> Iterator[set[tuple[type, str]]]:
    """Record (class, field) of every config attribute read, except by validation."""
    reads: set[tuple[type, str]] = set()
    patched = []
    for cls in _config_classes():
        names = {f.name for f in dataclasses.fields(cls)}
        original = cls.__getattribute__

        def spy(self, name, _cls=cls, _names=names, _original=original):
            if name in _names and not _is_validation(sys._getframe(1).f_code):
                reads.add((_cls, name))
            return _original(self, name)

        cls.__getattribute__ = spy  # type: ignore[method-assign]
        patched.append((cls, original))
    try:
        yield reads
    finally:
        for cls, original in patched:
            cls.__getattribute__ = original  # type: ignore[method-assign]


def _run_cheap_builders(tmp_path: Path) -> None:
    from adarl.allocator import build_allocator
    from adarl.config import LoggerConfig, RewardConfig, RolloutConfig, TaskConfig
    from adarl.config.model import TINY_ARITHMETIC, ModelConfig, TinyModelConfig
    from adarl.logging import build_metrics_logger
    from adarl.models.loading import resolve_model_config
    from adarl.reward.registry import build_reward_pool
    from adarl.rollout.builders import engine_class_and_kwargs
    from adarl.rollout.pool import build_rollout_pool
    from adarl.tasks.build import build_prompt_source, build_test_examples

    config = AdarlConfig()
    for sampler in ("uniform", "seq_pos", "seq_balance", "dynamic_filter", "ada_est", "gvm"):
        build_allocator(dataclasses.replace(config.allocator, sampler=sampler))
    build_allocator(
        AllocatorConfig(
            sequential=SequentialConfig(mode="rounds", round_repeat=4, max_rounds=8),
            max_samples_per_prompt=32,
        )
    )
    build_allocator(dataclasses.replace(config.allocator, sampler="knapsack"))
    # issue 38's update-side options: a coverage phase and a reweighting of the positives
    build_allocator(
        dataclasses.replace(
            config.allocator,
            group=dataclasses.replace(
                config.allocator.group,
                correction="selection",
                positive_reweighting="ucpo",
                coverage_phase_rollouts=100,
                coverage_objective="pass_at_k",
                coverage_advantage="pool",
            ),
        )
    )
    build_allocator(
        dataclasses.replace(
            config.allocator, rehearsal=RehearsalConfig(enabled=True, min_samples=8, per_step=4)
        )
    )
    build_allocator(
        dataclasses.replace(
            config.allocator,
            sampler="uniform",
            curation=dataclasses.replace(config.allocator.curation, skip="greso"),
        )
    )
    task = TaskConfig()
    build_prompt_source(task)
    build_test_examples(task)
    rows = tmp_path / "train.jsonl"
    rows.write_text("".join(f'{{"q": "{i}+1=", "a": "{i + 1}"}}\n' for i in range(4)))
    files = TaskConfig(source="jsonl", path=str(rows), verifier="arithmetic")
    files.fields.prompt, files.fields.answer = "q", "a"
    build_prompt_source(files)
    build_test_examples(files)
    gym = TaskConfig(source="reasoning_gym")
    gym.reasoning_gym.name = "leg_counting"
    gym.reasoning_gym.config = {"min_animals": 1, "max_animals": 2}
    gym.reasoning_gym.num_train_prompts, gym.reasoning_gym.num_test_prompts = 8, 4
    gym.reasoning_gym.difficulty_key = "num_animals"
    build_prompt_source(gym)
    build_test_examples(gym)
    reward = RewardConfig()
    build_reward_pool(reward, ["arithmetic", "math", "code", "reasoning_gym"]).close()
    for engine in ("vllm", "hf"):
        engine_class_and_kwargs(RolloutConfig(engine=engine), model_path="unused")
    from adarl.models.loading import load_tokenizer
    from adarl.rollout.codec import build_prompt_codec

    build_prompt_codec(task, RolloutConfig(), load_tokenizer(TINY_ARITHMETIC))
    RolloutConfig().sampling_params()
    build_rollout_pool(
        RolloutConfig(engine="fake"), model_path=TINY_ARITHMETIC, in_process=True, fake_script={}
    ).shutdown()
    build_metrics_logger(LoggerConfig(mode="disabled"), run_dir=tmp_path / "run").close()
    model = ModelConfig(cache_dir=str(tmp_path / "cache"), tiny=TinyModelConfig(sft_steps=0))
    resolve_model_config(model)


@pytest.mark.slow
def test_every_key_of_the_cheap_areas_is_read_by_a_builder(tmp_path: Path) -> None:
    with recording_reads() as reads:
        _run_cheap_builders(tmp_path)
    unread = [
        path
        for path, owner, name in _leaf_paths(AdarlConfig)
        if path.split(".")[0] in DYNAMIC_AREAS
        and path not in READ_ELSEWHERE
        and (owner, name) not in reads
    ]
    assert not unread, f"config keys no builder reads: {unread}"


def test_every_key_of_the_session_areas_is_read_somewhere() -> None:
    sources = "\n".join(p.read_text() for p in PACKAGE.rglob("*.py") if CONFIG_DIR not in p.parents)
    unread = [
        path
        for path, _, name in _leaf_paths(AdarlConfig)
        if path.split(".")[0] not in DYNAMIC_AREAS
        and path not in READ_ELSEWHERE
        and not re.search(rf"\.{re.escape(name)}\b", sources)
    ]
    assert not unread, f"config keys that nothing outside adarl/config reads: {unread}"


def test_the_recorder_sees_a_read_and_ignores_the_validator() -> None:
    config = AllocatorConfig()
    with recording_reads() as reads:
        config.validate()  # adarl/config itself: not a builder
        assert not reads
        _ = config.prompts_per_step
    assert (AllocatorConfig, "prompts_per_step") in reads
