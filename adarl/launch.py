"""Entry point: `python -m adarl.launch +experiment=NAME [key=value ...]`.

Hydra composes `adarl/conf/config.yaml` (defaults of every group) with the experiment and the
command-line overrides into an `AdarlConfig`; unknown keys fail during composition. Values and
combinations are validated before anything heavy is imported or any actor starts; then the run
directory is locked (adarl/rundir.py: a second run on the same directory refuses, naming the
first one's pid and host), the resolved config is written to `<run dir>/config.yaml` (secrets
redacted, adarl/redact.py), and the run starts. The run directory is Hydra's
(`hydra.run.dir=PATH` sets it; default `runs/<name>/<timestamp>`).

Exit status: 2 for an invalid config, 3 when another run holds the run directory.

The config directory lives inside the package, so the same command works from a checkout, from
a non-editable install, and from a Ray job's working directory.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from adarl.allocator.objective import declare_objective
from adarl.config import AdarlConfig
from adarl.export import resolved_config_yaml
from adarl.rundir import RunDirInUseError, RunDirLock

CONFIG_DIR = str(Path(__file__).resolve().parent / "conf")

ConfigStore.instance().store(name="adarl_schema", node=AdarlConfig)


def load_config(cfg: DictConfig) -> AdarlConfig:
    """DictConfig from Hydra -> validated `AdarlConfig`; raises ValueError naming key and fix."""
    config = OmegaConf.to_object(cfg)
    assert isinstance(config, AdarlConfig)
    config.validate()
    # What the run will print that it optimises, computed now: a configuration whose exact weight
    # by p is another objective's is refused here, before anything starts.
    declare_objective(
        config.allocator.plan(), hint_schedule=config.hints.schedule, reward=config.dro.reward
    )
    return config


def save_resolved_config(config: AdarlConfig, run_dir: Path) -> Path:
    """`run_dir/config.yaml`: the resolved config, with secrets replaced (adarl/redact.py)."""
    path = run_dir / "config.yaml"
    run_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(resolved_config_yaml(config))  # also each exported model's copy
    return path


@hydra.main(config_path=CONFIG_DIR, config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    try:
        config = load_config(cfg)
    except ValueError as error:
        print(f"adarl: invalid config: {error}", file=sys.stderr)
        sys.exit(2)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    lock = RunDirLock(run_dir)
    try:
        lock.acquire()  # before adarl writes anything into the run directory
    except RunDirInUseError as error:
        print(f"adarl: {error}", file=sys.stderr)
        sys.exit(3)
    try:
        save_resolved_config(config, run_dir)

        from adarl.run import run  # heavy imports (torch, Ray, vLLM) only after validation

        run(config, run_dir=run_dir)
    finally:
        lock.release()


if __name__ == "__main__":
    main()
