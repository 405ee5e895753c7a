"""Opening a SQLite file: what waiting cannot mend is refused at once (`StoreMisconfigured`),
and a write lock another connection holds is waited for, as by any command."""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

import pytest

from lanner import EngineUnavailable, SchemaError, StoreMisconfigured
from lanner.engines.sqlite import SQLiteEngine, SQLiteOptions


@pytest.mark.parametrize(
    "content",
    [b"host=localhost\nport=5432\n", os.urandom(4096), b"SQLite format 3\x00" + b"\xff" * 200],
    ids=["text", "random", "bad-header"],
)
def test_a_file_that_is_not_a_database_is_misconfigured_not_away(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "jobs.db"
    path.write_bytes(content)
    with pytest.raises(StoreMisconfigured, match="is not an SQLite database") as refused:
        SQLiteEngine(path)
    assert not isinstance(refused.value, EngineUnavailable)  # workers must not wait on it
    assert str(path) in str(refused.value)
    assert "broker URL" in str(refused.value)
    assert path.read_bytes() == content  # nothing written


def test_a_damaged_database_is_misconfigured(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    SQLiteEngine(path).close()
    with path.open("r+b") as file:  # the schema's page, past the file header
        file.seek(100)
        file.write(b"\xee" * 3000)
    with pytest.raises(StoreMisconfigured, match="is damaged"):
        SQLiteEngine(path)


@pytest.mark.parametrize("user_version", [0, 3, 99])
def test_another_applications_database_is_refused_whatever_its_user_version(
    tmp_path: Path, user_version: int
) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO accounts (name) VALUES ('ada')")
        conn.execute(f"PRAGMA user_version = {user_version}")
    conn.close()
    with pytest.raises(SchemaError, match="lanner did not create") as refused:
        SQLiteEngine(path)
    assert isinstance(refused.value, StoreMisconfigured)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT name FROM accounts").fetchall() == [("ada",)]
        assert conn.execute("PRAGMA user_version").fetchone() == (user_version,)
    conn.close()


# -- a held lock --------------------------------------------------------------------------


def _hold_rollback_journal_lock(path: Path) -> sqlite3.Connection:
    """The write lock of a file not in WAL mode yet, as held by another process that is
    switching a new file to WAL (seen: a publisher opening the file of a pool starting)."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("CREATE TABLE scratch (x)")
    return holder


def _hold_exclusive_lock(path: Path) -> sqlite3.Connection:
    SQLiteEngine(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    return holder


@pytest.mark.parametrize(
    "hold", [_hold_rollback_journal_lock, _hold_exclusive_lock], ids=["fresh", "existing"]
)
def test_opening_waits_out_a_held_write_lock(tmp_path: Path, hold: object) -> None:
    path = tmp_path / "jobs.db"
    holder = hold(path)  # type: ignore[operator]
    outcome: list[object] = []
    trying = threading.Event()

    def open_and_put() -> None:
        trying.set()
        try:
            with SQLiteEngine(path, SQLiteOptions(busy_timeout=60)) as engine:
                engine.put("q", "j1", "Task", now=1)
            outcome.append("opened")
        except Exception as error:
            outcome.append(error)

    opener = threading.Thread(target=open_and_put)
    opener.start()
    try:
        assert trying.wait(30)
        opener.join(0.5)  # a moment with the lock held: the opener must wait through it
        assert outcome == [], "opening did not wait for the lock"
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    opener.join(60)
    assert outcome == ["opened"]
    with SQLiteEngine(path) as engine:
        assert engine.get("j1") is not None
