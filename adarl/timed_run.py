"""A part of a check run in its own process group under a timeout, and its results as JSON.

A part that hangs (a wedged GPU driver, a collective waiting for a peer that died, a compile that
never ends) loses only itself: its whole process group (its children too: Ray's, vLLM's and
pytest's) is killed at the limit, and whatever the caller wrote before stays on disk, since the
results file is replaced atomically after every part. Stdlib only, so that the process which
orders the parts never imports torch. `python -m adarl.preflight` runs its checks with it, and
the GPU kit (adarl/bench/gpu_kit.py) its stages.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class TimedRun:
    """How one command ended: its exit status, or killed at `timeout_s`."""

    command: tuple[str, ...]
    timeout_s: float
    seconds: float
    returncode: int
    timed_out: bool
    log: Path  # everything the command printed, stdout and stderr together

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def log_tail(self, lines: int = 20) -> str:
        """The last `lines` lines of the log: what a failure said last."""
        if not self.log.is_file():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def run_with_timeout(
    command: Sequence[str],
    *,
    timeout_s: float,
    log: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> TimedRun:
    """`command` in a new session (its own process group), output to `log`; at `timeout_s` the
    whole group is killed (SIGKILL: a hung CUDA call ignores SIGTERM) and `timed_out` is set."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(log, "w") as sink:
        sink.write(f"$ {' '.join(command)}\n(timeout {timeout_s:.0f} s)\n")
        sink.flush()
        process = subprocess.Popen(
            list(command),
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=None if env is None else dict(env),
            cwd=cwd,
            start_new_session=True,
        )
        timed_out = False
        try:
            returncode = process.wait(timeout=max(timeout_s, 1.0))
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(process.pid, signal.SIGKILL)
            returncode = process.wait()
            sink.write(f"\nkilled at its {timeout_s:.0f} s limit\n")
    return TimedRun(
        command=tuple(command),
        timeout_s=timeout_s,
        seconds=round(time.perf_counter() - start, 1),
        returncode=returncode,
        timed_out=timed_out,
        log=log,
    )


def gpu_tests_command(python: str, *, junit_xml: Path) -> list[str]:
    """The one pytest invocation of tests/gpu, shared by the pre-flight's check and the GPU kit's
    stage: quiet, every outcome listed (`-rA`), no cache written into the checkout, and a JUnit
    report at `junit_xml` for `pytest_junit_summary`."""
    return [
        python,
        "-m",
        "pytest",
        "tests/gpu",
        "-q",
        "-rA",
        "-p",
        "no:cacheprovider",
        f"--junitxml={junit_xml}",
    ]


def write_json_atomic(path: Path, data: Any) -> None:
    """`data` as indented JSON at `path`, replaced in one step: a reader (or a kill) never sees
    half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    tmp.replace(path)


def pytest_junit_summary(junit_xml: Path) -> dict[str, Any]:
    """Counts, the failing tests (test: first line of its message) and the skipped ones (test:
    reason) from pytest's `--junitxml` report."""
    if not junit_xml.is_file():
        return {"error": f"{junit_xml.name} was not written"}
    root = ElementTree.parse(junit_xml).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    failed: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for suite in suites:
        for key in counts:
            counts[key] += int(suite.get(key, 0))
        for case in suite.iter("testcase"):
            test = f"{case.get('classname', '')}::{case.get('name', '')}"
            for tag in ("failure", "error"):
                node = case.find(tag)
                if node is not None:
                    message = (node.get("message") or tag).splitlines()
                    failed[test] = (message[0] if message else tag)[:300]
            node = case.find("skipped")
            if node is not None:
                skipped[test] = (node.get("message") or "")[:200]
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return {**counts, "passed": passed, "failed": failed, "skipped_reasons": skipped}
