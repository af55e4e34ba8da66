import dataclasses

import pytest

from adarl.config.rollout import RolloutConfig


def test_defaults_are_valid_and_give_sampling_params() -> None:
    config = RolloutConfig()
    config.validate()
    sampling = config.sampling_params(stop_token_ids=(2,))
    assert (sampling.temperature, sampling.max_new_tokens, sampling.stop_token_ids) == (
        1.0,
        16,
        (2,),
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"engine": "sglang"}, "rollout.engine must be one of"),
        ({"dtype": "int8"}, "rollout.dtype"),
        ({"max_num_seqs": 0}, "rollout.max_num_seqs"),
        ({"max_samples_per_call": 0}, "rollout.max_samples_per_call"),
        ({"kv_cache_memory_bytes": 0}, "rollout.kv_cache_memory_bytes"),
        ({"gpu_memory_utilization": 1.5}, "rollout.gpu_memory_utilization"),
        ({"temperature": -1.0}, "rollout.temperature"),
        ({"temperature": 0.0}, r"rollout.temperature=0.0: training rollouts need a temperature"),
        ({"top_p": 0.0}, "rollout.top_p"),
        ({"top_k": -1}, "rollout.top_k"),
        ({"top_p": 0.9}, r"rollout.top_p=0.9, rollout.top_k=0: training rollouts cannot be"),
        ({"top_k": 5}, r"rollout.top_p=1.0, rollout.top_k=5: .*set rollout.top_p=1.0 and"),
        ({"max_new_tokens": 0}, "rollout.max_new_tokens must be >= 1"),
        ({"max_new_tokens": 256, "max_model_len": 256}, "leaves no room for a prompt"),
    ],
)
def test_bad_values_name_the_key(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(RolloutConfig(), **change).validate()


def test_a_lower_temperature_is_accepted() -> None:
    # The learner applies the same temperature, so any T > 0 trains the policy that sampled.
    config = dataclasses.replace(RolloutConfig(), temperature=0.7)
    config.validate()
    assert config.sampling_params().temperature == 0.7
