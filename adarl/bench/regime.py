"""`python -m adarl.bench regime SOURCE [SOURCE...]`: the regime a task puts RL in, by level.

Before any comparison of methods, what the policy faces: per difficulty level of the held-out
prompts, the base policy's pass-rate histogram (p̂ = c/n from its n samples per prompt: the
base evaluation's 64 by default), the share of uniform groups of 4 and of 8 that would come back
one-sided (all right or all wrong: no signal for GRPO), the guesser's pass@1 (answers drawn from
the level's training answers), the responses' length in tokens, and distinct correct responses
per prompt; with a final evaluation, the share of prompts the base never solved in n samples
that the trained policy solves (pass@n), and the final pass rates.

    python -m adarl.bench regime runs/worked/2026-12-07/10-00-00      # a run: base and final
    python -m adarl.evaluate adarl/tiny-arithmetic --config RUN_DIR --out base.json
    python -m adarl.bench regime base.json                            # one evaluation alone

SOURCE is a run directory (its `evaluations.jsonl`: the base and the final evaluation) or the JSON
that `python -m adarl.evaluate` writes. `--markdown` prints the tables as Markdown (for the docs).

The one-sided share is exact for the prompt's sample: with c of n samples correct, a group of g
drawn without replacement from them is one-sided with probability (C(c, g) + C(n - c, g))/C(n, g),
an unbiased estimate of p^g + (1 - p)^g; the table gives its mean over the level's prompts.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from math import comb
from pathlib import Path
from typing import Any

import numpy as np

from adarl.evaluation.evaluator import level_key

# Pass-rate bins of the histogram: p̂ = 0, the hard band (0, 0.15), the middle, nearly solved,
# always solved.
BINS: tuple[tuple[str, Callable[[np.ndarray], np.ndarray]], ...] = (
    ("p̂ = 0", lambda p: p == 0),
    ("0 < p̂ < 0.15", lambda p: (p > 0) & (p < 0.15)),
    ("0.15 ≤ p̂ ≤ 0.85", lambda p: (p >= 0.15) & (p <= 0.85)),
    ("0.85 < p̂ < 1", lambda p: (p > 0.85) & (p < 1)),
    ("p̂ = 1", lambda p: p == 1),
)
GROUP_SIZES = (4, 8)


@dataclass(frozen=True)
class Evaluation:
    """One evaluation prompt by prompt (lists aligned by prompt)."""

    samples: int
    prompt_ids: list[str]
    levels: list[str]
    correct: list[int]
    distinct_correct: list[int]
    response_tokens: list[float]

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Evaluation:
        return cls(
            samples=int(row["samples_per_prompt"]),
            prompt_ids=list(row["prompt_ids"]),
            levels=[str(level) for level in row["levels"]],
            correct=[int(c) for c in row["correct"]],
            distinct_correct=[int(c) for c in row.get("distinct_correct", [])],
            response_tokens=[float(t) for t in row.get("response_tokens", [])],
        )

    def select(self, level: str | None) -> np.ndarray:  # [P] bool
        return np.array([level is None or lv == level for lv in self.levels])


@dataclass(frozen=True)
class Source:
    """What one SOURCE gives: its base (or only) evaluation, a final one, names, the guesser."""

    label: str
    base: Evaluation
    final: Evaluation | None
    level_names: dict[str, str]
    guess_pass_at_1: dict[str, float]  # by level label (and "all"), where known


def one_sided_probability(correct: np.ndarray, samples: int, group: int) -> np.ndarray:
    """Per prompt: (C(c, g) + C(n - c, g))/C(n, g), a group of g drawn from its n samples."""
    if group > samples:
        raise ValueError(f"a group of {group} needs at least {group} samples (got {samples})")
    total = comb(samples, group)
    return np.array(
        [(comb(int(c), group) + comb(samples - int(c), group)) / total for c in correct]
    )


def level_rows(source: Source) -> list[dict[str, Any]]:
    """The regime table's rows: one per level, then "all"."""
    base, final = source.base, source.final
    levels = sorted(set(base.levels), key=level_key)
    rows = []
    for level in (*levels, None):
        keep = base.select(level)
        correct = np.asarray(base.correct)[keep]
        p = correct / base.samples
        row: dict[str, Any] = {
            "level": "all" if level is None else source.level_names.get(level, level),
            "prompts": int(keep.sum()),
            "mean_pass_rate": float(p.mean()),
        }
        for name, in_bin in BINS:
            row[name] = float(np.mean(in_bin(p)))
        for g in GROUP_SIZES:
            row[f"one_sided_n{g}"] = float(one_sided_probability(correct, base.samples, g).mean())
        row["guess_pass_at_1"] = source.guess_pass_at_1.get("all" if level is None else level)
        if base.response_tokens:
            tokens = np.asarray(base.response_tokens)[keep]
            row["response_tokens"] = (
                float(tokens.min()),
                float(tokens.mean()),
                float(tokens.max()),
            )
        if base.distinct_correct:
            row["distinct_correct"] = float(np.asarray(base.distinct_correct)[keep].mean())
        if final is not None and final.prompt_ids == base.prompt_ids:
            final_correct = np.asarray(final.correct)[keep]
            unsolved = correct == 0
            row["final_mean_pass_rate"] = float((final_correct / final.samples).mean())
            row["unsolved_at_base"] = int(unsolved.sum())
            row["unsolved_now_solved"] = (
                float(np.mean(final_correct[unsolved] > 0)) if unsolved.any() else None
            )
            if final.distinct_correct:
                row["final_distinct_correct"] = float(
                    np.asarray(final.distinct_correct)[keep].mean()
                )
        rows.append(row)
    return rows


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def format_table(source: Source, *, markdown: bool) -> str:
    rows = level_rows(source)
    n = source.base.samples
    has_final = source.final is not None
    header = [
        "level",
        "prompts",
        f"mean p̂ ({n})",
        *[name for name, _ in BINS],
        *[f"one-sided n={g}" for g in GROUP_SIZES],
        "guesser pass@1",
        "response tokens min / mean / max",
        "distinct correct",
    ]
    if has_final:
        header += ["final mean p̂", f"p̂ = 0 at base → solved by pass@{source.final.samples}"]  # type: ignore[union-attr]
    body = []
    for row in rows:
        tokens = row.get("response_tokens")
        cells = [
            str(row["level"]),
            str(row["prompts"]),
            _pct(row["mean_pass_rate"]),
            *[_pct(row[name]) for name, _ in BINS],
            *[_pct(row[f"one_sided_n{g}"]) for g in GROUP_SIZES],
            _pct(row["guess_pass_at_1"]),
            "–" if tokens is None else f"{tokens[0]:.0f} / {tokens[1]:.1f} / {tokens[2]:.0f}",
            "–" if "distinct_correct" not in row else f"{row['distinct_correct']:.2f}",
        ]
        if has_final:
            solved = row.get("unsolved_now_solved")
            cells += [
                _pct(row.get("final_mean_pass_rate")),
                "–" if solved is None else f"{100 * solved:.1f}% of {row['unsolved_at_base']}",
            ]
        body.append(cells)
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(cells) + " |" for cells in body]
        return "\n".join(lines) + "\n"
    widths = [max(len(h), *(len(c[i]) for c in body)) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) for cells in body]
    return "\n".join(lines) + "\n"


