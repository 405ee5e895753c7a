"""A task's result larger than the engine keeps, on SQLite and Redis: its job fails into
`lanner-result-too-large` with the reason, its batch-mates complete with their own results,
and the process goes on to run other jobs (it never waits for the store as if it were away).

The engines' `max_data_bytes` is set small through the broker URL, so the results are small.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lanner import JobState
from lanner.app import App
from lanner.operations import drain
from lanner.queues import QueueConfig
from lanner.settings import Settings
from lanner.taskfunction import TaskFunction
from lanner.worker.pool import WorkerPool
from stores import sqlite_or_redis

from .pool_support import run_until

pytestmark = pytest.mark.slow

LIMIT = 2048  # bytes: the engines' max_data_bytes here
QUEUE = QueueConfig("results", batch_size=10, visibility_timeout_sec=120, long_poll_time_sec=0.2)


@pytest.fixture(params=["sqlite", "redis"])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[App]:
    url = f"{sqlite_or_redis(request, tmp_path)}?max_data_bytes={LIMIT}"
    made = App(url, settings=Settings(broker=url), queues=[QUEUE], results=True)
    yield made
    made.close()


def define_echo(app: App) -> TaskFunction[[str, int], str]:
    @app.task(queue=QUEUE.name, name=f"{__name__}.echo")
    def echo(text: str, times: int) -> str:
        return text * times

    return echo


def test_drain_fails_only_the_job_whose_result_is_too_large(app: App) -> None:
    echo = define_echo(app)
    before = echo.delay("a", 3)
    big = echo.delay("x", LIMIT)  # JSON adds its quotes
    after = echo.delay("b", 2)
    assert drain(app, raise_errors=False) == 3  # one batch: the three jobs are batch-mates
    job = big.job()
    assert job is not None
    assert job.state == JobState.FAILED
    assert job.failure is not None
    assert job.failure.group == "lanner-result-too-large"
    assert f"{LIMIT + 2} bytes" in job.failure.message
    assert f"at most {LIMIT}" in job.failure.message
    assert before.result(timeout=0) == "aaa"
    assert after.result(timeout=0) == "bb"
    # The process goes on: the next job runs and keeps its result.
    later = echo.delay("c", 1)
    assert drain(app) == 1
    assert later.result(timeout=0) == "c"


def test_a_pool_process_goes_on_after_a_result_too_large(app: App) -> None:
    echo = define_echo(app)
    handles = [echo.delay("x", LIMIT), echo.delay("a", 1)]
    pool = WorkerPool(app, concurrency=1, queues=[QUEUE])
    pool.start()
    try:
        run_until(pool, lambda: all(h.state() in FINISHED for h in handles), "the batch")
        later = echo.delay("c", 2)
        run_until(pool, lambda: later.state() in FINISHED, "the next job")
    finally:
        pool.terminate(timeout=5)
    failed = handles[0].job()
    assert failed is not None
    assert failed.failure is not None
    assert failed.failure.group == "lanner-result-too-large"
    assert handles[1].result(timeout=0) == "a"
    assert later.result(timeout=0) == "cc"


FINISHED = (JobState.COMPLETE, JobState.FAILED)
