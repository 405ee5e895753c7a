"""EVENTS, the writers' side: the events a write transaction makes, stored with its change.

While some stream listens (a row of `event_listeners` not yet expired), every write
transaction collects the events its commands make (`emit`, at the points where
qless-core publishes them) and inserts them into `events` just before its COMMIT, in one
`executemany`: they commit with the change or not at all. While nobody listens, the
transaction's one check (`begin`) finds no listener and `emit` drops everything: no row is
written, and a command pays one indexed read of a tiny table per transaction.

Rows older than RETENTION_SEC are deleted now and then by the writers (every
RETENTION_EVERY rows inserted by this process) and by each listener's refresh
(`engines/sqlite/events.py`); a listener that finds rows it had not read gone yields `gap`.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Mapping
from typing import Final

RETENTION_SEC: Final = 60.0
"""How long an event row is kept: a listener further behind than this misses events."""

RETENTION_EVERY: Final = 512
"""A writer applies retention after inserting this many event rows."""

_LISTENING: Final = "SELECT EXISTS (SELECT 1 FROM event_listeners WHERE expires_at > ?)"
_INSERT: Final = (
    "INSERT INTO events (at, kind, jid, queue, worker, details) VALUES (?, ?, ?, ?, ?, ?)"
)
_PRUNE: Final = (
    "DELETE FROM events WHERE id < coalesce("
    "  (SELECT id FROM events WHERE at >= ? ORDER BY id LIMIT 1),"
    "  (SELECT max(id) + 1 FROM events))"
)
"""Delete the rows from the oldest up to the first one recent enough: a prefix by id, so
that rows are never missing from the middle (a listener's gap check relies on it)."""

Row = tuple[str, str, str, str, str | None]
"""kind, jid, queue, worker, details (JSON text, or None for none)."""


class _Pending(threading.local):
    rows: list[Row] | None = None


_pending = _Pending()
_inserted = 0  # event rows this process inserted, for RETENTION_EVERY


def begin(conn: sqlite3.Connection) -> None:
    """At the start of a write transaction: collect its events if somebody listens."""
    (listening,) = conn.execute(_LISTENING, (time.time(),)).fetchone()
    _pending.rows = [] if listening else None


def listening() -> bool:
    """Whether this thread's write transaction collects events (for a writer that would
    read more to make its events)."""
    return _pending.rows is not None


def emit(
    kind: str,
    jid: str = "",
    queue: str = "",
    worker: str = "",
    details: Mapping[str, str] | None = None,
) -> None:
    """One event of this thread's write transaction (dropped if nobody listens)."""
    rows = _pending.rows
    if rows is not None:
        rows.append((kind, jid, queue, worker, json.dumps(details) if details else None))


def flush(conn: sqlite3.Connection) -> None:
    """Before COMMIT: insert the transaction's events, and now and then apply retention."""
    global _inserted
    rows = _pending.rows
    if not rows:
        return
    at = time.time()
    conn.executemany(_INSERT, [(at, *row) for row in rows])
    before, _inserted = _inserted, _inserted + len(rows)
    if before // RETENTION_EVERY != _inserted // RETENTION_EVERY:
        prune(conn, at)


def end() -> None:
    """After the transaction (committed or not)."""
    _pending.rows = None


def prune(conn: sqlite3.Connection, now: float) -> None:
    """Delete the events older than RETENTION_SEC."""
    conn.execute(_PRUNE, (now - RETENTION_SEC,))
