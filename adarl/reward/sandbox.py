"""A subprocess sandbox for untrusted Python programs (the code verifier's candidates).

Each run gets a fresh temporary directory as its working directory (removed afterwards) and runs
`python -I -B _harness.py` (adarl/reward/_harness.py) in a new session, so the run is one process
group. The harness's supervisor forks a runner that applies the limits before the candidate's
first line, and reports how the runner ended:

* wall time: this process waits on a pidfd; at the limit it SIGKILLs the whole process group;
* CPU time: RLIMIT_CPU (SIGXCPU, then SIGKILL a second later);
* memory: RLIMIT_AS (allocations fail with MemoryError);
* output: stdout/stderr go to files capped by RLIMIT_FSIZE; no core dumps.

Two kinds of isolation, measured on the development machine (Linux 6.18, util-linux 2.38, root):

* namespaces (`Sandbox.isolation == "namespace"`): the command is prefixed with
  `unshare --net --pid --fork --kill-child` (adding `--map-root-user` when not root, which needs
  unprivileged user namespaces) and, when available,
  `setpriv --bounding-set=-all --inh-caps=-all --no-new-privs`. The run has no network interface
  but a downed loopback (connect fails with ENETUNREACH), its harness is init of its own PID
  namespace (every process the candidate starts dies with it, including ones that left the
  process group with `setsid`; `kill(-1)` cannot reach outside), and it holds no capabilities (it
  cannot raise its rlimits even when adarl runs as root). A run of `print(1)` takes ≈50 ms with
  or without namespaces (interpreter start dominates).
* Python-level (`Sandbox.isolation == "python"`): no namespaces. Internet sockets are refused
  inside the interpreter (`socket` is patched; C extensions, `ctypes` or child programs can still
  reach the network), processes are cleaned up by process group only (a process that calls
  `setsid` escapes), and a candidate running as root could raise its own limits. Use it only
  where namespaces are unavailable.

The configured mode (`reward.code.isolation`) picks one of them:

* "auto": namespaces if a probe run of the prefix succeeds here, else Python-level isolation,
  logged once per process as a warning that says what failed in the probe (no `unshare`, or its
  error message).
* "strict": namespaces or nothing: without them the `Sandbox` (and so the code verifier, built
  at start) refuses with the probe's failure and the config key to change.
* "python": Python-level isolation, chosen explicitly (no probe, no warning).

Not isolated in either mode: the file system (the candidate can read and write wherever its user
may; run adarl as an unprivileged user) and the number of processes (a fork bomb runs until the
wall-time limit, then dies with its group / namespace). For hostile code use a VM or gVisor.

After the program exits, any process still alive in its group (or namespace) is killed and the
run is flagged (`SandboxResult.stray_processes`, the report's `live_children`); `run` returns only
when no live process of the group remains.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from adarl.reaper import REAPER_TOKEN_ENV

logger = logging.getLogger(__name__)

Isolation = Literal["auto", "strict", "python"]
_HARNESS = Path(__file__).with_name("_harness.py")
_OUTPUT_TAIL_CHARS = 4000
_GROUP_EXIT_WAIT_S = 2.0


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one run; `cpu_time_limit_s=None` means `timeout_s` rounded up."""

    timeout_s: float = 5.0
    cpu_time_limit_s: float | None = None
    memory_limit_mb: int = 1024
    max_output_bytes: int = 1_000_000

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"sandbox timeout_s must be > 0, got {self.timeout_s}")
        if self.memory_limit_mb < 64:
            raise ValueError(f"sandbox memory_limit_mb must be >= 64, got {self.memory_limit_mb}")


