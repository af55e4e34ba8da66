"""A check's verdict (PASS, FAIL with the reason and the fix, SKIPPED with why), the report of a
pre-flight (printed, and its JSON), and the exit status."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from adarl.timed_run import write_json_atomic

# The checks, in the order they run: cheap ones first, so a broken environment shows at once.
CHECKS = ("environment", "engine", "tests_gpu", "weight_push", "session")
REPORT_FORMAT = 1  # the JSON's "format": bumped when a key changes meaning


class Status(str, Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    SKIPPED = "SKIPPED"


@dataclass
class Verdict:
    """One check's outcome. `reason`: what was found (for PASS, what was measured); `fix`: what
    to do about a FAIL; `values`: the measurements, for the JSON."""

    check: str
    status: Status
    reason: str
    fix: str | None = None
    seconds: float = 0.0
    log: str | None = None  # the check's own log file (its process's output)
    values: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.status = Status(self.status)
        if self.check not in CHECKS:
            raise ValueError(f"unknown check {self.check!r}; the checks are {list(CHECKS)}")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "status": self.status.value}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Verdict:
        return cls(**data)

    def lines(self) -> list[str]:
        """The console lines: the verdict, then the fix and the log of a failure."""
        took = f"{self.seconds:6.1f} s" if self.status is not Status.SKIPPED else " " * 8
        lines = [
            f"[{self.status.value}]{' ' * (8 - len(self.status.value))}{self.check:<12} "
            f"{took}  {self.reason}"
        ]
        if self.status is Status.FAIL:
            if self.fix:
                lines.append(f"{'':31}fix: {self.fix}")
            if self.log:
                lines.append(f"{'':31}log: {self.log}")
        return lines


@dataclass
class PreflightReport:
    """Everything the JSON holds; rewritten after every check, so a kill leaves what was done."""

    overrides: list[str]
    mode: str  # "node" (the user's model and data), "small-model" or "dry-run"
    out_dir: str
    started: str = field(default_factory=lambda: time.strftime("%Y-%m-%d %H:%M:%S"))
    node: dict[str, Any] = field(default_factory=dict)  # adarl.preflight.node.NodeFacts
    verdicts: list[Verdict] = field(default_factory=list)
    seconds: float = 0.0

    def counts(self) -> dict[str, int]:
        return {s.value: sum(v.status is s for v in self.verdicts) for s in Status}

    @property
    def ok(self) -> bool:
        """No check failed (skipped checks say what they could not check, they fail nothing)."""
        return all(v.status is not Status.FAIL for v in self.verdicts)

    def exit_status(self) -> int:
        return 0 if self.ok else 1

    def to_json(self) -> dict[str, Any]:
        return {
            "format": REPORT_FORMAT,
            "started": self.started,
            "mode": self.mode,
            "overrides": self.overrides,
            "out_dir": self.out_dir,
            "node": self.node,
            "checks": [v.to_json() for v in self.verdicts],
            "counts": self.counts(),
            "ok": self.ok,
            "seconds": round(self.seconds, 1),
        }

    def write(self, path: Path) -> None:
        write_json_atomic(path, self.to_json())

    def summary(self) -> str:
        counts = self.counts()
        line = (
            f"pre-flight {'passed' if self.ok else 'FAILED'}: {counts['PASS']} PASS, "
            f"{counts['FAIL']} FAIL, {counts['SKIPPED']} SKIPPED in {self.seconds:.0f} s"
        )
        failed = [v.check for v in self.verdicts if v.status is Status.FAIL]
        if failed:
            line += f" (failed: {', '.join(failed)})"
        skipped = [v.check for v in self.verdicts if v.status is Status.SKIPPED]
        if skipped:
            line += f"; not checked: {', '.join(skipped)}"
        return line
