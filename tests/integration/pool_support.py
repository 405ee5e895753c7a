"""What the pool tests share: a task module's `Work` task, a running pool, job checks."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
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
