"""The Redis Cluster engine's own promises: its URLs, its keys, and moves between
partitions that a process killed between two steps neither loses nor duplicates."""

from __future__ import annotations

import json
import multiprocessing
import os
from collections.abc import Callable, Iterator

import pytest
import redis

import lanner
from lanner import JobState, MalformedArgument
from lanner.engines.redis.cluster import transfer
from lanner.engines.redis.cluster.address import parse_url
from lanner.engines.redis.cluster.engine import RedisClusterEngine
from lanner.engines.redis.script import build_script
from redis_cluster import RedisCluster

T0 = 1_700_000_000.0


@pytest.fixture
def cluster(redis_cluster: RedisCluster) -> RedisCluster:
    redis_cluster.flush()
    return redis_cluster


@pytest.fixture
def engine(cluster: RedisCluster) -> Iterator[RedisClusterEngine]:
    opened = lanner.open_engine(cluster.url)
    assert isinstance(opened, RedisClusterEngine)
    yield opened
    opened.close()


# -- URLs ---------------------------------------------------------------------------------
def test_a_cluster_url_names_its_seed_nodes_and_options() -> None:
    address, options = parse_url("rediss+cluster://me:s%40cret@a:7000,b:7001,[::1]:7002?retries=3")
    assert address.seeds == (("a", 7000), ("b", 7001), ("::1", 7002))
    assert (address.username, address.password, address.tls) == ("me", "s@cret", True)
    assert options.retries == 3
    assert "s@cret" not in repr(address)


@pytest.mark.parametrize(
    "url",
    [
        "redis+cluster://a:7000/1",  # a cluster has only database 0
        "redis+cluster://a:notaport",
        "redis+cluster://a:7000,",
        "redis+cluster://a:7000?nope=1",
        "redis://a:7000",
    ],
)
def test_a_bad_cluster_url_is_refused_in_one_line(url: str) -> None:
    with pytest.raises(MalformedArgument) as raised:
        parse_url(url)
    assert "\n" not in str(raised.value)


# -- keys ---------------------------------------------------------------------------------
def test_every_key_of_a_queue_hashes_to_its_partition(
    cluster: RedisCluster, engine: RedisClusterEngine
) -> None:
    engine.put("q", "j1", "Task", tags=["t"], now=T0)
    engine.pop("q", "w1", now=T0)
    engine.fail("j1", "w1", "boom", "no", now=T0 + 1)
    keys: list[str] = []
    for port in cluster.primaries():
        with redis.Redis(port=port, decode_responses=True) as client:
            keys.extend(client.keys("ql:*"))
    queue_keys = [k for k in keys if not k.startswith("ql:{g}")]
    assert queue_keys
    assert all(k.startswith("ql:{q:q}:") for k in queue_keys), keys


def test_the_core_refuses_keys_that_are_not_a_partition(redis_url: str) -> None:
    with (
        redis.Redis.from_url(redis_url, decode_responses=True) as client,
        pytest.raises(redis.ResponseError, match="No Keys should be provided"),
    ):
        client.eval(build_script(), 1, "foo", "queues", str(T0))


# -- moves between partitions -------------------------------------------------------------
def _killed_between_steps(
    url: str, step: str, action: Callable[[RedisClusterEngine], object]
) -> None:
    """Run `action` in a child process that dies (kill -9 style) right after `step`."""

    def child() -> None:
        opened = lanner.open_engine(url)
        assert isinstance(opened, RedisClusterEngine)

        def die(done: str) -> None:
            if done == step:
                os._exit(9)

        transfer.between_steps = die
        action(opened)
        os._exit(0)

    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    process.join(60)
    assert process.exitcode == 9, "the child did not die between the steps"


def _copies(cluster: RedisCluster, jid: str) -> int:
    found = 0
    for port in cluster.primaries():
        with redis.Redis(port=port, decode_responses=True) as client:
            found += sum(1 for _ in client.scan_iter(f"ql:*:j:{jid}"))
    return found


