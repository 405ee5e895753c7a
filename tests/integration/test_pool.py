"""The worker pool with real processes: priorities, time limits, crashes, shutdowns, limits.

Some tests run a `WorkerPool` in the test process (`start()`, then `supervise()` until the
state awaited is reached, `terminate()` at the end); the others run `lanner worker` as a
subprocess and signal it. Every wait polls the store or the tasks' output with a deadline.
"""

from __future__ import annotations

import os
import signal
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import pytest

from lanner import JobState, NewJob
from lanner.app import App, Message
from lanner.settings import Settings
from lanner.worker.pool import WorkerPool

from .conftest import Workspace, wait_until

pytestmark = pytest.mark.slow

WORK = """
class Work(Task):
    app = app
    queue = "work"
    time_limit = 4
    max_retries = 3

    def run_task(self, seconds):
        record("start", self.task_id)
        time.sleep(seconds)
        record("end", self.task_id)
"""


@contextmanager
def running_pool(app: App, **options: Any) -> Iterator[WorkerPool]:
    pool = WorkerPool(app, **options)
    pool.start()
    try:
        yield pool
    finally:
        pool.terminate(timeout=5)


def supervising(pool: WorkerPool) -> Callable[[], None]:
    return lambda: pool.supervise(0.05)


def done_count(ws: Workspace, jid: str) -> int:
    return sum(1 for event in ws.job(jid).history if event.what == "done")


def all_complete(ws: Workspace, jids: list[str]) -> bool:
    return all(ws.job(jid).state == JobState.COMPLETE for jid in jids)


def states(ws: Workspace, jids: list[str]) -> str:
    return "\n".join(f"{jid}: {ws.job(jid).state} {ws.job(jid).failure}" for jid in jids)


# -- 1. priorities ------------------------------------------------------------------------

PRIORITY_QUEUES = """
    QueueConfig("high", priority=100, batch_size=2, num_iterations=1,
                visibility_timeout_sec=10, long_poll_time_sec=0.2),
    QueueConfig("low", priority=5, batch_size=2, num_iterations=1,
                visibility_timeout_sec=10, long_poll_time_sec=0.2),
"""

PRIORITY_TASKS = """
class High(Task):
    app = app
    queue = "high"
    time_limit = 5

    def run_task(self):
        time.sleep(0.01)
        record("end", self.task_id)


class Low(Task):
    app = app
    queue = "low"
    time_limit = 5

    def run_task(self):
        time.sleep(0.01)
        record("end", self.task_id)
"""


