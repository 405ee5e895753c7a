"""A single put's steps in the Redis core: what it no longer reads, and what still holds.

A put into a queue it knows reads neither the last waiting job's hash (its score says it
goes ahead) nor ql:queues (the queue's usage hash says it is listed), and a wake-up list
nobody empties is trimmed once in a while, not at every put. Here: the commands a put
makes, and the cases those shortcuts must leave alone (fractional priorities, a forgotten
queue, the list's bound). And a pop or completion sets the expiry of the day's timing hash
only when it makes the hash; a pop's reply gives the history it just wrote without reading
it back, and a completion loads the job's short history with the job.
"""

from __future__ import annotations

import json

import pytest

from lanner import NewJob
from lanner.engines.redis.engine import RedisEngine
from lanner.engines.redis.script import build_script

from .support import T0, raw


def calls(redis_url: str) -> dict[str, int]:
    """Commands run by the server since its statistics were reset, by name."""
    with raw(redis_url) as client:
        stats = client.info("commandstats")
    return {key.removeprefix("cmdstat_"): int(value["calls"]) for key, value in stats.items()}


def test_a_put_into_a_known_queue_reads_no_job_hash_nor_the_queue_list(
    engine: RedisEngine, redis_url: str
) -> None:
    engine.put("q", "a", "Task", now=T0)
    engine.put("q", "b", "Task", now=T0 + 1)
    with raw(redis_url) as client:
        client.config_resetstat()
    engine.put_many([NewJob("q", "c", "Task")], now=T0 + 2)  # as `.delay()` does
    made = calls(redis_url)
    assert made.get("hmget") == 1  # the queue's usage; not the last job's order
    assert "zscore" not in made  # ql:queues
    assert "ltrim" not in made
    assert [job.jid for job in engine.pop("q", "w", 3, now=T0 + 3)] == ["a", "b", "c"]


def test_equal_scores_still_read_the_order(engine: RedisEngine) -> None:
    for jid in ["c", "a", "b"]:
        engine.put("q", jid, "Task", priority=3, now=T0)
    assert [job.jid for job in engine.pop("q", "w", 3, now=T0)] == ["c", "a", "b"]


def test_fractional_priorities_are_placed_by_their_order(
    engine: RedisEngine, redis_url: str
) -> None:
    # A qless client may give any number. A job of priority -0.01 ready at 1000 has the
    # higher qless score of the two (-0.01 - 1e-7 > 0 - 0.02), yet pops second.
    with raw(redis_url) as client:
        sha = client.script_load(build_script())
        low = ("low", "Task", "{}", "0", "priority", "-0.01")
        client.evalsha(sha, 0, "put", "1000", "", "q", *low)
        late = str(1000 + 2e8)
        client.evalsha(sha, 0, "put", late, "", "q", "high", "Task", "{}", "0")
        assert client.hget("ql:lanner:usage:q", "fractional") == "1"
        popped = client.evalsha(sha, 0, "pop", late, "q", "w", "2")
    assert [job["jid"] for job in json.loads(popped)] == ["high", "low"]


def test_a_forgotten_queue_is_listed_again_by_its_next_put(
    engine: RedisEngine, redis_url: str
) -> None:
    engine.put("q", "a", "Task", now=T0)
    engine.queue_forget(["q"], now=T0)
    with raw(redis_url) as client:
        assert client.zscore("ql:queues", "q") is None
        assert client.hget("ql:lanner:usage:q", "listed") is None
    engine.put("q", "b", "Task", now=T0 + 5)
    with raw(redis_url) as client:
        assert client.zscore("ql:queues", "q") == T0 + 5
        assert client.hget("ql:lanner:usage:q", "listed") == "1"


