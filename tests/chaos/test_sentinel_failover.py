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
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import pytest
import redis

from chaos.failover import AFTER, BEFORE, FILLER_MB, PATIENT, STALLED, Outcome, failover_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


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


def fill_the_replication_link(setup: Sentinels) -> None:
    """Write more than the kernel's socket buffers hold to the primary (a stopped replica
    reads none of it), so that the replication of what follows stays in the primary."""
    port = setup.primary_port()
    assert port is not None
    with redis.Redis(port=port, socket_timeout=30) as primary:
        for part in range(FILLER_MB):
            primary.set(f"filler:{part}", b"x" * 1024 * 1024)


def sentinel_run(setup: Sentinels, options: str, tmp_path: Path, name: str) -> Outcome:
    """Stop the replica to promote, publish, kill the primary, go on; the failover is seen
    through once the last jobs are published (they ride it out on retries)."""
    killed: list[int] = []

    def fail_over(publish_stalled: Callable[[], None]) -> None:
        lagging = setup.replicas[0]
        os.kill(lagging.process.pid, signal.SIGSTOP)
        try:
            fill_the_replication_link(setup)
            publish_stalled()
            killed.append(setup.kill_primary())
        finally:
            os.kill(lagging.process.pid, signal.SIGCONT)

    url = f"{setup.url}?{PATIENT}&{options}"
    return failover_run(
        url, "work", tmp_path, f"{__name__}.{name}", fail_over,
        settle=lambda: setup.wait_for_failover(killed[0]),
    )  # fmt: skip


def test_without_wait_a_failover_loses_only_what_no_replica_had(
    sentinel_factory: Callable[..., Sentinels], tmp_path: Path
) -> None:
    setup = sentinel_factory(replicas=1)
    outcome = sentinel_run(setup, "wait=0", tmp_path, "no_wait")
    print(outcome.line())
    assert outcome.lost <= outcome.stalled, outcome.line()
    assert set(outcome.runs) <= outcome.acknowledged | set(range(BEFORE + STALLED + AFTER))


def test_with_wait_a_failover_loses_nothing(
    sentinel_factory: Callable[..., Sentinels], tmp_path: Path
) -> None:
    # Two replicas: one is stopped, the other keeps up (and so confirms every WAIT). The
    # Sentinels promote the one that has the most, and the new primary keeps a replica.
    setup = sentinel_factory(replicas=2)
    outcome = sentinel_run(setup, "wait=1&wait_timeout=2", tmp_path, "wait_one")
    print(outcome.line())
    assert outcome.lost == set(), outcome.line()
