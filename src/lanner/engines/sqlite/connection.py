"""The SQLite engine's connection to its file: transactions, the write lock, commit wake-ups.

Every command is one transaction on one connection per process. Commands that change
anything start with BEGIN IMMEDIATE, which takes the file's write lock before the first
read, so two processes can never both see a job as waiting and both lock it. Threads of
one process share the connection under a lock.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from lanner.engines.sqlite.options import SQLiteOptions
from lanner.engines.sqlite.schema import connect
from lanner.errors import EngineUnavailable


class Database:
    """One SQLite file as the engine uses it. Safe to share between threads."""

    def __init__(self, path: str, options: SQLiteOptions) -> None:
        self.path = path
        self.options = options
        self._lock = threading.Lock()
        # Commits of this process's own connection do not change PRAGMA data_version for
        # it, so blocked pops of this process are woken by this condition instead.
        self._committed = threading.Condition(self._lock)
        self.commits = 0
        self._busy_timeout_pragma = f"PRAGMA busy_timeout = {int(options.busy_timeout * 1000)}"
        self._conn: sqlite3.Connection | None = None
        self._pid = 0
        # A connection inherited through fork must never be used or closed by the child
        # (SQLite's locks are per process); it is parked here instead of being collected.
        self._inherited: list[sqlite3.Connection] = []

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    def _connection(self) -> sqlite3.Connection:
        pid = os.getpid()
        if self._conn is None or self._pid != pid:
            if self._conn is not None:
                self._inherited.append(self._conn)
            self._conn = connect(self.path, self.options.synchronous, self.options.busy_timeout)
            self._pid = pid
        return self._conn

    def open(self) -> None:
        """Open the connection now (and so check the file), not at the first command."""
        with self._lock:
            self._connection()

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction: the file's write lock from the first statement to COMMIT."""
        with self._lock:
            conn = self._connection()
            self._begin_immediate(conn)
            try:
                yield conn
                conn.execute("COMMIT")
                self.commits += 1
                self._committed.notify_all()
            except BaseException:
                # Also after a failed COMMIT: the connection must never stay mid-transaction.
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def _begin_immediate(self, conn: sqlite3.Connection) -> None:
        """Take the file's write lock, retrying in short steps while another process has it.

        SQLite's own busy handler sleeps 1, 2, 5, 10 ... 100 ms between tries, so a process
        that keeps writing can starve another for seconds (measured: a pop waited 2.9 s
        behind two busy poppers). Retrying every 0.05 to 1 ms keeps waits short and fairer.
        The connection's busy timeout stays in force for every other statement.
        """
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            deadline = time.monotonic() + self.options.busy_timeout
            pause = 0.00005
            while True:
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    return
                except sqlite3.OperationalError as error:
                    if error.sqlite_errorcode != sqlite3.SQLITE_BUSY:
                        raise
                    if time.monotonic() >= deadline:
                        raise EngineUnavailable(
                            f"{self.path}: another process held the write lock for "
                            f"{self.options.busy_timeout:g} s (busy_timeout)"
                        ) from error
                time.sleep(pause)
                pause = min(pause * 2, 0.001)
        finally:
            conn.execute(self._busy_timeout_pragma)

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A read-only transaction: one consistent snapshot, no write lock."""
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    @contextmanager
    def statement(self) -> Iterator[sqlite3.Connection]:
        """The connection for one read statement (its own implicit transaction)."""
        with self._lock:
            yield self._connection()

    def versions(self, conn: sqlite3.Connection) -> tuple[int, int]:
        """What changes when anyone commits: the file's data_version (other processes'
        commits) and this process's commit count. Read inside a write transaction, it
        counts that transaction's commit as made."""
        (version,) = conn.execute("PRAGMA data_version").fetchone()
        return int(version), self.commits + (1 if conn.in_transaction else 0)

    def wait_for_commit(self, seen: tuple[int, int], timeout: float) -> tuple[int, int]:
        """Wait up to `timeout` for a commit of this process after `seen`; return the
        versions now (a commit of another process shows as a changed data_version)."""
        with self._lock:
            if self.commits == seen[1]:
                self._committed.wait(timeout)
            return self.versions(self._connection())
