"""The worker pool end to end on the Redis engine: real processes, a real redis-server."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

import pytest

from lanner import JobState
from lanner.app import App
from lanner.queues import QueueConfig
from lanner.settings import Settings
from lanner.taskfunction import TaskFunction
from lanner.worker.pool import WorkerPool


class RedisServer(Protocol):
    """What tests/conftest.py's `redis_server_factory` gives: a private server."""

    @property
    def url(self) -> str: ...

    def restart(self) -> None: ...


pytestmark = pytest.mark.slow

QUEUES = [QueueConfig("fast", priority=10, visibility_timeout_sec=5, long_poll_time_sec=0.2)]


def record(path: str, text: str) -> None:
    with open(path, "a") as out:
        out.write(text + "\n")


@pytest.fixture
def server(redis_server_factory: Callable[..., RedisServer]) -> RedisServer:
    return redis_server_factory()


@pytest.fixture
def app(server: RedisServer) -> Iterator[App]:
    made = App(server.url, settings=Settings(broker=server.url), queues=QUEUES)
    yield made
    made.close()


def make_task(app: App, name: str) -> TaskFunction[[str, int], None]:
    def write(path: str, n: int) -> None:
        record(path, str(n))

    return app.task(queue="fast", time_limit=2, name=f"{__name__}.{name}")(write)


def run_until(pool: WorkerPool, done: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "the pool did not finish in time"
        pool.supervise(timeout=0.05)


def all_complete(app: App, jids: Sequence[str]) -> bool:
    return all(job.state == JobState.COMPLETE for job in app.engine.multiget(jids))


def test_a_pool_runs_jobs_on_redis(app: App, tmp_path: Path) -> None:
    task = make_task(app, "write_on_redis")
    out = str(tmp_path / "out.txt")
    jids = app.publish_many([task.message(out, n) for n in range(40)])
    pool = WorkerPool(app, concurrency=2, queues=QUEUES)
    pool.start()
    try:
        run_until(pool, lambda: all_complete(app, jids))
    finally:
        pool.terminate(timeout=5)
    assert sorted(int(line) for line in Path(out).read_text().split()) == list(range(40))


def test_the_pool_carries_on_after_a_redis_restart(
    app: App, server: RedisServer, tmp_path: Path
) -> None:
    task = make_task(app, "write_across_restart")
    out = str(tmp_path / "out.txt")
    pool = WorkerPool(app, concurrency=2, queues=QUEUES)
    pool.start()
    try:
        before = app.publish_many([task.message(out, n) for n in range(10)])
        run_until(pool, lambda: all_complete(app, before))
        server.restart()  # an empty server on the same port: connections and script are gone
        after = app.publish_many([task.message(out, n) for n in range(10, 20)])
        run_until(pool, lambda: all_complete(app, after))
    finally:
        pool.terminate(timeout=5)
    assert sorted(int(line) for line in Path(out).read_text().split()) == list(range(20))
    assert pool.counts().children == 0
