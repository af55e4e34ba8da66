"""The resource plan places the hint generator and the `model` source's hint engine with the
resources configured for them (cluster.cpus_for_hint_generator, cpus_/gpus_for_hint_engine),
and refuses, naming the keys, a cluster that cannot hold them."""

from __future__ import annotations

import pytest

from adarl.cluster import NodeResources, plan_resources
from adarl.config.run import ClusterConfig

BASE = {
    "rollout_engines": 1,
    "cpus_per_engine": 1.0,
    "gpus_per_engine": 1.0,
    "learners": 1,
    "cpus_per_learner": 1.0,
    "gpus_per_learner": 1.0,
    "cpus_for_allocator": 0.0,
}


def _nodes(*capacity: tuple[float, float]) -> list[NodeResources]:
    return [NodeResources(f"node{i}", f"10.0.0.{i}", c, g) for i, (c, g) in enumerate(capacity)]


def test_the_hint_engine_gets_its_own_resources_on_a_node_that_has_them() -> None:
    # Node 0 has room for the policy's engine and learner; only node 1 has a GPU left after them.
    plan = plan_resources(
        **BASE,
        nodes=_nodes((4, 2), (4, 1)),
        hint_generator=True,
        cpus_for_hint_generator=0.25,
        hint_engines=1,
        cpus_for_hint_engine=2.0,
        gpus_for_hint_engine=0.5,
    )
    (engine,) = plan.of("hint_engine")
    assert (engine.num_cpus, engine.num_gpus) == (2.0, 0.5)
    (generator,) = plan.of("hint_generator")
    assert (generator.num_cpus, generator.num_gpus) == (0.25, 0.0)
    assert plan.gpus == 2.5 and plan.cpus == 4.25
    # Largest first: the two 1-GPU actors take one node each, the half-GPU engine the most room.
    gpus_left = {"node0": 2.0, "node1": 1.0}
    for actor in plan.actors:
        assert actor.node_id is not None
        gpus_left[actor.node_id] -= actor.num_gpus
    assert min(gpus_left.values()) >= 0


def test_without_hints_the_plan_is_unchanged() -> None:
    plan = plan_resources(**BASE, nodes=_nodes((4, 2)))
    assert not plan.of("hint_engine") and not plan.of("hint_generator")
    assert [a.role for a in plan.actors] == ["rollout_engine", "learner", "allocator"]


def test_a_hint_engine_the_cluster_cannot_hold_is_refused_naming_its_key() -> None:
    with pytest.raises(ValueError, match=r"needs 3 GPUs .*cluster\.gpus_for_hint_engine"):
        plan_resources(**BASE, nodes=_nodes((8, 2)), hint_engines=1, gpus_for_hint_engine=1.0)
    with pytest.raises(ValueError, match=r"needs 5 CPUs .*cluster\.cpus_for_hint_engine"):
        plan_resources(**BASE, nodes=_nodes((4, 4)), hint_engines=1, cpus_for_hint_engine=3.0)


def test_negative_hint_resources_are_refused_before_anything_starts() -> None:
    for key in ("cpus_for_hint_generator", "cpus_for_hint_engine", "gpus_for_hint_engine"):
        with pytest.raises(ValueError, match=rf"cluster\.{key}=-1 must be >= 0"):
            ClusterConfig(**{key: -1}).validate()
