"""The worker pool with real processes when things go wrong: time limits, kills, bad jobs.

Some tests run a `WorkerPool` in the test process (`start()`, then `supervise()` until the
state awaited is reached, `terminate()` at the end); the others run `lanner worker` as a
subprocess and signal it. Every wait polls the store or the tasks' output with a deadline.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pytest

from lanner import App, JobState, NewJob, QueueConfig, Settings, Task, WorkerPool

from .conftest import Workspace, wait_until
from .pool_support import WORK, all_complete, done_count, running_pool, states, supervising

pytestmark = pytest.mark.slow

# -- 2. time limits -----------------------------------------------------------------------

SOFT_TASKS = """
class Soft(Task):
    app = app
    queue = "work"
    time_limit = 0.5
    max_retries = 2

    def run_task(self):
        record("start", self.task_id)
        if self.job.remaining == self.job.retries:
            time.sleep(3)  # interrupted by TimeLimitExceeded after 0.5 s
        record("end", self.task_id)
"""


def test_the_soft_time_limit_retries_the_job(workspace: Workspace) -> None:
    ws = workspace
    tasks = ws.write_module(SOFT_TASKS)
    jid = tasks.Soft.publish(None)

    with running_pool(tasks.app, concurrency=1) as pool:
        wait_until(
            lambda: ws.job(jid).state == JobState.COMPLETE,
            10,
            "the job to complete",
            step=supervising(pool),
            details=ws.log,
        )

    starts, ends = ws.lines("start", jid), ws.lines("end", jid)
    assert len(starts) == 2
    assert len(ends) == 1
    assert ends[0].when - starts[0].when < 2.5  # the 3 s sleep was cut short
    assert starts[0].pid == starts[1].pid  # a soft limit does not cost the process
    job = ws.job(jid)
    assert job.remaining == job.retries - 1
    assert done_count(ws, jid) == 1


HARD_TASKS = """
class Stubborn(Task):
    app = app
    queue = "work"
    time_limit = 0.5
    max_retries = 0

    def run_task(self):
        record("start", self.task_id)
        try:
            time.sleep(10)
        except BaseException:
            record("caught", self.task_id)
            time.sleep(10)
        record("end", self.task_id)


class StubbornOnce(Task):
    app = app
    queue = "work"
    time_limit = 0.5
    max_retries = 1

    def run_task(self):
        record("start", self.task_id)
        if self.job.remaining == self.job.retries:
            try:
                time.sleep(10)
            except TimeLimitExceeded:
                time.sleep(10)
        record("end", self.task_id)
