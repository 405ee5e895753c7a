"""How the async API (`adelay`, `apublish_many`, `aresult`, ...) calls the engines without
blocking its caller's event loop.

Every engine is synchronous underneath (Python's sqlite3, redis-py's and boto3's clients),
so each async method makes the very call its sync twin makes, in another thread:

- A publish, or a look at a job (`call`), in the loop's default executor, as
  `asyncio.to_thread` does (the context's variables go along). Each is one short round
  trip, as long as the sync call would be. A publish whose awaiter is cancelled still
  completes, and `asyncio.run` waits for it before it returns: a job is published whole
  or not at all, never abandoned halfway.
- A wait for a job to finish (`wait`), in a daemon thread of its own. A wait may last
  minutes: in the default executor (`min(32, cores + 4)` threads) a few of them would
  hold every thread, and publishes, the loop's own `getaddrinfo` and the application's
  `to_thread` calls would queue behind them; and `asyncio.run` would not return before
  they ended. A wait whose awaiter is cancelled ends in its thread when its engine wait
  does (within `lanner.handle`'s chunk of a minute, or the job's end), its answer
  dropped.

Redis has a native async client (`redis.asyncio`), but using it would take an async twin
of the engine's Lua loading, its retrying connections and its blocking wait, and a client
per event loop; the round trip is the same, and the thread hop costs microseconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from lanner.inprocess import coroutines

P = ParamSpec("P")
T = TypeVar("T")


async def call(function: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """`function(*args, **kwargs)` in the loop's default executor: a short engine call."""
    return await asyncio.to_thread(_closing_loops, functools.partial(function, *args, **kwargs))


def _closing_loops(function: Callable[[], T]) -> T:
    try:
        return function()
    finally:
        # An eager app runs a task as it is published, and `lanner.inprocess.coroutines`
        # runs an async one on a loop it keeps for its thread (a worker's, between tasks):
        # an executor's thread must not keep it, unclosed, once the thread is gone.
        coroutines.close()


async def wait(function: Callable[[], T]) -> T:
    """`function()` in a daemon thread of its own: an engine call that may block long."""
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[T] = loop.create_future()

    def deliver(settle: Callable[[Any], None], value: Any) -> None:
        def settle_unless_given_up() -> None:
            if not answer.done():  # its awaiter was cancelled meanwhile
                settle(value)

        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody awaits
            loop.call_soon_threadsafe(settle_unless_given_up)

    def run() -> None:
        try:
            value = function()
        except BaseException as error:  # raised where it is awaited
            deliver(answer.set_exception, error)
        else:
            deliver(answer.set_result, value)

    threading.Thread(target=run, name="lanner-wait", daemon=True).start()
    return await answer
