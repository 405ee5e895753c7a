"""The worker loop: successes, deferral, time limits, the batch SLA, and run()."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Any

import pytest

import lanner
from lanner import EngineUnavailable, Job, JobState
from lanner.task import Task
from lanner.worker import interrupt
from lanner.worker.batch import Batch
from lanner.worker.loop import BATCH_HOLD_SEC, Limits, WorkerLoop

from .world import (
    EVENTS,
    LOCK_SEC,
    MULTIPLE,
    PEEK,
    QUEUE,
    STOP,
    WLBoom,
    WLCancelled,
    WLDeferred,
    WLEcho,
    WLForker,
    WLHeartbeat,
    WLInitRaises,
    WLShouldRunRaises,
    WLSleepy,
    WLSlow,
    WLSlowNoRetries,
    WLStopper,
    WLTight,
    WLUnlimited,
    WLWatcher,
    World,
    Worlds,
    comes_back_after,
    events,
    wait_for,
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
    assert kinds == ["batch", "started", "finished", "completed", "flushed"]
    assert world.recorder.reports[2] == ("finished", jid, True)
    assert world.loop.processed == 1


def test_the_successes_of_a_batch_complete_in_one_call(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []
    real = world.engine.complete_many

    def spy(jids: Any, worker: str, queue: str, **options: Any) -> list[str]:
        calls.append(list(jids))
        done: list[str] = real(jids, worker, queue, **options)
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

    assert time.monotonic() - started < 5  # cut short: the task sleeps 5 s
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


def test_a_job_whose_time_limit_outlasts_its_lock_gets_the_lock_extended_and_runs(
    worlds: Worlds,
) -> None:
    """Issue 10, fault 2: it used to be given back, and popped again, forever."""
    world = worlds()
    tight = world.app.publish(WLTight)  # time_limit 1.8 s
    # The lease set by a worker's own queue config, which the publisher did not know.
    world.engine.config_set("wl-heartbeat", 1.0)

    popped = world.work()

    assert [job.jid for job in popped] == [tight]
    job = world.get(tight)
    assert job.state == JobState.COMPLETE
    assert whats(job) == ["put", "popped", "done"]
    assert events("run") == [("run", tight)]


def test_a_task_without_a_time_limit_runs_unarmed_its_lock_extended_only_if_short(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No alarm, no hard-kill deadline; heartbeats keep its lock while it runs, so only a
    lock too short to last until the keeper's first beat is extended before it starts."""
    beats: list[str] = []
    real = world.engine.heartbeat

    def spy(jid: str, worker: str, *args: Any, **options: Any) -> float:
        beats.append(jid)
        return real(jid, worker, *args, **options)

    monkeypatch.setattr(world.engine, "heartbeat", spy)
    fresh = world.app.publish(WLUnlimited)
    world.work()
    late = world.app.publish(WLUnlimited)
    # Held in its batch until a sixth of its lock is left.
    (job,) = world.pop()
    world.loop.run_batch(world.queue, [replace(job, expires=time.time() + LOCK_SEC / 6)])

    assert beats == [late]
    assert events("armed") == [("armed", fresh, 0.0), ("armed", late, 0.0)]
    started = [report for report in world.recorder.reports if report[0] == "started"]
    assert [(jid, deadline) for _, jid, deadline, _ in started] == [
        (fresh, float("inf")),
        (late, float("inf")),
    ]
    assert {world.get(fresh).state, world.get(late).state} == {JobState.COMPLETE}


def test_a_batch_held_too_long_gives_back_its_unstarted_jobs_while_a_task_runs(
    worlds: Worlds,
) -> None:
    """Issue 10, fault 7: an idle process may start them now, not after the slow task."""
    world = worlds(give_back_held=True)
    PEEK.append(world.get)
    behind = [world.app.publish(WLEcho, [n]) for n in range(2)]
    slow = world.app.publish(WLWatcher, [behind[-1], "waiting"])
    world.engine.priority(slow, 1)  # first in the batch

    world.work()

    [(_, _, waited)] = events("watched")
    assert waited is not None, "the unstarted jobs were held while the slow task ran"
    for jid in behind:
        job = world.get(jid)
        assert job.state == JobState.WAITING
        assert whats(job)[-1] == "released"
        assert job.remaining == job.retries  # no retry spent
    assert world.loop.batch_size(world.queue) < world.queue.batch_size  # it learnt


def test_a_batch_is_given_back_only_while_a_job_is_in_hand(worlds: Worlds) -> None:
    """Between jobs the loop starts the next one itself: a loop slow to get there (a
    loaded machine) must not give back what it would start sooner than anyone else."""
    world = worlds(give_back_held=True)
    jids = [world.app.publish(WLEcho, [n]) for n in range(2)]
    batch = Batch(QUEUE, world.pop())
    batch.popped_at -= 10 * BATCH_HOLD_SEC  # held long past the bound
    world.loop._keep(batch)  # between jobs
    assert batch.unstarted() == 2
    assert {world.get(jid).state for jid in jids} == {JobState.RUNNING}
    world.loop._in_job = True  # what run_batch sets while a job is in hand
    world.loop._keep(batch)
    assert batch.unstarted() == 0
    assert {world.get(jid).state for jid in jids} == {JobState.WAITING}


