"""faults.* is validated naming the key, before any actor starts; the resource plan places every
actor on a node, spreading them, or says which keys to change (adarl/cluster.py)."""

from __future__ import annotations

import dataclasses
from concurrent.futures import Future

import pytest

from adarl.cluster import NodeResources, plan_resources, results_within
from adarl.config import AdarlConfig
from adarl.config.faults import FaultsConfig


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"engine_failure": "sometimes"}, r"faults\.engine_failure='sometimes'"),
        ({"max_engine_restarts": -1}, r"faults\.max_engine_restarts=-1 must be >= 0"),
        ({"max_engine_restarts": 0}, r"survives no engine death; set faults\.engine_failure=fail"),
        ({"rollout_wait_timeout_s": 0}, r"faults\.rollout_wait_timeout_s=0 must be > 0"),
        ({"learner_call_timeout_s": -5}, r"faults\.learner_call_timeout_s=-5"),
        ({"max_nonfinite_streak": 0}, r"faults\.max_nonfinite_streak=0 must be >= 1"),
    ],
)
def test_bad_fault_settings_name_the_key(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(FaultsConfig(), **change).validate()


def test_fail_needs_no_restarts_and_the_defaults_are_valid() -> None:
    FaultsConfig().validate()
    FaultsConfig(engine_failure="fail", max_engine_restarts=0).validate()


def test_engine_recovery_with_a_broadcast_weight_sync_is_refused() -> None:
    config = AdarlConfig()
    config.learner.weight_sync.method = "broadcast"
    with pytest.raises(ValueError, match=r"faults\.engine_failure=restart needs .*object_store"):
        config.validate()
    config.faults.engine_failure = "fail"
    config.validate()


def nodes(*cpus: float, gpus: float = 0.0) -> list[NodeResources]:
    return [NodeResources(f"node{i}", f"10.0.0.{i}", c, gpus) for i, c in enumerate(cpus)]


def placement(**kwargs) -> dict[str, str | None]:
    plan = plan_resources(**kwargs)
    return {f"{a.role}{a.index}": a.node_id for a in plan.actors}


BASE = dict(cpus_per_engine=1.0, gpus_per_engine=0.0, cpus_per_learner=1.0, gpus_per_learner=0.0)


def test_actors_spread_over_two_nodes() -> None:
    placed = placement(
        rollout_engines=1, learners=1, cpus_for_allocator=0.0, nodes=nodes(2, 2), **BASE
    )
    # Largest first, each on the node with the most room left: one node each.
    assert placed["learner0"] != placed["rollout_engine0"]
    assert {placed["learner0"], placed["rollout_engine0"]} == {"node0", "node1"}


def test_gpu_actors_go_where_the_gpus_are() -> None:
    cluster = [NodeResources("cpu", "a", 8, 0), NodeResources("gpu", "b", 8, 2)]
    plan = plan_resources(
        rollout_engines=2,
        cpus_per_engine=1,
        gpus_per_engine=0.5,
        learners=1,
        cpus_per_learner=1,
        gpus_per_learner=1,
        cpus_for_allocator=1,
        nodes=cluster,
    )
    assert {a.node_id for a in plan.actors if a.num_gpus} == {"gpu"}
    assert plan.of("allocator")[0].node_id == "cpu"  # the CPU node had the most room left


def test_a_plan_that_fits_in_total_but_not_per_node_says_so() -> None:
    with pytest.raises(ValueError, match=r"learner 0 needs 3 CPUs .* on one node"):
        plan_resources(
            rollout_engines=1,
            learners=1,
            cpus_for_allocator=0,
            nodes=nodes(2, 2),
            cpus_per_engine=1,
            gpus_per_engine=0,
            cpus_per_learner=3,
            gpus_per_learner=0,
        )
    with pytest.raises(ValueError, match=r"needs 5 CPUs .* the cluster has 4; lower"):
        plan_resources(
            rollout_engines=4, learners=1, cpus_for_allocator=0, nodes=nodes(2, 2), **BASE
        )


def test_one_anonymous_node_places_without_pinning() -> None:
    plan = plan_resources(
        rollout_engines=2,
        learners=1,
        cpus_for_allocator=0,
        available_cpus=3,
        available_gpus=0,
        **BASE,
    )
    assert all(a.node_id is None for a in plan.actors)
    assert plan.scheduling("rollout_engine") == [None, None]


def test_a_bounded_wait_names_what_it_waited_for_and_the_key() -> None:
    pending: Future[int] = Future()
    with pytest.raises(
        TimeoutError, match=r"the thing: 1 of 1 calls did not finish within 0\.01 s \(x\.y_s\)"
    ):
        results_within([pending], 0.01, waiting_for="the thing", key="x.y_s")
    done: Future[int] = Future()
    done.set_result(3)
    assert results_within([done], 0.01, waiting_for="the thing", key="x.y_s") == [3]


def test_fail_fast_raises_a_members_failure_while_others_still_wait() -> None:
    # One member of a collective failed; another will never finish (it waits in the collective):
    # by default the wait lasts the timeout, with fail_fast the failure is raised at once.
    stuck: Future[int] = Future()
    failed: Future[int] = Future()
    failed.set_exception(ValueError("no CUDA here"))
    with pytest.raises(TimeoutError, match="1 of 2 calls did not finish"):
        results_within([failed, stuck], 0.05, waiting_for="a broadcast", key="x.y_s")
    with pytest.raises(ValueError, match="no CUDA here"):
        results_within(
            [stuck, failed], 60.0, waiting_for="a broadcast", key="x.y_s", fail_fast=True
        )


def test_an_allocator_in_the_driver_reserves_no_actor_cpus() -> None:
    from adarl.config.run import ClusterConfig

    ClusterConfig(allocator_in_driver=True).validate()
    with pytest.raises(ValueError, match=r"cluster\.cpus_for_allocator=1 reserves CPUs"):
        ClusterConfig(allocator_in_driver=True, cpus_for_allocator=1).validate()
