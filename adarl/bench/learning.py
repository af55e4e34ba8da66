"""`python -m adarl.bench learning`: learning per rollout, per token and per second, over seeds.

Every arm (an experiment plus overrides, `ARMS`) trains from the same base model to the same
budget of training rollouts (`trainer.max_rollouts`) on each of several root seeds; a seed changes
prompt order, sampling and learner randomness, not the base model or the held-out prompts. Each
run is a subprocess of the real launch command (`python -m adarl.launch +experiment=...`: Ray,
vLLM, DeepSpeed), one at a time, in `RESULTS/<arm>/seed<k>`; its output goes to
`bench_console.log` there (the launcher's own transcript is `console.log`, Hydra's log records
`launch.log`). A tqdm bar counts the comparison's rollouts, read from the runs' `metrics.jsonl`
as they grow.

Resumable: a run with `summary.json` is done and skipped; a run with a checkpoint continues from
it (`checkpoint.resume=auto`); a run that died before its first checkpoint starts over (its files
are moved to `seed<k>.incomplete/`). Each run dir records the overrides it was started with
(`bench_run.json`) and a later invocation with other settings refuses it rather than mixing
budgets.

The report (PNG plots under docs/figures/, the `## Learning` section of docs/benchmarks.md,
built by adarl/bench/learning_report.py, which states its definitions) is drawn from a small JSON
of per-run data (docs/data/learning.json), so `--report-only` regenerates it without training.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path

from adarl.bench.learning_records import GRPO_EXPERIMENTS, ReportData, load_run
from adarl.bench.learning_report import headline_table, write_report

# Paths relative to the checkout the command runs from (the outputs are committed there).
DOCS_PATH = Path("docs") / "benchmarks.md"
DATA_PATH = Path("docs") / "data" / "learning.json"
FIGURES_DIR = Path("docs") / "figures"
RUN_RECORD_FILE = "bench_run.json"
CONSOLE_LOG = "bench_console.log"  # the launch command's stdout and stderr, from its start

# -- what is compared ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Arm:
    """One method in the comparison: `+experiment=<experiment> <overrides...>`."""

    label: str
    experiment: str
    overrides: tuple[str, ...] = ()


# The update issue 38's screen chose for GRPO n = 4 (docs/learning_update_side.md): 4
# mini-batches per step, the KL anchor to the base at 0.1, half the default learning rate.
UPDATE_M4_KL = (
    "learner.mini_batches_per_step=4",
    "learner.loss.kl_coef=0.1",
    "learner.learning_rate=0.00015",
)

# Later issues add their method with one line here. Only published methods and the members of
# the settings below stay: a closed study's candidates leave once it is decided, and its numbers,
# with the command that ran them at the commit that had them, stay in docs/benchmarks.md (e.g.
# "Coverage: choosing the default").
ARMS: tuple[Arm, ...] = (
    Arm("grpo_n2", "grpo", ("allocator.uniform_samples_per_prompt=2",)),
    Arm("grpo_n4", "grpo", ("allocator.uniform_samples_per_prompt=4",)),
    Arm("grpo_n8", "grpo", ("allocator.uniform_samples_per_prompt=8",)),
    Arm("grpo_n16", "grpo", ("allocator.uniform_samples_per_prompt=16",)),
    Arm("dapo", "dapo"),
    Arm("ada_seq_pos", "ada_seq_pos"),
    Arm("ada_seq_balance", "ada_seq_balance"),
    # The make run default of issues 30-37: GRPO n = 8's draw, one-sided prompts sampled on until
    # they hold both labels (cap 16), whole pools under logit p.
    Arm("ada_coverage", "ada_coverage"),
    # Issue 38's finalists (docs/learning_update_side.md): the make run default since issue 38,
    # GRPO-best of GRPO n = 4, 8, 16 × M ∈ {1, 4} × KL ∈ {0, 0.1} × lr ∈ {1.5e-4, 3e-4} at 40k on
    # seed 0, and ada_coverage's sampler at GRPO n = 4's first draw with the same update.
    Arm("grpo_anchored", "grpo_anchored"),  # = grpo n = 4 with UPDATE_M4_KL
    Arm(
        "ada_coverage_i4_m4_kl",
        "ada_coverage",
        (
            "allocator.sequential.initial_samples=4",
            "allocator.max_samples_per_prompt=8",
            *UPDATE_M4_KL,
        ),
    ),
    # The same sampler trained on whole pools (nothing drawn is discarded; issue 10).
    Arm("ada_seq_balance_whole_pool", "ada_seq_balance", ("allocator.group.group_size=null",)),
    Arm("reinforce_ada_reference", "reinforce_ada_reference"),
    Arm("rloo", "rloo"),
    Arm("ada_est", "ada_est"),
    Arm("gvm_grpo", "gvm_grpo"),
    Arm("gvm_raft", "gvm_raft"),
    Arm("dro", "dro"),
    Arm("sage", "sage"),
    Arm("sage_light", "sage_light"),
    Arm("ada_seq_balance_sage", "ada_seq_balance_sage"),
    # SAGE with its capped hint budget spent at level 3 first (issue 21: on the worked policy only
    # ℓ3 lifts, and escalating from ℓ1 used the whole budget at ℓ1).
    Arm("sage_l3", "sage", ("hints.first_level=3",)),
    # SAGE with its hints written ahead of need, while the step before trains (issue 20).
    Arm("sage_ahead", "sage", ("hints.write_ahead=true",)),
    Arm("sage_l3_ahead", "sage", ("hints.first_level=3", "hints.write_ahead=true")),
    # Coverage objectives (issue 30) at GRPO n = 8's compute: F-GRPO, Pass@k Training, PKPO, HORA.
    Arm("f_grpo", "f_grpo"),
    Arm("passk_grpo", "passk_grpo"),
    Arm("pkpo", "pkpo"),
    Arm("hora_grpo", "hora_grpo"),
    # History before rollout under GRPO's budget (issue 19): the published anchors and adarl's.
    Arm("greso", "greso"),
    Arm("knapsack_grpo", "knapsack_grpo"),
    Arm("ada_curated", "ada_curated"),
    # Sampling ahead while the learners train (issue 20), k = 1 and 2 versions of lag at most,
    # with decoupled PPO's correction (the ratio against the learner, TIS capped at 2).
    *(
        Arm(
            f"{label}_k{lag}",
            experiment,
            (
                *overrides,
                f"rollout.max_off_policy_steps={lag}",
                "learner.loss.ratio_reference=learner",
                "learner.loss.tis_cap=2",
            ),
        )
        for label, experiment, overrides in (
            ("ada_seq_balance", "ada_seq_balance", ()),
            ("grpo_n4", "grpo", ("allocator.uniform_samples_per_prompt=4",)),
        )
        for lag in (1, 2)
    ),
    # The same with the steps' phases streamed into each other (cross-step allocation): step
    # t+1 samples while step t's tail does and while t trains, not only after t's phase ends.
    *(
        Arm(
            f"{label}_k{lag}x",
            experiment,
            (
                *overrides,
                f"rollout.max_off_policy_steps={lag}",
                "rollout.cross_step_allocation=true",
                "learner.loss.ratio_reference=learner",
                "learner.loss.tis_cap=2",
            ),
        )
        for label, experiment, overrides in (
            ("ada_seq_balance", "ada_seq_balance", ()),
            ("grpo_n4", "grpo", ("allocator.uniform_samples_per_prompt=4",)),
        )
        for lag in (1, 2)
    ),
)


# The seeds' objective on the anchored update (issue 43, docs/learning_log_family.md): the log-p
# family, each estimator on UPDATE_M4_KL's update with its learning rate and KL coefficient
# retuned, at n = 4 (64 prompts per step) and n = 8 at half the prompts (the same rollouts and
# optimizer steps per step). Selection-corrected log p under uniform draws is not a separate
# arm: on a uniform pool its advantages are MaxRL's, (n - K)/K and -1 (tests/unit/algo/
# test_log_family.py).
# Each family's experiment, and the overrides that make it the estimator (Ada-Est's advantage
# under uniform draws has no experiment of its own: maxrl_anchored's with the advantage swapped).
LOG_ESTIMATORS: dict[str, tuple[str, tuple[str, ...]]] = {
    "maxrl": ("maxrl_anchored", ()),
    "raft_pos": ("raft_log", ()),
    "ada_est_u": ("maxrl_anchored", ("allocator.group.advantage=ada_est",)),
}
# (n, learning rate, KL coefficient) of the screen: the lr at the anchor's 0.1, the anchor at
# the default's lr, and n = 8 at two learning rates.
LOG_SCREEN_UPDATES: tuple[tuple[int, float, float], ...] = (
    (4, 7.5e-5, 0.1),
    (4, 1.5e-4, 0.1),
    (4, 3e-4, 0.1),
    (4, 1.5e-4, 0.03),
    (4, 1.5e-4, 0.3),
    (8, 1.5e-4, 0.1),
    (8, 3e-4, 0.1),
)


def log_arm_label(estimator: str, n: int, lr: float, kl: float) -> str:
    return f"{estimator}_n{n}_lr{lr:g}_kl{kl:g}"


def _anchored_update(n: int, lr: float, kl: float) -> tuple[str, ...]:
    return (
        f"allocator.uniform_samples_per_prompt={n}",
        f"allocator.prompts_per_step={256 // n}",
        "learner.mini_batches_per_step=4",
        f"learner.loss.kl_coef={kl:g}",
        f"learner.learning_rate={lr:g}",
    )


LOG_SCREEN_ARMS: tuple[Arm, ...] = (
    *(
        Arm(
            log_arm_label(name, n, lr, kl),
            experiment,
            (*overrides, *_anchored_update(n, lr, kl)),
        )
        for name, (experiment, overrides) in LOG_ESTIMATORS.items()
        for n, lr, kl in LOG_SCREEN_UPDATES
    ),
    # GRPO itself at n = 8 on the same update (half the prompts): GRPO-best's other candidate.
    Arm("grpo_anchored_n8", "grpo_anchored", _anchored_update(8, 1.5e-4, 0.1)),
)
ARMS = (*ARMS, *LOG_SCREEN_ARMS)


def arm_by_label(label: str) -> Arm:
    for arm in ARMS:
        if arm.label == label:
            return arm
    raise ValueError(
        f"unknown arm {label!r}; known arms: {', '.join(a.label for a in ARMS)} "
        "(add one to ARMS in adarl/bench/learning.py)"
    )


@dataclass(frozen=True)
class Setting:
    """How much every arm runs. `why` is printed into the docs section."""

    name: str
    arms: tuple[str, ...]
    seeds: int
    max_rollouts: int
    eval_every_rollouts: int
    eval_num_prompts: int
    eval_samples_per_prompt: int
    checkpoint_every_steps: int
    why: str
    # Samples per held-out prompt of the base (step 0) and the final evaluation, drawn with the
    # same seeds: the pass@k curve at the end (k = 1 ... this) against the base model's.
    final_eval_samples_per_prompt: int = 64
    # Hydra overrides appended to every arm's command, e.g. another task mix (`--override`).
    overrides: tuple[str, ...] = ()
    # Every arm's learning-rate warm-up in optimizer steps. 0 where arms take different numbers
    # of steps per rollout (a step-counted warm-up favours the arms taking more); None keeps each
    # experiment's own (for arms that compare one method with itself at equal steps).
    lr_warmup_steps: int | None = 0

    def validate(self) -> None:
        for label in self.arms:
            arm_by_label(label)
        if not any(arm_by_label(label).experiment in GRPO_EXPERIMENTS for label in self.arms):
            raise ValueError(
                f"setting {self.name!r}: arms {list(self.arms)} include no GRPO arm; the "
                "headline table needs one (add e.g. grpo_n4 with --arms)"
            )
        for key in ("seeds", "max_rollouts", "eval_every_rollouts", "eval_num_prompts"):
            if getattr(self, key) < 1:
                raise ValueError(f"--{key.replace('_', '-')}={getattr(self, key)} must be >= 1")
        if (
            self.eval_samples_per_prompt < 1
            or self.checkpoint_every_steps < 1
            or self.final_eval_samples_per_prompt < 1
        ):
            raise ValueError(
                "--eval-samples-per-prompt, --final-eval-samples-per-prompt and "
                "--checkpoint-every-steps must be >= 1"
            )


REDUCED = Setting(
    name="reduced",
    arms=(
        "grpo_n4",
        "grpo_n8",
        "grpo_n16",
        "greso",
        "knapsack_grpo",
        "ada_est",
        "ada_seq_balance",
        "ada_curated",
        "f_grpo",
        "passk_grpo",
        "pkpo",
        "hora_grpo",
        "ada_coverage",
        "grpo_anchored",
        "ada_coverage_i4_m4_kl",
    ),
    seeds=3,
    max_rollouts=40_000,
    eval_every_rollouts=5_000,
    eval_num_prompts=256,
    eval_samples_per_prompt=8,
    checkpoint_every_steps=25,
    why=(
        "Why this reduced setting: 15 arms × 3 seeds on a 2-core machine. A run pays about 60 s "
        "before its first step (process and Ray start, vLLM engine, DeepSpeed learner, the base "
        "evaluation of 256 prompts × 64 samples), then trains its 40k rollouts in one to three "
        "minutes. The arms (issue 30): GRPO at n = 4, 8 and 16 (GRPO-best is the best of them by "
        "pass@1), the published curation anchors (GRESO's skip and Knapsack-RL's split, under "
        "GRPO n = 4's budget) and adarl's history-aware allocation (ada_curated), Ada-Est, the "
        "Seq-Balance default of the rounds before (ada_seq_balance, log p), the published "
        "coverage anchors at GRPO n = 8's compute (F-GRPO, Pass@k Training, PKPO, HORA's "
        "allocation), adarl's coverage default of issues 30-37 (ada_coverage) and issue 38's "
        "finalists (grpo_anchored, make run's default, and ada_coverage_i4_m4_kl). No arm has a "
        "learning-rate warm-up (`learner.lr_warmup_steps=0` for all): a warm-up counted in steps "
        "favours the arms that take more steps per rollout. An evaluation every 5k rollouts on "
        "the standard held-out set (256 prompts × 8 samples at T = 1: pass@1 and pass@8) gives "
        "9 points per curve; the base (step 0) and final evaluations draw 64 samples per prompt "
        "with the same seeds (pass@k up to 64, base → final paired)."
    ),
)
MAKE_RUN = Setting(
    name="make_run",
    arms=(
        "grpo_anchored",
        "ada_coverage_i4_m4_kl",
        "ada_coverage",
        "grpo_n8",
        "grpo_n16",
        "hora_grpo",
        "grpo_n4",
        "knapsack_grpo",
    ),
    seeds=3,
    max_rollouts=180_000,
    eval_every_rollouts=22_500,
    eval_num_prompts=256,
    eval_samples_per_prompt=8,
    checkpoint_every_steps=50,
    why=(
        "The make_run setting runs at `make run`'s budget, 180k training rollouts (the default "
        "stops there): the default (grpo_anchored, issue 38) and its adaptive-sampling finalist "
        "(ada_coverage_i4_m4_kl), the default of issues 30-37 (ada_coverage), GRPO n = 4, 8 "
        "and 16 and the best coverage and curation anchors of the reduced setting by final "
        "pass@1: HORA's allocation (22.7% at 40k, F-GRPO 22.6%) and Knapsack-RL (21.7%; GRESO's "
        "21.9% is a tie by the spread, and its skip probing takes 4x GRPO's rollout time here), "
        "with an evaluation every 22.5k rollouts: 5-16 minutes per run here."
    ),
)
LOG_SCREEN = Setting(
    name="log_screen",
    arms=("grpo_anchored", "grpo_anchored_n8", *(arm.label for arm in LOG_SCREEN_ARMS[:-1])),
    seeds=1,
    max_rollouts=40_000,
    eval_every_rollouts=5_000,
    eval_num_prompts=256,
    eval_samples_per_prompt=8,
    checkpoint_every_steps=50,
    why=(
        "The log_screen setting (issue 43): the log-p family (MaxRL, RAFT with positives "
        "normalisation, Ada-Est's (r - r̄)/√r̄ under uniform draws) on make run's anchored update "
        "(4 mini-batches per step), each at three learning rates with the KL anchor at 0.1, two "
        "other anchors (0.03, 0.3) at 1.5e-4, and n = 8 at half the prompts per step at two "
        "learning rates; against grpo_anchored and GRPO n = 8 on the same update. 40k training "
        "rollouts on seed 0, as issue 38's screen: 2-3 minutes per run here."
    ),
)
# The screen's best RAFT-positives and best MaxRL arm (docs/learning_log_family.md), confirmed
# against grpo_anchored at make run's budget.
LOG_FINALISTS = ("raft_pos_n4_lr0.00015_kl0.1", "maxrl_n4_lr7.5e-05_kl0.1")
LOG_FINALS = Setting(
    name="log_finals",
    arms=("grpo_anchored", *LOG_FINALISTS),
    seeds=3,
    max_rollouts=180_000,
    eval_every_rollouts=22_500,
    eval_num_prompts=256,
    eval_samples_per_prompt=8,
    checkpoint_every_steps=50,
    why=(
        "The log_finals setting (issue 43): the log_screen's best arm of RAFT-positives and of "
        "MaxRL against grpo_anchored at make run's 180k training rollouts, 3 seeds, an "
        "evaluation every 22.5k rollouts (64 samples per prompt at the start and the end)."
    ),
)
SETTINGS = {s.name: s for s in (REDUCED, MAKE_RUN, LOG_SCREEN, LOG_FINALS)}
# Where each setting's report goes by default: (docs file, per-run JSON, figures directory).
OUTPUTS = {
    LOG_FINALS.name: (
        Path("docs") / "learning_log_finals.md",
        Path("docs") / "data" / "learning_log_finals.json",
        FIGURES_DIR / "log_finals",
    ),
    LOG_SCREEN.name: (
        Path("docs") / "learning_log_screen.md",
        Path("docs") / "data" / "learning_log_screen.json",
        FIGURES_DIR / "log_screen",
    ),
    REDUCED.name: (DOCS_PATH, DATA_PATH, FIGURES_DIR),
    MAKE_RUN.name: (
        Path("docs") / "learning_make_run.md",
        Path("docs") / "data" / "learning_make_run.json",
        FIGURES_DIR / "make_run",
    ),
}


def run_overrides(arm: Arm, seed: int, setting: Setting, run_dir: Path) -> list[str]:
    """The launch command's Hydra arguments for one run (what `bench_run.json` records)."""
    return [
        f"+experiment={arm.experiment}",
        *arm.overrides,
        *setting.overrides,
        f"seed={seed}",
        f"trainer.max_rollouts={setting.max_rollouts}",
        # Rollouts are the budget every arm shares; an experiment's own token budget
        # (ada_coverage's, for `make run` on long prompts) would end its arm early.
        "trainer.max_sequence_tokens=null",
        # Every step draws at least one rollout, so the budget ends the run before this does.
        f"trainer.total_steps={setting.max_rollouts}",
        # Every arm spends the whole budget: an arm that finds no signal at first is compared
        # at equal rollouts like the others, not stopped early (trainer.min_mixed_group_fraction,
        # trainer.stop_below_prior).
        "trainer.min_mixed_group_fraction=0",
        "trainer.stop_below_prior=false",
        # No warm-up by default: 20 steps is 13% of GRPO n = 4's 40k rollouts but 43% of
        # Seq-Balance's, a schedule that favours the arms taking more steps (Setting).
        *(
            []
            if setting.lr_warmup_steps is None
            else [f"learner.lr_warmup_steps={setting.lr_warmup_steps}"]
        ),
        "eval.every_steps=0",
        f"eval.every_rollouts={setting.eval_every_rollouts}",
        f"eval.num_prompts={setting.eval_num_prompts}",
        f"eval.samples_per_prompt={setting.eval_samples_per_prompt}",
        f"eval.final_samples_per_prompt={setting.final_eval_samples_per_prompt}",
        "checkpoint.resume=auto",
        f"checkpoint.every_steps={setting.checkpoint_every_steps}",
        "checkpoint.keep_last=1",
        # The bench draws its own bar; W&B would cost CPU the runs share.
        "logger.mode=disabled",
        "logger.progress_bar=false",
        "logger.log_every_steps=25",
        f"name={arm.label}",
        f"hydra.run.dir={run_dir.resolve()}",
    ]


