"""The pass@k table of an evaluation, as text: what `python -m adarl.evaluate`, the end of a run
and `python -m adarl.report` print."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def format_table(table: dict[str, Any], names: Mapping[str, str] | None = None) -> str:
    """The pass@k table (an `EvalResult.table()`): a row per level, the guesser's below each;
    `names` names the levels (`level_names`: "2d+-2d" for the arithmetic task's "4"). Prompts of
    one level only (a file without a difficulty column) are one row, "all"."""
    names = names or {}
    ks = list(table["pass_at_k"])
    labels = {level: names.get(level, level) for level in table["by_level"]}
    width = max([8, *(len(label) + 2 for label in labels.values())])
    header = f"  {'level':<{width}}{'prompts':>8}" + "".join(f"{'pass@' + k:>10}" for k in ks)
    lines = [header]

    def rows(label: str, prompts: int, passes: dict[str, float], guess: dict[str, float]) -> None:
        lines.append(
            f"  {label:<{width}}{prompts:>8}" + "".join(f"{100 * passes[k]:>9.1f}%" for k in ks)
        )
        if guess:
            lines.append(
                f"  {'  guess':<{width}}{'':>8}" + "".join(f"{100 * guess[k]:>9.1f}%" for k in ks)
            )

    rows("all", table["num_prompts"], table["pass_at_k"], table["guess_pass_at_k"])
    levels = table["by_level"] if len(table["by_level"]) > 1 else {}
    for level, entry in levels.items():
        rows(labels[level], entry["num_prompts"], entry["pass_at_k"], entry["guess_pass_at_k"])
    lines.append(f"  coverage (a correct sample among {ks[-1]}): {100 * table['coverage']:.1f}%")
    if table.get("greedy_accuracy") is not None:
        lines.append(f"  greedy accuracy: {100 * table['greedy_accuracy']:.1f}%")
    return "\n".join(lines)
