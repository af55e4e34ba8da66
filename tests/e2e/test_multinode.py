"""Two Ray nodes on one machine (launch/local_multinode.sh): the resource plan spreads the actors
over both, the run completes, and the cluster is gone afterwards. Minutes: marked `heavy`.

    .venv/bin/python -m pytest -m heavy tests/e2e/test_multinode.py
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from adarl.reaper import REAPER_TOKEN_ENV, marked_processes

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(1200)
def test_a_run_spreads_over_a_head_and_a_worker_node(tmp_path: Path) -> None:
    cache = os.environ.get("ADARL_CACHE_DIR") or str(tmp_path / "cache")
    env = {k: v for k, v in os.environ.items() if k not in (REAPER_TOKEN_ENV, "RAY_ADDRESS")}
    env |= {"ADARL_MULTINODE_DIR": str(tmp_path), "ADARL_MULTINODE_CPUS": "2"}
    done = subprocess.run(
        [
            "bash",
            str(ROOT / "launch" / "local_multinode.sh"),
            "+experiment=ada_seq_balance",
            "trainer.total_steps=3",
            f"model.cache_dir={cache}",
            "model.tiny.sft_steps=120",
            "allocator.prompts_per_step=8",
            "eval.num_prompts=16",
            "eval.samples_per_prompt=2",
            "logger.mode=offline",
        ],
        capture_output=True,
        text=True,
        timeout=1100,
        env=env,
        cwd=ROOT,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == 3

    # The plan put the actors on two nodes, and Ray ran them there.
    placement = re.search(r"placement: (.*)", out)
    assert placement is not None and placement.group(1).count("(") == 2, out[-3000:]
    actors = json.loads((tmp_path / "actors.json").read_text())
    node_of = {a["class_name"]: a["node_id"] for a in actors}
    assert node_of["VLLMEngine"] != node_of["Learner"]

    # The cluster is gone: every process it started carried the script's mark.
    token = re.search(r"killed \d+ process\(es\) marked (\S+)", out)
    assert token is not None, out[-2000:]
    assert marked_processes(token.group(1)) == []


@pytest.mark.timeout(1200)
def test_a_node_without_the_shared_run_directory_is_refused_at_start(tmp_path: Path) -> None:
    """The worker node sees an empty tmpfs where the run directory is (a private mount namespace:
    what a node without the shared file system sees). The learner is placed there (the worker has
    the most CPUs), so its checkpoint shards would land where the driver cannot verify them: the
    run must refuse before training, saying why."""
    if os.geteuid() != 0:
        pytest.skip("a private mount namespace with a tmpfs needs root here")
    cache = os.environ.get("ADARL_CACHE_DIR") or str(tmp_path / "cache")
    env = {k: v for k, v in os.environ.items() if k not in (REAPER_TOKEN_ENV, "RAY_ADDRESS")}
    env |= {
        "ADARL_MULTINODE_DIR": str(tmp_path),
        "ADARL_MULTINODE_CPUS": "2",
        "ADARL_MULTINODE_WORKER_CPUS": "3",
        "ADARL_MULTINODE_PRIVATE_RUN_DIR": "1",
    }
    done = subprocess.run(
        [
            "bash",
            str(ROOT / "launch" / "local_multinode.sh"),
            "+experiment=ada_seq_balance",
            "trainer.total_steps=2",
            f"model.cache_dir={cache}",
            "model.tiny.sft_steps=120",
            "rollout=hf",
            "logger.mode=offline",
        ],
        capture_output=True,
        text=True,
        timeout=1100,
        env=env,
        cwd=ROOT,
    )
    out = done.stdout + done.stderr
    assert done.returncode != 0, out[-3000:]
    assert re.search(r"checkpoint directory .* is not shared between the driver and learner", out)
    assert "step 1/" not in out  # refused before the first step
    token = re.search(r"killed \d+ process\(es\) marked (\S+)", out)
    assert token is not None and marked_processes(token.group(1)) == []
