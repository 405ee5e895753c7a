"""The worker pool end to end on Redis Cluster: real processes, a real 3-primary cluster.

Queues are chosen so that each primary serves some of them (tests/redis_cluster.py), so a
pool's pops, heartbeats and completes go to every shard.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from lanner.app import App
from lanner.queues import QueueConfig
from lanner.settings import Settings
from lanner.worker.pool import WorkerPool
from redis_cluster import RedisCluster

pytestmark = pytest.mark.slow

JOBS = 2_000


def record(path: str, text: str) -> None:
    with open(path, "a") as out:
        out.write(text + "\n")


def write(path: str, n: int) -> None:
    record(path, str(n))


@pytest.fixture
def cluster(redis_cluster: RedisCluster) -> RedisCluster:
    redis_cluster.flush()
    return redis_cluster


def make_app(cluster: RedisCluster, queues: list[QueueConfig]) -> App:
    return App(cluster.url, settings=Settings(broker=cluster.url), queues=queues)


def run_until(pool: WorkerPool, done: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "the pool did not finish in time"
        pool.supervise(timeout=0.05)


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


@pytest.mark.timeout(600)
def test_a_two_process_pool_drains_six_queues_over_three_shards(
    cluster: RedisCluster, tmp_path: Path
) -> None:
    names = cluster.spread_queues(per_primary=2)
    assert len({cluster.owner(name) for name in names}) == 3
    queues = [
        QueueConfig(name, priority=1, visibility_timeout_sec=30, long_poll_time_sec=0.2,
                    batch_size=10)
        for name in names
    ]  # fmt: skip
    app = make_app(cluster, queues)
    out = tmp_path / "out.txt"
    try:
        tasks = [
            app.task(queue=name, time_limit=10, name=f"{__name__}.write_{name}")(write)
            for name in names
        ]
        messages = [tasks[n % len(tasks)].message(str(out), n) for n in range(JOBS)]
        for start in range(0, JOBS, 500):
            app.publish_many(messages[start : start + 500])
        pool = WorkerPool(app, concurrency=2, queues=queues)
        pool.start()
        try:
            run_until(pool, lambda: len(lines(out)) >= JOBS, timeout=540)
            # Whatever a pop took last is settled before the count is read.
            deadline = time.monotonic() + 60
            while any(c.running or c.waiting for c in app.engine.queues()):
                assert time.monotonic() < deadline, app.engine.queues()
                pool.supervise(timeout=0.05)
        finally:
            pool.terminate(timeout=10)
        done = collections.Counter(int(n) for n in lines(out))
        assert sorted(done) == list(range(JOBS)), "lost jobs"
        assert max(done.values()) == 1, "a job ran twice without a fault"
    finally:
        app.close()


@pytest.mark.timeout(600)
def test_the_pool_carries_on_after_a_primary_is_killed_and_its_replica_takes_over(
    redis_cluster_factory: Callable[..., RedisCluster], tmp_path: Path
) -> None:
    cluster = redis_cluster_factory(primaries=3, replicas=1)
    names = cluster.spread_queues(per_primary=1)
    queues = [
        QueueConfig(name, priority=1, visibility_timeout_sec=5, long_poll_time_sec=0.2,
                    batch_size=5)
        for name in names
    ]  # fmt: skip
    app = make_app(cluster, queues)
    out = tmp_path / "out.txt"
    jobs = 600
    try:
        tasks = [
            app.task(queue=name, time_limit=4, name=f"{__name__}.failover_{name}")(write)
            for name in names
        ]
        app.publish_many([tasks[n % len(tasks)].message(str(out), n) for n in range(jobs)])
        # What docs/engines/redis.md says a failover may lose is what the replica had not
        # received yet: here every put has reached it before the kill, so nothing may be.
        cluster.wait_replicated()
        victim = cluster.owner(names[0])
        pool = WorkerPool(app, concurrency=2, queues=queues)
        pool.start()
        try:
            run_until(pool, lambda: len(lines(out)) >= jobs // 3, timeout=240)
            cluster.kill(victim)
            run_until(pool, lambda: len(set(lines(out))) >= jobs, timeout=300)
        finally:
            pool.terminate(timeout=10)
        assert victim not in cluster.primaries()
        done = collections.Counter(int(n) for n in lines(out))
        assert sorted(done) == list(range(jobs)), "lost jobs"
    finally:
        app.close()


def write_queue(path: str, queue: str) -> None:
    record(path, queue)


@pytest.mark.timeout(600)
def test_the_lottery_keeps_its_shares_over_queues_on_different_shards(
    cluster: RedisCluster, tmp_path: Path
) -> None:
    names = cluster.spread_queues(per_primary=1, stem="lot")
    tickets = dict(zip(names, (1, 2, 4), strict=True))
    queues = [
        QueueConfig(name, priority=tickets[name], visibility_timeout_sec=30,
                    long_poll_time_sec=0.2, batch_size=1, num_iterations=1)
        for name in names
    ]  # fmt: skip
    app = make_app(cluster, queues)
    out = tmp_path / "out.txt"
    draws = 350
    try:
        tasks = {
            name: app.task(queue=name, time_limit=10, name=f"{__name__}.lot_{name}")(write_queue)
            for name in names
        }
        # Every queue keeps work through the whole run, so each draw is over all three.
        app.publish_many([tasks[name].message(str(out), name) for name in names] * draws)
        pool = WorkerPool(app, concurrency=1, queues=queues, selector="reduced-lottery")
        pool.start()
        try:
            run_until(pool, lambda: len(lines(out)) >= draws, timeout=400)
        finally:
            pool.terminate(timeout=10)
        taken = collections.Counter(lines(out)[:draws])
        for name in names:
            share = taken[name] / draws
            # 1:2:4 tickets: 1/7, 2/7, 4/7; a binomial's 3.5 standard deviations at most.
            expected = tickets[name] / 7
            bound = 3.5 * (expected * (1 - expected) / draws) ** 0.5
            assert abs(share - expected) <= bound, (name, share, expected, taken)
    finally:
        app.close()
