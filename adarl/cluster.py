"""The only module that touches `ray.remote`: components are plain classes wrapped here as actors.

Every component (engine, learner, allocator, reward pool) is a plain class that also runs
in-process. Pools talk to workers through `concurrent.futures.Future`s: an in-process worker
runs calls on its own single thread, a Ray actor's `ObjectRef.future()` gives the same type, so a
pool has one code path for both.
"""

from __future__ import annotations

import concurrent.futures
import os
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
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


GCS_TASK_EVENTS_ENV = "RAY_task_events_max_num_task_in_gcs"


def ensure_ray(*, address: str | None = None, num_cpus: int | None = None) -> None:
    """Connect to `address` (a running cluster) or start a local one; no-op if connected.

    A local cluster runs without the dashboard (its job API would run any code it is sent), and
    with its host pinned to 127.0.0.1 should a later Ray start it anyway. Its processes carry
    this process's reaper token (adarl/reaper.py): should this process die without shutting Ray
    down (SIGKILL, OOM), the reaper kills every one of them. Ray's own gRPC servers
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
    if not joining:
        from adarl.reaper import start_reaper

        start_reaper()  # before ray.init: the processes it starts inherit the token
        # Ray's GCS keeps the events of the last 100k tasks by default, ~3.2 MiB per 1000 actor
        # calls (measured, Ray 2.60): the soak saw it grow 55% from step 50 to 200. A run makes
        # many calls per step and reads none of them; keep the last 1000 (ray list tasks).
        os.environ.setdefault(GCS_TASK_EVENTS_ENV, "1000")
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


def is_actor_death(error: BaseException) -> bool:
    """True when `error` says an actor's process is gone (killed, crashed, its node lost), as
    opposed to an exception its method raised (Ray wraps those in `RayTaskError`)."""
    try:
        from ray.exceptions import RayActorError
    except ImportError:  # the in-process path must not need Ray
        return False
    return isinstance(error, RayActorError)


def result_within(future: Future[T], timeout_s: float | None, *, waiting_for: str, key: str) -> T:
    """`future.result()`, or a `TimeoutError` after `timeout_s` naming what was awaited and the
    config key that sets the limit."""
    try:
        return future.result(timeout=timeout_s)
    except concurrent.futures.TimeoutError:
        raise TimeoutError(
            f"{waiting_for} did not finish within {timeout_s:g} s ({key}); raise {key} if it "
            "is only slow, or look for a stuck or dead worker in the Ray logs"
        ) from None


def results_within(
    futures: Sequence[Future[T]], timeout_s: float | None, *, waiting_for: str, key: str
) -> list[T]:
    """Every future's result, waiting at most `timeout_s` in all; the first failure propagates
    once every call has finished (so no call is left running behind an error)."""
    _, pending = concurrent.futures.wait(futures, timeout=timeout_s)
    if pending:
        raise TimeoutError(
            f"{waiting_for}: {len(pending)} of {len(futures)} calls did not finish within "
            f"{timeout_s:g} s ({key}); raise {key} if they are only slow, or look for a stuck "
            "or dead worker in the Ray logs"
        )
    return [future.result() for future in futures]


# -- placement ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeResources:
    """A node of the cluster as the plan sees it: Ray's node id, its address, its capacity."""

    node_id: str | None  # None: the plan is not tied to nodes (one machine, or in-process)
    address: str
    cpus: float
    gpus: float


@dataclass(frozen=True)
class ActorPlacement:
    role: str  # "rollout_engine" | "learner" | "allocator"
    index: int
    num_cpus: float
    num_gpus: float
    node_id: str | None = None  # the node the plan put it on
    node_address: str = ""

    def scheduling_strategy(self, *, soft: bool = False) -> Any:
        """Ray's strategy that puts the actor on its planned node (None when not node-bound).
        `soft`: prefer the node but go elsewhere when it is gone (restarts after a node loss)."""
        if self.node_id is None:
            return None
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return NodeAffinitySchedulingStrategy(node_id=self.node_id, soft=soft)


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

    def scheduling(self, role: str) -> list[Any]:
        """Per actor of `role` (by index), the Ray scheduling strategy that places it."""
        return [a.scheduling_strategy() for a in self.of(role)]

    def describe(self) -> str:
        """One line per node: which actors the plan put there."""
        by_node: dict[str, list[str]] = {}
        for a in self.actors:
            # Nodes on one machine share an address: the id tells them apart.
            node = f"{a.node_address} ({a.node_id[:8]})" if a.node_id else "any node"
            by_node.setdefault(node, []).append(f"{a.role}{a.index}")
        return "; ".join(f"{node}: {', '.join(names)}" for node, names in by_node.items())


def cluster_nodes() -> list[NodeResources]:
    """The alive nodes of the connected Ray cluster and their total CPUs/GPUs."""
    import ray

    return [
        NodeResources(
            node_id=str(node["NodeID"]),
            address=str(node.get("NodeManagerAddress", "")),
            cpus=float(node["Resources"].get("CPU", 0.0)),
            gpus=float(node["Resources"].get("GPU", 0.0)),
        )
        for node in ray.nodes()
        if node.get("Alive")
    ]


