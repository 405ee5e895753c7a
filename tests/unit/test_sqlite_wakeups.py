"""Waiting for a SQLite file's commits (blocked pops, job waits, event streams): woken by
the file's WAL being written (Linux's inotify), never by checking the file over and over
while nothing happens. The safety net of a look every WATCH_RECHECK_SEC is turned off
here, so that a wake-up the watch missed shows as a wait that runs to its end."""

from __future__ import annotations

import multiprocessing
import random
import sqlite3
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from lanner.engines.sqlite import SQLiteEngine, SQLiteOptions, connection
from lanner.engines.sqlite.connection import Database
from lanner.engines.sqlite.filewatch import FileWatch

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="inotify is Linux's")

LONG = 20.0
"""A wait that ends only by a commit: the test fails, slowly, if none wakes it."""


@pytest.fixture(autouse=True)
def no_safety_net(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connection, "WATCH_RECHECK_SEC", 3600.0)


@pytest.fixture
def path(tmp_path: Path) -> str:
    made = str(tmp_path / "jobs.db")
    SQLiteEngine(made).close()
    return made


def versions(database: Database) -> tuple[int, int]:
    with database.read() as conn:
        return database.versions(conn)


def test_a_watch_sees_writes_of_another_connection_and_a_wal_made_anew(path: str) -> None:
    keeper = sqlite3.connect(path, isolation_level=None)  # keeps the WAL while it is open
    keeper.execute("SELECT 1 FROM config").fetchall()
    watch = FileWatch.open(path)
    assert watch is not None
    try:
        assert not watch.wait(0)
        keeper.execute("INSERT INTO config VALUES ('a', '1')")
        assert watch.wait(LONG)
        assert not watch.wait(0)  # consumed
        keeper.close()  # the last connection: the WAL is checkpointed and deleted
        assert not Path(f"{path}-wal").exists()
        watch.wait(0)
        again = sqlite3.connect(path, isolation_level=None)
        again.execute("INSERT INTO config VALUES ('b', '2')")  # a new WAL, written
        assert watch.wait(LONG)
        again.execute("INSERT INTO config VALUES ('c', '3')")
        assert watch.wait(LONG)  # and watched
        again.close()
    finally:
        watch.close()


def test_idle_waits_do_not_check_the_file_over_and_over(path: str) -> None:
    engine = SQLiteEngine(path)
    engine.put("q", "running", "Task")
    engine.pop("q", "w")
    statements: list[str] = []
    with engine.database.statement() as conn:
        conn.set_trace_callback(statements.append)
    assert engine.pop("q", "w", wait=1.5) == []
    job = engine.wait("running", timeout=1.5)
    assert job is not None
    assert job.state == "running"
    # Checking every 2 ms, they made about 1,500 statements; watching, a few each.
    assert len(statements) < 60, statements[-10:]
    engine.close()


def _commit_after(path: str, ready: Connection, synchronous: str, count: int) -> None:
    """In another process: `count` commits, each once the parent waits for it (a few ms
    after it says it is about to: the commit should find it asleep)."""
    with SQLiteEngine(path, SQLiteOptions(synchronous=synchronous)) as engine:
        for number in range(count):
            ready.recv()
            time.sleep(random.uniform(0.002, 0.01))
            engine.put("q", f"j{number}", "Task")


@pytest.mark.parametrize("synchronous", ["full", "normal"])
def test_a_wait_wakes_on_each_commit_of_another_process(path: str, synchronous: str) -> None:
    """Each commit is written to the WAL before it shows (with `full`, a sync between):
    the waiter woken by the write must go on looking until it shows. The waiter commits
    too before each wait, as a worker does (its pop), which the watch reports as well."""
    database = Database(path, SQLiteOptions())
    context = multiprocessing.get_context("fork")
    parent, child = context.Pipe()
    count = 100
    committer = context.Process(target=_commit_after, args=(path, child, synchronous, count))
    committer.start()
    try:
        for number in range(count):
            with database.write() as conn:
                conn.execute("INSERT INTO config VALUES (?, '1')", (f"mine-{number}",))
            seen = versions(database)
            parent.send("go")
            started = time.monotonic()
            assert database.wait_for_commit(seen, LONG) != seen, f"commit {number} unseen"
            assert time.monotonic() - started < LONG / 2
    finally:
        committer.join(30)
        database.close()
    assert committer.exitcode == 0


def _pop_blocked(engine: SQLiteEngine, done: Connection) -> None:
    started = time.monotonic()
    jobs = engine.pop("q", "w", wait=LONG)
    done.send(([job.jid for job in jobs], time.monotonic() - started))


def test_blocked_pops_of_a_process_and_of_its_forked_child_wake_on_puts(path: str) -> None:
    """The child uses the engine it inherited: the parent's watch stays the parent's (two
    threads of the parent wait on it), the child watches on its own."""
    engine = SQLiteEngine(path)
    engine.pop("q", "w0", wait=0.05)  # the parent watches the file: the child inherits it
    context = multiprocessing.get_context("fork")
    parent, child = context.Pipe()
    popper = context.Process(target=_pop_blocked, args=(engine, child))
    popper.start()
    try:
        deadline = time.monotonic() + 30
        # Registered by its first pop, which found nothing: it is blocked now.
        while "w" not in [worker.name for worker in engine.workers()]:
            assert time.monotonic() < deadline, "the child never popped"
            time.sleep(0.01)
        engine.put("q", "j1", "Task")
        assert parent.poll(LONG)
        jids, took = parent.recv()
        assert jids == ["j1"]
        assert took < LONG / 2
        # The parent's own watch still wakes it, with two threads waiting.
        popped: list[list[str]] = []
        waiter = threading.Thread(
            target=lambda: popped.append([j.jid for j in engine.pop("q", "w0", wait=LONG)])
        )
        seen = versions(engine.database)
        waiter.start()
        with SQLiteEngine(path) as other:
            other.put("r", "j2", "Task")
            assert engine.database.wait_for_commit(seen, LONG) != seen
            other.put("q", "j3", "Task")
        waiter.join(LONG / 2)
        assert popped == [["j3"]]
    finally:
        popper.join(30)
        engine.close()
    assert popper.exitcode == 0


def test_where_the_file_cannot_be_watched_waits_check_it(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not Linux, or the per-user limit of inotify instances reached: as before the watch."""
    monkeypatch.setattr(FileWatch, "open", classmethod(lambda cls, path: None))
    database = Database(path, SQLiteOptions())
    seen = versions(database)
    with SQLiteEngine(path) as other:
        putter = threading.Thread(target=lambda: other.put("q", "j1", "Task"))
        putter.start()
        assert database.wait_for_commit(seen, LONG) != seen
        putter.join()
    database.close()
