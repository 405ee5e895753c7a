"""Real worker pools on the SQS engine (moto's server): draining, a child killed, shutdown.

On SQS a dead child's jobs cannot be given back by the supervisor (their receipt handles
died with the child): they come back by themselves when their lock, the queue's
visibility timeout, runs out. These tests use a 2 s lock, and wait with deadlines.
"""

from __future__ import annotations

import os
import signal

import pytest

from lanner.app import App
from lanner.prepared import Message

from .conftest import Workspace, wait_until
from .pool_support import running_pool, supervising

pytestmark = pytest.mark.slow

QUEUES = 'QueueConfig("work", batch_size=5, visibility_timeout_sec=2, long_poll_time_sec=1)'

TASKS = """
class Work(Task):
    app = app
    queue = "work"
    time_limit = 1.5
    max_retries = 3

    def run_task(self, seconds):
        record("start", self.task_id)
        time.sleep(seconds)
        record("end", self.task_id)
"""


@pytest.fixture
def ws(workspace: Workspace, sqs_fresh_url: str) -> Workspace:
    workspace.url = sqs_fresh_url
    return workspace


def ended(ws: Workspace) -> set[str]:
    return {line.jid for line in ws.lines("end")}


def test_a_pool_drains_its_queue_on_sqs(ws: Workspace) -> None:
    tasks = ws.write_module(TASKS, queues=QUEUES)
    app: App = tasks.app
    jids = app.publish_many([Message(tasks.Work, (0.01,))] * 30)

    with running_pool(app, concurrency=2) as pool:
        wait_until(lambda: ended(ws) >= set(jids), 60, "every job to run",
                   step=supervising(pool), details=ws.log)  # fmt: skip
        wait_until(lambda: ws.engine.queue_counts("work").running == 0, 10,
                   "every job to be completed", step=supervising(pool))  # fmt: skip

    counts = ws.engine.queue_counts("work")
    assert (counts.waiting, counts.running, counts.scheduled) == (0, 0, 0)
    assert len({line.pid for line in ws.lines("end")}) == 2  # both children worked


def test_a_child_killed_mid_job_loses_nothing_on_sqs(ws: Workspace) -> None:
    tasks = ws.write_module(TASKS, queues=QUEUES)
    slow = tasks.Work.publish(None, 1.0)
    rest = [tasks.Work.publish(None, 0.01) for _ in range(6)]

    worker = ws.start_worker("-A", ws.module_name, "-Q", "work", "-c", "2", "--broker", ws.url)
    [start] = wait_until(lambda: ws.lines("start", slow), 30, "the slow job to start",
                         details=ws.log)  # fmt: skip
    os.kill(start.pid, signal.SIGKILL)

    # Its message comes back when its 2 s lock runs out, and runs in another child.
    wait_until(lambda: ended(ws) >= {slow, *rest}, 30, "every job to run", details=ws.log)
    again = [line for line in ws.lines("start", slow) if line.pid != start.pid]
    assert again, ws.log()
    wait_until(lambda: ws.engine.queue_counts("work").running == 0, 10, "the completions")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=15) == 0, ws.log()
    assert "Traceback" not in ws.log()
    assert ws.engine.queue_counts("work").waiting == 0


FAIR_TASKS = """
class FairWork(Task):
    app = app
    queue = "work"
    time_limit = 1.5
    max_retries = 3
    fair_key = staticmethod(lambda tenant, seconds: f"tenant-{tenant}")

    def run_task(self, tenant, seconds):
        record("start", self.task_id)
        time.sleep(seconds)
        record("end", self.task_id)
"""


def test_a_pool_runs_fair_jobs_on_sqs_as_any_other(ws: Workspace) -> None:
    tasks = ws.write_module(FAIR_TASKS, queues=QUEUES)
    app: App = tasks.app
    # One tenant's burst before two others' jobs: each a message group (SQS's fair queues).
    jids = app.publish_many([Message(tasks.FairWork, ("big", 0.01))] * 20)
    jids += app.publish_many([Message(tasks.FairWork, (t, 0.01)) for t in ("a", "b")] * 3)

    with running_pool(app, concurrency=2) as pool:
        wait_until(lambda: ended(ws) >= set(jids), 60, "every job to run",
                   step=supervising(pool), details=ws.log)  # fmt: skip
        wait_until(lambda: ws.engine.queue_counts("work").running == 0, 10,
                   "every job to be completed", step=supervising(pool))  # fmt: skip

    assert ended(ws) == set(jids)
    counts = ws.engine.queue_counts("work")
    assert (counts.waiting, counts.running, counts.scheduled) == (0, 0, 0)
