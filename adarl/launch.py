"""Entry point: `python -m adarl.launch [+experiment=NAME] [key=value ...]`.

With no experiment named, the run is `DEFAULT_EXPERIMENT` (adarl/config/__init__.py), the one
`make run` runs; `experiment=NAME` reads as `+experiment=NAME`. Hydra composes
`adarl/conf/config.yaml` (defaults of every group) with the experiment and the command-line
overrides into an `AdarlConfig`. Every key is checked against the schemas before Hydra composes
anything (adarl/config/keys.py: an unknown key, with or without `+`, or an unknown preset fails,
naming the closest valid ones), and again once composed. Values and combinations are validated
before anything heavy is imported or any actor starts; then the run directory is locked
(adarl/rundir.py: a second run on the same directory refuses, naming the first one's pid and
host), the console is also written to `<run dir>/console.log` (adarl/console.py), the built-in
tiny policy is fitted to the task (adarl/models/fit.py: its lengths raised to what the task's
prompts and answers need, unless the command line sets them), the resolved config is written to
`<run dir>/config.yaml` (secrets redacted, adarl/redact.py), and the run starts. The run
directory is Hydra's (`hydra.run.dir=PATH` sets it; default `runs/<name>/<timestamp>`).

Exit status: 0 done; 2 for an input the run cannot start with, in one line naming the key and the
fix: an unknown key or preset, an invalid value or combination, a model, tokenizer or data path
that does not exist, a bad row, a task the policy cannot hold (adarl/errors.py; the traceback of
the last kinds goes to `<run dir>/logs/error.log`); 3 when another run holds the run directory.

The config directory lives inside the package, so the same command works from a checkout, from
a non-editable install, and from a Ray job's working directory.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from adarl.allocator.objective import declare_objective
from adarl.config import DEFAULT_EXPERIMENT, AdarlConfig
from adarl.config.keys import check_composed_keys, check_override_keys
from adarl.console import CONSOLE_FILE, ConsoleTranscript
from adarl.errors import InputError
from adarl.export import resolved_config_yaml
from adarl.rundir import RunDirInUseError, RunDirLock

CONFIG_DIR = str(Path(__file__).resolve().parent / "conf")
ERROR_LOG = Path("logs") / "error.log"  # inside the run directory

ConfigStore.instance().store(name="adarl_schema", node=AdarlConfig)

_transcript: ConsoleTranscript | None = None


def load_config(cfg: DictConfig) -> AdarlConfig:
    """DictConfig from Hydra -> validated `AdarlConfig`; raises ValueError naming key and fix."""
    check_composed_keys(cfg)  # a `+key` no schema reads is refused, not set and ignored
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


def with_default_experiment(overrides: Sequence[str]) -> list[str]:
    """The overrides as Hydra gets them: `+experiment=DEFAULT_EXPERIMENT` added when none names
    an experiment, and `experiment=NAME` (not in the defaults list, so Hydra would refuse it)
    read as `+experiment=NAME`."""
    out = [f"+{item}" if item.startswith("experiment=") else item for item in overrides]
    if not any(item.lstrip("+").startswith("experiment=") for item in out):
        out.append(f"+experiment={DEFAULT_EXPERIMENT}")
    return out


def explicit_keys(overrides: Sequence[str]) -> set[str]:
    """The keys the command line sets (`key=value`, `+key=value`, `++key=value`)."""
    return {item.lstrip("+").split("=", 1)[0] for item in overrides if "=" in item}


def _refuse(
    message: str, *, run_dir: Path | None = None, error: BaseException | None = None
) -> NoReturn:
    """Print one line, leave the traceback in the run's logs, exit 2."""
    where = ""
    if run_dir is not None and error is not None:
        path = run_dir / ERROR_LOG
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(traceback.format_exception(error)))
        where = f" (traceback: {path})"
    print(f"adarl: {message}{where}", file=sys.stderr, flush=True)
    sys.exit(2)


@hydra.main(config_path=CONFIG_DIR, config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    try:
        config = load_config(cfg)
    except ValueError as error:
        _refuse(f"invalid config: {error}")
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    lock = RunDirLock(run_dir)
    try:
        lock.acquire()  # before adarl writes anything into the run directory
    except RunDirInUseError as error:
        print(f"adarl: {error}", file=sys.stderr)
        sys.exit(3)
    if _transcript is not None:
        _transcript.attach(run_dir / CONSOLE_FILE)
    try:
        # Heavy imports (torch, Ray, vLLM) only after validation.
        from adarl.models.fit import fit_builtin_policy
        from adarl.run import run

        try:
            fit_builtin_policy(config, explicit=explicit_keys(HydraConfig.get().overrides.task))
            save_resolved_config(config, run_dir)
            run(config, run_dir=run_dir)
        except InputError as error:
            _refuse(str(error), run_dir=run_dir, error=error)
    finally:
        if _transcript is not None:
            _transcript.detach()
        lock.release()


def cli(argv: Sequence[str] | None = None) -> None:
    """`python -m adarl.launch`: check the command line's keys, add the default experiment,
    keep a transcript of the console, then hand over to Hydra."""
    global _transcript
    from hydra._internal.utils import get_args_parser

    argv = list(sys.argv[1:] if argv is None else argv)
    overrides = get_args_parser().parse_args(argv).overrides
    try:
        check_override_keys(overrides, config_dir=CONFIG_DIR)
    except ValueError as error:
        _refuse(f"invalid config: {error}")
    flags = [item for item in argv if item not in overrides]
    sys.argv = [sys.argv[0], *flags, *with_default_experiment(overrides)]
    _transcript = ConsoleTranscript.install()
    try:
        main()
    finally:
        _transcript.uninstall()


if __name__ == "__main__":
    cli()
