"""A Ray job submitted with launch/submit.sh to a head started by launch/start_head.sh runs to
completion on the cluster, with this checkout's code and the head's Python environment.

The head runs in the foreground (`ray start --block`) in its own session; teardown stops it and
then ends, by pid, whatever process of that session or of its temp dir is left. No `ray stop`:
it would also stop every other Ray cluster of this user on the machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
LAUNCH = REPO_ROOT / "launch"
HEAD_START_TIMEOUT_S = 120.0
JOB_TIMEOUT_S = 300.0
SHUTDOWN_TIMEOUT_S = 60.0

# The job: connect the way adarl's driver does, and report where the driver and a Ray worker
# found adarl. (Once adarl.launch runs experiments, the lead points this at a 1-step experiment.)
JOB_ENTRYPOINT = "python -c"
JOB_CODE = """
import json, os, sys
import ray
import adarl
from adarl.cluster import ensure_ray

def where_is_adarl():
    import adarl
    return adarl.__file__

ensure_ray()
print("ADARL_JOB_REPORT " + json.dumps({
    "adarl_file": adarl.__file__,
    "worker_adarl_file": ray.get(ray.remote(where_is_adarl).remote()),
    "cwd": os.getcwd(),
    "uploaded": sorted(os.listdir(".")),
    "sys_prefix": sys.prefix,
}))
"""


@dataclass
class RayHead:
    process: subprocess.Popen[bytes]
    temp_dir: Path
    dashboard_url: str
    log_path: Path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def session_processes(session_id: int, marker: str) -> list[int]:
    """Pids in session `session_id`, or whose command line names `marker` (our temp dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue  # exited while we looked
        fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state ppid pgrp session
        if fields[0] != "Z" and (int(fields[3]) == session_id or marker in cmdline):
            found.append(int(entry.name))
    return found


def wait_for_job_api(head: RayHead) -> None:
    deadline = time.monotonic() + HEAD_START_TIMEOUT_S
    while True:
        if head.process.poll() is not None:
            pytest.fail(f"ray start exited early:\n{head.log_path.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(f"{head.dashboard_url}/api/jobs/", timeout=2) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            pytest.fail(
                f"job API not up in {HEAD_START_TIMEOUT_S:g} s:\n{head.log_path.read_text()}"
            )
        time.sleep(0.25)  # polling a readiness condition with a deadline, not synchronising


def stop_head(head: RayHead) -> list[int]:
    """Stop the head and everything it started; returns the pids that had to be SIGKILLed."""
    session_id = head.process.pid  # start_new_session: the session is numbered by its leader
    if head.process.poll() is None:
        head.process.send_signal(signal.SIGTERM)  # ray's reaper then ends its process group
        try:
            head.process.wait(timeout=SHUTDOWN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            head.process.kill()
            head.process.wait(timeout=SHUTDOWN_TIMEOUT_S)
    deadline = time.monotonic() + SHUTDOWN_TIMEOUT_S
    while session_processes(session_id, str(head.temp_dir)) and time.monotonic() < deadline:
        time.sleep(0.25)  # workers exit on their own once the raylet is gone
    killed = session_processes(session_id, str(head.temp_dir))
    for pid in killed:
        with contextlib.suppress(ProcessLookupError):  # exited meanwhile
            os.kill(pid, signal.SIGKILL)
    return killed


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayHead]:
    tmp_path = tmp_path_factory.mktemp("ray-head")
    # Ray's unix sockets live under the temp dir: keep the path short (108-byte socket limit).
    temp_dir = Path(
        tempfile.mkdtemp(prefix="adarl-ray-", dir="/tmp" if Path("/tmp").is_dir() else None)
    )
    dashboard_port = free_port()
    log_path = tmp_path / "ray_head.log"
    command = [
        str(LAUNCH / "start_head.sh"),
        f"--port={free_port()}",
        f"--dashboard-port={dashboard_port}",
        "--dashboard-host=127.0.0.1",
        f"--ray-client-server-port={free_port()}",
        f"--dashboard-agent-listen-port={free_port()}",
        "--num-cpus=2",  # one rollout engine and one learner actor
        "--num-gpus=0",
        f"--temp-dir={temp_dir}",
        "--block",
    ]
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    env["RAY_BIN"] = str(Path(sys.executable).parent / "ray")  # this test's environment
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    head = RayHead(process, temp_dir, f"http://127.0.0.1:{dashboard_port}", log_path)
    try:
        wait_for_job_api(head)
        yield head
    finally:
        killed = stop_head(head)
        shutil.rmtree(temp_dir, ignore_errors=True)
        assert not session_processes(head.process.pid, str(temp_dir)), "Ray processes left over"
        # Ray's own shutdown should be clean; SIGKILLed leftovers are a teardown defect.
        assert killed == [], f"had to SIGKILL Ray processes {killed}"


@pytest.mark.slow
@pytest.mark.timeout(JOB_TIMEOUT_S + HEAD_START_TIMEOUT_S + 2 * SHUTDOWN_TIMEOUT_S)
def test_job_submitted_with_submit_sh_succeeds(ray_head: RayHead) -> None:
    from ray.job_submission import JobStatus, JobSubmissionClient

    submission_id = f"adarl-e2e-{os.getpid()}"
    env = {
        **os.environ,
        "RAY_ADDRESS": ray_head.dashboard_url,
        "RAY_AUTH_MODE": "disabled",
        "RAY_BIN": str(Path(sys.executable).parent / "ray"),
        "ADARL_ENTRYPOINT": JOB_ENTRYPOINT,
    }
    client = JobSubmissionClient(ray_head.dashboard_url)
    try:
        submitted = subprocess.run(
            [str(LAUNCH / "submit.sh"), f"--submission-id={submission_id}", "--", JOB_CODE],
            env=env,
            capture_output=True,
            text=True,
            timeout=JOB_TIMEOUT_S,
        )
    finally:
        # Whatever happened, leave no job running into the teardown.
        jobs = {job.submission_id: job.status for job in client.list_jobs()}
        if submission_id in jobs and not jobs[submission_id].is_terminal():
            client.stop_job(submission_id)
    output = submitted.stdout + submitted.stderr
    assert submitted.returncode == 0, output[-4000:]
    assert client.get_job_status(submission_id) == JobStatus.SUCCEEDED, output[-4000:]

    logs = client.get_job_logs(submission_id)
    report_line = next(line for line in logs.splitlines() if line.startswith("ADARL_JOB_REPORT "))
    report = json.loads(report_line.removeprefix("ADARL_JOB_REPORT "))
    # The driver and the cluster's workers run the uploaded copy of this checkout, not an
    # installed adarl.
    assert report["cwd"].startswith(str(ray_head.temp_dir))
    assert Path(report["adarl_file"]).is_relative_to(report["cwd"])
    assert Path(report["worker_adarl_file"]).parent.name == "adarl"
    assert report["worker_adarl_file"].startswith(str(ray_head.temp_dir))
    assert {"adarl", "launch", "pyproject.toml"} <= set(report["uploaded"])
    assert not {".venv", ".git", "outputs", "wandb"} & set(report["uploaded"])
    # `python` in the entrypoint is the head's environment (start_head.sh puts it on PATH).
    assert report["sys_prefix"] == sys.prefix


@pytest.mark.slow
# Heavy (~45 s): make test keeps the submission path (the test above: the same submit.sh, working
# dir and entrypoint) and the training path (tests/e2e/test_training_run.py); this joins them.
@pytest.mark.heavy
@pytest.mark.timeout(JOB_TIMEOUT_S + HEAD_START_TIMEOUT_S + 2 * SHUTDOWN_TIMEOUT_S)
def test_experiment_submitted_as_a_job_runs_to_completion(
    ray_head: RayHead, tmp_path: Path
) -> None:
    """`launch/submit.sh -- +experiment=...` trains on the cluster and leaves its summary."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    submission_id = f"adarl-e2e-train-{os.getpid()}"
    run_dir = tmp_path / "run"
    env = {
        **os.environ,
        "RAY_ADDRESS": ray_head.dashboard_url,
        "RAY_AUTH_MODE": "disabled",
        "RAY_BIN": str(Path(sys.executable).parent / "ray"),
        "WANDB_MODE": "offline",
    }
    env.pop("ADARL_ENTRYPOINT", None)  # the default entrypoint: python -m adarl.launch
    client = JobSubmissionClient(ray_head.dashboard_url)
    overrides = [
        "+experiment=grpo",
        "trainer.total_steps=2",
        "model.tiny.sft_steps=120",
        f"model.cache_dir={os.environ.get('ADARL_CACHE_DIR') or tmp_path / 'cache'}",
        "allocator.prompts_per_step=8",
        "eval.num_prompts=16",
        "eval.samples_per_prompt=4",
        f"hydra.run.dir={run_dir}",
    ]
    try:
        submitted = subprocess.run(
            [str(LAUNCH / "submit.sh"), f"--submission-id={submission_id}", "--", *overrides],
            env=env,
            capture_output=True,
            text=True,
            timeout=JOB_TIMEOUT_S,
        )
    finally:
        jobs = {job.submission_id: job.status for job in client.list_jobs()}
        if submission_id in jobs and not jobs[submission_id].is_terminal():
            client.stop_job(submission_id)
    output = submitted.stdout + submitted.stderr
    assert submitted.returncode == 0, output[-4000:]
    assert client.get_job_status(submission_id) == JobStatus.SUCCEEDED, output[-4000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["name"] == "grpo" and summary["steps"] == 2
    assert summary["rollouts_generated"] > 0