def load_source(path: Path) -> Source:
    """A run directory (evaluations.jsonl, config.yaml, metrics.jsonl) or an evaluation JSON."""
    if path.is_dir():
        return _run_source(path)
    if path.suffix == ".json" and path.exists():
        return _json_source(path)
    raise ValueError(
        f"{path}: not a run directory (with evaluations.jsonl) nor an evaluation JSON written by "
        "`python -m adarl.evaluate`; pass one of those"
    )


def _run_source(run_dir: Path) -> Source:
    from adarl.evaluation.records import read_evaluations

    rows = read_evaluations(run_dir)
    base = next((r for r in rows if r["kind"] == "base"), None)
    if base is None:
        raise ValueError(
            f"{run_dir} has no base evaluation in evaluations.jsonl (a run of an older adarl, or "
            "one that stopped before step 0 finished): evaluate its base with `python -m "
            "adarl.evaluate` and pass the JSON"
        )
    final = next((r for r in reversed(rows) if r["kind"] == "final"), None)
    return Source(
        label=str(run_dir),
        base=Evaluation.from_row(base),
        final=None if final is None else Evaluation.from_row(final),
        level_names=_run_level_names(run_dir),
        guess_pass_at_1=_run_guesser(run_dir),
    )


def _run_level_names(run_dir: Path) -> dict[str, str]:
    from adarl.evaluation import level_names
    from adarl.export import read_run_config  # the run's resolved config, validated

    try:
        return dict(level_names(read_run_config(run_dir / "config.yaml").task))
    except (ValueError, OSError):
        return {}


def _run_guesser(run_dir: Path) -> dict[str, float]:
    from adarl.logging import read_metrics_jsonl

    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return {}
    base = next((row for row in read_metrics_jsonl(path) if int(row["step"]) == 0), {})
    out = {"all": base["eval/guess_pass@1"]} if "eval/guess_pass@1" in base else {}
    prefix = "eval/guess_pass@1_by_difficulty/"
    out |= {k.removeprefix(prefix): float(v) for k, v in base.items() if k.startswith(prefix)}
    return out


def _json_source(path: Path) -> Source:
    record = json.loads(path.read_text())
    row = record.get("evaluation_row")
    if row is None:
        raise ValueError(
            f"{path} has no per-prompt evaluation row (written by an older adarl.evaluate); "
            "evaluate again"
        )
    table = record.get("evaluation", {})
    guess = (
        {"all": table["guess_pass_at_k"]["1"]} if "1" in table.get("guess_pass_at_k", {}) else {}
    )
    for level, entry in table.get("by_level", {}).items():
        if "1" in entry.get("guess_pass_at_k", {}):
            guess[level] = entry["guess_pass_at_k"]["1"]
    return Source(
        label=str(path),
        base=Evaluation.from_row(row),
        final=None,
        level_names=dict(record.get("level_names") or {}),
        guess_pass_at_1=guess,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m adarl.bench regime", description=__doc__.split("\n")[0]
    )
    parser.add_argument("sources", nargs="+", type=Path, help="run directories or evaluation JSONs")
    parser.add_argument("--markdown", action="store_true", help="Markdown tables")
    args = parser.parse_args(argv)
    try:
        sources = [load_source(path) for path in args.sources]
    except ValueError as error:
        parser.error(str(error))
    for source in sources:
        final = "" if source.final is None else f"; final: {source.final.samples} samples"
        print(f"{source.label}: base {source.base.samples} samples per prompt{final}\n")
        print(format_table(source, markdown=args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
