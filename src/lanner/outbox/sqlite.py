"""An outbox in an SQLite database the application writes with `sqlite3`.

`write` adds rows on the application's connection, in its transaction (the table is made
there too on first use: DDL is transactional in SQLite). `SQLiteOutbox` is the relay's
side: each call opens the file, does one short transaction and closes it again, so that
no connection of the relay's thread is ever inherited by a forked worker (`forks.py`).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Final

from lanner.engines.sqlite.within import check_transaction
from lanner.outbox.forks import FORK_LOCK
from lanner.outbox.rows import OutboxRow, decode, encode
from lanner.records import NewJob

TABLE: Final = "lanner_outbox"  # spelled out in the statements below
_CREATE: Final = (
    "CREATE TABLE IF NOT EXISTS lanner_outbox (id INTEGER PRIMARY KEY, jid TEXT NOT NULL, "
    "job TEXT NOT NULL, written_at REAL NOT NULL, tries INTEGER NOT NULL DEFAULT 0)"
)
_INSERT: Final = "INSERT INTO lanner_outbox (jid, job, written_at) VALUES (?, ?, ?)"


def write(conn: sqlite3.Connection, jobs: Sequence[NewJob]) -> None:
    """Add `jobs` to the outbox of `conn`'s database, in the transaction `conn` has open."""
    check_transaction(conn)
    conn.execute(_CREATE)
    now = time.time()
    conn.executemany(_INSERT, [(job.jid, encode(job), now) for job in jobs])


class SQLiteOutbox:
    """The relay's view of the outbox in the database file `path`."""

    def __init__(self, path: str, *, busy_timeout: float = 5.0) -> None:
        self.path = os.path.abspath(path)
        self.busy_timeout = busy_timeout

    def __repr__(self) -> str:
        return f"SQLiteOutbox({self.path!r})"

    def take(self, limit: int) -> list[OutboxRow]:
        """The oldest `limit` rows, each counted as tried once more (committed before they
        are put: a relay that dies after the put leaves rows whose `tries` says so)."""
        with self._transaction() as conn:
            if not _has_table(conn):
                return []
            found = conn.execute(
                "SELECT id, job, written_at, tries FROM lanner_outbox ORDER BY id LIMIT ?", (limit,)
            ).fetchall()
            conn.executemany(
                "UPDATE lanner_outbox SET tries = tries + 1 WHERE id = ?",
                [(row[0],) for row in found],
            )
        return [OutboxRow(id, decode(job), at, tries) for id, job, at, tries in found]

    def delete(self, ids: Sequence[int]) -> None:
        with self._transaction() as conn:
            conn.executemany("DELETE FROM lanner_outbox WHERE id = ?", [(id,) for id in ids])

    def count(self) -> int:
        with self._transaction(write=False) as conn:
            if not _has_table(conn):
                return 0
            (count,) = conn.execute("SELECT count(*) FROM lanner_outbox").fetchone()
            return int(count)

    @contextmanager
    def _transaction(self, *, write: bool = True) -> Iterator[sqlite3.Connection]:
        with FORK_LOCK:
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
            try:
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                try:
                    yield conn
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            finally:
                conn.close()


def _has_table(conn: sqlite3.Connection) -> bool:
    found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (TABLE,))
    return found.fetchone() is not None