"""


def test_the_hard_time_limit_kills_the_child_and_applies_the_retry_policy(
    workspace: Workspace,
) -> None:
    ws = workspace
    tasks = ws.write_module(HARD_TASKS + WORK)
    stubborn = tasks.Stubborn.publish(None)  # no retries: fails
    once = tasks.StubbornOnce.publish(None)  # one retry: runs again, and completes
    quick = [tasks.Work.publish(None, 0.01) for _ in range(3)]

    with running_pool(tasks.app, concurrency=1, time_limit_grace=0.5) as pool:
        wait_until(
            lambda: all_complete(ws, [once, *quick]),
            12,
            "the other jobs to complete",
            step=supervising(pool),
            details=lambda: states(ws, [stubborn, once, *quick]) + "\n" + ws.log(),
        )
        survivor = pool.children

    job = ws.job(stubborn)
    assert job.state == JobState.FAILED
    assert job.failure is not None
    assert job.failure.group == "TimeLimitExceeded"
    assert "past its time limit" in job.failure.message
    [start] = ws.lines("start", stubborn)
    assert ws.lines("caught", stubborn), "the soft limit fired first"
    assert ws.lines("end", stubborn) == []
    assert 0.9 <= job.failure.when - start.when < 5  # time_limit 0.5 + grace 0.5

    first, second = ws.lines("start", once)
    assert first.pid != second.pid  # the first run's process was killed
    assert len(ws.lines("end", once)) == 1
    assert ws.job(once).remaining == 0
    assert done_count(ws, once) == 1

    killed = {start.pid, first.pid}
    assert start.pid != first.pid  # each kill was replaced by a new child
    for jid in quick:
        [line] = ws.lines("end", jid)
        assert line.pid not in killed
        assert done_count(ws, jid) == 1
    assert len(survivor) == 1
    assert survivor[0] not in killed


# -- 3. kill -9 ---------------------------------------------------------------------------


def test_kill_9_of_a_child_mid_task_loses_nothing(workspace: Workspace) -> None:
    ws = workspace
    queues = 'QueueConfig("work", batch_size=3, visibility_timeout_sec=10, long_poll_time_sec=0.2)'
    tasks = ws.write_module(WORK, queues=queues)
    victim = tasks.Work.publish(None, 1.0)
    others = [tasks.Work.publish(None, 0.05) for _ in range(6)]
    everyone = [victim, *others]

    with running_pool(tasks.app, concurrency=2) as pool:
        [line] = wait_until(
            lambda: ws.lines("start", victim), 10, "the victim to start", step=supervising(pool)
        )
        os.kill(line.pid, signal.SIGKILL)
        wait_until(
            lambda: all_complete(ws, everyone),
            8,  # a lock expiry would take 10 s + the 10 s grace period
            "every job to complete",
            step=supervising(pool),
            details=lambda: states(ws, everyone) + "\n" + ws.log(),
        )
        assert line.pid not in pool.children

    starts = ws.lines("start", victim)
    assert len(starts) == 2
    assert starts[0].pid == line.pid
    assert starts[1].pid != line.pid
    assert len(ws.lines("end", victim)) == 1
    job = ws.job(victim)
    assert done_count(ws, victim) == 1
    assert sum(1 for event in job.history if event.what == "popped") >= 2
    assert job.remaining == job.retries - 1  # the crash cost one retry
    for jid in others:
        assert done_count(ws, jid) == 1
        assert len(ws.lines("end", jid)) == 1, jid  # unstarted jobs were not run twice


def test_kill_9_of_a_job_without_retries_fails_it(workspace: Workspace) -> None:
    ws = workspace
    tasks = ws.write_module(WORK + "\n\nclass Once(Work):\n    max_retries = 0\n")
    victim = tasks.Once.publish(None, 5.0)
    after = tasks.Work.publish(None, 0.01)

    with running_pool(tasks.app, concurrency=1) as pool:
        [line] = wait_until(
            lambda: ws.lines("start", victim), 10, "the victim to start", step=supervising(pool)
        )
        os.kill(line.pid, signal.SIGKILL)
        wait_until(
            lambda: (
                ws.job(victim).state == JobState.FAILED and ws.job(after).state == JobState.COMPLETE
            ),
            10,
            "the victim to fail and the next job to complete",
            step=supervising(pool),
            details=lambda: states(ws, [victim, after]),
        )

    failure = ws.job(victim).failure
    assert failure is not None
    assert failure.group == "lanner-worker-died"
    assert "-9" in failure.message
    assert len(ws.lines("start", victim)) == 1


# -- 7. bad messages ----------------------------------------------------------------------


def test_bad_messages_land_in_failure_groups_and_the_pool_keeps_running(
    workspace: Workspace,
) -> None:
    ws = workspace
    tasks: ModuleType = ws.write_module(WORK, query="?max_data_bytes=400")
    good = [tasks.Work.publish(None, 0.01) for _ in range(2)]
    klass = tasks.Work.name
    ws.engine.put_many(
        [
            NewJob("work", "undecodable", klass, '{"v": 99}'),
            NewJob("work", "unknown", "nope.Missing", '{"v": 1, "args": [], "kwargs": {}}'),
            NewJob("work", "arguments", klass, '{"v": 1, "args": [1, 2], "kwargs": {}}'),
            NewJob("work", "oversized", klass, '{"v": 1, "args": ["' + "x" * 800 + '"]}'),
        ]
    )
    good.append(tasks.Work.publish(None, 0.01))

    with running_pool(tasks.app, concurrency=1) as pool:
        children = pool.children
        wait_until(
            lambda: all_complete(ws, good) and sum(ws.engine.failed_groups().values()) == 4,
            10,
            "the batch to be handled",
            step=supervising(pool),
            details=lambda: states(ws, [*good, "undecodable", "unknown", "arguments"]),
        )
        later = tasks.Work.publish(None, 0.01)
        wait_until(
            lambda: ws.job(later).state == JobState.COMPLETE,
            10,
            "a later job to complete",
            step=supervising(pool),
        )
        assert pool.children == children  # no child died

    expected = {
        "undecodable": ("lanner-undecodable", "unknown envelope version 99"),
        "unknown": ("lanner-unknown-task", "nope.Missing"),
        "arguments": ("lanner-bad-arguments", "too many positional arguments"),
        "oversized": ("lanner-oversized", "the limit is 400"),
    }
    for jid, (group, reason) in expected.items():
        failure = ws.job(jid).failure
        assert failure is not None, jid
        assert failure.group == group
        assert reason in failure.message
    assert ws.engine.failed_groups() == {group: 1 for group, _ in expected.values()}


# -- a child that dies of its task ----------------------------------------------------------

DYING_TASKS = """
import sys


class BadCheck(Task):
    app = app
    queue = "work"
    time_limit = 2
    max_retries = 0

    def should_run_task(self):
        raise RuntimeError("the check itself is broken")

    def run_task(self):
        record("start", self.task_id)


