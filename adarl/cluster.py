"""The only module that touches `ray.remote`: components are plain classes wrapped here as actors.

Every component (engine, learner, allocator, reward pool) is a plain class that also runs
in-process. Pools talk to workers through `concurrent.futures.Future`s: an in-process worker
runs calls on its own single thread, a Ray actor's `ObjectRef.future()` gives the same type, so a
pool has one code path for both.

An actor's library output (vLLM, torch, DeepSpeed, NUMA: warnings, deprecation notices, progress
bars, C++ messages) goes to a file of the run, not to the console, once the session has named a
directory (`set_library_log_dir`):

    spawn_actor(cls) ─► in the actor, before cls.__init__: file descriptors 1 and 2
                        ─► RUN_DIR/logs/<Class>-<pid>.log  (everything the process prints)
                        "adarl" logger ─► the original stderr ─► Ray ─► the driver's console

`library_output_to(path)` does the same for a block of this process: `python -m adarl.evaluate`
runs its engine in-process, and its console keeps only its own lines.

An exception an actor's method raises reaches the driver as before (Ray's `RayTaskError`, its
traceback included); an actor error that stops the run gets a note naming the actor's file
(`library_log_note`), where what it printed before it died can be read.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import inspect
import logging
import os
import re
import socket
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO, TypeVar, cast

T = TypeVar("T")

# Every actor: vLLM's engine core in the actor's own process (the weight-update path needs it,
# and it starts in seconds), and no per-request INFO lines drowning the run's own progress.
# torch.compile is not decided here: a vLLM engine sets it from its `enforce_eager`
# (adarl/rollout/vllm_engine.py), and nothing else compiles.
ACTOR_ENV_VARS: dict[str, str] = {
    "TOKENIZERS_PARALLELISM": "false",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_LOGGING_LEVEL": "WARNING",
}
THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def actor_thread_env(*, num_cpus: float, num_gpus: float) -> dict[str, str]:
    """BLAS/OpenMP threads of an actor. Without a GPU, one: on a machine whose cores every actor
    shares, two threads collapse when another process holds a core (measured on the 2-core
    machine: 20x slower). A GPU actor (a learner, an engine) gets its CPU share, at least one:
    its host-side work (DeepSpeed's optimizer on CPU, tokenisation, data) should not be held to
    one thread on a GPU node."""
    threads = 1 if num_gpus <= 0 else max(1, int(num_cpus))
    return {name: str(threads) for name in THREAD_ENV_VARS}


GCS_TASK_EVENTS_ENV = "RAY_task_events_max_num_task_in_gcs"


def ensure_ray(
    *, address: str | None = None, num_cpus: int | None = None, num_gpus: int | None = None
) -> None:
    """Connect to `address` (a running cluster) or start a local one; no-op if connected.
    `num_cpus`, `num_gpus`: a local cluster's resources (None: what Ray detects).

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
        num_gpus=None if joining else num_gpus,
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
    """Start `cls(**kwargs)` as a Ray actor; returns its handle (`handle.method.remote(...)`).

    With a library log directory set (`set_library_log_dir`), the actor writes its library
    output to `<directory>/<cls name>-<pid>.log` from before `cls.__init__` on."""
    import ray

    if _library_log_dir is not None:
        kwargs = {**kwargs, _LOG_DIR_KWARG: str(_library_log_dir)}
    options: dict[str, Any] = {
        "num_cpus": num_cpus,
        "num_gpus": num_gpus,
        "runtime_env": {
            "env_vars": {
                **ACTOR_ENV_VARS,
                **actor_thread_env(num_cpus=num_cpus, num_gpus=num_gpus),
                **(env_vars or {}),
            }
        },
        "max_concurrency": 1,
    }
    if name is not None:
        options["name"] = name
    if scheduling_strategy is not None:
        options["scheduling_strategy"] = scheduling_strategy
    # Always the wrapped class (a no-op without the directory): Ray knows an actor class by its
    # module and name, so one class under that name keeps every actor of the job consistent.
    return ray.remote(_quiet_class(cls)).options(**options).remote(**kwargs)


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
    futures: Sequence[Future[T]],
    timeout_s: float | None,
    *,
    waiting_for: str,
    key: str,
    fail_fast: bool = False,
) -> list[T]:
    """Every future's result, waiting at most `timeout_s` in all; the first failure propagates
    once every call has finished (so no call is left running behind an error), or, with
    `fail_fast`, as soon as it is known (for the members of one collective, which cannot finish
    once one of them has failed)."""
    when = concurrent.futures.FIRST_EXCEPTION if fail_fast else concurrent.futures.ALL_COMPLETED
    done, pending = concurrent.futures.wait(futures, timeout=timeout_s, return_when=when)
    if fail_fast:
        failed = [f for f in futures if f in done and f.exception() is not None]
        if failed:
            failed[0].result()  # raises it
    if pending:
        raise TimeoutError(
            f"{waiting_for}: {len(pending)} of {len(futures)} calls did not finish within "
            f"{timeout_s:g} s ({key}); raise {key} if they are only slow, or look for a stuck "
            "or dead worker in the Ray logs"
        )
    return [future.result() for future in futures]


