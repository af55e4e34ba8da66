"""Every shipped experiment composes and validates; bad configs fail fast, naming key and fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from adarl.algo.advantages import AdvantageOptions
from adarl.algo.implied import implied_weight
from adarl.allocator import build_group_builder
from adarl.config import AdarlConfig
from adarl.launch import CONFIG_DIR, load_config

EXPERIMENTS = sorted(p.stem for p in (Path(CONFIG_DIR) / "experiment").glob("*.yaml"))


def _compose(*overrides: str) -> AdarlConfig:
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="config", overrides=list(overrides))
    return load_config(cfg)


def test_every_issue_experiment_ships() -> None:
    required = {
        "grpo",
        "dr_grpo",
        "rloo",
        "raft",
        "dapo",
        "ada_seq_pos",
        "ada_seq_balance",
        "reinforce_ada_reference",
    }
    assert required <= set(EXPERIMENTS)


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_composes_and_validates(experiment: str) -> None:
    config = _compose(f"+experiment={experiment}")
    assert config.name == experiment


def test_reference_experiment_is_the_released_algorithm() -> None:
    config = _compose("+experiment=reinforce_ada_reference")
    alloc = config.allocator
    assert alloc.sequential.mode == "rounds"
    assert (alloc.sequential.round_repeat, alloc.sequential.max_rounds) == (8, 4)
    assert alloc.positive_threshold == 0.7
    assert alloc.group.correction == "none" and alloc.group.downsample_order == "earliest"


def test_the_default_budgets_rollouts_and_the_tokens_the_learner_reads() -> None:
    # make run: 180k rollouts, or 2.5M prompt + response tokens on tasks with long prompts.
    for experiment in ("grpo_anchored", "ada_coverage"):  # the default, and the one before it
        trainer = _compose(f"+experiment={experiment}").trainer
        assert (trainer.max_rollouts, trainer.max_sequence_tokens) == (180_000, 2_500_000)


def test_default_experiment_declares_its_objective() -> None:
    config = _compose("+experiment=ada_seq_balance")
    assert config.allocator.sampler == "seq_balance"
    assert config.allocator.group.correction == "selection"
    assert config.allocator.group.objective == "log"


def test_raft_variants_train_what_their_labels_say() -> None:
    """`raft` is unbiased for ∇p (w = 1, linear); `raft_log` is log p behind the gate
    1 - (1-p)^n (w·p = 1 - (1-p)^n): the normalisation key reaches the group builder."""
    p = np.array([0.1, 0.5, 0.9])
    for experiment, expected in (("raft", np.ones(3)), ("raft_log", (1 - (1 - p) ** 4) / p)):
        group = _compose(f"+experiment={experiment}").allocator.group
        weight = implied_weight(
            p,
            estimator="raft",
            group_size=4,
            options=AdvantageOptions(raft_normalization=group.raft_normalization),
        )
        np.testing.assert_allclose(weight, expected, rtol=1e-12)
        builder = build_group_builder(_compose(f"+experiment={experiment}").allocator.plan())
        assert builder.estimator.options.raft_normalization == group.raft_normalization  # type: ignore[union-attr]


def test_unknown_key_fails_at_composition() -> None:
    with pytest.raises(ConfigCompositionException, match=r"allocator\.prompts_per_stepp") as info:
        _compose("+experiment=grpo", "allocator.prompts_per_stepp=3")
    assert "not in 'AllocatorConfig'" in str(info.value.__cause__)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["allocator.group.group_size=3"], "group_size=3 is odd"),
        (["allocator.group.group_size=8"], "set allocator.sequential.k_pos and k_neg"),
        (["allocator.max_samples_per_prompt=3"], "raise the cap"),
        (["allocator.sampler=nope"], "allocator.sampler='nope' is not one of"),
        (["allocator.group.advantage=grpo"], "allocator.group.correction=none"),
        (["cluster.in_process=true", "cluster.learners=2"], "cluster.learners=1"),
        # Sampling ahead trains stale samples: refused without decoupled PPO's correction.
        (["rollout.max_off_policy_steps=1"], "set learner.loss.ratio_reference=learner"),
        (
            [
                "rollout.max_off_policy_steps=2",
                "learner.loss.ratio_reference=learner",
            ],
            r"learner.loss.tis_cap=None do not correct",
        ),
        (["rollout.max_off_policy_steps=-1"], "must be >= 0"),
        (["trainer.max_sequence_tokens=0"], "trainer.max_sequence_tokens=0 must be >= 1"),
        # Sampling ahead writes the next steps' hints already.
        (
            [
                "hints=sage",
                "hints.write_ahead=true",
                "rollout.max_off_policy_steps=1",
                "learner.loss.ratio_reference=learner",
                "learner.loss.tis_cap=2",
            ],
            "set hints.write_ahead=false",
        ),
        # Overlapping steps: only with a lag, and only what keeps nothing across steps.
        (["rollout.cross_step_allocation=true"], "max_off_policy_steps=0 trains every step"),
        (
            [
                "rollout.cross_step_allocation=true",
                "rollout.max_off_policy_steps=1",
                "learner.loss.ratio_reference=learner",
                "learner.loss.tis_cap=2",
                "hints=sage",
                "dro.filter.enabled=true",
            ],
            r"set hints=off.*turn dro.reward and dro.filter off",
        ),
        # DPH-RL's rehearsal: its term must weigh something, anchored to the base, on pools
        # that can reach its min_samples.
        (
            ["allocator.rehearsal.enabled=true", "learner.loss.rehearsal_coef=0"],
            r"set learner.loss.rehearsal_coef > 0",
        ),
        (
            [
                "allocator.rehearsal.enabled=true",
                "learner.loss.kl_coef=0.1",
                "learner.reference_reset_every_steps=50",
            ],
            r"set learner.reference_reset_every_steps=null or allocator.rehearsal.enabled=false",
        ),
        (
            ["allocator.rehearsal.enabled=true", "allocator.max_samples_per_prompt=6"],
            r"lower allocator.rehearsal.min_samples to at most 6",
        ),
        (["allocator.rehearsal.per_step=0"], r"allocator.rehearsal.min_samples=8 and per_step=0"),
        (["learner.loss.rehearsal_coef=-1"], r"rehearsal_coef=-1.0 must be >= 0"),
    ],
)
def test_invalid_combination_names_key_and_fix(overrides: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _compose("+experiment=ada_seq_balance", *overrides)


def test_rehearsal_is_one_switch_on_any_experiment() -> None:
    config = _compose("+experiment=ada_coverage", "allocator.rehearsal.enabled=true")
    assert config.learner.loss.rehearsal_coef == 0.02  # η has its default
    with pytest.raises(ValueError, match="uniform_samples_per_prompt = 4 caps every pool"):
        _compose("+experiment=grpo", "allocator.rehearsal.enabled=true")
    _compose(
        "+experiment=grpo",
        "allocator.rehearsal.enabled=true",
        "allocator.uniform_samples_per_prompt=8",
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        # Ada-Est sampling under GRPO's advantage is not Reinforce-Ada-Est: refused, not composed.
        (["allocator=ada_est"], r"allocator.sampler=ada_est with allocator.group.advantage='grpo'"),
        (["allocator=gvm", "allocator.group.advantage=rloo"], r"allocator.sampler=gvm with"),
    ],
)
def test_an_allocation_sampler_with_a_contradicting_advantage_is_refused(
    overrides: list[str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        _compose("+experiment=grpo", *overrides)


def test_resolved_config_round_trips_through_yaml(tmp_path: Path) -> None:
    from adarl.launch import save_resolved_config

    config = _compose("+experiment=dapo", "seed=7")
    path = save_resolved_config(config, tmp_path)
    reloaded = OmegaConf.to_object(
        OmegaConf.merge(OmegaConf.structured(AdarlConfig), OmegaConf.load(path))
    )
    assert reloaded == config


@pytest.mark.slow
def test_invalid_config_fails_from_the_command_line(tmp_path: Path) -> None:
    """Exit code 2 and a message naming the key and the fix (how fast: the test below shows
    validation imports nothing heavy; a benchmark, not a test, would time it)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "adarl.launch",
            "+experiment=ada_seq_balance",
            "allocator.group.group_size=3",
            f"hydra.run.dir={tmp_path}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "allocator.group.group_size=3 is odd" in proc.stderr
    assert "use an even group_size" in proc.stderr
    assert not (tmp_path / "metrics.jsonl").exists()  # nothing started


def test_config_validation_imports_nothing_heavy() -> None:
    """Why an invalid config fails fast: composing and validating never imports the stack."""
    code = (
        "import sys; from adarl.launch import load_config; "
        "print(sorted(m for m in ('torch', 'ray', 'vllm', 'deepspeed', 'transformers') "
        "if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_a_task_preset_sets_the_warm_start_it_needs_over_the_model_preset() -> None:
    """task=worked's 1,500 warm-start steps of written steps win over tiny_arithmetic's 300 (the
    task is composed after the model); the command line still wins over both."""
    worked = _compose("task=worked")
    assert (worked.model.tiny.sft_steps, worked.model.tiny.sft_response) == (1500, "steps")
    assert worked.model.tiny.sft_hinted_levels == ["sum7", "sum8"]
    assert worked.rollout.max_new_tokens == 88 and worked.eval.max_new_tokens == 88
    assert _compose().model.tiny.sft_steps == 300  # the built-in task keeps its warm start
    assert _compose("task=worked", "model.tiny.sft_steps=40").model.tiny.sft_steps == 40
