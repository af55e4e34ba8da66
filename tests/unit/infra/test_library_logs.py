"""Actors' library output goes to a file of the run; adarl's lines stay on the console; an actor
error that stops the run names the file (adarl/cluster.py, `logger.library_logs`).

The redirect changes a process's file descriptors, so every test of it runs in a child process;
Ray is not started: the errors are Ray's own exception classes, built as Ray builds them."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from ray.core.generated.common_pb2 import ActorDiedErrorContext
from ray.exceptions import ActorDiedError, RayTaskError

from adarl import cluster
from adarl.cluster import (
    InProcessWorker,
    _quiet_class,
    library_log_file,
    library_log_note,
    set_library_log_dir,
)
from adarl.config.logger import LoggerConfig


def run_child(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "default"}
    env.pop("PYTHONUNBUFFERED", None)  # buffered, as a library's output often is
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


# -- the redirect, in the actor's process ----------------------------------------------------

NOISY_PROCESS = """
    import ctypes, logging, os, subprocess, sys, warnings
    from pathlib import Path
    from adarl.cluster import redirect_library_output

    print("before the redirect", flush=True)
    sys.stdout.write("buffered, not yet flushed ")  # flushed into the console, not the file
    assert redirect_library_output(Path(sys.argv[1]), label="Probe pid 1")
    libc = ctypes.CDLL(None)
    libc.write(2, b"C-LEVEL on fd 2\\n", 16)  # what torch's, NUMA's and vLLM's C++ code does
    libc.write(1, b"C-LEVEL on fd 1\\n", 16)
    warnings.warn("reduce_op is deprecated", FutureWarning)
    print("a library's print")
    sys.stderr.write("Loading weights: 100%|#####| 27/27\\r\\n")
    logging.getLogger("vllm").warning("Triton is not installed")  # no handler: stderr
    subprocess.run(["sh", "-c", "echo from a child process >&2"], check=True)
    logging.getLogger("adarl.rollout.vllm_engine").warning("ADARL LINE engine ready")
