"""Running an async task's awaitable to its end, one at a time, in the calling thread.

An `async def` task (or `run_task`) returns a coroutine; `lanner.task.Task.run` hands it
here, and it runs on an event loop this thread keeps between tasks (created on first
use), so a job is complete only once its coroutine finished. The soft time limit and
cancellation of the job reach it as a cancellation of its asyncio task, raised where it
awaits as the error that stopped it (`TimeLimitExceeded`, `JobCancelled`). After a task
that did not finish cleanly, whatever it left scheduled on the loop is cancelled too.

A caller that is itself inside a running loop (eager mode or `drain` called from an async
test or web handler) cannot run another loop in its thread: the awaitable then runs on a
loop of its own in a helper thread, while the caller waits.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable
from typing import Any, TypeVar

from lanner.worker import interrupt

T = TypeVar("T")

_local = threading.local()


def run(awaitable: Awaitable[T]) -> T:
    """Run `awaitable` to its end on this thread's loop; return its value or raise."""
    if _inside_a_running_loop():
        with concurrent.futures.ThreadPoolExecutor(1, "lanner-aio") as aside:
            return aside.submit(asyncio.run, _awaited(awaitable)).result()
    loop = _loop()
    task = loop.create_task(_awaited(awaitable))
    stopped_by: list[BaseException] = []

    def cancel(error: BaseException) -> None:
        stopped_by.append(error)
        loop.call_soon_threadsafe(task.cancel)

    try:
        with interrupt.cancelling(cancel):
            return loop.run_until_complete(task)
    except asyncio.CancelledError:
        if stopped_by:
            raise stopped_by[0] from None
        raise
    finally:
        if not task.done() or task.cancelled() or task.exception() is not None:
            _cancel_leftovers(loop)


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


def _inside_a_running_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _loop() -> asyncio.AbstractEventLoop:
    loop: asyncio.AbstractEventLoop | None = getattr(_local, "loop", None)
    if loop is None or loop.is_closed():
        loop = _local.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
    return loop


def _cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    leftovers = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in leftovers:
        task.cancel()
    if leftovers:
        loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))


def close() -> None:
    """Close this thread's loop (a process that runs no more tasks)."""
    loop: Any = getattr(_local, "loop", None)
    if loop is not None and not loop.is_closed():
        _cancel_leftovers(loop)
        loop.close()
