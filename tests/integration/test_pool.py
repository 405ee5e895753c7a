"""The worker pool with real processes: priorities, shutdowns, recycling, counts.

Some tests run a `WorkerPool` in the test process (`start()`, then `supervise()` until the
state awaited is reached, `terminate()` at the end); the others run `lanner worker` as a
subprocess and signal it. Every wait polls the store or the tasks' output with a deadline.
"""

from __future__ import annotations

import os
import signal
import statistics
import time

import pytest

from lanner import JobState
from lanner.app import App
from lanner.prepared import Message
from lanner.settings import Settings
from lanner.worker.pool import WorkerPool

from .conftest import Workspace, wait_until
from .pool_support import WORK, all_complete, done_count, running_pool, supervising

pytestmark = pytest.mark.slow

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
    worker.send_signal(signal.SIGTERM)
    if how == "second-signal":
        wait_until(lambda: "warm shutdown" in ws.log(), 5, "the first signal to be handled")
        worker.send_signal(signal.SIGTERM)
    code = worker.wait(timeout=10)

    assert code == 0, ws.log()
    # Cut short: the 3 s task (within its 4 s limit) would have recorded its end.
    assert ws.lines("end", long) == [], ws.log()
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
    # A shutdown timeout far beyond the bound below: waiting it out cannot pass for prompt,
    # however slow the machine.
    pool = WorkerPool(tasks.app, concurrency=4, shutdown_timeout=120)
    start = pool.start

    def start_then_sigterm() -> None:
        start()
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(pool, "start", start_then_sigterm)
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    began = time.monotonic()
    try:
        pool.run()
        # run() gives back the handlers it found (its own stay nowhere once it returned).
        assert {signum: signal.getsignal(signum) for signum in handlers} == handlers
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        pool.terminate(timeout=1)
    took = time.monotonic() - began

    assert took < 60, f"warm shutdown of idle children took {took:.1f} s"
    assert pool.children == []


def test_a_worker_without_queues_serves_those_of_its_apps_tasks_and_says_where(
    workspace: Workspace,
) -> None:
    ws = workspace
    tasks = ws.write_module(
        WORK
        + """
class Thumbnail(Task):  # no `app`: it publishes through this module's `app`
    queue = "thumbnails"

    def run_task(self):
        record("thumb", self.task_id)
"""
    )
    work = tasks.Work.publish(None, 0.01)
    thumb = tasks.Thumbnail.publish(None)
    ws.start_worker("-A", ws.module_name, "-c", "1")
    wait_until(lambda: all_complete(ws, [work, thumb]), 20, "both jobs", details=ws.log)
    assert f"on {ws.url}, queues work, thumbnails," in ws.log()
    assert not (ws.dir / "lanner.db").exists()


ELSEWHERE_TASKS = """
app = App(BROKER.replace("jobs.db", "elsewhere.db"))  # the store --broker replaces


@app.task(queue="alpha", time_limit=5)
def first(n):
    record("first", str(n))
    second.delay(n)  # through the module's app: the store the worker serves


@app.task(queue="beta", time_limit=5)
def second(n):
    record("second", str(n))
"""


@pytest.mark.parametrize("how", ["--broker", "LANNER_BROKER"])
def test_a_broker_given_to_the_worker_keeps_the_queues_of_the_apps_tasks(
    workspace: Workspace, how: str
) -> None:
    """`-A module` with `--broker` (or LANNER_BROKER) serves the queues of the module's
    tasks on that store, and what those tasks publish goes there too."""
    ws = workspace
    tasks = ws.write_module(ELSEWHERE_TASKS, with_app=False)
    publisher = App(ws.url)
    try:
        jids = [publisher.publish(tasks.first.task_class, [n]) for n in range(3)]
    finally:
        publisher.close()
    if how == "--broker":
        worker = ws.start_worker("-A", ws.module_name, "-c", "1", "--broker", ws.url)
    else:
        worker = ws.start_worker("-A", ws.module_name, "-c", "1",
                                 environment={"LANNER_BROKER": ws.url})  # fmt: skip
    wait_until(lambda: all_complete(ws, jids), 30, "the alpha jobs", details=ws.log)

    def second_ran() -> bool:
        return sorted(line.jid for line in ws.lines("second")) == ["0", "1", "2"]

    wait_until(second_ran, 30, "the beta jobs", details=ws.log)
    assert f"on {ws.url}, queues default, alpha, beta," in ws.log()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0, ws.log()
    assert not (ws.dir / "elsewhere.db").exists()
