"""A lone in-process learner shares a one-process torch.distributed world someone else made.

An in-process vLLM engine initialises such a world and never tears it down; the learner must then
run on it (in-process mode puts engines and the learner in one process) and leave it in place.
"""

from __future__ import annotations

import pytest
import torch.distributed as dist

from adarl.learner import LearnerGroup
from adarl.learner.process_group import free_port

from .conftest import small_batch


@pytest.mark.slow
def test_learner_shares_an_existing_one_process_world(tiny_policy_dir: str) -> None:
    # In a test process that already ran an in-process vLLM engine the world exists: that is
    # the case itself. Otherwise this test makes it, as such an engine would, and removes it.
    made_here = not dist.is_initialized()
    if made_here:
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1
        )
    assert dist.get_world_size() == 1
    try:
        group = LearnerGroup(in_process=True, model_path=tiny_policy_dir, zero_stage=3)
        try:
            result = group.train_step(small_batch())
        finally:
            group.shutdown()
        assert result.grad_norm > 0
        assert dist.is_initialized()  # not the learner's to destroy
        with pytest.raises(ValueError, match="one learner"):
            LearnerGroup(in_process=True, num_learners=2, model_path=tiny_policy_dir)
    finally:
        if made_here:
            dist.destroy_process_group()
