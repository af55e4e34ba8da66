"""ZeRO-3 learners load a local checkpoint partitioned (`load_partitioned`): built under
`deepspeed.zero.Init`, filled module by module. The result must be exactly the checkpoint, with
the dtypes a plain `from_pretrained` gives (bf16 parameters, fp32 rotary buffers), tied weights
filled once, and a checkpoint the loader cannot fill refused by name. Peak memory per rank is
measured by `python -m adarl.bench scaling`, not here."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

from adarl.learner import LearnerGroup
from adarl.learner.loading import checkpoint_files
from adarl.models.tokenizer import build_char_tokenizer

from .conftest import save_tiny_policy, small_batch


def _load(path: str, *, zero_stage: int, precision: str) -> tuple[dict, torch.Tensor, dict]:
    """(weights, scores of a fixed batch, buffer dtypes) of an in-process learner."""
    group = LearnerGroup(
        in_process=True, model_path=path, zero_stage=zero_stage, precision=precision
    )
    try:
        learner = group._handles[0]._worker.obj  # the rank itself, to read its buffers
        buffers = {name: b.dtype for name, b in learner.module.named_buffers()}
        partitioned = [hasattr(p, "ds_tensor") for p in learner.module.parameters()]
        assert all(partitioned) == (zero_stage == 3)
        return group.get_weights(), group.score(small_batch(5)), buffers
    finally:
        group.shutdown()


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_partitioned_load_is_the_checkpoint(tmp_path: Path, precision: str) -> None:
    path = save_tiny_policy(tmp_path / "policy")
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    reference = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    weights, scores, buffers = _load(path, zero_stage=3, precision=precision)
    expected = reference.state_dict()
    assert weights.keys() == expected.keys()
    for name, tensor in weights.items():
        assert tensor.dtype == dtype, name
        assert torch.equal(tensor, expected[name]), name
    # As from_pretrained: rotary frequencies stay fp32 under bf16 (ZeRO's dtype override would
    # have rounded them and moved every log-prob).
    assert buffers == {name: b.dtype for name, b in reference.named_buffers()}
    assert all(d == torch.float32 for d in buffers.values())
    _, unpartitioned_scores, _ = _load(path, zero_stage=2, precision=precision)
    torch.testing.assert_close(scores, unpartitioned_scores, rtol=0, atol=1e-6)


@pytest.mark.slow
def test_tied_embeddings_are_filled_once(tmp_path: Path) -> None:
    tokenizer = build_char_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )
    torch.manual_seed(3)
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    assert "lm_head.weight" not in load_file(tmp_path / "model.safetensors")  # tied: saved once
    weights, _, _ = _load(str(tmp_path), zero_stage=3, precision="fp32")
    embeddings = model.get_input_embeddings().weight.detach()
    assert torch.equal(weights["model.embed_tokens.weight"], embeddings)
    assert "lm_head.weight" not in weights or torch.equal(weights["lm_head.weight"], embeddings)


@pytest.mark.slow
def test_a_checkpoint_missing_a_tensor_is_refused_by_name(tmp_path: Path) -> None:
    path = Path(save_tiny_policy(tmp_path / "policy"))
    tensors = load_file(path / "model.safetensors")
    del tensors["model.norm.weight"]
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"model\.norm\.weight.*learner\.zero_stage=2"):
        LearnerGroup(in_process=True, model_path=str(path), zero_stage=3)


def test_only_local_safetensors_directories_load_partitioned(tmp_path: Path) -> None:
    assert checkpoint_files("Qwen/Qwen2.5-Math-1.5B") == []  # a hub name: loaded whole
    assert checkpoint_files(str(tmp_path)) == []
    path = save_tiny_policy(tmp_path / "policy")
    assert [f.name for f in checkpoint_files(path)] == ["model.safetensors"]


def _rank(rank: int, world_size: int, port: int, path: str, out: str) -> None:
    """One ZeRO-3 rank: set up (loading partitioned), gather every weight, rank 0 saves them."""
    from adarl.learner.learner import Learner

    torch.set_num_threads(1)
    learner = Learner(model_path=path, rank=rank, world_size=world_size, zero_stage=3)
    learner.setup(master_addr="127.0.0.1", master_port=port)
    try:
        shares = {n: int(p.ds_tensor.numel()) for n, p in learner.module.named_parameters()}
        weights = learner.gather_weights([info.name for info in learner.weight_infos()])
        torch.save({"weights": weights, "shares": shares}, f"{out}/rank{rank}.pt")
        # No rank tears its gloo group down while a peer is still finishing the gather (once in
        # a full suite, a rank exiting early aborted with "terminate called without an active
        # exception").
        torch.distributed.barrier()
    finally:
        learner.close()


@pytest.mark.slow
def test_three_ranks_each_read_their_own_share(tmp_path: Path) -> None:
    """3 ranks (most tensors do not split evenly: the last share is padded): each rank holds
    about a third of every parameter, and together they hold exactly the checkpoint."""
    import torch.multiprocessing as mp

    from adarl.learner.process_group import free_port

    path = save_tiny_policy(tmp_path / "policy")
    mp.spawn(_rank, args=(3, free_port(), path, str(tmp_path)), nprocs=3, join=True)
    expected = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).state_dict()
    gathered = torch.load(tmp_path / "rank0.pt", weights_only=True)
    assert gathered["weights"].keys() == expected.keys()
    for name, tensor in gathered["weights"].items():
        assert torch.equal(tensor, expected[name]), name
    uneven = [n for n, t in expected.items() if t.numel() % 3]
    assert uneven  # the padded tail of a share is exercised
    for rank in range(3):
        shares = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)["shares"]
        for name, share in shares.items():
            assert share == -(-expected[name].numel() // 3), name
