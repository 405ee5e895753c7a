"""The worker loop: successes, deferral, time limits, the batch SLA, and run()."""

from __future__ import annotations

import time
from typing import Any

import pytest

from lanner import EngineUnavailable, Job, JobState
from lanner.task import Task
from lanner.worker.loop import Limits, WorkerLoop

from .world import (
    EVENTS,
    MULTIPLE,
    PEEK,
    STOP,
    WLBoom,
    WLDeferred,
    WLEcho,
    WLHeartbeat,
    WLInitRaises,
    WLShouldRunRaises,
    WLSleepy,
    WLSlow,
    WLSlowNoRetries,
    WLStopper,
    WLTight,
    World,
    Worlds,
    comes_back_after,
    events,
    whats,
)

# SIGALRM is the loop's soft time limit; pytest-timeout's signal method would share it.
pytestmark = pytest.mark.timeout(60, method="thread")


# -- success ------------------------------------------------------------------------------


def test_a_success_completes_the_job_once(world: World) -> None:
    jid = world.app.publish(WLEcho, ["hello"], {"extra": 2})

    world.work()

    job = world.get(jid)
    assert job.state == JobState.COMPLETE
    assert whats(job).count("done") == 1
    assert whats(job).count("popped") == 1
    assert events("run") == [("run", jid, "hello", 2, None)]
    kinds = [r[0] for r in world.recorder.reports]
    assert kinds == ["batch", "started", "finished", "flushed"]
    assert world.recorder.reports[2] == ("finished", jid, True)
    assert world.loop.processed == 1


