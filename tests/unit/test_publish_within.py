"""Publishing within the application's own transaction (`publish_many(within=conn)`).

On SQLite the application's database holds lanner's tables (`?shared=1`): the jobs are
written by the application's connection, so a rollback leaves none and a commit shows them
and wakes a pop blocked in another thread (by the file's watch: its safety net is off
here). On Redis and SQS the jobs go to the outbox of the application's database, which the
relay puts into the broker once each, even when a relay dies between its put and its
delete (`lanner.outbox.relay`).
"""

from __future__ import annotations

import sqlite3
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import lanner
from lanner.engines.sqlite import SQLiteEngine, connection
from lanner.errors import MalformedArgument, SchemaError
from lanner.outbox.relay import OutboxRelay, relay_once
from lanner.outbox.sqlite import SQLiteOutbox

LONG = 20.0
"""A wait that ends only by a commit: the test fails, slowly, if none wakes it."""


@pytest.fixture
def app_db(tmp_path: Path) -> str:
    """The application's database, with a table of its own."""
    path = str(tmp_path / "app.db")
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)")
    conn.commit()
    conn.close()
    return path


@pytest.fixture
def shared_app(app_db: str) -> Iterator[lanner.App]:
    app = lanner.App(broker=f"sqlite:///{app_db}?shared=1")
    _ = app.engine  # opened (lanner's tables made) before any transaction of the application
    yield app
    app.close()


def add(a: int, b: int) -> int:
    return a + b


def test_a_rollback_leaves_no_job_and_a_commit_shows_it(
    shared_app: lanner.App, app_db: str
) -> None:
    task = shared_app.task(add)
    conn = sqlite3.connect(app_db)
    conn.execute("INSERT INTO orders (item) VALUES ('tea')")
    gone = shared_app.publish_many([task.message(1, 2)], within=conn)[0]
    assert shared_app.engine.get(gone) is None  # not before the commit
    conn.rollback()
    assert shared_app.engine.get(gone) is None
    conn.execute("INSERT INTO orders (item) VALUES ('cake')")
    kept = task.options(priority=5, delay=60).message(3, 4)
    handle = shared_app.publish_many([kept], within=conn)[0]
    conn.commit()
    job = shared_app.engine.get(handle)
    assert job is not None
    assert (job.state, job.priority) == (lanner.JobState.SCHEDULED, 5)
    assert conn.execute("SELECT item FROM orders").fetchall() == [("cake",)]


@pytest.mark.skipif(sys.platform != "linux", reason="inotify is Linux's")
def test_a_commit_wakes_a_blocked_pop(
    shared_app: lanner.App, app_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connection, "WATCH_RECHECK_SEC", 3600.0)
    task = shared_app.task(add)
    popper = SQLiteEngine(app_db)
    popped: list[list[lanner.Job]] = []
    started = threading.Event()

    def pop() -> None:
        started.set()
        popped.append(popper.pop("default", "w1", 1, wait=LONG))

    thread = threading.Thread(target=pop)
    thread.start()
    started.wait()
    conn = sqlite3.connect(app_db)
    conn.execute("BEGIN IMMEDIATE")
    handle = shared_app.publish_many([task.message(1, 2)], within=conn)[0]
    conn.commit()
    thread.join(LONG + 10)
    popper.close()
    assert [job.jid for job in popped[0]] == [handle]


def test_a_listener_hears_the_put_at_the_commit_only(shared_app: lanner.App, app_db: str) -> None:
    task = shared_app.task(add)
    with shared_app.engine.events() as stream:
        conn = sqlite3.connect(app_db)
        gone = shared_app.publish_many([task.message(1, 2)], within=conn)[0]
        conn.rollback()
        kept = shared_app.publish_many([task.message(3, 4)], within=conn)[0]
        conn.commit()
        event = stream.get(timeout=LONG)
    assert event is not None
    assert (event.kind, event.jid) == ("put", kept)
    assert gone != kept


def test_connections_that_cannot_join(shared_app: lanner.App, tmp_path: Path) -> None:
    task = shared_app.task(add)
    other = sqlite3.connect(tmp_path / "other.db")
    with pytest.raises(MalformedArgument, match="not on lanner's file"):
        shared_app.publish_many([task.message(1, 2)], within=other)
    autocommit = sqlite3.connect(shared_app.settings.broker[len("sqlite:///") : -len("?shared=1")])
    autocommit.isolation_level = None
    with pytest.raises(MalformedArgument, match="autocommit"):
        shared_app.publish_many([task.message(1, 2)], within=autocommit)
    with pytest.raises(MalformedArgument, match=r"sqlite3\.Connection"):
        shared_app.publish_many([task.message(1, 2)], within="app.db")  # type: ignore[arg-type]


def test_an_application_database_needs_shared(app_db: str) -> None:
    with pytest.raises(SchemaError, match="did not create"):
        SQLiteEngine(app_db)
    conn = sqlite3.connect(app_db)
    conn.execute("CREATE TABLE jobs (id INTEGER)")
    conn.commit()
    with pytest.raises(SchemaError, match="already has jobs"):
        lanner.open_engine(f"sqlite:///{app_db}?shared=1")


