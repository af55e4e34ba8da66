"""Atomic, generic checkpoints: every piece of a run's state in one directory per step.

    RUN_DIR/checkpoints/
        latest                    "step_000012": the checkpoint a resume continues from
        step_000012/
            manifest.json         written last: step, piece names and kinds, and every file of
                                  each directory piece with its size
            allocator.pt          an object piece (torch.save of plain records / tensors)
            learner/              a directory piece, filled by its writer (e.g. DeepSpeed)
        .tmp-step_000014-<pid>/   a save in progress (or interrupted): never read, cleaned later

A save writes everything into a private tmp dir, fsyncs it, renames it to `step_NNNNNN` in one
`os.replace`, then replaces the `latest` pointer the same way. A crash at any point leaves the
previous `latest` intact (tested by SIGKILLing writers mid-piece and at random moments);
`latest()` ignores tmp dirs and the next `CheckpointManager` deletes them.

A directory piece's writer returns only once what it wrote is verified (the learner group checks
that every rank's shards are visible here, adarl/learner/group.py), and the manifest, written
after every piece, lists each file of each directory piece with its size. Loading checks that
list, so a checkpoint whose shards went missing (a node-local disk, a partial copy) is refused
with the missing file named rather than half-loaded.

Loading never runs arbitrary pickled code: object pieces are read with `torch.load(...,
weights_only=True)`, which rebuilds only tensors, plain containers and scalars, plus the globals
`load_checkpoint` allows explicitly: dataclasses and enums defined in adarl's own modules (the
typed records of adarl/types.py and the allocator's state) and numpy arrays and scalars (RNG
states). A piece that needs anything else fails to load with a message naming the global.

What a piece is: a callable `write(path)` that fills the directory `path` (for state that saves
itself, e.g. `lambda path: engine.save_checkpoint(str(path))`), or any other object, saved with
`torch.save` (allocator `state_dict()`, data cursor, RNG states, carried-over groups, config).
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import json
import os
import random
import re
import shutil
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np
import torch

CHECKPOINTS_DIR = "checkpoints"
LATEST_FILE = "latest"
MANIFEST_FILE = "manifest.json"
_FORMAT = "adarl-checkpoint"
_FORMAT_VERSION = 1
_STEP_DIR = re.compile(r"^step_(\d+)$")
_PIECE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
# Scratch entries of a writer process: `.tmp-step_000012-<pid>` (a save in progress),
# `.trash-step_000012-<pid>` (being deleted), `.latest.tmp-<pid>` (the pointer being replaced).
_SCRATCH = re.compile(r"^\.(?:tmp-step_\d+|trash-step_\d+|latest\.tmp)-(\d+)$")

# A directory writer `write(path)`, or any picklable object (torch.save).
Piece: TypeAlias = "Callable[[Path], None] | object"


@dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint: `objects[name]` for object pieces, `directories[name]` for the
    directories their writers filled (hand these to the component that reads them)."""

    path: Path
    step: int
    objects: dict[str, Any]
    directories: dict[str, Path]


def step_dir_name(step: int) -> str:
    return f"step_{step:06d}"


