"""The only module that touches `ray.remote`: components are plain classes wrapped here as actors.

Every component (engine, learner, allocator, reward pool) is a plain class that also runs
in-process. Pools talk to workers through `concurrent.futures.Future`s: an in-process worker
runs calls on its own single thread, a Ray actor's `ObjectRef.future()` gives the same type, so a
pool has one code path for both.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar, cast

T = TypeVar("T")

# Every actor process gets one BLAS/OpenMP thread: two threads collapse when another process
# holds a core (measured: 20x slower), and vLLM's in-process engine needs these to start fast.
ACTOR_ENV_VARS: dict[str, str] = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "TORCHDYNAMO_DISABLE": "1",
    "VLLM_LOGGING_LEVEL": "WARNING",  # per-request INFO lines drown the run's own progress
}


def ensure_ray(*, address: str | None = None, num_cpus: int | None = None) -> None:
    """Connect to `address` (a running cluster) or start a local one; no-op if connected.

    A local cluster runs without the dashboard (its job API would run any code it is sent), and
    with its host pinned to 127.0.0.1 should a later Ray start it anyway. Ray's own gRPC servers
    (GCS, raylet, workers) listen on every interface whatever is passed here (Ray 2.60, measured
    with `ss -ltnp`; `ray.init` even rewrites a node address of 127.0.0.1 to the machine's), so
    on a shared network a firewall, not adarl, keeps them private.
    """
    import ray

    if ray.is_initialized():
        return
    env = {**ACTOR_ENV_VARS, **{k: v for k, v in os.environ.items() if k in ACTOR_ENV_VARS}}
    # Inside `ray job submit` RAY_ADDRESS names the cluster: connect, never size a new one.
    joining = address is not None or bool(os.environ.get("RAY_ADDRESS"))
    ray.init(
        address=address,
        num_cpus=None if joining else num_cpus,
        include_dashboard=False,
        dashboard_host="127.0.0.1",
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
        """`fn` is a bound method of `self.obj`, e.g. `submit(worker.obj.generate, requests)`."""
        return self._executor.submit(fn, *args, **kwargs)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True)


@dataclass(frozen=True)
class ActorPlacement:
    role: str  # "rollout_engine" | "learner" | "allocator"
    index: int
    num_cpus: float
    num_gpus: float


@dataclass(frozen=True)
class ResourcePlan:
    actors: tuple[ActorPlacement, ...]

    @property
    def cpus(self) -> float:
        return sum(a.num_cpus for a in self.actors)

    @property
    def gpus(self) -> float:
        return sum(a.num_gpus for a in self.actors)

    def of(self, role: str) -> list[ActorPlacement]:
        return [a for a in self.actors if a.role == role]


def plan_resources(
    *,
    rollout_engines: int,
    cpus_per_engine: float,
    gpus_per_engine: float,
    learners: int,
    cpus_per_learner: float,
    gpus_per_learner: float,
    cpus_for_allocator: float,
    available_cpus: float,
    available_gpus: float,
) -> ResourcePlan:
    """Place every actor, or say which config keys to change. Pure: no Ray, no side effects."""
    actors = (
        *(
            ActorPlacement("rollout_engine", i, cpus_per_engine, gpus_per_engine)
            for i in range(rollout_engines)
        ),
        *(
            ActorPlacement("learner", i, cpus_per_learner, gpus_per_learner)
            for i in range(learners)
        ),
        ActorPlacement("allocator", 0, cpus_for_allocator, 0.0),
    )
    plan = ResourcePlan(actors=actors)
    if plan.cpus > available_cpus + 1e-9:
        raise ValueError(
            f"the run needs {plan.cpus:g} CPUs ({rollout_engines} rollout engine(s) x "
            f"{cpus_per_engine:g} + {learners} learner(s) x {cpus_per_learner:g} + allocator "
            f"{cpus_for_allocator:g}) but the cluster has {available_cpus:g}; lower "
            "cluster.rollout_engines / cluster.learners or cluster.cpus_per_engine / "
            "cluster.cpus_per_learner (fractions such as 0.5 are allowed)"
        )
    if plan.gpus > available_gpus + 1e-9:
        raise ValueError(
            f"the run needs {plan.gpus:g} GPUs ({rollout_engines} engine(s) x {gpus_per_engine:g} "
            f"+ {learners} learner(s) x {gpus_per_learner:g}) but the cluster has "
            f"{available_gpus:g}; set cluster.gpus_per_engine / cluster.gpus_per_learner "
            "(0 on a CPU-only machine) or add GPU nodes"
        )
    return plan


class _BlockingActorProxy:
    """Calls an actor's methods synchronously: `proxy.observe(x)` == `ray.get(h.observe.remote(x))`.

    Only methods that exist on the wrapped class are reachable, so a typo fails at the call site
    with the class's name instead of inside Ray.
    """

    def __init__(self, handle: Any, cls: type) -> None:
        self._handle = handle
        self._cls = cls

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or not callable(getattr(self._cls, name, None)):
            raise AttributeError(f"{self._cls.__name__} has no public method {name!r}")
        import ray

        method = getattr(self._handle, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return ray.get(method.remote(*args, **kwargs))

        return call


def blocking_proxy(handle: Any, cls: type[T]) -> T:
    """View an actor of `cls` as a `cls` whose method calls block: same call sites as in-process."""
    return cast(T, _BlockingActorProxy(handle, cls))
