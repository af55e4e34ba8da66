"""A byte-level BPE tokenizer with a ChatML chat template, trained locally (no model hub).

The tokenizer of the built-in mid-size model (`adarl/mid-math`, adarl/models/mid.py). It is
trained with the `tokenizers` library on a corpus generated here from a fixed seed (math word
problems, arithmetic, LaTeX, the instruction phrases of math RL recipes), so every build has the
same merges and ids without downloading anything. Its layout mirrors Qwen2.5-Math's tokenizer:
byte-level pre-tokenisation (any text round-trips), no `<bos>`, `<|endoftext|>` as eos and pad,
and a chat template that closes turns with `<|im_end|>`, a special token that is not the eos
(so the codec must find the end-of-turn token itself: adarl/rollout/codec.py).

Load a saved copy with `adarl.models.loading.load_tokenizer` (the plain fast class), never
`AutoTokenizer` next to a Qwen2 `config.json` (it would swap in Qwen2's own tokenizer class).
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

END_OF_TEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS: tuple[str, ...] = (END_OF_TEXT, IM_START, IM_END)
VOCAB_SIZE = 4096
CORPUS_SEED = 0
CORPUS_LINES = 6000

# ChatML, as Qwen2.5's templates write it: one `<|im_start|>role\ncontent<|im_end|>\n` per turn,
# then the assistant header when a generation prompt is asked for.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_WORD_TEXT = (
    "the a an of to and in is are was be by for with that this it as on at from or which "
    "find compute determine evaluate simplify solve prove show let suppose given if then "
    "what how many much value number numbers integer integers real positive negative sum "
    "product difference quotient remainder divisor divisible prime factor factors multiple "
    "equation equations function functions polynomial root roots solution solutions answer "
    "triangle circle square rectangle area perimeter radius diameter angle angles side sides "
    "length width height volume point points line lines slope intercept coordinate plane "
    "probability expected random chosen choose ways arrange sequence term terms series "
    "first second third last next each every all some least greatest smallest largest "
    "step think reason final therefore thus so because since hence we have get obtain "
    "please put your within boxed output following problem question minimal possible "
    "equal equals less greater than twice half times more fewer total average mean median"
)
_WORDS = tuple(_WORD_TEXT.split(" "))
_INSTRUCTIONS = (
    "Please reason step by step, and put your final answer within \\boxed{}.",
    "Let's think step by step and output the final answer within \\boxed{}.",
    "Please put your final answer within \\boxed{}.",
)
_LATEX = ("\\frac{", "\\sqrt{", "\\cdot", "\\times", "\\le", "\\ge", "\\pi", "^2", "^{", "_{")


def _corpus_lines(seed: int = CORPUS_SEED, lines: int = CORPUS_LINES) -> Iterator[str]:
    """Deterministic training text for the BPE merges (a seeded mix of the parts above)."""
    rng = random.Random(seed)
    for _ in range(lines):
        kind = rng.randrange(5)
        if kind == 0:
            a, b = rng.randrange(1000), rng.randrange(1, 1000)
            op = rng.choice("+-*/")
            yield f"What is {a} {op} {b}? The answer is \\boxed{{{a + b}}}."
        elif kind == 1:
            words = " ".join(rng.choice(_WORDS) for _ in range(rng.randrange(6, 20)))
            yield words.capitalize() + rng.choice(".?:")
        elif kind == 2:
            yield rng.choice(_INSTRUCTIONS)
        elif kind == 3:
            parts = [rng.choice(_LATEX) + str(rng.randrange(100)) + "}" for _ in range(3)]
            yield f"Simplify ${' + '.join(parts)}$ and find $x$ such that {rng.randrange(50)}x = y."
        else:
            yield f"{IM_START}user\n{rng.choice(_WORDS)} {rng.randrange(100)}{IM_END}\n"


def build_bpe_tokenizer() -> PreTrainedTokenizerFast:
    """The mid-size model's tokenizer; deterministic, so every build has the same ids."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(_corpus_lines(), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=END_OF_TEXT,
        pad_token=END_OF_TEXT,
        additional_special_tokens=[IM_START, IM_END],
        chat_template=CHAT_TEMPLATE,
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=1 << 16,
    )