@dataclass(frozen=True)
class SandboxResult:
    """What happened to one run. `report` is the harness supervisor's JSON report (None when the
    run was killed at the wall-time limit, or the sandbox itself failed to start): `runner_exit`
    is the candidate process's exit code (negative: killed by that signal), `completed` is set
    when the candidate ran to its end, `error` says why it did not, `asserts_passed` counts
    passing asserts, `live_children` flags processes left running."""

    returncode: int  # of the sandbox's top process (unshare or the harness supervisor)
    stdout: str
    stderr: str
    timed_out: bool
    stray_processes: bool
    report: dict | None
    elapsed_s: float

    def failure(self) -> str | None:
        """Why the run failed as a program, or None when it ran to completion cleanly."""
        if self.timed_out:
            return f"timed out (wall-time limit) after {self.elapsed_s:.2f} s"
        if self.report is None:
            return f"the sandbox failed (status {self.returncode}, no report){self._stderr_tail()}"
        runner_exit = int(self.report["runner_exit"])
        if runner_exit < 0:
            name = signal.Signals(-runner_exit).name
            reason = {"SIGXCPU": " (CPU-time limit)", "SIGXFSZ": " (output limit)"}.get(name, "")
            return f"killed by {name}{reason}{self._stderr_tail()}"
        if not self.report.get("completed"):
            return f"exited with status {runner_exit} before finishing{self._stderr_tail()}"
        if self.report.get("error"):
            return str(self.report["error"])
        if self.stray_processes or self.report.get("live_children"):
            return "left processes running after it finished (they were killed)"
        return None

    def _stderr_tail(self) -> str:
        tail = self.stderr.strip()[-500:]
        return f": {tail}" if tail else ""


def _prefix_candidates() -> list[list[str]]:
    unshare, setpriv = shutil.which("unshare"), shutil.which("setpriv")
    if unshare is None:
        return []
    base = [unshare, "--net", "--pid", "--fork", "--kill-child"]
    user_ns = [] if os.geteuid() == 0 else ["--map-root-user"]
    drop = [setpriv, "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs"] if setpriv else []
    candidates = [base + user_ns + drop, base + user_ns]
    if not user_ns:  # root in a container without CAP_SYS_ADMIN: a user namespace may still work
        candidates += [[*base, "--map-root-user", *drop], [*base, "--map-root-user"]]
    return [c for i, c in enumerate(candidates) if c not in candidates[:i]]


@dataclass(frozen=True)
class NamespaceProbe:
    """The outcome of probing Linux namespaces here: the prefix that works, or why none does."""

    prefix: tuple[str, ...] | None
    failure: str | None  # None when `prefix` works