@pytest.mark.parametrize("step", ["moved-out", "put"])
def test_a_put_into_another_partition_killed_between_steps_is_finished_once(
    cluster: RedisCluster, engine: RedisClusterEngine, step: str
) -> None:
    engine.put("a", "j1", "Task", '{"v": 1}', tags=["t"], now=T0)
    _killed_between_steps(
        cluster.url, step, lambda e: e.put("b", "j1", "Task", '{"v": 2}', now=T0 + 1)
    )
    # Half moved: nobody can pop it from either queue, and it runs nowhere twice.
    assert engine.pop("a", "w1", 10, now=T0 + 2) == []
    assert engine.queue_counts("a", now=T0 + 2).waiting == 0

    with lanner.open_engine(cluster.url) as reopened:  # finishes what was left
        job = reopened.get("j1", now=T0 + 2)
        assert job is not None
        assert (job.queue, job.state, job.data, job.tags) == (
            "b",
            JobState.WAITING,
            '{"v": 2}',
            ("t",),
        )
        assert [event.what for event in job.history] == ["put", "put"]
        assert _copies(cluster, "j1") == 1
        assert [j.jid for j in reopened.pop("b", "w1", 10, now=T0 + 3)] == ["j1"]
        assert reopened.pop("a", "w1", 10, now=T0 + 3) == []


def test_a_lookup_finishes_a_move_left_half_done(
    cluster: RedisCluster, engine: RedisClusterEngine
) -> None:
    engine.put("a", "j1", "Task", now=T0)
    _killed_between_steps(cluster.url, "moved-out", lambda e: e.put("b", "j1", "Task", now=T0 + 1))
    engine.partitions.forget("j1")
    job = engine.get("j1", now=T0 + 2)  # this engine opened before the crash
    assert job is not None
    assert job.queue == "b"
    assert _copies(cluster, "j1") == 1


@pytest.mark.parametrize("step", ["moved-out", "put"])
def test_an_advance_into_another_partition_killed_between_steps_is_finished_once(
    cluster: RedisCluster, engine: RedisClusterEngine, step: str
) -> None:
    engine.put("a", "j1", "Task", now=T0)
    engine.pop("a", "w1", now=T0)
    _killed_between_steps(
        cluster.url, step, lambda e: e.complete("j1", "w1", "a", next="b", now=T0 + 1)
    )
    with lanner.open_engine(cluster.url) as reopened:
        job = reopened.get("j1", now=T0 + 2)
        assert job is not None
        assert (job.queue, job.state) == ("b", JobState.WAITING)
        assert [event.what for event in job.history][-2:] == ["done", "put"]
        assert _copies(cluster, "j1") == 1
        assert [j.jid for j in reopened.pop("b", "w2", 10, now=T0 + 3)] == ["j1"]


def test_a_cluster_that_cannot_be_reached_is_unavailable() -> None:
    with pytest.raises(lanner.EngineUnavailable, match="cannot serve it now"):
        lanner.open_engine("redis+cluster://127.0.0.1:1?retries=0&socket_connect_timeout=1")


# -- wait -----------------------------------------------------------------------------------
def _waits(port: int) -> int:
    with redis.Redis(port=port) as client:
        stats = client.info("commandstats").get("cmdstat_wait", {})
    return int(stats.get("calls", 0))


def test_wait_goes_to_the_primary_that_ran_each_durable_call(
    redis_cluster_replicated: RedisCluster,
) -> None:
    cluster = redis_cluster_replicated
    cluster.flush()
    first, second = cluster.spread_queues(per_primary=1)[:2]
    owners = {cluster.owner(first), cluster.owner(second)}
    before = {port: _waits(port) for port in owners}
    engine = lanner.open_engine(cluster.url + "?wait=1")
    try:
        engine.put(first, "job-1", "k", "{}")
        engine.put(second, "job-2", "k", "{}")
        [job] = engine.pop(first, "w", count=1)
        engine.heartbeat(job.jid, "w")  # the pop and the heartbeat: no WAIT
        engine.complete(job.jid, "w", first)
    finally:
        engine.close()
    assert _waits(cluster.owner(first)) == before[cluster.owner(first)] + 2
    assert _waits(cluster.owner(second)) == before[cluster.owner(second)] + 1


def test_wait_that_no_replica_of_the_shard_confirms_is_engine_unavailable(
    cluster: RedisCluster,
) -> None:
    # The session's cluster has no replicas: the put is done, but unconfirmed.
    engine = lanner.open_engine(cluster.url + "?wait=1&wait_timeout=0.05")
    try:
        with pytest.raises(lanner.EngineUnavailable, match="0 of the 1 replica"):
            engine.put("q", "job-1", "k", "{}")
        [job] = engine.multiget(["job-1"])
        assert job.queue == "q"
    finally:
        engine.close()


