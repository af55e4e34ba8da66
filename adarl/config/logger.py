"""Structured config of the metrics logger (`adarl.logging.MetricsLogger`).

Fields:
    project: W&B project name.
    entity: W&B entity (user or team); None = the API key's default entity.
    mode: where W&B writes: "online", "offline", "disabled", or "auto" (online when an API key
        is available AND the W&B server answers within `network_check_timeout_s`, else offline;
        an explicit `WANDB_MODE` in the environment wins in auto mode). Auto goes offline only
        for those two reasons (also when the server stops answering during `wandb.init`), and
        says which in one console line; any other W&B start error (a rejected key, an invalid
        project name or tag) stops the run.
    run_name: W&B run name; None = W&B picks one.
    group: W&B run group (e.g. an experiment sweep); None = no group.
    tags: W&B run tags.
    log_every_steps: print the one-line console summary every this many steps.
        `metrics.jsonl` and W&B always receive every step.
    progress_bar: show a tqdm progress bar; None = only when the console is a terminal (a bar
        in a Ray job log or CI log is one unreadable line per refresh).
    progress_keys: metric names shown on the progress bar and in the console line of each
        step, those the step has (an evaluation's on the steps that evaluate; the default:
        pass@1 `eval/accuracy`, `eval/pass@8` and `eval/greedy_accuracy`, shown as eval/pass@1,
        eval/pass@8 and eval/greedy); empty = the console line shows every metric. The whole
        evaluation (pass@k by level) is in metrics.jsonl, and the final one's table ends the
        run's summary.
    network_check_timeout_s: how long auto mode waits for the W&B server before going offline.
    library_logs: where the Ray actors' library output goes (vLLM, torch, DeepSpeed, NUMA:
        warnings, deprecation notices, progress bars, C++ messages; everything an actor process
        prints but adarl's own log lines): "file" = one file per actor process,
        `<run dir>/logs/<Class>-<pid>.log` (created on the actor's node), the console keeping
        adarl's lines, and an actor error that stops the run naming its file; "console" = on the
        console, each line prefixed `(<Class> pid=...)` by Ray. Runs without Ray
        (cluster=in_process) print to the console either way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

WANDB_MODES = ("online", "offline", "disabled", "auto")
LIBRARY_LOGS = ("file", "console")
# Every metric name starts with one of these groups (DESIGN.md: "Say what happened").
METRIC_GROUPS = ("signal", "sampling", "train", "eval", "timing", "perf")


@dataclass
class LoggerConfig:
    project: str = "adarl"
    entity: str | None = None
    mode: str = "auto"
    run_name: str | None = None
    group: str | None = None
    tags: list[str] = field(default_factory=list)
    log_every_steps: int = 1
    progress_bar: bool | None = None
    progress_keys: list[str] = field(default_factory=list)
    network_check_timeout_s: float = 2.0
    library_logs: str = "file"

    def validate(self) -> None:
        if self.mode not in WANDB_MODES:
            raise ValueError(
                f"logger.mode={self.mode!r} is not one of {WANDB_MODES}; set logger.mode=auto to "
                "log online when a W&B key and network are available and offline otherwise"
            )
        if not self.project:
            raise ValueError("logger.project is empty; set logger.project=NAME (e.g. adarl)")
        if self.log_every_steps < 1:
            raise ValueError(
                f"logger.log_every_steps={self.log_every_steps} must be >= 1 "
                "(1 prints a console line every step)"
            )
        if self.network_check_timeout_s <= 0:
            raise ValueError(
                f"logger.network_check_timeout_s={self.network_check_timeout_s} must be > 0 "
                "(e.g. 2.0)"
            )
        for key in self.progress_keys:
            if key.split("/", 1)[0] not in METRIC_GROUPS or "/" not in key:
                raise ValueError(
                    f"logger.progress_keys entry {key!r} is not a grouped metric name; use "
                    f"GROUP/NAME with GROUP in {METRIC_GROUPS} (e.g. train/loss)"
                )
        if self.library_logs not in LIBRARY_LOGS:
            raise ValueError(
                f"logger.library_logs={self.library_logs!r} is not one of {LIBRARY_LOGS}; set "
                "logger.library_logs=file to keep the actors' library output in <run dir>/logs/, "
                "or console to see it on the console"
            )
