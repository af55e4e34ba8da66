"""The launch command as the e2e tests run it: `python -m adarl.launch` in a subprocess, with
W&B offline, one thread per process and Ray's token authentication off (local clusters). Built
models come from the session cache (`$ADARL_CACHE_DIR`, tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def launch(
    run_dir: Path, *overrides: str, timeout_s: int = 600
) -> subprocess.CompletedProcess[str]:
    """Run `python -m adarl.launch <overrides> hydra.run.dir=<run_dir>` to its end."""
    env = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}
    env.setdefault("RAY_AUTH_MODE", "disabled")
    return subprocess.run(
        [sys.executable, "-m", "adarl.launch", *overrides, f"hydra.run.dir={run_dir}"],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
    )


def output_tail(proc: subprocess.CompletedProcess[str]) -> str:
    """What a failed run printed last, for the assertion message."""
    return (proc.stdout + proc.stderr)[-6000:]