# -- library output of actors ------------------------------------------------------------------

LIBRARY_LOG_DIR = "logs"  # under the run directory
LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"  # the driver's (Hydra's)
_LOG_DIR_KWARG = "_adarl_library_log_dir"
_library_log_dir: Path | None = None


def set_library_log_dir(directory: str | Path | None) -> None:
    """Actors spawned from now on write their library output under `directory` (created on the
    actor's node if missing); None: it stays on their stdout/stderr, which Ray forwards to the
    console. The session sets `RUN_DIR/logs` (logger.library_logs=file)."""
    global _library_log_dir
    _library_log_dir = None if directory is None else Path(directory).absolute()


def library_log_dir() -> Path | None:
    """Where actors spawned now write their library output (None: on the console)."""
    return _library_log_dir


def library_log_file(directory: str | Path, class_name: str, pid: int) -> Path:
    return Path(directory) / f"{class_name}-{pid}.log"


@functools.cache
def _quiet_class(cls: type[T]) -> type[T]:
    """`cls` whose `__init__` first sends the process's output to a file when it is given
    `_adarl_library_log_dir=DIR`. Same name, module and qualname, so Ray's process title stays
    `ray::<cls name>` and its log lines `(<cls name> pid=...)`; the signature is `cls`'s plus
    that keyword, so Ray still checks the arguments at the call site."""
    original_init = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        directory = kwargs.pop(_LOG_DIR_KWARG, None)
        if directory is not None:
            pid = os.getpid()
            redirect_library_output(
                library_log_file(directory, cls.__name__, pid), label=f"{cls.__name__} pid {pid}"
            )
        original_init(self, *args, **kwargs)

    signature = inspect.signature(original_init)
    parameters = list(signature.parameters.values())
    at = next(
        (i for i, p in enumerate(parameters) if p.kind is inspect.Parameter.VAR_KEYWORD),
        len(parameters),
    )
    parameters.insert(
        at, inspect.Parameter(_LOG_DIR_KWARG, inspect.Parameter.KEYWORD_ONLY, default=None)
    )
    __init__.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    __init__.__doc__ = original_init.__doc__
    namespace = {
        "__init__": __init__,
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
    }
    return cast("type[T]", type(cls)(cls.__name__, (cls,), namespace))


_console: TextIO | None = None  # in an actor whose output was redirected: the original stderr


def redirect_library_output(path: Path, *, label: str) -> bool:
    """Send everything this process prints from now on (Python and C/C++ alike: file descriptors
    1 and 2) to `path`, appended; the "adarl" logger still writes to the original stderr (a Ray
    actor's goes to the driver's console) and to the file. Returns False, having said so on
    stderr, when `path` cannot be written (a node without the run directory's parent): the
    output then stays where it was. Once per process; never call it in a process whose console
    matters otherwise (the in-process path does not).
    """
    global _console
    if _console is not None:
        return True
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as error:
        print(
            f"adarl: {label} cannot write its library log {path} ({error}); its library "
            "output stays on this console and in Ray's worker logs",
            file=sys.stderr,
            flush=True,
        )
        return False
    _flush_std_streams()
    console_fd = os.dup(2)
    os.dup2(target, 1)
    os.dup2(target, 2)
    os.close(target)
    _console = os.fdopen(console_fd, "w", buffering=1, encoding="utf-8", errors="backslashreplace")
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    os.write(2, f"adarl: {label} on {socket.gethostname()}, output from {started}\n".encode())
    adarl_log = logging.getLogger("adarl")
    formatter = logging.Formatter(LOG_FORMAT)
    for stream in (_console, sys.stderr):
        handler = logging.StreamHandler(stream)
        handler.setFormatter(formatter)
        adarl_log.addHandler(handler)
    adarl_log.propagate = False  # a library's root handler would print adarl's lines twice
    return True


