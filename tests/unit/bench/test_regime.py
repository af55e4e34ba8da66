"""The regime table (adarl/bench/regime.py): its arithmetic by hand, and the command on a run."""

from __future__ import annotations

import json
from math import comb

import numpy as np
import pytest

from adarl.bench.regime import level_rows, load_source, main, one_sided_probability


def test_one_sided_probability_is_exact_for_the_sample() -> None:
    # c = 2 of n = 4: a group of 2 is one-sided iff both right (1 way) or both wrong (1 way) of 6
    np.testing.assert_allclose(one_sided_probability(np.array([2, 0, 4]), 4, 2), [2 / 6, 1, 1])
    # unbiased for p^g + (1-p)^g: the mean over c ~ Bin(n, p) is exact
    n, g, p = 16, 4, 0.3
    expected = sum(
        comb(n, c) * p**c * (1 - p) ** (n - c) * one_sided_probability(np.array([c]), n, g)[0]
        for c in range(n + 1)
    )
    assert expected == pytest.approx(p**g + (1 - p) ** g)
    with pytest.raises(ValueError, match="needs at least"):
        one_sided_probability(np.array([1]), 4, 8)


def _row(step: int, kind: str, correct: list[int]) -> dict:
    return {
        "step": step,
        "kind": kind,
        "samples_per_prompt": 8,
        "prompt_ids": ["a", "b", "c", "d"],
        "levels": ["0", "0", "1", "1"],
        "correct": correct,
        "distinct_correct": [min(c, 2) for c in correct],
        "response_tokens": [4.0, 6.0, 20.0, 30.0],
    }


def test_the_command_reads_a_run(tmp_path, capsys) -> None:
    rows = [_row(0, "base", [8, 4, 1, 0]), _row(10, "final", [8, 6, 3, 2])]
    (tmp_path / "evaluations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    source = load_source(tmp_path)
    by_level = {row["level"]: row for row in level_rows(source)}
    assert by_level["0"]["p̂ = 1"] == 0.5 and by_level["0"]["0.15 ≤ p̂ ≤ 0.85"] == 0.5
    assert by_level["1"]["0 < p̂ < 0.15"] == 0.5 and by_level["1"]["p̂ = 0"] == 0.5
    assert by_level["1"]["unsolved_now_solved"] == 1.0  # prompt d: 0 of 8 → 2 of 8
    assert by_level["all"]["response_tokens"] == (4.0, 15.0, 30.0)
    assert main([str(tmp_path), "--markdown"]) == 0
    assert "| 1 | 2 | 6.2% |" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([str(tmp_path / "missing.json")])
