"""One run per run directory: a second process is refused naming the first, a lock left by a
SIGKILLed run blocks neither a new run nor `resume=auto`, and `adarl.launch` refuses early."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from adarl.checkpoint import resolve_resume
from adarl.rundir import LOCK_FILE, RunDirInUseError, RunDirLock, read_lock_owner

# A second process: takes the lock (optionally saves a checkpoint), says LOCKED, then waits for
# a line on stdin and exits through the normal path (lock released), or is killed there.
HOLDER = textwrap.dedent(
    """
    import sys
    from adarl.rundir import RunDirLock

    run_dir, save = sys.argv[1], sys.argv[2] == "save"
    with RunDirLock(run_dir):
        if save:
            from adarl.checkpoint import CheckpointManager  # imports torch: only when needed

            CheckpointManager(run_dir, keep_last=None).save(1, {"cursor": 1})
        print("LOCKED", flush=True)
        sys.stdin.readline()
    print("RELEASED", flush=True)
    """
)


@contextmanager
def holder_process(run_dir: Path, *, save: bool = False) -> Iterator[subprocess.Popen[str]]:
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(run_dir), "save" if save else "nosave"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "LOCKED"
        yield child
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=30)


def test_a_second_process_on_the_same_run_dir_is_refused(tmp_path: Path) -> None:
    with holder_process(tmp_path) as child:
        with pytest.raises(RunDirInUseError) as refused:
            RunDirLock(tmp_path).acquire()
        message = str(refused.value)
        assert f"pid {child.pid} on host {socket.gethostname()}" in message
        assert "hydra.run.dir=PATH" in message  # the fix
        assert refused.value.owner is not None and refused.value.owner.pid == child.pid
        # The holder ends normally: the directory is free again and no longer names it.
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "RELEASED"
        assert child.wait(timeout=30) == 0
    assert read_lock_owner(tmp_path) is None
    with RunDirLock(tmp_path) as lock:
        assert lock.held
        owner = read_lock_owner(tmp_path)
        assert owner is not None and owner.pid == os.getpid()


def test_this_process_holding_the_lock_refuses_a_second_process(tmp_path: Path) -> None:
    with RunDirLock(tmp_path):
        other = subprocess.run(
            [sys.executable, "-c", HOLDER, str(tmp_path), "nosave"],
            input="\n",
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
    assert other.returncode != 0
    assert "LOCKED" not in other.stdout
    assert f"pid {os.getpid()} on host {socket.gethostname()}" in other.stderr


def test_a_lock_left_by_a_killed_run_blocks_neither_a_new_run_nor_resume(tmp_path: Path) -> None:
    with holder_process(tmp_path, save=True) as child:
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    stale = read_lock_owner(tmp_path)
    assert stale is not None and stale.pid == child.pid  # the file still names the dead run
    lock = RunDirLock(tmp_path)
    previous = lock.acquire()
    try:
        assert previous is not None and previous.pid == child.pid
        assert resolve_resume(tmp_path, "auto") == tmp_path / "checkpoints" / "step_000001"
    finally:
        lock.release()


def test_release_is_idempotent_and_a_held_lock_cannot_be_taken_twice(tmp_path: Path) -> None:
    lock = RunDirLock(tmp_path / "new_run")  # the directory is created
    assert lock.acquire() is None
    assert (tmp_path / "new_run" / LOCK_FILE).is_file()
    with pytest.raises(RuntimeError, match="already held"):
        lock.acquire()
    lock.release()
    lock.release()
    assert not lock.held


def test_launch_refuses_a_run_directory_in_use_before_writing_to_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with RunDirLock(run_dir):
        launch = subprocess.run(
            [sys.executable, "-m", "adarl.launch", f"hydra.run.dir={run_dir}"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"},
        )
    assert launch.returncode == 3, launch.stderr[-2000:]
    assert f"pid {os.getpid()} on host {socket.gethostname()}" in launch.stderr
    assert not (run_dir / "config.yaml").exists()