def test_the_successes_of_a_batch_complete_in_one_call(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []
    real = world.engine.complete_many

    def spy(jids: Any, worker: str, queue: str, *, now: float | None = None) -> list[str]:
        calls.append(list(jids))
        done: list[str] = real(jids, worker, queue, now=now)
        return done

    monkeypatch.setattr(world.engine, "complete_many", spy)
    good = [world.app.publish(WLEcho, [n]) for n in range(3)]
    bad = world.app.publish(WLBoom)
    last = world.app.publish(WLEcho, [3])

    world.work()

    assert calls == [[*good, last]]
    assert [world.get(jid).state for jid in [*good, last]] == [JobState.COMPLETE] * 4
    assert world.get(bad).state == JobState.SCHEDULED


# -- deferral, time limits, the batch SLA --------------------------------------------------


def test_should_run_task_false_releases_the_job_with_a_delay(world: World) -> None:
    jid = world.app.publish(WLDeferred, [7])

    since = time.time()
    world.work()
    until = time.time()

    job = world.get(jid)
    assert job.state == JobState.SCHEDULED
    assert (job.retries, job.remaining) == (3, 3)  # deferring costs no retry
    assert whats(job)[-1] == "released"
    assert events("should_run_task") == [("should_run_task", (7,))]
    assert events("run") == []
    assert world.recorder.retry_delays(jid) == []  # never started

    # A second deferral waits twice as long.
    job = comes_back_after(world, jid, MULTIPLE, since, until)
    since = time.time()
    world.loop.run_batch(world.queue, [job])
    until = time.time()
    assert whats(world.get(jid)).count("released") == 2
    comes_back_after(world, jid, 2 * MULTIPLE, since, until)
    assert world.get(jid).remaining == 3
    assert events("run") == []


@pytest.mark.parametrize(
    ("task", "text"),
    [
        (WLShouldRunRaises, "RuntimeError: the check itself broke"),
        (WLInitRaises, "RuntimeError: the constructor hook broke"),
    ],
)
def test_an_exception_in_task_code_before_run_task_fails_the_job_not_the_batch(
    world: World, task: type[Task], text: str
) -> None:
    broken = world.app.publish(task)  # max_retries = 0
    good = world.app.publish(WLEcho, ["after"])

    world.work()  # must not raise: one task's bug must not take the worker down

    assert world.get(good).state == JobState.COMPLETE
    job = world.get(broken)
    assert job.state == JobState.FAILED
    assert job.failure is not None
    assert job.failure.group == "RuntimeError"
    assert text in job.failure.message
    assert ("run", broken) not in EVENTS


def test_the_soft_time_limit_raises_inside_the_task_and_retries(world: World) -> None:
    jid = world.app.publish(WLSlow)  # time_limit 0.2 s, max_retries 1

    started = time.monotonic()
    world.work()

    assert time.monotonic() - started < 2
    assert events("caught") == [("caught", jid, "TimeLimitExceeded")]
    assert events("kill_runtime_exceeded") == [("kill_runtime_exceeded", jid)]
    job = world.get(jid)
    assert job.state == JobState.SCHEDULED
    assert job.remaining == 0

    world.work(now=time.time() + 4 * MULTIPLE)

    job = world.get(jid)
    assert job.state == JobState.FAILED
    assert job.failure is not None
    assert job.failure.group == "TimeLimitExceeded"
    assert "time limit of 0.2 s exceeded" in job.failure.message
    assert len(events("caught")) == 2


def test_the_soft_time_limit_without_retries_fails_at_once(world: World) -> None:
    jid = world.app.publish(WLSlowNoRetries)

    world.work()

    job = world.get(jid)
    assert job.state == JobState.FAILED
    assert job.failure is not None
    assert job.failure.group == "TimeLimitExceeded"


def test_the_batch_sla_releases_a_job_that_would_outlast_its_lock(worlds: Worlds) -> None:
    world = worlds(lock=2.0)
    first = world.app.publish(WLSleepy, [0.5])  # time_limit 1 s: fits when popped
    tight = world.app.publish(WLTight)  # time_limit 1.8 s: fits only at the start of a lock

    world.work()

    assert world.get(first).state == JobState.COMPLETE
    job = world.get(tight)
    assert job.state == JobState.WAITING
    assert whats(job)[-1] == "released"
    assert job.remaining == job.retries
    assert events("run") == [("run", first)]
    assert world.recorder.retry_delays(tight) == []

    # Popped afresh, with its whole lock ahead, it runs.
    world.work()
    assert world.get(tight).state == JobState.COMPLETE


def test_the_running_job_is_heartbeaten(worlds: Worlds) -> None:
    world = worlds(lock=1.5)
    PEEK.append(world.get)
    jid = world.app.publish(WLHeartbeat)

    [job] = world.work()

    assert world.get(jid).state == JobState.COMPLETE
    first, last = (event[1] for event in events("expires"))
    assert first >= job.expires
    assert last > first + 0.3  # extended while the task ran


# -- run() ---------------------------------------------------------------------------------


def test_run_stops_at_max_tasks_and_gives_back_the_rest_of_the_batch(worlds: Worlds) -> None:
    world = worlds(limits=Limits(max_tasks=3))
    jids = [world.app.publish(WLEcho, [n]) for n in range(5)]

    assert world.loop.run() == "max-tasks"

    states = [world.get(jid).state for jid in jids]
    assert states == [JobState.COMPLETE] * 3 + [JobState.WAITING] * 2
    for jid in jids[3:]:
        assert whats(world.get(jid))[-1] == "released"
        assert world.get(jid).remaining == 3
    assert world.loop.processed == 3


def test_stop_finishes_the_running_task_and_gives_back_the_rest(world: World) -> None:
    STOP.append(world.loop.stop)
    first = world.app.publish(WLEcho, ["before"])
    stopper = world.app.publish(WLStopper)
    rest = [world.app.publish(WLEcho, [n]) for n in range(3)]

    assert world.loop.run() == "stopped"

    assert world.get(first).state == JobState.COMPLETE
    assert world.get(stopper).state == JobState.COMPLETE
    for jid in rest:
        job = world.get(jid)
        assert job.state == JobState.WAITING
        assert whats(job)[-1] == "released"
    assert world.loop.stopping


def test_the_loop_waits_out_an_engine_outage_and_carries_on(
    worlds: Worlds, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = worlds(limits=Limits(max_tasks=1))
    jid = world.app.publish(WLEcho, ["after the outage"])
    real_pop, failures = world.engine._pop, [3]

    def pop_while_the_store_is_down(command: Any) -> list[Job]:
        if failures[0]:
            failures[0] -= 1
            raise EngineUnavailable("store down (test)")
        return real_pop(command)

    monkeypatch.setattr(world.engine, "_pop", pop_while_the_store_is_down)
    monkeypatch.setattr(WorkerLoop, "outage_first_pause", 0.01)

    assert world.loop.run() == "max-tasks"

    assert failures == [0]
    assert world.get(jid).state == JobState.COMPLETE