@functools.cache
def probe_namespaces() -> NamespaceProbe:
    """Try each namespace prefix on `python -c pass` (cached per process: the answer does not
    change while adarl runs); the first that succeeds wins."""
    candidates = _prefix_candidates()
    if not candidates:
        return NamespaceProbe(None, "`unshare` (util-linux) is not on PATH")
    failures = []
    for prefix in candidates:
        try:
            probe = subprocess.run(
                [*prefix, sys.executable, "-I", "-c", "pass"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            failures.append(f"`{_short(prefix)}`: {error}")
            continue
        if probe.returncode == 0:
            return NamespaceProbe(tuple(prefix), None)
        stderr = probe.stderr.decode(errors="replace").strip().splitlines()
        detail = stderr[-1][-200:] if stderr else "no message"
        failures.append(f"`{_short(prefix)}` exited with status {probe.returncode}: {detail}")
    return NamespaceProbe(None, "; ".join(failures))


def _short(prefix: Sequence[str]) -> str:
    return " ".join(os.path.basename(part) if i == 0 else part for i, part in enumerate(prefix))


def namespace_prefix() -> tuple[str, ...] | None:
    """The first namespace prefix whose probe run succeeds here (cached per process)."""
    return probe_namespaces().prefix


@functools.cache
def _warn_python_fallback(failure: str) -> None:
    # Cached: one warning per process and reason, however many sandboxes are built.
    logger.warning(
        "code sandbox: reward.code.isolation=auto falls back to Python-level isolation (sockets "
        "blocked inside the interpreter only, cleanup by process group only) because Linux "
        "namespaces do not work here: %s. Set reward.code.isolation=strict to refuse to run "
        "without them, or isolation=python to choose this mode explicitly",
        failure,
    )


def resolve_isolation(isolation: Isolation) -> Literal["namespace", "python"]:
    """The isolation a sandbox gets for the configured mode (see the module docstring)."""
    if isolation == "python":
        return "python"
    if isolation not in ("auto", "strict"):
        raise ValueError(f"sandbox isolation {isolation!r} is not 'auto', 'strict' or 'python'")
    probe = probe_namespaces()
    if probe.prefix is not None:
        return "namespace"
    assert probe.failure is not None
    if isolation == "strict":
        raise RuntimeError(
            "reward.code.isolation=strict needs Linux namespaces (`unshare --net --pid`), which do "
            f"not work here: {probe.failure}. Run as root or allow unprivileged user namespaces "
            "(and install util-linux), or set reward.code.isolation=auto / python to accept "
            "Python-level isolation"
        )
    _warn_python_fallback(probe.failure)
    return "python"


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, process group) of a live pid, from /proc; None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            stat = handle.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may contain spaces
    return fields[0], int(fields[2])


def live_group_members(pgid: int) -> list[int]:
    """Processes of group `pgid` that are not zombies."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _proc_stat(int(entry))
            if stat is not None and stat[1] == pgid and stat[0] not in ("Z", "X"):
                members.append(int(entry))
    return members


def _wait_for_exit(pid: int, timeout_s: float) -> bool:
    """Wait until `pid` exits (without reaping it, so its pid cannot be reused); False on
    timeout."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd (Linux < 5.3, old Python): poll waitid
        deadline = time.monotonic() + timeout_s
        delay = 0.001
        while True:
            flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
            if os.waitid(os.P_PID, pid, flags) is not None:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.02)
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        return bool(poller.poll(max(0, math.ceil(timeout_s * 1000))))
    finally:
        os.close(pidfd)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group is already empty
        os.killpg(pgid, signal.SIGKILL)


def _read_tail(path: Path) -> str:
    with path.open("rb") as handle:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        handle.seek(max(0, size - 4 * _OUTPUT_TAIL_CHARS))
        return handle.read().decode("utf-8", errors="replace")[-_OUTPUT_TAIL_CHARS:]


def _read_limited(path: Path, max_bytes: int) -> str:
    with path.open("rb") as handle:
        return handle.read(max_bytes).decode("utf-8", errors="replace")


def _remove_tree(path: Path) -> None:
    def make_writable_and_retry(function, failed_path, _error) -> None:  # type: ignore[no-untyped-def]
        os.chmod(os.path.dirname(failed_path), 0o700)  # a candidate may have chmod-ed a dir
        function(failed_path)

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=make_writable_and_retry)
    else:
        shutil.rmtree(path, onerror=make_writable_and_retry)


