import math

import pytest
from transformers import PreTrainedTokenizerFast

from adarl.models.tokenizer import build_char_tokenizer
from adarl.rollout.base import RolloutEngine
from adarl.rollout.fake import FakeEngine, FakePrompt
from adarl.types import FinishReason, GenerationRequest, SamplingParams

SCRIPT = {
    "12+7-3=": FakePrompt(pass_rate=0.3, answer="16"),
    "2+2=": FakePrompt(pass_rate=1.0, answer="4"),
    "99*99=": FakePrompt(pass_rate=0.0, answer="9801"),
}


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    return build_char_tokenizer()


def request(
    tokenizer: PreTrainedTokenizerFast,
    prompt: str,
    *,
    n: int,
    seed: int = 0,
    temperature: float = 1.0,
    max_new_tokens: int = 8,
) -> GenerationRequest:
    return GenerationRequest(
        request_id=f"{prompt}/{seed}",
        prompt_token_ids=tuple(tokenizer(prompt)["input_ids"]),
        num_samples=n,
        sampling=SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens),
        seed=seed,
    )


def test_implements_the_protocol(tokenizer: PreTrainedTokenizerFast) -> None:
    assert isinstance(FakeEngine(tokenizer=tokenizer, script=SCRIPT), RolloutEngine)


def test_empirical_pass_rate_matches_script(tokenizer: PreTrainedTokenizerFast) -> None:
    engine = FakeEngine(tokenizer=tokenizer, script=SCRIPT, seed=1)
    n = 4000
    [result] = engine.generate([request(tokenizer, "12+7-3=", n=n)])
    correct = sum(c.text == "16" for c in result.completions)
    # Binomial(4000, 0.3): standard error sqrt(0.3*0.7/4000) = 0.0072; allow 4 SE.
    assert abs(correct / n - 0.3) < 4 * 0.0072
    wrong = {c.text for c in result.completions if c.text != "16"}
    assert len(wrong) == 3 and all(w.lstrip("-").isdigit() for w in wrong)
    assert all(c.finish_reason is FinishReason.STOP for c in result.completions)
    assert all(c.token_ids[-1] == tokenizer.eos_token_id for c in result.completions)


def test_extreme_pass_rates_are_exact(tokenizer: PreTrainedTokenizerFast) -> None:
    engine = FakeEngine(tokenizer=tokenizer, script=SCRIPT)
    easy, hard = engine.generate(
        [request(tokenizer, "2+2=", n=64), request(tokenizer, "99*99=", n=64)]
    )
    assert all(c.text == "4" for c in easy.completions)
    assert not any(c.text == "9801" for c in hard.completions)


def test_seeded_and_reproducible(tokenizer: PreTrainedTokenizerFast) -> None:
    first = FakeEngine(tokenizer=tokenizer, script=SCRIPT, seed=5)
    second = FakeEngine(tokenizer=tokenizer, script=SCRIPT, seed=5)
    req = request(tokenizer, "12+7-3=", n=32, seed=11)
    assert first.generate([req]) == second.generate([req])
    other = first.generate([request(tokenizer, "12+7-3=", n=32, seed=12)])
    assert other[0].completions != first.generate([req])[0].completions


def test_logprobs_are_the_scripted_policy_and_match_score(
    tokenizer: PreTrainedTokenizerFast,
) -> None:
    engine = FakeEngine(tokenizer=tokenizer, script=SCRIPT, num_wrong_answers=3)
    req = request(tokenizer, "12+7-3=", n=64)
    [result] = engine.generate([req])
    for completion in result.completions:
        expected = math.log(0.3) if completion.text == "16" else math.log(0.7 / 3)
        assert sum(completion.logprobs) == pytest.approx(expected, abs=1e-12)
    scored = engine.score(
        [req.prompt_token_ids] * len(result.completions),
        [c.token_ids for c in result.completions],
    )
    assert scored == [list(c.logprobs) for c in result.completions]


def test_the_script_is_the_sampling_distribution_at_every_temperature(
    tokenizer: PreTrainedTokenizerFast,
) -> None:
    # The fake has no logits to scale: sampling at T = 0.7 draws the script, so its log-probs
    # and its score at 0.7 are the script's, and a greedy "distribution" cannot be scored.
    engine = FakeEngine(tokenizer=tokenizer, script=SCRIPT, num_wrong_answers=3)
    req = request(tokenizer, "12+7-3=", n=16, temperature=0.7)
    [result] = engine.generate([req])
    prompts = [req.prompt_token_ids] * len(result.completions)
    responses = [c.token_ids for c in result.completions]
    scored = engine.score(prompts, responses, temperature=0.7)
    assert scored == [list(c.logprobs) for c in result.completions]
    with pytest.raises(ValueError, match="temperature must be > 0"):
        engine.score(prompts, responses, temperature=0.0)


def test_truncation_is_flagged(tokenizer: PreTrainedTokenizerFast) -> None:
    engine = FakeEngine(tokenizer=tokenizer, script=SCRIPT)
    [result] = engine.generate([request(tokenizer, "99*99=", n=8, max_new_tokens=2)])
    for completion in result.completions:
        assert completion.truncated and len(completion.token_ids) == 2


def test_greedy_picks_the_most_probable_response(tokenizer: PreTrainedTokenizerFast) -> None:
    engine = FakeEngine(tokenizer=tokenizer, script=SCRIPT)
    [result] = engine.generate([request(tokenizer, "12+7-3=", n=4, temperature=0.0)])
    # 0.3 > 0.7 / 3: the answer is the single most probable response.
    assert {c.text for c in result.completions} == {"16"}


def test_weight_version_tags_results(tokenizer: PreTrainedTokenizerFast) -> None:
    engine = FakeEngine(tokenizer=tokenizer, script=SCRIPT)
    assert engine.weight_version() == 0
    engine.update_weights(7, {})
    assert engine.weight_version() == 7
    [result] = engine.generate([request(tokenizer, "2+2=", n=1)])
    assert result.weight_version == 7


def test_unknown_prompt_names_the_prompt_and_the_fix(tokenizer: PreTrainedTokenizerFast) -> None:
    engine = FakeEngine(tokenizer=tokenizer, script=SCRIPT)
    with pytest.raises(KeyError, match=r"no script for prompt '1\+1='.*add a FakePrompt"):
        engine.generate([request(tokenizer, "1+1=", n=1)])


def test_invalid_script_is_rejected() -> None:
    with pytest.raises(ValueError, match="pass_rate"):
        FakePrompt(pass_rate=1.5, answer="1")
