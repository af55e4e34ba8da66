from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
from pathlib import Path

import pytest
import torch
from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM

from adarl.config.model import TINY_ARITHMETIC, ModelConfig, TinyModelConfig
from adarl.models import loading, tiny
from adarl.models.loading import (
    build_policy,
    default_cache_dir,
    load_policy,
    load_tokenizer,
    resolve_model_path,
)
from adarl.models.tokenizer import build_char_tokenizer

# Small enough to build in well under a second.
MICRO = TinyModelConfig(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=64,
    sft_steps=4,
    sft_batch_size=8,
)


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def test_builtin_is_built_once_then_loaded_from_cache(tmp_path: Path, monkeypatch) -> None:
    path = Path(resolve_model_path(TINY_ARITHMETIC, cache_dir=tmp_path, tiny=MICRO))
    assert path.parent == tmp_path / "models"
    info = json.loads((path / "adarl_build.json").read_text())
    assert info["config"] == dataclasses.asdict(MICRO)
    assert info["warm_start"]["steps"] == 4
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in path.iterdir()
    }
    assert not [p for p in (tmp_path / "models").iterdir() if p.name.startswith(".tmp")]

    def no_rebuild(*args, **kwargs):
        raise AssertionError("a cached model was rebuilt")

    monkeypatch.setattr(tiny, "warm_start", no_rebuild)
    assert Path(resolve_model_path(TINY_ARITHMETIC, cache_dir=tmp_path, tiny=MICRO)) == path


def test_cache_key_follows_the_config(tmp_path: Path) -> None:
    first = resolve_model_path(TINY_ARITHMETIC, cache_dir=tmp_path, tiny=MICRO)
    other = dataclasses.replace(MICRO, sft_learning_rate=MICRO.sft_learning_rate / 2)
    assert resolve_model_path(TINY_ARITHMETIC, cache_dir=tmp_path, tiny=other) != first
    # Thread count changes speed, not the recipe.
    threads = dataclasses.replace(MICRO, sft_num_threads=2)
    assert resolve_model_path(TINY_ARITHMETIC, cache_dir=tmp_path, tiny=threads) == first


def test_build_is_deterministic(tmp_path: Path) -> None:
    a = load_policy(TINY_ARITHMETIC, cache_dir=tmp_path / "a", tiny=MICRO).model.state_dict()
    b = load_policy(TINY_ARITHMETIC, cache_dir=tmp_path / "b", tiny=MICRO).model.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[name], b[name]) for name in a)


def test_a_rival_build_that_finishes_first_wins(tmp_path: Path, monkeypatch) -> None:
    """Across machines no lock is shared: a builder that finds the model renamed into place
    while it trained keeps the rival's copy and discards its own."""
    real_warm_start = tiny.warm_start
    rival: list[str] = []

    def racing_warm_start(*args, **kwargs):
        if not rival:  # while we train, another machine completes the same build
            rival.append("building")
            rival[0] = resolve_model_path(TINY_ARITHMETIC, cache_dir=tmp_path, tiny=MICRO)
        return real_warm_start(*args, **kwargs)

    monkeypatch.setattr(tiny, "warm_start", racing_warm_start)
    monkeypatch.setattr(tiny, "_build_lock", lambda path: contextlib.nullcontext())
    path = resolve_model_path(TINY_ARITHMETIC, cache_dir=tmp_path, tiny=MICRO)
    assert path == rival[0]
    assert [p.name for p in (tmp_path / "models").iterdir()] == [Path(path).name]


