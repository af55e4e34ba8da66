"""Where every step's numbers go: `metrics.jsonl`, the console, and Weights & Biases.

    driver ─ log(step, {"signal/..": x, "timing/..": t}) ─► MetricsLogger
                                          ├─► RUN_DIR/metrics.jsonl (every step, flushed)
                                          ├─► console line + tqdm bar (key numbers)
                                          └─► W&B run in RUN_DIR/wandb (online or offline)
    driver ─ log_completions(step, rows) ─► RUN_DIR/completions.jsonl + W&B table

`metrics.jsonl` is the source of truth scripts read: one JSON object per line, `{"step": k, ...}`,
steps strictly increasing; a non-finite value (NaN, inf) is written as `null` so the file stays
strict JSON. On resume from step k, lines with step > k (written after the checkpoint the run
resumes from) are dropped before appending, so every step appears once.

W&B `mode="auto"` goes offline for exactly two reasons: no API key, or no network to the W&B
server. Both are decided before `wandb.init` when possible (`resolve_wandb_mode`: key lookup, then
a TCP probe) and recognised among `wandb.init`'s errors otherwise (the server stopped answering
after the probe); either way one console line says so with the reason (sync later with
`wandb sync RUN_DIR/wandb/offline-run-*`). Any other `wandb.init` error (a rejected API key, an
invalid project name or tag, a W&B failure) stops the run, with a note naming `logger.mode`.

Secrets never leave through the logger: the W&B run config is passed through
`adarl.redact.redact_config`, and console lines and completion texts through `redact_text`.
"""

from __future__ import annotations

import json
import math
import netrc
import os
import re
import secrets
import socket
import string
import struct
import sys
import threading
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlparse

from tqdm import tqdm

from adarl.config.logger import METRIC_GROUPS, WANDB_MODES, LoggerConfig
from adarl.redact import redact_config, redact_text

METRICS_FILE = "metrics.jsonl"
COMPLETIONS_FILE = "completions.jsonl"
COMPLETIONS_TABLE_KEY = "eval/completions"
WANDB_DIR = "wandb"  # W&B writes RUN_DIR/wandb/{offline-,}run-<time>-<id>/
_WANDB_RUN_ID_FILE = "adarl_run_id"  # inside RUN_DIR/wandb: the id a resumed run reuses
_DEFAULT_WANDB_URL = "https://api.wandb.ai"
_ENV_WANDB_MODE_ALIASES = {"dryrun": "offline", "run": "online"}

MetricValue = float | int | bool | list[float] | None
# Shorter names on the console for metrics whose name is not what a reader looks for.
CONSOLE_LABELS = {"eval/accuracy": "eval/pass@1", "eval/greedy_accuracy": "eval/greedy"}


def resolve_wandb_mode(mode: str, *, network_check_timeout_s: float = 2.0) -> tuple[str, str]:
    """Decide the W&B mode and say why: returns (`online`|`offline`|`disabled`, reason).

    Explicit modes are returned as given. `auto` honours an explicit `WANDB_MODE` in the
    environment, then requires an API key (env `WANDB_API_KEY` or a netrc entry for the W&B host)
    and a TCP connection to the W&B server within `network_check_timeout_s`; the key is checked
    first so a machine without one never touches the network.
    """
    if mode not in WANDB_MODES:
        raise ValueError(f"W&B mode {mode!r} is not one of {WANDB_MODES}")
    if mode != "auto":
        return mode, f"logger.mode={mode}"
    env_mode = os.environ.get("WANDB_MODE", "").strip().lower()
    if env_mode:
        resolved = _ENV_WANDB_MODE_ALIASES.get(env_mode, env_mode)
        if resolved not in ("online", "offline", "disabled"):
            raise ValueError(
                f"WANDB_MODE={env_mode!r} is not a W&B mode; unset it or set it to "
                "online, offline or disabled"
            )
        return resolved, f"WANDB_MODE={env_mode} is set in the environment"
    base_url = os.environ.get("WANDB_BASE_URL", _DEFAULT_WANDB_URL)
    url = urlparse(base_url)
    host = url.hostname or ""
    key_source = _wandb_api_key_source(host)
    if key_source is None:
        return "offline", f"no W&B API key (neither WANDB_API_KEY nor a netrc entry for {host})"
    port = url.port or (443 if url.scheme == "https" else 80)
    if not _reachable(host, port, timeout_s=network_check_timeout_s):
        return (
            "offline",
            f"API key found ({key_source}) but {host}:{port} did not answer within "
            f"{network_check_timeout_s:g} s",
        )
    return "online", f"API key found ({key_source}) and {host} is reachable"