"""

LIBRARY_LINES = (
    "C-LEVEL on fd 2",
    "C-LEVEL on fd 1",
    "reduce_op is deprecated",
    "a library's print",
    "Loading weights: 100%",
    "Triton is not installed",
    "from a child process",
)


def test_c_level_and_python_output_go_to_the_file_and_adarl_lines_to_the_console(
    tmp_path: Path,
) -> None:
    log = tmp_path / "logs" / "Probe-1.log"  # the directory does not exist yet
    child = run_child(NOISY_PROCESS, str(log))
    assert child.returncode == 0, child.stderr
    written = log.read_text()
    for line in LIBRARY_LINES:
        assert line in written, f"{line!r} is not in the file:\n{written}"
        assert line not in child.stdout + child.stderr, f"{line!r} reached the console"
    assert written.startswith("adarl: Probe pid 1 on ")  # says whose output it is, and since
    # adarl's own line: on the original stderr (Ray forwards it to the driver) and in the file
    assert "[adarl.rollout.vllm_engine][WARNING] - ADARL LINE engine ready" in child.stderr
    assert "ADARL LINE engine ready" in written
    assert child.stdout == "before the redirect\nbuffered, not yet flushed "


def test_a_file_that_cannot_be_written_leaves_the_output_where_it_was(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    script = """
        import os, sys
        from pathlib import Path
        from adarl.cluster import redirect_library_output

        assert not redirect_library_output(Path(sys.argv[1]), label="Probe pid 2")
        os.write(2, b"C-LEVEL still here\\n")
    """
    child = run_child(script, str(blocker / "logs" / "Probe-2.log"))
    assert child.returncode == 0, child.stderr
    assert "adarl: Probe pid 2 cannot write its library log" in child.stderr
    assert "stays on this console" in child.stderr
    assert "C-LEVEL still here" in child.stderr


# -- the actor class spawn_actor starts ------------------------------------------------------


class Probe:
    """A component."""

    def __init__(self, size: int, *, name: str = "p") -> None:
        self.size, self.name = size, name

    def get(self) -> int:
        return self.size


def test_the_wrapped_class_keeps_its_name_and_checks_arguments_like_the_original() -> None:
    wrapped = _quiet_class(Probe)
    assert _quiet_class(Probe) is wrapped  # one class per component: Ray exports it once
    assert (wrapped.__name__, wrapped.__qualname__, wrapped.__module__) == (
        Probe.__name__,
        Probe.__qualname__,
        Probe.__module__,
    )  # Ray's process title stays ray::Probe, its console prefix (Probe pid=...)
    assert issubclass(wrapped, Probe)
    signature = inspect.signature(wrapped.__init__)
    assert list(signature.parameters) == ["self", "size", "name", "_adarl_library_log_dir"]
    with pytest.raises(TypeError):  # a typo still fails at the call site (Ray binds this)
        signature.bind(None, 3, nmae="q")


def test_without_a_directory_the_wrapped_class_changes_nothing_in_this_process() -> None:
    before = os.fstat(2).st_ino, os.fstat(1).st_ino
    probe = _quiet_class(Probe)(3, name="q")
    assert (probe.get(), probe.name) == (3, "q")
    assert (os.fstat(2).st_ino, os.fstat(1).st_ino) == before
    assert cluster._console is None


def test_an_actor_class_shipped_by_value_redirects_before_its_init_runs(tmp_path: Path) -> None:
    """What Ray does with the class: pickle it by value (cloudpickle), load it in the worker
    process and call it with the keyword spawn_actor adds; the component's __init__ already
    prints into the file."""
    from ray import cloudpickle

    shipped = tmp_path / "class.pkl"
    shipped.write_bytes(cloudpickle.dumps(_quiet_class(InProcessWorker)))
    script = """
        import os, sys
        from pathlib import Path
        from ray import cloudpickle

        cls = cloudpickle.loads(Path(sys.argv[1]).read_bytes())
        assert cls.__name__ == "InProcessWorker"
        worker = cls(obj=print, _adarl_library_log_dir=sys.argv[2])
        worker.submit(worker.obj, "printed by the component").result()
        worker.shutdown()
        os.write(2, b"after init\\n")
    """
    child = run_child(script, str(shipped), str(tmp_path / "logs"))
    assert child.returncode == 0, child.stderr
    (log,) = (tmp_path / "logs").glob("InProcessWorker-*.log")
    pid = int(log.stem.rsplit("-", 1)[1])
    assert log == library_log_file(tmp_path / "logs", "InProcessWorker", pid)
    assert log.read_text().startswith(f"adarl: InProcessWorker pid {pid} on ")
    assert "printed by the component" in log.read_text()
    assert "after init" in log.read_text()
    assert child.stdout == "" and child.stderr == ""


# -- the note naming the file ----------------------------------------------------------------


def actor_died(pid: int, *, class_name: str = "VLLMEngine") -> ActorDiedError:
    """What a call on an actor whose process was SIGKILLed raises (Ray 2.60's message)."""
    return ActorDiedError(
        ActorDiedErrorContext(
            class_name=class_name,
            actor_id=bytes(range(16)),
            pid=pid,
            node_ip_address="10.0.0.7",
            error_message="The actor died unexpectedly: the worker was killed by SIGKILL.",
        )
    )


def method_raised(pid: int) -> RayTaskError:
    """What a call on an actor whose method raised gives the driver."""
    error = RayTaskError(
        "Learner.train_step",
        "Traceback (most recent call last):\n  ...\nValueError: bad batch",
        ValueError("bad batch"),
        proctitle="ray::Learner.train_step",
        pid=pid,
        ip="10.0.0.8",
    )
    return error.as_instanceof_cause()


def caused_by(error: BaseException) -> RuntimeError:
    try:
        try:
            raise error
        except BaseException as inner:
            raise RuntimeError("learner rank 0 died during a learner training step") from inner
    except RuntimeError as outer:
        return outer


def test_an_actor_death_names_the_dead_actors_file(tmp_path: Path) -> None:
    log = library_log_file(tmp_path, "VLLMEngine", 4242)
    log.write_text("Fatal Python error: Segmentation fault\n")
    library_log_file(tmp_path, "Learner", 4243).write_text("")
    note = library_log_note(caused_by(actor_died(4242)), tmp_path)
    assert note is not None and f"is in {log}" in note
    assert note.startswith("VLLMEngine pid 4242: its output")
    assert "on node" not in note  # the file is here


def test_a_file_on_another_node_is_named_with_that_node(tmp_path: Path) -> None:
    note = library_log_note(actor_died(4242), tmp_path)
    assert note is not None
    assert note.endswith(f"is in {tmp_path / 'VLLMEngine-4242.log'} on node 10.0.0.7")


def test_a_method_error_names_its_actors_file_too(tmp_path: Path) -> None:
    error = method_raised(77)
    assert isinstance(error, ValueError)  # as the driver sees it: RayTaskError(ValueError)
    library_log_file(tmp_path, "Learner", 77).write_text("")
    note = library_log_note(caused_by(error), tmp_path)
    assert note is not None and f"is in {tmp_path / 'Learner-77.log'}" in note


def test_no_note_without_an_actor_error_or_without_files(tmp_path: Path) -> None:
    assert library_log_note(caused_by(ValueError("a driver bug")), tmp_path) is None
    assert library_log_note(actor_died(1)) is None  # no directory set: output on the console
    set_library_log_dir(tmp_path)
    try:
        assert library_log_note(actor_died(1)) is not None  # the directory set now
    finally:
        set_library_log_dir(None)


def test_the_session_adds_the_note_under_the_traceback_once(tmp_path: Path) -> None:
    from adarl.config import AdarlConfig
    from adarl.session import TrainingSession

    session = TrainingSession(AdarlConfig(), run_dir=tmp_path)
    session.library_log_dir = tmp_path / "logs"
    error = caused_by(actor_died(4242))
    session._name_actor_output(error)
    assert error.__notes__ == [library_log_note(error, tmp_path / "logs")]
    already_named = RuntimeError(f"engine died. {library_log_note(error, tmp_path / 'logs')}")
    session._name_actor_output(already_named)  # the pool's message names it: no second copy
    assert not hasattr(already_named, "__notes__")


def test_library_logs_is_validated_naming_the_key() -> None:
    LoggerConfig(library_logs="console").validate()
    with pytest.raises(ValueError, match=r"logger\.library_logs='stderr' is not one of"):
        LoggerConfig(library_logs="stderr").validate()