def test_a_builder_that_waits_on_the_lock_reuses_the_first_build(
    tmp_path: Path, monkeypatch
) -> None:
    """On one machine the file lock serialises builders: the second waits while the first
    trains, then finds the model built and trains nothing."""
    real_warm_start = tiny.warm_start
    training = threading.Event()
    release = threading.Event()
    trained: list[int] = []

    def slow_warm_start(*args, **kwargs):
        trained.append(threading.get_ident())
        training.set()
        assert release.wait(timeout=60)
        return real_warm_start(*args, **kwargs)

    monkeypatch.setattr(tiny, "warm_start", slow_warm_start)
    paths: dict[str, str] = {}

    def build(name: str) -> None:
        paths[name] = resolve_model_path(TINY_ARITHMETIC, cache_dir=tmp_path, tiny=MICRO)

    first = threading.Thread(target=build, args=("first",))
    first.start()
    assert training.wait(timeout=60)
    second = threading.Thread(target=build, args=("second",))
    second.start()
    second.join(timeout=1.0)
    assert second.is_alive()  # blocked on the lock, not training a second copy
    release.set()
    first.join(timeout=120)
    second.join(timeout=120)
    assert not first.is_alive() and not second.is_alive()
    assert paths["first"] == paths["second"]
    assert len(trained) == 1
    assert [p.name for p in (tmp_path / "models").iterdir() if not p.name.startswith(".")] == [
        Path(paths["first"]).name
    ]


