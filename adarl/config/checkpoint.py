"""Structured config of checkpointing (`adarl.checkpoint.CheckpointManager`).

Fields:
    every_steps: save a checkpoint every this many training steps (and always after the last);
        0 = only after the last step.
    keep_last: how many of the most recent checkpoints to keep; None = keep all.
    resume: "auto" (continue from the run directory's latest checkpoint if it has one, else start
        fresh), "never" (start fresh), or the path of a checkpoint / run directory to start from.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CheckpointConfig:
    every_steps: int = 50
    keep_last: int | None = 2
    resume: str = "auto"

    def validate(self) -> None:
        if self.every_steps < 0:
            raise ValueError(
                f"checkpoint.every_steps={self.every_steps} must be >= 0 "
                "(0 saves only after the last step)"
            )
        if self.keep_last is not None and self.keep_last < 1:
            raise ValueError(
                f"checkpoint.keep_last={self.keep_last} must be >= 1, or null to keep every "
                "checkpoint"
            )
        if not self.resume.strip():
            raise ValueError(
                "checkpoint.resume is empty; use auto, never, or the path of a checkpoint"
            )
