"""The tasks `lanner bench pool` and `lanner bench io` run, and the channel through which
one reports its start.

They are module-level functions, made tasks of the benchmark's App at each run
(`BenchTasks.register`). The pool forks after that, so its children find them in the task
registry by name, and inherit the channel `record_start` reports to.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.queues import SimpleQueue
from typing import Final

from lanner.app import App
from lanner.taskfunction import TaskFunction
from lanner.tools.bench.common import BenchError

SLEEP_SECONDS: Final = 0.010
"""What each job of the last phase sleeps: C processes can do at most C / 0.010 jobs/s."""

TASK_TIME_LIMIT: Final = 30.0
"""Below the queue's visibility timeout, as the App requires; no benchmark task comes close."""

# Where `record_start` reports to. It must exist before the pool forks its children, who
# inherit it; a module global because a task is found by its name, not passed an object.
_started: SimpleQueue[tuple[int, float]] | None = None


def noop() -> None:
    """Does nothing: a drain of these measures the queue and worker machinery alone."""


def record_start(sample: int) -> None:
    """Reports (sample, time.time()) the moment it starts, for the pickup latency."""
    started = time.time()
    if _started is None:
        raise RuntimeError("record_start runs only under run_pool_benchmark")
    _started.put((sample, started))


def sleep_10ms() -> None:
    """Sleeps 10 ms: a drain of these shows how close the pool gets to C × 100 jobs/s."""
    time.sleep(SLEEP_SECONDS)


async def sleep_async(seconds: float) -> None:
    """Awaits `seconds`: an I/O-bound job that holds no thread while it waits."""
    await asyncio.sleep(seconds)


def sleep_sync(seconds: float) -> None:
    """Sleeps `seconds` in its thread: the same job written the blocking way."""
    time.sleep(seconds)


@dataclass(frozen=True, slots=True)
class BenchTasks:
    """The benchmark's module-level functions, made tasks of one run's App."""

    noop: TaskFunction[[], None]
    record_start: TaskFunction[[int], None]
    sleep_10ms: TaskFunction[[], None]

    @classmethod
    def register(cls, app: App, queue: str) -> BenchTasks:
        """The benchmark's tasks, published by `app` to `queue`.

        No retries: a job that fails must show up as failed at once, not 60 s later.
        """
        task = app.task(queue=queue, max_retries=0, time_limit=TASK_TIME_LIMIT)
        return cls(task(noop), task(record_start), task(sleep_10ms))


@contextmanager
def start_channel() -> Iterator[SimpleQueue[tuple[int, float]]]:
    """The queue `record_start` reports to, for the duration of the block.

    A SimpleQueue: its `put` writes to the pipe at once, with no feeder thread whose
    scheduling would add to the measured latency.
    """
    global _started
    if _started is not None:
        raise BenchError("a pool benchmark is already running in this process")
    channel: SimpleQueue[tuple[int, float]] = multiprocessing.get_context("fork").SimpleQueue()
    _started = channel
    try:
        yield channel
    finally:
        _started = None
        channel.close()
