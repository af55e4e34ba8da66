"""The reaper (adarl/reaper.py): what a SIGKILLed driver started dies with it, and nothing else."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from adarl.reaper import REAPER_TOKEN_ENV, marked_processes, reap


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def wait_dead(pids: list[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def sleeper(**env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"],
        env={**os.environ, **env},
        start_new_session=True,
    )


def test_only_processes_with_the_token_are_found_and_reaped() -> None:
    marked = sleeper(**{REAPER_TOKEN_ENV: "tok-a"})
    other = sleeper(**{REAPER_TOKEN_ENV: "tok-b"})
    try:
        deadline = time.monotonic() + 10
        while marked.pid not in marked_processes("tok-a") and time.monotonic() < deadline:
            time.sleep(0.01)  # its environment is readable once it has exec'd
        assert marked_processes("tok-a") == [marked.pid]
        assert reap("tok-a") == [marked.pid]
        assert marked.wait(timeout=10) == -signal.SIGKILL
        assert other.poll() is None  # another driver's process is never touched
    finally:
        for process in (marked, other):
            process.kill()
            process.wait()


@pytest.mark.slow
def test_a_sigkilled_driver_leaves_no_process_behind() -> None:
    # The "driver" starts its reaper, then a child in a session of its own (as the code sandbox
    # starts candidates) and a plain child; SIGKILL runs no clean-up code in it.
    script = textwrap.dedent(
        """
        import subprocess, sys, time
        from adarl.reaper import start_reaper

        start_reaper()
        code = "import time; time.sleep(600)"
        own_session = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
        plain = subprocess.Popen([sys.executable, "-c", code])
        print(own_session.pid, plain.pid, flush=True)
        time.sleep(600)
        """
    )
    env = {k: v for k, v in os.environ.items() if k != REAPER_TOKEN_ENV}
    driver = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env
    )
    children: list[int] = []
    try:
        assert driver.stdout is not None
        children = [int(pid) for pid in driver.stdout.readline().split()]
        assert len(children) == 2 and all(alive(p) for p in children)
        driver.send_signal(signal.SIGKILL)
        assert driver.wait(timeout=30) == -signal.SIGKILL
        assert wait_dead(children, timeout_s=15) == []
    finally:
        driver.kill()
        driver.wait()
        for pid in children:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_the_reaper_command_kills_marked_processes_now() -> None:
    marked = sleeper(**{REAPER_TOKEN_ENV: "tok-cli"})
    try:
        deadline = time.monotonic() + 10
        while not marked_processes("tok-cli") and time.monotonic() < deadline:
            time.sleep(0.01)
        env = {k: v for k, v in os.environ.items() if k != REAPER_TOKEN_ENV}
        done = subprocess.run(
            [sys.executable, "-m", "adarl.reaper", "--token", "tok-cli"],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            check=True,
        )
        assert "killed 1 process(es)" in done.stdout
        assert marked.wait(timeout=10) == -signal.SIGKILL
    finally:
        marked.kill()
        marked.wait()


@pytest.mark.slow
def test_a_sandbox_run_does_not_outlive_a_sigkilled_driver() -> None:
    # A code-verifier candidate that sleeps: while the driver lives, the sandbox kills it at its
    # wall-time limit; once the driver is SIGKILLed, no one would, but for the reaper.
    script = textwrap.dedent(
        """
        import os
        from adarl.reaper import REAPER_TOKEN_ENV, start_reaper
        from adarl.reward.sandbox import Sandbox, SandboxLimits

        start_reaper()
        print(os.environ[REAPER_TOKEN_ENV], flush=True)
        Sandbox(limits=SandboxLimits(timeout_s=600), isolation="python").run(
            "import time\\ntime.sleep(3600)"
        )
        """
    )
    env = {k: v for k, v in os.environ.items() if k != REAPER_TOKEN_ENV}
    driver = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert driver.stdout is not None
        token = driver.stdout.readline().strip()
        deadline = time.monotonic() + 60
        while True:  # the candidate's processes are up (harness supervisor and runner)
            candidates = [p for p in marked_processes(token) if p != driver.pid]
            if len(candidates) >= 2:
                break
            assert time.monotonic() < deadline, "the sandbox never started"
            time.sleep(0.05)
        driver.send_signal(signal.SIGKILL)
        assert driver.wait(timeout=30) == -signal.SIGKILL
        assert wait_dead(candidates, timeout_s=15) == []
    finally:
        driver.kill()
        driver.wait()