class CheckpointManager:
    """Saves, finds and prunes the checkpoints of one run (one writer per run directory).

    `keep_last`: how many of the most recent checkpoints (by step) survive a save; None keeps
    all. The checkpoint `latest` points to is never deleted.
    """

    def __init__(self, run_dir: str | Path, *, keep_last: int | None) -> None:
        if keep_last is not None and keep_last < 1:
            raise ValueError(
                f"keep_last={keep_last} must be >= 1 (or None to keep every checkpoint)"
            )
        self.root = Path(run_dir) / CHECKPOINTS_DIR
        self.keep_last = keep_last
        self._remove_stale_scratch_dirs()

    def save(self, step: int, pieces: Mapping[str, Piece]) -> Path:
        """Write `pieces` as checkpoint `step` atomically; returns its directory."""
        if isinstance(step, bool) or not isinstance(step, int | np.integer) or step < 0:
            raise ValueError(f"checkpoint step must be an int >= 0, got {step!r}")
        step = int(step)
        if not pieces:
            raise ValueError("save() needs at least one piece (name -> writer or object)")
        for name in pieces:
            if not _PIECE_NAME.match(name) or name == MANIFEST_FILE:
                raise ValueError(
                    f"piece name {name!r} must be a plain file name (letters, digits, _ . -), "
                    f"not {MANIFEST_FILE!r}"
                )
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.root / step_dir_name(step)
        tmp = self.root / f".tmp-{final.name}-{os.getpid()}"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        try:
            kinds: dict[str, str] = {}
            files: dict[str, dict[str, int]] = {}
            for name, piece in pieces.items():
                if callable(piece):
                    (tmp / name).mkdir()
                    piece(tmp / name)
                    kinds[name] = "directory"
                    files[name] = directory_inventory(tmp / name)
                else:
                    torch.save(piece, tmp / f"{name}.pt")
                    kinds[name] = "object"
            manifest = {
                "format": _FORMAT,
                "version": _FORMAT_VERSION,
                "step": step,
                "pieces": kinds,
                "files": files,
                "saved_unix_s": time.time(),
            }
            (tmp / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
            _fsync_tree(tmp)
            if final.exists():  # saved this step before (e.g. periodic + final save)
                self._discard(final)
            os.replace(tmp, final)
            _fsync_dir(self.root)
        except BaseException:
            # Deliberate cleanup, then re-raise: a failed save leaves `latest` as it was.
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _atomic_write_text(self.root / LATEST_FILE, final.name + "\n")
        self._prune(keep=final)
        return final

    def latest(self) -> Path | None:
        """The checkpoint to resume from, or None when this run has none."""
        return find_latest_checkpoint(self.root)

    def checkpoints(self) -> list[Path]:
        """Complete checkpoints, oldest step first."""
        return _complete_checkpoints(self.root)

    def load(self, path: str | Path) -> Checkpoint:
        return load_checkpoint(path)

    def _prune(self, *, keep: Path) -> None:
        if self.keep_last is None:
            return
        complete = self.checkpoints()
        for path in complete[: max(0, len(complete) - self.keep_last)]:
            if path != keep:
                self._discard(path)

    def _discard(self, path: Path) -> None:
        # Rename first: a half-deleted directory must never look like a complete checkpoint.
        trash = self.root / f".trash-{path.name}-{os.getpid()}"
        os.replace(path, trash)
        _fsync_dir(self.root)
        shutil.rmtree(trash)

    def _remove_stale_scratch_dirs(self) -> None:
        if not self.root.is_dir():
            return
        for entry in self.root.iterdir():
            match = _SCRATCH.match(entry.name)
            if match is None:
                continue
            pid = int(match.group(1))
            if pid != os.getpid() and _process_alive(pid):
                continue  # another live process is writing here: not ours to delete
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


def find_latest_checkpoint(checkpoints_dir: str | Path) -> Path | None:
    """The checkpoint `latest` names if it is complete, else the complete one with the highest
    step (the pointer can lag only if a crash hit between a save and its pointer update)."""
    root = Path(checkpoints_dir)
    pointer = root / LATEST_FILE
    if pointer.is_file():
        named = root / pointer.read_text().strip()
        if _is_complete(named):
            return named
    complete = _complete_checkpoints(root)
    return complete[-1] if complete else None


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Read a checkpoint directory: object pieces loaded (onto CPU), directory pieces as paths."""
    path = Path(path)
    manifest_path = path / MANIFEST_FILE
    if not manifest_path.is_file():
        raise FileNotFoundError(
            f"{path} is not a complete adarl checkpoint (no {MANIFEST_FILE}); pick a "
            f"{CHECKPOINTS_DIR}/step_NNNNNN directory that has one"
        )
    manifest = json.loads(manifest_path.read_text())
    if manifest.get("format") != _FORMAT or manifest.get("version") != _FORMAT_VERSION:
        raise ValueError(
            f"{manifest_path}: format {manifest.get('format')!r} version "
            f"{manifest.get('version')!r}; this adarl reads {_FORMAT!r} version {_FORMAT_VERSION}"
        )
    objects: dict[str, Any] = {}
    directories: dict[str, Path] = {}
    for name, kind in manifest["pieces"].items():
        if kind == "object":
            objects[name] = _load_object(path / f"{name}.pt")
        elif kind == "directory":
            # Manifests written before inventories were recorded have none to check.
            _check_inventory(path, name, manifest.get("files", {}).get(name))
            directories[name] = path / name
        else:
            raise ValueError(f"{manifest_path}: piece {name!r} has unknown kind {kind!r}")
    return Checkpoint(
        path=path, step=int(manifest["step"]), objects=objects, directories=directories
    )


def resolve_resume(run_dir: str | Path, resume: str | Path | None) -> Path | None:
    """The checkpoint a run starts from, per the `resume` setting.

    "never" (or None): start fresh. "auto": the latest complete checkpoint in
    `run_dir/checkpoints`, or None when there is none (a first start). Anything else is a path:
    a checkpoint directory, or a run/checkpoints directory whose latest checkpoint is used.
    """
    if resume is None:
        return None
    setting = str(resume).strip()
    if setting.lower() == "never":
        return None
    if setting.lower() == "auto":
        return find_latest_checkpoint(Path(run_dir) / CHECKPOINTS_DIR)
    if not setting:
        raise ValueError("resume is empty; use resume=auto, resume=never or resume=PATH")
    path = Path(setting).expanduser()
    if not path.exists():
        raise FileNotFoundError(
            f"resume={setting}: no such file or directory; use resume=auto (continue this run "
            "directory's latest checkpoint), resume=never, or the path of a checkpoint "
            f"(RUN_DIR/{CHECKPOINTS_DIR}/step_NNNNNN)"
        )
    if _is_complete(path):
        return path
    if _SCRATCH.match(path.name) or _STEP_DIR.match(path.name):
        raise ValueError(
            f"resume={setting} is an incomplete checkpoint (no {MANIFEST_FILE}: its save was "
            "interrupted); pick an earlier checkpoint or resume=auto"
        )
    for checkpoints_dir in (path / CHECKPOINTS_DIR, path):
        latest = find_latest_checkpoint(checkpoints_dir)
        if latest is not None:
            return latest
    raise FileNotFoundError(
        f"resume={setting}: no complete checkpoint in it or in its {CHECKPOINTS_DIR}/; point "
        f"it at RUN_DIR, RUN_DIR/{CHECKPOINTS_DIR} or RUN_DIR/{CHECKPOINTS_DIR}/step_NNNNNN"
    )


# numpy globals an object piece may need (arrays: numpy's RNG state; scalars: metric values), by
# the name the pickle records (numpy 2 moved `numpy.core` to `numpy._core`).
_NUMPY_GLOBALS = {
    f"{prefix}.{name}"
    for prefix in ("numpy.core.multiarray", "numpy._core.multiarray")
    for name in ("_reconstruct", "scalar")
} | {"numpy.ndarray", "numpy.dtype"}
_ADARL_GLOBAL = re.compile(r"^adarl(?:\.[A-Za-z_][A-Za-z0-9_]*)+$")


def _load_object(path: Path) -> Any:
    """`torch.load(weights_only=True)` with exactly the extra globals this piece needs, each
    checked against the policy in the module docstring before it is allowed."""
    with path.open("rb") as file:
        needed = torch.serialization.get_unsafe_globals_in_checkpoint(file)
    allowed = [_allowed_global(name, path) for name in needed]
    if any(name.endswith(".dtype") for name in needed):
        # A dtype is rebuilt as an instance of its class (numpy.dtypes.UInt32DType, ...), which
        # the pickle does not name as a global: allow numpy's dtype classes with numpy.dtype.
        import numpy.dtypes

        allowed += [
            cls
            for cls in vars(numpy.dtypes).values()
            if isinstance(cls, type) and issubclass(cls, np.dtype)
        ]
    with torch.serialization.safe_globals(allowed):
        return torch.load(path, map_location="cpu", weights_only=True)


def _allowed_global(name: str, path: Path) -> Any:
    module_name, _, attribute = name.rpartition(".")
    allowed: Any = None
    if name in _NUMPY_GLOBALS:
        allowed = getattr(importlib.import_module(module_name), attribute)
    elif _ADARL_GLOBAL.match(module_name) and attribute.isidentifier():
        candidate = getattr(importlib.import_module(module_name), attribute, None)
        is_record = dataclasses.is_dataclass(candidate) and isinstance(candidate, type)
        if is_record or (isinstance(candidate, type) and issubclass(candidate, enum.Enum)):
            allowed = candidate
    if allowed is None:
        raise ValueError(
            f"{path}: the checkpoint needs {name!r}, which adarl does not unpickle (only tensors, "
            "plain containers and scalars, numpy arrays, and adarl's own dataclasses and enums). "
            "If adarl wrote it, the component that owns this piece put another kind of object in "
            "its state_dict: store plain data there instead"
        )
    return allowed


# --------------------------------------------------------------------------------------------
# random-number-generator state of the calling process


def capture_rng_state() -> dict[str, Any]:
    """The python, numpy (global) and torch RNG states of this process, for a checkpoint piece.

    CUDA generators are included only if CUDA is already initialised here: querying them would
    otherwise start a CUDA context (GPU memory) in a process that never used the GPU.
    """
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["torch_cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: Mapping[str, Any]) -> None:
    """Put back what `capture_rng_state` returned (in this or a new process)."""
    missing = {"python", "numpy", "torch"} - set(state)
    if missing:
        raise ValueError(
            f"RNG state lacks {sorted(missing)}; pass the dict capture_rng_state() returned"
        )
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    cuda_states = state.get("torch_cuda")
    if cuda_states is not None:
        if not torch.cuda.is_available():
            warnings.warn(
                "the checkpoint holds CUDA RNG states but CUDA is unavailable here; "
                "GPU sampling will not continue the saved random streams",
                stacklevel=2,
            )
        elif len(cuda_states) != torch.cuda.device_count():
            raise ValueError(
                f"the checkpoint holds RNG states of {len(cuda_states)} CUDA devices but this "
                f"process sees {torch.cuda.device_count()}; resume with the same "
                "CUDA_VISIBLE_DEVICES as the saving run"
            )
        else:
            torch.cuda.set_rng_state_all(cuda_states)


# --------------------------------------------------------------------------------------------
# helpers


def directory_inventory(root: str | Path) -> dict[str, int]:
    """Every regular file under `root`: path relative to it (POSIX form) -> size in bytes."""
    root = Path(root)
    inventory = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory) / name
            if path.is_file() and not path.is_symlink():
                inventory[path.relative_to(root).as_posix()] = path.stat().st_size
    return dict(sorted(inventory.items()))


def _check_inventory(checkpoint: Path, piece: str, recorded: Mapping[str, int] | None) -> None:
    if recorded is None:
        return
    present = directory_inventory(checkpoint / piece)
    for relative, size in recorded.items():
        found = present.get(relative)
        if found != size:
            state = "is missing" if found is None else f"has {found} bytes, not {size}"
            raise FileNotFoundError(
                f"checkpoint {checkpoint} is incomplete: {piece}/{relative} {state} (the "
                "manifest lists every file the save verified). Was it copied partially, or "
                "written to a disk this machine does not share? Resume from an earlier "
                f"checkpoint (resume=PATH) or restore the file"
            )


def _is_complete(path: Path) -> bool:
    return path.is_dir() and (path / MANIFEST_FILE).is_file()


def _complete_checkpoints(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    found = []
    for entry in root.iterdir():
        match = _STEP_DIR.match(entry.name)
        if match is not None and _is_complete(entry):
            found.append((int(match.group(1)), entry))
    return [path for _, path in sorted(found)]


def _fsync_tree(root: Path) -> None:
    """Flush every file and directory under `root` to disk (bottom-up), so the rename that
    publishes `root` can never expose files whose data is still only in the page cache."""
    for directory, _, files in os.walk(root, topdown=False):
        for name in files:
            file_path = os.path.join(directory, name)
            if os.path.islink(file_path):
                continue
            descriptor = os.open(file_path, os.O_RDONLY)
            try:
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
        _fsync_dir(Path(directory))


def _fsync_dir(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with tmp.open("w") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True
