"""Sandbox fixtures: both isolation modes, and a scan for processes a run left behind."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from adarl.reward.sandbox import namespace_prefix


@pytest.fixture(params=["strict", "python"])
def isolation(request: pytest.FixtureRequest) -> str:
    if request.param == "strict" and namespace_prefix() is None:
        pytest.skip("Linux namespaces (unshare --net --pid) are not available here")
    return request.param


def _live_processes() -> dict[int, tuple[str, int, str]]:
    """pid → (state, parent pid, command line) of every process on the machine."""
    processes = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as handle:
                stat = handle.read()
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # exited while we looked
        fields = stat[stat.rindex(")") + 2 :].split()
        processes[int(entry)] = (fields[0], int(fields[1]), cmdline)
    return processes


@pytest.fixture
def leftover_processes() -> Callable[[str], list[str]]:
    """Live (non-zombie) processes whose command line contains `needle`, plus any live child of
    this test process that was not already running when the test began (an earlier test in the
    same session may have left a process-lifetime helper, such as multiprocessing's resource
    tracker, which is no sandbox run's doing)."""
    me = os.getpid()
    children_before = {pid for pid, (_, parent, _) in _live_processes().items() if parent == me}

    def find(needle: str) -> list[str]:
        return [
            f"{pid}: {cmdline}"
            for pid, (state, parent, cmdline) in _live_processes().items()
            if state not in ("Z", "X")
            and (needle in cmdline or (parent == me and pid not in children_before))
        ]

    return find