def test_priorities_are_honoured_under_load(workspace: Workspace) -> None:
    ws = workspace
    tasks = ws.write_module(PRIORITY_TASKS, queues=PRIORITY_QUEUES)
    app: App = tasks.app
    count = 40
    # Low's jobs are published first: a FIFO worker would run them first.
    low = app.publish_many([Message(tasks.Low)] * count)
    high = app.publish_many([Message(tasks.High)] * count)

    with running_pool(app, concurrency=2, selector="reduced-lottery") as pool:
        wait_until(
            lambda: len(ws.lines("end")) == 2 * count,
            30,
            "every job to run",
            step=supervising(pool),
        )

    ends = {line.jid: line.when for line in ws.lines("end")}
    high_times = sorted(ends[jid] for jid in high)
    low_times = sorted(ends[jid] for jid in low)
    assert statistics.median(high_times) < statistics.median(low_times)
    assert high_times[-1] < low_times[-1]
    # Most of high's jobs finish before half of low's have.
    assert sum(t < low_times[count // 2] for t in high_times) >= 0.75 * count
    assert all_complete(ws, high + low)


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


# -- 4 and 5. shutdowns -------------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_shuts_down_warm(workspace: Workspace, signum: int) -> None:
    ws = workspace
    tasks = ws.write_module(WORK)
    long = tasks.Work.publish(None, 1.0)
    rest = [tasks.Work.publish(None, 0.01) for _ in range(3)]

    worker = ws.start_worker("-A", ws.module_name, "-Q", "work", "-c", "1",
                             "--shutdown-timeout", "10")  # fmt: skip
    wait_until(lambda: ws.lines("start", long), 20, "the long task to start", details=ws.log)
    signalled = time.monotonic()
    worker.send_signal(signum)
    code = worker.wait(timeout=10)
    took = time.monotonic() - signalled

    assert code == 0, ws.log()
    assert took < 10
    assert len(ws.lines("end", long)) == 1, "the running task finished"
    assert ws.job(long).state == JobState.COMPLETE
    for jid in rest:
        job = ws.job(jid)
        assert job.state == JobState.WAITING, ws.log()
        assert job.history[-1].what == "released"
        assert job.remaining == job.retries
        assert ws.lines("start", jid) == []
    assert ws.engine.queue_counts("work").running == 0
    assert "warm shutdown" in ws.log()


@pytest.mark.parametrize("how", ["shutdown-timeout", "second-signal"])
def test_cold_shutdown_kills_the_children_and_gives_their_jobs_back(
    workspace: Workspace, how: str
) -> None:
    ws = workspace
    tasks = ws.write_module(WORK)
    long = tasks.Work.publish(None, 3.0)
    rest = [tasks.Work.publish(None, 0.01) for _ in range(2)]
    timeout = "0.3" if how == "shutdown-timeout" else "30"

    worker = ws.start_worker("-A", ws.module_name, "-Q", "work", "-c", "1",
                             "--shutdown-timeout", timeout)  # fmt: skip
    [start] = wait_until(
        lambda: ws.lines("start", long), 20, "the long task to start", details=ws.log
    )
    signalled = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    if how == "second-signal":
        wait_until(lambda: "warm shutdown" in ws.log(), 5, "the first signal to be handled")
        worker.send_signal(signal.SIGTERM)
    code = worker.wait(timeout=10)
    took = time.monotonic() - signalled

    assert code == 0, ws.log()
    assert took < 2.5, ws.log()  # well before the 3 s task could finish
    assert ws.lines("end", long) == []
    with pytest.raises(ProcessLookupError):
        os.kill(start.pid, 0)  # the child is gone
    assert ws.engine.queue_counts("work").running == 0
    job = ws.job(long)
    assert job.state == JobState.WAITING, ws.log()
    assert job.remaining == job.retries  # a shutdown is not the job's fault
    assert job.history[-1].what == "released"
    for jid in rest:
        assert ws.job(jid).state == JobState.WAITING
    counts = ws.engine.queue_counts("work")
    assert counts.waiting == 3  # nothing lost


# -- 6. recycling -------------------------------------------------------------------------

KALE_TASKS = """
class Work(Task):
    queue = "work"
    time_limit = 5

    def run_task(self, n):
        record("end", self.task_id)
"""


def test_max_tasks_per_child_recycles_the_child(workspace: Workspace) -> None:
    ws = workspace
    # Kale style: task classes and no `app`; the worker builds its App from --broker.
    tasks = ws.write_module(KALE_TASKS, with_app=False)
    assert not hasattr(tasks, "app")
    publisher = App(ws.url, settings=Settings(broker=ws.url))
    try:
        jids = [publisher.publish(tasks.Work, [n]) for n in range(8)]
    finally:
        publisher.close()

    worker = ws.start_worker("--broker", ws.url, "-Q", "work", "-c", "1",
                             "-A", ws.module_name, "--max-tasks-per-child", "2",
                             "--shutdown-timeout", "3")  # fmt: skip
    try:
        wait_until(lambda: len(ws.lines("end")) >= 8, 20, "every job to run", details=ws.log)
        wait_until(lambda: all_complete(ws, jids), 5, "every completion to be stored")
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=10)

    assert code == 0, ws.log()
    pids = [line.pid for line in ws.lines("end")]
    assert len(set(pids)) > 2, pids
    assert max(pids.count(pid) for pid in set(pids)) <= 2, pids
    for jid in jids:
        assert done_count(ws, jid) == 1


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


# -- 8. counts ----------------------------------------------------------------------------


def test_counts_report_queued_running_and_processed_jobs(workspace: Workspace) -> None:
    ws = workspace
    tasks = ws.write_module(WORK)
    long = tasks.Work.publish(None, 1.0)
    quick = [tasks.Work.publish(None, 0.01) for _ in range(5)]

    pool = WorkerPool(tasks.app, concurrency=2)
    assert pool.counts().queued == 6
    pool.start()
    try:
        wait_until(
            lambda: (
                pool.counts().running == 1 and ws.lines("start", long) and not ws.lines("end", long)
            ),
            10,
            "the long job to be seen running",
            step=supervising(pool),
        )
        wait_until(
            lambda: all_complete(ws, [long, *quick]) and pool.counts().processed == 6,
            10,
            "every job to be processed",
            step=supervising(pool),
        )
        counts = pool.counts()
    finally:
        pool.terminate(timeout=5)

    assert (counts.queued, counts.running, counts.processed, counts.children) == (0, 0, 6, 2)


# -- a race at startup ------------------------------------------------------------------


def test_sigterm_right_after_start_shuts_down_promptly(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What `lanner worker` does when it is stopped as soon as it has started: run() installs
    # its signal handlers, starts the children, and SIGTERM arrives. No task is running, so
    # the warm shutdown has nothing to wait for.
    ws = workspace
    tasks = ws.write_module(WORK)
    pool = WorkerPool(tasks.app, concurrency=4, shutdown_timeout=8)
    start = pool.start

    def start_then_sigterm() -> None:
        start()
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(pool, "start", start_then_sigterm)
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    began = time.monotonic()
    try:
        pool.run()
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        pool.terminate(timeout=1)
    took = time.monotonic() - began

    assert took < 4, f"warm shutdown of idle children took {took:.1f} s"
    assert pool.children == []


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
