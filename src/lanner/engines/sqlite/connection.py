"""The SQLite engine's connection to its file: transactions, the write lock, commit wake-ups.

Every command is one transaction on one connection per process. Commands that change
anything start with BEGIN IMMEDIATE, which takes the file's write lock before the first
read, so two processes can never both see a job as waiting and both lock it. Threads of
one process share the connection under a lock. While an event stream listens, a write
transaction also stores the events it makes, before its COMMIT (`eventlog.py`). A commit
that must be durable waits for the disk after it lets go of the write lock, sharing one
fsync with the other threads' commits made meanwhile (`walsync.py`, group commit).

No connection crosses a fork. SQLite keeps per-process state about every open file (its
POSIX locks, the shared-memory map of the WAL index) that a child would inherit without
the locks themselves: a child opening the file again would share that state, believe it
holds locks it does not hold, and its commits could vanish or corrupt the file. So before
any fork of this process every Database closes its connection (`os.register_at_fork`),
and each process opens its own on its next command (and its own watch of the file).

A blocked pop, a job's `wait` and an event stream wait for other processes' commits by
sleeping until the file's WAL is written (`filewatch.py`, Linux), or else by checking
PRAGMA data_version every few milliseconds.

Every error of the store is a `LannerError` here: an `EngineUnavailable` when the file
cannot be used now (locked past `busy_timeout`, unreadable, full, gone), so that workers
wait and retry instead of dying; a `StoreMisconfigured` when waiting cannot help (a file
that is not a database, or is damaged), so that they stop and say so.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from lanner.engines.sqlite import eventlog
from lanner.engines.sqlite.filewatch import FileWatch
from lanner.engines.sqlite.options import SQLiteOptions
from lanner.engines.sqlite.schema import connect, retry_while_busy
from lanner.engines.sqlite.walsync import GROUPED_MODES, WalSync
from lanner.errors import EngineUnavailable, LannerError, StoreMisconfigured

_SYNCED_MODES: Final = frozenset({"full", "extra"})
"""The `synchronous` modes whose commits wait for the disk (`write(synced=False)` skips it)."""

logger = logging.getLogger("lanner.sqlite")

FILE_CHECK_SEC: Final = 1.0
"""How often a connection in use checks that its path still names the file it opened."""

WATCH_RECHECK_SEC: Final = 1.0
"""The longest a wait for a commit sleeps on the file's watch before it looks anyway."""

