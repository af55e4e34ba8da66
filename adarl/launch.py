"""Entry point: `python -m adarl.launch +experiment=NAME [key=value ...]`.

Hydra composes `adarl/conf/config.yaml` (defaults of every group) with the experiment and the
command-line overrides into an `AdarlConfig`; unknown keys fail during composition. Values and
combinations are validated before anything heavy is imported or any actor starts, the resolved
config is written to `<run dir>/config.yaml`, and the run starts. The run directory is Hydra's
(`hydra.run.dir=PATH` sets it; default `runs/<name>/<timestamp>`).

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

from adarl.config import AdarlConfig

CONFIG_DIR = str(Path(__file__).resolve().parent / "conf")

ConfigStore.instance().store(name="adarl_schema", node=AdarlConfig)


def load_config(cfg: DictConfig) -> AdarlConfig:
    """DictConfig from Hydra -> validated `AdarlConfig`; raises ValueError naming key and fix."""
    config = OmegaConf.to_object(cfg)
    assert isinstance(config, AdarlConfig)
    config.validate()
    return config


def save_resolved_config(config: AdarlConfig, run_dir: Path) -> Path:
    path = run_dir / "config.yaml"
    run_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(OmegaConf.to_yaml(OmegaConf.structured(config)))
    return path


@hydra.main(config_path=CONFIG_DIR, config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    try:
        config = load_config(cfg)
    except ValueError as error:
        print(f"adarl: invalid config: {error}", file=sys.stderr)
        sys.exit(2)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    save_resolved_config(config, run_dir)

    from adarl.run import run  # heavy imports (torch, Ray, vLLM) only after validation

    run(config, run_dir=run_dir)


if __name__ == "__main__":
    main()
