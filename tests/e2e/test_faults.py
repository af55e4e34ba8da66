"""Faults on a local Ray cluster: a rollout engine actor killed mid-call, mid-step.

Engines here are the scripted `FakeEngine` in real Ray actors (a real `RolloutEngine`: seeded
samples, weight versions), so a kill hits a real actor process and the pool's recovery runs as in
a training run. To be sure the kill lands while work is in flight, the victim is first kept busy
with a sleep submitted through Ray's generic `__ray_call__` (the actor runs one call at a time,
so the pool's chunks queue behind it); every kill therefore fails queued calls, which the pool
must re-issue. The whole training loop with vLLM engines and a DeepSpeed learner under the same
fault, and the driver-kill/resume acceptance tests, are in tests/e2e/test_fault_runs.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray

from adarl.allocator import build_allocator
from adarl.allocator.allocator import BudgetAllocator
from adarl.allocator.build import allocator_kwargs
from adarl.cluster import blocking_proxy, ensure_ray, spawn_actor
from adarl.config.allocator import AllocatorConfig
from adarl.driver.rollout_phase import PhaseParts, RolloutPhase, collect_groups
from adarl.models.tokenizer import build_char_tokenizer
from adarl.reaper import REAPER_TOKEN_ENV, marked_processes
from adarl.reward.exact import ExactMatchVerifier
from adarl.reward.pool import RewardPool
from adarl.rollout.codec import PromptCodec
from adarl.rollout.fake import FakeEngine, FakePrompt
from adarl.rollout.pool import RolloutPool
from adarl.tasks.source import PromptSource
from adarl.types import GenerationRequest, GenerationResult, SamplingParams, TaskExample
from adarl.weight_sync.base import call_on_engine, load_buckets

pytestmark = pytest.mark.slow

EXAMPLES = [
    TaskExample(prompt_id=f"q{i}", prompt=f"{i}+{i}=", answer=str(2 * i), task="arithmetic")
    for i in range(16)
]
# Mixed pass rates: the sequential sampler keeps drawing for some prompts, stops early for others.
SCRIPT = {
    e.prompt: FakePrompt(pass_rate=(0.2, 0.5, 0.8)[i % 3], answer=e.answer)
    for i, e in enumerate(EXAMPLES)
}
VERSION = 3  # the weight version pushed before any fault: a restarted engine must serve it


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> None:
    ensure_ray(num_cpus=2)


def fake_pool(
    *, engine_failure: str, max_samples_per_call: int = 8, max_engine_restarts: int = 2
) -> RolloutPool:
    tokenizer = build_char_tokenizer()
    pool = RolloutPool.ray_actors(
        FakeEngine,
        num_engines=2,
        engine_kwargs={"tokenizer": tokenizer, "script": SCRIPT, "seed": 5},
        num_cpus_per_engine=0.25,
        max_samples_per_call=max_samples_per_call,
        engine_failure=engine_failure,
        max_engine_restarts=max_engine_restarts,
        wait_timeout_s=120.0,
    )
    # What `WeightSync.resync` does on the CPU path: load the current weights (a fake engine
    # keeps only the version) into the restarted engine before it serves.
    pool.set_weight_restorer(
        lambda endpoint: call_on_engine(endpoint, load_buckets, VERSION, {}).result(timeout=60)
    )
    pool.update_weights(VERSION, {})
    assert pool.weight_versions() == [VERSION, VERSION]  # also: both actors are up
    return pool


@pytest.fixture(scope="module")
def step_pool() -> Iterator[RolloutPool]:
    pool = fake_pool(engine_failure="restart", max_engine_restarts=6)
    yield pool
    pool.shutdown()


@pytest.fixture
def pools() -> Iterator[list[RolloutPool]]:
    made: list[RolloutPool] = []
    yield made
    for pool in made:
        pool.shutdown()


def requests(count: int, *, n: int = 4) -> list[GenerationRequest]:
    tokenizer = build_char_tokenizer()
    return [
        GenerationRequest(
            request_id=f"r{i}",
            prompt_token_ids=tuple(tokenizer(EXAMPLES[i % 16].prompt)["input_ids"]),
            num_samples=n,
            sampling=SamplingParams(temperature=1.0, max_new_tokens=4),
            seed=1000 + i,
        )
        for i in range(count)
    ]


def stall(pool: RolloutPool, slot: int) -> str:
    """Keep engine `slot` busy for 1 s, so that work the pool gives it queues (in flight)."""
    actor = pool.engine_handles()[slot].endpoint
    actor.__ray_call__.remote(lambda _engine: time.sleep(1.0))
    return pool.engine_handles()[slot].name


def kill(pool: RolloutPool, slot: int) -> None:
    ray.kill(pool.engine_handles()[slot].endpoint, no_restart=True)


def samples(results: list[GenerationResult]) -> dict[str, tuple]:
    return {r.request_id: tuple(c.token_ids for c in r.completions) for r in results}


def drain_all(pool: RolloutPool, count: int) -> list[GenerationResult]:
    out: list[GenerationResult] = []
    while len(out) < count:
        out += pool.drain_completed()
    return out


@pytest.mark.timeout(300)
def test_a_killed_engine_is_restarted_with_the_current_weights_and_nothing_is_lost(
    pools: list[RolloutPool],
) -> None:
    pool = fake_pool(engine_failure="restart")
    pools.append(pool)
    wanted = requests(12)
    reference = samples(pool.generate(wanted))  # no fault: the samples these seeds give
    pool.metrics()  # open the window

    stall(pool, 0)
    pool.submit(wanted)  # least-loaded: engine 0 gets chunks that queue behind the sleep
    kill(pool, 0)
    received = drain_all(pool, len(wanted))

    ids = Counter(r.request_id for r in received)
    assert ids == Counter(r.request_id for r in wanted)  # every request exactly once
    assert samples(received) == reference  # re-issued requests drew the same samples
    assert {r.weight_version for r in received} == {VERSION}  # the new engine was resynced
    metrics = pool.metrics()
    assert metrics["sampling/rollout_engine_deaths"] == 1.0
    assert metrics["sampling/rollout_requests_reissued"] > 0  # work was in flight on it
    assert metrics["sampling/rollout_engines_alive"] == 2.0
    assert metrics["sampling/engine_samples"] == 4 * len(wanted)  # delivered once, counted once
    assert pool.weight_versions() == [VERSION, VERSION]
    assert ".1:FakeEngine" in pool.engine_handles()[0].name  # a new actor in slot 0


@pytest.mark.timeout(300)
def test_with_continue_the_pool_runs_on_with_fewer_engines(pools: list[RolloutPool]) -> None:
    pool = fake_pool(engine_failure="continue")
    pools.append(pool)
    wanted = requests(10)
    reference = samples(pool.generate(wanted))
    stall(pool, 1)
    pool.submit(wanted)
    kill(pool, 1)
    received = drain_all(pool, len(wanted))
    assert Counter(r.request_id for r in received) == Counter(r.request_id for r in wanted)
    assert samples(received) == reference
    assert pool.num_engines == 1 and len(pool.engine_endpoints()) == 1
    # An evaluation barrier afterwards runs on the survivor.
    assert samples(pool.generate(wanted)) == reference


@pytest.mark.timeout(300)
def test_an_evaluation_barrier_survives_a_kill(step_pool: RolloutPool) -> None:
    pool = step_pool
    wanted = requests(8)
    reference = samples(pool.generate(wanted))
    stall(pool, 0)
    kill(pool, 0)
    results = pool.generate(wanted)
    assert [r.request_id for r in results] == [r.request_id for r in wanted]
    assert samples(results) == reference


@pytest.mark.timeout(300)
def test_with_fail_the_death_stops_the_run_naming_the_engine_and_key(
    pools: list[RolloutPool],
) -> None:
    pool = fake_pool(engine_failure="fail")
    pools.append(pool)
    name = stall(pool, 0)
    pool.submit(requests(6))
    kill(pool, 0)
    with pytest.raises(RuntimeError, match=rf"(?s){name} died .*faults\.engine_failure=fail"):
        drain_all(pool, 6)


def kill_when_busy(pool: RolloutPool, slot: int) -> threading.Thread:
    """Stall engine `slot`, then kill it from another thread as soon as the driver loop has
    queued work on it (the stall keeps that work in flight until the kill)."""
    stall(pool, slot)

    def watch() -> None:
        deadline = time.monotonic() + 60
        while pool.outstanding_samples_per_engine()[slot] == 0:
            assert time.monotonic() < deadline, "the step never dispatched to the victim"
            time.sleep(0.001)
        kill(pool, slot)

    killer = threading.Thread(target=watch, daemon=True)
    killer.start()
    return killer


def run_step(pool: RolloutPool, *, step: int, kill_slot: int | None) -> RolloutPhase:
    """One rollout phase of the real driver loop (`collect_groups`) with the streaming
    sequential sampler; with `kill_slot`, that engine is killed mid-step."""
    allocator = build_allocator(
        AllocatorConfig(sampler="seq_balance", prompts_per_step=8, max_samples_per_prompt=24)
    )
    prompts = PromptSource(examples=EXAMPLES, seed=step)
    codec = PromptCodec(tokenizer=build_char_tokenizer(), sampling=SamplingParams(max_new_tokens=4))
    with RewardPool(verifiers={"arithmetic": ExactMatchVerifier()}, num_workers=2) as rewards:
        killer = kill_when_busy(pool, kill_slot) if kill_slot is not None else None
        phase = collect_groups(
            step,
            prompts.next_batch(8),
            PhaseParts(
                allocator=allocator,
                rollout=pool,
                rewards=rewards,
                prompts=prompts,
                codec=codec,
            ),
        )
        if killer is not None:
            killer.join(timeout=60)
    return phase


def rollouts(group) -> list:
    return [scored.rollout for scored in group.rollouts]


def outcome(phase: RolloutPhase) -> list[tuple]:
    """What the step trained on, prompt by prompt: pool sizes and rewards."""
    return sorted(
        (g.prompt_id, g.pool_size, g.pool_positives, tuple(s.reward for s in g.rollouts))
        for g in phase.result.groups
    )


@pytest.mark.timeout(300)
# Five kill moments; the first two in make test, all five with `pytest -m "heavy or not heavy"`.
@pytest.mark.parametrize(
    "run", [0, 1, *(pytest.param(r, marks=pytest.mark.heavy) for r in range(2, 5))]
)
def test_a_step_survives_an_engine_kill_with_every_prompt_accounted_once(
    step_pool: RolloutPool, run: int
) -> None:
    """Acceptance (issue 16): 5 of 5 steps complete with every prompt accounted for once."""
    pool = step_pool  # one pool for these tests: each kill restarts one of its engines
    step = 10 + run
    reference = run_step(pool, step=step, kill_slot=None)  # the same step without the fault
    faulted = run_step(pool, step=step, kill_slot=run % 2)
    assert faulted.metrics["sampling/rollout_engine_deaths"] == 1.0
    assert faulted.metrics["sampling/rollout_requests_reissued"] > 0
    assert {r.weight_version for g in faulted.result.groups for r in rollouts(g)} == {VERSION}

    result = faulted.result
    trained = [g.prompt_id for g in result.groups]
    assert len(trained) == len(set(trained))  # no prompt trained twice
    # Every prompt of the step is accounted for: resolved or not, none lost.
    assert result.resolved_prompts + result.unresolved_prompts == 8
    # The allocator saw each rollout once: its count is what the engines delivered, and the
    # step is the one the same seeds give without a fault.
    assert faulted.result.metrics["sampling/rollouts"] == faulted.rollouts
    assert faulted.rollouts == reference.rollouts
    assert outcome(faulted) == outcome(reference)


# -- the driver's own process and its waits --------------------------------------------------------


@pytest.mark.timeout(300)
def test_a_sigkilled_driver_leaves_no_ray_process_behind() -> None:
    """Issue 16 saw Ray's agents orphaned after a driver's SIGKILL (they outlive it by 30-70 s);
    the reaper kills every process of the driver's local cluster within seconds."""
    script = textwrap.dedent(
        """
        import os, ray
        from adarl.cluster import ensure_ray
        from adarl.reaper import REAPER_TOKEN_ENV

        ensure_ray(num_cpus=1)
        actor = ray.remote(num_cpus=0)(lambda: os.getpid()).remote()
        print(os.environ[REAPER_TOKEN_ENV], ray.get(actor), flush=True)
        input()  # block until killed
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in (REAPER_TOKEN_ENV, "RAY_ADDRESS")}
    driver = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env=env,
    )  # fmt: skip
    try:
        assert driver.stdout is not None
        token, worker = driver.stdout.readline().split()
        ray_processes = marked_processes(token)
        assert int(worker) in ray_processes and len(ray_processes) >= 4  # GCS, raylet, agents...
        # Its GCS keeps a bounded task history (the soak saw the default grow it 55%).
        gcs = [p for p in ray_processes if b"gcs_server" in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert b"RAY_task_events_max_num_task_in_gcs=1000" in Path(
            f"/proc/{gcs[0]}/environ"
        ).read_bytes().split(b"\0")
        driver.send_signal(signal.SIGKILL)
        assert driver.wait(timeout=30) == -signal.SIGKILL
        deadline = time.monotonic() + 20
        while marked_processes(token):
            assert time.monotonic() < deadline, f"left behind: {marked_processes(token)}"
            time.sleep(0.1)
    finally:
        driver.kill()
        driver.wait()


@pytest.mark.timeout(120)
def test_a_stuck_allocator_call_times_out_naming_the_key() -> None:
    handle = spawn_actor(BudgetAllocator, num_cpus=0, **allocator_kwargs(AllocatorConfig().plan()))
    ray.get(handle.state_dict.remote())  # up (an actor's start is not the call under test)
    proxy = blocking_proxy(handle, BudgetAllocator, timeout_s=1.0)
    assert proxy.state_dict() is not None  # answers while healthy
    handle.__ray_call__.remote(lambda _allocator: time.sleep(10.0))  # now it is stuck
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"BudgetAllocator\.metrics .*faults\.allocator_call"):
        proxy.metrics()
    assert time.monotonic() - started < 5.0
    ray.kill(handle)
