"""No SQLite connection crosses a fork (issue 10, fault 1).

SQLite keeps per-process state about each open file (its POSIX locks, the WAL index map).
A child forked while its parent holds a connection inherits that state without the locks;
its own connection then shares it, and its commits could vanish once the parent died, or
corrupt the file. Every Database closes its connection before any fork.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lanner import JobState, NewJob
from lanner.engines.sqlite import SQLiteEngine

# A supervisor in miniature: it opens the engine (its connection open, as a pool's is after
# configuring queues), forks a worker that pops a batch of 4, and sleeps until it is killed.
# The orphaned worker then completes the first job and gives back the other three.
SUPERVISOR = """
import os, sys, time
from lanner.engines.sqlite import SQLiteEngine

engine = SQLiteEngine(sys.argv[1])
engine.queue_counts("q")
supervisor = os.getpid()
if os.fork() == 0:
    jobs = engine.pop("q", "worker", 4)
    print("popped", len(jobs), flush=True)
    while os.getppid() == supervisor:
        time.sleep(0.01)
    done = engine.complete_many([jobs[0].jid], "worker", "q")
    released = engine.release([job.jid for job in jobs[1:]], "worker", "q")
    print("settled", len(done), len(released), flush=True)
    os._exit(0)
time.sleep(600)
"""

# `lanner status` run again and again: each read opens the file and closes it, and a
# connection that believes it is the file's last one checkpoints and removes the WAL.
READER = """
import sys
from lanner.engines.sqlite import SQLiteEngine

print("reading", flush=True)
while True:
    with SQLiteEngine(sys.argv[1]) as engine:
        engine.queues()
"""


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(5))  # a race: before the fix, most rounds lost commits
def test_a_childs_commits_survive_its_supervisors_death_and_a_concurrent_reader(
    tmp_path: Path, round_: int
) -> None:
    path = tmp_path / "jobs.db"
    with SQLiteEngine(path) as engine:
        engine.put_many([NewJob("q", f"j{n}", "Task") for n in range(4)])
    supervisor = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, str(path)], stdout=subprocess.PIPE, text=True
    )
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert supervisor.stdout is not None
        assert reader.stdout is not None
        assert supervisor.stdout.readline() == "popped 4\n"
        assert reader.stdout.readline() == "reading\n"
        supervisor.send_signal(signal.SIGKILL)
        supervisor.wait(timeout=10)
        # The orphan still writes to the inherited stdout pipe.
        assert supervisor.stdout.readline() == "settled 1 3\n"
    finally:
        for process in (supervisor, reader):
            process.kill()
            process.wait(timeout=10)
            if process.stdout is not None:
                process.stdout.close()

    with SQLiteEngine(path) as engine:
        with engine.database.statement() as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        states = {job.jid: job.state for job in engine.multiget([f"j{n}" for n in range(4)])}
    assert states == {
        "j0": JobState.COMPLETE,
        "j1": JobState.WAITING,
        "j2": JobState.WAITING,
        "j3": JobState.WAITING,
    }


def test_the_parent_closes_its_connection_before_a_fork_and_the_child_opens_its_own(
    tmp_path: Path,
) -> None:
    engine = SQLiteEngine(tmp_path / "jobs.db")
    engine.put("q", "a", "K", now=1)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: it pops through the engine object it inherited
        os.close(read)
        try:
            jobs = engine.pop("q", "child", now=2)
            os.write(write, b"1" if [job.jid for job in jobs] == ["a"] else b"0")
        finally:
            os._exit(0)
    os.close(write)
    assert engine.database._conn is None  # closed before the fork, not reopened yet
    assert os.read(read, 1) == b"1"
    os.waitpid(pid, 0)
    job = engine.get("a")  # the parent opens a connection of its own again
    assert job is not None
    assert job.worker == "child"
    engine.close()


def test_a_deleted_database_file_is_noticed_and_opened_anew(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 10, fault 8: a worker must see jobs published into the new file."""
    path = tmp_path / "jobs.db"
    worker = SQLiteEngine(path)
    assert worker.pop("q", "w") == []
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    with SQLiteEngine(path) as publisher:
        publisher.put("q", "after", "Task")
    deadline = time.monotonic() + 10
    while not (jobs := worker.pop("q", "w")):
        assert time.monotonic() < deadline, "the worker never saw the new file's job"
        time.sleep(0.05)
    assert [job.jid for job in jobs] == ["after"]
    assert "jobs.db was replaced by another file: opening it anew" in caplog.text
    worker.close()
