"""The demo's workload: its three queues (Kale's example priorities) and its tasks.

Kept out of `lanner.commands.demo`, which the CLI imports for every command: these task
classes are registered only when the demo runs, so no worker serves their queues by chance.
"""

from __future__ import annotations

import random
import time

from lanner.queues import QueueConfig
from lanner.task import Task

QUEUES = (
    QueueConfig("high_priority", priority=100, batch_size=10, visibility_timeout_sec=60,
                long_poll_time_sec=1, num_iterations=10),
    QueueConfig("default", priority=40, batch_size=10, visibility_timeout_sec=60,
                long_poll_time_sec=1, num_iterations=5),
    QueueConfig("low_priority", priority=5, batch_size=10, visibility_timeout_sec=60,
                long_poll_time_sec=5, num_iterations=5),
)  # fmt: skip


FLAKY_EVERY = 25
"""IndexDocument fails on purpose on the first run of every 25th document, to show retries."""

ON_PURPOSE = (
    "Failures are on purpose: IndexDocument fails the first run of every "
    f"{FLAKY_EVERY}th document (a busy search cluster, simulated), to show retries; each "
    "then completes. A job whose retries run out fails into a failure group named after "
    "its exception: `lanner failed` lists the groups, `lanner retry GROUP` runs their jobs "
    "again."
)
"""What the demo tells its user about the failures above, once the pool is done."""


class TransientError(Exception):
    """A failure worth retrying (the demo's flaky dependency)."""


class SendNotification(Task):
    queue = "high_priority"
    time_limit = 5

    def run_task(self, user_id: int) -> None:
        time.sleep(random.uniform(0.002, 0.010))


class IndexDocument(Task):
    queue = "default"
    time_limit = 5

    def run_task(self, doc_id: int) -> None:
        time.sleep(random.uniform(0.005, 0.020))
        first_try = self.job is not None and self.job.remaining == self.job.retries
        if doc_id % FLAKY_EVERY == 0 and first_try:
            raise TransientError(f"search cluster busy while indexing document {doc_id}")


class BuildReport(Task):
    queue = "low_priority"
    time_limit = 10

    def run_task(self, report_id: int) -> None:
        time.sleep(random.uniform(0.030, 0.060))


WORKLOAD: tuple[tuple[type[Task], int], ...] = (
    (SendNotification, 300),
    (IndexDocument, 200),
    (BuildReport, 50),
)