def launch_command(overrides: Sequence[str], *, python: str = sys.executable) -> list[str]:
    return [python, "-m", "adarl.launch", *overrides]


def launch_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child's environment: one thread per process and in-process vLLM, as `make run` sets."""
    env = dict(os.environ if base is None else base)
    for name, value in (
        ("OMP_NUM_THREADS", "1"),
        ("MKL_NUM_THREADS", "1"),
        ("TOKENIZERS_PARALLELISM", "false"),
        ("VLLM_ENABLE_V1_MULTIPROCESSING", "0"),
        ("WANDB_MODE", "offline"),
        ("RAY_AUTH_MODE", "disabled"),
    ):
        env.setdefault(name, value)
    return env


# -- resumability -------------------------------------------------------------------------------


class RunState(Enum):
    DONE = "done"  # summary.json exists: skip
    RESUME = "resume"  # a checkpoint exists: continue from it
    RESTART = "restart"  # files of an attempt that died before its first checkpoint: move aside
    START = "start"  # nothing there yet


def run_state(run_dir: Path) -> RunState:
    """What the harness does with `run_dir` (pure: reads files, changes nothing)."""
    from adarl.checkpoint import CHECKPOINTS_DIR, find_latest_checkpoint

    if (run_dir / "summary.json").exists():
        return RunState.DONE
    if find_latest_checkpoint(run_dir / CHECKPOINTS_DIR) is not None:
        return RunState.RESUME
    metrics = run_dir / "metrics.jsonl"
    if metrics.exists() and metrics.stat().st_size > 0:
        return RunState.RESTART
    return RunState.START


