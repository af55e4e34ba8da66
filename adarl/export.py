"""Keep the trained model: a policy written as a Hugging Face model directory.

Every run writes its final policy to `RUN_DIR/model/` at the end of `TrainingSession.train()`,
after its final checkpoint (adarl/session.py); `python -m adarl.export` writes any checkpoint's
the same way:

    python -m adarl.export RUN_DIR                                  # its latest checkpoint
    python -m adarl.export RUN_DIR/checkpoints/step_000012 [--out DIR]

(default `--out`: `RUN_DIR/exports/step_000012/`). A model directory holds:

    config.json, model.safetensors   the policy: the weights the learners gather for weight sync
    tokenizer.json, tokenizer_config.json, ...   the tokenizer it was trained with, as saved
    generation_config.json           the run's sampling defaults (below)
    adarl_export.json                what it is: the run, checkpoint and step, weight version
    adarl_config.yaml                the run's resolved config (secrets redacted): its task,
                                     prompt layout and seeds, which `python -m adarl.evaluate`
                                     reads

It loads with `AutoModelForCausalLM.from_pretrained(DIR)`, adarl's
`adarl.models.loading.load_tokenizer(DIR)`, and vLLM (`rollout=vllm model.name_or_path=DIR`).

`generation_config.json` holds the sampling of the run's held-out evaluation, so that
transformers' `generate` and vLLM (which takes it as its default sampling parameters) draw from
the distribution the run's pass@k was measured at: `eos_token_id` = the tokens a response stops
at (`<eos>`, and with `task.chat_template` the template's end-of-turn token: the codec's stop
tokens), `pad_token_id` (the tokenizer's pad, else its eos), `bos_token_id`, `do_sample=true`,
`temperature` = `eval.temperature`, `top_p=1.0` and `top_k=0` (no truncation; transformers'
own default top_k=50 would cut the distribution), `max_new_tokens` = `eval.max_new_tokens`.
How a prompt is laid out (chat template, instruction suffix) is the task's, in
`adarl_config.yaml`.

A model directory is written atomically: into a hidden sibling first, renamed into place last,
so no reader sees half of one. Exporting a checkpoint builds no learner: the policy's weights
are read from the learners' files, whatever number of them saved it
(adarl/learner/checkpoint.py `read_policy_weights`), and written with the code the run's own
export uses (adarl/learner/weights.py `save_hf_model`), onto the run's model's architecture
held on the meta device (`CheckpointPolicy`): the same files, bit for bit.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from omegaconf import OmegaConf

from adarl.config import AdarlConfig, EvalConfig
from adarl.redact import redact_config

if TYPE_CHECKING:
    import torch

    from adarl.rollout.codec import PromptCodec
    from adarl.types import WeightVersion

log = logging.getLogger("adarl")

RUN_CONFIG_FILE = "config.yaml"  # written by adarl.launch into every run directory
MODEL_DIR = "model"  # RUN_DIR/model: the run's final policy
EXPORTS_DIR = "exports"  # RUN_DIR/exports/step_NNNNNN: checkpoints exported later
EXPORT_INFO_FILE = "adarl_export.json"
EXPORT_CONFIG_FILE = "adarl_config.yaml"
_HF_CONFIG_FILE = "config.json"


class TargetError(ValueError):
    """A path that is not what a command needs; the message names it and the fix."""


def resolved_config_yaml(config: AdarlConfig) -> str:
    """The resolved config as YAML, secrets replaced (adarl/redact.py): `config.yaml`'s text."""
    plain = OmegaConf.to_container(OmegaConf.structured(config))
    return OmegaConf.to_yaml(OmegaConf.create(redact_config(plain)))


def read_run_config(path: str | Path) -> AdarlConfig:
    """A resolved config (`config.yaml`, `adarl_config.yaml`) as a validated `AdarlConfig`;
    unknown keys are refused by the schema."""
    path = Path(path)
    try:
        merged = OmegaConf.merge(OmegaConf.structured(AdarlConfig), OmegaConf.load(path))
        config = OmegaConf.to_object(merged)
    except Exception as error:  # OmegaConf's errors name the key; add the file
        raise TargetError(
            f"{path}: not a config this adarl reads ({type(error).__name__}: {error}); was it "
            "written by another adarl version? Fix or remove the key it names"
        ) from error
    assert isinstance(config, AdarlConfig)
    config.validate()
    return config


