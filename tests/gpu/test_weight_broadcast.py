"""GPU weight sync (adarl/weight_sync/broadcast.py) with CUDA tensors. Skipped without CUDA.

1. Buckets pack and unpack CUDA tensors of mixed dtypes exactly.
2. A sender process (learner rank 0's role) broadcasts bucketed weights to a receiver process
   (an engine's role): with NCCL when there are two GPUs (NCCL needs one GPU per rank), with gloo
   over CUDA tensors otherwise. Needs only torch.
3. With Ray and DeepSpeed installed: a learner actor on a GPU steps, `BroadcastWeightSync` pushes
   to an HF engine actor on a GPU, and the engine scores fixed sequences like the learner.

Run: `pytest tests/gpu -q` on a machine with a GPU.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


class _Spec:
    def __init__(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> None:
        self.name, self.shape, self.dtype = name, shape, dtype

    @property
    def num_bytes(self) -> int:
        numel = 1
        for size in self.shape:
            numel *= size
        return numel * torch.empty((), dtype=self.dtype).element_size()


SPECS = [
    _Spec("model.embed_tokens.weight", (1000, 64), torch.bfloat16),
    _Spec("model.norm.weight", (64,), torch.float32),
    _Spec("model.layers.0.mlp.up_proj.weight", (320, 64), torch.bfloat16),  # 40 KB: past the 1st
    _Spec("lm_head.weight", (1000, 64), torch.float32),  # 256 KB: alone in its bucket
]
# Buckets: embed + norm (128,256 bytes, two dtypes), up_proj, lm_head.
BUCKET_BYTES = 160 * 1024


def _weights(device: str) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return {
        s.name: torch.randn(s.shape, generator=generator).to(device=device, dtype=s.dtype)
        for s in SPECS
    }


def test_buckets_round_trip_cuda_tensors() -> None:
    from adarl.weight_transport import flatten_bucket, plan_buckets, unflatten_bucket

    weights = _weights("cuda")
    layouts = plan_buckets(SPECS, BUCKET_BYTES)
    assert len(layouts) == 3
    for layout in layouts:
        buffers = flatten_bucket(layout, weights, device=torch.device("cuda"))
        assert all(b.is_cuda for b in buffers)
        for name, tensor in unflatten_bucket(layout, buffers).items():
            assert torch.equal(tensor, weights[name])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _member(rank: int, port: int, backend: str, out_dir: str) -> None:
    """Rank 0 sends `_weights`, rank 1 receives them; rank 1 saves what it got."""
    from adarl.weight_transport import (
        WeightBroadcastReceiver,
        WeightBroadcastSender,
        create_broadcast_group,
        plan_buckets,
    )

    device = torch.device("cuda", rank if torch.cuda.device_count() > 1 else 0)
    torch.cuda.set_device(device)
    group = create_broadcast_group(
        master_addr="127.0.0.1",
        master_port=port,
        rank=rank,
        world_size=2,
        backend=backend,
        timeout_s=120,
    )
    layouts = plan_buckets(SPECS, BUCKET_BYTES)
    if rank == 0:
        sender = WeightBroadcastSender(group=group, device=device)
        weights = _weights(str(device))
        for layout in layouts:
            sender.send(layout, {name: weights[name] for name in layout.names})
    else:
        received = WeightBroadcastReceiver(group=group, device=device).receive(layouts)
        assert all(t.device == device for t in received.values())
        torch.save({k: v.cpu() for k, v in received.items()}, Path(out_dir) / "received.pt")


@pytest.mark.parametrize("backend", ["nccl", "gloo"])
def test_broadcast_between_processes(backend: str, tmp_path: Path) -> None:
    if backend == "nccl" and torch.cuda.device_count() < 2:
        pytest.skip("NCCL needs a distinct GPU per rank; this machine has one")
    import torch.multiprocessing as mp

    mp.spawn(_member, args=(_free_port(), backend, str(tmp_path)), nprocs=2, join=True)
    received = torch.load(tmp_path / "received.pt", weights_only=True)
    expected = _weights("cpu")
    assert received.keys() == expected.keys()
    for name, tensor in expected.items():
        assert received[name].dtype == tensor.dtype
        assert torch.equal(received[name], tensor), name


def test_learner_actor_to_hf_engine_actor_on_gpu(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    pytest.importorskip("deepspeed")
    pytest.importorskip("transformers")
    import ray

    from adarl.cluster import ensure_ray, spawn_actor
    from adarl.config.model import TinyModelConfig
    from adarl.learner import LearnerGroup
    from adarl.learner.synthetic import synthetic_train_batch
    from adarl.models.tiny import build_tiny_qwen2
    from adarl.models.tokenizer import build_char_tokenizer
    from adarl.rollout.hf_engine import HFEngine
    from adarl.weight_sync import BroadcastWeightSync

    tokenizer = build_char_tokenizer()
    build_tiny_qwen2(TinyModelConfig(), tokenizer).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    ensure_ray()
    two_gpus = torch.cuda.device_count() >= 2
    gpus_each = 1.0 if two_gpus else 0.5
    learners = LearnerGroup(
        num_learners=1,
        gpus_per_learner=gpus_each,
        cpus_per_learner=1,
        model_path=str(tmp_path),
        zero_stage=3,
        learning_rate=1e-2,
    )
    engine: Any = spawn_actor(
        HFEngine, num_cpus=1, num_gpus=gpus_each, model_path=str(tmp_path), device="cuda"
    )
    try:
        batch = synthetic_train_batch(
            num_prompts=4,
            samples_per_prompt=4,
            prompt_length=(4, 8),
            response_length=(4, 16),
            vocab_size=len(tokenizer),
            seed=0,
        )
        learners.train_step(batch)
        sync = BroadcastWeightSync(
            engines=[engine],
            bucket_size_bytes=256 * 1024,
            backend="nccl" if two_gpus else "gloo",  # NCCL cannot put two ranks on one GPU
            engine_device="cuda",
        )
        report = sync.push(learners)
        assert report.version == 1
        assert ray.get(engine.weight_version.remote()) == 1
        prompts, responses = [], []
        for row in range(batch.num_sequences):
            tokens = batch.input_ids[row][batch.attention_mask[row]].tolist()
            start = int(batch.response_mask[row].nonzero()[0])
            prompts.append(tokens[:start])
            responses.append(tokens[start:])
        engine_scores = ray.get(engine.score.remote(prompts, responses))
        learner_scores = learners.score(batch)
        for row, values in enumerate(engine_scores):
            start = len(prompts[row])
            expected = learner_scores[row, start : start + len(values)]
            # fp32 on GPU: kernels may differ between batch shapes (TF32 is off by default).
            torch.testing.assert_close(torch.tensor(values), expected, rtol=0, atol=1e-4)
    finally:
        learners.shutdown()
        ray.kill(engine)