def _wandb_api_key_source(host: str) -> str | None:
    if os.environ.get("WANDB_API_KEY"):
        return "WANDB_API_KEY"
    try:
        credentials = netrc.netrc(os.environ.get("NETRC") or None).authenticators(host)
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return None  # no netrc, or one we cannot read: same as no key
    if credentials is not None and credentials[2]:
        return f"netrc entry for {host}"
    return None


def _reachable(host: str, port: int, *, timeout_s: float) -> bool:
    """TCP connect within `timeout_s`, DNS included (a socket timeout does not bound DNS)."""
    outcome: list[bool] = []

    def attempt() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                outcome.append(True)
        except OSError:
            outcome.append(False)

    thread = threading.Thread(target=attempt, name="wandb-reachability", daemon=True)
    thread.start()
    thread.join(timeout_s)
    return bool(outcome and outcome[0])


# wandb.init errors that mean "no network to the W&B server" (CommError messages of wandb 0.31,
# measured: a refused connection, and a server that accepts but never answers).
_NETWORK_ERROR_MARKERS = (
    "connection refused",
    "connection reset",
    "deadline exceeded",
    "timed out",
    "i/o timeout",
    "no such host",
    "network is unreachable",
    "no route to host",
    "tls handshake",
)


def _offline_fallback_reason(error: BaseException) -> str | None:
    """Why `logger.mode=auto` may go offline after `wandb.init` failed online, or None when the
    error is of another kind (a rejected key, an invalid argument, a W&B bug) and must fail the
    run. Only two causes qualify: no API key, and no network to the server."""
    import wandb

    message = str(error)
    if isinstance(error, wandb.errors.AuthenticationError):
        return None  # a key exists and was refused: the user must fix it, not lose the run online
    if isinstance(error, wandb.errors.UsageError) and "no api key" in message.lower():
        return f"no W&B API key ({message.splitlines()[0]})"
    if isinstance(error, wandb.errors.CommError) and any(
        marker in message.lower() for marker in _NETWORK_ERROR_MARKERS
    ):
        return f"the W&B server did not answer ({message.splitlines()[0]})"
    return None


