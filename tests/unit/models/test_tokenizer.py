from pathlib import Path

import pytest
from transformers import PreTrainedTokenizerFast

from adarl.models.tokenizer import (
    CHARACTERS,
    build_char_tokenizer,
    char_vocab,
    load_char_tokenizer,
)


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    return build_char_tokenizer()


def test_special_token_ids_are_fixed(tokenizer: PreTrainedTokenizerFast) -> None:
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (0, 1, 2)
    assert tokenizer.unk_token_id == 3
    assert len(tokenizer) == 4 + len(CHARACTERS)


def test_one_token_per_character_with_bos(tokenizer: PreTrainedTokenizerFast) -> None:
    vocab = char_vocab()
    ids = tokenizer("12+7-3=")["input_ids"]
    assert ids == [vocab["<bos>"]] + [vocab[c] for c in "12+7-3="]
    assert tokenizer.encode("12+7-3=", add_special_tokens=False) == ids[1:]


def test_round_trip_keeps_spaces_and_punctuation(tokenizer: PreTrainedTokenizerFast) -> None:
    text = "Hint: 12+7=19, then 19-3=16."
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids, skip_special_tokens=True) == text


def test_unknown_character_maps_to_unk(tokenizer: PreTrainedTokenizerFast) -> None:
    ids = tokenizer.encode("1~2", add_special_tokens=False)
    assert ids == [char_vocab()["1"], tokenizer.unk_token_id, char_vocab()["2"]]


def test_batch_padding_is_on_the_left(tokenizer: PreTrainedTokenizerFast) -> None:
    batch = tokenizer(["1+2=", "13+44="], padding=True)
    assert batch["input_ids"][0][:2] == [tokenizer.pad_token_id] * 2
    assert batch["attention_mask"][0] == [0, 0, 1, 1, 1, 1, 1]


def test_save_and_load_preserve_ids(tokenizer: PreTrainedTokenizerFast, tmp_path: Path) -> None:
    tokenizer.save_pretrained(tmp_path)
    loaded = load_char_tokenizer(tmp_path)
    text = "Hint: (12+7)*3 = 57"
    assert loaded(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert loaded.eos_token_id == tokenizer.eos_token_id
    assert loaded.padding_side == "left"
