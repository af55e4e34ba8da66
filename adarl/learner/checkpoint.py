"""A learner rank's checkpoint I/O: its DeepSpeed state (model, optimizer, LR schedule) on disk.

DeepSpeed's own format under `directory/tag/` (one optimizer partition per rank, the module from
rank 0 at ZeRO 0-2 or every rank's partitions at ZeRO-3) plus its `latest` file; the learner
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


def load_engine_weights(engine: Any, directory: str, *, tag: str) -> None:
    """Only the policy's weights from what `save_engine_state` wrote, saved by any number of
    ranks (`adarl.export`: one learner exports a checkpoint of N). DeepSpeed's module-only load
    reads the full module saved by rank 0 at ZeRO 0-2 and, at ZeRO-3, rebuilds the fp32 weights
    from every rank's partitions (cast to the training precision). The optimizer, scheduler and
    step counters are left as they are."""
    path, _ = engine.load_checkpoint(
        directory,
        tag=tag,
        load_module_only=True,
        load_optimizer_states=False,
        load_lr_scheduler_states=False,
    )
    if path is None:
        raise FileNotFoundError(f"no DeepSpeed checkpoint {tag!r} under {directory}")


# Written by DeepSpeed next to the tagged directories: the tag of the newest save.
CHECKPOINT_LATEST_FILE = "latest"


def latest_tag(directory: str | Path) -> str:
    """The tag of the newest checkpoint under `directory` (DeepSpeed's `latest` file)."""
    latest = Path(directory) / CHECKPOINT_LATEST_FILE
    if not latest.is_file():
        raise FileNotFoundError(f"no {CHECKPOINT_LATEST_FILE!r} file in {directory}")
    return latest.read_text().strip()
