"""The only module that touches `ray.remote`: components are plain classes wrapped here as actors.

Every component (engine, learner, allocator, reward pool) is a plain class that also runs
in-process. Pools talk to workers through `concurrent.futures.Future`s: an in-process worker
runs calls on its own single thread, a Ray actor's `ObjectRef.future()` gives the same type, so a
pool has one code path for both.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

# Every actor process gets one BLAS/OpenMP thread: two threads collapse when another process
# holds a core (measured: 20x slower), and vLLM's in-process engine needs these to start fast.
ACTOR_ENV_VARS: dict[str, str] = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "TORCHDYNAMO_DISABLE": "1",
}


def ensure_ray(*, address: str | None = None, num_cpus: int | None = None) -> None:
    """Connect to `address` (a running cluster) or start a local one; no-op if connected."""
    import ray

    if ray.is_initialized():
        return
    env = {**ACTOR_ENV_VARS, **{k: v for k, v in os.environ.items() if k in ACTOR_ENV_VARS}}
    ray.init(
        address=address,
        num_cpus=num_cpus if address is None else None,
        include_dashboard=False,
        log_to_driver=True,
        runtime_env={"env_vars": env},
    )


def spawn_actor(
    cls: type[T],
    *,
    num_cpus: float = 1.0,
    num_gpus: float = 0.0,
    name: str | None = None,
    env_vars: dict[str, str] | None = None,
    scheduling_strategy: Any = None,
    **kwargs: Any,
) -> Any:
    """Start `cls(**kwargs)` as a Ray actor; returns its handle (`handle.method.remote(...)`)."""
    import ray

    options: dict[str, Any] = {
        "num_cpus": num_cpus,
        "num_gpus": num_gpus,
        "runtime_env": {"env_vars": {**ACTOR_ENV_VARS, **(env_vars or {})}},
        "max_concurrency": 1,
    }
    if name is not None:
        options["name"] = name
    if scheduling_strategy is not None:
        options["scheduling_strategy"] = scheduling_strategy
    return ray.remote(cls).options(**options).remote(**kwargs)


class InProcessWorker:
    """Runs calls on one object, one at a time, on a private thread; returns Futures."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=type(obj).__name__)

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future:
        """`fn` is a bound method of `self.obj` (e.g. `worker.submit(worker.obj.generate, reqs)`)."""
        return self._executor.submit(fn, *args, **kwargs)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True)