class Sandbox:
    def __init__(
        self,
        *,
        limits: SandboxLimits = SandboxLimits(),
        isolation: Isolation = "auto",
        python_executable: str | None = None,
        work_root: str | None = None,
    ) -> None:
        """`work_root`: where run directories are created (default: the system temp dir)."""
        self._limits = limits
        self._isolation = resolve_isolation(isolation)
        self._python = python_executable or sys.executable
        self._work_root = work_root

    @property
    def isolation(self) -> Literal["namespace", "python"]:
        return self._isolation

    @property
    def limits(self) -> SandboxLimits:
        return self._limits

    def run(
        self,
        source: str,
        *,
        stdin: str = "",
        asserts: list[str] | None = None,
        timeout_s: float | None = None,
    ) -> SandboxResult:
        """Run `source` as a program reading `stdin`; with `asserts`, run each test after it in
        the program's namespace (the report counts the passes). `timeout_s` can only shorten the
        configured wall-time limit."""
        limits = self._limits
        wall_s = limits.timeout_s if timeout_s is None else min(timeout_s, limits.timeout_s)
        cpu_s = limits.cpu_time_limit_s or limits.timeout_s
        run_dir = Path(tempfile.mkdtemp(prefix="adarl-sandbox-", dir=self._work_root))
        try:
            work_dir = run_dir / "work"
            work_dir.mkdir()
            (run_dir / "solution.py").write_text(source, encoding="utf-8")
            (run_dir / "stdin.txt").write_text(stdin, encoding="utf-8")
            spec = {
                "solution_path": str(run_dir / "solution.py"),
                "status_path": str(run_dir / "status.json"),
                "runner_status_path": str(run_dir / "runner_status.json"),
                "asserts": asserts,
                "memory_limit_bytes": limits.memory_limit_mb * 1024 * 1024,
                "cpu_time_limit_s": max(1, math.ceil(cpu_s)),
                "max_output_bytes": limits.max_output_bytes,
                "disable_network": self._isolation == "python",
            }
            (run_dir / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
            prefix = list(namespace_prefix() or ()) if self._isolation == "namespace" else []
            command = [*prefix, self._python, "-I", "-B", str(_HARNESS), str(run_dir / "spec.json")]
            env = {
                "PATH": os.environ.get("PATH", os.defpath),
                "LANG": "C.UTF-8",
                "LC_ALL": "C.UTF-8",
                "HOME": str(work_dir),
                "TMPDIR": str(work_dir),
                "OMP_NUM_THREADS": "1",
                "OPENBLAS_NUM_THREADS": "1",
                "MKL_NUM_THREADS": "1",
                # The driver's reaper mark (adarl/reaper.py): should the driver die while this
                # runs, nothing is left to enforce the wall-time limit; the reaper kills it.
                **{k: v for k, v in os.environ.items() if k == REAPER_TOKEN_ENV},
            }
            return self._execute(command, run_dir, work_dir, env, wall_s)
        finally:
            _remove_tree(run_dir)

    def _execute(
        self, command: list[str], run_dir: Path, work_dir: Path, env: dict[str, str], wall_s: float
    ) -> SandboxResult:
        stdout_path, stderr_path = run_dir / "stdout.txt", run_dir / "stderr.txt"
        start = time.monotonic()
        with (
            (run_dir / "stdin.txt").open("rb") as stdin_file,
            stdout_path.open("wb") as stdout_file,
            stderr_path.open("wb") as stderr_file,
        ):
            process = subprocess.Popen(
                command,
                cwd=work_dir,
                env=env,
                stdin=stdin_file,
                stdout=stdout_file,
                stderr=stderr_file,
                start_new_session=True,  # its own process group, killed as a whole
                close_fds=True,
            )
        pgid = process.pid
        try:
            exited = _wait_for_exit(process.pid, wall_s)
            elapsed = time.monotonic() - start
            # The leader is still unreaped here, so `pgid` cannot have been reused.
            strays = exited and bool(
                [pid for pid in live_group_members(pgid) if pid != process.pid]
            )
        finally:
            _kill_group(pgid)
            process.wait()
        self._wait_until_group_gone(pgid)
        status_path = run_dir / "status.json"
        report = None
        if status_path.is_file() and status_path.stat().st_size:
            report = json.loads(status_path.read_text(encoding="utf-8"))
        return SandboxResult(
            returncode=process.returncode,
            stdout=_read_limited(stdout_path, self._limits.max_output_bytes),
            stderr=_read_tail(stderr_path),
            timed_out=not exited,
            stray_processes=strays,
            report=report,
            elapsed_s=elapsed,
        )

    @staticmethod
    def _wait_until_group_gone(pgid: int) -> None:
        """Killed processes die asynchronously; return only once none of the group is alive."""
        deadline = time.monotonic() + _GROUP_EXIT_WAIT_S
        delay = 0.0005
        while live_group_members(pgid):
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"sandbox: processes of group {pgid} survived SIGKILL for "
                    f"{_GROUP_EXIT_WAIT_S} s: {live_group_members(pgid)}"
                )
            _kill_group(pgid)
            time.sleep(delay)
            delay = min(delay * 2, 0.01)
