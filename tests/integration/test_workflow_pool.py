"""Workflows on a real pool: a chord's callback runs once its parents did, in another
process; cancelling a workflow stops its running step and leaves nothing waiting."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import lanner
from lanner import JobCancelled, JobState
from lanner.app import App
from lanner.queues import QueueConfig
from lanner.settings import Settings
from lanner.worker.pool import WorkerPool
from stores import sqlite_or_redis

from .pool_support import lines, note, pool_starter, run_until

pytestmark = pytest.mark.timeout(120, method="thread")

QUEUE = QueueConfig("flows", visibility_timeout_sec=120, long_poll_time_sec=0.2)


@pytest.fixture(params=["sqlite", "redis"])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[App]:
    url = sqlite_or_redis(request, tmp_path)
    made = App(url, settings=Settings(broker=url, time_limit_grace_sec=1.0), queues=[QUEUE])
    yield made
    made.close()


@pytest.fixture
def start_pool(app: App) -> Iterator[Callable[[], WorkerPool]]:
    with pool_starter(app, concurrency=2, queues=[QUEUE]) as start:
        yield start


def test_a_chord_runs_on_a_pool(app: App, start_pool: Callable[[], WorkerPool]) -> None:
    @app.task(queue=QUEUE.name, name=f"{__name__}.square")
    def square(x: int) -> int:
        return x * x

    @app.task(queue=QUEUE.name, name=f"{__name__}.tally")
    async def tally(values: list[int]) -> int:
        return sum(values)

    handle = lanner.chord([square.s(i) for i in range(10)], tally.s()).delay()
    pool = start_pool()
    run_until(pool, lambda: handle.state() == JobState.COMPLETE, "the chord to complete")
    assert handle.result(timeout=10) == 285


def test_cancel_stops_the_running_step_and_leaves_nothing_waiting(
    app: App, start_pool: Callable[[], WorkerPool], tmp_path: Path
) -> None:
    out = tmp_path / "out"

    @app.task(queue=QUEUE.name, time_limit=30, name=f"{__name__}.long_step")
    def long_step(path: str) -> int:
        note(path, "started")
        try:
            time.sleep(25)
        except JobCancelled:
            note(path, "cancelled")
            raise
        return 1

    @app.task(queue=QUEUE.name, name=f"{__name__}.count")
    def count(values: list[int]) -> int:
        return len(values)

    handle = lanner.chain(lanner.chord([long_step.s(str(out))], count.s()), count.s()).delay()
    pool = start_pool()
    run_until(pool, lambda: "started" in lines(out), "the step to start")

    assert len(handle.cancel()) == 3

    run_until(pool, lambda: "cancelled" in lines(out), "the running step to stop")
    assert handle.state() is None
    counts = app.engine.queue_counts(QUEUE.name)
    assert (counts.waiting, counts.depends, counts.running) == (0, 0, 0)


def test_a_step_reports_progress_from_a_pool_process(
    app: App, start_pool: Callable[[], WorkerPool], tmp_path: Path
) -> None:
    go_on = tmp_path / "go-on"

    @app.task(queue=QUEUE.name, time_limit=60, name=f"{__name__}.stepwise")
    def stepwise(path: str) -> int:
        job = lanner.current_job()
        assert job is not None
        job.progress(0.5, "waiting to go on")
        deadline = time.monotonic() + 50
        while not lines(Path(path)) and time.monotonic() < deadline:
            time.sleep(0.02)
        for n in range(1, 1001):  # a tight loop: written once a second at most
            job.progress(0.5 + n / 2000, f"{n} of 1000")
        return 1

    @app.task(queue=QUEUE.name, name=f"{__name__}.after")
    def after(value: int) -> int:
        return value + 1

    handle = lanner.chain(stepwise.s(str(go_on)), after.s()).delay()
    step = handle.handle(handle.jids[0])
    pool = start_pool()
    run_until(pool, lambda: step.progress() is not None, "the step's progress")
    found = step.progress()
    assert found is not None
    assert (found.fraction, found.message) == (0.5, "waiting to go on")
    assert step.state() == JobState.RUNNING

    note(str(go_on), "go")
    run_until(pool, lambda: handle.state() == JobState.COMPLETE, "the workflow to complete")
    found = step.progress()
    assert found is not None
    assert (found.fraction, found.message) == (1.0, "1000 of 1000")
    assert handle.result(timeout=10) == 2