@contextlib.contextmanager
def library_output_to(path: Path) -> Iterator[TextIO]:
    """For the block, everything this process prints (Python and C/C++ alike: file descriptors 1 and
    2) goes to `path`, appended, as an actor's goes to its file; the stream the block is given
    writes to the original stdout, the "adarl" logger to the original stderr. Restored when the
    block ends. For a command whose own output is a few console lines around an in-process engine
    (`python -m adarl.evaluate`); an actor's output goes to its file for good
    (`redirect_library_output`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    _flush_std_streams()
    saved = (os.dup(1), os.dup(2))
    console, console_err = (
        os.fdopen(os.dup(fd), "w", buffering=1, encoding="utf-8", errors="backslashreplace")
        for fd in saved
    )
    os.dup2(target, 1)
    os.dup2(target, 2)
    os.close(target)
    handler = logging.StreamHandler(console_err)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    adarl_log = logging.getLogger("adarl")
    propagate = adarl_log.propagate
    adarl_log.addHandler(handler)
    adarl_log.propagate = False  # a library's root handler would write adarl's lines to the file
    try:
        yield console
    finally:
        _flush_std_streams()
        adarl_log.removeHandler(handler)
        adarl_log.propagate = propagate
        for stream in (console, console_err):
            stream.close()
        for fd, saved_fd in enumerate(saved, start=1):
            os.dup2(saved_fd, fd)
            os.close(saved_fd)


def _flush_std_streams() -> None:
    """What Python buffered for stdout and stderr, written before their file descriptors move."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed or replaced stream: nothing to flush
            stream.flush()


def _ray_actor_errors() -> tuple[type[BaseException], ...]:
    try:
        from ray.exceptions import RayActorError, RayTaskError
    except ImportError:  # the in-process path must not need Ray
        return ()
    return (RayActorError, RayTaskError)


def _error_chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


# Ray writes an actor's class, pid and node in its errors' text: "ray::Learner.train_step()
# (pid=7269, ip=10.0.0.2, ...)" (RayTaskError), "class_name: Learner ... pid: 7269 ... ip: ..."
# (ActorDiedError); a RayTaskError raised on the driver keeps no attribute of them.
_CLASS = re.compile(r"ray::(\w+)|class_name: (\w+)")
_PID = re.compile(r"\bpid(?:=|: )(\d+)")
_IP = re.compile(r"\bip(?:=|: )([0-9A-Fa-f.:]*[0-9A-Fa-f])")


