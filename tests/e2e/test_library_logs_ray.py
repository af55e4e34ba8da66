"""On a local Ray cluster: an actor's library output goes to `<dir>/<Class>-<pid>.log`, adarl's
lines to Ray's worker log (which Ray forwards to the driver's console), and the errors of a
method that raises and of an actor that dies name the file (adarl/cluster.py).

The actor is a scripted `FakeEngine`; the noise is made inside it through Ray's generic
`__ray_call__`, the way vLLM's and DeepSpeed's code would make it there."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray

from adarl.cluster import (
    ensure_ray,
    library_log_file,
    library_log_note,
    set_library_log_dir,
    spawn_actor,
)
from adarl.models.tokenizer import build_char_tokenizer
from adarl.rollout.fake import FakeEngine, FakePrompt

pytestmark = pytest.mark.slow


@pytest.fixture
def log_dir(tmp_path: Path) -> Iterator[Path]:
    ensure_ray(num_cpus=2)
    set_library_log_dir(tmp_path / "logs")
    try:
        yield tmp_path / "logs"
    finally:
        set_library_log_dir(None)


def ray_worker_err(pid: int) -> Path:
    logs = Path(ray._private.worker.global_worker.node.get_logs_dir_path())
    (path,) = logs.glob(f"worker-*-{pid}.err")
    return path


def test_output_goes_to_the_file_adarl_lines_to_ray_and_errors_name_the_file(
    log_dir: Path,
) -> None:
    # Defined here, so that Ray ships them by value (a test module is not importable in a worker).
    def make_noise(_engine: FakeEngine) -> int:
        import ctypes
        import logging
        import warnings

        ctypes.CDLL(None).write(2, b"C-LEVEL NUMA binding warning\n", 29)
        warnings.warn("reduce_op is deprecated", FutureWarning, stacklevel=1)
        logging.getLogger("adarl.rollout.fake").warning("ADARL LINE from the actor")
        return os.getpid()

    def divide_by_zero(_engine: FakeEngine) -> float:
        return 1 / 0

    engine = spawn_actor(
        FakeEngine,
        num_cpus=0.25,
        tokenizer=build_char_tokenizer(),
        script={"1+1=": FakePrompt(pass_rate=1.0, answer="2")},
    )
    pid = ray.get(engine.__ray_call__.remote(make_noise), timeout=120)
    log = library_log_file(log_dir, "FakeEngine", pid)
    written = log.read_text()
    assert written.startswith(f"adarl: FakeEngine pid {pid} on ")
    assert "C-LEVEL NUMA binding warning" in written
    assert "reduce_op is deprecated" in written
    assert "ADARL LINE from the actor" in written
    # The process keeps Ray's title, so `ps`, `ray list actors` and the console prefix name it.
    assert Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::FakeEngine")

    # What Ray forwards to the console: adarl's line (Ray writes it to the file as it comes;
    # wait for it at most 30 s), none of the library's.
    console = ray_worker_err(pid)
    deadline = time.monotonic() + 30
    while "ADARL LINE" not in console.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    forwarded = console.read_text()
    assert "[adarl.rollout.fake][WARNING] - ADARL LINE from the actor" in forwarded
    assert "C-LEVEL" not in forwarded and "reduce_op" not in forwarded

    # A method that raises: its traceback reaches the driver as before, and the note names the file.
    with pytest.raises(ZeroDivisionError) as raised:
        ray.get(engine.__ray_call__.remote(divide_by_zero), timeout=60)
    assert "1 / 0" in str(raised.value)
    assert library_log_note(raised.value) == (
        f"FakeEngine pid {pid}: its output (library warnings, what it printed before it "
        f"stopped) is in {log}"
    )

    # An actor whose process dies (SIGKILL: the OOM killer's way): Ray's ActorDiedError, and the
    # note names the same file.
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    with pytest.raises(ray.exceptions.RayActorError) as died:
        ray.get(engine.__ray_call__.remote(lambda _engine: None), timeout=60)
    note = library_log_note(died.value)
    assert note is not None and f"is in {log}" in note, str(died.value)