def test_a_put_looks_for_waiting_workers_only_while_one_may_wait(
    engine: RedisEngine, redis_url: str
) -> None:
    def put_counting(jid: str, now: float) -> dict[str, int]:
        with raw(redis_url) as client:
            client.config_resetstat()
        engine.put_many([NewJob("q", jid, "Task")], now=now)
        return calls(redis_url)

    assert "zrangebyscore" not in put_counting("a", T0)  # nobody ever waited
    assert [job.jid for job in engine.pop("q", "w1", 1, now=T0)] == ["a"]
    reply = engine._call("lanner.pop_wait", T0, "q", "w1", 1, 10)  # waits till T0 + 10
    assert reply[0] == "[]"
    with raw(redis_url) as client:
        assert float(client.hget("ql:lanner:usage:q", "waiting")) == T0 + 10
    assert put_counting("b", T0 + 10)["zrangebyscore"] >= 1  # (the hand-off's pop's too)
    b = engine.get("b", now=T0 + 10)
    assert b is not None
    assert (b.state, b.worker) == ("running", "w1")  # handed off
    engine._call("lanner.pop_wait", T0 + 10, "q", "w2", 1, 5)  # an earlier end: kept
    with raw(redis_url) as client:
        assert float(client.hget("ql:lanner:usage:q", "waiting")) == T0 + 15
    assert "zrangebyscore" not in put_counting("c", T0 + 15.5)  # w2's wait is over
    assert "zrangebyscore" not in put_counting("d", T0 + 16)
    assert engine.jobs("waiting", "q", now=T0 + 16) == ["c", "d"]
    with raw(redis_url) as client:
        assert client.llen("ql:lanner:notify:q") == 2  # the tokens wake whoever blocks


def test_the_wake_up_list_stays_bounded(engine: RedisEngine, redis_url: str) -> None:
    lengths = []
    with raw(redis_url) as client:
        for n in range(1100):
            engine.put("q", f"j{n}", "Task", now=T0)
            lengths.append(client.llen("ql:lanner:notify:q"))
    assert max(lengths) == 512
    assert min(lengths[256:]) == 256


def test_the_day_s_timings_expire_once_set(engine: RedisEngine, redis_url: str) -> None:
    engine.put_many([NewJob("q", jid, "Task") for jid in ("a", "b")], now=T0)
    with raw(redis_url) as client:
        client.config_resetstat()
        engine.pop("q", "w", 1, now=T0 + 1)
        engine.complete("a", "w", "q", now=T0 + 2)
        assert calls(redis_url).get("expire") == 2  # the wait and run hashes, made
        ttl = client.ttl("ql:s:wait:0:q")
        assert 0 < ttl <= 31 * 86400 - 1
        client.config_resetstat()
        engine.pop("q", "w", 1, now=T0 + 3)
        engine.complete("b", "w", "q", now=T0 + 4)
        assert "expire" not in calls(redis_url)
        assert 0 < client.ttl("ql:s:run:0:q") <= 31 * 86400 - 2
    stats = engine.stats("q", T0, now=T0 + 5)
    assert (stats.wait.count, stats.run.count) == (2, 2)


@pytest.mark.parametrize("limit", [None, 1, 2])
def test_a_pop_replies_the_history_as_stored(
    engine: RedisEngine, redis_url: str, limit: int | None
) -> None:
    if limit is not None:
        engine.config_set("max-job-history", limit, now=T0)
    engine.put("q", "a", "Task", now=T0)
    for turn in range(3):  # popped new, then with a list of its own
        with raw(redis_url) as client:
            client.config_resetstat()
        [popped] = engine.pop("q", "w", 1, now=T0 + 1 + turn)
        if turn == 0 and limit is None:
            assert calls(redis_url)["lrange"] == 1  # the worker's hand-offs; not the history
        stored = engine.get("a", now=T0 + 1 + turn)
        assert stored is not None
        assert popped.history == stored.history
        assert len(stored.history) == min(limit or 100, 2 + 2 * turn)
        engine.retry("a", "q", "w", now=T0 + 1 + turn)


@pytest.mark.parametrize("delay", [0, 5])
def test_a_pop_writes_a_new_job_s_history_in_one_command(
    engine: RedisEngine, redis_url: str, delay: int
) -> None:
    engine.put("q", "a", "Task", delay=delay, now=T0)  # implied put entry, or short
    with raw(redis_url) as client:
        client.config_resetstat()
    [popped] = engine.pop("q", "w", 1, now=T0 + 10)
    made = calls(redis_url)
    assert made["rpush"] == 1
    assert "lpush" not in made
    assert "hdel" not in made
    assert [(e.what, e.when) for e in popped.history] == [("put", T0), ("popped", T0 + 10)]


def test_a_completion_reads_no_history_field_of_its_own(
    engine: RedisEngine, redis_url: str
) -> None:
    engine.put("q", "a", "Task", now=T0)
    engine.pop("q", "w", 1, now=T0 + 1)
    with raw(redis_url) as client:
        client.config_resetstat()
        engine.complete("a", "w", "q", now=T0 + 2)
        assert calls(redis_url)["hmget"] == 2  # the job; the day's run timings
    job = engine.get("a", now=T0 + 3)
    assert job is not None
    assert [event.what for event in job.history] == ["put", "popped", "done"]