class MetricsLogger:
    """Writes each step's metrics to `metrics.jsonl`, the console and (when enabled) W&B.

    Call `log(step, metrics)` once per step with every metric of that step (steps strictly
    increasing); metric names are `GROUP/NAME` with GROUP in `METRIC_GROUPS`. A value is a number
    (numpy/torch scalars accepted) or a 1-D sequence of numbers, logged to W&B as a histogram.
    `resume_from_step`: the step of the checkpoint this run resumes from (lines with a larger
    step are dropped, and W&B continues the same run id); None for a fresh run, which refuses a
    run dir that already has metrics; -1 starts over in a dir whose earlier attempt left metrics
    but no checkpoint (drops every line).
    """

    def __init__(
        self,
        *,
        run_dir: str | Path,
        mode: str = "auto",
        project: str = "adarl",
        entity: str | None = None,
        run_name: str | None = None,
        group: str | None = None,
        tags: Sequence[str] = (),
        config: Mapping[str, Any] | None = None,
        resume_from_step: int | None = None,
        total_steps: int | None = None,
        log_every_steps: int = 1,
        progress_bar: bool | None = None,
        progress_keys: Sequence[str] = (),
        network_check_timeout_s: float = 2.0,
        console: IO[str] | None = None,
    ) -> None:
        if log_every_steps < 1:
            raise ValueError(f"log_every_steps={log_every_steps} must be >= 1")
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.run_dir / METRICS_FILE
        self.completions_path = self.run_dir / COMPLETIONS_FILE
        self._console = console if console is not None else sys.stdout
        self._log_every_steps = log_every_steps
        self._progress_keys = tuple(progress_keys)
        self._last_step: int | None = resume_from_step
        self._closed = False

        if resume_from_step is None:
            for path in (self.metrics_path, self.completions_path):
                if path.exists() and path.stat().st_size > 0:
                    raise FileExistsError(
                        f"{path} already has metrics from an earlier run; resume that run from "
                        "its checkpoint (checkpoint.resume=auto), or start in a new run directory "
                        "(hydra.run.dir=PATH), or move the old files away"
                    )
        else:
            _truncate_jsonl_after_step(self.metrics_path, resume_from_step)
            _truncate_jsonl_after_step(self.completions_path, resume_from_step)
        # Line-buffered appends: a crash loses at most the line being written.
        self._metrics_file = self.metrics_path.open("a", encoding="utf-8", buffering=1)
        self._completions_file = self.completions_path.open("a", encoding="utf-8", buffering=1)

        show_bar = progress_bar if progress_bar is not None else _is_terminal(self._console)
        self._bar = tqdm(
            total=total_steps,
            initial=max(resume_from_step or 0, 0),
            unit="step",
            file=self._console,
            dynamic_ncols=True,
            disable=not show_bar,
        )

        self._wandb_run: Any = None
        try:
            self.wandb_mode, reason = resolve_wandb_mode(
                mode, network_check_timeout_s=network_check_timeout_s
            )
            if self.wandb_mode == "disabled":
                self._say(f"W&B: disabled ({reason})")
            else:
                self._wandb_run = self._init_wandb(
                    auto=mode == "auto",
                    reason=reason,
                    project=project,
                    entity=entity,
                    run_name=run_name,
                    group=group,
                    tags=list(tags),
                    config=redact_config(dict(config)) if config is not None else None,
                    resuming=resume_from_step is not None and resume_from_step >= 0,
                )
        except BaseException:
            self.close()  # release the files and the bar, then report the W&B failure
            raise

    # ----------------------------------------------------------------------------------------
    # public API

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Record one step: a line in metrics.jsonl (flushed), the bar, W&B, the console line."""
        self._check_open()
        if self._last_step is not None and step <= self._last_step:
            raise ValueError(
                f"step {step} logged after step {self._last_step}: log each step once, with "
                "all its metrics in one call, in increasing order"
            )
        values = {name: _plain_value(name, value) for name, value in metrics.items()}
        for name in values:
            _check_metric_name(name)
        self._last_step = step

        self._metrics_file.write(json.dumps({"step": step, **_json_safe(values)}) + "\n")

        if self._wandb_run is not None:
            self._wandb_run.log(self._to_wandb(values), step=step)

        if not self._bar.disable:
            if step > self._bar.n:
                self._bar.update(step - self._bar.n)
            shown = {k: _fmt(values[k]) for k in self._progress_keys if k in values}
            if shown:
                self._bar.set_postfix(shown, refresh=False)
            self._bar.refresh()
        if step % self._log_every_steps == 0:
            self._say(self._console_line(step, values))

    def expect_steps(self, total: int) -> None:
        """The step the run is now expected to stop at (a rollout or token budget ends it before
        `trainer.total_steps`): the bar's total and the console lines' `step k/total`."""
        if total != self._bar.total:
            self._bar.total = total
            if not self._bar.disable:
                self._bar.refresh()

    def log_completions(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        """Record sampled completions of an eval: completions.jsonl + the W&B table
        `eval/completions` at `step`. Columns are the union of the rows' keys in first-seen order.
        Call it before logging a later step (W&B drops data for steps already passed)."""
        self._check_open()
        if self._last_step is not None and step < self._last_step:
            raise ValueError(
                f"completions for step {step} arrived after step {self._last_step} was logged; "
                "log them before the next step's metrics"
            )
        if not rows:
            return
        rows = [redact_config(dict(row)) if isinstance(row, Mapping) else row for row in rows]
        columns: list[str] = []
        for row in rows:
            if not isinstance(row, Mapping):
                raise TypeError(f"log_completions rows must be dicts, got {type(row).__name__}")
            columns.extend(key for key in row if key not in columns)
        for row in rows:
            self._completions_file.write(
                json.dumps(_json_safe({"step": step, **{k: row.get(k) for k in columns}})) + "\n"
            )
        if self._wandb_run is not None:
            import wandb

            table = wandb.Table(
                columns=columns, data=[[row.get(column) for column in columns] for row in rows]
            )
            self._wandb_run.log({COMPLETIONS_TABLE_KEY: table}, step=step)

    def log_config(self, config: Mapping[str, Any]) -> None:
        """Attach the resolved run config (plain nested dicts) to the W&B run."""
        self._check_open()
        if self._wandb_run is not None:
            self._wandb_run.config.update(redact_config(dict(config)), allow_val_change=True)

    @property
    def wandb_run_dir(self) -> Path | None:
        """RUN_DIR/wandb/{offline-,}run-<time>-<id>, or None when W&B is disabled."""
        if self._wandb_run is None:
            return None
        return Path(self._wandb_run.dir).parent  # run.dir is <run>/files

    def close(self) -> None:
        """Flush and close the files and the bar, finish the W&B run and wait until it is on
        disk; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._bar.close()
        self._metrics_file.close()
        self._completions_file.close()
        if self._wandb_run is not None:
            import wandb

            self._wandb_run.finish()
            self._wandb_run = None
            # Offline, finish() returns before W&B's writer has flushed the run log (measured:
            # a log read right after held no history); teardown waits for the W&B service to
            # exit, so the run on disk is complete when close() returns. The next run in this
            # process starts a fresh service (~0.5 s).
            wandb.teardown()

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ----------------------------------------------------------------------------------------
    # internals

    def _init_wandb(
        self,
        *,
        auto: bool,
        reason: str,
        project: str,
        entity: str | None,
        run_name: str | None,
        group: str | None,
        tags: list[str],
        config: dict[str, Any] | None,
        resuming: bool,
    ) -> Any:
        import wandb

        wandb_dir = self.run_dir / WANDB_DIR
        wandb_dir.mkdir(parents=True, exist_ok=True)
        run_id = _load_or_create_run_id(wandb_dir, resuming=resuming)
        settings = wandb.Settings(
            # adarl prints its own console lines; W&B's stdout wrapper would also capture every
            # tqdm refresh and interfere with Ray/pytest output capture.
            console="off",
            silent=True,
        )

        def start(mode: str) -> Any:
            return wandb.init(
                project=project,
                entity=entity,
                name=None if run_name is None else redact_text(run_name),
                group=None if group is None else redact_text(group),
                tags=[redact_text(tag) for tag in tags],
                config=config,
                dir=str(self.run_dir),
                mode=mode,  # type: ignore[arg-type]
                id=run_id,
                resume="allow" if resuming else None,
                settings=settings,
                reinit="create_new",
            )

        try:
            run = start(self.wandb_mode)
        except Exception as error:
            fallback = _offline_fallback_reason(error) if auto else None
            # Either way the failed attempt leaves no W&B state behind (measured: the process
            # kept a rejected key and the next init in it failed on that key).
            wandb.teardown()
            if self.wandb_mode != "online" or fallback is None:
                # Deliberate: say which key decides and how to go on, then fail the run.
                chosen = f"logger.mode=auto chose {self.wandb_mode}: {reason}" if auto else reason
                error.add_note(
                    redact_text(
                        f"adarl: W&B could not start ({chosen}). Fix the cause above, or set "
                        "logger.mode=offline (log locally) or logger.mode=disabled (no W&B)"
                    )
                )
                raise
            # The documented fallback: no usable API key, or no network to the W&B server. (The
            # teardown above matters here too: the service held the failed online attempt under
            # this run id, measured "run ID ... is in use"; a fresh one reuses the id offline.)
            self.wandb_mode = "offline"
            self._say(
                f"W&B: offline (logger.mode=auto: {fallback}); sync later with "
                f"`wandb sync {wandb_dir}/offline-run-*`"
            )
            return start("offline")
        where = Path(run.dir).parent
        hint = f"; sync later with `wandb sync {where}`" if self.wandb_mode == "offline" else ""
        self._say(f"W&B: {self.wandb_mode} ({reason}), run in {where}{hint}")
        return run

    def _to_wandb(self, values: Mapping[str, MetricValue]) -> dict[str, Any]:
        import wandb

        out: dict[str, Any] = {}
        for name, value in values.items():
            if isinstance(value, list):
                finite = [v for v in value if v is not None and math.isfinite(v)]
                if finite:  # W&B cannot build a histogram of nothing
                    out[name] = wandb.Histogram(finite)
            else:
                out[name] = value
        return out

    def _console_line(self, step: int, values: Mapping[str, MetricValue]) -> str:
        """`step k/total | name value | ...`: the progress keys this step has (an evaluation's
        among them on the steps that evaluate), or every number when none are configured."""
        total = f"/{self._bar.total}" if self._bar.total else ""
        if self._progress_keys:
            keys = [k for k in self._progress_keys if k in values]
        else:
            keys = list(values)
        shown = " | ".join(
            f"{CONSOLE_LABELS.get(k, k)} {_fmt(values[k])}"
            for k in keys
            if not isinstance(values[k], list)
        )
        return f"step {step}{total}" + (f" | {shown}" if shown else "")

    def _say(self, line: str) -> None:
        line = redact_text(line)
        if self._bar.disable:
            print(line, file=self._console, flush=True)
        else:
            self._bar.write(line, file=self._console)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("MetricsLogger is closed; create a new one to log more")