class Exits(Task):
    app = app
    queue = "work"
    time_limit = 2
    max_retries = 0

    def run_task(self):
        record("start", self.task_id)
        sys.exit(3)
"""


@pytest.mark.parametrize("culprit", ["BadCheck", "Exits"])
def test_a_child_that_dies_mid_batch_does_not_strand_the_rest_of_it(
    workspace: Workspace, culprit: str
) -> None:
    # A child process can die of a job: user code outside run_task raising (should_run_task),
    # or a task calling sys.exit(). The supervisor then recovers the child's batch at once:
    # the jobs it had not started are released and run by the replacement child, long before
    # their 30 s locks would expire.
    ws = workspace
    queue = 'QueueConfig("work", batch_size=10, visibility_timeout_sec=30, long_poll_time_sec=0.2)'
    tasks = ws.write_module(WORK + DYING_TASKS, queues=queue)
    bad = getattr(tasks, culprit).publish(None)
    rest = [tasks.Work.publish(None, 0.01) for _ in range(3)]

    with running_pool(tasks.app, concurrency=1) as pool:
        wait_until(
            lambda: all_complete(ws, rest),
            6,
            "the rest of the batch to complete",
            step=supervising(pool),
            details=lambda: states(ws, [bad, *rest]),
        )
    assert ws.job(bad).state != JobState.RUNNING


# -- issue 10: faults of the supervisor and of batches ------------------------------------

DYING_ONCE = """
class Doomed(Work):
    max_retries = 3
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (dead, not yet reaped by its parent) counts as gone.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_a_job_whose_process_died_runs_again_at_once_then_with_backoff(
    workspace: Workspace,
) -> None:
    """Issue 10, fault 5: the first death used to cost a whole retry backoff (60 s)."""
    ws = workspace
    tasks = ws.write_module(WORK + DYING_ONCE, settings="retry_delay_multiple_sec=60")
    victim = tasks.Doomed.publish(None, 30.0)

    with running_pool(tasks.app, concurrency=1) as pool:
        [first] = wait_until(
            lambda: ws.lines("start", victim), 10, "the victim to start", step=supervising(pool)
        )
        os.kill(first.pid, signal.SIGKILL)
        second = wait_until(
            lambda: ws.lines("start", victim)[1:],
            5,  # not the 60 s of the first retry's backoff
            "the victim to run again",
            step=supervising(pool),
            details=ws.log,
        )[0]
        os.kill(second.pid, signal.SIGKILL)
        wait_until(
            lambda: ws.job(victim).state == JobState.SCHEDULED,
            5,
            "the victim to be retried with a backoff",
            step=supervising(pool),
        )
    job = ws.job(victim)
    assert [event.what for event in job.history].count("worker-died") == 2
    assert job.remaining == job.retries - 2  # each death spent a retry


def test_supervision_goes_on_while_the_store_refuses_the_recovery(
    workspace: Workspace,
) -> None:
    """Issue 10, fault 4: the supervisor froze in recovery for the store's whole wait."""
    ws = workspace
    tasks = ws.write_module(WORK)
    victim = tasks.Work.publish(None, 30.0)
    with running_pool(tasks.app, concurrency=1) as pool:
        [line] = wait_until(
            lambda: ws.lines("start", victim), 10, "the victim to start", step=supervising(pool)
        )
        with holding_the_write_lock(ws.db):  # another process's writer
            os.kill(line.pid, signal.SIGKILL)
            longest, deadline = 0.0, time.monotonic() + 2
            while time.monotonic() < deadline:  # 2 s, the lock held all along
                started = time.monotonic()
                pool.supervise(0.05)
                longest = max(longest, time.monotonic() - started)
            assert longest < 1.0  # never the 30 s busy timeout
            assert pool.children  # replaced meanwhile
            assert line.pid not in pool.children
        wait_until(
            lambda: len(ws.lines("start", victim)) == 2,
            10,
            "the victim to run again once the store answered",
            step=supervising(pool),
            details=ws.log,
        )


@contextmanager
def holding_the_write_lock(path: Path) -> Iterator[None]:
    """Another process holds the SQLite file's write lock while the block runs."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "holding\n"
        yield
    finally:
        holder.kill()
        holder.wait(timeout=10)
        for pipe in (holder.stdin, holder.stdout):
            if pipe is not None:
                pipe.close()


HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("holding", flush=True)
sys.stdin.read()
"""


