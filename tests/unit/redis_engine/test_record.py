"""The job record in Redis: what a new job stores (no field at its default nor one it can be
told from: its byte count is its data's length, and its history, a lone put entry, is
implied by its ready time, or short in its hash, until the next entry), and jobs stored
by an older script, read and carried on as they are.

A process of an older lanner may share the store during an upgrade: it reads every field
this version leaves out at its default, and adds history entries to the list
ql:j:<jid>-history. Records written as that version wrote them are checked here (the
layout is in lua/layout.lua).
"""

from __future__ import annotations

import json

from lanner import NewJob
from lanner.engines.redis.engine import RedisEngine

from .support import T0, raw

LEAN_FIELDS = {
    "klass", "data", "queue", "retries", "remaining", "state", "time", "lanner_seq",
}  # fmt: skip


def test_a_new_job_stores_no_default_and_its_history_is_implied(
    engine: RedisEngine, redis_url: str
) -> None:
    engine.put("q", "j1", "Task", '{"a":1}', now=T0)
    with raw(redis_url) as client:
        assert set(client.hkeys("ql:j:j1")) == LEAN_FIELDS
        assert client.exists("ql:j:j1-history") == 0
        # Small fields, few of them: Redis keeps the hash in its compact encoding.
        assert client.object("encoding", "ql:j:j1") == "listpack"
        # Its bytes are counted all the same: its data's length.
        assert client.hget("ql:lanner:usage:q", "bytes") == "7"
    job = engine.get("j1", now=T0)
    assert job is not None
    assert (job.priority, job.tags, job.worker, job.expires) == (0, (), "", 0)
    # Its lone put entry, implied: when it became ready, in its queue.
    assert [(e.what, e.when, dict(e.details)) for e in job.history] == [("put", T0, {"q": "q"})]


def test_a_popped_job_keeps_its_implied_put_entry_first(
    engine: RedisEngine, redis_url: str
) -> None:
    engine.put("q", "j1", "Task", now=T0 + 0.123456789)
    [popped] = engine.pop("q", "w", 1, now=T0 + 5)
    expected = [("put", T0 + 0.1235, {"q": "q"}), ("popped", T0 + 5, {"worker": "w"})]
    assert [(e.what, round(e.when, 4), dict(e.details)) for e in popped.history] == expected
    job = engine.get("j1", now=T0 + 5)
    assert job is not None
    assert [(e.what, round(e.when, 4), dict(e.details)) for e in job.history] == expected
    with raw(redis_url) as client:
        assert client.llen("ql:j:j1-history") == 2
        assert client.hget("ql:j:j1", "history") == ""  # stored by the lock's HMSET


def test_a_delayed_job_keeps_its_put_entry_short_in_its_hash(
    engine: RedisEngine, redis_url: str
) -> None:
    engine.put("q", "j1", "Task", delay=10, now=T0)
    with raw(redis_url) as client:
        # Its time changes when it comes due: the entry cannot be implied by it.
        assert client.hget("ql:j:j1", "history") == "p1000"
    [popped] = engine.pop("q", "w", 1, now=T0 + 20)
    assert [(e.what, e.when) for e in popped.history] == [("put", T0), ("popped", T0 + 20)]


def test_a_job_given_values_stores_them(engine: RedisEngine, redis_url: str) -> None:
    engine.put("q", "j1", "Task", priority=3, tags=["t"], now=T0)
    with raw(redis_url) as client:
        assert client.hmget("ql:j:j1", "priority", "tags") == ["3", '["t"]']
    job = engine.get("j1", now=T0)
    assert job is not None
    assert (job.priority, job.tags) == (3, ("t",))


def test_the_next_entry_moves_the_put_entry_into_the_list(
    engine: RedisEngine, redis_url: str
) -> None:
    engine.config_set("max-job-history", 3, now=T0)
    engine.put("q", "j1", "Task", now=T0)
    for step in range(5):
        engine.log("j1", f"step-{step}", now=T0 + step + 1)
    job = engine.get("j1", now=T0)
    assert job is not None
    assert [e.what for e in job.history] == ["put", "step-3", "step-4"]
    with raw(redis_url) as client:
        assert client.hget("ql:j:j1", "history") == ""  # the mark: all in the list
        assert client.llen("ql:j:j1-history") == 3


def store_as_older_script(redis_url: str, jid: str, queue: str) -> None:
    """A waiting job as lanner wrote it before the lean record: every field, a list."""
    with raw(redis_url) as client:
        client.hset(f"ql:j:{jid}", mapping={
            "jid": jid, "lanner_size": 2, "klass": "Task", "data": "{}", "priority": 0,
            "tags": "[]", "queue": queue, "worker": "", "expires": 0, "retries": 5,
            "remaining": 5, "state": "waiting", "time": T0, "lanner_seq": 1,
        })  # fmt: skip
        client.rpush(f"ql:j:{jid}-history", json.dumps({"q": queue, "what": "put", "when": T0}))
        client.zadd(f"ql:q:{queue}-work", {jid: -T0 / 1e10})
        client.zadd("ql:queues", {queue: T0})
        client.hset(f"ql:lanner:usage:{queue}", mapping={"bytes": 2, "total": 1})


