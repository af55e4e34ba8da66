"""CheckpointManager: round trip, atomicity under exceptions and SIGKILL, `latest`, retention,
RNG state, and the `resume` setting."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from adarl.allocator.allocator import CarriedGroup
from adarl.checkpoint import (
    CheckpointManager,
    capture_rng_state,
    find_latest_checkpoint,
    load_checkpoint,
    resolve_resume,
    restore_rng_state,
)
from adarl.config.checkpoint import CheckpointConfig
from adarl.types import (
    Completion,
    FinishReason,
    Group,
    Rollout,
    ScoredRollout,
    TaskExample,
)


def write_learner(path: Path) -> None:
    """Stands in for a component that saves its own directory (DeepSpeed's save_checkpoint)."""
    (path / "global_step3").mkdir()
    (path / "global_step3" / "model_states.pt").write_bytes(b"weights")
    (path / "latest").write_text("global_step3")


def saved_steps(run_dir: Path) -> list[str]:
    return sorted(entry.name for entry in (run_dir / "checkpoints").iterdir())


def test_pieces_round_trip(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep_last=3)
    carried = [TaskExample(prompt_id="p1", prompt="1+2=", answer="3")]
    path = manager.save(
        12,
        {
            "learner": write_learner,
            "allocator": {"counts": torch.tensor([3, 1]), "round": 2},
            "carried_groups": carried,
            "config": {"seed": 7, "allocator": {"name": "seq_balance"}},
        },
    )
    assert path == tmp_path / "checkpoints" / "step_000012"
    loaded = manager.load(path)
    assert loaded.step == 12
    assert set(loaded.objects) == {"allocator", "carried_groups", "config"}
    assert torch.equal(loaded.objects["allocator"]["counts"], torch.tensor([3, 1]))
    assert loaded.objects["allocator"]["round"] == 2
    assert loaded.objects["carried_groups"] == carried
    assert loaded.objects["config"] == {"seed": 7, "allocator": {"name": "seq_balance"}}
    assert loaded.directories == {"learner": path / "learner"}
    assert (path / "learner" / "global_step3" / "model_states.pt").read_bytes() == b"weights"
    assert (tmp_path / "checkpoints" / "latest").read_text() == "step_000012\n"


def test_latest_is_the_newest_save(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep_last=None)
    assert manager.latest() is None
    for step in (2, 4, 10):
        manager.save(step, {"cursor": step})
    assert manager.latest() == tmp_path / "checkpoints" / "step_000010"
    assert load_checkpoint(manager.latest()).objects["cursor"] == 10
    assert [path.name for path in manager.checkpoints()] == [
        "step_000002",
        "step_000004",
        "step_000010",
    ]


def test_an_exception_midway_leaves_latest_and_no_debris(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep_last=2)
    manager.save(1, {"cursor": 1})

    def failing_writer(path: Path) -> None:
        (path / "half_written.bin").write_bytes(b"x" * 100)
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        manager.save(2, {"cursor": 2, "learner": failing_writer})
    assert manager.latest() == tmp_path / "checkpoints" / "step_000001"
    assert saved_steps(tmp_path) == ["latest", "step_000001"]


@pytest.mark.slow
def test_a_process_killed_mid_save_never_corrupts_latest(tmp_path: Path) -> None:
    # The child saves step 1, then starts step 2: its learner writer writes part of a file,
    # reports, and waits; we SIGKILL it there (no cleanup code can run).
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from adarl.checkpoint import CheckpointManager

        def stuck_writer(path: Path) -> None:
            (path / "model_states.pt").write_bytes(b"partial")
            print("WRITING", flush=True)
            sys.stdin.readline()  # blocks until killed

        manager = CheckpointManager({str(tmp_path)!r}, keep_last=2)
        manager.save(1, {{"cursor": 1}})
        manager.save(2, {{"cursor": 2, "learner": stuck_writer}})
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "WRITING"
        tmp_dir = tmp_path / "checkpoints" / f".tmp-step_000002-{child.pid}"
        assert (tmp_dir / "learner" / "model_states.pt").exists()  # killed mid-write
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)

    assert find_latest_checkpoint(tmp_path / "checkpoints") == (
        tmp_path / "checkpoints" / "step_000001"
    )
    assert resolve_resume(tmp_path, "auto") == tmp_path / "checkpoints" / "step_000001"
    assert load_checkpoint(tmp_path / "checkpoints" / "step_000001").objects == {"cursor": 1}
    # The next run's manager deletes the dead writer's scratch directory, then saves normally.
    manager = CheckpointManager(tmp_path, keep_last=2)
    assert not tmp_dir.exists()
    manager.save(2, {"cursor": 2})
    assert saved_steps(tmp_path) == ["latest", "step_000001", "step_000002"]


