"""The SQLite engine's events: across processes, nothing stored for nobody, retention, gaps."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lanner import Event, EventStream, LannerError, NewJob
from lanner.engines.sqlite import eventlog
from lanner.engines.sqlite.engine import SQLiteEngine
from lanner.engines.sqlite.events import SQLiteEventStream
from lanner.engines.sqlite.schema import SCHEMA_VERSION

T0 = 1000.0
VERSION_3_SCHEMA = (Path(__file__).parent / "sqlite_schema_v3.sql").read_text()


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[SQLiteEngine]:
    with SQLiteEngine(tmp_path / "events.db") as opened:
        yield opened


def next_event(stream: EventStream, within: float = 10.0) -> Event:
    event = stream.get(timeout=within)
    assert event is not None, f"no event within {within} s"
    return event


def event_rows(engine: SQLiteEngine) -> int:
    with engine.database.statement() as conn:
        return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])


def test_events_of_another_process_arrive(engine: SQLiteEngine) -> None:
    code = (
        "import sys, lanner\n"
        "with lanner.open_engine('sqlite:///' + sys.argv[1]) as engine:\n"
        "    engine.put('q', 'from-child', 'Task', now=1000.0)\n"
        "    engine.pop('q', 'child-worker', now=1000.0)\n"
        "    engine.complete('from-child', 'child-worker', 'q', now=1001.0)\n"
    )
    with engine.events() as stream:
        subprocess.run([sys.executable, "-c", code, engine.path], check=True, timeout=60)
        assert [next_event(stream) for _ in range(2)] == [
            Event("put", jid="from-child", queue="q"),
            Event("completed", jid="from-child", queue="q"),
        ]
        assert stream.get(timeout=0.2) is None


def test_no_event_is_stored_while_nobody_listens(engine: SQLiteEngine) -> None:
    engine.put_many([NewJob("q", f"j{n}", "Task") for n in range(3)], now=T0)
    engine.pop("q", "w", 3, now=T0)
    engine.complete_many(["j0", "j1"], "w", "q", now=T0)
    engine.fail("j2", "w", "boom", "no", now=T0)
    engine.config_set("q-heartbeat", 5, now=T0)
    assert event_rows(engine) == 0

    with engine.events() as stream:
        engine.put("q", "heard", "Task", now=T0)
        assert next_event(stream) == Event("put", jid="heard", queue="q")
        assert event_rows(engine) == 1
    with engine.database.statement() as conn:  # closing unregistered the stream
        assert conn.execute("SELECT count(*) FROM event_listeners").fetchone() == (0,)
    engine.put("q", "unheard", "Task", now=T0)
    assert event_rows(engine) == 1


def test_a_lapsed_registration_stores_nothing(engine: SQLiteEngine) -> None:
    with engine.events():
        with engine.database.write() as conn:
            conn.execute("UPDATE event_listeners SET expires_at = ?", (time.time() - 1,))
        engine.put("q", "j", "Task", now=T0)
        assert event_rows(engine) == 0


def test_a_stream_behind_the_retention_yields_a_gap(engine: SQLiteEngine) -> None:
    with engine.events() as stream:
        engine.put("q", "lost", "Task", now=T0)
        with engine.database.write() as conn:  # as retention would, a minute later
            eventlog.prune(conn, time.time() + eventlog.RETENTION_SEC + 1)
        assert event_rows(engine) == 0
        engine.put("q", "after", "Task", now=T0)
        assert next_event(stream) == Event("gap")
        assert next_event(stream) == Event("put", jid="after", queue="q")
        assert stream.get(timeout=0.2) is None


def test_writers_delete_old_events_now_and_then(engine: SQLiteEngine) -> None:
    with engine.events() as stream:
        engine.put("q", "old", "Task", now=T0)
        assert next_event(stream).jid == "old"
        with engine.database.write() as conn:
            conn.execute("UPDATE events SET at = at - ?", (eventlog.RETENTION_SEC + 1,))
        jobs = [NewJob("q", f"j{n}", "Task") for n in range(eventlog.RETENTION_EVERY)]
        engine.put_many(jobs, now=T0)
        assert event_rows(engine) == eventlog.RETENTION_EVERY  # "old" is gone, the new kept
        assert [next_event(stream).jid for _ in jobs] == [job.jid for job in jobs]


def test_a_registration_that_lapsed_yields_a_gap_when_refreshed(engine: SQLiteEngine) -> None:
    stream = engine.events()
    assert isinstance(stream, SQLiteEventStream)
    with stream:
        with engine.database.write() as conn:  # as if this process had stopped a minute
            conn.execute("UPDATE event_listeners SET expires_at = ?", (time.time() - 1,))
        stream._refresh_at = 0.0  # its refresh is due
        assert next_event(stream) == Event("gap")
        engine.put("q", "j", "Task", now=T0)
        assert next_event(stream) == Event("put", jid="j", queue="q")


def test_a_stream_refuses_to_be_used_in_a_forked_child(engine: SQLiteEngine) -> None:
    with engine.events() as stream:
        pid = os.fork()
        if pid == 0:  # the child: exit 0 only if the stream refused
            try:
                stream.get(timeout=0)
            except LannerError:
                stream.close()  # allowed: it lets go of nothing of the parent's
                os._exit(0)
            os._exit(1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        engine.put("q", "j", "Task", now=T0)  # the parent's stream goes on
        assert next_event(stream) == Event("put", jid="j", queue="q")


def test_a_version_3_file_is_migrated_and_streams_events(tmp_path: Path) -> None:
    path = tmp_path / "v3.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(VERSION_3_SCHEMA + "PRAGMA user_version = 3;")
    conn.close()
    with SQLiteEngine(path) as engine:
        with engine.database.statement() as conn:
            assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,) == (6,)
        engine.put("q", "before", "Task", now=T0)
        with engine.events() as stream:
            engine.put("q", "j", "Task", now=T0)
            assert next_event(stream) == Event("put", jid="j", queue="q")


def test_a_store_that_cannot_be_read_is_waited_out_then_a_gap(
    engine: SQLiteEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lanner import EngineUnavailable

    stream = engine.events()
    assert isinstance(stream, SQLiteEventStream)
    with stream:
        failures = 3

        def unreadable(original: object) -> object:
            def read() -> object:
                nonlocal failures
                if failures:
                    failures -= 1
                    raise EngineUnavailable("the disk is away")
                return original()  # type: ignore[operator]

            return read

        monkeypatch.setattr(stream._database, "read", unreadable(stream._database.read))
        engine.put("q", "j", "Task", now=T0)
        deadline = time.monotonic() + 10
        first = None
        while first is None:  # each get waits a little and gives up, without raising
            assert time.monotonic() < deadline, "the stream never came back"
            first = stream.get(timeout=0.05)
        assert failures == 0
        assert first == Event("gap")
        assert next_event(stream) == Event("put", jid="j", queue="q")