STRAYS = """
import subprocess
import sys


class Spawner(Task):
    app = app
    queue = "work"
    time_limit = 0.5
    max_retries = 0

    def run_task(self, stubborn):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        with open(OUT, "a") as out:
            out.write(f"spawned {self.task_id} {child.pid} {time.time()!r}\\n")
        try:
            time.sleep(10)
        except TimeLimitExceeded:
            if not stubborn:
                raise
            time.sleep(10)  # the supervisor's hard limit ends it
"""


@pytest.mark.parametrize("stubborn", [False, True], ids=["soft-limit", "hard-limit"])
def test_a_subprocess_of_a_task_does_not_outlive_its_time_limit(
    workspace: Workspace, stubborn: bool
) -> None:
    """Issue 10, fault 6: the subprocess went on running after the kill and after shutdown."""
    ws = workspace
    tasks = ws.write_module(STRAYS)
    jid = tasks.Spawner.publish(None, stubborn)
    with running_pool(tasks.app, concurrency=1, time_limit_grace=0.5) as pool:
        [spawned] = wait_until(
            lambda: ws.lines("spawned", jid), 10, "the subprocess", step=supervising(pool)
        )
        wait_until(
            lambda: ws.job(jid).state == JobState.FAILED,
            10,
            "the job to fail at its time limit",
            step=supervising(pool),
        )
        wait_until(lambda: not _alive(spawned.pid), 5, "the subprocess to be killed")


def test_slow_jobs_of_one_batch_run_on_idle_processes_at_once(workspace: Workspace) -> None:
    """Issue 10, fault 7: four 1 s jobs on four processes took 4 s on the one that popped
    them all."""
    ws = workspace
    tasks = ws.write_module(WORK)
    with running_pool(tasks.app, concurrency=4) as pool:
        wait_until(lambda: len(pool.children) == 4, 10, "four children", step=supervising(pool))
        jids = [tasks.Work.publish(None, 1.0) for _ in range(4)]
        wait_until(lambda: all_complete(ws, jids), 15, "the four jobs", step=supervising(pool))
    starts = [ws.lines("start", jid)[0] for jid in jids]
    ends = [ws.lines("end", jid)[0] for jid in jids]
    assert len({line.pid for line in starts}) >= 3
    assert max(e.when for e in ends) - min(s.when for s in starts) < 2.5  # not 4 s


def test_a_pool_started_while_its_store_is_away_waits_for_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 10, fault 3: neither the supervisor nor a worker exits for want of the store."""
    folder = tmp_path / "not-yet"
    url = "sqlite:///" + str(folder / "jobs.db")
    app = App(url, settings=Settings(broker=url), queues=[QueueConfig("work")])
    pool = WorkerPool(app, concurrency=2)
    pool.start()
    try:
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            pool.supervise(0.05)
        assert len(pool.children) == 2  # alive, waiting
        assert "waiting for sqlite:///" in caplog.text
        folder.mkdir()
        publisher = App(url, settings=Settings(broker=url))
        jid = publisher.publish(PoolAwayEcho)
        wait_until(
            lambda: publisher.engine.get(jid).state == JobState.COMPLETE,  # type: ignore[union-attr]
            30,  # the workers' backoff has grown meanwhile
            "the job published once the store exists to complete",
            step=lambda: pool.supervise(0.05),
        )
        publisher.close()
    finally:
        pool.terminate(timeout=5)
        app.close()


class PoolAwayEcho(Task):
    queue = "work"

    def run_task(self) -> None:
        pass


# -- crash loops and poison jobs -------------------------------------------------------------


def test_children_that_crash_at_start_are_replaced_ever_more_slowly(tmp_path: Path) -> None:
    def crash() -> None:
        os._exit(3)

    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    app = App(url, settings=Settings(broker=url, on_worker_startup=crash))
    seen: set[int] = set()
    with running_pool(app, concurrency=1) as pool:
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            seen.update(pool.children)
            pool.supervise(0.02)
    app.close()
    # Pauses of 0.5, 1 and 2 s: at most 4 processes in 4 s, not one every few milliseconds.
    assert 2 <= len(seen) <= 4


def test_children_killed_by_their_jobs_are_replaced_at_once(workspace: Workspace) -> None:
    ws = workspace
    tasks = ws.write_module(
        """
class Deadly(Task):
    app = app
    queue = "work"
    time_limit = 4
    max_retries = 0

    def run_task(self):
        record("start", self.task_id)
        os._exit(1)
"""
    )
    jids = [tasks.Deadly.publish(None) for _ in range(6)]
    with running_pool(tasks.app, concurrency=1) as pool:
        wait_until(
            lambda: all(ws.job(jid).state == JobState.FAILED for jid in jids),
            6,  # six deaths in a row, each replaced without a crash loop's growing pause
            "every deadly job to fail",
            step=supervising(pool),
            details=ws.log,
        )
    assert "died young" not in ws.log()
