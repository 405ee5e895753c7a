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


MIXER = """
import random, sys
from lanner import NewJob
from lanner.engines.sqlite import SQLiteEngine

engine = SQLiteEngine(sys.argv[1])
rng = random.Random(int(sys.argv[2]))
print("ready", flush=True)
n = 0
while True:
    n += 1
    queue = rng.choice(["a", "b"])
    engine.put_many([
        NewJob(queue, f"m{n}-{k}", "Task", delay=rng.choice([0, 0, 0.01, 3600]))
        for k in range(rng.randint(1, 5))
    ])
    for job in engine.pop(queue, "doomed", rng.randint(1, 4)):
        what = rng.choice(["complete", "fail", "retry", "cancel", "move"])
        if what == "complete":
            engine.complete(job.jid, "doomed", queue)
        elif what == "fail":
            engine.fail(job.jid, "doomed", rng.choice(["x", "y"]), "boom")
        elif what == "retry":
            engine.retry(job.jid, queue, "doomed", group="z")
        elif what == "cancel":
            engine.cancel([job.jid])
        else:
            engine.put("b" if queue == "a" else "a", job.jid, "Task")
    if rng.random() < 0.05:
        engine.unfail(rng.choice(["a", "b"]), rng.choice(["x", "y"]), 2)
"""


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
def test_kill_9_mid_work_leaves_the_counts_exact(tmp_path: Path, seed: int) -> None:
    """The usage counts (jobs held, and the scheduled ones among them) and the failure
    counts live in the transaction of the move they count: a crash at any moment leaves
    them equal to a recount of the jobs."""
    path = tmp_path / "jobs.db"
    child = subprocess.Popen(
        [sys.executable, "-c", MIXER, str(path), str(seed)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"
        with SQLiteEngine(path) as watcher:  # killed once jobs failed in both groups
            deadline = time.monotonic() + 40
            while len(groups := watcher.failed_groups()) < 2 or sum(groups.values()) < 20:
                assert time.monotonic() < deadline, f"the child made little progress: {groups}"
                time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        if child.stdout:
            child.stdout.close()

    with SQLiteEngine(path) as engine:
        with engine.database.statement() as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            held = "state NOT IN ('complete', 'failed')"
            usage = conn.execute(
                f"SELECT queue, count(*), sum(size) FROM jobs WHERE {held} GROUP BY queue"
            ).fetchall()
            kept = conn.execute(
                "SELECT queue, items, bytes FROM queue_usage WHERE items != 0 OR bytes != 0 "
                "ORDER BY queue"
            ).fetchall()
            states = conn.execute(
                "SELECT queue, sum(state = 'scheduled'), sum(state = 'depends') FROM jobs "
                f"WHERE {held} GROUP BY queue"
            ).fetchall()
            kept_states = conn.execute(
                "SELECT queue, scheduled, depends FROM queue_usage WHERE items != 0 ORDER BY queue"
            ).fetchall()
            failed = conn.execute(
                "SELECT failure_group, count(*) FROM jobs WHERE state = 'failed' "
                "GROUP BY failure_group"
            ).fetchall()
            stored = conn.execute("SELECT * FROM failure_counts").fetchall()
        assert kept == usage
        assert kept_states == states
        assert any(scheduled for _, scheduled, _ in states)
        assert stored == failed
        assert engine.failed_groups() == dict(failed)
