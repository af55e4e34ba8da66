"""A learner rank's checkpoint I/O: its DeepSpeed state (model, optimizer, LR schedule) on disk.

DeepSpeed's own format under `directory/tag/` (one optimizer partition per rank, the module from
rank 0 at ZeRO 0-2 or every rank's partitions at ZeRO-3) plus its `latest` file, which
`read_policy_weights` reads without an engine; the learner
group's own state (weight version, step, fault counters) rides in DeepSpeed's `client_state`
under `CLIENT_STATE_KEY`. The run's checkpoint (adarl/checkpoint.py) holds these directories.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# The key of adarl's state inside DeepSpeed's client_state: part of the on-disk format.
CLIENT_STATE_KEY = "adarl"


def save_engine_state(
    engine: Any, directory: str, *, tag: str, client_state: dict[str, Any]
) -> None:
    """DeepSpeed state (model, optimizer, LR scheduler) of this rank under directory/tag, with
    `client_state` beside it. Every rank calls it and writes its own optimizer partition: on
    several nodes `directory` must be on a filesystem all of them share."""
    engine.save_checkpoint(directory, tag=tag, client_state={CLIENT_STATE_KEY: client_state})


def load_engine_state(engine: Any, directory: str, *, tag: str) -> dict[str, Any]:
    """Restore what `save_engine_state` wrote into `engine`; returns its `client_state`."""
    path, client_state = engine.load_checkpoint(
        directory, tag=tag, load_optimizer_states=True, load_lr_scheduler_states=True
    )
    if path is None:
        raise FileNotFoundError(f"no DeepSpeed checkpoint {tag!r} under {directory}")
    return dict((client_state or {}).get(CLIENT_STATE_KEY, {}))


def read_policy_weights(directory: str | Path, *, tag: str | None = None) -> dict[str, Any]:
    """The policy's weights, HF-named, at the training precision, read from what
    `save_engine_state` wrote under `directory/tag` (the latest tag by default) by any number of
    ranks: no engine, no process group, no learner (`adarl.export`). At ZeRO 0-2 they are the
    module rank 0 saved; at ZeRO-3 DeepSpeed's `zero_to_fp32` rebuilds the fp32 weights from
    every rank's optimizer partitions, cast to the training precision (the bf16 weights a bf16
    run trains are those fp32 masters rounded). Tied weights appear under each name."""
    import torch

    tag = tag or latest_tag(directory)
    saved = Path(directory) / tag
    files = sorted(saved.glob("*model_states.pt"))
    if not files:
        raise FileNotFoundError(f"no DeepSpeed model states under {saved}")
    # DeepSpeed's own files (pickled configs beside the tensors), written by this run.
    states = torch.load(files[0], map_location="cpu", weights_only=False)
    config = states["ds_config"]
    if config["zero_optimization"]["stage"] != 3:
        return dict(states["module"])
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    dtype = torch.bfloat16 if config.get("bf16", {}).get("enabled") else torch.float32
    fp32 = get_fp32_state_dict_from_zero_checkpoint(str(directory), tag=tag)
    return {name: tensor.to(dtype) for name, tensor in fp32.items()}


# The KL reference's weights once it has been reset to the policy (ProRL's reset): its
# parameters' full tensors, written by rank 0 beside the engine's state of the same tag.
REFERENCE_STATE_FILE = "reference.pt"


def _gathered(params: list[Any], *, partitioned: bool, modifier_rank: int | None) -> Any:
    import contextlib

    if not partitioned:
        return contextlib.nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(params, modifier_rank=modifier_rank)


def save_reference_state(
    reference: Any, directory: str, *, tag: str, rank: int, partitioned: bool
) -> None:
    """The reference module's parameters (gathered when ZeRO-3 `partitioned` them; every rank
    takes part) into directory/tag/`REFERENCE_STATE_FILE`, written by rank 0."""
    import torch

    named = dict(reference.named_parameters())
    with _gathered(list(named.values()), partitioned=partitioned, modifier_rank=None):
        if rank == 0:
            state = {name: p.detach().to("cpu", copy=True) for name, p in named.items()}
            torch.save(state, Path(directory) / tag / REFERENCE_STATE_FILE)


def load_reference_state(reference: Any, directory: str, *, tag: str, partitioned: bool) -> bool:
    """Load what `save_reference_state` wrote for `tag` into the reference module, if anything:
    whether it did (a run whose reference was never reset saved none and keeps the reference
    it started with). Every rank reads the file (ZeRO 0-2: each holds a full copy)."""
    import torch

    path = Path(directory) / tag / REFERENCE_STATE_FILE
    if not path.is_file():
        return False
    state = torch.load(path, map_location="cpu")
    named = dict(reference.named_parameters())
    if state.keys() != named.keys():
        raise RuntimeError(f"{path} holds other parameters than the KL reference model")
    with torch.no_grad(), _gathered(list(named.values()), partitioned=partitioned, modifier_rank=0):
        for name, param in named.items():
            param.copy_(state[name])
    return True


# Written by DeepSpeed next to the tagged directories: the tag of the newest save.
CHECKPOINT_LATEST_FILE = "latest"


def latest_tag(directory: str | Path) -> str:
    """The tag of the newest checkpoint under `directory` (DeepSpeed's `latest` file)."""
    latest = Path(directory) / CHECKPOINT_LATEST_FILE
    if not latest.is_file():
        raise FileNotFoundError(f"no {CHECKPOINT_LATEST_FILE!r} file in {directory}")
    return latest.read_text().strip()
