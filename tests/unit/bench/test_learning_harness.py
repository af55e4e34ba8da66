"""The harness of `python -m adarl.bench learning`: resumability decisions, the launch commands
(composed by the real Hydra config), progress read from a metrics.jsonl being written, and the
subprocess runner."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from adarl.bench import learning
from adarl.bench.learning import (
    ARMS,
    MAKE_RUN,
    REDUCED,
    RunState,
    Setting,
    last_logged,
    prepare_run_dir,
    run_comparison,
    run_overrides,
    run_state,
    run_subprocess,
)
from adarl.checkpoint import CheckpointManager
from adarl.launch import CONFIG_DIR, load_config

from ._runs import write_run


def _setting(**changes: object) -> Setting:
    return Setting(**{**REDUCED.__dict__, **changes})  # type: ignore[arg-type]


# -- resumability ------------------------------------------------------------------------------


def test_run_state_follows_what_the_run_dir_holds(tmp_path: Path) -> None:
    run = tmp_path / "grpo_n4" / "seed0"
    assert run_state(run) is RunState.START  # nothing there
    write_run(run, rollouts_per_step=10, accuracy_at_step={0: 0.1}, steps=2, finished=False)
    assert run_state(run) is RunState.RESTART  # metrics, no checkpoint: died before the first
    CheckpointManager(run, keep_last=1).save(2, {"driver": {"step": 2}})
    assert run_state(run) is RunState.RESUME
    (run / "summary.json").write_text("{}\n")
    assert run_state(run) is RunState.DONE


def test_prepare_run_dir_moves_a_dead_first_attempt_aside_and_records_overrides(
    tmp_path: Path,
) -> None:
    run = tmp_path / "seed0"
    write_run(run, rollouts_per_step=10, accuracy_at_step={0: 0.1}, steps=2, finished=False)
    overrides = ["+experiment=grpo", "seed=0"]
    assert prepare_run_dir(run, overrides) is RunState.RESTART
    # The launcher would refuse a dir with metrics and no checkpoint: it must be empty now.
    assert not (run / "metrics.jsonl").exists()
    assert (tmp_path / "seed0.incomplete" / "metrics.jsonl").exists()
    assert json.loads((run / learning.RUN_RECORD_FILE).read_text()) == {"overrides": overrides}
    assert prepare_run_dir(run, overrides) is RunState.START


def test_a_run_dir_started_with_other_settings_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "seed0"
    prepare_run_dir(run, ["+experiment=grpo", "trainer.max_rollouts=40000"])
    with pytest.raises(ValueError, match=r"trainer.max_rollouts=80000.*--results-dir"):
        prepare_run_dir(run, ["+experiment=grpo", "trainer.max_rollouts=80000"])


def test_a_finished_comparison_launches_nothing(tmp_path: Path) -> None:
    setting = _setting(arms=("grpo_n4",), seeds=2)
    for seed in range(2):
        run = tmp_path / "grpo_n4" / f"seed{seed}"
        write_run(run, rollouts_per_step=10, accuracy_at_step={0: 0.1, 2: 0.2}, steps=2)
        prepare_run_dir(run, run_overrides(ARMS[0], seed, setting, run))
    # An interpreter that cannot start: any launch would fail the call.
    plan = run_comparison(
        setting, results_dir=tmp_path, python=str(tmp_path / "no-python"), show_progress=False
    )
    assert [(arm.label, seed) for arm, seed, _ in plan] == [("grpo_n4", 0), ("grpo_n4", 1)]


def test_progress_reads_the_last_complete_row_of_a_growing_metrics_file(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    assert last_logged(path, "perf/rollouts_total") is None
    rows = [{"step": 0, "eval/accuracy": 0.1}] + [
        {"step": s, "perf/rollouts_total": 256.0 * s, "pad": "x" * 500} for s in (1, 2, 3)
    ]
    # A writer cut off in the middle of step 4's line.
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 4, "perf/rollo')
    assert last_logged(path, "perf/rollouts_total") == 768.0
    # Reading only a tail that starts mid-line still finds the last complete row.
    assert last_logged(path, "perf/rollouts_total", tail_bytes=700) == 768.0
    assert last_logged(path, "perf/tokens_total") is None


# -- the launch commands -------------------------------------------------------------------


@pytest.mark.parametrize("arm", ARMS, ids=lambda a: a.label)
def test_every_arm_launches_a_valid_config_with_the_settings_budget(
    arm: learning.Arm, tmp_path: Path
) -> None:
    overrides = run_overrides(arm, 2, MAKE_RUN, tmp_path / "run")
    assert overrides[-1] == f"hydra.run.dir={(tmp_path / 'run').resolve()}"
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        config = load_config(compose(config_name="config", overrides=overrides[:-1]))
    assert config.seed == 2
    assert config.trainer.max_rollouts == MAKE_RUN.max_rollouts
    assert config.trainer.total_steps >= MAKE_RUN.max_rollouts  # the budget ends the run first
    assert config.eval.every_rollouts == MAKE_RUN.eval_every_rollouts
    assert config.eval.every_steps == 0
    assert config.checkpoint.resume == "auto"
    if arm.experiment == "grpo":
        n = int(arm.overrides[0].split("=")[1])
        assert config.allocator.uniform_samples_per_prompt == n


def test_the_comparisons_warm_up_is_zero_across_methods_and_each_arms_own_within_one(
    tmp_path: Path,
) -> None:
    """bench learning compares methods that take different steps per rollout: no warm-up for
    any arm. bench async compares a method with itself at equal steps: each keeps its own."""
    from adarl.bench.pipeline import setting as async_setting

    # 20 for both methods, as the async setting's description states.
    for label in ("ada_seq_balance_k1", "grpo_n4_k1"):
        arm = learning.arm_by_label(label)
        for chosen, expected in (
            (REDUCED, 0),
            (async_setting(seeds=1, max_rollouts=100, eval_every_rollouts=50), 20),
        ):
            overrides = run_overrides(arm, 0, chosen, tmp_path / "run")
            with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
                config = load_config(compose(config_name="config", overrides=overrides[:-1]))
            assert config.learner.lr_warmup_steps == expected, (label, chosen.name)


def test_settings_name_their_bad_input() -> None:
    REDUCED.validate()
    MAKE_RUN.validate()
    assert set(MAKE_RUN.arms) <= set(REDUCED.arms) <= {arm.label for arm in ARMS}
    with pytest.raises(ValueError, match=r"unknown arm 'nope'.*add one to ARMS"):
        _setting(arms=("nope",)).validate()
    with pytest.raises(ValueError, match="no GRPO arm"):
        _setting(arms=("ada_seq_balance",)).validate()
    with pytest.raises(ValueError, match="--seeds=0"):
        _setting(seeds=0).validate()


# -- the subprocess runner -----------------------------------------------------------------


def test_run_subprocess_logs_the_command_and_its_output_and_returns_its_code(
    tmp_path: Path,
) -> None:
    log = tmp_path / "console.log"
    code = run_subprocess(
        [sys.executable, "-c", "import sys; print('hello from the run'); sys.exit(3)"],
        log_path=log,
        env={"PATH": "/usr/bin:/bin"},
        on_poll=lambda: None,
        poll_s=0.05,
    )
    assert code == 3
    text = log.read_text()
    assert "$ " in text and "hello from the run" in text


def test_a_terminated_harness_interrupts_its_run_instead_of_orphaning_it(
    tmp_path: Path,
) -> None:
    pid_file, seen = tmp_path / "child.pid", tmp_path / "child.seen"
    child = (
        "import os, time\n"
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "try:\n"
        "    time.sleep(600)\n"  # a run that would outlive the harness
        "except KeyboardInterrupt:\n"  # the launcher's clean shutdown path
        f"    open({str(seen)!r}, 'w').write('interrupted')\n"
    )
    sent = []
    handler_before = signal.getsignal(signal.SIGTERM)

    def terminate_once_started() -> None:
        if pid_file.exists() and pid_file.read_text() and not sent:
            sent.append(True)
            os.kill(os.getpid(), signal.SIGTERM)  # what `timeout` or a scheduler sends

    # A harness started with `&` or nohup ignores SIGINT; its run must still get a Ctrl-C.
    sigint_before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with pytest.raises(SystemExit) as stopped:
            run_subprocess(
                [sys.executable, "-c", child],
                log_path=tmp_path / "console.log",
                env=dict(os.environ),
                on_poll=terminate_once_started,
                poll_s=0.05,
            )
    finally:
        signal.signal(signal.SIGINT, sigint_before)
    assert stopped.value.code == 128 + signal.SIGTERM
    assert seen.read_text() == "interrupted"  # stopped through KeyboardInterrupt, not killed
    with pytest.raises(ProcessLookupError):  # and reaped, not left running
        os.kill(int(pid_file.read_text()), 0)
    assert signal.getsignal(signal.SIGTERM) is handler_before  # the handler was restored


def test_the_command_line_refuses_a_comparison_without_grpo(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as refused:
        learning.main(["--arms", "rloo", "--dry-run"])
    assert refused.value.code == 2
    assert "no GRPO arm" in capsys.readouterr().err