def check_recorded_overrides(run_dir: Path, overrides: Sequence[str]) -> None:
    """Refuse a run dir started with other settings: continuing it would mix two budgets."""
    path = run_dir / RUN_RECORD_FILE
    if not path.exists():
        return
    recorded = json.loads(path.read_text())["overrides"]
    if list(recorded) != list(overrides):
        changed = sorted(set(recorded) ^ set(overrides))
        raise ValueError(
            f"{run_dir} was started with other settings (differences: {changed}); rerun with "
            "the settings it was started with, choose another --results-dir, or delete "
            f"{run_dir} to start it over"
        )


def prepare_run_dir(run_dir: Path, overrides: Sequence[str]) -> RunState:
    """Check `run_dir` against `overrides`, move a dead first attempt aside, record overrides."""
    check_recorded_overrides(run_dir, overrides)
    state = run_state(run_dir)
    if state is RunState.RESTART:
        # The launcher refuses a dir with metrics but no checkpoint; keep the attempt to read.
        aside = run_dir.with_name(run_dir.name + ".incomplete")
        if aside.exists():
            shutil.rmtree(aside)
        run_dir.rename(aside)
    if state is not RunState.DONE:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / RUN_RECORD_FILE).write_text(
            json.dumps({"overrides": list(overrides)}, indent=2) + "\n"
        )
    return state


