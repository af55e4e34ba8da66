"""`python -m adarl.bench soak`: run the embedded default for many steps and watch every process's
memory.

Runs `+experiment=ada_seq_balance` (the components `make run` runs: local Ray, vLLM CPU engine
actor, DeepSpeed learner actor, allocator actor) for `--steps` steps with this process as the
driver, and after every step records the resident set size (RSS, from /proc) of the driver and
of every process the run started: the Ray actors (`ray::VLLMEngine`, `ray::Learner`,
`ray::BudgetAllocator`), Ray's own processes (GCS, raylet, agents) and idle workers. They are
found by the reaper token every process of the run inherits (adarl/reaper.py).

Flat memory means: for each process alive from step `--from-step` to the end, the growth of its
RSS from step `--from-step` to the last step (each the mean over `--window` steps around it, to
smooth allocator noise) is under `--max-growth` (5%). The first steps are excluded: engines
allocate their KV cache and warm up there. Writes every sample to `--json` and prints a
markdown table (the soak section of docs/operations.md). Exit status 1 if a process grew more.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def process_title(pid: int) -> str:
    """What a process calls itself: Ray titles actors `ray::ClassName`; else its program name."""
    raw = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    first = raw[0].decode(errors="replace").strip()
    if first.startswith("ray::"):
        return first.split()[0]
    names = [Path(part.decode(errors="replace")).name for part in raw if part]
    for name in names[1:3]:  # `python -u .../log_monitor.py ...`: the script, not python
        if name.endswith(".py"):
            return name.removesuffix(".py")
    return names[0] if names else "?"


def rss_bytes(pid: int) -> int:
    fields = Path(f"/proc/{pid}/statm").read_text().split()
    return int(fields[1]) * PAGE_BYTES


def snapshot(token: str) -> dict[str, int]:
    """`title:pid` -> RSS bytes of this process and of every process marked with `token`."""
    from adarl.reaper import marked_processes

    out = {}
    for pid in [os.getpid(), *marked_processes(token)]:
        try:
            title = "driver" if pid == os.getpid() else process_title(pid)
            out[f"{title}:{pid}"] = rss_bytes(pid)
        except (OSError, ValueError):
            continue  # exited meanwhile
    return out


def growth(
    samples: Sequence[dict[str, Any]], *, from_step: int, window: int
) -> list[dict[str, Any]]:
    """Per process alive over the whole range: mean RSS around `from_step` and over the last
    `window` steps, and the relative growth between them."""
    by_step = {int(s["step"]): s["rss"] for s in samples}
    last = max(by_step)
    early = [by_step[s] for s in range(from_step - window // 2, from_step + window // 2 + 1)
             if s in by_step]  # fmt: skip
    late = [by_step[s] for s in range(last - window + 1, last + 1) if s in by_step]
    rows = []
    for name in sorted(set(by_step[from_step]) & set(by_step[last])):
        start = statistics.fmean(s[name] for s in early if name in s)
        end = statistics.fmean(s[name] for s in late if name in s)
        peak = max(s[name] for s in by_step.values() if name in s)
        rows.append(
            {
                "process": name,
                "rss_start_mib": start / 2**20,
                "rss_end_mib": end / 2**20,
                "rss_peak_mib": peak / 2**20,
                "growth": (end - start) / start,
            }
        )
    return rows


def markdown(rows: Sequence[dict[str, Any]], *, from_step: int, last: int) -> str:
    lines = [
        f"| process | RSS at step {from_step} (MiB) | RSS at step {last} (MiB) | peak (MiB) "
        f"| growth {from_step} → {last} |",
        "|---|---|---|---|---|",
    ]
    for row in sorted(rows, key=lambda r: -r["rss_end_mib"]):
        lines.append(
            f"| `{row['process'].rsplit(':', 1)[0]}` | {row['rss_start_mib']:.0f} | "
            f"{row['rss_end_mib']:.0f} | {row['rss_peak_mib']:.0f} | {100 * row['growth']:+.1f}% |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m adarl.bench soak", description=__doc__)
    parser.add_argument("--steps", type=int, default=200, help="training steps (default 200)")
    parser.add_argument("--from-step", type=int, default=50, help="growth measured from here")
    parser.add_argument("--window", type=int, default=10, help="steps averaged at each end")
    parser.add_argument("--max-growth", type=float, default=0.05, help="allowed growth (0.05)")
    parser.add_argument("--run-dir", type=Path, default=None, help="default: a temp directory")
    parser.add_argument("--json", type=Path, default=None, help="write every sample here")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides after the experiment's")
    args = parser.parse_args(argv)
    if not 0 < args.from_step < args.steps:
        parser.error(f"--from-step={args.from_step} must be in (0, --steps={args.steps})")

    from hydra import compose, initialize_config_dir

    from adarl.launch import CONFIG_DIR, load_config
    from adarl.reaper import REAPER_TOKEN_ENV
    from adarl.session import TrainingSession

    overrides = ["+experiment=ada_seq_balance", f"trainer.total_steps={args.steps}"]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        config = load_config(compose(config_name="config", overrides=overrides + args.overrides))
    if config.cluster.in_process or config.cluster.address:
        parser.error("soak measures the actors of a local Ray cluster: keep cluster=local")
    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix="adarl-soak-"))
    samples: list[dict[str, Any]] = []
    started = time.perf_counter()

    def sample(step: int) -> None:
        samples.append(
            {
                "step": step,
                "wall_s": time.perf_counter() - started,
                "rss": snapshot(os.environ[REAPER_TOKEN_ENV]),
            }
        )
        if step % 25 == 0:
            total = sum(samples[-1]["rss"].values()) / 2**30
            print(f"soak: step {step}: {total:.2f} GiB in {len(samples[-1]['rss'])} processes")

    with TrainingSession(
        config, run_dir=run_dir, on_step_end=lambda outcome: sample(outcome.step)
    ) as session:
        sample(0)
        session.train()
    rows = growth(samples, from_step=args.from_step, window=args.window)
    last = max(s["step"] for s in samples)
    table = markdown(rows, from_step=args.from_step, last=last)
    print(table)
    worst = max(rows, key=lambda r: r["growth"])
    print(
        f"\nsoak: {last} steps in {samples[-1]['wall_s']:.0f} s; largest growth "
        f"{100 * worst['growth']:+.1f}% ({worst['process']}); limit {100 * args.max_growth:.0f}%"
    )
    if args.json is not None:
        args.json.write_text(json.dumps({"samples": samples, "growth": rows}, indent=1) + "\n")
    return 0 if worst["growth"] < args.max_growth else 1


if __name__ == "__main__":
    sys.exit(main())
