"""The code sandbox against hostile programs: each gets reward 0 with an error, within its time
limit, and leaves no process behind. Every case runs in both isolation modes (namespaces, and the
Python-level fallback), next to a benign program that must pass, so the zeros mean something."""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from adarl.reward.code_verifier import CodeVerifier
from adarl.types import TaskExample

PRINTS_OK = TaskExample(
    prompt_id="p",
    prompt="print ok",
    answer=json.dumps({"stdio": [{"input": "", "output": "ok\n"}]}),
    task="code",
)
MARGIN_S = 1.0  # interpreter start-up, kill and clean-up on a loaded 2-core machine
# Wall-time limit where the limit is not what the test is about: generous, so that a busy machine
# cannot turn a crash test into a timeout; such runs take ~0.1-0.3 s.
LIMIT_S = 5.0


def verifier(isolation: str, tmp_path: Path, **limits: float) -> CodeVerifier:
    settings = {"timeout_s": LIMIT_S, "memory_limit_mb": 256, **limits}
    return CodeVerifier(isolation=isolation, work_root=str(tmp_path), **settings)  # type: ignore[arg-type]


def run(code_verifier: CodeVerifier, program: str) -> tuple[float, str | None, bool, float]:
    start = time.monotonic()
    result = code_verifier.verify(f"```python\n{program}\n```", PRINTS_OK)
    return result.reward, result.error, result.timed_out, time.monotonic() - start


def test_benign_program_passes(isolation: str, tmp_path: Path) -> None:
    reward, error, _, elapsed = run(verifier(isolation, tmp_path), "print(input() if 0 else 'ok')")
    assert (reward, error) == (1.0, None)
    assert elapsed < LIMIT_S + MARGIN_S


@pytest.mark.parametrize(
    "program",
    ["while True:\n    pass\nprint('ok')", "import time\ntime.sleep(3600)\nprint('ok')"],
    ids=["busy-loop", "sleep"],
)
def test_infinite_loop_is_killed_at_the_wall_time_limit(
    isolation: str, tmp_path: Path, program: str, leftover_processes: Callable[[str], list[str]]
) -> None:
    reward, error, timed_out, elapsed = run(verifier(isolation, tmp_path, timeout_s=0.5), program)
    assert reward == 0.0 and timed_out
    assert "timed out" in (error or "")
    assert 0.5 <= elapsed < 0.5 + MARGIN_S
    assert leftover_processes(str(tmp_path)) == []


def test_cpu_time_limit(isolation: str, tmp_path: Path) -> None:
    code_verifier = verifier(isolation, tmp_path, timeout_s=30.0, cpu_time_limit_s=1.0)
    reward, error, timed_out, elapsed = run(code_verifier, "while True:\n    pass")
    assert reward == 0.0 and not timed_out  # the CPU limit, not the wall limit, stopped it
    assert "SIGXCPU (CPU-time limit)" in (error or "")
    assert elapsed >= 1.0


def test_memory_bomb_fails_with_memory_error(
    isolation: str, tmp_path: Path, leftover_processes: Callable[[str], list[str]]
) -> None:
    program = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 * 2**20))\nprint('ok')"
    reward, error, _, elapsed = run(verifier(isolation, tmp_path), program)
    assert reward == 0.0 and "MemoryError" in (error or "")
    assert elapsed < LIMIT_S + MARGIN_S
    assert leftover_processes(str(tmp_path)) == []


@pytest.mark.parametrize(
    ("program", "expected"),
    [
        ("raise ValueError('boom')", "ValueError: boom (at solution.py:1)"),
        ("import ctypes\nctypes.string_at(0)", "killed by SIGSEGV"),
        ("import sys\nprint('ok')\nsys.exit(3)", "exited with status 3"),
        ("import os\nprint('ok', flush=True)\nos._exit(0)", "before finishing"),
        ("while True:\n    print('x' * 1000)", "File too large"),
        ("def broken(:\n    pass", "SyntaxError"),
    ],
    ids=["exception", "segfault", "exit-status", "os-exit", "output-flood", "syntax"],
)
def test_crashes_give_zero_and_say_why(
    isolation: str, tmp_path: Path, program: str, expected: str
) -> None:
    code_verifier = verifier(isolation, tmp_path, max_output_bytes=64 * 1024)
    reward, error, timed_out, elapsed = run(code_verifier, program)
    assert reward == 0.0 and not timed_out
    assert expected in (error or "")
    assert elapsed < LIMIT_S + MARGIN_S


def test_network_is_unreachable(isolation: str, tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        program = (
            "import socket\n"
            f"connection = socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
            "connection.sendall(b'leak')\n"
            "print('ok')"
        )
        reward, error, _, elapsed = run(verifier(isolation, tmp_path), program)
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing ever connected
    assert reward == 0.0
    expected = "Network is unreachable" if isolation == "strict" else "network access is disabled"
    assert expected in (error or "")
    assert elapsed < LIMIT_S + MARGIN_S


def test_children_that_outlive_the_program_are_killed(
    isolation: str, tmp_path: Path, leftover_processes: Callable[[str], list[str]]
) -> None:
    marker = f"adarl-test-{uuid.uuid4().hex}"
    # Only a PID namespace can catch a process that left the process group with setsid().
    escape = isolation == "strict"
    program = f"""
import os, subprocess, sys
SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)", "{marker}"]
for _ in range(3):
    subprocess.Popen(SLEEPER)
if os.fork() == 0:
    for _ in range(3):
        os.fork()
    os.execv(SLEEPER[0], SLEEPER)
if {escape} and os.fork() == 0:
    os.setsid()
    os.execv(SLEEPER[0], SLEEPER)
print("ok")
"""
    reward, error, timed_out, elapsed = run(verifier(isolation, tmp_path), program)
    assert reward == 0.0 and not timed_out
    assert "left processes running" in (error or "")
    assert elapsed < LIMIT_S + MARGIN_S
    assert leftover_processes(marker) == []
    assert leftover_processes(str(tmp_path)) == []


def test_namespace_mode_holds_no_capabilities(tmp_path: Path) -> None:
    # As root, a candidate without capabilities still cannot raise its own limits.
    from adarl.reward.sandbox import namespace_prefix

    if namespace_prefix() is None or "setpriv" not in " ".join(namespace_prefix() or ()):
        pytest.skip("namespace isolation with setpriv is not available here")
    program = (
        "import resource\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_AS)\n"
        "resource.setrlimit(resource.RLIMIT_AS, (hard * 2, hard * 2))\n"
        "print('ok')"
    )
    reward, error, _, _ = run(verifier("strict", tmp_path), program)
    assert reward == 0.0 and "ValueError" in (error or "")
