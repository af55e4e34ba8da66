"""MetricsLogger: metrics.jsonl content and resume, console output, W&B mode choice, and the
offline W&B run read back record by record."""

from __future__ import annotations

import io
import json
import socket
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from adarl.config.logger import LoggerConfig
from adarl.logging import (
    MetricsLogger,
    _offline_fallback_reason,
    build_metrics_logger,
    read_metrics_jsonl,
    read_wandb_offline_metrics,
    resolve_wandb_mode,
)


def quiet_logger(run_dir: Path, **kwargs: object) -> MetricsLogger:
    """W&B off, no bar, console into a buffer: only the files are under test."""
    defaults: dict[str, object] = {"mode": "disabled", "progress_bar": False}
    defaults["console"] = io.StringIO()
    return MetricsLogger(run_dir=run_dir, **{**defaults, **kwargs})


# ---------------------------------------------------------------------------------------------
# metrics.jsonl


def test_metrics_jsonl_holds_one_json_object_per_step(tmp_path: Path) -> None:
    with quiet_logger(tmp_path) as logger:
        logger.log(
            1,
            {
                "signal/mixed_group_frac": np.float32(0.5),  # numpy scalar -> float
                "train/loss": torch.tensor(0.25),  # 0-d tensor -> float
                "sampling/rollouts": 12,
                "sampling/samples_per_prompt": [2, 4, 8],  # histogram -> list of floats
                "perf/grad_norm": float("nan"),  # non-finite -> null (strict JSON)
            },
        )
        logger.log(2, {"train/loss": 0.125})
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {
            "step": 1,
            "signal/mixed_group_frac": 0.5,
            "train/loss": 0.25,
            "sampling/rollouts": 12,
            "sampling/samples_per_prompt": [2.0, 4.0, 8.0],
            "perf/grad_norm": None,
        },
        {"step": 2, "train/loss": 0.125},
    ]
    assert "NaN" not in lines[0]


def test_each_step_is_on_disk_before_the_next_step(tmp_path: Path) -> None:
    logger = quiet_logger(tmp_path)
    logger.log(1, {"train/loss": 1.0})
    # Read by another handle while the logger is still open: a crash now keeps step 1.
    assert read_metrics_jsonl(tmp_path / "metrics.jsonl") == [{"step": 1, "train/loss": 1.0}]
    logger.close()


def test_resume_drops_steps_after_the_checkpoint_and_appends(tmp_path: Path) -> None:
    with quiet_logger(tmp_path) as logger:
        for step in range(1, 6):
            logger.log(step, {"train/loss": float(step)})
            if step in (2, 4):
                logger.log_completions(step, [{"prompt": "1+1=", "completion": str(step)}])
    # Crashed after step 5; the checkpoint is at step 3.
    with quiet_logger(tmp_path, resume_from_step=3) as logger:
        with pytest.raises(ValueError, match="step 3 logged after step 3"):
            logger.log(3, {"train/loss": 0.0})
        logger.log(4, {"train/loss": 40.0})
    rows = read_metrics_jsonl(tmp_path / "metrics.jsonl")
    assert [(row["step"], row["train/loss"]) for row in rows] == [
        (1, 1.0),
        (2, 2.0),
        (3, 3.0),
        (4, 40.0),
    ]
    completions = read_metrics_jsonl(tmp_path / "completions.jsonl")
    assert [row["step"] for row in completions] == [2]