SETTLE_CHECKS: Final = 5
"""Checks for a commit (0.1 ms doubling: 3 ms in all) before a woken waiter looks whether
another connection still holds the write lock, the commit it wrote not showing yet."""


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
        self._conn: sqlite3.Connection | None = None
        self._walsync: WalSync | None = None  # group commit (`walsync.py`), per connection
        # The connection's busy timeout is off (0) from one write transaction's BEGIN to
        # the next read, which sets it again: a process that only writes (a publisher, a
        # worker) saves two statements per transaction. A write holds the write lock from
        # its BEGIN IMMEDIATE, which waits in `retry_while_busy`, so nothing after it waits.
        self._impatient = False
        self._pid = 0
        self._file: tuple[int, int] = (0, 0)  # (st_dev, st_ino) of the file opened
        self._checked_at = 0.0
        self._watch: FileWatch | None = None  # see wait_for_commit
        self._watch_pid = 0  # the process the watch belongs to
        self._watch_tried = False
        self._watching = False  # a thread sleeps on the watch, without the lock
        # A connection of another process (inherited only if a fork could not wait for it)
        # must never be used or closed here: closing runs SQLite's cleanup, which may write.
        self._inherited: list[sqlite3.Connection] = []
        _DATABASES.add(self)

    def close(self) -> None:
        with self._lock:
            self._close()
            self._drop_watch()

    def _close(self) -> None:
        if self._conn is not None:
            if self._pid == os.getpid():
                self._conn.close()
            else:
                self._inherited.append(self._conn)
        self._conn = None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None or self._pid != os.getpid():
            self._open()
        elif time.monotonic() - self._checked_at > FILE_CHECK_SEC:
            self._check_file()
        assert self._conn is not None
        return self._conn

    def _open(self) -> None:
        self._close()
        try:
            self._conn = connect(
                self.path,
                self.options.synchronous,
                self.options.busy_timeout,
                shared=bool(self.options.shared),
            )
            found = os.stat(self.path)
        except (sqlite3.Error, OSError) as error:
            self._close()
            raise _lanners(error, self.path, "cannot open ") from None
        self._pid = os.getpid()
        self._file = (found.st_dev, found.st_ino)
        self._walsync = self._group_commits(self._conn)
        self._impatient = False  # connect() set the busy timeout
        self._checked_at = time.monotonic()

    def _group_commits(self, conn: sqlite3.Connection) -> WalSync | None:
        """Where commits are synced (`full`, `extra`) in WAL mode: the connection's commits
        made as with `normal`, and synced by `WalSync` after the write lock is let go (group
        commit). A new one per connection: none of its state crosses a fork."""
        if self.options.synchronous not in GROUPED_MODES:
            return None
        (mode,) = conn.execute("PRAGMA journal_mode").fetchone()
        if str(mode).lower() != "wal":
            return None
        conn.execute("PRAGMA synchronous = NORMAL")
        return WalSync(self.path + "-wal")

    def _check_file(self) -> None:
        """Reopen if the path now names another file, or none (deleted, or replaced)."""
        self._checked_at = time.monotonic()
        try:
            found = os.stat(self.path)
            if (found.st_dev, found.st_ino) == self._file:
                return
            what = "was replaced by another file"
        except FileNotFoundError:
            what = "was deleted"
        except OSError:
            return  # cannot tell now; the next check will
        logger.warning("%s %s: opening it anew", self.path, what)
        self._close()
        self._drop_watch()
        self._open()

    def open(self) -> None:
        """Open the connection now (and so check the file), not at the first command."""
        with self._lock:
            self._connection()

    @contextmanager
    def write(self, *, synced: bool = True) -> Iterator[sqlite3.Connection]:
        """A write transaction: the file's write lock from the first statement to COMMIT.

        Where commits are synced (`full`, the default), the write lock is let go at
        COMMIT and the disk waited for after it, one fsync for the commits of every thread
        waiting then (`walsync.py`, group commit): a write returns once it is durable.

        `synced=False` (a pop's): it does not wait for the disk, as with
        `synchronous=normal`: a power cut may undo it (the job is then popped again, which
        at-least-once allows; its workers, on the same machine, are cut off too), a
        process's crash never, and the next synced commit makes it durable with its own,
        the WAL being synced whole."""
        commit, syncer = 0, None
        with self._lock, _store_errors(self.path):
            conn = self._connection()
            walsync = self._walsync
            if walsync is not None or synced or self.options.synchronous not in _SYNCED_MODES:
                changes = conn.total_changes
                with self._transaction(conn):
                    yield conn
                # Synced below, the write lock let go (`walsync.py`); a transaction that
                # changed no row wrote nothing to sync.
                if walsync is not None and synced and conn.total_changes != changes:
                    commit, syncer = walsync.committed(), walsync
            else:  # not in WAL mode: SQLite syncs, unless told otherwise for this commit
                conn.execute("PRAGMA synchronous = NORMAL")
                try:
                    with self._transaction(conn):
                        yield conn
                finally:  # whatever happened: every other commit is synced as configured
                    conn.execute(f"PRAGMA synchronous = {self.options.synchronous.upper()}")
        if syncer is not None:
            try:
                syncer.sync(commit)
            except OSError as error:
                raise _lanners(error, self.path, "cannot sync the WAL of ") from None

    @contextmanager
    def _transaction(self, conn: sqlite3.Connection) -> Iterator[None]:
        self._begin_immediate(conn)
        try:
            eventlog.begin(conn)  # EVENTS: collect them if somebody listens
            yield
            eventlog.flush(conn)
            conn.execute("COMMIT")
            self.commits += 1
            self._committed.notify_all()
        except BaseException:
            # Also after a failed COMMIT: the connection must never stay mid-transaction.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        finally:
            eventlog.end()

    def _begin_immediate(self, conn: sqlite3.Connection) -> None:
        """Take the file's write lock, retrying in short steps while another process has it
        (`schema.execute_when_free`: fairer than SQLite's own waits)."""
        if not self._impatient:
            conn.execute("PRAGMA busy_timeout = 0")
            self._impatient = True
        try:
            retry_while_busy(conn, "BEGIN IMMEDIATE", self.options.busy_timeout)
        except sqlite3.OperationalError as error:
            if error.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY:
                raise
            raise EngineUnavailable(
                f"{self.path}: another process held the write lock for "
                f"{self.options.busy_timeout:g} s (busy_timeout)"
            ) from error

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A read-only transaction: one consistent snapshot, no write lock."""
        with self._lock, _store_errors(self.path):
            conn = self._patient_connection()
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    @contextmanager
    def statement(self) -> Iterator[sqlite3.Connection]:
        """The connection for one read statement (its own implicit transaction)."""
        with self._lock, _store_errors(self.path):
            yield self._patient_connection()

    def _patient_connection(self) -> sqlite3.Connection:
        """The connection with its busy timeout set (off since a write, if any)."""
        conn = self._connection()
        if self._impatient:
            conn.execute(f"PRAGMA busy_timeout = {int(self.options.busy_timeout * 1000)}")
            self._impatient = False
        return conn

    def versions(self, conn: sqlite3.Connection, *, committing: bool = False) -> tuple[int, int]:
        """What changes when anyone commits: the file's data_version (other processes'
        commits) and this process's commit count. Read inside a write transaction
        (`committing`), it counts that transaction's commit as made."""
        (version,) = conn.execute("PRAGMA data_version").fetchone()
        return int(version), self.commits + (1 if committing else 0)

    def wait_for_commit(self, seen: tuple[int, int], timeout: float) -> tuple[int, int]:
        """Wait up to `timeout` seconds for a commit after `seen`, by any process; return the
        versions now (unchanged: none came in time).

        Where the file can be watched (`filewatch.py`), one waiting thread sleeps until its
        WAL is written, the others on `_committed`, woken by this process's commits and by
        that thread. A commit is written to the WAL before it shows (its writer syncs the
        WAL first, then shows it, then lets go of the write lock), so a woken waiter checks
        again every 0.1 ms, doubling up to `poll_interval`: SETTLE_CHECKS times, then for as
        long as another connection holds the write lock. Where the file cannot be watched,
        it checks so all the time.
        """
        deadline = time.monotonic() + timeout
        pause = 0.0001
        checks = 0  # checks left before the write lock is looked at again
        with self._lock, _store_errors(self.path):
            watch = self._own_watch()  # before the first look: no write goes unseen
            while True:
                conn = self._connection()
                current = self.versions(conn)
                left = deadline - time.monotonic()
                if current != seen or left <= 0:
                    return current
                if watch is not None and checks <= 0 and not self._writer_busy(conn):
                    # The lock is free: every commit written so far shows now.
                    current = self.versions(conn)
                    if current != seen:
                        return current
                    pause, checks = 0.0001, SETTLE_CHECKS  # for when it wakes
                    if self._watching:
                        self._committed.wait(min(left, WATCH_RECHECK_SEC))
                    else:
                        self._watch_wal(watch, min(left, WATCH_RECHECK_SEC))
                    watch = self._own_watch()  # dropped meanwhile: a new one, or none
                    continue
                self._committed.wait(min(pause, left))
                pause = min(pause * 2, self.options.poll_interval)
                checks -= 1

    def _writer_busy(self, conn: sqlite3.Connection) -> bool:
        """Whether another connection holds the write lock now (a try, no wait)."""
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as error:
            # Another error (a read-only file): no telling; the watch wakes the wait.
            return error.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY
        else:
            conn.execute("ROLLBACK")
            return False
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(self.options.busy_timeout * 1000)}")
            self._impatient = False

    def _own_watch(self) -> FileWatch | None:
        """This process's watch of the file (made at first use), or None: poll instead."""
        if self._watch_pid != os.getpid():
            self._drop_watch()  # inherited through a fork: the parent's, for its threads
            self._watching, self._watch_pid = False, os.getpid()
        if self._watch is None and not self._watch_tried:
            self._watch_tried = True  # once: where inotify is missing, it stays missing
            self._watch = FileWatch.open(self.path)
        return self._watch

    def _watch_wal(self, watch: FileWatch, timeout: float) -> None:
        """Sleep on `watch`, without the lock, until the WAL is written or `timeout`."""
        self._watching = True
        self._lock.release()
        try:
            watch.wait(timeout)
        finally:
            self._lock.acquire()
            self._watching = False
            if watch is not self._watch:  # dropped meanwhile (closed, or the file replaced)
                watch.close()
            self._committed.notify_all()  # the others look again; one watches next

    def _drop_watch(self) -> None:
        """Close the watch, made anew at the next wait. One a thread sleeps on is closed by
        it when it wakes; one inherited through a fork is this process's copy of the
        descriptor (closing it leaves the parent's as it was)."""
        if self._watch is not None and (not self._watching or self._watch_pid != os.getpid()):
            self._watch.close()
        self._watch, self._watch_tried = None, False


