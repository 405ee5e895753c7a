"""A pool drains jobs on Redis Cluster while a shard's primary is killed: what it loses.

As tests/chaos/test_sentinel_failover.py does through Sentinel: the primary that serves
the queue has its replica stopped (SIGSTOP) and the socket between them filled, so that
what follows stays in the primary's memory; jobs published then (delayed, so that none
runs before the failover) are acknowledged by the primary alone; it is kill -9ed and the
replica goes on (SIGCONT) and is promoted. Without `wait` those jobs are lost, and only
those (docs/engines/redis.md, "What a failover can lose"). With `wait=1` and a second
replica that kept up, that one confirms every put and complete and is promoted first:
none is lost. Either way the pool carries on through the failover without a restart.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from redis.crc import key_slot

from chaos.failover import FILLER_MB, PATIENT, Outcome, failover_run
from redis_cluster import READY_TIMEOUT, RedisCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def fill_the_replication_link(port: int) -> None:
    """More than the kernel's socket buffers hold, written on the primary (see the
    Sentinel test), under keys of its own slots."""
    with redis.Redis(port=port, socket_timeout=30) as primary:
        my_id = str(primary.execute_command("CLUSTER MYID"))
        own = [
            range(int(start), int(end) + 1)
            for start, end, owner, *_ in primary.execute_command("CLUSTER SLOTS")
            if str(owner[2]) == my_id
        ]
        names = (f"filler:{n}" for n in range(1_000_000))
        mine = (name for name in names if any(key_slot(name.encode()) in r for r in own))
        for _, name in zip(range(FILLER_MB), mine, strict=False):
            primary.set(name, b"x" * 1024 * 1024)


def wait_until_primary(port: int) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        try:
            with redis.Redis(port=port, socket_timeout=2) as client:
                if client.info("replication")["role"] == "master":
                    return
        except redis.RedisError:
            pass
        assert time.monotonic() < deadline, f"the replica on {port} was not promoted"
        time.sleep(0.1)


def cluster_run(cluster: RedisCluster, options: str, tmp_path: Path, name: str) -> Outcome:
    """Stop a replica of the queue's primary, publish, kill the primary, go on once a
    replica took over."""
    queue = cluster.spread_queues(per_primary=1)[0]

    def fail_over(publish_stalled: Callable[[], None]) -> None:
        victim = cluster.owner(queue)
        lagging, *keeping_up = cluster.replicas_of(victim)
        stopped = lagging.process
        os.kill(stopped.pid, signal.SIGSTOP)
        try:
            fill_the_replication_link(victim)
            publish_stalled()
            cluster.crash(victim)
            for replica in keeping_up:  # promoted while the lagging one cannot compete
                wait_until_primary(replica.port)
        finally:
            os.kill(stopped.pid, signal.SIGCONT)
        cluster.wait_taken_over(victim)

    url = f"{cluster.url}?{PATIENT}&{options}"
    return failover_run(url, queue, tmp_path, f"{__name__}.{name}", fail_over)


def test_without_wait_a_failover_loses_what_no_replica_had(
    redis_cluster_factory: Callable[..., RedisCluster], tmp_path: Path
) -> None:
    cluster = redis_cluster_factory(primaries=3, replicas=1)
    outcome = cluster_run(cluster, "wait=0", tmp_path, "no_wait")
    print(outcome.line())
    assert outcome.lost, f"nothing lost: the window was not opened ({outcome.line()})"
    assert outcome.lost <= outcome.stalled, outcome.line()


def test_with_wait_a_failover_loses_nothing(
    redis_cluster_factory: Callable[..., RedisCluster], tmp_path: Path
) -> None:
    # Two replicas of each primary: one is stopped, the other keeps up and is promoted.
    cluster = redis_cluster_factory(primaries=3, replicas=2)
    outcome = cluster_run(cluster, "wait=1&wait_timeout=2", tmp_path, "wait_one")
    print(outcome.line())
    assert outcome.stalled, outcome.line()
    assert outcome.lost == set(), outcome.line()