def test_a_job_stored_by_an_older_script_is_read_and_carried_on(
    engine: RedisEngine, redis_url: str
) -> None:
    store_as_older_script(redis_url, "old", "q")
    job = engine.get("old", now=T0)
    assert job is not None
    assert [e.what for e in job.history] == ["put"]
    [popped] = engine.pop("q", "w", 1, now=T0 + 1)
    assert popped.jid == "old"
    assert [e.what for e in popped.history] == ["put", "popped"]
    with raw(redis_url) as client:
        assert client.llen("ql:j:old-history") == 2
    engine.complete("old", "w", "q", now=T0 + 2)
    done = engine.get("old", now=T0 + 2)
    assert done is not None
    assert [e.what for e in done.history] == ["put", "popped", "done"]


def test_entries_an_older_script_adds_come_after_the_put_entry(
    engine: RedisEngine, redis_url: str
) -> None:
    engine.put("q", "j1", "Task", delay=10, now=T0)
    with raw(redis_url) as client:  # an older process logging to the list it knows
        client.rpush("ql:j:j1-history", json.dumps({"what": "older", "when": T0 + 1}))
    job = engine.get("j1", now=T0)
    assert job is not None
    # The put entry, still in the hash, shows again with the next entry written here.
    assert [e.what for e in job.history] == ["older"]
    engine.log("j1", "newer", now=T0 + 2)
    job = engine.get("j1", now=T0)
    assert job is not None
    assert [e.what for e in job.history] == ["put", "older", "newer"]
    with raw(redis_url) as client:
        assert client.hget("ql:j:j1", "history") == ""  # the mark: all in the list
        assert client.llen("ql:j:j1-history") == 3


def test_a_moved_job_loses_the_values_it_had(engine: RedisEngine) -> None:
    engine.put("q", "j1", "Task", priority=5, tags=["a"], now=T0)
    engine.pop("q", "w", 1, now=T0)
    engine.put("r", "j1", "Task", priority=0, tags=[], now=T0 + 1)
    job = engine.get("j1", now=T0 + 1)
    assert job is not None
    assert (job.queue, job.priority, job.tags, job.worker, job.state) == ("r", 0, (), "", "waiting")
    assert [e.what for e in job.history] == ["put", "popped", "put"]


def test_a_waiting_job_moved_keeps_its_first_entry_in_full(engine: RedisEngine) -> None:
    engine.put("q", "j1", "Task", now=T0)
    engine.put("r", "j1", "Task", now=T0 + 1)
    job = engine.get("j1", now=T0 + 1)
    assert job is not None
    assert [(e.what, e.when, dict(e.details)) for e in job.history] == [
        ("put", T0, {"q": "q"}),
        ("put", T0 + 1, {"q": "r"}),
    ]


def test_a_list_begun_without_the_mark_gets_no_second_put_entry(
    engine: RedisEngine, redis_url: str
) -> None:
    # A job of the lanner before the mark: its field deleted once its list began.
    engine.put("q", "j1", "Task", delay=5, now=T0)
    engine.log("j1", "logged", now=T0 + 1)
    with raw(redis_url) as client:
        client.hdel("ql:j:j1", "history")
    [popped] = engine.pop("q", "w", 1, now=T0 + 6)
    assert [e.what for e in popped.history] == ["put", "logged", "popped"]
    with raw(redis_url) as client:
        assert client.llen("ql:j:j1-history") == 3
        assert client.hget("ql:j:j1", "history") == ""
    engine.retry("j1", "q", "w", now=T0 + 7)
    [popped] = engine.pop("q", "w", 1, now=T0 + 8)
    assert [e.what for e in popped.history] == ["put", "logged", "popped", "retried", "popped"]


def test_an_implied_put_entry_is_lost_to_an_older_script_s_first_entry(
    engine: RedisEngine, redis_url: str
) -> None:
    # An older process writing the first entry of a list (an upgrade's overlap) does not
    # know the put entry is implied: the history goes on without it.
    engine.put("q", "j1", "Task", now=T0)
    with raw(redis_url) as client:
        client.rpush("ql:j:j1-history", json.dumps({"what": "older", "when": T0 + 1}))
    engine.log("j1", "newer", now=T0 + 2)
    job = engine.get("j1", now=T0)
    assert job is not None
    assert [e.what for e in job.history] == ["older", "newer"]


# -- the bytes a queue counts ------------------------------------------------------------


def bytes_of(redis_url: str, queue: str) -> int:
    with raw(redis_url) as client:
        return int(client.hget(f"ql:lanner:usage:{queue}", "bytes") or 0)


