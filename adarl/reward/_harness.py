"""Runs one candidate program inside the sandbox; started by adarl/reward/sandbox.py as
`python -I _harness.py SPEC_JSON`. Standard library only, and never imported by adarl.

Two processes. The supervisor (this process; init of the PID namespace when there is one) forks
the runner and waits for it. The runner applies the resource limits, disables sockets if asked,
executes the candidate's source (`__name__ == "__main__"` for stdin/stdout programs, "solution"
when assert tests follow), then the assert tests one by one in the candidate's namespace, and
writes its report; a candidate that dies, calls `os._exit` or is killed leaves no runner report.
The supervisor then records how the runner ended (exit status or signal — a limit's signal is
seen exactly, which `unshare` does not pass on for every signal) and whether processes are still
alive (as a namespace's init it inherits every orphan), and writes the final report.
"""

import builtins
import json
import os
import resource
import sys
import traceback

_TRACEBACK_CHARS = 2000


def _set_limits(spec: dict) -> None:
    memory = spec["memory_limit_bytes"]
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    cpu = spec["cpu_time_limit_s"]
    # SIGXCPU at the soft limit (default action: terminate), SIGKILL one second later.
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    output = spec["max_output_bytes"]
    resource.setrlimit(resource.RLIMIT_FSIZE, (output, output))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _disable_network() -> None:
    """Best effort without namespaces: refuse internet sockets at the Python level."""
    import _socket
    import socket

    def refuse(*args: object, **kwargs: object) -> None:
        raise PermissionError("network access is disabled in the adarl sandbox")

    class GuardedSocket(socket.socket):
        def __init__(self, family=-1, type=-1, proto=-1, fileno=None):
            if fileno is None and family in (-1, socket.AF_INET, socket.AF_INET6):
                refuse()
            super().__init__(family, type, proto, fileno)

    socket.socket = GuardedSocket
    _socket.socket = GuardedSocket
    for name in ("create_connection", "create_server", "getaddrinfo", "gethostbyname"):
        setattr(socket, name, refuse)


def _describe(error: BaseException) -> str:
    text = "".join(traceback.format_exception_only(type(error), error)).strip()
    frames = traceback.extract_tb(error.__traceback__)
    # Only the candidate's own frames: library internals say nothing to the reader.
    where = [
        f"{f.filename}:{f.lineno}"
        for f in frames
        if f.filename == "solution.py" or f.filename.startswith("test_")
    ]
    if where:
        text += f" (at {', '.join(where[-3:])})"
    return text[:_TRACEBACK_CHARS]


def _has_live_children() -> bool:
    """Reaps exited children; True if any child (or, as a namespace's init, orphan) still runs."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def _run_candidate(spec: dict, report: dict) -> None:
    with open(spec["solution_path"], encoding="utf-8") as handle:
        source = handle.read()
    try:
        code = compile(source, "solution.py", "exec")
    except (SyntaxError, ValueError) as error:
        report["error"] = _describe(error)
        return
    asserts = spec["asserts"]
    namespace = {
        "__name__": "solution" if asserts is not None else "__main__",
        "__builtins__": builtins,
        "__file__": "solution.py",
    }
    sys.argv = ["solution.py"]
    try:
        exec(code, namespace)
    except SystemExit as error:
        if error.code not in (None, 0):
            report["error"] = f"the program exited with status {error.code!r}"
            return
    except BaseException as error:
        report["error"] = _describe(error)
        return
    if asserts is None:
        return
    report["asserts_passed"] = 0
    for index, test in enumerate(asserts):
        try:
            exec(compile(test, f"test_{index}", "exec"), namespace)
        except BaseException as error:
            report.setdefault("first_failure", f"test {index} ({test[:200]!r}): {_describe(error)}")
        else:
            report["asserts_passed"] += 1


def _runner(spec: dict) -> None:
    status = open(spec["runner_status_path"], "w", encoding="utf-8")  # noqa: SIM115 (kept open)
    _set_limits(spec)
    if spec["disable_network"]:
        _disable_network()
    harness_pid = os.getpid()
    report: dict = {}
    try:
        _run_candidate(spec, report)
    finally:
        if os.getpid() != harness_pid:
            os._exit(0)  # a fork of the candidate returned into the harness
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError) as error:  # EFBIG at the output limit, or a closed stream
        report.setdefault("error", f"writing the program's output failed: {error}")
    report["live_children"] = _has_live_children()
    report["completed"] = True
    json.dump(report, status)
    status.close()
    # Skip interpreter shutdown: the candidate's atexit hooks and non-daemon threads must not run.
    os._exit(0)


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as handle:
        spec = json.load(handle)
    runner = os.fork()
    if runner == 0:
        try:
            _runner(spec)  # exits the process itself
        except BaseException:  # the runner's own failure, before the candidate ran: say why
            traceback.print_exc()
        os._exit(70)
    _, wait_status = os.waitpid(runner, 0)
    report: dict = {}
    try:
        with open(spec["runner_status_path"], encoding="utf-8") as handle:
            report = json.load(handle)
    except (OSError, ValueError):
        pass  # no (complete) runner report: the candidate did not come back to the runner
    report["runner_exit"] = os.waitstatus_to_exitcode(wait_status)
    report["live_children"] = report.get("live_children", False) or _has_live_children()
    with open(spec["status_path"], "w", encoding="utf-8") as handle:
        json.dump(report, handle)
    os._exit(0)


if __name__ == "__main__":
    main()
