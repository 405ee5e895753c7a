"""What the Redis engine adds to LIMITS and FANOUT: how it keeps a queue's usage.

The contract is checked by tests/conformance/test_limits.py and test_fanout.py. Here: the
counters never drift from a recount of the jobs, through every way a job enters or leaves a
queue; a refused put stores nothing; a batch plans its drops against the jobs it puts
itself; the keys and the `lanner.*` command other clients see.
"""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest
import redis

from lanner import (
    InvalidState,
    JobNotFound,
    LockLost,
    NewJob,
    PayloadTooLarge,
    QueueFull,
)
from lanner.engines.redis.engine import RedisEngine

from .support import T0, raw

LIVE = {"waiting", "scheduled", "depends", "running", "stalled"}
EXPECTED = (QueueFull, PayloadTooLarge, LockLost, InvalidState, JobNotFound)
"""What a random operation may run into; anything else (a script error) fails the test."""


def recount(client: redis.Redis) -> dict[str, tuple[int, int]]:
    """queue -> (items, bytes), counted from the job hashes themselves."""
    items: Counter[str] = Counter()
    size: Counter[str] = Counter()
    for key in client.scan_iter("ql:j:*"):
        if client.type(key) != "hash":  # the job's history, dependencies, dependents
            continue
        state, queue, data = (str(value) for value in client.hmget(key, "state", "queue", "data"))
        if state in LIVE:
            items[queue] += 1
            size[queue] += len(data.encode())
    return {queue: (items[queue], size[queue]) for queue in items}


def snapshot(client: redis.Redis) -> dict[str, str]:
    """Every key of the store and its content, to tell that nothing changed."""
    return {key: repr(client.dump(key)) for key in client.scan_iter("ql:*")}


def usage(engine: RedisEngine, queue: str, now: float = T0) -> tuple[int, int, int, int, int]:
    u = engine.queue_usage(queue, now=now)
    return u.items, u.bytes, u.total_items, u.expired, u.discarded


QUEUES = ("a", "b", "p", "p+x", "p+y", "free")


def configure(engine: RedisEngine) -> None:
    engine.config_set("a-max-items", 6)
    engine.config_set("a-discard-old-when-full", 1)
    engine.config_set("b-max-size", 90)
    engine.config_set("b-max-item-size", 30)
    engine.config_set("p+x-max-items", 3)
    engine.config_set("p+y-max-size", 40)
    engine.config_set("p+y-discard-old-when-full", 1)
    engine.config_set("free-max-age", 7)
    engine.config_set("grace-period", 1)
    engine.config_set("heartbeat", 5)
    engine.config_set("jobs-history-count", 5)


