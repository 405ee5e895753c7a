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
from typing import Final

from lanner.engine import Capability, Engine
from lanner.errors import LannerError
from lanner.events import EventStream

logger = logging.getLogger("lanner.web")

POLL_SEC: Final = 2.0
QUEUE_SIZE: Final = 256
KEEPALIVE_SEC: Final = 15.0
READY_SEC: Final = 10.0
"""How long the dashboard's start waits for the engine's event stream to be live."""

Page = asyncio.Queue[str | None]  # a page's messages; None ends its stream


class Hub:
    """The engine's events for every page listening (`subscribe`)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._pages: set[Page] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()  # the first subscription is live (or failed)
        self._stream: EventStream | None = None
        self._lock = threading.Lock()  # `_stream` between the reading thread and `stop`
        self._thread: threading.Thread | None = None

    async def start(self) -> None:
        """Start reading; return once events published from now on will be delivered."""
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="lanner-web-events", daemon=True)
        self._thread.start()
        await asyncio.to_thread(self._ready.wait, READY_SEC)

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            if self._stream is not None:
                self._stream.close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def end_streams(self) -> None:
        """End every page's stream (the server is shutting down); callable from any thread."""
        if self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                self._loop.call_soon_threadsafe(self._deliver, None)

    async def subscribe(self) -> AsyncIterator[str]:
        """A page's events, as JSON, until it disconnects or the server stops: first ''
        once it is counted in (nothing published after is missed), then each event, and ''
        every KEEPALIVE_SEC with none, so that proxies keep the stream open."""
        page: Page = asyncio.Queue(QUEUE_SIZE)
        self._pages.add(page)
        try:
            yield ""
            while True:
                try:
                    message = await asyncio.wait_for(page.get(), KEEPALIVE_SEC)
                except TimeoutError:
                    message = ""
                if message is None:
                    return
                yield message
        finally:
            self._pages.discard(page)

    def _deliver(self, message: str | None) -> None:
        for page in self._pages:
            if page.full():  # a page that does not keep up: drop what it missed
                while not page.empty():
                    page.get_nowait()
                page.put_nowait(json.dumps({"kind": "gap"}))
            page.put_nowait(message)

    def _send(self, message: dict[str, str]) -> None:
        if self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._deliver, json.dumps(message))

    def _run(self) -> None:
        try:
            if Capability.EVENTS in self.engine.capabilities:
                self._follow_events()
            else:
                self._watch_counts()
        finally:
            self._ready.set()

    def _follow_events(self) -> None:
        while not self._stop.is_set():
            try:
                stream = self.engine.events()
            except LannerError as error:  # the store is away: try again, quietly
                logger.warning("dashboard: no events from the engine (%s); retrying", error)
                self._ready.set()
                self._send({"kind": "gap"})
                self._stop.wait(POLL_SEC)
                continue
            with self._lock:
                self._stream = stream
            if self._stop.is_set():  # stopped while subscribing: `stop` saw no stream
                stream.close()
            self._ready.set()
            with stream:
                for event in stream:
                    fields = {"jid": event.jid, "queue": event.queue, "worker": event.worker}
                    present = {name: value for name, value in fields.items() if value}
                    self._send({"kind": event.kind, **present, **event.details})

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
            self._ready.set()
            if self._stop.wait(POLL_SEC):
                return
