"""What the pool tests share: a task module's `Work` task, a running pool, job checks; for
tests whose tasks are defined in the test itself, pools started once the tasks are
defined, and waiting on a pool's progress."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lanner import JobState
from lanner.app import App
from lanner.worker.pool import WorkerPool

from .conftest import Workspace

WORK = """
class Work(Task):
    app = app
    queue = "work"
    time_limit = 4
    max_retries = 3

    def run_task(self, seconds):
        record("start", self.task_id)
        time.sleep(seconds)
        record("end", self.task_id)
"""


@contextmanager
def running_pool(app: App, **options: Any) -> Iterator[WorkerPool]:
    pool = WorkerPool(app, **options)
    pool.start()
    try:
        yield pool
    finally:
        pool.terminate(timeout=5)


def supervising(pool: WorkerPool) -> Callable[[], None]:
    return lambda: pool.supervise(0.05)


def done_count(ws: Workspace, jid: str) -> int:
    return sum(1 for event in ws.job(jid).history if event.what == "done")


def all_complete(ws: Workspace, jids: Sequence[str]) -> bool:
    return all(ws.job(jid).state == JobState.COMPLETE for jid in jids)


def states(ws: Workspace, jids: Sequence[str]) -> str:
    return "\n".join(f"{jid}: {ws.job(jid).state} {ws.job(jid).failure}" for jid in jids)


@contextmanager
def pool_starter(app: App, **options: Any) -> Iterator[Callable[[], WorkerPool]]:
    """Pools started when the test calls for them, once its tasks are defined (a pool's
    children are forked with what the test defined by then); each terminated at the end."""
    pools: list[WorkerPool] = []

    def start() -> WorkerPool:
        pools.append(WorkerPool(app, **options))
        pools[-1].start()
        return pools[-1]

    try:
        yield start
    finally:
        for pool in pools:
            pool.terminate(timeout=5)


def run_until(pool: WorkerPool, done: Callable[[], object], what: str, timeout: float = 60) -> None:
    """Supervise `pool` until `done()`; a generous deadline, for a busy machine."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        pool.supervise(timeout=0.05)


def lines(path: Path) -> list[str]:
    """The words a task wrote to `path` (none before it wrote)."""
    return path.read_text().split() if path.exists() else []


def note(path: str, text: str) -> None:
    """What a task tells the test: a line appended to `path`."""
    with open(path, "a") as out:
        out.write(text + "\n")