def library_log_note(error: BaseException, directory: str | Path | None = None) -> str | None:
    """A line naming the file with the output of the actor behind `error` (an actor's death or
    a method's exception, or an error caused by one), or None when no Ray actor error is in its
    chain or actors' output is not sent to files. `directory`: the actors' log directory,
    default the one set now (`set_library_log_dir`)."""
    directory = _library_log_dir if directory is None else Path(directory)
    kinds = _ray_actor_errors()
    if directory is None or not kinds:
        return None
    actor_error = next((e for e in _error_chain(error) if isinstance(e, kinds)), None)
    if actor_error is None:
        return None
    text = str(actor_error)
    class_match, pid_match, ip_match = _CLASS.search(text), _PID.search(text), _IP.search(text)
    if pid_match is None:
        return (
            f"the actors' output (library warnings, what each printed before it stopped) is in "
            f"{directory}/<Class>-<pid>.log, one file per actor process"
        )
    pid = int(pid_match.group(1))
    name = next((g for g in class_match.groups() if g), None) if class_match else None
    candidates = [library_log_file(directory, name, pid)] if name else []
    candidates += sorted(directory.glob(f"*-{pid}.log"))
    path = next((c for c in candidates if c.exists()), None)
    where = ""
    if path is None:
        path = candidates[0] if candidates else library_log_file(directory, "*", pid)
        if ip_match is not None:
            where = f" on node {ip_match.group(1)}"
    return (
        f"{name or 'the actor'} pid {pid}: its output (library warnings, what it printed before "
        f"it stopped) is in {path}{where}"
    )


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
    role: str  # "rollout_engine" | "learner" | "hint_engine" | "allocator" | "hint_generator"
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
    hint_generator: bool = False,
    cpus_for_hint_generator: float = 0.0,
    hint_engines: int = 0,
    cpus_for_hint_engine: float = 0.0,
    gpus_for_hint_engine: float = 0.0,
) -> ResourcePlan:
    """Place every actor on a node, or say which config keys to change. Pure: no Ray.

    `nodes`: the cluster's nodes (`cluster_nodes()`); without them, one node with
    `available_cpus` / `available_gpus`. Actors are placed largest first (GPUs, then CPUs), each
    on the node with the most capacity left that fits it, so they spread over the nodes; the
    allocator and the hint generator (often 0 CPUs) go last. `hint_generator`: the hint-generator
    actor (hints on); `hint_engines`: the hint model's engine actors (`hints.source=model`: 1),
    placed like the rollout engines.
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
        *(
            ActorPlacement("hint_engine", i, cpus_for_hint_engine, gpus_for_hint_engine)
            for i in range(hint_engines)
        ),
        ActorPlacement("allocator", 0, cpus_for_allocator, 0.0),
        *(
            (ActorPlacement("hint_generator", 0, cpus_for_hint_generator, 0.0),)
            if hint_generator
            else ()
        ),
    )
    plan = ResourcePlan(actors=actors)
    total_cpus = sum(n.cpus for n in nodes)
    total_gpus = sum(n.gpus for n in nodes)
    hint_cpus = (
        f" + hint engine {cpus_for_hint_engine:g} (cluster.cpus_for_hint_engine)"
        if hint_engines
        else ""
    ) + (f" + hint generator {cpus_for_hint_generator:g}" if hint_generator else "")
    if plan.cpus > total_cpus + 1e-9:
        raise ValueError(
            f"the run needs {plan.cpus:g} CPUs ({rollout_engines} rollout engine(s) x "
            f"{cpus_per_engine:g} + {learners} learner(s) x {cpus_per_learner:g} + allocator "
            f"{cpus_for_allocator:g}{hint_cpus}) but the cluster has {total_cpus:g}; lower "
            "cluster.rollout_engines / cluster.learners or cluster.cpus_per_engine / "
            "cluster.cpus_per_learner (fractions such as 0.5 are allowed)"
        )
    if plan.gpus > total_gpus + 1e-9:
        hint_gpus = (
            f" + hint engine {gpus_for_hint_engine:g} (cluster.gpus_for_hint_engine)"
            if hint_engines
            else ""
        )
        raise ValueError(
            f"the run needs {plan.gpus:g} GPUs ({rollout_engines} engine(s) x {gpus_per_engine:g} "
            f"+ {learners} learner(s) x {gpus_per_learner:g}{hint_gpus}) but the cluster has "
            f"{total_gpus:g}; set cluster.gpus_per_engine / cluster.gpus_per_learner "
            "(0 on a CPU-only machine) or add GPU nodes"
        )
    free = {i: [node.gpus, node.cpus] for i, node in enumerate(nodes)}
    placed: dict[tuple[str, int], ActorPlacement] = {}
    light = ("allocator", "hint_generator")
    order = sorted(
        actors, key=lambda a: (a.role in light, -a.num_gpus, -a.num_cpus, a.role, a.index)
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
                "cluster.cpus_per_engine / cluster.cpus_per_learner (cluster.cpus_for_hint_engine "
                "for the hint engine), fewer actors, or larger nodes"
            )
        best = max(fits, key=lambda i: (free[i][0], free[i][1], -i))
        free[best][0] -= actor.num_gpus
        free[best][1] -= actor.num_cpus
        placed[(actor.role, actor.index)] = replace(
            actor, node_id=nodes[best].node_id, node_address=nodes[best].address
        )
    return ResourcePlan(actors=tuple(placed[(a.role, a.index)] for a in actors))


def proxy_handle(proxy: Any) -> Any:
    """The actor handle behind a `blocking_proxy` (for calls the proxy does not make, such as
    `handle.__ray_call__`)."""
    if not isinstance(proxy, _BlockingActorProxy):
        raise TypeError(f"{type(proxy).__name__} is not a blocking_proxy")
    return proxy._handle


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
