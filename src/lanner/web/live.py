"""Live updates: the engine's events, fanned out to every open page as server-sent events.

One thread per dashboard reads the engine's event stream (engines with EVENTS: Redis's
pub/sub, SQLite's event table) and hands each event to the event loop, which copies it to
every connected page's queue. An engine without events is watched instead: its queue
counts are read every `POLL_SEC`, and a change is sent as a `changed` event. A page that
reads too slowly loses events and is told so (`gap`), then re-reads what it shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Final

from lanner.engine import Capability, Engine
from lanner.errors import LannerError

if TYPE_CHECKING:
    from lanner.events import EventStream

logger = logging.getLogger("lanner.web")

POLL_SEC: Final = 2.0
QUEUE_SIZE: Final = 256
KEEPALIVE_SEC: Final = 15.0


class Hub:
    """The engine's events for every page listening (`subscribe`)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._pages: set[asyncio.Queue[str | None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._stream: EventStream | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="lanner-web-events", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            stream.close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def end_streams(self) -> None:
        """End every page's stream (the server is shutting down); callable from any thread."""
        if self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._deliver, None)

    async def subscribe(self) -> AsyncIterator[str]:
        """The JSON of each event for one page, until it disconnects or the server stops;
        a keep-alive every KEEPALIVE_SEC (yielded as ''), so proxies keep the stream open."""
        queue: asyncio.Queue[str | None] = asyncio.Queue(QUEUE_SIZE)
        self._pages.add(queue)
        try:
            while True:
                try:
                    message = await asyncio.wait_for(queue.get(), KEEPALIVE_SEC)
                except TimeoutError:
                    message = ""
                if message is None:
                    return
                yield message
        finally:
            self._pages.discard(queue)

    def _deliver(self, message: str | None) -> None:
        for queue in self._pages:
            if queue.full():  # a page that does not keep up: drop what it missed
                while not queue.empty():
                    queue.get_nowait()
                queue.put_nowait(json.dumps({"kind": "gap"}))
            queue.put_nowait(message)

    def _send(self, message: dict[str, str]) -> None:
        if self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                self._loop.call_soon_threadsafe(self._deliver, json.dumps(message))

    def _run(self) -> None:
        if Capability.EVENTS in self.engine.capabilities:
            self._follow_events()
        else:
            self._watch_counts()

    def _follow_events(self) -> None:
        while not self._stop.is_set():
            try:
                self._stream = self.engine.events()
                with self._stream as stream:
                    for event in stream:
                        fields = {"jid": event.jid, "queue": event.queue, "worker": event.worker}
                        self._send({"kind": event.kind, **fields, **event.details})
            except LannerError as error:  # the store is away: try again, quietly
                logger.warning("dashboard: no events from the engine (%s); retrying", error)
                self._send({"kind": "gap"})
                self._stop.wait(POLL_SEC)

    def _watch_counts(self) -> None:
        seen: object = None
        while True:
            try:
                counts = self.engine.queues()
            except LannerError as error:
                logger.warning("dashboard: cannot read queue counts (%s)", error)
            else:
                if counts != seen and seen is not None:
                    self._send({"kind": "changed"})
                seen = counts
            if self._stop.wait(POLL_SEC):
                return