def test_scratch_dirs_are_ignored_and_only_dead_writers_cleaned(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep_last=None)
    manager.save(3, {"cursor": 3})
    root = tmp_path / "checkpoints"
    dead_pid = 2**22 + 12345  # above Linux's pid_max default: never a live process
    live_pid = os.getppid()  # pytest's parent: alive for the whole test
    (root / f".tmp-step_000009-{dead_pid}").mkdir()
    (root / f".trash-step_000001-{dead_pid}").mkdir()
    (root / f".latest.tmp-{dead_pid}").write_text("step_000009\n")
    (root / f".tmp-step_000009-{live_pid}").mkdir()
    (root / "step_000010").mkdir()  # no manifest: not a checkpoint
    assert manager.latest() == root / "step_000003"

    CheckpointManager(tmp_path, keep_last=None)
    assert saved_steps(tmp_path) == [
        f".tmp-step_000009-{live_pid}",  # another live process's save in progress: kept
        "latest",
        "step_000003",
        "step_000010",
    ]


def test_latest_falls_back_to_the_newest_complete_checkpoint(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep_last=None)
    for step in (1, 2, 3):
        manager.save(step, {"cursor": step})
    root = tmp_path / "checkpoints"
    # A run resumed from step 1 and saved step 2 again: `latest` names it, not the higher step.
    (root / "latest").write_text("step_000002\n")
    assert manager.latest() == root / "step_000002"
    # A pointer naming a missing checkpoint (a crash between replace and pointer update).
    (root / "latest").write_text("step_000007\n")
    assert manager.latest() == root / "step_000003"
    (root / "latest").unlink()
    assert manager.latest() == root / "step_000003"


def test_retention_keeps_the_last_k(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep_last=2)
    for step in range(1, 6):
        manager.save(step, {"cursor": step})
    assert saved_steps(tmp_path) == ["latest", "step_000004", "step_000005"]
    assert manager.latest() == tmp_path / "checkpoints" / "step_000005"


def test_retention_never_deletes_latest_after_resuming_from_an_older_step(
    tmp_path: Path,
) -> None:
    manager = CheckpointManager(tmp_path, keep_last=None)
    for step in (1, 2, 3):
        manager.save(step, {"cursor": step})
    # The run resumed from step 1 (resume=PATH) and saves step 2 again: the new step 2 replaces
    # the old one, and keep_last=1 keeps it (it is `latest`) although step 3, left by the
    # abandoned attempt, has a higher step.
    manager = CheckpointManager(tmp_path, keep_last=1)
    manager.save(2, {"cursor": "second attempt"})
    assert manager.latest() == tmp_path / "checkpoints" / "step_000002"
    assert load_checkpoint(manager.latest()).objects == {"cursor": "second attempt"}
    assert saved_steps(tmp_path) == ["latest", "step_000002", "step_000003"]


def test_save_rejects_bad_input(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep_last=1)
    with pytest.raises(ValueError, match="step must be an int >= 0"):
        manager.save(-1, {"cursor": 0})
    with pytest.raises(ValueError, match="at least one piece"):
        manager.save(1, {})
    with pytest.raises(ValueError, match=r"piece name '\.\./x'"):
        manager.save(1, {"../x": 0})
    with pytest.raises(ValueError, match="keep_last=0"):
        CheckpointManager(tmp_path, keep_last=0)
    assert manager.latest() is None


def test_load_rejects_a_directory_that_is_not_a_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not a complete adarl checkpoint"):
        load_checkpoint(tmp_path)


# ---------------------------------------------------------------------------------------------
# loading is weights_only: no pickled code runs


