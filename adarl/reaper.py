"""Leave no process behind a driver that dies: `python -m adarl.reaper --pid PID --token TOKEN`
(or, without `--pid`, kill the processes marked TOKEN now).

A driver killed with SIGKILL runs no clean-up. The Ray processes its `ray.init` started mostly
follow it (GCS, raylet and the workers exit with it), but Ray's dashboard and runtime-env agents
outlive it by up to a minute (measured with Ray 2.60: 30-70 s, retrying to report to a GCS that
is gone), and a code-sandbox run started just before the kill has no parent left to enforce its
wall-time limit.

`start_reaper()` marks this process's environment with a random token (`REAPER_TOKEN_ENV`),
which every process it starts afterwards inherits (Ray's GCS, raylet, agents and workers; the
code sandbox passes it on explicitly), and starts this module in a session of its own (so a
Ctrl-C or a process-group kill aimed at the driver does not reach it). The reaper sleeps on a
pidfd until the driver exits, for any reason, then SIGKILLs every process that still carries the
token, and the process group each of them leads, until none is left (or `_GIVE_UP_S` passes).
Only this driver's token is matched: other runs and other users' Ray clusters on the machine are
never touched. It uses no CPU while the driver lives.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence

REAPER_TOKEN_ENV = "ADARL_REAPER_TOKEN"
_GIVE_UP_S = 30.0


def start_reaper() -> str:
    """Mark this process's environment with a fresh token and start its reaper; returns the
    token. Call it before starting the processes to be reaped (e.g. before `ray.init`)."""
    token = uuid.uuid4().hex
    os.environ[REAPER_TOKEN_ENV] = token
    env = {k: v for k, v in os.environ.items() if k != REAPER_TOKEN_ENV}  # never reap itself
    subprocess.Popen(
        [sys.executable, "-m", "adarl.reaper", "--pid", str(os.getpid()), "--token", token],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )
    return token


def marked_processes(token: str) -> list[int]:
    """Pids of live (non-zombie) processes whose environment carries `token`, except this one."""
    needle = f"{REAPER_TOKEN_ENV}={token}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                environ = handle.read()
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:  # exited meanwhile, or not ours to read
            continue
        state = stat[stat.rindex(b")") + 2 :].split()[0]
        if state not in (b"Z", b"X") and needle in environ.split(b"\0"):
            found.append(int(entry))
    return found


def reap(token: str, *, give_up_s: float = _GIVE_UP_S) -> list[int]:
    """SIGKILL every process marked with `token` (and the groups they lead) until none is left;
    returns the pids killed."""
    killed: list[int] = []
    deadline = time.monotonic() + give_up_s
    while True:
        pids = marked_processes(token)
        if not pids or time.monotonic() > deadline:
            return killed
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if os.getpgid(pid) == pid:  # a group leader (e.g. a sandbox run): its group too
                    os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        time.sleep(0.05)


def wait_for_exit(pid: int) -> None:
    """Block until process `pid` has exited (it is not our child: a pidfd, or polling)."""
    try:
        descriptor = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):  # no pidfd (Linux < 5.3): poll once a second
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            except PermissionError:
                pass
            time.sleep(1.0)
    try:
        poller = select.poll()
        poller.register(descriptor, select.POLLIN)
        while not poller.poll(None):
            pass
    finally:
        os.close(descriptor)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Wait for --pid to exit, then kill every process marked with --token; "
        "without --pid, kill them now (e.g. a local Ray cluster started under the token: "
        "launch/local_multinode.sh)."
    )
    parser.add_argument("--pid", type=int, help="the driver to watch")
    parser.add_argument("--token", required=True, help="the mark of the processes to kill")
    args = parser.parse_args(argv)
    if args.pid is not None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # outlive a Ctrl-C aimed at the driver
        wait_for_exit(args.pid)
    killed = reap(args.token)
    if args.pid is None:
        print(f"adarl.reaper: killed {len(set(killed))} process(es) marked {args.token}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
