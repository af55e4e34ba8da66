"""What every actor's environment carries (adarl/cluster.py): one BLAS/OpenMP thread only where
there is no GPU, and nothing that switches torch.compile off (a compiled vLLM engine needs it)."""

from __future__ import annotations

import pytest

from adarl.cluster import ACTOR_ENV_VARS, actor_thread_env


def test_no_actor_inherits_a_disabled_torch_compile() -> None:
    assert "TORCHDYNAMO_DISABLE" not in ACTOR_ENV_VARS
    assert "TORCH_COMPILE_DISABLE" not in ACTOR_ENV_VARS


@pytest.mark.parametrize(
    ("num_cpus", "num_gpus", "threads"),
    [
        (1.0, 0.0, "1"),  # the CPU machine: every actor shares two cores
        (4.0, 0.0, "1"),  # a CPU actor on a GPU node (allocator, reward) stays small
        (4.0, 1.0, "4"),  # a learner or an engine: its CPU share
        (0.5, 1.0, "1"),  # at least one
        (2.5, 0.5, "2"),
    ],
)
def test_threads_follow_the_actors_resources(
    num_cpus: float, num_gpus: float, threads: str
) -> None:
    env = actor_thread_env(num_cpus=num_cpus, num_gpus=num_gpus)
    assert env == {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
