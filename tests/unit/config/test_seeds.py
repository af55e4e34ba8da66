"""One root seed seeds everything: component seeds derive from it unless set, and are recorded."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from adarl.allocator import build_allocator
from adarl.config import AdarlConfig
from adarl.config.seeds import DERIVED_SEEDS
from adarl.launch import CONFIG_DIR, load_config, save_resolved_config
from adarl.tasks.build import build_prompt_source


def _compose(*overrides: str) -> AdarlConfig:
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return load_config(compose(config_name="config", overrides=list(overrides)))


def _first_steps(config: AdarlConfig) -> tuple[list[list[str]], list[int]]:
    """Prompt ids of the first 3 batches, and the request seeds of the first step."""
    source = build_prompt_source(config.task)
    batches = [[e.prompt_id for e in source.next_batch(8)] for _ in range(3)]
    allocator = build_allocator(config.allocator)
    examples = build_prompt_source(config.task).next_batch(config.allocator.prompts_per_step)
    requests = allocator.start_step(1, examples)
    return batches, [r.seed for r in requests]


def test_two_root_seeds_give_different_prompt_orders_and_samples() -> None:
    zero = _first_steps(_compose("+experiment=ada_seq_balance", "seed=0"))
    one = _first_steps(_compose("+experiment=ada_seq_balance", "seed=1"))
    assert zero[0] != one[0]  # prompt order
    assert set(zero[1]).isdisjoint(one[1])  # every request is sampled with another seed


def test_the_same_root_seed_gives_identical_runs() -> None:
    first = _first_steps(_compose("+experiment=grpo", "seed=3"))
    again = _first_steps(_compose("+experiment=grpo", "seed=3"))
    assert first == again


def test_every_component_seed_is_derived_and_recorded(tmp_path: Path) -> None:
    config = _compose("+experiment=grpo", "seed=5")
    other = _compose("+experiment=grpo", "seed=6")
    saved = OmegaConf.load(save_resolved_config(config, tmp_path))
    for path in DERIVED_SEEDS:
        area, key = path.split(".")
        value = getattr(getattr(config, area), key)
        assert isinstance(value, int)
        assert value != getattr(getattr(other, area), key), path
        assert saved[area][key] == value, f"{path} is not recorded in config.yaml"
    # The data and the base model do not move with the root seed: seeds share them.
    assert config.task.arithmetic == other.task.arithmetic
    assert config.model == other.model


def test_an_explicit_component_seed_is_kept() -> None:
    config = _compose("+experiment=grpo", "seed=5", "task.seed=42")
    assert config.task.seed == 42
    assert config.allocator.seed == _compose("+experiment=grpo", "seed=5").allocator.seed
