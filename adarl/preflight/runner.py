"""`python -m adarl.preflight [options] OVERRIDES`: compose the config, run each check in its own
process under its own timeout, print a verdict per check and a summary, write the JSON.

This process never imports torch: it composes and validates the config (Hydra, as
`python -m adarl.launch` does: adarl/launch.py's `CONFIG_DIR` and `load_config`), decides from
the environment check's facts which checks can run here, and starts each one as
`python -m adarl.preflight --child NAME ...` (the same composition, in a fresh process) with
adarl/timed_run.py: a check that hangs is killed with its process group, and loses only itself.
Exit status: 0 when no check failed, 1 when one did, 2 for an invalid config.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adarl.preflight.checks import PUSH_LEARNING_RATE, SMALL_MODEL_POSITIONS, fix_for
from adarl.preflight.node import CHECKOUT, NodeFacts, config_needs, skip_reason
from adarl.preflight.verdicts import CHECKS, PreflightReport, Status, Verdict
from adarl.timed_run import (
    TimedRun,
    gpu_tests_command,
    pytest_junit_summary,
    run_with_timeout,
    write_json_atomic,
)

if TYPE_CHECKING:
    from adarl.config import AdarlConfig

# Each check's limit, in seconds (`--timeout NAME=SECONDS` changes one). On an 8-GPU node with the
# Qwen2.5-Math-1.5B presets the whole pre-flight is meant to take about 10 minutes; the limits are
# what a healthy node stays well under, so that a hang costs minutes, not the booking.
TIMEOUTS_S = {
    "environment": 120.0,
    "engine": 300.0,
    "tests_gpu": 240.0,
    "weight_push": 360.0,
    "session": 600.0,
}
# --small-model: a small model built here (adarl/models/tiny.py's architecture, random weights)
# and the built-in arithmetic task instead of the user's model and data, with lengths it holds;
# the rest of the config (devices, precision, engine settings, placement) as composed.
SMALL_MODEL_OVERRIDES = (
    "task=arithmetic",
    f"rollout.max_model_len={SMALL_MODEL_POSITIONS}",
    "rollout.max_new_tokens=128",
    "eval.max_new_tokens=128",
)
# --dry-run: the small model on the CPU: one engine and one learner, fp32, a CPU-sized KV cache,
# and gloo for the broadcast (what the CPU builds of vLLM and torch run).
DRY_RUN_OVERRIDES = (
    *SMALL_MODEL_OVERRIDES,
    "cluster.rollout_engines=1",
    "cluster.learners=1",
    "cluster.gpus_per_engine=0",
    "cluster.gpus_per_learner=0",
    "cluster.cpus_per_engine=1",
    "cluster.cpus_per_learner=1",
    "rollout.device=cpu",
    "rollout.dtype=float32",
    "learner.precision=fp32",
    f"rollout.kv_cache_memory_bytes={64 << 20}",
    "learner.weight_sync.broadcast_backend=gloo",
)
# The session check: one step of a handful of prompts, small evaluations at both ends, nothing
# resumed, nothing logged to W&B (prompts_per_step is lowered to this, never raised).
SESSION_PROMPTS_PER_STEP = 8
SESSION_OVERRIDES = (
    "trainer.total_steps=1",
    "trainer.max_rollouts=null",
    "trainer.max_sequence_tokens=null",
    "eval.num_prompts=8",
    "eval.final_samples_per_prompt=4",
    "eval.every_steps=0",
    "eval.every_rollouts=null",
    "checkpoint.resume=never",
    "logger.mode=disabled",
)
SMALL_MODEL_DIR = "small-model"


class InvalidConfigError(ValueError):
    """The overrides do not compose or do not validate: Hydra's or adarl's message."""


def compose_config(overrides: Sequence[str]) -> AdarlConfig:
    """The config `python -m adarl.launch OVERRIDES` would run, composed and validated the same
    way; raises `InvalidConfigError` with Hydra's or the validation's message."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from adarl.launch import CONFIG_DIR, load_config

    try:
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
            return load_config(compose(config_name="config", overrides=list(overrides)))
    except (HydraException, OmegaConfBaseException, ValueError) as error:
        message = str(error)
        if error.__cause__ is not None and str(error.__cause__) not in message:
            message += f"\n{error.__cause__}"
        raise InvalidConfigError(message) from error


