"""Group commit on SQLite (`engines/sqlite/walsync.py`): with `synchronous=full`, a write
returns only after an fsync of the WAL begun after its commit, and the threads committing
while one such fsync runs share the next one. The fsync is the real one, watched: a
wrapper records each call and can hold it, so that the others' commits land meanwhile."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lanner.engines.sqlite import SQLiteEngine, SQLiteOptions, walsync
from lanner.errors import EngineUnavailable
from lanner.records import NewJob

DEADLINE = 60.0


def poll(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, f"no {what} in {DEADLINE} s"
        time.sleep(0.005)


class WatchedSync:
    """The real fdatasync, each call recorded (with the file's commits counted by then),
    the first held until `release` is set."""

    def __init__(self, real: Callable[[int], None]) -> None:
        self.real = real
        self.calls = 0
        self.entered = threading.Event()
        self.release = threading.Event()
        self.hold_first = False

    def __call__(self, fd: int) -> None:
        self.calls += 1
        if self.hold_first and self.calls == 1:
            self.entered.set()
            assert self.release.wait(DEADLINE)
        self.real(fd)


@pytest.fixture
def watched(monkeypatch: pytest.MonkeyPatch) -> WatchedSync:
    wrapper = WatchedSync(walsync._fdatasync)
    monkeypatch.setattr(walsync, "_fdatasync", wrapper)
    return wrapper


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[SQLiteEngine]:
    made = SQLiteEngine(tmp_path / "jobs.db")
    yield made
    made.close()


def put(engine: SQLiteEngine, jid: str) -> None:
    engine.put_many([NewJob("q", jid, "t", "{}")])


def test_a_put_returns_after_a_sync_of_the_wal(engine: SQLiteEngine, watched: WatchedSync) -> None:
    put(engine, "a")
    assert watched.calls == 1
    put(engine, "b")
    assert watched.calls == 2
    # A write that changed no row wrote nothing to sync: a pop of an empty queue.
    engine.pop("empty", "w", 1)
    assert watched.calls == 2
    # A pop is not synced (a pop undone by a power cut is popped again); the connection
    # commits as with `normal`, and its file is synced by lanner.
    engine.pop("q", "w", 1)
    assert watched.calls == 2
    with engine.database.read() as conn:
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL


def test_commits_made_during_a_sync_share_the_next(
    engine: SQLiteEngine, watched: WatchedSync
) -> None:
    watched.hold_first = True
    first = threading.Thread(target=put, args=(engine, "first"))
    first.start()
    assert watched.entered.wait(DEADLINE)  # its commit is made; its sync is held
    done: list[str] = []

    def put_and_tell(jid: str) -> None:
        put(engine, jid)
        done.append(jid)

    others = [threading.Thread(target=put_and_tell, args=(jid,)) for jid in ("b", "c", "d")]
    for thread in others:
        thread.start()
    syncer = engine.database._walsync
    assert syncer is not None
    # Their commits are made while the first sync is held (the write lock is free), and
    # none of them returns: the running sync began before their commits.
    poll(lambda: syncer._committed == 4, "commits of the three others")
    assert done == []
    watched.release.set()
    first.join(DEADLINE)
    for thread in others:
        thread.join(DEADLINE)
    assert sorted(done) == ["b", "c", "d"]
    assert watched.calls == 2  # the held one, then one for the three others
    assert syncer.syncs == 2
    assert sorted(job.jid for job in engine.pop("q", "w", 10)) == ["b", "c", "d", "first"]


def test_a_failed_sync_fails_the_write_and_covers_nothing(
    engine: SQLiteEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = walsync._fdatasync
    failing = [True]

    def sync(fd: int) -> None:
        if failing[0]:
            raise OSError(5, "Input/output error")
        real(fd)

    monkeypatch.setattr(walsync, "_fdatasync", sync)
    with pytest.raises(EngineUnavailable, match="Input/output error"):
        put(engine, "a")
    failing[0] = False
    put(engine, "b")  # syncs again (and so covers "a" too)
    syncer = engine.database._walsync
    assert syncer is not None
    assert syncer._synced == syncer._committed == 2


@pytest.mark.parametrize("mode", ["normal", "off"])
def test_modes_that_do_not_sync_never_sync(tmp_path: Path, watched: WatchedSync, mode: str) -> None:
    engine = SQLiteEngine(tmp_path / "jobs.db", SQLiteOptions(synchronous=mode))
    try:
        put(engine, "a")
        assert engine.database._walsync is None
        assert watched.calls == 0
    finally:
        engine.close()