def build_metrics_logger(
    config: LoggerConfig,
    *,
    run_dir: str | Path,
    run_config: Mapping[str, Any] | None = None,
    resume_from_step: int | None = None,
    total_steps: int | None = None,
) -> MetricsLogger:
    """The logger a run's `LoggerConfig` describes, writing into `run_dir`."""
    config.validate()
    return MetricsLogger(
        run_dir=run_dir,
        mode=config.mode,
        project=config.project,
        entity=config.entity,
        run_name=config.run_name,
        group=config.group,
        tags=config.tags,
        config=run_config,
        resume_from_step=resume_from_step,
        total_steps=total_steps,
        log_every_steps=config.log_every_steps,
        progress_bar=config.progress_bar,
        progress_keys=config.progress_keys,
        network_check_timeout_s=config.network_check_timeout_s,
    )


# --------------------------------------------------------------------------------------------
# reading back what was logged


def read_metrics_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a `metrics.jsonl` (or `completions.jsonl`), in file order."""
    with Path(path).open(encoding="utf-8") as file:
        return [json.loads(line) for line in file if line.strip()]


def read_wandb_offline_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """The history rows W&B recorded for the run in `run_dir` (offline or online: both keep the
    transaction log `RUN_DIR/wandb/*run-*/run-*.wandb`), in step order.

    Each row holds the logged values (decoded JSON: numbers, or dicts for histograms and tables)
    plus W&B's `_step` (= adarl's step), `_timestamp` and `_runtime`. A resumed run leaves one log
    per process; as in `metrics.jsonl`, a later log supersedes the earlier one from its first
    step on.
    """
    logs = sorted(Path(run_dir, WANDB_DIR).glob("*run-*/run-*.wandb"), key=_wandb_log_order)
    if not logs:
        raise FileNotFoundError(
            f"no W&B run log (wandb/*run-*/run-*.wandb) under {run_dir}; was W&B disabled?"
        )
    rows: list[dict[str, Any]] = []
    for log in logs:
        new_rows = [_history_row(record) for record in _read_wandb_records(log) if record]
        new_rows = [row for row in new_rows if row is not None]
        if new_rows:
            first = new_rows[0]["_step"]
            rows = [row for row in rows if row["_step"] < first] + new_rows
    return rows


def _wandb_log_order(log: Path) -> tuple[str, int, str]:
    """Start order of W&B run dirs `{offline-,}run-YYYYMMDD_HHMMSS-ID[-N]` (N: same-second
    restarts), whatever their mode."""
    name = log.parent.name.removeprefix("offline-")
    return name[len("run-") : len("run-YYYYMMDD_HHMMSS")], len(name), name


# The .wandb file is a LevelDB-style log: a 7-byte header (":W&B", magic 0xBEE1, version 0),
# then 32 KiB blocks of chunks, each with a 7-byte header (CRC32 of type byte + payload, length,
# type FULL/FIRST/MIDDLE/LAST); a record is one serialized `wandb_internal_pb2.Record`.
_LOG_HEADER = struct.Struct("<4sHB")
_CHUNK_HEADER = struct.Struct("<IHB")
_BLOCK_BYTES = 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def _read_wandb_records(path: Path) -> list[bytes]:
    data = path.read_bytes()
    if len(data) < _LOG_HEADER.size:
        return []
    ident, magic, version = _LOG_HEADER.unpack_from(data, 0)
    if ident != b":W&B" or magic != 0xBEE1 or version != 0:
        raise ValueError(f"{path} is not a W&B run log (header {ident!r}, {magic:#x}, {version})")
    records: list[bytes] = []
    pending = b""
    position = _LOG_HEADER.size
    while position + _CHUNK_HEADER.size <= len(data):
        room = _BLOCK_BYTES - position % _BLOCK_BYTES
        if room < _CHUNK_HEADER.size:  # block trailer: zero padding
            position += room
            continue
        checksum, length, kind = _CHUNK_HEADER.unpack_from(data, position)
        start = position + _CHUNK_HEADER.size
        if kind == 0 or start + length > len(data):
            break  # zero fill or a record cut off by a crash: the log ends here
        payload = data[start : start + length]
        if zlib.crc32(payload, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF != checksum:
            raise ValueError(f"{path}: corrupt W&B record at byte {position} (checksum mismatch)")
        position = start + length
        if kind == _FULL:
            records.append(payload)
        elif kind == _FIRST:
            pending = payload
        elif kind == _MIDDLE:
            pending += payload
        elif kind == _LAST:
            records.append(pending + payload)
            pending = b""
        else:
            raise ValueError(f"{path}: unknown W&B chunk type {kind} at byte {position}")
    return records


def _history_row(serialized: bytes) -> dict[str, Any] | None:
    from wandb.proto import wandb_internal_pb2

    record = wandb_internal_pb2.Record()
    record.ParseFromString(serialized)
    if record.WhichOneof("record_type") != "history":
        return None
    row: dict[str, Any] = {}
    for item in record.history.item:
        path = [item.key] if item.key else list(item.nested_key)
        node = row
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = json.loads(item.value_json)
    if "_step" not in row:
        row["_step"] = record.history.step.num
    return row


# --------------------------------------------------------------------------------------------
# helpers

_METRIC_NAME = re.compile(r"^[A-Za-z0-9_.\-/@]+$")


def _check_metric_name(name: str) -> None:
    group, _, rest = name.partition("/")
    if group not in METRIC_GROUPS or not rest or not _METRIC_NAME.match(name):
        raise ValueError(
            f"metric {name!r} is not GROUP/NAME with GROUP in {METRIC_GROUPS}; rename it "
            "(e.g. train/loss, timing/rollout_s) where the component's metrics() builds it"
        )


def _plain_value(name: str, value: Any) -> MetricValue:
    """Numbers become float/int/bool, 1-D sequences become a list of floats (a histogram)."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if hasattr(value, "tolist") and getattr(value, "ndim", None) in (0, 1):
        return _plain_value(name, value.tolist())  # numpy / torch scalars and vectors
    if isinstance(value, list | tuple):
        try:
            return [float(v) for v in value]
        except (TypeError, ValueError):
            pass
    raise TypeError(
        f"metric {name!r} has a {type(value).__name__}; log a number or a 1-D sequence of "
        "numbers (a histogram)"
    )


