"""EVENTS: the live feed of what happens in a store, `Engine.events()` (docs/events.md).

An `EventStream` delivers `lanner.records.Event`s: blocking (`get`, iteration) or to an
asyncio loop (`async for`). The promise is a live feed, not a log: every command that
starts after `events()` returned is delivered, once, while the stream is open; nothing is
kept for nobody. When a stream may have missed events (its store was away, or it fell
behind) it yields `Event("gap")` once, so that a consumer re-reads the state it shows.

Engines subclass `PolledStream`, which owns the parts every engine shares: timeouts,
`close()` from any thread, iteration, asyncio, and the rule that a stream belongs to the
process that opened it.
"""

from __future__ import annotations

import abc
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Final, Self

from lanner.errors import LannerError
from lanner.records import Event

if TYPE_CHECKING:
    import asyncio

KINDS: Final = (
    "put",
    "popped",
    "completed",
    "failed",
    "stalled",
    "canceled",
    "lock_lost",
    "advanced",
    "track",
    "untrack",
    "config_set",
    "config_unset",
    "expired",
    "discarded",
    "progress",
)
"""Every kind of event a store reports (qless-core's, LIMITS' expired and discarded, and
lanner's progress: a task's progress entry, `Job.progress`)."""

TRACKED_ONLY: Final = frozenset({"popped", "stalled"})
"""Kinds reported only for tracked jobs (qless-core publishes them only on the channels of
tracked jobs)."""

WORKER_KINDS: Final = frozenset({"lock_lost", "canceled"})
"""The kinds `events(worker=...)` delivers: a job that worker held was taken away."""

GAP: Final = Event("gap")

CHUNK_SEC: Final = 0.1
"""The longest an engine's wait lasts before `get` looks again whether it was closed."""


class EventStream(abc.ABC):
    """A live feed of events from one store (`Engine.events()`).

    `get(timeout)` returns the next event, or None once `timeout` seconds passed or the
    stream is closed; iterating yields events until the stream is closed; `async for`
    does the same without blocking the event loop. `close()` is idempotent and may be
    called from any thread: a `get` blocked in another thread returns None promptly.
    A stream belongs to the process that opened it: used in a forked child, it raises
    `LannerError`.
    """

    _in_flight: asyncio.Future[Event | None] | None = None  # see `_events`

    @abc.abstractmethod
    def get(self, timeout: float | None = None) -> Event | None: ...

    @abc.abstractmethod
    def close(self) -> None: ...

    @property
    @abc.abstractmethod
    def closed(self) -> bool: ...

    def __iter__(self) -> Iterator[Event]:
        while (event := self.get()) is not None:
            yield event

    async def _events(self) -> AsyncIterator[Event]:
        import asyncio  # here: most users of an engine never load it

        loop = asyncio.get_running_loop()
        while not self.closed:
            # A short wait in a thread, so the loop goes on meanwhile. A consumer cancelled
            # while it waits (a timeout) leaves that `get` running: its event is kept for
            # the next `async for` on this loop, not lost.
            future = self._in_flight
            if future is None or future.get_loop() is not loop:
                future = loop.run_in_executor(None, self.get, CHUNK_SEC * 2)
                self._in_flight = future
            try:
                event = await asyncio.shield(future)
            finally:
                if future.done():
                    self._in_flight = None
            if event is not None:
                yield event

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._events()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class PolledStream(EventStream):
    """An engine's stream: it implements `_receive` (wait up to a short time for the next
    event) and `_shutdown` (let go of its connection); this class does the rest.

    `_receive` is called with the stream's lock held and waits at most `CHUNK_SEC`, so
    `close()` from another thread (which takes the lock) returns within about that long.
    It must not raise on a store that is away: it retries on its later calls and yields
    `GAP` once it is back.
    """

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_process(self) -> None:
        if os.getpid() != self._pid:
            raise LannerError(
                f"this event stream was opened by process {self._pid}: a forked process "
                "opens its own (engine.events())"
            )

    def get(self, timeout: float | None = None) -> Event | None:
        self._check_process()
        deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
        while not self._closed:
            wait = CHUNK_SEC
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
            with self._lock:
                if self._closed:
                    return None
                event = self._receive(max(wait, 0.0))
            if event is not None:
                return event
            if deadline is not None and time.monotonic() >= deadline:
                return None
        return None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if os.getpid() != self._pid:
            return  # the connection is the parent's: never touched here
        with self._lock:
            self._shutdown()

    @abc.abstractmethod
    def _receive(self, timeout: float) -> Event | None:
        """The next event, waiting at most `timeout` seconds (None if there is none yet)."""

    @abc.abstractmethod
    def _shutdown(self) -> None:
        """Let go of the stream's connection and registrations (called once)."""
