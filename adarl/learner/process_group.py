"""A learner rank's place in the data-parallel world: DeepSpeed's accelerator, the process group.

No launcher is needed: the rank, world size and rendezvous address are set explicitly (RANK,
LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), gloo on CPU and NCCL on GPU.

DeepSpeed's shared-memory allreduce op (an optional fast path for intra-node CPU allreduce) is
marked unavailable before the process group starts, so gloo does the collectives and no C++ op
is built on a fresh CPU machine (measured, DeepSpeed 0.19.8: the shm comm build takes ≈ 50 s on
first use; with the learner's client AdamW no op is built at all, checked with an empty
TORCH_EXTENSIONS_DIR, stages 0-3, fp32 and bf16).
"""

from __future__ import annotations

import logging
import os
import socket
from datetime import timedelta
from typing import Any


def free_port() -> int:
    """A TCP port free on this host right now (for the process group's rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def use_deepspeed_accelerator(device_type: str) -> None:
    """Point DeepSpeed's process-wide accelerator at `device_type` ("cpu" or "cuda").

    DeepSpeed picks CUDA whenever torch sees a GPU and `deepspeed.initialize` moves the model
    there. A CPU learner in a process that sees a GPU (`cluster.in_process=true` with
    `cluster.gpus_per_learner=0` on a GPU machine) would then score CPU inputs with CUDA weights;
    Ray actors without GPUs see none and are unaffected.
    """
    from deepspeed.accelerator import get_accelerator, set_accelerator

    if get_accelerator().device_name() == device_type:
        return
    if device_type == "cuda":
        from deepspeed.accelerator.cuda_accelerator import CUDA_Accelerator

        set_accelerator(CUDA_Accelerator())
    elif device_type == "cpu":
        from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

        set_accelerator(CPU_Accelerator())
    else:
        raise ValueError(f"device_type must be 'cpu' or 'cuda', got {device_type!r}")


def join_process_group(
    *,
    rank: int,
    world_size: int,
    master_addr: str,
    master_port: int,
    backend: str,
    timeout_s: float,
) -> bool:
    """Join the learners' world (all ranks at once); returns whether this call created it, and
    so whether `leave_process_group` must destroy it."""
    import deepspeed
    import deepspeed.ops
    import torch.distributed as dist

    # No C++ shm-allreduce build (≈50 s on first use); gloo handles CPU collectives.
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK="0",
        WORLD_SIZE=str(world_size),
        MASTER_ADDR=master_addr,
        MASTER_PORT=str(master_port),
    )
    if dist.is_initialized():
        # An in-process vLLM engine sets up a one-process world and never tears it down; a
        # lone learner shares it (collectives of one rank are local) and leaves it in place.
        if world_size == 1 and dist.get_world_size() == 1:
            deepspeed.init_distributed(dist_backend=dist.get_backend(), verbose=False)
            return False
        raise RuntimeError(
            f"torch.distributed is already initialised in this process with world size "
            f"{dist.get_world_size()}; a learner of world size {world_size} needs its "
            "own process (run learners as Ray actors)"
        )
    deepspeed.init_distributed(
        dist_backend=backend,
        auto_mpi_discovery=False,
        init_method=f"tcp://{master_addr}:{master_port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=timeout_s),
        verbose=False,
    )
    return True


def leave_process_group(*, owns_world: bool, data_parallel_group: Any) -> None:
    """Release what `join_process_group` and the engine took, so another learner can start here.

    A world this rank created (`owns_world`) is destroyed; a shared one is left alone, and only
    the data-parallel group DeepSpeed cloned from it (`data_parallel_group`, None when no engine
    was built) is released.
    """
    import deepspeed.comm

    if owns_world:
        deepspeed.comm.destroy_process_group()
    elif data_parallel_group is not None:
        deepspeed.comm.destroy_process_group(group=data_parallel_group)
