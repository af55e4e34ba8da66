"""A character-level tokenizer for the built-in tasks, built locally (no model hub).

One token per character: digits, arithmetic symbols, letters and a little punctuation for hints,
plus `<pad>`, `<bos>`, `<eos>`, `<unk>`. Encoding with special tokens prepends `<bos>`; decoding
fuses characters back together without separators.

Load a saved copy with `load_char_tokenizer` (or `PreTrainedTokenizerFast.from_pretrained`), never
`AutoTokenizer`: saved next to a Qwen2 `config.json`, `AutoTokenizer` resolves the model's own
tokenizer class, which re-normalises text and drops spaces (measured, see docs/ENV notes).
"""

from __future__ import annotations

import string
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

PAD_TOKEN = "<pad>"
BOS_TOKEN = "<bos>"
EOS_TOKEN = "<eos>"
UNK_TOKEN = "<unk>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, UNK_TOKEN)

# Order is part of the format: token ids are positions in this string (after the specials), so
# appending characters keeps old ids valid; never reorder.
CHARACTERS: str = (
    string.digits + "+-*/=()" + " .,:;?!'\"<>[]%^" + string.ascii_lowercase + string.ascii_uppercase
)


def char_vocab() -> dict[str, int]:
    """Token → id: the four special tokens first (pad = 0), then one id per character."""
    tokens = [*SPECIAL_TOKENS, *CHARACTERS]
    if len(set(tokens)) != len(tokens):
        raise AssertionError("duplicate character in the char vocabulary")
    return {token: index for index, token in enumerate(tokens)}


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """The character tokenizer; deterministic, so every build has the same ids."""
    # "." leaves a newline unmatched: the built-in task has none, and its ids stay as they were.
    return _char_tokenizer(char_vocab(), piece=".")


def build_task_char_tokenizer(characters: str) -> PreTrainedTokenizerFast:
    """A character tokenizer whose vocabulary is the special tokens, then `characters` (each
    distinct one once, in code-point order): the vocabulary of a task's own text
    (adarl/models/task_warm_start.py). A character outside it, such as one that appears only in
    held-out prompts, encodes as `<unk>`. Every character is its own piece, newlines included."""
    tokens = [*SPECIAL_TOKENS, *sorted(set(characters) - set(SPECIAL_TOKENS))]
    # [\s\S], not ".": Oniguruma's "." does not match a newline, which would leave "\n\n" as one
    # unknown piece.
    return _char_tokenizer({token: index for index, token in enumerate(tokens)}, piece=r"[\s\S]")


def _char_tokenizer(vocab: dict[str, int], *, piece: str) -> PreTrainedTokenizerFast:
    """Every match of `piece` (one character) is its own token; `<bos>` starts every encoding."""
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK_TOKEN))
    # Each character its own piece, spaces included ("isolated" keeps the matched char).
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(piece), behavior="isolated")
    backend.decoder = decoders.Fuse()
    backend.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A",
        pair=f"{BOS_TOKEN} $A $B",
        special_tokens=[(BOS_TOKEN, vocab[BOS_TOKEN])],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD_TOKEN,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        padding_side="left",  # generation pads on the left so every prompt ends at the same column
        clean_up_tokenization_spaces=False,
        model_max_length=1 << 16,
    )


def load_char_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    """Load a tokenizer saved by `build_char_tokenizer().save_pretrained(path)`."""
    return PreTrainedTokenizerFast.from_pretrained(str(path))
