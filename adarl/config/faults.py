"""Structured config of fault handling: what a run survives, and how long it waits for anything.

Every wait of the step loop has a limit here; when one runs out, the run stops with an error that
names what it waited for and the key below to raise. Recovery from a dead rollout engine and the
handling of non-finite updates are configured here too (docs/operations.md lists the faults
tried and their outcomes).

`FaultsConfig`
    engine_failure: what the rollout pool does when an engine's process dies (a Ray actor killed,
        its node lost, host OOM): "restart" (start a new engine, load the current weights into it,
        re-issue the requests that were in flight on the dead one), "continue" (re-issue them on
        the surviving engines and run on with fewer), or "fail" (stop the run). Re-issued
        requests keep their ids and seeds, so they draw the same samples, and the allocator sees
        each request's results exactly once. An engine that raises an error (rather than dying)
        always stops the run: that error would recur.
    max_engine_restarts: engine deaths the run survives in total (restarts, or engines dropped
        under "continue"); the next one stops the run. 0 with "restart" or "continue" is refused
        (use "fail").
    rollout_wait_timeout_s: the longest the driver waits for the next rollout result (the
        streaming `drain_completed`, an evaluation's `generate`), including the start of a
        restarted engine. Raise it for slow engines or very long generations.
    allocator_call_timeout_s: the longest one call of the budget-allocator actor, or of the
        hint-generator actor (its calls are as light: the generations it asks for run on the
        engines, under `rollout_wait_timeout_s`), may take.
    learner_call_timeout_s: the longest one learner-group call may take on every rank (a training
        step, a checkpoint save or load, a weight gather).
    weight_sync_timeout_s: the longest one weight push may take until every engine has loaded
        the new weights (gathering included).
    max_nonfinite_streak: a training step whose loss or gradient norm is NaN or infinite is
        skipped (no weight change, counted in train/skipped_nonfinite_updates); this many skipped
        steps in a row stop the run (the batches, not the weights, are the likely cause).
"""

from __future__ import annotations

from dataclasses import dataclass

ENGINE_FAILURE_MODES = ("restart", "continue", "fail")


@dataclass
class FaultsConfig:
    engine_failure: str = "restart"
    max_engine_restarts: int = 3
    rollout_wait_timeout_s: float = 600.0
    allocator_call_timeout_s: float = 300.0
    learner_call_timeout_s: float = 1800.0
    weight_sync_timeout_s: float = 600.0
    max_nonfinite_streak: int = 3

    def validate(self) -> None:
        if self.engine_failure not in ENGINE_FAILURE_MODES:
            raise ValueError(
                f"faults.engine_failure={self.engine_failure!r}; use one of "
                f"{list(ENGINE_FAILURE_MODES)}"
            )
        if self.max_engine_restarts < 0:
            raise ValueError(f"faults.max_engine_restarts={self.max_engine_restarts} must be >= 0")
        if self.engine_failure != "fail" and self.max_engine_restarts == 0:
            raise ValueError(
                f"faults.engine_failure={self.engine_failure} with faults.max_engine_restarts=0 "
                "survives no engine death; set faults.engine_failure=fail, or "
                "faults.max_engine_restarts >= 1"
            )
        for key in (
            "rollout_wait_timeout_s",
            "allocator_call_timeout_s",
            "learner_call_timeout_s",
            "weight_sync_timeout_s",
        ):
            value = getattr(self, key)
            if not value > 0:
                raise ValueError(f"faults.{key}={value} must be > 0 (seconds)")
        if self.max_nonfinite_streak < 1:
            raise ValueError(
                f"faults.max_nonfinite_streak={self.max_nonfinite_streak} must be >= 1 (the "
                "number of consecutive skipped non-finite updates that stops the run)"
            )
