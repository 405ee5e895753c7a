"""What users reach for, end to end on every engine with a real pool: async tasks, results
and handles, cancel and lock loss reaching a running task, unique publishing."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lanner import JobCancelled, JobState, TaskFailed
from lanner.app import App
from lanner.errors import InvalidState
from lanner.operations import drain
from lanner.queues import QueueConfig
from lanner.settings import Settings
from lanner.worker.pool import WorkerPool
from stores import sqlite_or_redis

from .pool_support import lines, note, pool_starter, run_until

pytestmark = pytest.mark.slow

QUEUE = QueueConfig("features", visibility_timeout_sec=120, long_poll_time_sec=0.2)


@pytest.fixture(params=["sqlite", "redis"])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[App]:
    url = sqlite_or_redis(request, tmp_path)
    settings = Settings(broker=url, retry_delay_multiple_sec=0.05, time_limit_grace_sec=1.0)
    made = App(url, settings=settings, queues=[QUEUE], results=True)
    yield made
    made.close()


@pytest.fixture
def start_pool(app: App) -> Iterator[Callable[[], WorkerPool]]:
    with pool_starter(app, concurrency=1, queues=[QUEUE]) as start:
        yield start


# -- async tasks and results --------------------------------------------------------------


def test_an_async_task_is_awaited_and_its_result_kept(
    app: App, start_pool: Callable[[], WorkerPool]
) -> None:
    @app.task(queue=QUEUE.name, name=f"{__name__}.add_later")
    async def add_later(a: int, b: int) -> dict[str, int]:
        await asyncio.sleep(0.01)
        return {"sum": a + b}

    handle = add_later.delay(2, 3)
    pool = start_pool()
    run_until(pool, lambda: handle.state() == JobState.COMPLETE, "the async job")
    assert handle.result(timeout=5) == {"sum": 5}
    assert app.handle(handle.jid).result(timeout=0) == {"sum": 5}


def test_an_async_task_is_stopped_at_its_time_limit(
    app: App, start_pool: Callable[[], WorkerPool]
) -> None:
    @app.task(queue=QUEUE.name, time_limit=0.2, max_retries=0, name=f"{__name__}.forever")
    async def forever() -> None:
        await asyncio.sleep(60)

    handle = forever.delay()
    pool = start_pool()
    run_until(pool, lambda: handle.state() == JobState.FAILED, "the time limit")
    with pytest.raises(TaskFailed) as failed:
        handle.result(timeout=0)
    assert failed.value.group == "TimeLimitExceeded"


def test_result_waits_without_a_worker_then_times_out(app: App) -> None:
    @app.task(queue=QUEUE.name, name=f"{__name__}.never_run")
    def never_run() -> int:
        return 1

    handle = never_run.delay()
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="waiting"):
        handle.result(timeout=0.3)
    assert time.monotonic() - started >= 0.3


def test_result_raises_task_failed_with_the_group_and_message(
    app: App, start_pool: Callable[[], WorkerPool]
) -> None:
    @app.task(queue=QUEUE.name, max_retries=0, name=f"{__name__}.broken")
    def broken(reason: str) -> None:
        raise ValueError(reason)

    handle = broken.delay("disk on fire")
    pool = start_pool()
    run_until(pool, lambda: handle.state() == JobState.FAILED, "the failure")
    with pytest.raises(TaskFailed) as failed:
        handle.result(timeout=5)
    assert failed.value.group == "ValueError"
    assert "disk on fire" in failed.value.message
    assert "disk on fire" in str(failed.value)


def test_an_unserializable_result_fails_the_job_with_the_reason(
    app: App, start_pool: Callable[[], WorkerPool]
) -> None:
    @app.task(queue=QUEUE.name, name=f"{__name__}.returns_a_set")
    def returns_a_set() -> set[int]:
        return {1, 2}

    handle = returns_a_set.delay()
    pool = start_pool()
    run_until(pool, lambda: handle.state() == JobState.FAILED, "the failure")
    job = handle.job()
    assert job is not None
    assert job.failure is not None
    assert job.failure.group == "lanner-unserializable-result"
    assert "set" in job.failure.message


# -- cancel and lock loss -----------------------------------------------------------------


def test_cancel_stops_a_running_task_and_the_pool_goes_on(
    app: App, start_pool: Callable[[], WorkerPool], tmp_path: Path
) -> None:
    out = str(tmp_path / "out")

    @app.task(queue=QUEUE.name, time_limit=8, name=f"{__name__}.long_running")
    def long_running(path: str) -> str:
        note(path, "started")
        try:
            time.sleep(7)
        except JobCancelled:
            note(path, "cancelled")
            raise
        return "finished"

    handle = long_running.delay(out)
    pool = start_pool()
    run_until(pool, lambda: "started" in lines(tmp_path / "out"), "the task to start")
    started = time.monotonic()
    assert handle.cancel() is True
    run_until(pool, lambda: "cancelled" in lines(tmp_path / "out"), "the task to stop")
    assert time.monotonic() - started < 3  # about a heartbeat check, not the 7 s sleep
    assert handle.job() is None
    long_running.options(jid="follow-up").delay(str(tmp_path / "next"))
    run_until(pool, lambda: "started" in lines(tmp_path / "next"), "the next job")


def test_a_task_that_ignores_its_cancel_is_killed_after_the_grace(
    app: App, start_pool: Callable[[], WorkerPool], tmp_path: Path
) -> None:
    out = tmp_path / "out"

    @app.task(queue=QUEUE.name, time_limit=20, name=f"{__name__}.stubborn")
    def stubborn(path: str) -> None:
        note(path, f"started:{os.getpid()}")
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                time.sleep(0.05)
            except JobCancelled:
                note(path, "ignored")

    handle = stubborn.delay(str(out))
    pool = start_pool()
    run_until(pool, lambda: lines(out), "the task to start")
    pid = int(lines(out)[0].split(":")[1])
    handle.cancel()
    run_until(pool, lambda: "ignored" in lines(out), "the cancel to reach the task")
    run_until(pool, lambda: pid not in pool.children, "the supervisor's kill", timeout=10)
    after = stubborn.options(jid="after").delay(str(tmp_path / "after"))
    run_until(pool, lambda: lines(tmp_path / "after"), "a new process to run the next job")
    assert after.state() == JobState.RUNNING


def test_a_lost_lock_stops_the_task_and_the_job_completes_once(
    app: App, start_pool: Callable[[], WorkerPool], tmp_path: Path
) -> None:
    out = tmp_path / "out"

    @app.task(queue=QUEUE.name, time_limit=8, name=f"{__name__}.slow_once")
    def slow_once(path: str) -> str:
        first = not os.path.exists(path)
        note(path, "started")
        if first:
            try:
                time.sleep(7)
            except JobCancelled:
                note(path, "stopped")
                raise
        return "done"

    handle = slow_once.delay(str(out))
    pool = start_pool()
    run_until(pool, lambda: lines(out), "the task to start")
    app.engine.timeout([handle.jid])  # its lock is taken away: the job is stalled
    run_until(pool, lambda: handle.state() == JobState.COMPLETE, "the job to run again")
    assert lines(out) == ["started", "stopped", "started"]
    job = handle.job()
    assert job is not None
    assert [event.what for event in job.history].count("done") == 1
    assert handle.result(timeout=0) == "done"


def test_a_task_without_a_time_limit_runs_past_its_lock_and_the_grace(app: App) -> None:
    """`@app.task` gives no time limit unless asked: no soft limit, no hard kill, its lock
    (1 s here) kept by heartbeats for as long as it runs (past the 1 s grace too)."""
    short = QueueConfig("short-lock", visibility_timeout_sec=1, long_poll_time_sec=0.2)
    knows_it = App(app.settings.broker, settings=app.settings, queues=[short], results=True)

    @knows_it.task(queue=short.name, max_retries=0, name=f"{__name__}.unhurried")
    def unhurried() -> str:
        time.sleep(3)
        return "done"

    handle = unhurried.delay()  # publishes: there is no limit to fit under the lock
    pool = WorkerPool(knows_it, concurrency=1, queues=[short])
    pool.start()
    try:
        run_until(pool, lambda: handle.state() == JobState.COMPLETE, "the task to finish")
    finally:
        pool.terminate(timeout=5)
    assert handle.result(timeout=0) == "done"
    job = handle.job()
    assert job is not None
    assert [event.what for event in job.history] == ["put", "popped", "done"]  # ran once
    knows_it.close()


# -- unique publishing --------------------------------------------------------------------


def test_unique_publish_of_a_running_job_returns_it_and_never_runs_it_twice(
    app: App, start_pool: Callable[[], WorkerPool], tmp_path: Path
) -> None:
    out = tmp_path / "out"

    @app.task(queue=QUEUE.name, name=f"{__name__}.report")
    def report(path: str, day: str) -> str:
        note(path, day)
        time.sleep(0.5)
        return day

    first = report.options(jid="report-monday").delay(str(out), "monday")
    pool = start_pool()
    run_until(pool, lambda: first.state() == JobState.RUNNING, "the report to run")
    again = report.options(jid="report-monday", unique=True).delay(str(out), "again")
    assert again == first
    with pytest.raises(InvalidState, match="running"):
        report.options(jid="report-monday").delay(str(out), "plain")
    run_until(pool, lambda: first.state() == JobState.COMPLETE, "the report to finish")
    assert first.result(timeout=0) == "monday"
    assert lines(out) == ["monday"]
    rerun = report.options(jid="report-monday", unique=True).delay(str(out), "tuesday")
    run_until(pool, lambda: "tuesday" in lines(out), "a finished job's id to run again")
    assert rerun.result(timeout=5) == "tuesday"


# -- in-process draining ------------------------------------------------------------------


def test_drain_runs_jobs_keeps_results_and_raises_the_first_error(app: App) -> None:
    @app.task(queue=QUEUE.name, max_retries=0, name=f"{__name__}.halve")
    async def halve(n: int) -> float:
        if n < 0:
            raise ArithmeticError(f"{n} is negative")
        return n / 2

    good = halve.delay(8)
    bad = halve.delay(-1)
    with pytest.raises(ArithmeticError, match="-1 is negative"):
        drain(app)
    assert good.result(timeout=0) == 4.0
    assert bad.state() == JobState.FAILED
    assert drain(app) == 0
