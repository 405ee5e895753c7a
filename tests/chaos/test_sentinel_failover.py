"""A pool drains jobs through Sentinel while its primary is killed: what a failover loses.

Redis replicates asynchronously: a write the primary acknowledged and no replica had yet is
gone when that replica is promoted. To make that window wide enough to see, the test stops
(SIGSTOP) a replica, fills the socket between them (a few MB written on the primary), so
that what follows waits in the primary's own memory, publishes some jobs (delayed a few
seconds, so that none runs before the failover), kill -9s the
primary and lets the replica go on (SIGCONT). With one replica, the Sentinels promote it:
without `wait`, jobs the primary acknowledged in that window are lost, and only those
(docs/engines/redis.md). With `wait=1` and a second replica that kept up, that one is
promoted and none is lost. Either way the pool carries on through the failover, without a
restart, and runs every job that was kept.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest
import redis

from lanner.app import App
from lanner.errors import EngineUnavailable
from lanner.queues import QueueConfig
from lanner.settings import Settings
from lanner.taskfunction import TaskFunction
from lanner.worker.pool import WorkerPool

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

QUEUES = [QueueConfig("work", priority=10, visibility_timeout_sec=5, long_poll_time_sec=0.2)]
# Commands retried long enough to ride out the failover on a loaded machine.
PATIENT = "retries=200&backoff_cap=0.5"
BEFORE, STALLED, AFTER = 100, 40, 100
FILLER_MB = 24


class Server(Protocol):
    process: Any
    port: int


class Sentinels(Protocol):
    """What tests/conftest.py's `SentinelSetup` gives."""

    replicas: list[Server]

    @property
    def url(self) -> str: ...

    def primary_port(self) -> int | None: ...

    def kill_primary(self) -> int: ...

    def wait_for_failover(self, old_port: int, timeout: float = 90.0) -> int: ...


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


def fill_the_replication_link(setup: Sentinels) -> None:
    """Write more than the kernel's socket buffers hold to the primary (a stopped replica
    reads none of it), so that the replication of what follows stays in the primary."""
    port = setup.primary_port()
    assert port is not None
    with redis.Redis(port=port, socket_timeout=30) as primary:
        for part in range(FILLER_MB):
            primary.set(f"filler:{part}", b"x" * 1024 * 1024)


def failover_run(setup: Sentinels, options: str, tmp_path: Path, name: str) -> Outcome:
    """Publish and drain; stop the replica to promote, publish, kill the primary, go on."""
    url = f"{setup.url}?{PATIENT}&{options}"
    out = tmp_path / "runs.txt"
    app = App(url, settings=Settings(broker=url), queues=QUEUES)
    task: TaskFunction[[str, int], None] = app.task(queue="work", name=f"{__name__}.{name}")(record)
    acknowledged: set[int] = set()
    stalled: set[int] = set()
    pool = WorkerPool(app, concurrency=2, queues=QUEUES)
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
        lagging = setup.replicas[0]
        os.kill(lagging.process.pid, signal.SIGSTOP)
        try:
            fill_the_replication_link(setup)
            # Delayed, so that the pool cannot run them before the failover.
            publish(range(BEFORE, BEFORE + STALLED), stalled, delay=3.0)
            old = setup.kill_primary()
        finally:
            os.kill(lagging.process.pid, signal.SIGCONT)
        acknowledged |= stalled
        publish(range(BEFORE + STALLED, BEFORE + STALLED + AFTER), acknowledged)
        setup.wait_for_failover(old)
        deadline = time.monotonic() + 120
        # Done when every job kept has run: the lost are acknowledged jobs the new primary
        # never had, so the pool is drained when its queue is.
        while time.monotonic() < deadline:
            pool.supervise(timeout=0.1)
            counts = app.engine.queue_counts("work")
            if counts.waiting + counts.running + counts.scheduled + counts.stalled == 0:
                break
        else:
            raise AssertionError(f"the pool did not drain in time: {counts}")
    finally:
        pool.terminate(timeout=5)
        app.close()
    return Outcome(acknowledged, stalled, runs(out))


def test_without_wait_a_failover_loses_only_what_no_replica_had(
    sentinel_factory: Callable[..., Sentinels], tmp_path: Path
) -> None:
    setup = sentinel_factory(replicas=1)
    outcome = failover_run(setup, "wait=0", tmp_path, "no_wait")
    print(outcome.line())
    assert outcome.lost <= outcome.stalled, outcome.line()
    assert set(outcome.runs) <= outcome.acknowledged | set(range(BEFORE + STALLED + AFTER))


def test_with_wait_a_failover_loses_nothing(
    sentinel_factory: Callable[..., Sentinels], tmp_path: Path
) -> None:
    # Two replicas: one is stopped, the other keeps up (and so confirms every WAIT). The
    # Sentinels promote the one that has the most, and the new primary keeps a replica.
    setup = sentinel_factory(replicas=2)
    outcome = failover_run(setup, "wait=1&wait_timeout=2", tmp_path, "wait_one")
    print(outcome.line())
    assert outcome.lost == set(), outcome.line()