class RandomMix:
    """Random operations on the queues of `configure`, at a clock that moves on."""

    OPS = (
        *("put", "put", "put", "batch", "requeue", "pop", "pop", "pop", "settle", "settle"),
        *("cancel", "unfail", "timeout", "tick", "forget"),
    )
    PUTS = ("put", "batch", "requeue")

    def __init__(self, engine: RedisEngine, seed: int) -> None:
        self.engine, self.rnd, self.now = engine, random.Random(seed), T0

    def data(self) -> str:
        text = "x" * self.rnd.randrange(0, 20) + self.rnd.choice(["", "é", "€", "😀"])
        return json.dumps(text)

    def jid(self) -> str:
        return f"j{self.rnd.randrange(40)}"

    def new_job(self) -> NewJob:
        rnd = self.rnd
        return NewJob(
            rnd.choice(QUEUES),
            self.jid(),
            "Task",
            self.data(),
            delay=rnd.choice([0.0, 0.0, 0.0, 3.0]),
            priority=rnd.choice([None, 0, 5]),
            depends=[self.jid()] if rnd.random() < 0.1 else None,
            if_exists=rnd.choice(["move", "move", "keep", "move-unless-running"]),
            expires_at=rnd.choice([None, None, self.now + rnd.choice([-1.0, 2.0, 10.0])]),
        )

    def running(self) -> list[tuple[str, str, str]]:
        """(jid, queue, worker) of the running jobs."""
        found = []
        for queue in QUEUES:
            for jid in self.engine.jobs("running", queue, 0, 100, now=self.now):
                job = self.engine.get(jid, now=self.now)
                if job is not None:
                    found.append((jid, job.queue, job.worker))
        return found

    def put(self) -> None:
        job = self.new_job()
        self.engine.put(
            job.queue, job.jid, job.klass, job.data, delay=job.delay, priority=job.priority,
            depends=job.depends, if_exists=job.if_exists, expires_at=job.expires_at,
            now=self.now,
        )  # fmt: skip

    def batch(self) -> None:
        jobs = [self.new_job() for _ in range(self.rnd.randrange(1, 5))]
        self.engine.put_many(jobs, now=self.now)

    def requeue(self) -> None:
        job = self.new_job()
        self.engine.requeue(job.queue, job.jid, job.klass, job.data, now=self.now)

    def pop(self) -> None:
        rnd = self.rnd
        self.engine.pop(
            rnd.choice(QUEUES), f"w{rnd.randrange(2)}", rnd.randrange(1, 4), now=self.now
        )

    def settle(self) -> None:
        held = self.running()
        if not held:
            return
        engine, rnd, now = self.engine, self.rnd, self.now
        jid, queue, worker = rnd.choice(held)
        how = rnd.choice(["complete", "next", "many", "fail", "retry", "release", "tried"])
        if how == "complete":
            engine.complete(jid, worker, queue, now=now)
        elif how == "next":
            engine.complete(jid, worker, queue, next=rnd.choice(QUEUES), now=now)
        elif how == "many":
            engine.complete_many([jid], worker, queue, now=now)
        elif how == "fail":
            engine.fail(jid, worker, "boom", "it broke", now=now)
        elif how == "retry":
            engine.retry(jid, queue, worker, rnd.choice([0.0, 2.0]), now=now)
        else:
            delay = 0.0 if how == "tried" else rnd.choice([0.0, 2.0])
            engine.release([jid], worker, queue, delay=delay, spend_retry=how == "tried", now=now)

    def cancel(self) -> None:
        self.engine.cancel([self.jid()], now=self.now)

    def unfail(self) -> None:
        self.engine.unfail(self.rnd.choice(QUEUES), "boom", self.rnd.randrange(1, 3), now=self.now)

    def timeout(self) -> None:
        held = self.running()
        if held:
            self.engine.timeout([self.rnd.choice(held)[0]], now=self.now)

    def tick(self) -> None:
        self.now += self.rnd.choice([0.5, 3.0, 8.0])

    def forget(self) -> None:
        self.engine.queue_forget([self.rnd.choice(["p+x", "p+y"])], now=self.now)


# 250 random commands, each followed by a recount of every key: past the suite's 60 s
# default once, at a load average of 17 on two cores.
@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", range(6))
def test_usage_never_drifts_from_a_recount(engine: RedisEngine, redis_url: str, seed: int) -> None:
    """Random puts (moves, batches, copies, delays, dependencies, expiries, unicode data),
    pops, completions (some advancing), failures, retries, releases, cancels, unfails,
    timeouts, lapsed locks, recurring runs, forgotten children and retention: after each,
    every queue's items and bytes are those of its live jobs, and a refused put changed
    nothing."""
    configure(engine)
    mix = RandomMix(engine, seed)
    engine.recur("a", "tick", "Task", '{"r": "ü"}', 4.0, now=mix.now)
    with raw(redis_url) as client:
        for _ in range(250):
            op = mix.rnd.choice(RandomMix.OPS)
            before = snapshot(client) if op in RandomMix.PUTS else None
            try:
                getattr(mix, op)()
            except EXPECTED:
                if before is not None:
                    assert snapshot(client) == before, f"a refused {op} changed the store"
            counted = recount(client)
            for queue in QUEUES:
                assert usage(engine, queue, mix.now)[:2] == counted.get(queue, (0, 0)), op

        # The last way out: all of it cancelled, every queue holds nothing again.
        jobs = [key.removeprefix("ql:j:") for key in client.scan_iter("ql:j:*")]
        engine.cancel([jid for jid in jobs if client.type(f"ql:j:{jid}") == "hash"], now=mix.now)
        for queue in QUEUES:
            assert usage(engine, queue, mix.now)[:2] == (0, 0)


def test_a_heartbeat_with_new_data_does_not_change_the_count(engine: RedisEngine) -> None:
    # The queue gives back what the job brought in, whatever its data has become.
    engine.put("q", "j", "Task", '"abc"', now=T0)
    engine.pop("q", "w", now=T0)
    engine.heartbeat("j", "w", '"a much longer text than before"', now=T0 + 1)
    assert usage(engine, "q")[:2] == (1, 5)
    engine.complete("j", "w", "q", now=T0 + 2)
    assert usage(engine, "q")[:2] == (0, 0)


def test_an_advanced_job_counts_its_data_as_it_is_then(engine: RedisEngine) -> None:
    engine.put("a", "j", "Task", '"abc"', now=T0)
    engine.pop("a", "w", now=T0)
    engine.complete("j", "w", "a", '"abcdefgh"', next="b", now=T0)
    assert usage(engine, "a")[:3] == (0, 0, 1)
    assert usage(engine, "b")[:3] == (1, 10, 1)