def generation_settings(evaluation: EvalConfig, codec: PromptCodec) -> dict[str, Any]:
    """`generation_config.json`'s values for a policy evaluated as `evaluation` says with the
    stop and pad tokens of `codec` (module docstring)."""
    stops = [int(token) for token in codec.sampling.stop_token_ids]
    settings: dict[str, Any] = {
        "pad_token_id": codec.pad_token_id,
        "do_sample": True,
        "temperature": evaluation.temperature,
        "top_p": 1.0,
        "top_k": 0,
        "max_new_tokens": evaluation.max_new_tokens,
    }
    if stops:
        settings["eos_token_id"] = stops[0] if len(stops) == 1 else stops
    bos = codec.tokenizer.bos_token_id
    if bos is not None:
        settings["bos_token_id"] = int(bos)
    return settings


class ExportablePolicy(Protocol):
    """What `write_model` writes: a policy that writes itself as an HF model directory (weights,
    config, tokenizer) and says its weight version. The learners (`LearnerGroup`: rank 0 writes,
    on its node) and a checkpoint's files (`CheckpointPolicy`) are both."""

    def export_hf(self, directory: str | Path) -> None: ...

    def weight_version(self) -> WeightVersion: ...


@dataclass(frozen=True)
class CheckpointPolicy:
    """A checkpoint's policy, read from its files (`read_policy_weights`): its weights on the
    run's model's architecture, built on the meta device (it only names and ties them)."""

    weights: dict[str, torch.Tensor]
    model_path: str  # the run's model: its config (architecture) and tokenizer files
    version: int  # the weight version the checkpoint's learners had

    def export_hf(self, directory: str | Path) -> None:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        from adarl.learner.weights import save_hf_model

        dtype = next(iter(self.weights.values())).dtype  # the training precision
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(
                AutoConfig.from_pretrained(self.model_path), dtype=dtype
            )
        save_hf_model(directory, model, self.weights, tokenizer_source=self.model_path)

    def weight_version(self) -> WeightVersion:
        from adarl.types import WeightVersion

        return WeightVersion(version=self.version, step=0)


