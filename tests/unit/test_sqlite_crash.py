"""Reliable fetch on SQLite: a worker killed with SIGKILL mid-work loses no job.

A child process pops and completes jobs in a loop and is killed at a random moment,
possibly inside a transaction. Afterwards the file must open cleanly, every job must be
complete or still held by the dead worker's lock, and once those locks run out another
worker must get exactly the jobs that were not completed.
"""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lanner import JobState, NewJob
from lanner.engines.sqlite import SQLiteEngine

JOBS = 2000

CHILD = """
import sys
from lanner.engines.sqlite import SQLiteEngine

engine = SQLiteEngine(sys.argv[1])
print("ready", flush=True)
while True:
    jobs = engine.pop("q", "doomed", 20)
    if not jobs:
        break
    engine.complete_many([job.jid for job in jobs], "doomed", "q")
"""


@pytest.mark.slow
def test_kill_9_mid_work_loses_no_job(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    with SQLiteEngine(path) as engine:
        engine.config_set("grace-period", 0)
        engine.put_many([NewJob("q", f"j{i}", "Task") for i in range(JOBS)])

    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert child.stdout.readline() == "ready\n"
    # Kill it once it has completed some jobs but (very likely) not all of them.
    with SQLiteEngine(path) as watcher:
        deadline = time.monotonic() + 30
        while watcher.queue_counts("q").waiting > JOBS // 2:
            assert time.monotonic() < deadline, "the child made no progress"
            time.sleep(0.001)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=10)
    child.stdout.close()

    with SQLiteEngine(path) as engine:
        with engine.database.statement() as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        completed = set(engine.jobs("complete", count=JOBS))
        held = set(engine.jobs("running", "q", count=JOBS))
        waiting = set(engine.jobs("waiting", "q", count=JOBS))
        assert completed | held | waiting == {f"j{i}" for i in range(JOBS)}
        assert not completed & held
        assert not completed & waiting

        # After the dead worker's locks run out, another worker gets every unfinished job.
        later = time.time() + 3600
        rescued: list[str] = []
        while jobs := engine.pop("q", "rescuer", 100, now=later):
            rescued += [job.jid for job in jobs]
            engine.complete_many([job.jid for job in jobs], "rescuer", "q", now=later)
        assert sorted(rescued) == sorted(held | waiting)
        assert len(engine.jobs("complete", count=2 * JOBS)) == JOBS
        for jid in held:
            job = engine.get(jid)
            assert job is not None
            assert job.state == JobState.COMPLETE
            assert job.remaining == job.retries - 1  # the lock loss cost one retry