def test_a_job_that_ran_is_completed_while_the_next_task_still_runs(world: World) -> None:
    """Issue 10, fault 7: a process stopped mid-batch must not leave finished jobs to run
    again elsewhere."""
    PEEK.append(world.get)
    quick = world.app.publish(WLEcho, ["quick"])
    watcher = world.app.publish(WLWatcher, [quick, "complete"])
    world.engine.priority(quick, 1)

    world.work()

    [(_, _, waited)] = events("watched")
    assert waited is not None, "the finished job was not completed while the next one ran"
    assert world.get(watcher).state == JobState.COMPLETE


def test_batches_are_as_large_as_what_runs_in_the_hold_time(world: World) -> None:
    for n in range(10):
        world.app.publish(WLEcho, [n])
    world.work()
    assert world.loop.batch_size(world.queue) == world.queue.batch_size  # quick jobs: all 10
    world.app.publish(WLSleepy, [0.3])
    world.work(count=1)
    assert world.loop.batch_size(world.queue) == 1


def test_a_forked_copy_that_returns_from_a_task_never_acts_as_the_worker(world: World) -> None:
    """Issue 10, fault 6: such a copy completed the job and gave back its parent's batch."""
    jid = world.app.publish(WLForker)
    others = [world.app.publish(WLEcho, [n]) for n in range(3)]

    world.work()

    [(_, child)] = events("forked")
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    job = world.get(jid)
    assert job.state == JobState.COMPLETE
    assert whats(job) == ["put", "popped", "done"]
    for other in others:
        assert whats(world.get(other)) == ["put", "popped", "done"]


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


def test_completions_the_engine_refuses_are_not_kept_as_if_the_store_were_away(
    worlds: Worlds,
) -> None:
    """A result is checked before it joins its batch's completions; should the engine still
    refuse one, the process must not hold it (and start nothing) until it is accepted."""
    world = worlds(query="?max_data_bytes=64")
    jid = world.app.publish(WLEcho, ["x"])
    world.pop()
    with pytest.raises(lanner.PayloadTooLarge, match=f"the result of {jid} is 66 bytes"):
        world.loop._settle(QUEUE, [jid], {jid: '"' + "x" * 64 + '"'})
    world.loop._check_settled()  # no EngineUnavailable: new jobs may start
    assert world.get(jid).state == JobState.RUNNING  # nothing changed


# -- cancel and lock loss reach the running task -------------------------------------------


@pytest.mark.parametrize("how", ["cancel", "timeout"])
def test_a_job_taken_away_while_it_runs_stops_its_task_within_a_check(
    worlds: Worlds, how: str
) -> None:
    world = worlds(give_back_held=True)
    jid = world.app.publish(WLCancelled)
    after = world.app.publish(WLEcho, ["after"])
    other = lanner.open_engine(world.url)
    taken_at: list[float] = []

    def take_away() -> None:
        taken_at.append(time.monotonic())
        other.cancel([jid]) if how == "cancel" else other.timeout([jid])

    STOP.append(take_away)
    try:
        world.work()
    finally:
        other.close()

    [(_, stopped_jid, why)] = events("stopped")
    assert stopped_jid == jid
    assert ("cancelled" if how == "cancel" else "lock was lost") in why
    # The keeper reports it after interrupting the task: possibly after the task ended.
    stopping = ("stopping", jid, why.partition(": ")[2])
    wait_for(lambda: stopping in world.recorder.reports, "the keeper's stopping report")
    assert ("finished", jid, False) in world.recorder.reports
    job = world.engine.get(jid)
    if how == "cancel":
        assert job is None
    else:
        assert job is not None
        assert job.state == JobState.STALLED  # not completed, retried nor failed by us
        assert "done" not in whats(job)
        world.engine.cancel([jid])  # not to be run again below
    assert world.get(after).state == JobState.WAITING  # given back while the task ran
    world.work()
    assert world.get(after).state == JobState.COMPLETE


def test_a_stop_for_a_task_that_no_longer_runs_is_ignored() -> None:
    assert not interrupt.stop("not-running", lanner.JobCancelled("late"))

    def stop_a_then_wait() -> None:
        interrupt.stop("a", lanner.JobCancelled("meant for a"))
        time.sleep(1)

    with interrupt.running("a", 5.0):
        assert not interrupt.stop("b", lanner.JobCancelled("meant for b"))
        with pytest.raises(lanner.JobCancelled, match="meant for a"):
            stop_a_then_wait()


def test_a_time_limit_that_fires_inside_logging_is_not_swallowed_by_it() -> None:
    # logging prints an error raised while it formats a record ("--- Logging error ---")
    # and goes on: an alarm landing there comes back once the record is written.
    import logging

    class Slow:
        def __str__(self) -> str:
            time.sleep(0.5)  # the alarm (at 0.2 s) lands here, inside logging's formatting
            return "slow"

    logger = logging.getLogger("lanner.test.slow")
    handler = logging.StreamHandler(open(os.devnull, "w"))  # noqa: SIM115
    logger.addHandler(handler)
    logger.propagate = False
    started = time.monotonic()

    def log_for_long() -> None:
        with interrupt.running("a", 0.2):
            while time.monotonic() - started < 30:
                logger.warning(Slow())
                time.sleep(0.1)  # outside logging, where the alarm comes back and raises

    try:
        with pytest.raises(lanner.TimeLimitExceeded):
            log_for_long()
    finally:
        logger.removeHandler(handler)
        handler.stream.close()
    assert time.monotonic() - started < 30
