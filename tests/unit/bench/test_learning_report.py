"""The pure parts of `python -m adarl.bench learning`'s report, on synthetic runs: curve
interpolation, mean ± spread, rollouts to reach a target, the tie rule, per-run extraction from a
metrics.jsonl, the tables and `--report-only`."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from adarl.bench import learning
from adarl.bench.learning_records import (
    PASS_RATE_BINS,
    EvalPoint,
    Reach,
    ReportData,
    RunRecord,
    first_reach,
    grpo_best,
    interpolate,
    is_tie,
    load_run,
    mean_and_spread,
    reach_to_reference,
    seed_band,
    verdict,
)
from adarl.bench.learning_report import (
    diagnose,
    headline_table,
    losses_explained,
    overhead_share,
)

from ._runs import write_run


def _record(arm: str, seed: int, points: list[tuple[float, float]], **kw: object) -> RunRecord:
    """Evaluations at (rollouts, accuracy) points; tokens = 5 × rollouts, wall = rollouts / 100."""
    values: dict[str, object] = {
        "experiment": "grpo" if arm.startswith("grpo") else arm,
        "mixed_fraction": [0.5],
        "steps": 1,
        "rollouts": points[-1][0],
        "tokens": 5 * points[-1][0],
        "groups_trained": 100.0,
        "mixed_groups": 50.0,
        "discarded_samples": 0.0,
        "start_up_s": 0.0,
        "prompts_by_bin": dict.fromkeys(PASS_RATE_BINS, 1.0),
        "rollouts_by_bin": dict.fromkeys(PASS_RATE_BINS, 1.0),
        "timing_s": {"step": 1.0},
    }
    values.update(kw)
    return RunRecord(
        arm=arm,
        seed=seed,
        evals=[
            EvalPoint(
                step=i, rollouts=x, tokens=5 * x, wall_s=x / 100, accuracy=y, greedy_accuracy=None
            )
            for i, (x, y) in enumerate(points)
        ],
        **values,  # type: ignore[arg-type]
    )


# -- statistics -------------------------------------------------------------------------------


def test_interpolate_is_piecewise_linear_and_never_extrapolates() -> None:
    # Segments (0,0)-(10,1) and (10,1)-(20,3): x=5 -> 0.5, x=15 -> 2; x=25 is past the last eval.
    got = interpolate([0, 10, 20], [0.0, 1.0, 3.0], np.array([0.0, 5.0, 15.0, 20.0, 25.0]))
    np.testing.assert_allclose(got[:4], [0.0, 0.5, 2.0, 3.0])
    assert math.isnan(got[4])
    with pytest.raises(ValueError, match="non-decreasing"):
        interpolate([0, 10, 5], [0.0, 1.0, 2.0], np.array([1.0]))


def test_mean_and_spread_is_the_sample_standard_deviation() -> None:
    # (1, 2, 3): mean 2, Σ(x − 2)² = 2, / (n − 1) = 1 -> sd 1 (the population sd is 0.816).
    assert mean_and_spread([1.0, 2.0, 3.0]) == pytest.approx((2.0, 1.0))
    assert mean_and_spread([0.3]) == (0.3, 0.0)
    with pytest.raises(ValueError):
        mean_and_spread([])


def test_seed_band_uses_the_common_grid_where_every_seed_has_data() -> None:
    # Seed A ends at 20, seed B at 30: the grid stops at 20. At x = 10: A = 0.2 and B = 0.4
    # (B's segment (0, 0)-(30, 1.2)) -> mean 0.3, sd = |0.2 − 0.4| / √2 = 0.1414.
    band = seed_band([([0, 10, 20], [0.0, 0.2, 0.4]), ([0, 30], [0.0, 1.2])], points=3)
    np.testing.assert_allclose(band.grid, [0.0, 10.0, 20.0])
    np.testing.assert_allclose(band.mean, [0.0, 0.3, 0.6])
    np.testing.assert_allclose(band.spread, [0.0, 0.2 / math.sqrt(2), 0.4 / math.sqrt(2)])
    assert band.seeds == 2


def test_first_reach_interpolates_between_evaluations() -> None:
    xs, ys = [0, 1000, 2000, 3000], [0.10, 0.20, 0.18, 0.30]
    # Crosses 0.15 between (0, .10) and (1000, .20): halfway -> 500.
    assert first_reach(xs, ys, 0.15) == pytest.approx(500.0)
    # 0.25 is first reached on the last segment (2000, .18)-(3000, .30): 2000 + 7/12 × 1000.
    assert first_reach(xs, ys, 0.25) == pytest.approx(2000 + 1000 * 7 / 12)
    assert first_reach(xs, ys, 0.20) == pytest.approx(1000.0)  # reached exactly at an eval
    assert first_reach(xs, ys, 0.05) == 0.0  # the base already reaches it
    assert first_reach(xs, ys, 0.31) is None


def test_tie_rule_compares_the_difference_with_the_larger_spread() -> None:
    assert is_tie((10.0, 3.0), (12.0, 1.0))  # |Δ| = 2 < max(3, 1)
    assert not is_tie((10.0, 1.0), (13.0, 2.0))  # |Δ| = 3 ≥ 2
    assert not is_tie((10.0, 0.0), (10.5, 0.0))  # one seed each: any difference counts


def test_rollouts_to_target_are_paired_by_seed_and_judged_with_the_tie_rule() -> None:
    # GRPO n=4 ends higher than n=16 on average -> GRPO-best; its finals are the per-seed targets:
    # seed 0: 0.30, seed 1: 0.40.
    records = [
        _record("grpo_n4", 0, [(0, 0.1), (1000, 0.2), (2000, 0.3)]),
        _record("grpo_n4", 1, [(0, 0.1), (1000, 0.3), (2000, 0.4)]),
        _record("grpo_n16", 0, [(0, 0.1), (2000, 0.25)]),
        _record("grpo_n16", 1, [(0, 0.1), (2000, 0.3)]),
        # Fast: seed 0 reaches 0.30 at 500 (halfway to (1000, .5)), seed 1 reaches .40 at 750.
        _record("fast", 0, [(0, 0.1), (1000, 0.5)]),
        _record("fast", 1, [(0, 0.1), (1000, 0.5)]),
        # Reaches seed 0's target (at 1000) but not seed 1's.
        _record("half", 0, [(0, 0.1), (1000, 0.3), (2000, 0.3)]),
        _record("half", 1, [(0, 0.1), (1000, 0.3), (2000, 0.35)]),
    ]
    assert grpo_best(records) == "grpo_n4"
    reach = reach_to_reference(records, "grpo_n4")
    assert reach["grpo_n4"].per_seed == {0: pytest.approx(2000.0), 1: pytest.approx(2000.0)}
    assert reach["fast"].per_seed == {0: pytest.approx(500.0), 1: pytest.approx(750.0)}
    assert reach["half"].per_seed == {0: pytest.approx(1000.0), 1: None}
    # fast: 625 ± 177 vs 2000 ± 0: |Δ| = 1375 > 177 -> faster, 625/2000 = 0.31×.
    assert verdict(reach["fast"], reach["grpo_n4"]) == "faster (0.31×)"
    assert verdict(reach["half"], reach["grpo_n4"]) == "not reached (1/2 seeds)"
    assert verdict(reach["grpo_n16"], reach["grpo_n4"]) == "not reached (0/2 seeds)"
    tie = Reach(arm="x", per_seed={0: 1500.0, 1: 2600.0})  # 2050 ± 778: |Δ| = 50 < 778
    assert verdict(tie, reach["grpo_n4"]) == "tie (1.02×)"
    # Tokens are 5 × rollouts in these records, so the token column scales the same way.
    tokens = reach_to_reference(records, "grpo_n4", axis="tokens")
    assert tokens["fast"].summary()[0] == pytest.approx(5 * 625.0)


def test_grpo_best_needs_a_grpo_arm() -> None:
    with pytest.raises(ValueError, match="no GRPO arm"):
        grpo_best([_record("fast", 0, [(0, 0.1), (10, 0.2)])])


def test_headline_table_rows_say_reached_or_not() -> None:
    records = [
        _record("grpo_n4", 0, [(0, 0.1), (2000, 0.3)]),
        _record("slow", 0, [(0, 0.1), (2000, 0.2)]),
    ]
    table, best = headline_table(records)
    assert best == "grpo_n4"
    rows = {line.split("|")[1].strip(): line for line in table.splitlines()[2:]}
    assert "(reference)" in rows["**grpo_n4** (GRPO-best)"]
    assert "not reached (0/1)" in rows["slow"]
    assert "lower" in rows["slow"]  # final 20% vs 30% with no spread


# -- per-run extraction and the diagnosis --------------------------------------------------------


def test_record_from_a_metrics_jsonl_sums_steps_and_keeps_every_evaluation(tmp_path: Path) -> None:
    run = write_run(
        tmp_path / "run",
        rollouts_per_step=100,
        accuracy_at_step={0: 0.1, 2: 0.2, 4: 0.3},
        steps=4,
        mixed_fraction=0.25,
        groups=8,
        step_timing={"step": 1.0, "rollout_wait": 0.5},
        by_difficulty={0: {"0": 0.5, "1": 0.0}, 4: {"0": 0.9, "1": 0.2}},
    )
    record = load_run(run, arm="a", experiment="ada_seq_balance", seed=3)
    # Wall time is the training clock at each evaluation's start: 2 steps of 1 s; then the 0.5 s
    # evaluation at step 2 and 2 more steps -> 4.5 s (perf/wall_s, 13 s + 2 s per step, is not it).
    assert [(e.step, e.rollouts, e.tokens, e.wall_s) for e in record.evals] == [
        (0, 0.0, 0.0, 0.0),
        (2, 200.0, 1000.0, 2.0),
        (4, 400.0, 2000.0, 4.5),
    ]
    assert [e.accuracy for e in record.evals] == [0.1, 0.2, 0.3]
    assert record.evals[-1].by_difficulty == {"0": 0.9, "1": 0.2}
    assert (record.steps, record.rollouts, record.tokens) == (4, 400.0, 2000.0)
    # 4 steps × 8 groups, a quarter of them mixed.
    assert (record.groups_trained, record.mixed_groups) == (32.0, 8.0)
    assert record.discarded_samples == 4.0
    # Per step: bin "0" has 2 prompts × 8 samples = 16 rollouts; over 4 steps 8 prompts, 64.
    assert record.prompts_by_bin["0"] == 8.0
    assert record.rollouts_by_bin["0"] == 64.0
    assert record.timing_s == {"step": 4.0, "rollout_wait": 2.0, "eval": 1.0}
    assert record.start_up_s == 13.0  # wall time counts from the end of build + base eval
    # The JSON keeps everything, to six significant digits (0.1 + 0.1 + 0.1 is stored as 0.3).
    stored = RunRecord.from_json(record.to_json())
    assert stored.to_json() == record.to_json()
    assert [e.greedy_accuracy for e in stored.evals] == [0.2, 0.3, 0.4]


def test_a_run_without_discard_counts_reports_none_not_zero(tmp_path: Path) -> None:
    run = write_run(
        tmp_path / "run",
        rollouts_per_step=10,
        accuracy_at_step={0: 0.1, 2: 0.2},
        steps=2,
        log_discarded=False,
    )
    record = load_run(run, arm="a", experiment="grpo", seed=0)
    assert record.discarded_samples is None
    assert diagnose([record]).discarded_share is None


def test_an_unfinished_run_is_not_reported(tmp_path: Path) -> None:
    run = write_run(
        tmp_path / "run", rollouts_per_step=10, accuracy_at_step={0: 0.1}, steps=2, finished=False
    )
    with pytest.raises(FileNotFoundError, match="has not finished"):
        load_run(run, arm="a", experiment="grpo", seed=0)


def test_diagnosis_counts_signal_per_rollout_and_accuracy_per_mixed_group(tmp_path: Path) -> None:
    # Per step: prompts (2, 2, 1, 1, 1, 1) × samples (8, 6, 4, 4, 6, 8) = 16+12+4+4+6+8 = 50
    # rollouts, 8 prompts; 4 of 8 groups mixed. Over 10 steps: 500 rollouts, 40 mixed groups.
    run = write_run(
        tmp_path / "run", rollouts_per_step=50, accuracy_at_step={0: 0.1, 10: 0.3}, steps=10
    )
    d = diagnose([load_run(run, arm="a", experiment="grpo", seed=0)])
    assert d.samples_per_prompt == pytest.approx(50 / 8)
    assert d.rollout_share_by_bin["0"] == pytest.approx(16 / 50)
    assert d.no_signal_share == pytest.approx((16 + 8) / 50)
    assert d.samples_per_prompt_by_bin["0.25-0.5"] == pytest.approx(4.0)
    assert d.mixed_per_1k_rollouts == pytest.approx(1000 * 40 / 500)
    # 20 accuracy points bought with 40 mixed groups -> 500 points per 1,000 mixed groups.
    assert d.gain_per_1k_mixed == pytest.approx(20 / (40 / 1000))
    assert d.discarded_share == pytest.approx(10 / 500)


def test_a_losing_arm_is_explained_with_its_signal_numbers() -> None:
    # Same accuracy per mixed group, but the loser buys half as many mixed groups per rollout.
    records = [
        _record("grpo_n4", 0, [(0, 0.1), (1000, 0.3)], mixed_groups=50.0),
        _record("loser", 0, [(0, 0.1), (1000, 0.2), (2000, 0.3)], mixed_groups=50.0),
    ]
    text = losses_explained(records, "grpo_n4")
    assert "**loser** (slower (2.00×) against grpo_n4)" in text
    assert "fewer mixed groups per rollout" in text
    assert "Mixed groups per 1,000 rollouts 25.0 vs 50.0 (0.50×)" in " ".join(text.split())


def test_overhead_share_is_step_time_outside_the_workloads() -> None:
    # 10 s of steps: 6 waiting for engines, 1 reward, 2 learner, 0.5 sync -> 0.5 s outside = 5%.
    timing = {"step": 10.0, "rollout_wait": 6.0, "reward": 1.0, "train": 2.0, "weight_sync": 0.5}
    assert overhead_share({**timing, "allocator": 0.3, "dispatch": 0.1}) == pytest.approx(0.05)
    # An algorithm's own engine or learner passes (GVM's statistics, DRO's rescoring, hint
    # writing) are work, not orchestration: 2 more seconds of them leave 0.5 s of 12 outside.
    passes = {"statistics": 0.5, "pool_reward": 1.0, "hint": 0.5}
    longer = {**timing, "step": 12.0, **passes}
    assert overhead_share(longer) == pytest.approx(0.5 / 12)
    with pytest.raises(ValueError, match="timing/step_s"):
        overhead_share({"rollout_wait": 1.0})


# -- --report-only ---------------------------------------------------------------------------------


def test_report_only_redraws_the_section_and_plots_from_the_json(tmp_path: Path) -> None:
    runs = []
    for arm, experiment, rate in (("grpo_n4", "grpo", 0.02), ("ada_seq_balance", "x", 0.03)):
        for seed in (0, 1):
            run = write_run(
                tmp_path / arm / f"seed{seed}",
                rollouts_per_step=100,
                accuracy_at_step={s: 0.1 + rate * s + 0.01 * seed for s in (0, 5, 10)},
                steps=10,
                step_timing={"step": 1.0, "rollout_wait": 0.6, "reward": 0.1, "train": 0.2},
                by_difficulty={0: {"0": 0.5}, 10: {"0": 0.8}},
            )
            runs.append(load_run(run, arm=arm, experiment=experiment, seed=seed))
    setting = learning.REDUCED
    data = ReportData(
        setting={**setting.__dict__, "arms": ["grpo_n4", "ada_seq_balance"]},
        command="python -m adarl.bench learning --seeds 2",
        runs=runs,
    )
    data_path, docs = tmp_path / "data" / "learning.json", tmp_path / "docs" / "benchmarks.md"
    data.save(data_path)
    docs.parent.mkdir()
    docs.write_text("# Benchmarks\n\n## Sampler\n\nkeep\n")
    figures = tmp_path / "docs" / "figures"
    argv = ["--report-only", "--data", str(data_path), "--docs", str(docs)]
    assert learning.main([*argv, "--figures-dir", str(figures)]) == 0
    text = docs.read_text()
    assert text.startswith("# Benchmarks\n\n## Sampler\n\nkeep\n\n## Learning\n")
    # Seq-Balance gains 3 points per 500 rollouts against GRPO's 2: it reaches GRPO's final
    # accuracy (0.30 / 0.31) at 2/3 of the rollouts on both seeds, with no seed spread.
    assert "met: ada_seq_balance is faster (0.67×) against grpo_n4" in text
    for name in ("curves", "signal", "difficulty", "time"):
        png = figures / f"learning_{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"](figures/learning_{name}.png)" in text
    assert [r.to_json() for r in ReportData.load(data_path).runs] == [r.to_json() for r in runs]


def test_report_only_needs_no_arm_of_arms(tmp_path: Path) -> None:
    """A closed study's arms leave ARMS while its JSON stays in docs/data: the report is drawn
    from the labels and experiments the JSON records, never from ARMS."""
    closed = (("sb_closed_grpo", "grpo", 0.02), ("sb_closed_candidate", "ada_seq_balance", 0.03))
    assert not {label for label, _, _ in closed} & {arm.label for arm in learning.ARMS}
    runs = [
        load_run(
            write_run(
                tmp_path / arm / "seed0",
                rollouts_per_step=100,
                accuracy_at_step={s: 0.1 + rate * s for s in (0, 5, 10)},
                steps=10,
            ),
            arm=arm,
            experiment=experiment,
            seed=0,
        )
        for arm, experiment, rate in closed
    ]
    data = ReportData(
        setting={**learning.REDUCED.__dict__, "arms": [label for label, _, _ in closed]},
        command="python -m adarl.bench learning --seeds 1 --arms sb_closed_grpo ...",
        runs=runs,
    )
    data_path, docs = tmp_path / "learning.json", tmp_path / "docs" / "benchmarks.md"
    data.save(data_path)
    argv = ["--report-only", "--data", str(data_path), "--docs", str(docs)]
    assert learning.main([*argv, "--figures-dir", str(tmp_path / "docs" / "figures")]) == 0
    text = docs.read_text()
    assert "| **sb_closed_grpo** (GRPO-best) | 1 |" in text
    assert "| sb_closed_candidate | 1 |" in text


def test_the_hints_table_reports_per_step_shares_and_rescues() -> None:
    from adarl.bench.learning_report import hints_section, hints_table

    def hinted(seed: int, before: float, after: float) -> RunRecord:
        # 10 steps of 100 rollouts; per step: the p̂ = 0 shares, 2 rescues, 20 hinted rollouts.
        return _record(
            "sage",
            seed,
            [(0, 0.1), (1000, 0.2)],
            steps=10,
            hints={
                "signal/zero_pass_share_unhinted": 10 * before,
                "signal/zero_pass_share_after_hints": 10 * after,
                "signal/prompts_rescued_by_hints": 20.0,
                "sampling/hinted_rollouts": 200.0,
            },
        )

    records = [
        _record("grpo_n4", 0, [(0, 0.1), (1000, 0.2)]),
        hinted(0, 0.40, 0.30),
        hinted(1, 0.50, 0.30),
    ]
    table = hints_table(records)
    assert "grpo_n4" not in table  # an arm without hints has no row
    row = next(line for line in table.splitlines() if line.startswith("| sage |"))
    assert "45.0 ± 7.1% → 30.0 ± 0.0%" in row
    assert "-15.0 ± 7.1" in row  # points, paired by seed
    assert "2.00 ± 0.00" in row and "20.0 (20.0%)" in row
    assert hints_table(records[:1]) == "" and hints_section(records[:1]) == ""
    assert "### Hints" in hints_section(records)
    stored = RunRecord.from_json(records[1].to_json())
    assert stored.hints == records[1].hints
    legacy = records[0].to_json()
    del legacy["hints"]  # runs recorded before the field still load
    assert RunRecord.from_json(legacy).hints == {}