def test_resume_discards_a_line_cut_short_by_a_crash(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text(
        '{"step": 1, "train/loss": 1.0}\n{"step": 2, "train/loss": 2.0}\n{"step": 3, "tra'
    )
    with quiet_logger(tmp_path, resume_from_step=3) as logger:
        logger.log(4, {"train/loss": 4.0})
    assert [row["step"] for row in read_metrics_jsonl(tmp_path / "metrics.jsonl")] == [1, 2, 4]


def test_resume_refuses_a_file_that_is_not_adarl_metrics(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"loss": 1.0}\n')
    with pytest.raises(ValueError, match="without a valid 'step'"):
        quiet_logger(tmp_path, resume_from_step=3)


def test_fresh_run_refuses_a_directory_with_metrics(tmp_path: Path) -> None:
    with quiet_logger(tmp_path) as logger:
        logger.log(1, {"train/loss": 1.0})
    with pytest.raises(FileExistsError, match=r"hydra\.run\.dir"):
        quiet_logger(tmp_path)
    # Starting over (the earlier attempt left no checkpoint) drops every line.
    with quiet_logger(tmp_path, resume_from_step=-1) as logger:
        logger.log(0, {"train/loss": 9.0})
    assert read_metrics_jsonl(tmp_path / "metrics.jsonl") == [{"step": 0, "train/loss": 9.0}]


def test_steps_must_increase(tmp_path: Path) -> None:
    with quiet_logger(tmp_path) as logger:
        logger.log(2, {"train/loss": 1.0})
        with pytest.raises(ValueError, match="in increasing order"):
            logger.log(2, {"eval/accuracy": 0.5})
        with pytest.raises(ValueError, match="in increasing order"):
            logger.log(1, {"train/loss": 1.0})
        with pytest.raises(ValueError, match="before the next step"):
            logger.log_completions(1, [{"completion": "x"}])


@pytest.mark.parametrize("name", ["loss", "training/loss", "train/", "train/lo ss"])
def test_metric_names_must_be_grouped(tmp_path: Path, name: str) -> None:
    with quiet_logger(tmp_path) as logger, pytest.raises(ValueError, match="GROUP/NAME"):
        logger.log(1, {name: 1.0})
    assert (tmp_path / "metrics.jsonl").read_text() == ""  # nothing half-written


def test_metric_values_must_be_numbers_or_histograms(tmp_path: Path) -> None:
    with quiet_logger(tmp_path) as logger:
        with pytest.raises(TypeError, match="'train/loss' has a str"):
            logger.log(1, {"train/loss": "0.5"})
        with pytest.raises(TypeError, match="'sampling/n' has a ndarray"):
            logger.log(1, {"sampling/n": np.zeros((2, 2))})


def test_closed_logger_refuses_to_log(tmp_path: Path) -> None:
    logger = quiet_logger(tmp_path)
    logger.close()
    logger.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        logger.log(1, {"train/loss": 1.0})


# ---------------------------------------------------------------------------------------------
# console


def test_console_line_shows_the_progress_keys_an_evaluation_among_them(tmp_path: Path) -> None:
    """Issue 48.6: an evaluation step shows its progress keys (pass@1 under its console name),
    not every eval/* number it logged (152 of them, ~5,700 characters, on the default task)."""
    console = io.StringIO()
    with quiet_logger(
        tmp_path,
        console=console,
        total_steps=4,
        log_every_steps=2,
        progress_keys=["train/loss", "signal/mixed_group_frac", "eval/accuracy", "eval/pass@8"],
    ) as logger:
        for step in range(1, 5):
            metrics = {"train/loss": 1.0 / step, "signal/mixed_group_frac": 0.5, "perf/x": 7.0}
            if step == 4:
                metrics["eval/accuracy"] = 0.8125
                metrics["eval/pass@8"] = 0.9375
                metrics["eval/pass@8_by_difficulty/3"] = 0.5
                metrics["eval/guess_pass@8"] = 0.25
            logger.log(step, metrics)
    assert console.getvalue().splitlines()[1:] == [
        "step 2/4 | train/loss 0.5 | signal/mixed_group_frac 0.5",
        "step 4/4 | train/loss 0.25 | signal/mixed_group_frac 0.5 | eval/pass@1 0.8125 | "
        "eval/pass@8 0.9375",
    ]
    assert console.getvalue().splitlines()[0] == "W&B: disabled (logger.mode=disabled)"


def test_the_default_progress_keys_name_pass_at_1_pass_at_8_and_greedy() -> None:
    from omegaconf import OmegaConf

    from adarl.launch import CONFIG_DIR

    keys = OmegaConf.load(Path(CONFIG_DIR) / "logger" / "default.yaml").progress_keys
    assert [k for k in keys if k.startswith("eval/")] == [
        "eval/accuracy",
        "eval/pass@8",
        "eval/greedy_accuracy",
    ]


def test_the_bar_total_follows_the_expected_last_step(tmp_path: Path) -> None:
    """A budget that ends the run before trainer.total_steps: the bar and the step lines count
    to where the run will stop (`expect_steps`), not to total_steps."""
    console = io.StringIO()
    with quiet_logger(
        tmp_path, console=console, progress_bar=True, total_steps=1000, progress_keys=["train/loss"]
    ) as logger:
        logger.expect_steps(704)
        logger.log(1, {"train/loss": 0.5})
        assert logger._bar.total == 704
        logger.expect_steps(700)
        logger.log(2, {"train/loss": 0.5})
    output = console.getvalue()
    assert "step 1/704 | train/loss 0.5" in output and "step 2/700" in output
    assert "2/700" in output.rsplit("step 2/700", 1)[1]  # the bar, redrawn with the new total
    assert "/1000" not in output.split("step 1/704")[1]


def test_console_line_without_key_metrics_shows_every_scalar(tmp_path: Path) -> None:
    console = io.StringIO()
    with quiet_logger(tmp_path, console=console) as logger:
        logger.log(3, {"train/loss": 0.5, "sampling/n": [1, 2], "timing/step_s": 1.25})
    assert console.getvalue().splitlines()[-1] == "step 3 | train/loss 0.5 | timing/step_s 1.25"


def test_progress_bar_carries_the_key_numbers(tmp_path: Path) -> None:
    console = io.StringIO()
    with quiet_logger(
        tmp_path, console=console, progress_bar=True, total_steps=10, progress_keys=["train/loss"]
    ) as logger:
        logger.log(3, {"train/loss": 0.5, "perf/x": 1.0})
    output = console.getvalue()
    assert "3/10" in output
    assert "train/loss=0.5" in output
    assert "perf/x" not in output.split("step 3")[0]  # the bar shows only the key numbers


# ---------------------------------------------------------------------------------------------
# W&B mode


def test_auto_mode_without_a_key_goes_offline_without_touching_the_network(
    isolated_wandb: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"network touched: {args}")

    monkeypatch.setattr(socket, "create_connection", no_network)
    mode, reason = resolve_wandb_mode("auto")
    assert mode == "offline"
    assert "no W&B API key" in reason


def test_auto_mode_with_a_key_but_no_server_goes_offline(
    isolated_wandb: Path, monkeypatch: pytest.MonkeyPatch, closed_port: int
) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{closed_port}")
    mode, reason = resolve_wandb_mode("auto", network_check_timeout_s=2.0)
    assert mode == "offline"
    assert "WANDB_API_KEY" in reason
    assert "did not answer" in reason


def test_auto_mode_with_a_netrc_key_and_a_server_goes_online(
    isolated_wandb: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    netrc_path = isolated_wandb / "netrc"
    netrc_path.write_text("machine 127.0.0.1 login user password " + "k" * 40 + "\n")
    netrc_path.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc_path))
    with socket.socket() as server:  # a local listener stands in for the W&B server
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{server.getsockname()[1]}")
        mode, reason = resolve_wandb_mode("auto")
    assert mode == "online"
    assert "netrc entry for 127.0.0.1" in reason