def _json_safe(value: Any) -> Any:
    """Non-finite floats become null: `NaN` is not JSON and breaks strict readers (jq, JS)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def _truncate_jsonl_after_step(path: Path, last_kept_step: int) -> None:
    """Drop lines with step > `last_kept_step` (atomically: tmp file + rename)."""
    if not path.exists():
        return
    kept: list[str] = []
    with path.open(encoding="utf-8") as file:
        for line in file:
            if not line.strip():
                continue
            try:
                step = json.loads(line)["step"]
            except (json.JSONDecodeError, KeyError):
                # A crash can cut the last line short; anything else is not our file.
                if line.endswith("\n"):
                    raise ValueError(
                        f"{path}: line without a valid 'step' ({line[:80]!r}); not an adarl "
                        "metrics file — move it away or choose another run directory"
                    ) from None
                continue
            if step <= last_kept_step:
                kept.append(line if line.endswith("\n") else line + "\n")
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with tmp.open("w", encoding="utf-8") as file:
        file.writelines(kept)
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, path)


def _load_or_create_run_id(wandb_dir: Path, *, resuming: bool) -> str:
    """A resumed run continues the same W&B run (same id); a fresh run gets a new id."""
    id_file = wandb_dir / _WANDB_RUN_ID_FILE
    if resuming and id_file.exists():
        return id_file.read_text(encoding="utf-8").strip()
    alphabet = string.ascii_lowercase + string.digits  # W&B's id alphabet
    run_id = "".join(secrets.choice(alphabet) for _ in range(8))
    id_file.write_text(run_id + "\n", encoding="utf-8")
    return run_id


def _fmt(value: MetricValue) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