def test_a_batch_drops_the_jobs_it_put_itself_when_it_must(engine: RedisEngine) -> None:
    engine.config_set("q-max-items", 2)
    engine.config_set("q-discard-old-when-full", 1)
    engine.put("q", "old", "Task", now=T0)
    engine.put_many([NewJob("q", f"j{n}", "Task") for n in range(5)], now=T0)
    assert [job.jid for job in engine.pop("q", "w", 10, now=T0)] == ["j3", "j4"]
    assert usage(engine, "q") == (2, 4, 6, 0, 4)


def test_a_job_the_batch_put_and_dropped_holds_nothing_back(engine: RedisEngine) -> None:
    engine.config_set("q-max-items", 1)
    engine.config_set("q-discard-old-when-full", 1)
    engine.put_many(
        [
            NewJob("q", "dropped", "Task"),
            NewJob("q", "kept", "Task"),  # drops "dropped" to make room
            NewJob("other", "cb", "Task", depends=["dropped", "kept"]),
        ],
        now=T0,
    )
    callback = engine.get("cb", now=T0)
    assert callback is not None
    assert callback.dependencies == ("kept",)


def test_a_batch_that_moves_a_job_out_frees_its_room_first(engine: RedisEngine) -> None:
    engine.config_set("q-max-items", 1)
    engine.put("q", "j1", "Task", now=T0)
    # j1 leaves q for r before j2 comes in: the batch fits.
    engine.put_many([NewJob("r", "j1", "Task"), NewJob("q", "j2", "Task")], now=T0)
    assert engine.jobs("waiting", "q", now=T0) == ["j2"]
    with pytest.raises(QueueFull, match="max-items"):
        engine.put_many([NewJob("q", "j3", "Task"), NewJob("q", "j2", "Task")], now=T0)


def test_a_batch_refused_after_planning_a_drop_drops_nothing(
    engine: RedisEngine, redis_url: str
) -> None:
    engine.config_set("q-max-items", 2)
    engine.config_set("q-discard-old-when-full", 1)
    engine.put("q", "later", "Task", delay=10, now=T0)
    engine.put("q", "w0", "Task", now=T0)
    with raw(redis_url) as client:
        before = snapshot(client)
        # d1 makes room by dropping w0; then only delayed jobs are left, which a full
        # queue never drops: w1 is refused, and with it the batch, w0's drop included.
        batch = [NewJob("q", "d1", "Task", delay=10), NewJob("q", "w1", "Task")]
        with pytest.raises(QueueFull, match="'q' is at its max-items"):
            engine.put_many(batch, now=T0)
        assert snapshot(client) == before


def test_a_pop_drops_expired_jobs_in_bounded_steps(engine: RedisEngine) -> None:
    engine.put_many(
        [NewJob("q", f"old{n}", "Task", expires_at=T0 + 1) for n in range(1100)], now=T0
    )
    engine.put("q", "live", "Task", now=T0)
    # The first pop drops 1000 and stops there; the token it leaves sends a worker
    # back for the rest.
    assert engine.pop("q", "w", now=T0 + 2) == []
    assert engine.length("q", now=T0 + 2) == 101
    assert [job.jid for job in engine.pop("q", "w", now=T0 + 2)] == ["live"]
    assert usage(engine, "q", T0 + 2) == (1, 2, 1101, 1100, 0)


def test_a_blocked_pop_is_not_handed_an_expired_job(engine: RedisEngine) -> None:
    engine.put("q", "old", "Task", expires_at=T0 - 1, now=T0)
    engine.put("q", "new", "Task", now=T0)
    assert [job.jid for job in engine.pop("q", "w", 5, wait=0.1)] == ["new"]


def test_jobs_that_depended_on_an_expired_job_go_on(engine: RedisEngine) -> None:
    engine.put("q", "first", "Task", expires_at=T0 + 1, now=T0)
    engine.put("q", "second", "Task", depends=["first"], now=T0)
    assert [job.jid for job in engine.pop("q", "w", 5, now=T0 + 2)] == ["second"]


def test_a_lapsed_lock_is_not_subject_to_expiry(engine: RedisEngine) -> None:
    engine.config_set("grace-period", 0)
    engine.put("q", "j", "Task", expires_at=T0 + 5, now=T0)
    engine.pop("q", "w1", now=T0)
    assert [job.jid for job in engine.pop("q", "w2", now=T0 + 61)] == ["j"]


