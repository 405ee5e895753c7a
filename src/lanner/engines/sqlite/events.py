"""EVENTS, the listeners' side: a stream reading the `events` table after each commit.

A stream registers a row of `event_listeners` (committed before `events()` returns: from
then on every write transaction stores its events, `eventlog.py`), and remembers the last
event id assigned then. It waits for commits as the blocking pop does
(`Database.wait_for_commit`); after a commit it reads the rows after the last id it saw
(`id > ?`, the primary key).

Its registration expires LISTENER_TTL seconds after its last refresh, done every
REFRESH_SEC by `get`; closing deletes it. A stream yields `gap` when events may be lost
to it: rows it had not read were deleted by retention (ids are never reused, and are
deleted from the oldest: a missing id means a missed row), or its registration lapsed
(a process stopped for a minute: writers stopped storing events), or the file could not be
read for a while.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections import deque
from types import MappingProxyType
from typing import Final

from lanner.engines.sqlite import eventlog
from lanner.engines.sqlite.connection import Database
from lanner.engines.sqlite.options import SQLiteOptions
from lanner.errors import EngineUnavailable
from lanner.events import GAP, WORKER_KINDS, PolledStream
from lanner.records import NO_DETAILS, Event

logger = logging.getLogger("lanner.sqlite")

LISTENER_TTL: Final = 60.0
"""Seconds a registration lasts unless refreshed."""

REFRESH_SEC: Final = 15.0
"""How often an open stream refreshes its registration (and applies retention)."""

BATCH: Final = 1000
"""The most rows one read takes; the next read follows at once."""

_COLUMNS: Final = "id, kind, jid, queue, worker, details"
_WORKER_FILTER: Final = (
    f" AND worker = ? AND kind IN ({', '.join(repr(kind) for kind in sorted(WORKER_KINDS))})"
)


class SQLiteEventStream(PolledStream):
    """A listener of one SQLite file (see the module's docstring)."""

    def __init__(self, path: str, options: SQLiteOptions, worker: str | None) -> None:
        super().__init__()
        self._database = Database(path, options)  # its own connection, its own lock
        self._worker = worker
        self._buffer: deque[Event] = deque()
        self._listener = 0
        self._seen = 0  # the last event id this stream has dealt with
        self._versions = (-1, -1)
        self._more = False  # the last read was a full batch: read again without waiting
        self._refresh_at = 0.0
        self._away = False
        try:
            self._register()
        except BaseException:
            self._database.close()
            raise

    def _register(self) -> None:
        with self._database.write() as conn:
            now = time.time()
            (self._listener,) = conn.execute(
                "INSERT INTO event_listeners (expires_at) VALUES (?) RETURNING id",
                (now + LISTENER_TTL,),
            ).fetchone()
            self._seen = _last_id(conn)
        self._refresh_at = time.monotonic() + REFRESH_SEC

    def _refresh(self) -> None:
        """Extend the registration; a lapsed one (or one deleted) means a gap."""
        with self._database.write() as conn:
            now = time.time()
            row = conn.execute(
                "SELECT expires_at FROM event_listeners WHERE id = ?", (self._listener,)
            ).fetchone()
            if row is None or row[0] <= now:
                logger.warning("event listener %s lapsed: events may be missed", self._listener)
                self._buffer.append(GAP)
            conn.execute(
                "INSERT INTO event_listeners (id, expires_at) VALUES (?, ?) "
                "ON CONFLICT(id) DO UPDATE SET expires_at = excluded.expires_at",
                (self._listener, now + LISTENER_TTL),
            )
            conn.execute("DELETE FROM event_listeners WHERE expires_at < ?", (now - LISTENER_TTL,))
            eventlog.prune(conn, now)
        self._refresh_at = time.monotonic() + REFRESH_SEC

    def _receive(self, timeout: float) -> Event | None:
        deadline = time.monotonic() + timeout
        while True:
            if self._buffer:
                return self._buffer.popleft()
            try:
                if time.monotonic() >= self._refresh_at:
                    self._refresh()
                if not self._more:
                    left = deadline - time.monotonic()
                    current = self._database.wait_for_commit(self._versions, max(left, 0.0))
                    if current == self._versions:
                        if time.monotonic() >= deadline:
                            return None
                        continue
                self._read()
            except EngineUnavailable as error:
                if not self._away:
                    logger.warning("event stream cannot read its store: %s; retrying", error)
                self._away = True
                time.sleep(max(min(0.05, deadline - time.monotonic()), 0.0))
                return None
            if self._away:
                self._away = False
                self._buffer.appendleft(GAP)

    def _read(self) -> None:
        """Read the events committed after the last one seen into the buffer."""
        with self._database.read() as conn:
            # The versions first: a commit after this read shows as a change, and is read
            # next time (rows are read by id: reading again never delivers one twice).
            self._versions = self._database.versions(conn)
            last = _last_id(conn)
            if last <= self._seen:
                self._more = False
                return
            (first,) = conn.execute("SELECT min(id) FROM events").fetchone()
            if first is None or first > self._seen + 1:
                self._buffer.append(GAP)  # rows after the last one seen were deleted
            query = f"SELECT {_COLUMNS} FROM events WHERE id > ?"
            params: tuple[object, ...] = (self._seen,)
            if self._worker is not None:
                query += _WORKER_FILTER
                params += (self._worker,)
            found = conn.execute(f"{query} ORDER BY id LIMIT {BATCH}", params).fetchall()
        self._more = len(found) == BATCH
        self._seen = found[-1][0] if self._more else last
        for _, kind, jid, queue, worker, details in found:
            self._buffer.append(
                Event(kind, jid, queue, worker, _details(details) if details else NO_DETAILS)
            )

    def _shutdown(self) -> None:
        try:
            with self._database.write() as conn:
                conn.execute("DELETE FROM event_listeners WHERE id = ?", (self._listener,))
        except EngineUnavailable as error:  # it expires anyway
            logger.warning("could not unregister event listener %s: %s", self._listener, error)
        finally:
            self._database.close()


def _last_id(conn: sqlite3.Connection) -> int:
    """The last event id ever assigned (AUTOINCREMENT's sequence), 0 before any."""
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
    return int(row[0]) if row else 0


def _details(text: str) -> MappingProxyType[str, str]:
    return MappingProxyType(json.loads(text))
