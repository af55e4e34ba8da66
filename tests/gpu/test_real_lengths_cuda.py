"""Real-model code paths on CUDA (issue 15.7). Skipped without CUDA.

1. The HF engine samples in bf16 on a GPU, and its log-probs are the distribution it sampled.
2. The DeepSpeed learner trains on a GPU in bf16 with ZeRO-3 (partitioned loading straight onto
   the device) and activation checkpointing, and scores like a plain bf16 model.
3. The weight broadcast streams bf16 CUDA buckets into an HF engine on a GPU: NCCL with two GPUs,
   gloo over CUDA tensors with one (NCCL cannot put two ranks on one GPU).
4. Chunked log-probs and entropy equal the full-logits ones on CUDA (fp32: 1e-5; bf16: within
   bf16's rounding), values and gradients.

Run: `pytest tests/gpu -q` on a machine with a GPU (vLLM is not needed).
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def mid_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The mid-size built-in (26M parameters, BPE vocabulary, fp32 checkpoint)."""
    from adarl.config.model import MID_MATH
    from adarl.models.loading import resolve_model_path

    return resolve_model_path(MID_MATH, cache_dir=tmp_path_factory.mktemp("cache"))


def _full_logits(
    model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits.float()
    logp = torch.log_softmax(logits[:, :-1], dim=-1)
    chosen = logp.gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    entropy = -(logp.exp() * logp).sum(-1)
    pad = torch.nn.functional.pad
    return pad(chosen, (1, 0)), pad(entropy, (1, 0))


@pytest.mark.parametrize(("dtype", "atol"), [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_chunked_logprobs_equal_full_logits_on_cuda(
    mid_dir: str, dtype: torch.dtype, atol: float
) -> None:
    from transformers import AutoModelForCausalLM

    from adarl.learner.logprobs import TokenScorer

    model = AutoModelForCausalLM.from_pretrained(mid_dir, dtype=dtype).cuda().eval()
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(3, model.config.vocab_size, (2, 1100), generator=generator).cuda()
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 900:] = 0
    mask = torch.zeros_like(input_ids, dtype=torch.bool)
    mask[:, 76:] = True
    mask &= attention_mask.bool()

    expected_logp, expected_entropy = _full_logits(model, input_ids, attention_mask)
    model.zero_grad()
    expected_logp[mask].sum().backward()
    expected_grad = model.lm_head.weight.grad.float().clone()
    model.zero_grad()
    logp, entropy = TokenScorer(model, chunk_tokens=256)(input_ids, attention_mask, mask)
    torch.testing.assert_close(logp[mask], expected_logp[mask].detach(), atol=atol, rtol=0)
    torch.testing.assert_close(entropy[mask], expected_entropy[mask].detach(), atol=atol, rtol=0)
    logp[mask].sum().backward()
    grad = model.lm_head.weight.grad.float()
    scale = expected_grad.abs().max()
    assert float((grad - expected_grad).abs().max() / scale) < (1e-4 if atol < 1e-3 else 5e-2)


def test_hf_engine_samples_in_bf16_on_cuda(mid_dir: str) -> None:
    from transformers import AutoModelForCausalLM

    from adarl.rollout.hf_engine import HFEngine
    from adarl.types import GenerationRequest, SamplingParams

    engine = HFEngine(model_path=mid_dir, dtype="bfloat16", device="cuda", max_model_len=2048)
    assert next(engine.model.parameters()).dtype == torch.bfloat16
    prompt = tuple(engine.tokenizer.encode("What is 2+3?", add_special_tokens=False))
    request = GenerationRequest(
        request_id="r",
        prompt_token_ids=prompt,
        num_samples=4,
        sampling=SamplingParams(temperature=1.0, max_new_tokens=512),
        seed=0,
    )
    (result,) = engine.generate([request])
    completions = result.completions
    assert len(completions) == 4 and max(len(c.token_ids) for c in completions) > 64
    # The reported log-probs are the sampling distribution's: a teacher-forced bf16 forward of
    # the same model agrees within bf16's rounding.
    model = AutoModelForCausalLM.from_pretrained(mid_dir, dtype=torch.bfloat16).cuda().eval()
    completion = completions[0]
    ids = torch.tensor([[*prompt, *completion.token_ids]]).cuda()
    with torch.no_grad():
        logp, _ = _full_logits(model, ids, torch.ones_like(ids))
    expected = logp[0, len(prompt) :].float().cpu()
    torch.testing.assert_close(torch.tensor(completion.logprobs), expected, atol=5e-2, rtol=0)


def test_deepspeed_learner_trains_bf16_zero3_on_cuda(mid_dir: str) -> None:
    pytest.importorskip("deepspeed")
    from transformers import AutoModelForCausalLM

    from adarl.learner import LearnerGroup
    from adarl.learner.synthetic import synthetic_train_batch

    batch = synthetic_train_batch(
        num_prompts=2,
        samples_per_prompt=2,
        prompt_length=(40, 80),
        response_length=(600, 1024),
        vocab_size=2000,
        seed=0,
    )
    torch.cuda.reset_peak_memory_stats()
    group = LearnerGroup(
        in_process=True,
        model_path=mid_dir,
        zero_stage=3,
        precision="bf16",
        learning_rate=1e-5,
        activation_checkpointing=True,
        logprob_chunk_tokens=512,
    )
    try:
        before = group.score(batch)
        plain = AutoModelForCausalLM.from_pretrained(mid_dir, dtype=torch.bfloat16).cuda().eval()
        ids, mask = batch.input_ids.cuda(), batch.attention_mask.cuda().long()
        with torch.no_grad():
            expected, _ = _full_logits(plain, ids, mask)
        real = batch.attention_mask.clone()
        real[:, 0] = False
        torch.testing.assert_close(before[real], expected.cpu()[real], atol=5e-2, rtol=0)
        result = group.train_step(batch)
        assert torch.isfinite(torch.tensor(result.grad_norm)) and result.grad_norm > 0
        weights = group.get_weights()
        assert {t.dtype for t in weights.values()} == {torch.bfloat16}
        assert (group.score(batch) - before)[batch.response_mask].abs().max() > 0
    finally:
        group.shutdown()
    print(f"peak GPU memory: {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB")


def _stream_member(rank: int, port: int, backend: str, model_dir: str, out_dir: str) -> None:
    """Rank 0 sends bf16 weights (the checkpoint + 1) from its GPU; rank 1 streams them into an
    HF engine on its GPU and saves what the engine holds."""
    from safetensors.torch import load_file

    from adarl.learner.weights import WeightInfo
    from adarl.rollout.hf_engine import HFEngine
    from adarl.weight_sync.broadcast import join_broadcast_group, receive_broadcast
    from adarl.weight_transport import WeightBroadcastSender, create_broadcast_group, plan_buckets

    device = torch.device("cuda", rank if torch.cuda.device_count() > 1 else 0)
    torch.cuda.set_device(device)
    sent = {
        name: (tensor + 1.0).to(torch.bfloat16)
        for name, tensor in load_file(f"{model_dir}/model.safetensors").items()
    }
    layouts = plan_buckets(
        [WeightInfo(n, tuple(t.shape), t.dtype) for n, t in sent.items()], 8 * 1024 * 1024
    )
    if rank == 0:
        group = create_broadcast_group(
            master_addr="127.0.0.1",
            master_port=port,
            rank=0,
            world_size=2,
            backend=backend,
            timeout_s=120,
        )
        sender = WeightBroadcastSender(group=group, device=device)
        on_device = {n: t.to(device) for n, t in sent.items()}
        for layout in layouts:
            sender.send(layout, on_device)
        return
    engine = HFEngine(model_path=model_dir, dtype="bfloat16", device=str(device))
    join_broadcast_group(engine, "gpu", "127.0.0.1", port, 1, 2, backend, 120.0, str(device))
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    assert receive_broadcast(engine, "gpu", 1, layouts) == 1
    rise = torch.cuda.max_memory_allocated(device) - base
    state = {k: v.cpu() for k, v in engine.model.state_dict().items()}
    torch.save({"state": state, "rise": rise}, Path(out_dir) / "engine.pt")


@pytest.mark.parametrize("backend", ["nccl", "gloo"])
def test_broadcast_streams_bf16_buckets_into_a_cuda_engine(
    backend: str, mid_dir: str, tmp_path: Path
) -> None:
    if backend == "nccl" and torch.cuda.device_count() < 2:
        pytest.skip("NCCL needs a distinct GPU per rank; this machine has one")
    import torch.multiprocessing as mp
    from safetensors.torch import load_file

    mp.spawn(
        _stream_member,
        args=(_free_port(), backend, mid_dir, str(tmp_path)),
        nprocs=2,
        join=True,
    )
    saved = torch.load(tmp_path / "engine.pt", weights_only=True)
    checkpoint = load_file(f"{mid_dir}/model.safetensors")
    for name, tensor in checkpoint.items():
        assert torch.equal(saved["state"][name], (tensor + 1.0).to(torch.bfloat16)), name
    model_bytes = sum(t.numel() * 2 for t in checkpoint.values())
    # Streamed: the engine's GPU memory rose by about a bucket (8 MiB), never a model copy.
    assert saved["rise"] < model_bytes / 2, (saved["rise"], model_bytes)
