"""Checkpoints under faults: writers SIGKILLed at random moments, shards gone missing, learner
shards the driver cannot see, and the learner group's own checks on one machine."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from adarl.checkpoint import (
    CheckpointManager,
    directory_inventory,
    find_latest_checkpoint,
    load_checkpoint,
)
from adarl.learner.group import _probe_shared, unverified_shards

# The child saves step after step: an object piece and a directory piece of 4 files of 256 KiB
# whose bytes encode the step, written in small chunks (so a kill can land inside any file).
WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from adarl.checkpoint import CheckpointManager

    run_dir, first = sys.argv[1], int(sys.argv[2])

    def shards(step):
        def write(path: Path) -> None:
            for rank in range(4):
                with (path / f"shard_{rank}.bin").open("wb") as handle:
                    for _ in range(64):
                        handle.write(bytes([step % 256]) * 4096)
                        handle.flush()
        return write

    manager = CheckpointManager(run_dir, keep_last=2)
    step = first
    while True:
        manager.save(step, {"state": {"step": step}, "learner": shards(step)})
        print(step, flush=True)
        step += 1
    """
)


def check_loadable(run_dir: Path) -> int:
    """The latest checkpoint loads, and every piece holds its own step: returns that step."""
    latest = find_latest_checkpoint(run_dir / "checkpoints")
    assert latest is not None
    checkpoint = load_checkpoint(latest)  # also verifies the manifest's file inventory
    step = checkpoint.step
    assert checkpoint.objects["state"] == {"step": step}
    for rank in range(4):
        data = (checkpoint.directories["learner"] / f"shard_{rank}.bin").read_bytes()
        assert data == bytes([step % 256]) * (64 * 4096)
    return step


@pytest.mark.slow
def test_writers_killed_at_random_moments_always_leave_the_latest_loadable(
    tmp_path: Path,
) -> None:
    rng = random.Random(16)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    last_step = 0
    for _ in range(4):
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), str(last_step + 1)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            assert writer.stdout is not None
            writer.stdout.readline()  # one save done: later kills land anywhere in the next ones
            time.sleep(rng.uniform(0.0, 0.3))
            writer.send_signal(signal.SIGKILL)
            assert writer.wait(timeout=30) == -signal.SIGKILL
        finally:
            if writer.poll() is None:
                writer.kill()
                writer.wait()
        step = check_loadable(tmp_path)
        assert step > last_step  # progress was kept, never rolled back
        last_step = step
    # The dead writers' scratch directories are removed by the next manager, nothing else.
    CheckpointManager(tmp_path, keep_last=2)
    names = {p.name for p in (tmp_path / "checkpoints").iterdir()}
    assert not [n for n in names if n.startswith(".")]
    assert check_loadable(tmp_path) == last_step


def test_a_checkpoint_with_a_missing_or_truncated_shard_is_refused(tmp_path: Path) -> None:
    def shards(path: Path) -> None:
        (path / "rank0").mkdir()
        (path / "rank0" / "optim.pt").write_bytes(b"x" * 100)
        (path / "rank1.pt").write_bytes(b"y" * 50)

    manager = CheckpointManager(tmp_path, keep_last=None)
    saved = manager.save(3, {"learner": shards, "state": 1})
    assert load_checkpoint(saved).directories["learner"] == saved / "learner"

    (saved / "learner" / "rank1.pt").write_bytes(b"y" * 49)
    with pytest.raises(FileNotFoundError, match=r"learner/rank1\.pt has 49 bytes, not 50"):
        load_checkpoint(saved)
    (saved / "learner" / "rank0" / "optim.pt").unlink()
    with pytest.raises(FileNotFoundError, match=r"learner/rank0/optim\.pt is missing"):
        load_checkpoint(saved)


def test_the_manifest_lists_each_shard_with_its_size(tmp_path: Path) -> None:
    def shards(path: Path) -> None:
        (path / "a.bin").write_bytes(b"1" * 7)
        (path / "sub").mkdir()
        (path / "sub" / "b.bin").write_bytes(b"")

    saved = CheckpointManager(tmp_path, keep_last=None).save(1, {"learner": shards})
    manifest = json.loads((saved / "manifest.json").read_text())
    assert manifest["files"] == {"learner": {"a.bin": 7, "sub/b.bin": 0}}
    assert directory_inventory(saved / "learner") == {"a.bin": 7, "sub/b.bin": 0}


def test_shards_a_rank_sees_but_the_driver_does_not_are_named() -> None:
    here = {"step_3/mp_rank_00_model_states.pt": 10, "step_3/zero_pp_rank_0_optim.pt": 5}
    rank0 = dict(here)
    rank1 = {"step_3/zero_pp_rank_1_optim.pt": 5}  # only on rank 1's node-local disk
    assert unverified_shards(here, [rank0, here]) == []
    assert unverified_shards(here, [rank0, rank1]) == [
        "learner rank 1's file step_3/zero_pp_rank_1_optim.pt is missing"
    ]
    assert unverified_shards({"f": 4}, [{"f": 5}]) == ["learner rank 0's file f has 4 bytes, not 5"]


def test_a_rank_that_does_not_share_the_directory_says_so_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    shared, elsewhere = tmp_path / "shared", tmp_path / "node_local"
    shared.mkdir()
    elsewhere.mkdir()
    (shared / ".adarl-shared-probe-t0").write_text("t0")
    assert _probe_shared(None, str(shared), "t0", 1)  # type: ignore[arg-type]
    assert (shared / ".adarl-shared-probe-t0-rank1").read_text() == "t0"
    # The same path on a node that does not share it: no probe there, nothing written.
    assert not _probe_shared(None, str(elsewhere), "t0", 1)  # type: ignore[arg-type]
    assert list(elsewhere.iterdir()) == []
    assert not _probe_shared(None, str(tmp_path / "absent"), "t0", 1)  # type: ignore[arg-type]
    assert not (tmp_path / "absent").exists()