# -- the outbox ---------------------------------------------------------------------------
@pytest.fixture
def redis_app(redis_url: str) -> Iterator[lanner.App]:
    app = lanner.App(broker=redis_url)
    yield app
    app.close()


def test_the_outbox_is_relayed_once_committed(redis_app: lanner.App, app_db: str) -> None:
    task = redis_app.task(queue="outbox-test")(add)
    conn = sqlite3.connect(app_db)
    conn.execute("INSERT INTO orders (item) VALUES ('tea')")
    gone = redis_app.publish_many([task.message(1, 2)], within=conn)[0]
    conn.rollback()
    conn.execute("INSERT INTO orders (item) VALUES ('cake')")
    kept = redis_app.publish_many([task.options(priority=3).message(3, 4)], within=conn)[0]
    outbox = SQLiteOutbox(app_db)
    assert outbox.count() == 0  # not before the commit
    conn.commit()
    assert outbox.count() == 1
    assert relay_once(redis_app.engine, outbox) == 1
    assert outbox.count() == 0
    assert redis_app.engine.get(gone) is None
    job = redis_app.engine.get(kept)
    assert job is not None
    assert (job.klass, job.priority, job.queue) == (task.name, 3, "outbox-test")


def test_a_relay_that_died_before_its_delete_puts_nothing_twice(
    redis_app: lanner.App, app_db: str
) -> None:
    task = redis_app.task(queue="outbox-crash")(add)
    conn = sqlite3.connect(app_db)
    handle = redis_app.publish_many([task.message(1, 2)], within=conn)[0]
    conn.commit()
    outbox = SQLiteOutbox(app_db)
    # A relay takes the row and puts its job, then dies before deleting the row.
    (row,) = outbox.take(10)
    redis_app.engine.put_many([row.job._replace(if_exists="keep")])
    # The job runs to its end meanwhile.
    (popped,) = redis_app.engine.pop("outbox-crash", "w1", 1)
    redis_app.engine.complete(popped.jid, "w1", "outbox-crash")
    assert relay_once(redis_app.engine, outbox) == 1  # the next relay: the row again
    assert outbox.count() == 0
    job = redis_app.engine.get(handle)
    assert job is not None
    assert job.state == lanner.JobState.COMPLETE  # not put again: it would run twice
    assert redis_app.engine.pop("outbox-crash", "w1", 1) == []


def test_the_relay_thread(redis_app: lanner.App, app_db: str) -> None:
    task = redis_app.task(queue="outbox-thread")(add)
    outbox = SQLiteOutbox(app_db)
    with OutboxRelay(lambda: redis_app.reopen_engine(max_wait=10), outbox, interval=0.05):
        conn = sqlite3.connect(app_db)
        handles = redis_app.publish_many([task.message(n, n) for n in range(5)], within=conn)
        conn.commit()
        jobs = redis_app.engine.pop("outbox-thread", "w1", 5, wait=LONG)
    assert sorted(job.jid for job in jobs) == sorted(handles)
    assert outbox.count() == 0


def test_the_outbox_on_sqs(sqs_fresh_url: str, app_db: str) -> None:
    app = lanner.App(broker=sqs_fresh_url)
    try:
        task = app.task(queue="outbox-sqs")(add)
        conn = sqlite3.connect(app_db)
        handle = app.publish_many([task.message(1, 2)], within=conn)[0]
        conn.commit()
        outbox = SQLiteOutbox(app_db)
        assert relay_once(app.engine, outbox) == 1
        (job,) = app.engine.pop("outbox-sqs", "w1", 1, wait=LONG)
        assert (job.jid, job.klass) == (handle, task.name)
        assert outbox.count() == 0
    finally:
        app.close()


def test_a_fair_key_goes_through_the_outbox_and_what_sqs_cannot_hold_is_refused_first(
    sqs_fresh_url: str, app_db: str
) -> None:
    app = lanner.App(broker=sqs_fresh_url)
    try:
        fair = app.task(queue="outbox-fair", fair_key=lambda a, **_: f"tenant-{a}")(add)
        limited = app.task(queue="outbox-fair", name="outbox_limited", rate_limit="1/s")(add)
        conn = sqlite3.connect(app_db)
        handle = app.publish_many([fair.message(1, 2)], within=conn)[0]
        with pytest.raises(lanner.Unsupported, match="'rate_limit'"):
            app.publish_many([limited.message(1, 2)], within=conn)
        conn.commit()
        outbox = SQLiteOutbox(app_db)
        (row,) = outbox.take(10)
        assert row.job.flow == lanner.Flow(fair_key="tenant-1")  # a Flow again, not a list
        assert relay_once(app.engine, outbox) == 1
        (job,) = app.engine.pop("outbox-fair", "w1", 1, wait=LONG)
        assert job.jid == handle
    finally:
        app.close()