def test_cache_dir_env_and_default(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ADARL_CACHE_DIR", str(tmp_path / "env-cache"))
    assert default_cache_dir() == tmp_path / "env-cache"
    path = Path(resolve_model_path(TINY_ARITHMETIC, tiny=MICRO))
    assert path.parent == tmp_path / "env-cache" / "models"
    monkeypatch.delenv("ADARL_CACHE_DIR")
    assert default_cache_dir() == Path.home() / ".cache" / "adarl"


def test_warm_start_lowers_the_answer_loss() -> None:
    tokenizer = build_char_tokenizer()
    model = tiny.build_tiny_qwen2(dataclasses.replace(MICRO, hidden_size=64), tokenizer)
    pairs = [(f"{a}+{b}=", str(a + b)) for a in range(10) for b in range(10)]
    stats = tiny.warm_start(
        model,
        tokenizer,
        pairs,
        steps=60,
        batch_size=32,
        learning_rate=3e-3,
        weight_decay=0.0,
        seed=0,
    )
    # Uniform guessing over the 88-token vocabulary costs log(88) = 4.48 nats per token.
    assert stats.initial_loss > 4.0
    assert stats.final_loss < 2.5
    assert not model.training


def test_warm_start_rejects_sequences_longer_than_the_model() -> None:
    tokenizer = build_char_tokenizer()
    model = tiny.build_tiny_qwen2(MICRO, tokenizer)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        tiny.warm_start(
            model,
            tokenizer,
            [("1+" * 40 + "1=", "41")],
            steps=1,
            batch_size=1,
            learning_rate=1e-3,
            weight_decay=0.0,
            seed=0,
        )


def test_any_hf_directory_loads_the_same_way(tmp_path: Path) -> None:
    tokenizer = build_char_tokenizer()
    model = tiny.build_tiny_qwen2(MICRO, tokenizer)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    policy = load_policy(str(tmp_path))
    assert policy.path == str(tmp_path)
    assert isinstance(policy.model, Qwen2ForCausalLM)
    assert not policy.model.training
    # The char tokenizer next to a Qwen2 config still loads as itself and keeps spaces.
    assert isinstance(policy.tokenizer, PreTrainedTokenizerFast)
    text = "Hint: 1 + 2 = 3"
    assert (
        policy.tokenizer.decode(policy.tokenizer(text)["input_ids"], skip_special_tokens=True)
        == text
    )
    assert load_tokenizer(str(tmp_path))(text)["input_ids"] == tokenizer(text)["input_ids"]


def test_build_policy_from_config(tmp_path: Path) -> None:
    config = ModelConfig(cache_dir=str(tmp_path), tiny=MICRO)
    policy = build_policy(config)
    assert Path(policy.path).parent == tmp_path / "models"
    assert policy.model.config.hidden_size == MICRO.hidden_size
    assert next(policy.model.parameters()).dtype == torch.float32


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name_or_path": ""}, "model.name_or_path is empty"),
        ({"name_or_path": "adarl/nope"}, "not a built-in model"),
        ({"tiny": TinyModelConfig(hidden_size=130)}, "divisible"),
        ({"tiny": TinyModelConfig(num_key_value_heads=3)}, "num_key_value_heads"),
        ({"tiny": TinyModelConfig(sft_steps=-1)}, "sft_steps"),
    ],
)
def test_model_config_validation(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(ModelConfig(), **change).validate()


def test_other_names_pass_through_unchanged(tmp_path: Path) -> None:
    assert loading.resolve_model_path("some/hub-model", cache_dir=tmp_path) == "some/hub-model"


def test_builtin_tokenizer_needs_no_model_build(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ADARL_CACHE_DIR", str(tmp_path))
    tokenizer = load_tokenizer(TINY_ARITHMETIC)
    assert tokenizer("1 2")["input_ids"] == build_char_tokenizer()("1 2")["input_ids"]
    assert not (tmp_path / "models").exists()


def test_auxiliary_pairs_are_trained_alongside_the_task_pairs() -> None:
    tokenizer = build_char_tokenizer()
    config = dataclasses.replace(MICRO, hidden_size=64)
    pairs = [(f"{a}+{b}=", str(a + b)) for a in range(10) for b in range(10)]
    # An auxiliary format the task pairs never show: reverse two digits after a marker.
    aux = [(f"r{a}{b}:", f"{b}{a}") for a in range(10) for b in range(10)]
    too_long = [("r" * 70 + ":", "1")]  # longer than the model: left out, counted

    def train(auxiliary):
        model = tiny.build_tiny_qwen2(config, tokenizer)
        stats = tiny.warm_start(
            model,
            tokenizer,
            pairs,
            steps=60,
            batch_size=32,
            learning_rate=3e-3,
            weight_decay=0.0,
            seed=0,
            auxiliary=auxiliary,
        )
        return model, stats

    plain_model, plain = train(())
    with_aux_model, with_aux = train([tiny.AuxiliaryPairs("reverse", aux + too_long, 16)])
    assert plain.auxiliary == {}
    assert with_aux.auxiliary["reverse"]["examples"] == 100
    assert with_aux.auxiliary["reverse"]["too_long"] == 1
    assert with_aux.auxiliary["reverse"]["final_loss"] < 2.5  # learned, from ~4.5
    # The auxiliary format was learned: its answer loss is far lower than without it.
    batch = tiny._collate(tiny.encode_sft_pairs(tokenizer, aux), tokenizer.pad_token_id)
    with torch.no_grad():
        loss_with = with_aux_model(
            input_ids=batch[0], attention_mask=batch[1], labels=batch[2]
        ).loss
        loss_without = plain_model(
            input_ids=batch[0], attention_mask=batch[1], labels=batch[2]
        ).loss
    assert loss_with < loss_without - 1.0
    # The task pairs were drawn in the same order: the first step's task loss is identical.
    assert with_aux.initial_loss == plain.initial_loss


def test_an_empty_auxiliary_set_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one pair"):
        tiny.AuxiliaryPairs("hints", [], 4)
    with pytest.raises(ValueError, match="batch_size >= 1"):
        tiny.AuxiliaryPairs("hints", [("a", "b")], 0)


def test_the_builtin_learns_the_hint_formats(tmp_path: Path) -> None:
    path = Path(resolve_model_path(TINY_ARITHMETIC, cache_dir=tmp_path, tiny=MICRO))
    hints = json.loads((path / "adarl_build.json").read_text())["warm_start"]["auxiliary"]
    # MICRO has 64 positions: short hint-mode rows fit, the longest do not.
    assert hints["hint_mode"]["examples"] > 0
    assert hints["hint_mode"]["too_long"] > 0


def test_a_model_built_on_the_spot_is_written_without_a_library_progress_bar(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from transformers.utils import logging as hf_logging

    tokenizer = build_char_tokenizer()
    tiny.save_quietly(tiny.build_tiny_qwen2(MICRO, tokenizer), tokenizer, tmp_path / "m")
    assert "Writing model shards" not in capfd.readouterr().err  # transformers' tqdm bar
    assert (tmp_path / "m" / "model.safetensors").is_file()
    assert hf_logging.is_progress_bar_enabled()  # restored for everything else