def last_logged(metrics_path: Path, key: str, *, tail_bytes: int = 1 << 18) -> float | None:
    """The last value of `key` in a `metrics.jsonl` that may be being written.

    Reads only the file's tail; a line cut short by a writer (or by the seek) fails to parse and
    is skipped. None when no complete line in the tail has the key.
    """
    if not metrics_path.exists():
        return None
    with metrics_path.open("rb") as file:
        file.seek(0, os.SEEK_END)
        file.seek(max(0, file.tell() - tail_bytes))
        chunk = file.read()
    for line in reversed(chunk.split(b"\n")):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and key in row:
            return float(row[key])
    return None


# -- running ------------------------------------------------------------------------------------


def run_subprocess(
    command: Sequence[str],
    *,
    log_path: Path,
    env: Mapping[str, str],
    on_poll: Callable[[], None],
    poll_s: float = 2.0,
) -> int:
    """Run `command` with its output appended to `log_path`, calling `on_poll` every `poll_s`.

    The child runs in its own session, so a Ctrl-C in the terminal reaches only this process;
    on Ctrl-C, SIGTERM or SIGHUP this process stops the child (`_stop`), waits for it, and
    re-raises: no run is left orphaned to compete for the cores with the next invocation.
    """
    with log_path.open("a", encoding="utf-8") as log, _signals_raise():
        log.write(f"\n$ {shlex.join(command)}\n")
        log.flush()
        process = subprocess.Popen(
            list(command),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env),
            start_new_session=True,
            # A harness started in the background (`&`, nohup) ignores SIGINT and a child would
            # inherit that: the launcher could then not be interrupted cleanly.
            preexec_fn=_default_sigint,
        )
        try:
            while True:
                try:
                    return process.wait(timeout=poll_s)
                except subprocess.TimeoutExpired:
                    on_poll()
        except BaseException:
            _stop(process)
            raise


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGTERM / SIGHUP raise SystemExit (default: die at once, leaving the child behind)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stop(process: subprocess.Popen[bytes], *, grace_s: float = 30.0) -> None:
    """SIGINT (the launcher closes its session: engines, learners, Ray), then SIGTERM to the
    process group (Ray's daemons run in it; actors die with them), then SIGKILL."""
    for sig, wait_s in (
        (signal.SIGINT, grace_s),
        (signal.SIGTERM, grace_s),
        (signal.SIGKILL, None),
    ):
        if process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue


