"""The GPU check kit: carry what a borrowed GPU machine lacks, then check adarl there at once.

    networked machine                         GPU machine (no network, no Ray/vLLM, ~15 minutes)
    make gpu-wheels ─► gpu-wheels/ ─ carried ─► make gpu-check (GPU_CHECK_OUT=$OUT)
      DeepSpeed (sdist), Hydra, OmegaConf,       install ─► pytest tests/gpu ─► bench gpu
      their pure-Python dependencies             each stage under a timeout; logs + gpu-check.json

Stdlib only, so it runs before anything is installed, on the machine's own `python3`:

* `wheels --dest DIR`: downloads `CARRIED` (pinned: the versions the tests run with) for the GPU
  machine's Python (`--python-version`, default 3.12). DeepSpeed stays an sdist: it is built on
  the GPU machine against that machine's torch (its build records the torch and CUDA versions
  it saw). antlr4-python3-runtime is published only as an sdist; it is pure Python, so it is
  built into a wheel here. Ray and vLLM are not carried (the Ray wheel alone is over the 64 MiB
  the device carries; vLLM's CUDA build far more): what runs there is the in-process path.
* `check --wheels DIR --out DIR`: installs every carried file offline into `--target`
  (`pip --no-index --no-deps --no-build-isolation`, DeepSpeed with `DS_BUILD_OPS=0`: no C++ op
  is compiled, adarl needs none), puts it and the checkout first on PYTHONPATH (no install of
  adarl: the checkout is the package), then runs `pytest tests/gpu` and
  `python -m adarl.bench gpu`. Each stage runs in its own process group under a timeout cut
  from one overall budget, so a hang cannot eat the machine's time; `gpu-check.json` is
  rewritten after every stage, so a timeout still leaves the results so far. `--dry-run` runs
  the same stages on CPU at micro sizes (`make test` does, tests/unit/bench/test_gpu_kit.py).

The out folder holds at most 8 files, one level deep: what the device tool brings back.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from adarl.timed_run import gpu_tests_command, pytest_junit_summary, run_with_timeout

# name -> (version, kind). "wheel": a wheel for the target Python; "sdist": carried as the sdist
# and built there; "build": sdist-only pure-Python package built into a wheel here.
CARRIED: dict[str, tuple[str, str]] = {
    "deepspeed": ("0.19.8", "sdist"),
    "hjson": ("3.1.0", "wheel"),  # deepspeed
    "pydantic": ("2.14.4", "wheel"),  # deepspeed's config models
    "pydantic-core": ("2.50.5", "wheel"),  # compiled: the target Python's manylinux wheel
    "annotated-types": ("0.8.0", "wheel"),
    "typing-inspection": ("0.4.5", "wheel"),
    "typing-extensions": ("4.16.0", "wheel"),  # pydantic needs a recent one
    "hydra-core": ("1.3.8", "wheel"),
    "omegaconf": ("2.3.1", "wheel"),
    "antlr4-python3-runtime": ("4.9.3", "build"),  # omegaconf's grammar runtime
}
# What the GPU image already has and the carried packages need (checked at install):
# torch, transformers, numpy, pyyaml, packaging, psutil, py-cpuinfo, einops, msgpack, ninja,
# tqdm, nvidia-ml-py, setuptools, wheel, pytest (KINDS.md of the device tool, 2026-11-17).
MAX_WHEELS_BYTES = 40 * 1024 * 1024
MANYLINUX = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
OUT_ENV = "GPU_CHECK_OUT"
WHEELS_ENV = "GPU_WHEELS"
RESULTS_FILE = "gpu-check.json"
DEFAULT_BUDGET_S = 450.0  # ≤ 8 minutes with the process start and the transfers
# Each stage's share: its timeout is min(this, what is left of the budget).
STAGE_LIMITS_S = {
    "install": 60.0,
    "imports": 30.0,
    "pytest": 110.0,
    "preflight": 150.0,
    "bench": 300.0,
}
# A dry run is CPU work on a machine that may be shared: generous, it spends no device time.
DRY_RUN_LIMITS_S = {
    "install": 120.0,
    "imports": 60.0,
    "pytest": 120.0,
    "preflight": 600.0,
    "bench": 400.0,
}
# `check --preflight`: `python -m adarl.preflight` as this machine can run it (no model carried,
# no Ray, no vLLM): a small model built there, the HF engine and the learner in-process; tests/gpu
# is the pytest stage's. Off by default: it does not fit the default budget beside the bench.
PREFLIGHT_ARGS = (
    "--checks", "environment,engine,weight_push,session",
    "+experiment=qwen2_5_math_1_5b_seq_balance", "cluster=in_process", "cluster.rollout_engines=1",
    "cluster.learners=1", "rollout.engine=hf", "rollout.device=cuda",
    "learner.weight_sync.method=object_store",
)  # fmt: skip


# -- wheels (networked machine) ------------------------------------------------------------------


def _pip(python: str, *args: str, log: Path | None = None) -> None:
    command = [python, "-m", "pip", *args]
    print("+", " ".join(command), flush=True)
    with open(log or os.devnull, "a") as sink:
        done = subprocess.run(command, stdout=sink, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} failed (exit status {done.returncode}); see {log}: "
            "a version in CARRIED (adarl/bench/gpu_kit.py) may be missing for the target Python"
        )


def fetch_wheels(
    dest: Path,
    *,
    python_version: str = "3.12",
    python: str = sys.executable,
    carried: Mapping[str, tuple[str, str]] = CARRIED,
    max_bytes: int = MAX_WHEELS_BYTES,
) -> dict[str, object]:
    """Fill `dest` (emptied first) with `carried` for CPython `python_version` on x86-64
    Linux; returns the manifest also written to `dest/MANIFEST.json`."""
    start = time.perf_counter()
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    log = dest.parent / f"{dest.name}.log"
    log.write_text("")
    platforms = [arg for tag in MANYLINUX for arg in ("--platform", tag)]
    target = ["--python-version", python_version, "--implementation", "cp", "--abi", "none"]
    abi = "cp" + python_version.replace(".", "")
    for name, (version, kind) in carried.items():
        spec = f"{name}=={version}"
        if kind == "wheel":
            _pip(
                python,
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                *target,
                "--abi",
                abi,
                "--abi",
                "abi3",
                *platforms,
                "--platform",
                "any",
                "-d",
                str(dest),
                spec,
                log=log,
            )
        elif kind == "sdist":
            _pip(
                python,
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary=:all:",
                "-d",
                str(dest),
                spec,
                log=log,
            )
        elif kind == "build":
            _pip(python, "wheel", "--quiet", "--no-deps", "-w", str(dest), spec, log=log)
        else:
            raise ValueError(f"CARRIED[{name!r}] has kind {kind!r}; use wheel, sdist or build")
    files = sorted(p for p in dest.iterdir() if p.is_file())
    total = sum(p.stat().st_size for p in files)
    manifest: dict[str, object] = {
        "python_version": python_version,
        "created": time.strftime("%Y-%m-%d %H:%M:%S"),
        "seconds": round(time.perf_counter() - start, 1),
        "total_bytes": total,
        "files": {p.name: p.stat().st_size for p in files},
    }
    (dest / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    if total > max_bytes:
        raise RuntimeError(
            f"{dest} holds {total / 2**20:.1f} MiB, over the {max_bytes / 2**20:.0f} MiB the "
            "kit may carry (the device carries 64 MiB with the checkout); drop a package from "
            "CARRIED"
        )
    return manifest


# -- check (GPU machine) -------------------------------------------------------------------------


@dataclass
class StageResult:
    name: str
    command: list[str]
    timeout_s: float
    seconds: float = 0.0
    returncode: int | None = None
    timed_out: bool = False
    log: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


@dataclass
class CheckReport:
    """Everything `gpu-check.json` holds; rewritten after every stage."""

    dry_run: bool
    started: str
    budget_s: float
    machine: dict[str, str] = field(default_factory=dict)
    stages: list[StageResult] = field(default_factory=list)
    installed: list[str] = field(default_factory=list)
    pytest: dict[str, object] = field(default_factory=dict)
    bench: dict[str, object] = field(default_factory=dict)
    preflight: dict[str, object] = field(default_factory=dict)
    ok: bool = False

    def write(self, out: Path) -> None:
        data = asdict(self)
        data["stages"] = [{**asdict(s), "ok": s.ok} for s in self.stages]
        tmp = out / f".{RESULTS_FILE}.tmp"
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        tmp.replace(out / RESULTS_FILE)


def run_stage(
    name: str,
    command: Sequence[str],
    *,
    timeout_s: float,
    log: Path,
    env: Mapping[str, str],
    cwd: Path,
) -> StageResult:
    """`command` under `adarl.timed_run.run_with_timeout` (the pre-flight's runner: its own
    process group, output to `log`, the whole group killed at `timeout_s`, pytest's and the
    bench's child processes included), as the report's record."""
    run = run_with_timeout(command, timeout_s=timeout_s, log=log, env=env, cwd=cwd)
    return StageResult(
        name=name,
        command=list(command),
        timeout_s=round(timeout_s, 1),
        seconds=run.seconds,
        returncode=run.returncode,
        timed_out=run.timed_out,
        log=log.name,
    )


def _machine(python: str, env: Mapping[str, str]) -> dict[str, str]:
    probe = (
        "import json, platform, torch; cuda = torch.cuda.is_available(); "
        "print(json.dumps({'python': platform.python_version(), 'torch': torch.__version__, "
        "'cuda': str(torch.version.cuda), 'gpu': torch.cuda.get_device_name(0) if cuda "
        "else 'none', 'gpus': str(torch.cuda.device_count())}))"
    )
    info = {"host": platform.node(), "cpus": str(os.cpu_count())}
    try:
        done = subprocess.run(
            [python, "-c", probe], capture_output=True, text=True, env=dict(env), timeout=60
        )
    except subprocess.TimeoutExpired:  # a wedged driver: say so, the stages will show the rest
        info["probe_error"] = "the torch/CUDA probe did not answer within 60 s"
        return info
    if done.returncode == 0:
        info.update(json.loads(done.stdout.strip().splitlines()[-1]))
    else:
        info["probe_error"] = done.stderr.strip()[-500:]
    return info


def installed_modules(target: Path) -> list[str]:
    """The top-level modules pip put in `target` (packages and single-file modules)."""
    names = {
        p.name if p.is_dir() else p.stem
        for p in target.iterdir()
        if (p.is_dir() and (p / "__init__.py").is_file()) or (p.is_file() and p.suffix == ".py")
    }
    return sorted(names)


def carried_files(wheels: Path) -> list[Path]:
    """The wheels and sdists in `wheels` (the manifest and logs are not installed)."""
    return sorted(
        p for p in wheels.iterdir() if p.is_file() and p.name.endswith((".whl", ".tar.gz", ".zip"))
    )


def check(
    *,
    wheels: Path,
    out: Path,
    target: Path,
    repo: Path,
    python: str = sys.executable,
    budget_s: float = DEFAULT_BUDGET_S,
    dry_run: bool = False,
    bench_parts: Sequence[str] = (),
    preflight: bool = False,
) -> CheckReport:
    """Install the carried packages, run `pytest tests/gpu` and `python -m adarl.bench gpu`
    (see the module docstring); returns the report also written to `out/gpu-check.json`."""
    files = carried_files(wheels) if wheels.is_dir() else []
    if not files:
        raise FileNotFoundError(
            f"no wheels or sdists in {wheels}: run `make gpu-wheels` on a networked machine and "
            "carry that folder (the device call's carry=[...]); see docs/operations.md"
        )
    out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + budget_s
    limits = DRY_RUN_LIMITS_S if dry_run else STAGE_LIMITS_S
    report = CheckReport(
        dry_run=dry_run, started=time.strftime("%Y-%m-%d %H:%M:%S"), budget_s=budget_s
    )
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.pathsep.join(
            [str(target), str(repo), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
        PYTHONUNBUFFERED="1",
        DS_BUILD_OPS="0",  # DeepSpeed: no C++ op compiled at install; adarl uses none
        TOKENIZERS_PARALLELISM="false",
        ADARL_CACHE_DIR=os.environ.get("ADARL_CACHE_DIR", str(target.parent / "adarl-cache")),
    )
    report.machine = _machine(python, env)
    report.write(out)

    def stage(name: str, command: Sequence[str]) -> StageResult:
        left = deadline - time.monotonic()
        result = run_stage(
            name,
            command,
            timeout_s=min(limits[name], left),
            log=out / f"{name}.log",
            env=env,
            cwd=repo,
        )
        report.stages.append(result)
        report.write(out)
        return result

    if target.exists():
        shutil.rmtree(target)
    install = stage(
        "install",
        [
            python,
            "-m",
            "pip",
            "install",
            "--no-index",
            "--no-deps",
            "--no-build-isolation",
            "--no-cache-dir",
            "--disable-pip-version-check",
            "--target",
            str(target),
            *map(str, files),
        ],
    )
    report.installed = [p.name for p in files]
    if install.ok:  # every carried top-level module imports, from the target folder
        modules = installed_modules(target)
        probe = (
            f"import importlib; names = {modules!r}; "
            "paths = {n: importlib.import_module(n).__file__ for n in names}; "
            f"outside = [n for n, f in paths.items() if not f.startswith({str(target)!r})]; "
            "print('imported', len(names), 'modules'); "
            "assert not outside, f'imported from outside the target folder: {outside}'"
        )
        install = stage("imports", [python, "-c", probe])
    junit = out / "pytest.xml"
    tests = stage("pytest", gpu_tests_command(python, junit_xml=junit))
    report.pytest = pytest_junit_summary(junit)
    preflight_ok = True
    if preflight:
        found = out / "preflight.json"
        mode = "--dry-run" if dry_run else "--small-model"
        work = target.parent / "adarl-preflight"  # its logs stay there: 8 files come back
        command = ["-m", "adarl.preflight", mode, "--json", str(found), "--out", str(work)]
        ran = stage("preflight", [python, *command, *PREFLIGHT_ARGS])
        report.preflight = json.loads(found.read_text()) if found.is_file() else {}
        found.unlink(missing_ok=True)  # folded into gpu-check.json: the out folder holds few files
        preflight_ok = ran.ok
    bench_json = out / "bench.json"
    bench = stage(
        "bench",
        [
            python,
            "-m",
            "adarl.bench",
            "gpu",
            "--json",
            str(bench_json),
            "--budget-s",
            str(max(1.0, min(limits["bench"], deadline - time.monotonic()) - 10.0)),
            "--no-write-docs",  # this machine's copy of the checkout is thrown away
            *(["--dry-run"] if dry_run else []),
            *(["--parts", *bench_parts] if bench_parts else []),
        ],
    )
    if bench_json.is_file():
        report.bench = json.loads(bench_json.read_text())
        bench_json.unlink()  # folded into gpu-check.json: the out folder holds few files
    report.ok = install.ok and tests.ok and bench.ok and preflight_ok
    report.write(out)
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m adarl.bench.gpu_kit", description=__doc__.split("\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    wheels = commands.add_parser("wheels", help="fetch the carried packages (networked machine)")
    wheels.add_argument("--dest", type=Path, default=Path(os.environ.get(WHEELS_ENV, "gpu-wheels")))
    wheels.add_argument("--python-version", default="3.12", help="the GPU machine's Python")
    run = commands.add_parser("check", help="install offline and run the checks (GPU machine)")
    run.add_argument("--wheels", type=Path, default=Path(os.environ.get(WHEELS_ENV, "gpu-wheels")))
    run.add_argument(
        "--out",
        type=Path,
        default=Path(os.environ.get(OUT_ENV) or "gpu-check-out"),
        help=f"logs and {RESULTS_FILE} (default ${OUT_ENV}, else ./gpu-check-out)",
    )
    run.add_argument(
        "--target",
        type=Path,
        default=Path(tempfile.gettempdir()) / "adarl-gpu-site",
        help="where the carried packages are installed (emptied first)",
    )
    run.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help=f"all stages together (default {DEFAULT_BUDGET_S:g} s; a dry run 700 s)",
    )
    run.add_argument("--dry-run", action="store_true", help="CPU, micro sizes (make test)")
    run.add_argument("--bench-parts", nargs="+", default=[], help="default: every part")
    run.add_argument("--preflight", action="store_true", help="also python -m adarl.preflight")
    args = parser.parse_args(argv)
    if args.command == "wheels":
        manifest = fetch_wheels(args.dest, python_version=args.python_version)
        total = int(manifest["total_bytes"])  # type: ignore[call-overload]
        print(
            f"{args.dest}: {len(manifest['files'])} files, "  # type: ignore[arg-type]
            f"{total / 2**20:.1f} MiB, {manifest['seconds']} s"
        )
        return 0
    report = check(
        wheels=args.wheels,
        out=args.out,
        target=args.target,
        repo=Path(__file__).resolve().parents[2],
        budget_s=args.budget_s or (700.0 if args.dry_run else DEFAULT_BUDGET_S),
        dry_run=args.dry_run,
        bench_parts=args.bench_parts,
        preflight=args.preflight,
    )
    for result in report.stages:
        state = "timed out" if result.timed_out else f"exit {result.returncode}"
        print(f"{result.name:8s} {state:10s} {result.seconds:6.1f} s  ({args.out / result.log})")
    print(f"gpu-check {'passed' if report.ok else 'FAILED'}: {args.out / RESULTS_FILE}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
