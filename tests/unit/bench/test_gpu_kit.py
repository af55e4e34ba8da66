"""The GPU check kit's dry run (adarl/bench/gpu_kit.py), so the kit cannot rot while no GPU is at
hand: the carried files install offline into a target folder (a wheel, and an sdist built
against this machine's torch without an isolated build, as DeepSpeed's is there), the checks
run with what the GPU image lacks made unimportable (Ray, vLLM, W&B, datasets, math-verify),
and the out folder holds what the device tool brings back. Plus the stage timeout, which must
kill a hung stage with its children, and the pytest summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import textwrap
import time
import zipfile
from pathlib import Path

import pytest
import torch

from adarl.bench import gpu_kit

REPO = Path(__file__).resolve().parents[3]
# Absent on the GPU image and not carried: the GPU path must run without them.
ABSENT_ON_GPU_IMAGE = ("ray", "vllm", "wandb", "datasets", "math_verify")


def _blocker(directory: Path) -> Path:
    """A sitecustomize that makes the modules the GPU image lacks unimportable."""
    directory.mkdir()
    (directory / "sitecustomize.py").write_text(
        textwrap.dedent(
            f"""
            import sys

            class _Absent:
                def find_spec(self, name, path=None, target=None):
                    if name.split(".")[0] in {ABSENT_ON_GPU_IMAGE!r}:
                        raise ModuleNotFoundError(f"{{name!r}} is not on the GPU image")
                    return None

            sys.meta_path.insert(0, _Absent())
            """
        )
    )
    return directory


def _wheel(directory: Path) -> Path:
    """A pure-Python wheel, written by hand (no build tool, no network)."""
    path = directory / "adarl_kit_wheel-1.0-py3-none-any.whl"
    info = "adarl_kit_wheel-1.0.dist-info"
    files = {
        "adarl_kit_wheel.py": "CARRIED = True\n",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: adarl-kit-wheel\nVersion: 1.0\n",
        f"{info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
        archive.writestr(f"{info}/RECORD", record)
    return path


def _sdist(directory: Path) -> Path:
    """An sdist whose build imports torch and records its version, as DeepSpeed's setup.py does:
    it only builds without build isolation, against the torch already installed."""
    source = directory / "adarl_kit_sdist-1.0"
    source.mkdir()
    (source / "setup.py").write_text(
        textwrap.dedent(
            """
            import torch
            from setuptools import setup

            with open("adarl_kit_sdist.py", "w") as module:
                module.write(f"TORCH_AT_BUILD = {torch.__version__!r}\\n")
            setup(name="adarl_kit_sdist", version="1.0", py_modules=["adarl_kit_sdist"])
            """
        )
    )
    (source / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: adarl_kit_sdist\nVersion: 1.0\n")
    path = directory / "adarl_kit_sdist-1.0.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        archive.add(source, arcname=source.name)
    return path


@pytest.mark.slow
# Heavy: 36 s of make test's time for the kit's own path, which ran for real on an H200
# (docs/benchmarks.md "GPU"); the kit's units above stay in make test.
@pytest.mark.heavy
def test_the_dry_run_installs_offline_and_runs_the_checks_without_what_the_gpu_lacks(
    tmp_path: Path,
) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels)
    _sdist(tmp_path)  # built outside the folder, then carried into it
    (tmp_path / "adarl_kit_sdist-1.0.tar.gz").rename(wheels / "adarl_kit_sdist-1.0.tar.gz")
    (wheels / "MANIFEST.json").write_text("{}")  # not a package: not installed
    out, target = tmp_path / "out", tmp_path / "site"
    env = {**os.environ, "PYTHONPATH": str(_blocker(tmp_path / "blocker"))}
    env.pop(gpu_kit.OUT_ENV, None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "adarl.bench.gpu_kit",
            "check",
            "--dry-run",
            "--wheels",
            str(wheels),
            "--out",
            str(out),
            "--target",
            str(target),
            "--bench-parts",
            "build",  # the other parts: tests/component/bench/test_gpu_bench.py, in-process
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = json.loads((out / gpu_kit.RESULTS_FILE).read_text())
    assert done.returncode == 0, (done.stdout[-3000:], report)
    assert report["ok"] and report["dry_run"]
    assert [s["name"] for s in report["stages"]] == ["install", "imports", "pytest", "bench"]
    assert all(s["ok"] for s in report["stages"])
    assert report["installed"] == [
        "adarl_kit_sdist-1.0.tar.gz",
        "adarl_kit_wheel-1.0-py3-none-any.whl",
    ]
    # The sdist was built against this interpreter's torch, offline.
    assert (
        target / "adarl_kit_sdist.py"
    ).read_text() == f"TORCH_AT_BUILD = {torch.__version__!r}\n"
    assert (target / "adarl_kit_wheel.py").is_file()
    # tests/gpu was collected and ran (skipped without CUDA), nothing failed.
    assert report["pytest"]["tests"] >= 5 and report["pytest"]["failed"] == {}
    assert report["pytest"]["skipped"] == report["pytest"]["tests"]
    # The bench ran at micro sizes, its part in its own process, without Ray/vLLM/W&B.
    parts = report["bench"]["parts"]
    assert list(parts) == ["build"] and parts["build"]["ok"], parts
    assert parts["build"]["values"]["device"] == "cpu"
    assert report["bench"]["sizes"]["new_tokens"] == 8
    # What comes back from the device tool: at most 8 plain files, one level deep.
    files = sorted(p.name for p in out.iterdir())
    assert all(p.is_file() for p in out.iterdir()) and len(files) <= 8, files
    assert "gpu-section.md" in files and "pytest.xml" in files


def _start_time(stat: str) -> str:
    """Field 22 of /proc/PID/stat (the process's start time): with the pid, who it is."""
    return stat.rsplit(")", 1)[1].split()[19]


def test_a_stage_past_its_limit_is_killed_with_its_children(tmp_path: Path) -> None:
    marker = tmp_path / "child"
    # The stage starts a child that records who it is, waits until it has, then hangs.
    child = (
        "import os, time; stat = open('/proc/self/stat').read(); "
        f"open({str(marker)!r} + '.tmp', 'w').write(f'{{os.getpid()}} {{stat}}'); "
        f"os.rename({str(marker)!r} + '.tmp', {str(marker)!r}); time.sleep(600)"
    )
    hang = (
        "import os, subprocess, sys, time; "
        f"subprocess.Popen([sys.executable, '-c', {child!r}]); "
        f"[time.sleep(0.05) for _ in iter(lambda: os.path.exists({str(marker)!r}), True)]; "
        "time.sleep(600)"
    )
    start = time.monotonic()
    result = gpu_kit.run_stage(
        "hang",
        [sys.executable, "-c", hang],
        timeout_s=15.0,  # room for two interpreter starts on a loaded machine (xdist, CI)
        log=tmp_path / "hang.log",
        env=os.environ,
        cwd=tmp_path,
    )
    assert result.timed_out and not result.ok
    assert time.monotonic() - start < 60
    assert marker.exists(), "the stage's child never started: the check below would be empty"
    assert "killed at its 15 s limit" in (tmp_path / "hang.log").read_text()
    pid, stat = marker.read_text().split(" ", 1)
    status = Path(f"/proc/{pid}/stat")

    def still_runs() -> bool:
        # Gone (its pid free or another process's), or a zombie no parent reaps: it no longer runs.
        if not status.exists():
            return False
        now = status.read_text()
        return _start_time(now) == _start_time(stat) and now.rsplit(")", 1)[1].split()[0] != "Z"

    # SIGKILL is delivered asynchronously: on a loaded machine the child can still show as
    # running for a moment after the stage returns (measured), so allow it a few seconds.
    deadline = time.monotonic() + 10.0
    while still_runs() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not still_runs()


def test_the_pytest_summary_names_failures_and_counts(tmp_path: Path) -> None:
    junit = tmp_path / "pytest.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest" tests="4" failures="1" errors="1" skipped="1">'
        '<testcase classname="tests.gpu.test_a" name="test_ok"/>'
        '<testcase classname="tests.gpu.test_a" name="test_bad">'
        '<failure message="AssertionError: 3 != 4&#10;more">trace</failure></testcase>'
        '<testcase classname="tests.gpu.test_b" name="test_err"><error message="">x</error>'
        "</testcase>"
        '<testcase classname="tests.gpu.test_b" name="test_skip"><skipped message="needs CUDA"/>'
        "</testcase></testsuite></testsuites>"
    )
    summary = gpu_kit.pytest_junit_summary(junit)
    assert (summary["tests"], summary["passed"], summary["skipped"]) == (4, 1, 1)
    assert summary["failed"] == {
        "tests.gpu.test_a::test_bad": "AssertionError: 3 != 4",
        "tests.gpu.test_b::test_err": "error",
    }
    assert gpu_kit.pytest_junit_summary(tmp_path / "missing.xml") == {
        "error": "missing.xml was not written"
    }


def test_a_check_without_carried_files_says_how_to_get_them(tmp_path: Path) -> None:
    (tmp_path / "wheels").mkdir()
    with pytest.raises(FileNotFoundError, match="run `make gpu-wheels` on a networked machine"):
        gpu_kit.check(
            wheels=tmp_path / "wheels",
            out=tmp_path / "out",
            target=tmp_path / "site",
            repo=REPO,
            dry_run=True,
        )