def test_a_job_stored_without_its_size_gives_back_its_data_s_length(
    engine: RedisEngine, redis_url: str
) -> None:
    for jid in ("done", "failed", "cancelled", "moved", "renewed"):
        engine.put("q", jid, "Task", '{"a":12}', now=T0)
    assert bytes_of(redis_url, "q") == 5 * 8
    engine.cancel(["cancelled"], now=T0)
    engine.put("r", "moved", "Task", '{"b":1}', now=T0)
    assert (bytes_of(redis_url, "q"), bytes_of(redis_url, "r")) == (3 * 8, 7)
    popped = {job.jid for job in engine.pop("q", "w", 3, now=T0 + 1)}
    assert popped == {"done", "failed", "renewed"}
    engine.complete("done", "w", "q", now=T0 + 2)
    engine.fail("failed", "w", "g", "why", '{"bigger":"data"}', now=T0 + 2)
    assert bytes_of(redis_url, "q") == 8
    # A heartbeat changing the data keeps the count its job came in with.
    engine.heartbeat("renewed", "w", '{"a":123456}', now=T0 + 2)
    with raw(redis_url) as client:
        assert client.hget("ql:j:renewed", "lanner_size") == "8"
    engine.complete("renewed", "w", "q", now=T0 + 3)
    assert bytes_of(redis_url, "q") == 0


def test_a_popped_job_stores_its_size_for_its_completion(
    engine: RedisEngine, redis_url: str
) -> None:
    engine.put_many([NewJob("q", jid, "Task", '{"a":1}') for jid in ("a", "b")], now=T0)
    engine.pop("q", "w", 2, now=T0 + 1)
    with raw(redis_url) as client:
        assert client.hget("ql:j:a", "lanner_size") == "7"
        client.hdel("ql:j:b", "lanner_size")  # as an older process pops it
    assert engine.complete_many(["a", "b"], "w", "q", now=T0 + 2) == ["a", "b"]
    assert bytes_of(redis_url, "q") == 0


def test_a_job_of_an_older_script_without_a_size_counts_none(
    engine: RedisEngine, redis_url: str
) -> None:
    store_as_older_script(redis_url, "old", "q")
    with raw(redis_url) as client:  # as qless, or lanner before byte counts, stored it
        client.hdel("ql:j:old", "lanner_size")
        client.hset("ql:lanner:usage:q", "bytes", 0)
    engine.put("q", "new", "Task", '{"a":1}', now=T0)
    engine.cancel(["old"], now=T0)
    assert bytes_of(redis_url, "q") == 7


def test_a_job_of_an_older_script_popped_in_a_batch_and_completed_in_one_counts_none(
    engine: RedisEngine, redis_url: str
) -> None:
    # pop's and complete_many's own loaders (not Job.load) must tell the older record too.
    store_as_older_script(redis_url, "old", "q")
    with raw(redis_url) as client:
        client.hdel("ql:j:old", "lanner_size")
        client.hset("ql:lanner:usage:q", "bytes", 0)
    engine.put("q", "new", "Task", '{"a":1}', now=T0)
    popped = engine.pop("q", "w", 2, now=T0 + 1)
    assert {job.jid: [e.what for e in job.history] for job in popped} == {
        "old": ["put", "popped"], "new": ["put", "popped"],
    }  # fmt: skip
    with raw(redis_url) as client:
        assert client.hmget("ql:j:old", "lanner_size", "history") == [None, None]
        assert client.hmget("ql:j:new", "lanner_size", "history") == ["7", ""]
    assert engine.complete_many(["old", "new"], "w", "q", now=T0 + 2) == ["old", "new"]
    assert bytes_of(redis_url, "q") == 0
    done = engine.get("old", now=T0 + 2)
    assert done is not None
    assert [e.what for e in done.history] == ["put", "popped", "done"]


# -- the order of jobs ready at the same moment -------------------------------------------


def test_each_queue_counts_its_sequence_numbers_after_the_store_s_one_counter(
    engine: RedisEngine, redis_url: str
) -> None:
    store_as_older_script(redis_url, "old", "q")  # lanner_seq 1 ...
    with raw(redis_url) as client:
        client.set("ql:lanner:seq", 1)  # ... from the counter older versions shared
    engine.put_many([NewJob("q", "a", "Task"), NewJob("r", "x", "Task")], now=T0)
    engine.put("q", "b", "Task", now=T0)
    with raw(redis_url) as client:
        assert [client.hget(f"ql:j:{jid}", "lanner_seq") for jid in ("a", "b", "x")] == [
            "2", "3", "2",
        ]  # fmt: skip
        assert client.hget("ql:lanner:usage:q", "seq") == "3"
        assert client.get("ql:lanner:seq") == "1"  # no command of a put's any more
    # Ready at the same moment as the older job: behind it, in put order.
    assert [job.jid for job in engine.pop("q", "w", 3, now=T0)] == ["old", "a", "b"]
