"""What the session refuses while building, before any actor or model starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from adarl.launch import CONFIG_DIR, load_config
from adarl.session import TrainingSession


def test_a_task_smaller_than_a_step_is_refused_with_the_fix(tmp_path: Path) -> None:
    """Issue 9.5: refused at build time naming the key and the fix, not at step 1 with a
    duplicate-id error."""
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        raw = compose(
            config_name="config",
            overrides=[
                "+experiment=grpo",
                "task.arithmetic.num_train_prompts=5",
                "allocator.prompts_per_step=8",
            ],
        )
    with pytest.raises(ValueError) as refused:
        TrainingSession(load_config(raw), run_dir=tmp_path).__enter__()
    message = str(refused.value)
    assert "5 training prompts but allocator.prompts_per_step=8" in message
    assert "lower allocator.prompts_per_step to at most 5 or add prompts" in message
    assert list(tmp_path.iterdir()) == []  # nothing was started or written
