"""What only the SQLite engine promises: its file, its pragmas, its schema version, its URL."""

import os
import sqlite3
import stat
import threading
from pathlib import Path

import pytest

from lanner import EngineUnavailable, MalformedArgument, SchemaError, open_engine
from lanner.engines.sqlite import SQLiteEngine, SQLiteOptions
from lanner.engines.sqlite.schema import SCHEMA_VERSION


def test_database_file_is_created_private(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    with SQLiteEngine(path) as engine:
        engine.put("q", "a", "K", now=1)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    wal = Path(f"{path}-wal")
    if wal.exists():
        assert stat.S_IMODE(os.stat(wal).st_mode) == 0o600


def pragma(engine: SQLiteEngine, name: str) -> object:
    with engine.database.statement() as conn:
        return conn.execute(f"PRAGMA {name}").fetchone()[0]


def test_wal_and_synchronous_full_by_default(tmp_path: Path) -> None:
    with SQLiteEngine(tmp_path / "jobs.db") as engine:
        assert engine.options.synchronous == "full"
        assert pragma(engine, "journal_mode") == "wal"
        # Commits as with NORMAL, each synced by lanner after the write lock is let go
        # (group commit: tests/unit/test_sqlite_group_commit.py).
        assert pragma(engine, "synchronous") == 1
        assert engine.database._walsync is not None


def test_a_pop_commits_unsynced_and_every_other_commit_stays_synced(tmp_path: Path) -> None:
    with SQLiteEngine(tmp_path / "jobs.db") as engine:
        syncer = engine.database._walsync
        assert syncer is not None
        engine.put("q", "a", "K", now=1)
        assert syncer.syncs == 1
        [job] = engine.pop("q", "w", 1, now=2)
        assert syncer.syncs == 1
        with pytest.raises(ZeroDivisionError), engine.database.write():
            1 / 0  # noqa: B018 - a transaction that fails: nothing to sync
        assert syncer.syncs == 1
        assert engine.complete_many([job.jid], "w", "q", now=3) == [job.jid]
        assert syncer.syncs == 2


def test_synchronous_is_configurable_from_the_url(tmp_path: Path) -> None:
    engine = open_engine(f"sqlite:///{tmp_path}/jobs.db?synchronous=normal")
    assert isinstance(engine, SQLiteEngine)
    with engine:
        assert pragma(engine, "synchronous") == 1  # NORMAL


def test_url_options_are_checked(tmp_path: Path) -> None:
    with pytest.raises(MalformedArgument, match="unknown SQLite option"):
        open_engine(f"sqlite:///{tmp_path}/jobs.db?synchronus=full")
    with pytest.raises(MalformedArgument, match="synchronous must be one of"):
        open_engine(f"sqlite:///{tmp_path}/jobs.db?synchronous=fast")
    with pytest.raises(MalformedArgument, match="not a number"):
        open_engine(f"sqlite:///{tmp_path}/jobs.db?busy_timeout=soon")


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///", "postgres://x/y", "jobs.db"])
def test_bad_urls_are_rejected(url: str) -> None:
    with pytest.raises(MalformedArgument):
        open_engine(url)


def test_relative_url_path_is_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    engine = open_engine("sqlite:///relative.db")
    assert isinstance(engine, SQLiteEngine)
    engine.close()
    assert engine.path == str(tmp_path / "relative.db")


def test_options_default_to_durable() -> None:
    assert SQLiteOptions().synchronous == "full"


def test_newer_schema_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    SQLiteEngine(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(SchemaError, match="upgrade lanner"):
        SQLiteEngine(path)


def test_foreign_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE mine (x)")
    with pytest.raises(SchemaError, match="did not create"):
        SQLiteEngine(path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM mine").fetchone() == (0,)


def test_reopening_keeps_jobs(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    with SQLiteEngine(path) as engine:
        engine.put("q", "a", "K", '{"n": 1}', now=1)
    with SQLiteEngine(path) as engine:
        job = engine.get("a")
        assert job is not None
        assert job.data == '{"n": 1}'


def test_idle_blocked_pops_do_not_write(tmp_path: Path) -> None:
    """Two workers blocked on an empty queue must not wake each other with writes."""
    path = tmp_path / "jobs.db"
    observer = SQLiteEngine(path)
    workers = [SQLiteEngine(path) for _ in range(2)]
    for index, engine in enumerate(workers):  # each registers itself once, now
        assert engine.pop("q", f"w{index}") == []
    version = pragma(observer, "data_version")
    results: list[list[object]] = []
    threads = [
        threading.Thread(
            target=lambda e=engine, i=index: results.append(list(e.pop("q", f"w{i}", wait=0.4)))
        )
        for index, engine in enumerate(workers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert results == [[], []]
    assert pragma(observer, "data_version") == version
    for engine in [observer, *workers]:
        engine.close()


def test_a_write_lock_held_past_busy_timeout_is_engine_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    engine = open_engine(f"sqlite:///{path}?busy_timeout=0.2")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(EngineUnavailable, match="busy_timeout"):
            engine.put("q", "a", "K", now=1)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    engine.put("q", "a", "K", now=1)  # and it recovers once the lock is free
    engine.close()


VERSION_2_SCHEMA = (Path(__file__).parent / "sqlite_schema_v2.sql").read_text()


def test_a_version_1_database_is_migrated_when_opened(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    version_1 = VERSION_2_SCHEMA.replace(
        "    history          TEXT NOT NULL,", "    history          TEXT NOT NULL"
    ).replace("    result           TEXT", "")
    conn = sqlite3.connect(path, isolation_level=None)  # what lanner 0.1 wrote
    conn.executescript(version_1 + "PRAGMA user_version = 1;")
    conn.close()
    with SQLiteEngine(path) as engine:
        assert pragma(engine, "user_version") == SCHEMA_VERSION == 6
        engine.put("q", "a", "K", now=1)
        engine.pop("q", "w", now=2)
        engine.complete("a", "w", "q", result='"kept"', now=3)
        job = engine.get("a")
        assert job is not None
        assert job.result == '"kept"'


def test_the_busy_timeout_is_off_from_a_write_to_the_next_read(tmp_path: Path) -> None:
    with SQLiteEngine(tmp_path / "jobs.db") as engine:
        engine.put("q", "a", "K", now=1)
        conn = engine.database._conn
        assert conn is not None
        # Between writes: off (the next BEGIN IMMEDIATE waits in short steps of its own).
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 0
        engine.put("q", "b", "K", now=1)
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 0
        assert pragma(engine, "busy_timeout") == 30_000  # a read waits as configured
        with engine.database.read() as reading:
            assert reading.execute("PRAGMA busy_timeout").fetchone()[0] == 30_000
        assert engine.pop("q", "w", 2, now=2)
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 0