def write_model(
    policy: ExportablePolicy,
    directory: str | Path,
    *,
    config: AdarlConfig,
    codec: PromptCodec,
    source: Mapping[str, Any],
) -> Path:
    """`policy` as a Hugging Face model directory at `directory`, replacing any there (module
    docstring). `source`: what it was exported from, for `adarl_export.json`. The policy writes
    its weights and tokenizer (from the learners, rank 0 on its node: on several nodes
    `directory` is on the run directory's shared file system); this process the rest."""
    from transformers import GenerationConfig

    directory = Path(directory).absolute()
    directory.parent.mkdir(parents=True, exist_ok=True)
    scratch = directory.parent / f".{directory.name}.tmp-{os.getpid()}"
    shutil.rmtree(scratch, ignore_errors=True)
    start = time.perf_counter()
    try:
        scratch.mkdir()  # here first, as checkpoints do: the learners fill what the driver made
        policy.export_hf(scratch)
        settings = generation_settings(config.eval, codec)
        GenerationConfig(**settings).save_pretrained(scratch)
        (scratch / EXPORT_CONFIG_FILE).write_text(resolved_config_yaml(config))
        info = {
            **source,
            "weight_version": policy.weight_version().version,
            "generation": settings,
            "exported_unix_s": time.time(),
        }
        (scratch / EXPORT_INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
        if directory.exists():  # an earlier export of this run (a resumed run ends again)
            trash = directory.parent / f".{directory.name}.trash-{os.getpid()}"
            os.replace(directory, trash)
            shutil.rmtree(trash)
        os.replace(scratch, directory)
    except BaseException:  # deliberate cleanup, then re-raise: no half-written directory stays
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    log.info("policy exported to %s in %.2f s", directory, time.perf_counter() - start)
    return directory


def export_source(
    run_dir: str | Path, checkpoint: Path | None, *, step: int, final: bool
) -> dict[str, Any]:
    """What a model is exported from, for `adarl_export.json`: the run, the checkpoint holding
    the same weights (and when it was saved: `export_is_current`), the step."""
    saved = None
    if checkpoint is not None:
        saved = json.loads((checkpoint / "manifest.json").read_text()).get("saved_unix_s")
    return {
        "run_dir": str(Path(run_dir).absolute()),
        "checkpoint": None if checkpoint is None else str(checkpoint.absolute()),
        "checkpoint_saved_unix_s": saved,
        "step": step,
        "final": final,
    }


def read_export_info(model_dir: str | Path) -> dict[str, Any] | None:
    """`adarl_export.json` of a model directory adarl wrote; None for any other model."""
    path = Path(model_dir) / EXPORT_INFO_FILE
    return json.loads(path.read_text()) if path.is_file() else None


# --------------------------------------------------------------------------------------------
# what a path given on the command line is


@dataclass(frozen=True)
class Target:
    """A path resolved: a run directory, one of its checkpoints, or a model directory.

    `checkpoint` is set for a checkpoint (and a run directory resolved to its latest);
    `model_dir` for a Hugging Face model directory (a run's `model/` included); `run_dir` when
    the path belongs to a run (its `config.yaml` describes it).
    """

    given: Path
    kind: str  # "run", "checkpoint" or "model"
    run_dir: Path | None = None
    checkpoint: Path | None = None
    model_dir: Path | None = None


_EXPECTED = (
    "give a run directory (RUN_DIR, holding config.yaml and checkpoints/), one of its "
    "checkpoints (RUN_DIR/checkpoints/step_NNNNNN) or a model directory (RUN_DIR/model)"
)


def is_model_dir(path: Path) -> bool:
    """A Hugging Face model directory: a `config.json` beside safetensors weights."""
    return (path / _HF_CONFIG_FILE).is_file() and any(path.glob("*.safetensors"))


def resolve_target(path: str | Path, *, prefer_model: bool) -> Target:
    """What `path` is, or `TargetError` naming it and the fix. A run directory resolves to its
    final model when `prefer_model` and it has one, else to its latest complete checkpoint."""
    from adarl.checkpoint import CHECKPOINTS_DIR, MANIFEST_FILE, find_latest_checkpoint

    given = Path(path).expanduser()
    if not given.exists():
        raise TargetError(f"{given}: no such file or directory; {_EXPECTED}")
    if not given.is_dir():
        raise TargetError(f"{given} is a file, not a directory; {_EXPECTED}")
    if (given / MANIFEST_FILE).is_file():
        run_dir = given.absolute().parent.parent  # RUN_DIR/checkpoints/step_NNNNNN
        return Target(given=given, kind="checkpoint", run_dir=run_dir, checkpoint=given)
    if given.name.startswith("step_") and given.parent.name == CHECKPOINTS_DIR:
        raise TargetError(
            f"{given} is an incomplete checkpoint (no {MANIFEST_FILE}: its save was "
            f"interrupted); pick another one in {given.parent} or give the run directory"
        )
    if is_model_dir(given):
        parent = given.absolute().parent
        run_dir = parent if (parent / RUN_CONFIG_FILE).is_file() else None
        return Target(given=given, kind="model", run_dir=run_dir, model_dir=given)
    if given.name == CHECKPOINTS_DIR and (given.parent / RUN_CONFIG_FILE).is_file():
        given = given.parent
    if not (given / RUN_CONFIG_FILE).is_file():
        raise TargetError(
            f"{given} is neither a run directory (no {RUN_CONFIG_FILE}), a checkpoint (no "
            f"{MANIFEST_FILE}) nor a model directory (no {_HF_CONFIG_FILE} with *.safetensors); "
            f"{_EXPECTED}"
        )
    model = given / MODEL_DIR
    if prefer_model and is_model_dir(model):
        return Target(given=given, kind="run", run_dir=given, model_dir=model)
    latest = find_latest_checkpoint(given / CHECKPOINTS_DIR)
    if latest is None:
        raise TargetError(
            f"run directory {given} has no complete checkpoint in {CHECKPOINTS_DIR}/"
            + ("" if not prefer_model else f" and no final model ({MODEL_DIR}/)")
            + ": the run stopped before its first save (checkpoint.every_steps), so there are "
            "no trained weights to read; resume it (python -m adarl.launch ... "
            f"hydra.run.dir={given}) or pick another run"
        )
    return Target(given=given, kind="run", run_dir=given, checkpoint=latest)


def run_config_of(target: Target) -> AdarlConfig:
    """The resolved config of the run a checkpoint belongs to (its `config.yaml`)."""
    run_dir = target.run_dir
    if run_dir is None or not (run_dir / RUN_CONFIG_FILE).is_file():
        raise TargetError(
            f"{target.given}: its run directory {run_dir} has no {RUN_CONFIG_FILE} (the resolved "
            "config the run wrote), which says how to rebuild the learner; copy the run's "
            f"{RUN_CONFIG_FILE} there"
        )
    return read_run_config(run_dir / RUN_CONFIG_FILE)


def default_export_dir(target: Target) -> Path:
    """`RUN_DIR/exports/step_NNNNNN` for a checkpoint of a run."""
    assert target.checkpoint is not None and target.run_dir is not None
    return target.run_dir / EXPORTS_DIR / target.checkpoint.name


# --------------------------------------------------------------------------------------------
# exporting a checkpoint


def export_checkpoint(checkpoint: str | Path, out: str | Path, *, config: AdarlConfig) -> Path:
    """Checkpoint `checkpoint` of a run configured by `config` as a model directory at `out`:
    the policy's weights read from its learners' files, no learner built (module docstring)."""
    from adarl.checkpoint import load_checkpoint
    from adarl.learner.checkpoint import read_policy_weights
    from adarl.models.loading import load_tokenizer, resolve_model_config
    from adarl.rollout.codec import build_prompt_codec

    checkpoint = Path(checkpoint)
    try:
        loaded = load_checkpoint(checkpoint)  # the manifest's inventory is checked here
    except (FileNotFoundError, ValueError) as error:  # a partial copy, another format
        raise TargetError(str(error)) from error
    learner_dir = loaded.directories.get("learner")
    if learner_dir is None:
        raise TargetError(
            f"checkpoint {checkpoint} has no learner piece (pieces: "
            f"{sorted([*loaded.objects, *loaded.directories])}): it was not written by a "
            "training run; give a RUN_DIR/checkpoints/step_NNNNNN of one"
        )
    model_path = resolve_model_config(config.model, task=config.task)
    codec = build_prompt_codec(config.task, config.rollout, load_tokenizer(model_path))
    state = loaded.objects.get("learner_state")
    policy = CheckpointPolicy(
        weights=read_policy_weights(learner_dir),
        model_path=model_path,
        # the weight version, for adarl_export.json
        version=int(state["version"]) if isinstance(state, Mapping) else 0,
    )
    source = export_source(
        checkpoint.absolute().parent.parent, checkpoint, step=loaded.step, final=False
    )
    return write_model(policy, out, config=config, codec=codec, source=source)


def export_is_current(model_dir: Path, checkpoint: Path) -> bool:
    """Whether `model_dir` is an export of `checkpoint` as it is now (not an older save of the
    same step)."""
    info = read_export_info(model_dir) if is_model_dir(model_dir) else None
    if info is None or info.get("checkpoint") != str(checkpoint.absolute()):
        return False
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    return bool(info.get("checkpoint_saved_unix_s") == manifest.get("saved_unix_s"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m adarl.export",
        description="Write a run's checkpoint as a Hugging Face model directory (weights, "
        "tokenizer, generation config), as every run does with its final policy.",
    )
    parser.add_argument(
        "target", help="a run directory (its latest checkpoint) or RUN_DIR/checkpoints/step_N"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="model directory (default RUN_DIR/exports/step_N)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        target = resolve_target(args.target, prefer_model=False)
        if target.checkpoint is None:
            raise TargetError(
                f"{target.given} is already a Hugging Face model directory: nothing to export; "
                f"evaluate it with python -m adarl.evaluate {target.given}"
            )
        config = run_config_of(target)
    except (TargetError, ValueError) as error:
        print(f"adarl.export: {error}", file=sys.stderr)
        return 2
    out = args.out if args.out is not None else default_export_dir(target)
    start = time.perf_counter()
    try:
        written = export_checkpoint(target.checkpoint, out, config=config)
    except TargetError as error:
        print(f"adarl.export: {error}", file=sys.stderr)
        return 2
    print(
        f"adarl.export: {target.checkpoint} -> {written} in {time.perf_counter() - start:.1f}s\n"
        f"  load it: AutoModelForCausalLM.from_pretrained('{written}'); evaluate it: "
        f"python -m adarl.evaluate {written}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