def test_a_timed_out_job_is_not_subject_to_expiry(engine: RedisEngine) -> None:
    engine.put("q", "j", "Task", expires_at=T0 + 5, now=T0)
    engine.pop("q", "w1", now=T0)
    engine.timeout(["j"], now=T0 + 1)
    assert [job.jid for job in engine.pop("q", "w2", now=T0 + 10)] == ["j"]


def test_a_copy_is_put_with_its_childs_max_age(engine: RedisEngine, redis_url: str) -> None:
    engine.pop("q+c", "w", now=T0)
    engine.config_set("q+c-max-age", 5)
    engine.put("q", "j", "Task", expires_at=T0 + 100, now=T0)
    with raw(redis_url) as client:
        assert client.hget("ql:j:j", "lanner_expires_at") == "1100"
        assert client.hget("ql:j:j+c", "lanner_expires_at") == "1005"


def test_a_copy_too_large_for_its_child_is_discarded(engine: RedisEngine) -> None:
    engine.pop("q+c", "w", now=T0)
    engine.config_set("q+c-max-item-size", 3)
    engine.put("q", "j", "Task", '"abcd"', now=T0)
    assert usage(engine, "q+c") == (0, 0, 0, 0, 1)
    assert usage(engine, "q")[:3] == (1, 6, 1)


def test_no_copy_when_the_put_keeps_its_job(engine: RedisEngine) -> None:
    engine.put("q", "j", "Task", now=T0)
    engine.pop("q+c", "w", now=T0)
    engine.put("q", "j", "Task", if_exists="keep", now=T0)
    assert engine.jobs("waiting", "q+c", now=T0) == []


def test_a_running_copy_is_left_alone_by_move_unless_running(engine: RedisEngine) -> None:
    engine.pop("q+c", "w", now=T0)
    engine.put("q", "j", "Task", now=T0)
    engine.pop("q+c", "w", now=T0)
    engine.put("q", "j", "Task", '"new"', if_exists="move-unless-running", now=T0)
    copy = engine.get("j+c", now=T0)
    assert copy is not None
    assert (copy.state, copy.data) == ("running", "{}")


# -- what other clients see ---------------------------------------------------------------


def test_the_keys(engine: RedisEngine, redis_url: str) -> None:
    engine.pop("p+c", "w", now=T0)
    engine.put("p", "j", "Task", '"ü"', expires_at=T0 + 9, now=T0)
    with raw(redis_url) as client:
        assert client.smembers("ql:lanner:children:p") == {"c"}
        assert client.hgetall("ql:lanner:usage:p") == {
            "bytes": "4",
            "total": "1",
            "children": "1",
            "listed": "1",
            "seq": "1",
        }
        assert client.hgetall("ql:lanner:usage:p+c") == {
            "bytes": "4",
            "total": "1",
            "listed": "1",
            "seq": "1",
        }
        # The copy counts its data's length (stored without lanner_size: job.lua, Job.size).
        assert client.hmget("ql:j:j+c", "lanner_size", "lanner_expires_at") == [None, "1009"]
    engine.queue_forget(["p+c"], now=T0)
    with raw(redis_url) as client:
        assert not client.exists("ql:lanner:children:p")
        assert client.hget("ql:lanner:usage:p", "children") == "0"


def test_other_clients_use_the_same_commands(engine: RedisEngine, redis_url: str) -> None:
    with raw(redis_url) as client:
        name = engine._lua._name

        def call(*args: object) -> object:
            return client.fcall(name, 0, *args)

        call("config.set", T0, "q-max-items", 1)
        assert call("put", T0, "", "q", "j1", "Task", "{}", 0, "expires_at", T0 + 5) == "j1"
        with pytest.raises(redis.ResponseError, match=r"^Queue full: 'q' is at its max-items"):
            call("put", T0, "", "q", "j2", "Task", "{}", 0)
        assert call("lanner.usage", T0, "q") == [1, 2, 1, 0, 0]


def test_a_put_refused_for_its_running_job_drops_nothing(
    engine: RedisEngine, redis_url: str
) -> None:
    engine.config_set("q-max-items", 2)
    engine.config_set("q-discard-old-when-full", 1)
    engine.put("q", "old", "Task", now=T0)
    engine.put("r", "busy", "Task", now=T0)
    engine.pop("r", "w", now=T0)
    engine.put("q", "other", "Task", now=T0)
    with raw(redis_url) as client:
        before = snapshot(client)
        with pytest.raises(InvalidState, match="is running"):
            engine.put("q", "busy", "Task", if_exists="move-unless-running", now=T0)
        assert snapshot(client) == before