@contextmanager
def _store_errors(path: str) -> Iterator[None]:
    """SQLite's errors as lanner's (`_lanners`), but for lanner's own mistakes."""
    try:
        yield
    except (sqlite3.InterfaceError, sqlite3.ProgrammingError, sqlite3.IntegrityError):
        raise  # lanner's own mistakes: never hidden as an outage
    except sqlite3.Error as error:
        raise _lanners(error, path) from None


def _lanners(error: sqlite3.Error | OSError, path: str, doing: str = "") -> LannerError:
    """A file that is not a database, or is damaged, as `StoreMisconfigured`: waiting cannot
    mend it. A store that cannot be used now (locked past busy_timeout, I/O, full,
    read-only, gone) as `EngineUnavailable`, so that workers wait and retry."""
    reason = _reason(error)
    code = error.sqlite_errorcode & 0xFF if isinstance(error, sqlite3.Error) else None
    if code == sqlite3.SQLITE_NOTADB:
        return StoreMisconfigured(
            f"{path} is not an SQLite database ({reason}): name lanner's database file in "
            "the broker URL (sqlite:///PATH), or move this one away"
        )
    if code == sqlite3.SQLITE_CORRUPT:
        return StoreMisconfigured(
            f"{path} is damaged ({reason}): restore it from a backup, or move it away for "
            "lanner to start a new one"
        )
    if isinstance(error, sqlite3.OperationalError | OSError) or doing:
        return EngineUnavailable(f"{doing}{path}: {reason}")
    if isinstance(error, sqlite3.DatabaseError):
        return EngineUnavailable(f"{path} cannot be read: {reason}")
    return LannerError(f"{path}: {reason}")


def _reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__


# -- fork ---------------------------------------------------------------------------------
_DATABASES: weakref.WeakSet[Database] = weakref.WeakSet()
_held_for_fork: list[Database] = []


FORK_WAIT_SEC: Final = 2.0
"""How long a fork waits for another thread's transaction to end before it goes on."""


def _close_before_fork() -> None:
    """Close every connection of this process, each between two of its transactions."""
    for database in list(_DATABASES):
        # A transaction in another thread ends first. One that does not end in time (or
        # this very thread's) leaves its connection open: the child never touches it.
        if database._lock.acquire(timeout=FORK_WAIT_SEC):
            _held_for_fork.append(database)
            database._close()
        else:
            logger.warning("forking while %s is in use: its connection stays open in the "
                           "child, unused", database.path)  # fmt: skip


def _release_after_fork() -> None:
    while _held_for_fork:
        _held_for_fork.pop()._lock.release()


os.register_at_fork(
    before=_close_before_fork,
    after_in_parent=_release_after_fork,
    after_in_child=_release_after_fork,
)