def run_comparison(
    setting: Setting,
    *,
    results_dir: Path,
    python: str = sys.executable,
    show_progress: bool = True,
) -> list[tuple[Arm, int, Path]]:
    """Run every (arm, seed) of `setting` that is not done, one at a time; returns the plan."""
    from tqdm import tqdm

    setting.validate()
    plan = [
        (arm_by_label(label), seed, results_dir / label / f"seed{seed}")
        for label in setting.arms
        for seed in range(setting.seeds)
    ]
    budget = setting.max_rollouts
    env = launch_env()
    with tqdm(
        total=len(plan) * budget,
        unit="rollout",
        unit_scale=True,
        desc=f"learning ({setting.name})",
        disable=not show_progress,
        dynamic_ncols=True,
    ) as bar:
        for index, (arm, seed, run_dir) in enumerate(plan):
            overrides = run_overrides(arm, seed, setting, run_dir)
            state = prepare_run_dir(run_dir, overrides)
            done_before = index * budget
            if state is not RunState.DONE:
                bar.set_postfix_str(f"{arm.label} seed {seed}: {state.value}")

                def poll(run_dir: Path = run_dir, done_before: int = done_before) -> None:
                    rollouts = last_logged(run_dir / "metrics.jsonl", "perf/rollouts_total")
                    bar.update(done_before + min(int(rollouts or 0), budget) - bar.n)

                code = run_subprocess(
                    launch_command(overrides, python=python),
                    log_path=run_dir / CONSOLE_LOG,
                    env=env,
                    on_poll=poll,
                )
                if code != 0 or not (run_dir / "summary.json").exists():
                    raise RuntimeError(
                        f"run {arm.label} seed {seed} failed (exit code {code}); its output is "
                        f"in {run_dir / CONSOLE_LOG}. Fix the cause and rerun the same command: "
                        "finished runs are skipped and this one resumes from its checkpoint"
                    )
            bar.update((index + 1) * budget - bar.n)
    return plan