def plan_resources(
    *,
    rollout_engines: int,
    cpus_per_engine: float,
    gpus_per_engine: float,
    learners: int,
    cpus_per_learner: float,
    gpus_per_learner: float,
    cpus_for_allocator: float,
    available_cpus: float | None = None,
    available_gpus: float | None = None,
    nodes: Sequence[NodeResources] | None = None,
) -> ResourcePlan:
    """Place every actor on a node, or say which config keys to change. Pure: no Ray.

    `nodes`: the cluster's nodes (`cluster_nodes()`); without them, one node with
    `available_cpus` / `available_gpus`. Actors are placed largest first (GPUs, then CPUs), each
    on the node with the most capacity left that fits it, so they spread over the nodes; the
    allocator (often 0 CPUs) goes last.
    """
    if nodes is None:
        if available_cpus is None or available_gpus is None:
            raise ValueError("plan_resources needs nodes= or available_cpus= and available_gpus=")
        nodes = [NodeResources(None, "", available_cpus, available_gpus)]
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
    total_cpus = sum(n.cpus for n in nodes)
    total_gpus = sum(n.gpus for n in nodes)
    if plan.cpus > total_cpus + 1e-9:
        raise ValueError(
            f"the run needs {plan.cpus:g} CPUs ({rollout_engines} rollout engine(s) x "
            f"{cpus_per_engine:g} + {learners} learner(s) x {cpus_per_learner:g} + allocator "
            f"{cpus_for_allocator:g}) but the cluster has {total_cpus:g}; lower "
            "cluster.rollout_engines / cluster.learners or cluster.cpus_per_engine / "
            "cluster.cpus_per_learner (fractions such as 0.5 are allowed)"
        )
    if plan.gpus > total_gpus + 1e-9:
        raise ValueError(
            f"the run needs {plan.gpus:g} GPUs ({rollout_engines} engine(s) x {gpus_per_engine:g} "
            f"+ {learners} learner(s) x {gpus_per_learner:g}) but the cluster has "
            f"{total_gpus:g}; set cluster.gpus_per_engine / cluster.gpus_per_learner "
            "(0 on a CPU-only machine) or add GPU nodes"
        )
    free = {i: [node.gpus, node.cpus] for i, node in enumerate(nodes)}
    placed: dict[tuple[str, int], ActorPlacement] = {}
    order = sorted(
        actors, key=lambda a: (a.role == "allocator", -a.num_gpus, -a.num_cpus, a.role, a.index)
    )
    for actor in order:
        fits = [
            i
            for i, (gpus, cpus) in free.items()
            if gpus + 1e-9 >= actor.num_gpus and cpus + 1e-9 >= actor.num_cpus
        ]
        if not fits:
            capacity = ", ".join(
                f"{node.address or 'node'} {node.cpus:g} CPUs/{node.gpus:g} GPUs" for node in nodes
            )
            raise ValueError(
                f"{actor.role} {actor.index} needs {actor.num_cpus:g} CPUs and "
                f"{actor.num_gpus:g} GPUs on one node, but after placing the larger actors no "
                f"node has that much left (nodes: {capacity}); use fractional "
                "cluster.cpus_per_engine / cluster.cpus_per_learner, fewer actors, or larger "
                "nodes"
            )
        best = max(fits, key=lambda i: (free[i][0], free[i][1], -i))
        free[best][0] -= actor.num_gpus
        free[best][1] -= actor.num_cpus
        placed[(actor.role, actor.index)] = replace(
            actor, node_id=nodes[best].node_id, node_address=nodes[best].address
        )
    return ResourcePlan(actors=tuple(placed[(a.role, a.index)] for a in actors))


class _BlockingActorProxy:
    """Calls an actor's methods synchronously: `proxy.observe(x)` == `ray.get(h.observe.remote(x))`
    with a time limit (`timeout_s`; `TimeoutError` naming the method and `timeout_key` after it).

    Only methods that exist on the wrapped class are reachable, so a typo fails at the call site
    with the class's name instead of inside Ray.
    """

    def __init__(
        self, handle: Any, cls: type, *, timeout_s: float | None, timeout_key: str
    ) -> None:
        self._handle = handle
        self._cls = cls
        self._timeout_s = timeout_s
        self._timeout_key = timeout_key

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or not callable(getattr(self._cls, name, None)):
            raise AttributeError(f"{self._cls.__name__} has no public method {name!r}")
        import ray
        from ray.exceptions import GetTimeoutError

        method = getattr(self._handle, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return ray.get(method.remote(*args, **kwargs), timeout=self._timeout_s)
            except GetTimeoutError:
                raise TimeoutError(
                    f"{self._cls.__name__}.{name} (a Ray actor) did not return within "
                    f"{self._timeout_s:g} s ({self._timeout_key}); raise {self._timeout_key} "
                    "if it is only slow, or look for a stuck or dead actor in the Ray logs"
                ) from None

        return call


def blocking_proxy(
    handle: Any,
    cls: type[T],
    *,
    timeout_s: float | None = None,
    timeout_key: str = "faults.allocator_call_timeout_s",
) -> T:
    """View an actor of `cls` as a `cls` whose method calls block (at most `timeout_s` each):
    the same call sites as in-process."""
    return cast(T, _BlockingActorProxy(handle, cls, timeout_s=timeout_s, timeout_key=timeout_key))
