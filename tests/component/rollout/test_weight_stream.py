"""The broadcast receiver streams buckets into the engine (adarl/weight_sync/broadcast.py).

A real gloo broadcast group of two members in this process (the sender on a thread, the engine's
end here) and a real HF engine of the tiny model: the engine loads exactly what was sent, bucket
k+1 is received only once bucket k's tensors were taken (no full extra copy is ever held), and
an engine that refuses the update still takes part in every bucket, so the sender is not left
waiting in a collective.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator

import pytest
import torch

from adarl.learner.process_group import free_port
from adarl.learner.weights import WeightInfo
from adarl.rollout.hf_engine import HFEngine
from adarl.weight_sync.broadcast import _RECEIVERS, join_broadcast_group, receive_broadcast
from adarl.weight_transport import (
    BucketLayout,
    WeightBroadcastSender,
    create_broadcast_group,
    plan_buckets,
)

TIMEOUT_S = 60.0


def _shifted(engine: HFEngine, shift: float) -> dict[str, torch.Tensor]:
    return {name: t.detach().clone() + shift for name, t in engine.model.state_dict().items()}


def _layouts(weights: dict[str, torch.Tensor], bucket_bytes: int) -> list[BucketLayout]:
    infos = [WeightInfo(n, tuple(t.shape), t.dtype) for n, t in weights.items()]
    return plan_buckets(infos, bucket_bytes)


def _with_sender(
    weights: dict[str, torch.Tensor],
    layouts: list[BucketLayout],
    engine: HFEngine,
    receive: Callable[[str], object],
) -> list[BaseException]:
    """Run `receive(group_name)` here while a sender thread broadcasts `weights`; returns the
    sender's errors (it must finish: a receiver that stops early would leave it waiting)."""
    port, name = free_port(), f"test-{uuid.uuid4().hex[:8]}"
    errors: list[BaseException] = []

    def send() -> None:
        try:
            group = create_broadcast_group(
                master_addr="127.0.0.1",
                master_port=port,
                rank=0,
                world_size=2,
                backend="gloo",
                timeout_s=TIMEOUT_S,
            )
            sender = WeightBroadcastSender(group=group, device=torch.device("cpu"))
            for layout in layouts:
                sender.send(layout, weights)
        except BaseException as error:  # reported to the test
            errors.append(error)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    join_broadcast_group(engine, name, "127.0.0.1", port, 1, 2, "gloo", TIMEOUT_S, "cpu")
    try:
        receive(name)
    finally:
        thread.join(timeout=TIMEOUT_S)
        assert not thread.is_alive(), "the sender is still waiting in a broadcast"
    return errors


@pytest.fixture
def engine(tiny_model_path: str) -> HFEngine:
    return HFEngine(model_path=tiny_model_path)


def test_engine_loads_the_stream_bucket_by_bucket(engine: HFEngine) -> None:
    weights = _shifted(engine, 0.5)
    layouts = _layouts(weights, bucket_bytes=64 * 1024)
    assert len(layouts) >= 4
    names = [n for layout in layouts for n in layout.names]
    received_at_each_tensor: list[int] = []

    def receive(group_name: str) -> None:
        receiver = _RECEIVERS[group_name]

        def watched() -> Iterator[tuple[str, torch.Tensor]]:
            for item in receiver.stream(layouts):
                received_at_each_tensor.append(receiver.buckets_received)
                yield item

        engine.load_weight_stream(7, names, watched())

    assert not _with_sender(weights, layouts, engine, receive)
    # Tensor j of bucket k is handed over when exactly k + 1 buckets have been received: the
    # engine copies each bucket in before the next one arrives (materialising would show
    # len(layouts) everywhere).
    assert received_at_each_tensor == [k + 1 for k, lay in enumerate(layouts) for _ in lay.names]
    assert engine.weight_version() == 7
    for name, tensor in engine.model.state_dict().items():
        torch.testing.assert_close(tensor, weights[name], rtol=0, atol=0)


def test_receive_broadcast_streams_into_the_engine(engine: HFEngine) -> None:
    weights = _shifted(engine, -0.25)
    layouts = _layouts(weights, bucket_bytes=32 * 1024)
    versions: list[int] = []
    errors = _with_sender(
        weights,
        layouts,
        engine,
        lambda name: versions.append(receive_broadcast(engine, name, 3, layouts)),
    )
    assert not errors and versions == [3]
    for name, tensor in engine.model.state_dict().items():
        torch.testing.assert_close(tensor, weights[name], rtol=0, atol=0)


def test_refused_update_still_drains_every_bucket(engine: HFEngine) -> None:
    """The engine refuses a weight it does not have before loading anything; the receiver
    still takes every bucket, so the sender finishes, and the engine's error is raised."""
    before = _shifted(engine, 0.0)
    weights = {**_shifted(engine, 1.0), "model.bogus.weight": torch.zeros(3, 3)}
    layouts = _layouts(weights, bucket_bytes=64 * 1024)
    raised: list[BaseException] = []

    def receive(name: str) -> None:
        try:
            receive_broadcast(engine, name, 5, layouts)
        except ValueError as error:
            raised.append(error)

    errors = _with_sender(weights, layouts, engine, receive)
    assert not errors
    assert len(raised) == 1 and "unexpected ['model.bogus.weight']" in str(raised[0])
    assert engine.weight_version() == 0
    for name, tensor in engine.model.state_dict().items():
        torch.testing.assert_close(tensor, before[name], rtol=0, atol=0)  # nothing loaded


def test_a_short_stream_is_an_error(engine: HFEngine) -> None:
    weights = _shifted(engine, 0.1)
    names = list(weights)
    short = iter(list(weights.items())[:-1])
    with pytest.raises(RuntimeError, match=r"yielded \d+ tensors but announced"):
        engine.load_weight_stream(2, names, short)
    assert engine.weight_version() == 0