def test_auto_mode_honours_wandb_mode_in_the_environment(
    isolated_wandb: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_MODE", "dryrun")
    assert resolve_wandb_mode("auto") == ("offline", "WANDB_MODE=dryrun is set in the environment")
    monkeypatch.setenv("WANDB_MODE", "sometimes")
    with pytest.raises(ValueError, match="WANDB_MODE='sometimes'"):
        resolve_wandb_mode("auto")


def test_explicit_modes_are_kept_and_unknown_modes_rejected() -> None:
    assert resolve_wandb_mode("offline")[0] == "offline"
    assert resolve_wandb_mode("disabled")[0] == "disabled"
    with pytest.raises(ValueError, match="'cloud' is not one of"):
        resolve_wandb_mode("cloud")


def _probe_only_server() -> tuple[socket.socket, threading.Thread]:
    """A local "W&B server" that accepts one connection (auto mode's reachability probe) and then
    stops listening: wandb.init's own connections are refused, as when the network drops."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def accept_once() -> None:
        connection, _ = server.accept()
        connection.close()
        server.close()

    thread = threading.Thread(target=accept_once, daemon=True)
    thread.start()
    return server, thread


@pytest.mark.slow
def test_auto_mode_goes_offline_when_the_server_stops_answering_after_the_probe(
    tmp_path: Path, isolated_wandb: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    monkeypatch.setenv("WANDB_INIT_TIMEOUT", "2")  # W&B's own retry budget (default 90 s)
    server, accepted = _probe_only_server()
    port = server.getsockname()[1]
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{port}")
    console = io.StringIO()
    logger = MetricsLogger(run_dir=tmp_path / "run", mode="auto", console=console)
    accepted.join(timeout=10)
    logger.log(1, {"train/loss": 1.0})
    logger.close()
    assert logger.wandb_mode == "offline"
    lines = [line for line in console.getvalue().splitlines() if line.startswith("W&B:")]
    assert len(lines) == 1  # said once, with the reason
    assert lines[0].startswith("W&B: offline (logger.mode=auto: the W&B server did not answer")
    assert "connection refused" in lines[0]
    assert [row["train/loss"] for row in read_wandb_offline_metrics(tmp_path / "run")] == [1.0]


def test_auto_mode_fails_on_an_api_key_the_server_rejects(
    tmp_path: Path, isolated_wandb: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A key exists (so this is not "no key") but W&B refuses it (too short): the user must fix
    # the key; going offline would hide that the run is not where they look for it.
    import wandb

    monkeypatch.setenv("WANDB_API_KEY", "bad")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{server.getsockname()[1]}")
        with pytest.raises(wandb.errors.AuthenticationError) as failed:
            MetricsLogger(run_dir=tmp_path / "run", mode="auto", console=io.StringIO())
    notes = "\n".join(failed.value.__notes__)
    assert "logger.mode=auto chose online" in notes and "logger.mode=offline" in notes


def test_auto_mode_fails_on_an_invalid_init_argument(
    tmp_path: Path, isolated_wandb: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wandb

    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    with socket.socket() as server:  # key and server both there: auto picks online
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{server.getsockname()[1]}")
        console = io.StringIO()
        with pytest.raises(wandb.errors.UsageError, match="Invalid project name 'a/b'") as failed:
            MetricsLogger(run_dir=tmp_path / "run", mode="auto", project="a/b", console=console)
    assert "logger.mode=disabled" in "\n".join(failed.value.__notes__)
    assert "offline" not in console.getvalue()  # no silent fallback
    assert not list((tmp_path / "run" / "wandb").glob("offline-run-*"))


@pytest.mark.parametrize(
    ("error", "falls_back"),
    [
        ("CommError:Post http://h/graphql: dial tcp: connect: connection refused", True),
        ("CommError:Timed out initializing run: context deadline exceeded", True),
        ("CommError:lookup api.wandb.ai: no such host", True),
        ("UsageError:No API key configured. Use `wandb login` to log in.", True),
        ("AuthenticationError:API key must have 40+ characters, has 3.", False),
        ("CommError:permission denied for project adarl", False),
        ("UsageError:Invalid project name 'a/b'", False),
        ("ValueError:Tags must be between 1 and 64 characters", False),
    ],
)
def test_only_missing_keys_and_network_failures_allow_the_offline_fallback(
    error: str, falls_back: bool
) -> None:
    import wandb

    kind, message = error.split(":", 1)
    exception_type = getattr(wandb.errors, kind, None) or ValueError
    reason = _offline_fallback_reason(exception_type(message))
    assert (reason is not None) == falls_back
    if reason is not None:
        assert message.split(".")[0] in reason  # the console line carries W&B's own words


def test_explicit_online_mode_without_a_key_fails_clearly(
    tmp_path: Path, isolated_wandb: Path
) -> None:
    import wandb

    with pytest.raises(wandb.errors.UsageError, match="No API key"):
        MetricsLogger(run_dir=tmp_path, mode="online", console=io.StringIO())


# ---------------------------------------------------------------------------------------------
# offline W&B run, read back


@pytest.mark.slow
def test_offline_wandb_run_holds_every_step_and_the_completions_table(
    tmp_path: Path, isolated_wandb: Path
) -> None:
    run_dir = tmp_path / "run"
    config = LoggerConfig(mode="offline", project="adarl-test", run_name="unit")
    with build_metrics_logger(
        config, run_dir=run_dir, run_config={"seed": 3}, total_steps=3
    ) as logger:
        logger.log_config({"allocator": {"name": "seq_balance"}})
        for step in range(1, 4):
            logger.log(
                step,
                {
                    "signal/mixed_group_frac": step / 4,
                    "timing/step_s": 0.5 * step,
                    "sampling/samples_per_prompt": [2, 4, 4, 8],
                },
            )
        rows = [
            {"prompt": "12+7=", "completion": "19", "reward": 1.0},
            {"prompt": "3+4=", "completion": "8", "reward": 0.0},
        ]
        logger.log_completions(3, rows)
        wandb_run_dir = logger.wandb_run_dir
    assert wandb_run_dir is not None and wandb_run_dir.parent == run_dir / "wandb"
    assert wandb_run_dir.name.startswith("offline-run-")

    history = read_wandb_offline_metrics(run_dir)
    assert [row["_step"] for row in history] == [1, 2, 3]
    for step, row in zip([1, 2, 3], history, strict=True):
        assert row["signal/mixed_group_frac"] == step / 4
        assert row["timing/step_s"] == 0.5 * step
        assert row["sampling/samples_per_prompt"]["_type"] == "histogram"
        assert sum(row["sampling/samples_per_prompt"]["values"]) == 4  # 4 samples binned
    table_ref = history[2]["eval/completions"]
    assert table_ref["_type"] == "table-file"
    assert (table_ref["nrows"], table_ref["ncols"]) == (2, 3)
    table = json.loads((wandb_run_dir / "files" / table_ref["path"]).read_text())
    assert table["columns"] == ["prompt", "completion", "reward"]
    assert table["data"] == [["12+7=", "19", 1.0], ["3+4=", "8", 0.0]]
    assert read_metrics_jsonl(run_dir / "completions.jsonl") == [{"step": 3, **r} for r in rows]


@pytest.mark.slow
def test_resumed_offline_wandb_run_continues_the_same_run(
    tmp_path: Path, isolated_wandb: Path
) -> None:
    run_dir = tmp_path / "run"
    with MetricsLogger(run_dir=run_dir, mode="offline", console=io.StringIO()) as logger:
        for step in range(1, 6):
            logger.log(step, {"train/loss": float(step)})
    with MetricsLogger(
        run_dir=run_dir, mode="offline", resume_from_step=3, console=io.StringIO()
    ) as logger:
        for step in range(4, 7):
            logger.log(step, {"train/loss": 10.0 * step})
    history = read_wandb_offline_metrics(run_dir)
    # As in metrics.jsonl: steps 4-5 of the first attempt are superseded by the resumed run.
    assert [(row["_step"], row["train/loss"]) for row in history] == [
        (1, 1.0),
        (2, 2.0),
        (3, 3.0),
        (4, 40.0),
        (5, 50.0),
        (6, 60.0),
    ]
    run_ids = {path.name.split("-")[3] for path in (run_dir / "wandb").glob("offline-run-*")}
    assert len(run_ids) == 1  # both attempts log to one W&B run id


def test_reading_wandb_without_a_wandb_run_says_so(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="was W&B disabled"):
        read_wandb_offline_metrics(tmp_path)


# ---------------------------------------------------------------------------------------------
# config


def test_logger_config_validation_names_the_key() -> None:
    LoggerConfig().validate()
    with pytest.raises(ValueError, match=r"logger\.mode='cloud'"):
        LoggerConfig(mode="cloud").validate()
    with pytest.raises(ValueError, match=r"logger\.log_every_steps=0"):
        LoggerConfig(log_every_steps=0).validate()
    with pytest.raises(ValueError, match=r"logger\.progress_keys entry 'loss'"):
        LoggerConfig(progress_keys=["loss"]).validate()


def test_logger_config_is_a_valid_structured_config() -> None:
    config = OmegaConf.merge(
        OmegaConf.structured(LoggerConfig), OmegaConf.from_dotlist(["mode=offline", "tags=[a]"])
    )
    assert OmegaConf.to_object(config) == LoggerConfig(mode="offline", tags=["a"])
    with pytest.raises(Exception, match="modee"):
        OmegaConf.merge(OmegaConf.structured(LoggerConfig), {"modee": "offline"})