# -- command line -------------------------------------------------------------------------------


def setting_from_args(args: argparse.Namespace) -> Setting:
    base = SETTINGS[args.setting]
    changes = {
        key: value
        for key, value in (
            ("arms", tuple(args.arms) if args.arms else None),
            ("seeds", args.seeds),
            ("max_rollouts", args.max_rollouts),
            ("eval_every_rollouts", args.eval_every_rollouts),
            ("eval_num_prompts", args.eval_num_prompts),
            ("overrides", tuple(args.override) if args.override else None),
        )
        if value is not None
    }
    if not changes:
        return base
    why = (
        f"The {base.name} setting, customised by the options of the command above; its own "
        f"rationale, for the runs it was sized for: {base.why}"
    )
    setting = Setting(**{**asdict(base), **changes, "name": f"{base.name}, customised", "why": why})
    setting.validate()
    return setting


def command_line(args: argparse.Namespace) -> str:
    parts = ["python -m adarl.bench learning"]
    if args.setting != REDUCED.name:
        parts.append(f"--setting {args.setting}")
    for flag, value in (
        ("--arms", " ".join(args.arms) if args.arms else None),
        ("--seeds", args.seeds),
        ("--max-rollouts", args.max_rollouts),
        ("--eval-every-rollouts", args.eval_every_rollouts),
        ("--eval-num-prompts", args.eval_num_prompts),
    ):
        if value is not None:
            parts.append(f"{flag} {value}")
    parts.extend(f"--override {shlex.quote(override)}" for override in args.override or ())
    return " ".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m adarl.bench learning", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--setting",
        choices=sorted(SETTINGS),
        default=REDUCED.name,
        help="reduced: issue 30's arms at 40k rollouts; make_run: the default against the "
        "baselines at make run's 180k",
    )
    parser.add_argument("--arms", nargs="+", default=None, help="arm labels (see ARMS)")
    parser.add_argument("--seeds", type=int, default=None, help="root seeds 0..N-1")
    parser.add_argument("--max-rollouts", type=int, default=None, help="rollout budget per run")
    parser.add_argument("--eval-every-rollouts", type=int, default=None)
    parser.add_argument("--eval-num-prompts", type=int, default=None)
    parser.add_argument(
        "--override",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="a Hydra override added to every arm (repeatable), e.g. another task mix: "
        "task.arithmetic.levels=[...]",
    )
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=None,
        help="where the runs live (default: runs/bench_learning/<setting>)",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="redraw the plots and the docs section from --data without training",
    )
    parser.add_argument("--data", type=Path, default=None, help="the per-run JSON")
    parser.add_argument("--docs", type=Path, default=None, help="the file to write into")
    parser.add_argument("--figures-dir", type=Path, default=None)
    parser.add_argument(
        "--dry-run", action="store_true", help="print each run's state and command, run nothing"
    )
    args = parser.parse_args(argv)
    docs, data_path, figures = OUTPUTS[args.setting]
    args.docs = args.docs or docs
    args.data = args.data or data_path
    args.figures_dir = args.figures_dir or figures

    if args.report_only:
        data = ReportData.load(args.data)
        write_report(
            data, docs_path=args.docs, figures_dir=args.figures_dir, data_path=args.data, save=False
        )
        print(f"wrote the Learning section of {args.docs} from {args.data}")
        return 0

    try:
        setting = setting_from_args(args)
        setting.validate()
    except ValueError as error:
        parser.error(str(error))  # exits 2 with the message, no traceback
    results_dir = args.results_dir or Path("runs") / "bench_learning" / setting.name.split(",")[0]
    if args.dry_run:
        for label in setting.arms:
            for seed in range(setting.seeds):
                run_dir = results_dir / label / f"seed{seed}"
                overrides = run_overrides(arm_by_label(label), seed, setting, run_dir)
                print(f"[{run_state(run_dir).value}] {shlex.join(launch_command(overrides))}")
        return 0
    plan = run_comparison(setting, results_dir=results_dir)
    data = ReportData(
        setting=asdict(setting),
        command=command_line(args),
        runs=[
            load_run(run_dir, arm=arm.label, experiment=arm.experiment, seed=seed)
            for arm, seed, run_dir in plan
        ],
    )
    write_report(
        data, docs_path=args.docs, figures_dir=args.figures_dir, data_path=args.data, save=True
    )
    print(headline_table(data.runs)[0])
    print(f"wrote {args.data}, the figures in {args.figures_dir} and the section in {args.docs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
