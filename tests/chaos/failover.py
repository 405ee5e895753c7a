"""What the failover tests share (tests/chaos/test_sentinel_failover.py through Sentinel,
tests/chaos/test_cluster_failover.py on Redis Cluster): a pool draining jobs while the
primary that serves its queue is killed, and an account of what was lost.

Redis replicates asynchronously: a write the primary acknowledged and no replica had yet
is gone when that replica is promoted. Each test opens that window its own way (a replica
stopped, the socket to it filled) around the jobs published in it (`STALLED`, delayed so
that none runs before the failover); the run here publishes before, in and after it,
drains the queue and counts each job's runs.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lanner.app import App
from lanner.errors import EngineUnavailable
from lanner.queues import QueueConfig
from lanner.settings import Settings
from lanner.taskfunction import TaskFunction
from lanner.worker.pool import WorkerPool

# Commands retried long enough to ride out the failover on a loaded machine.
PATIENT = "retries=200&backoff_cap=0.5"
BEFORE, STALLED, AFTER = 100, 40, 100
FILLER_MB = 24


@dataclass
class Outcome:
    acknowledged: set[int]  # jobs whose publish returned
    stalled: set[int]  # ... of those, the ones acknowledged while the replica was stopped
    runs: Counter[int]  # how many times each job ran

    @property
    def lost(self) -> set[int]:
        return self.acknowledged - set(self.runs)

    def line(self) -> str:
        again = sum(1 for count in self.runs.values() if count > 1)
        return (
            f"acknowledged {len(self.acknowledged)}, in the stall {len(self.stalled)}, "
            f"lost {len(self.lost)}, ran more than once {again}"
        )


def record(path: str, n: int) -> None:
    with open(path, "a") as out:
        out.write(f"{n}\n")


def runs(path: Path) -> Counter[int]:
    return Counter(int(line) for line in path.read_text().split()) if path.exists() else Counter()


def failover_run(
    url: str,
    queue: str,
    tmp_path: Path,
    name: str,
    fail_over: Callable[[Callable[[], None]], None],
    settle: Callable[[], object] = lambda: None,
) -> Outcome:
    """Publish and drain on `queue` (the task named `name`): `BEFORE` jobs, then
    `fail_over(publish_stalled)` (which opens the window, calls `publish_stalled` in it and
    kills the primary), `AFTER` jobs, `settle()` (the failover seen through), and the queue
    drained."""
    queues = [QueueConfig(queue, priority=10, visibility_timeout_sec=5, long_poll_time_sec=0.2)]
    out = tmp_path / "runs.txt"
    app = App(url, settings=Settings(broker=url), queues=queues)
    task: TaskFunction[[str, int], None] = app.task(queue=queue, name=name)(record)
    acknowledged: set[int] = set()
    stalled: set[int] = set()
    pool = WorkerPool(app, concurrency=2, queues=queues)
    pool.start()
    try:

        def publish(numbers: range, into: set[int], delay: float = 0.0) -> None:
            for n in numbers:
                try:
                    app.publish_many([task.options(delay=delay).message(str(out), n)])
                except EngineUnavailable:
                    continue  # not acknowledged: the publisher knows to try again
                into.add(n)
                pool.supervise(timeout=0.005)

        publish(range(BEFORE), acknowledged)
        # Delayed, so that the pool cannot run them before the failover.
        fail_over(lambda: publish(range(BEFORE, BEFORE + STALLED), stalled, delay=3.0))
        acknowledged |= stalled
        publish(range(BEFORE + STALLED, BEFORE + STALLED + AFTER), acknowledged)
        settle()
        deadline = time.monotonic() + 120
        # Done when every job kept has run: the lost are acknowledged jobs the new primary
        # never had, so the pool is drained when its queue is.
        while time.monotonic() < deadline:
            pool.supervise(timeout=0.1)
            counts = app.engine.queue_counts(queue)
            if counts.waiting + counts.running + counts.scheduled + counts.stalled == 0:
                break
        else:
            raise AssertionError(f"the pool did not drain in time: {counts}")
    finally:
        pool.terminate(timeout=5)
        app.close()
    return Outcome(acknowledged, stalled, runs(out))