def mode_overrides(mode: str, out_dir: Path) -> list[str]:
    """What `--small-model` and `--dry-run` put after the user's overrides."""
    if mode == "node":
        return []
    small = [f"model.name_or_path={out_dir / SMALL_MODEL_DIR}"]
    return small + list(SMALL_MODEL_OVERRIDES if mode == "small-model" else DRY_RUN_OVERRIDES)


def session_overrides(config: AdarlConfig) -> list[str]:
    prompts = min(config.allocator.prompts_per_step, SESSION_PROMPTS_PER_STEP)
    return [*SESSION_OVERRIDES, f"allocator.prompts_per_step={prompts}"]


# -- the ordering process ------------------------------------------------------------------------


def _child_env(*, visible_gpus: Sequence[str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(CHECKOUT), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    if visible_gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(visible_gpus)
    return env


def _first_gpus(facts: NodeFacts, count: int) -> list[str]:
    """The first `count` GPUs this process sees, as CUDA_VISIBLE_DEVICES names them."""
    visible = facts.cuda_visible_devices
    names = visible.split(",") if visible else [str(i) for i in range(len(facts.gpus))]
    return names[:count]


def _error_line(error: BaseException) -> str:
    lines = [
        line.strip()
        for line in "".join(traceback.format_exception_only(error)).splitlines()
        if line.strip()
    ]
    text = lines[0] if len(lines) == 1 else f"{lines[0]} … {lines[-1]}"
    return text[:600]


def run_child(
    check: str,
    overrides: Sequence[str],
    *,
    out_dir: Path,
    timeout_s: float,
    env: dict[str, str],
    extra: Sequence[str] = (),
) -> Verdict:
    """`check` in its own process (`--child`), its verdict read from the file it writes; a
    timeout or a crash is a FAIL naming the log."""
    result = out_dir / f"{check}.result.json"
    result.unlink(missing_ok=True)
    command = [
        sys.executable,
        "-m",
        "adarl.preflight",
        "--child",
        check,
        "--result",
        str(result),
        "--out",
        str(out_dir),
        *extra,
        "--",
        *overrides,
    ]
    run = run_with_timeout(command, timeout_s=timeout_s, log=out_dir / f"{check}.log", env=env)
    if run.timed_out:
        verdict = _timed_out(check, run)
    elif result.is_file():
        verdict = Verdict.from_json(json.loads(result.read_text()))
    else:
        tail = run.log_tail(5).splitlines()
        verdict = Verdict(
            check=check,
            status=Status.FAIL,
            reason=f"its process exited with status {run.returncode} without a verdict"
            + (f": {tail[-1][:300]}" if tail else ""),
            fix=fix_for(run.log_tail(40)),
        )
    verdict.seconds, verdict.log = run.seconds, str(run.log)
    return verdict


def _timed_out(check: str, run: TimedRun) -> Verdict:
    return Verdict(
        check=check,
        status=Status.FAIL,
        reason=f"did not finish within its {run.timeout_s:.0f} s limit and was killed (a hang, "
        "or slower than the limit)",
        fix=f"the log's last lines show where it stopped; --timeout {check}=SECONDS raises the "
        "limit",
    )


def gpu_tests_verdict(run: TimedRun, summary: dict[str, Any]) -> Verdict:
    """`pytest tests/gpu`'s outcome: PASS with what was skipped and why (the NCCL variants on a
    one-GPU node), FAIL naming the failed tests, SKIPPED when every test was."""
    if run.timed_out:
        verdict = _timed_out("tests_gpu", run)
    elif "error" in summary:
        tail = run.log_tail(3).splitlines()
        verdict = Verdict(
            check="tests_gpu",
            status=Status.FAIL,
            reason=f"pytest exited with status {run.returncode} and {summary['error']}"
            + (f": {tail[-1][:300]}" if tail else ""),
            fix="read the log",
        )
    else:
        reasons = Counter(summary["skipped_reasons"].values())
        skipped = "; ".join(f"{n} × {reason}" for reason, n in reasons.items())
        counts = f"{summary['passed']} passed, {summary['skipped']} skipped"
        failed = summary["failed"]
        if failed or run.returncode not in (0, 5):  # 5: nothing collected
            listed = "; ".join(f"{test}: {message}" for test, message in failed.items())
            verdict = Verdict(
                check="tests_gpu",
                status=Status.FAIL,
                reason=f"{len(failed)} failed, {counts}: {listed or 'see the log'}",
                fix="read the failing tests in the log (pytest -rA)",
                values=summary,
            )
        elif summary["passed"] == 0:
            verdict = Verdict(
                check="tests_gpu",
                status=Status.SKIPPED,
                reason=f"every test skipped: {skipped or 'none collected'}",
                values=summary,
            )
        else:
            verdict = Verdict(
                check="tests_gpu",
                status=Status.PASS,
                reason=counts + (f" ({skipped})" if skipped else ""),
                values=summary,
            )
    verdict.seconds, verdict.log = run.seconds, str(run.log)
    return verdict


def run_gpu_tests(*, out_dir: Path, timeout_s: float) -> Verdict:
    junit = out_dir / "tests_gpu.xml"
    junit.unlink(missing_ok=True)
    run = run_with_timeout(
        gpu_tests_command(sys.executable, junit_xml=junit),
        timeout_s=timeout_s,
        log=out_dir / "tests_gpu.log",
        env=_child_env(),
        cwd=CHECKOUT,
    )
    return gpu_tests_verdict(run, pytest_junit_summary(junit))


def run_preflight(
    overrides: Sequence[str],
    *,
    mode: str,
    out_dir: Path,
    json_path: Path,
    selected: Sequence[str] = CHECKS,
    timeouts_s: dict[str, float] | None = None,
    push_learning_rate: float = PUSH_LEARNING_RATE,
) -> PreflightReport:
    """Every check in order; the report is printed as it goes and written after each check."""
    start = time.perf_counter()
    limits = {**TIMEOUTS_S, **(timeouts_s or {})}
    composed = [*overrides, *mode_overrides(mode, out_dir)]
    config = compose_config(composed)
    report = PreflightReport(overrides=list(composed), mode=mode, out_dir=str(out_dir))
    facts: NodeFacts | None = None
    extra = ["--small-model-dir", str(out_dir / SMALL_MODEL_DIR)] if mode != "node" else []
    for check in CHECKS:
        reason = None
        if check != "environment" and check not in selected:
            reason = "not selected (--checks)"
        elif check != "environment" and facts is None:
            reason = "the environment check found no facts about this node (see its verdict)"
        elif facts is not None:
            reason = skip_reason(check, config, facts)
        if reason is not None:
            verdict = Verdict(check=check, status=Status.SKIPPED, reason=reason)
        elif check == "tests_gpu":
            verdict = run_gpu_tests(out_dir=out_dir, timeout_s=limits[check])
        else:
            visible = None
            if check == "engine" and facts is not None:
                gpus = config_needs(config).engine_gpus
                visible = _first_gpus(facts, gpus) if gpus else None
            check_overrides = composed
            if check == "session":
                check_overrides = [*composed, *session_overrides(config)]
            verdict = run_child(
                check,
                check_overrides,
                out_dir=out_dir,
                timeout_s=limits[check],
                env=_child_env(visible_gpus=visible),
                extra=[*extra, "--push-learning-rate", repr(push_learning_rate)],
            )
            if check == "environment" and "facts" in verdict.values:
                facts = NodeFacts.from_json(verdict.values.pop("facts"))
                report.node = facts.to_json()
        report.verdicts.append(verdict)
        report.seconds = time.perf_counter() - start
        report.write(json_path)
        print("\n".join(verdict.lines()), flush=True)
    return report


# -- a check's own process -----------------------------------------------------------------------


def run_check_here(
    check: str,
    overrides: Sequence[str],
    *,
    out_dir: Path,
    small_model_dir: Path | None,
    push_learning_rate: float,
) -> Verdict:
    """One check in this process (`--child`); an error is its FAIL, with the traceback printed
    to the check's log."""
    from adarl.preflight import checks

    try:
        config = compose_config(overrides)
        if check == "environment":
            return checks.check_environment(config)
        if small_model_dir is not None:
            checks.ensure_small_model(small_model_dir)
        if check == "engine":
            return checks.check_engine(config)
        if check == "weight_push":
            return checks.check_weight_push(config, learning_rate=push_learning_rate)
        if check == "session":
            return checks.check_session(config, run_dir=out_dir / "session-run")
        raise ValueError(f"{check!r} does not run in a check process")
    except Exception as error:  # the check's verdict; the traceback goes to its log
        traceback.print_exc()
        return Verdict(
            check=check,
            status=Status.FAIL,
            reason=_error_line(error),
            fix=fix_for("".join(traceback.format_exception(error))),
        )


# -- the command line ----------------------------------------------------------------------------


def _check_names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in CHECKS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"--checks {text!r}: name checks of {','.join(CHECKS)}, separated by commas"
        )
    return names


def _timeout(pair: str) -> tuple[str, float]:
    name, _, seconds = pair.partition("=")
    try:
        limit = float(seconds)
    except ValueError:
        limit = -1.0
    if name not in TIMEOUTS_S or not limit > 0:
        raise argparse.ArgumentTypeError(
            f"--timeout {pair!r}: use NAME=SECONDS (SECONDS > 0) with NAME one of "
            f"{','.join(TIMEOUTS_S)}"
        )
    return name, limit


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m adarl.preflight",
        description="Check a GPU node before the first long run: the environment, one engine on "
        "the real model, tests/gpu, a weight push from a learner to an engine, and one training "
        "step of the config, each under its own timeout (docs/cluster.md). OVERRIDES are "
        "python -m adarl.launch's.",
    )
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument(
        "--small-model",
        action="store_true",
        help="a small model built here and the built-in task instead of your model and data "
        "(devices and engine settings as composed)",
    )
    modes.add_argument(
        "--dry-run", action="store_true", help="--small-model, on the CPU (one engine, one learner)"
    )
    parser.add_argument(
        "--json", type=Path, default=None, help="results (default OUT/preflight.json)"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="logs and results (default: a new temp dir)"
    )
    parser.add_argument(
        "--checks",
        type=_check_names,
        default=list(CHECKS),
        metavar="NAME,NAME",
        help=f"the checks to run, of {','.join(CHECKS)} (environment always runs: the others "
        "depend on what it finds)",
    )
    parser.add_argument(
        "--timeout",
        type=_timeout,
        action="append",
        default=[],
        metavar="NAME=SECONDS",
        help=f"a check's limit, repeatable (defaults: {TIMEOUTS_S})",
    )
    parser.add_argument(
        "--push-learning-rate",
        type=float,
        default=PUSH_LEARNING_RATE,
        help="the weight-push check's one learner step (no warm-up)",
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as for adarl.launch")
    parser.add_argument("--child", choices=CHECKS, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--small-model-dir", type=Path, default=None, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_intermixed_args(argv)
    out_dir: Path = args.out or Path(tempfile.mkdtemp(prefix="adarl-preflight-"))
    if args.child is not None:
        assert args.result is not None
        verdict = run_check_here(
            args.child,
            args.overrides,
            out_dir=out_dir,
            small_model_dir=args.small_model_dir,
            push_learning_rate=args.push_learning_rate,
        )
        write_json_atomic(args.result, verdict.to_json())
        return 0
    mode = "dry-run" if args.dry_run else "small-model" if args.small_model else "node"
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path: Path = args.json or out_dir / "preflight.json"
    print(
        f"adarl pre-flight ({mode}): {' '.join(args.overrides) or 'the default config'}\n"
        f"logs: {out_dir}",
        flush=True,
    )
    try:
        report = run_preflight(
            args.overrides,
            mode=mode,
            out_dir=out_dir,
            json_path=json_path,
            selected=args.checks,
            timeouts_s=dict(args.timeout),
            push_learning_rate=args.push_learning_rate,
        )
    except InvalidConfigError as error:
        print(f"adarl preflight: invalid config: {error}", file=sys.stderr)
        return 2
    print(f"{report.summary()}\nresults: {json_path}", flush=True)
    return report.exit_status()