class RunsCodeWhenUnpickled:
    """What a tampered checkpoint holds: unpickling it runs a command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


@dataclass(frozen=True)
class NotAnAdarlRecord:
    value: int


def test_loading_a_checkpoint_never_runs_pickled_code(tmp_path: Path) -> None:
    marker = tmp_path / "code_ran"
    path = CheckpointManager(tmp_path, keep_last=1).save(
        1, {"allocator": {"state": RunsCodeWhenUnpickled(marker)}}
    )
    with pytest.raises(ValueError, match=r"needs '(posix|os)\.system'.*does not unpickle"):
        load_checkpoint(path)
    assert not marker.exists()


def test_only_adarl_records_and_numpy_are_allowed_beyond_tensors(tmp_path: Path) -> None:
    path = CheckpointManager(tmp_path, keep_last=1).save(1, {"foreign": NotAnAdarlRecord(3)})
    with pytest.raises(ValueError, match="NotAnAdarlRecord"):
        load_checkpoint(path)


def test_allocator_records_numpy_and_rng_state_survive_weights_only_loading(
    tmp_path: Path,
) -> None:
    # The kinds of objects a BudgetAllocator's state_dict holds mid-step (pools of scored
    # rollouts, carried groups), numpy values, and the RNG states of the process.
    completion = Completion(
        token_ids=(3, 4), logprobs=(-0.5, -0.25), finish_reason=FinishReason.STOP, text="16"
    )
    scored = ScoredRollout(
        rollout=Rollout(
            request_id="r1",
            prompt_id="p1",
            prompt_token_ids=(1, 2),
            completion=completion,
            weight_version=4,
        ),
        reward=1.0,
    )
    group = Group(
        prompt_id="p1",
        rollouts=(scored,),
        advantages=(0.5,),
        pool_size=8,
        pool_positives=3,
        resolved=True,
    )
    allocator_state = {
        "examples": {"p1": TaskExample(prompt_id="p1", prompt="12+4=", answer="16")},
        "pools": {"p1": [scored]},
        "carry": [CarriedGroup(group=group, step=2, weight_version=4)],
        "last_metrics": {"sampling/x": np.float64(0.25), "sampling/n": np.int64(7)},
        "counts": np.arange(5, dtype=np.int32),
    }
    rng_state = capture_rng_state()
    path = CheckpointManager(tmp_path, keep_last=1).save(
        3, {"allocator": allocator_state, "rng": rng_state}
    )
    loaded = load_checkpoint(path).objects
    restored = loaded["allocator"]
    assert restored["examples"] == allocator_state["examples"]
    assert restored["pools"] == allocator_state["pools"]
    assert restored["carry"] == allocator_state["carry"]
    assert restored["pools"]["p1"][0].rollout.completion.finish_reason is FinishReason.STOP
    assert restored["last_metrics"] == {"sampling/x": 0.25, "sampling/n": 7}
    assert type(restored["last_metrics"]["sampling/x"]) is np.float64
    assert np.array_equal(restored["counts"], np.arange(5, dtype=np.int32))
    assert draw_after(loaded["rng"]) == draw_after(rng_state)


def draw_after(state: dict) -> tuple[float, float, list[float]]:
    restore_rng_state(state)
    return draw()


# ---------------------------------------------------------------------------------------------
# RNG state


def draw() -> tuple[float, float, list[float]]:
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


def test_rng_state_round_trips_through_a_checkpoint(tmp_path: Path) -> None:
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    draw()  # move every generator off its seed
    manager = CheckpointManager(tmp_path, keep_last=1)
    path = manager.save(5, {"rng": capture_rng_state()})
    expected = [draw(), draw()]

    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    assert draw() != expected[0]
    restore_rng_state(load_checkpoint(path).objects["rng"])
    assert [draw(), draw()] == expected


def test_restore_rng_state_rejects_a_foreign_dict() -> None:
    with pytest.raises(ValueError, match=r"lacks \['numpy', 'torch'\]"):
        restore_rng_state({"python": random.getstate()})


# ---------------------------------------------------------------------------------------------
# resume setting


def test_resolve_resume_never_and_auto(tmp_path: Path) -> None:
    assert resolve_resume(tmp_path, "never") is None
    assert resolve_resume(tmp_path, None) is None
    assert resolve_resume(tmp_path, "auto") is None  # first start: nothing to resume
    manager = CheckpointManager(tmp_path, keep_last=None)
    manager.save(4, {"cursor": 4})
    manager.save(8, {"cursor": 8})
    assert resolve_resume(tmp_path, "AUTO") == tmp_path / "checkpoints" / "step_000008"
    assert resolve_resume(tmp_path, "never") is None


def test_resolve_resume_paths(tmp_path: Path) -> None:
    old_run = tmp_path / "old_run"
    manager = CheckpointManager(old_run, keep_last=None)
    manager.save(4, {"cursor": 4})
    manager.save(8, {"cursor": 8})
    new_run = tmp_path / "new_run"
    step_4 = old_run / "checkpoints" / "step_000004"
    assert resolve_resume(new_run, str(step_4)) == step_4
    assert resolve_resume(new_run, old_run) == old_run / "checkpoints" / "step_000008"
    assert resolve_resume(new_run, old_run / "checkpoints") == (
        old_run / "checkpoints" / "step_000008"
    )


def test_resolve_resume_errors_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such file or directory; use resume=auto"):
        resolve_resume(tmp_path, str(tmp_path / "missing"))
    incomplete = tmp_path / "checkpoints" / "step_000003"
    incomplete.mkdir(parents=True)
    with pytest.raises(ValueError, match="incomplete checkpoint"):
        resolve_resume(tmp_path, str(incomplete))
    empty = tmp_path / "empty_run"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="no complete checkpoint in it"):
        resolve_resume(tmp_path, str(empty))
    with pytest.raises(ValueError, match="resume is empty"):
        resolve_resume(tmp_path, " ")


def test_checkpoint_config_validation_names_the_key() -> None:
    CheckpointConfig().validate()
    with pytest.raises(ValueError, match=r"checkpoint\.every_steps=-1"):
        CheckpointConfig(every_steps=-1).validate()
    with pytest.raises(ValueError, match=r"checkpoint\.keep_last=0"):
        CheckpointConfig(keep_last=0).validate()
