"""A training driver that records what each step trained on, for the driver-kill tests.

    python tests/e2e/fault_driver.py RUN_DIR STEPS_JSONL [HYDRA OVERRIDES...]

Runs `TrainingSession` (the real driver loop, on local Ray unless overridden) and appends one line
per finished step to STEPS_JSONL, flushed and fsynced before the next step starts, so a SIGKILL
loses at most the step in progress. It prints `TOKEN <reaper token>` once the session is built
(the mark every process of this driver carries, adarl/reaper.py) so a test can check that none
survives the kill. Exit status 0 when the run completes.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir

from adarl.driver.step_loop import StepOutcome
from adarl.launch import CONFIG_DIR, load_config
from adarl.reaper import REAPER_TOKEN_ENV
from adarl.session import TrainingSession


def main(argv: list[str]) -> int:
    run_dir, steps_path, overrides = Path(argv[0]), Path(argv[1]), argv[2:]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        config = load_config(compose(config_name="config", overrides=overrides))

    def record(outcome: StepOutcome) -> None:
        cursor = session.prompts.state_dict()
        row = {
            "step": outcome.step,
            "prompts": [g.prompt_id for g in outcome.result.groups],
            "pools": [(g.pool_size, g.pool_positives) for g in outcome.result.groups],
            "advantages": [[round(a, 6) for a in g.advantages] for g in outcome.result.groups],
            "cursor": [cursor["epoch"], cursor["position"]],
            "requests": outcome.metrics["sampling/requests"],
            "loss": round(outcome.metrics.get("train/loss", float("nan")), 5),
        }
        with steps_path.open("a") as handle:
            handle.write(json.dumps(row) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    with TrainingSession(config, run_dir=run_dir, on_step_end=record) as session:
        print(f"TOKEN {os.environ.get(REAPER_TOKEN_ENV, '')}", flush=True)
        print(f"START {session.start_step}", flush=True)
        session.train()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
