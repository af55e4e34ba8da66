"""One run per run directory: an exclusive lock on `RUN_DIR/.adarl.lock`, held for the whole run.

    launch.main ─► RunDirLock(run_dir).acquire() ─► config.yaml, metrics, checkpoints, W&B ...
                          │                                            ─► release() (or death)
                          └─ held by another live process: RunDirInUseError naming its pid and host

The lock is `fcntl.flock` on an open descriptor of the lock file. The kernel drops it when the
holder's process dies for any reason (`kill -9` included), so a lock left by a dead run never
blocks the next one, nor `checkpoint.resume=auto`; the file itself stays, holding the last
owner's pid, host and start time, which a refused run names. flock works across hosts on local
disks and NFSv4; a filesystem that does not implement it makes the run stop with a message
(put the run directory elsewhere).

Hydra itself writes `RUN_DIR/.hydra/` and `RUN_DIR/launch.log` before `main()` runs; everything
adarl writes comes after the lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType

log = logging.getLogger(__name__)

LOCK_FILE = ".adarl.lock"


@dataclass(frozen=True)
class LockOwner:
    """Who holds (or last held) a run directory."""

    pid: int
    host: str
    started_unix_s: float
    command: str

    @staticmethod
    def this_process() -> LockOwner:
        return LockOwner(
            pid=os.getpid(),
            host=socket.gethostname(),
            started_unix_s=time.time(),
            command=" ".join(sys.argv)[:500],
        )

    def describe(self) -> str:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started_unix_s))
        return f"pid {self.pid} on host {self.host} (started {started}: {self.command})"


class RunDirInUseError(RuntimeError):
    """Another live run holds the run directory."""

    def __init__(self, run_dir: Path, owner: LockOwner | None) -> None:
        self.run_dir, self.owner = run_dir, owner
        who = owner.describe() if owner is not None else "a process that has not written its pid"
        super().__init__(
            f"run directory {run_dir} is in use by another adarl run: {who}. Two runs in one "
            "directory interleave their checkpoints, metrics and W&B logs. Wait for that run to "
            "end (or stop it; a resumed run then continues with checkpoint.resume=auto), or "
            "start this run in another directory with hydra.run.dir=PATH"
        )


class RunDirLock:
    """Exclusive ownership of a run directory for the life of this object (or of the process).

    `acquire()` creates the directory if needed, takes the lock or raises `RunDirInUseError`,
    and records this process as the owner; it returns the previous owner when it took over a
    lock left by a dead run (None otherwise). `release()` (or leaving the `with` block) gives it
    back; the lock file stays, so the lock always lives on the same inode.
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> LockOwner | None:
        if self._fd is not None:
            raise RuntimeError(f"{self.path}: this RunDirLock is already held")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            previous = _read_owner(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RunDirInUseError(self.run_dir, _read_owner(fd)) from None
            except OSError as error:
                raise OSError(
                    error.errno,
                    f"cannot lock {self.path} ({error.strerror}): the run directory's filesystem "
                    "does not support flock; set hydra.run.dir to a local disk or an NFSv4 mount",
                ) from error
            _write_owner(fd, LockOwner.this_process())
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        if previous is None or previous.pid == os.getpid():
            return None
        log.info("took over %s from a run that is gone: %s", self.path, previous.describe())
        return previous

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)  # "no owner": a later refusal never names a finished run
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> RunDirLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def read_lock_owner(run_dir: str | Path) -> LockOwner | None:
    """The owner recorded in `run_dir`'s lock file (current or last), or None."""
    path = Path(run_dir) / LOCK_FILE
    with contextlib.suppress(FileNotFoundError):
        fd = os.open(path, os.O_RDONLY)
        try:
            return _read_owner(fd)
        finally:
            os.close(fd)
    return None


def _read_owner(fd: int) -> LockOwner | None:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = b""
    while chunk := os.read(fd, 65536):
        raw += chunk
    try:
        return LockOwner(**json.loads(raw))
    except (ValueError, TypeError):
        return None  # empty (released, or not yet written) or not ours


def _write_owner(fd: int, owner: LockOwner) -> None:
    data = (json.dumps(asdict(owner)) + "\n").encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)
    os.fsync(fd)