# -- flow control -------------------------------------------------------------------------
def _all_keys(cluster: RedisCluster) -> dict[str, redis.Redis]:
    found: dict[str, redis.Redis] = {}
    for port in cluster.primaries():
        client = redis.Redis(port=port, decode_responses=True)
        found.update((str(k), client) for k in client.keys("ql:*"))
    return found


def test_a_flow_keeps_its_state_in_its_queues_partition(
    cluster: RedisCluster, engine: RedisClusterEngine
) -> None:
    flow = lanner.Flow("k", 1, (lanner.RateLimit("b", 5, 10.0),), "tenant")
    engine.put_many([lanner.NewJob("q1", f"j{i}", "Task", flow=flow) for i in range(3)], now=T0)
    assert [job.jid for job in engine.pop("q1", "w1", 5, now=T0)] == ["j0"]
    keys = _all_keys(cluster)
    owners = "ql:{g}:lanner:flow:owners"
    flow_keys = [k for k in keys if "flow" in k or "parked" in k or "fair" in k]
    assert {"ql:{q:q1}:lanner:flow:slots:k", "ql:{q:q1}:lanner:flow:starts:b"} <= set(flow_keys)
    assert all(k.startswith("ql:{q:q1}:") for k in flow_keys if k != owners), flow_keys
    assert keys[owners].hgetall(owners) == {"c:k": "ql:{q:q1}", "r:b": "ql:{q:q1}"}
    for client in set(keys.values()):
        client.close()


def test_a_claim_is_seen_by_every_process_and_the_state_by_partition(
    cluster: RedisCluster, engine: RedisClusterEngine
) -> None:
    engine.put("q1", "a", "Task", flow=lanner.Flow("k", 1), now=T0)
    engine.put("q2", "b", "Task", flow=lanner.Flow("k2", 2), now=T0)
    engine.pop("q1", "w1", now=T0)
    engine.pop("q2", "w1", now=T0)
    with lanner.open_engine(cluster.url) as other:  # its own claims: none remembered
        with pytest.raises(lanner.Unsupported, match="concurrency key 'k' is enforced in"):
            other.put("q2", "c", "Task", flow=lanner.Flow("k", 1), now=T0)
        other.put("q1", "c", "Task", flow=lanner.Flow("k", 1), now=T0)
        state = other.flow_state(now=T0)
    assert [(k.key, k.running, k.cap, k.held) for k in state.keys] == [
        ("k", 1, 1, 0),
        ("k2", 1, 2, 0),
    ]


def test_the_flow_state_of_partitions_is_merged_by_name() -> None:
    from lanner.engines.redis.cluster import flow

    one = {"keys": [["k", 1, 2, 3]], "buckets": [["b", 5, 10.0, 2, 1, T0]]}
    two = {"keys": [["a", 0, 1, 1], ["k", 1, 2, 0]], "buckets": [["b", 5, 10.0, 3, 0, T0 + 4]]}
    merged = flow.state([json.dumps(one), json.dumps(two)])
    assert [(k.key, k.running, k.cap, k.held) for k in merged.keys] == [
        ("a", 0, 1, 1),
        ("k", 2, 2, 3),
    ]
    [bucket] = merged.buckets
    assert (bucket.bucket, bucket.recent, bucket.held, bucket.next_at) == ("b", 5, 1, T0 + 4)


def test_a_job_under_flow_is_not_sent_on_into_another_partition(
    engine: RedisClusterEngine,
) -> None:
    # Its key and bucket are held in its queue's partition: sent on, it would run unheld.
    engine.put("q1", "a", "Task", flow=lanner.Flow("k", 1), now=T0)
    engine.put("q1", "plain", "Task", now=T0)
    assert sorted(job.jid for job in engine.pop("q1", "w1", 2, now=T0)) == ["a", "plain"]
    with pytest.raises(lanner.Unsupported, match="cross-queue-flow"):
        engine.complete("a", "w1", "q1", next="q2", now=T0)
    job = engine.get("a", now=T0)
    assert job is not None
    assert (job.state, job.queue) == ("running", "q1")
    assert engine.complete("plain", "w1", "q1", next="q2", now=T0) == "waiting"
