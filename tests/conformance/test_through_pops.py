"""The core promises, checked through pops and counts alone, so that every engine runs them.

Most of this suite reads jobs back with `get` (capability LOOKUP). An engine that cannot
look a job up (SQS) still keeps these promises, and here they are checked the way its
users see them: what a pop gives, what the counts say, and which commands are refused.
"""

from __future__ import annotations

import pytest

from lanner import DEFAULT_RETRIES, Engine, LockLost, MalformedArgument, NewJob

from .helpers import T0, jids, running


def drained(engine: Engine, queue: str) -> bool:
    counts = engine.queue_counts(queue, now=T0)
    return (counts.waiting, counts.running, counts.scheduled) == (0, 0, 0)


def test_a_popped_job_is_the_job_put(engine: Engine) -> None:
    data = '{"z": [1, 2.5, "ü"], "a": null}'
    engine.put("q", "j1", "app.Task", data, retries=2, now=T0)
    [job] = engine.pop("q", "w1", now=T0 + 1)
    assert (job.jid, job.klass, job.queue, job.data) == ("j1", "app.Task", "q", data)
    assert (job.retries, job.remaining, job.priority, job.tags) == (2, 2, 0, ())
    assert (job.state, job.worker) == ("running", "w1")
    assert [event.what for event in job.history] == ["put", "popped"]


def test_a_new_job_has_the_default_retries(engine: Engine) -> None:
    engine.put("q", "j1", "Task", now=T0)
    [job] = engine.pop("q", "w1", now=T0)
    assert (job.retries, job.remaining) == (DEFAULT_RETRIES, DEFAULT_RETRIES)
    assert job.decoded_data() == {}


def test_put_many_stores_every_job(engine: Engine) -> None:
    engine.put_many([NewJob("q", f"j{i}", "Task", f'{{"i": {i}}}') for i in range(5)], now=T0)
    popped = engine.pop("q", "w1", 10, now=T0)
    assert sorted(job.decoded_data()["i"] for job in popped) == list(range(5))


@pytest.mark.parametrize("bad", ["json", "big"])
def test_put_many_with_one_bad_job_sends_nothing(engine: Engine, bad: str) -> None:
    data = "{not json" if bad == "json" else '"' + "x" * engine.max_data_bytes + '"'
    batch = [NewJob("q", "good1", "Task"), NewJob("q", "bad", "Task", data)]
    with pytest.raises(MalformedArgument):
        engine.put_many(batch, now=T0)
    assert engine.pop("q", "w1", 10, now=T0) == []
    assert drained(engine, "q")


def test_a_pop_of_an_unknown_queue_gives_nothing(engine: Engine) -> None:
    assert engine.pop("nothing-here", "w1", 5, now=T0) == []
    assert drained(engine, "nothing-here")


def test_a_popped_job_is_given_to_no_one_else(engine: Engine) -> None:
    running(engine, "j1")
    assert engine.pop("q", "w2", now=T0 + 1) == []
    assert engine.queue_counts("q", now=T0 + 1).running == 1


def test_a_completed_job_leaves_its_queue(engine: Engine) -> None:
    running(engine, "j1")
    assert engine.complete("j1", "w1", "q", now=T0 + 1) == "complete"
    assert drained(engine, "q")
    with pytest.raises(LockLost):
        engine.complete("j1", "w1", "q", now=T0 + 2)


def test_only_the_worker_holding_a_job_settles_it_in_its_queue(engine: Engine) -> None:
    running(engine, "j1")
    with pytest.raises(LockLost):
        engine.complete("j1", "w2", "q", now=T0 + 1)
    with pytest.raises(LockLost):
        engine.complete("j1", "w1", "other", now=T0 + 1)
    with pytest.raises(LockLost):
        engine.heartbeat("j1", "w2", now=T0 + 1)
    with pytest.raises(LockLost):
        engine.retry("j1", "q", "w2", now=T0 + 1)
    with pytest.raises(LockLost):
        engine.fail("j1", "w2", "boom", "m", now=T0 + 1)
    assert engine.complete("j1", "w1", "q", now=T0 + 1) == "complete"


def test_complete_many_completes_what_the_worker_holds_and_skips_the_rest(
    engine: Engine,
) -> None:
    engine.put_many([NewJob("q", f"j{i}", "Task") for i in range(3)], now=T0)
    held = jids(engine.pop("q", "w1", 2, now=T0))
    [other] = jids(engine.pop("q", "w2", now=T0))
    done = engine.complete_many([*held, other, "unknown"], "w1", "q", now=T0 + 1)
    assert sorted(done) == sorted(held)
    assert engine.queue_counts("q", now=T0 + 1).running == 1


def test_advancing_a_job_puts_it_into_the_next_queue_with_its_budget_reset(
    engine: Engine,
) -> None:
    running(engine, "j1", retries=2)
    engine.retry("j1", "q", "w1", now=T0)
    [job] = engine.pop("q", "w1", now=T0 + 1)
    assert job.remaining == 1
    assert engine.complete("j1", "w1", "q", '{"step": 2}', next="q2", now=T0 + 1) == "waiting"
    assert drained(engine, "q")
    [advanced] = engine.pop("q2", "w2", now=T0 + 2)
    assert (advanced.jid, advanced.data, advanced.remaining) == ("j1", '{"step": 2}', 2)


def test_retry_gives_the_job_again_with_one_retry_less(engine: Engine) -> None:
    running(engine, "j1", retries=2)
    assert engine.retry("j1", "q", "w1", now=T0 + 1) == 1
    [job] = engine.pop("q", "w2", now=T0 + 2)
    assert (job.jid, job.remaining, job.worker) == ("j1", 1, "w2")


def test_retry_with_no_retry_left_fails_the_job_out_of_its_queue(engine: Engine) -> None:
    running(engine, "j1", retries=0)
    assert engine.retry("j1", "q", "w1", now=T0 + 1) < 0
    assert engine.pop("q", "w1", now=T0 + 2) == []
    assert drained(engine, "q")


def test_a_failed_job_leaves_its_queue(engine: Engine) -> None:
    running(engine, "j1")
    engine.fail("j1", "w1", "boom", "it broke", now=T0 + 1)
    assert engine.pop("q", "w1", now=T0 + 2) == []
    assert drained(engine, "q")
    with pytest.raises(LockLost):
        engine.complete("j1", "w1", "q", now=T0 + 2)


def test_release_gives_a_job_back_without_spending_a_retry(engine: Engine) -> None:
    running(engine, "j1", retries=1)
    assert engine.release(["j1", "unknown"], "w1", "q", now=T0 + 1) == ["j1"]
    [job] = engine.pop("q", "w2", now=T0 + 2)
    assert (job.jid, job.remaining) == ("j1", 1)
    assert engine.release(["j1"], "w1", "q", now=T0 + 2) == []  # w2 holds it now


def test_release_spending_a_retry_counts_the_try(engine: Engine) -> None:
    running(engine, "j1", retries=1)
    assert engine.release(["j1"], "w1", "q", spend_retry=True, now=T0 + 1) == ["j1"]
    [job] = engine.pop("q", "w1", now=T0 + 2)
    assert job.remaining == 0


def test_heartbeat_extends_the_lock_from_now(engine: Engine) -> None:
    job = running(engine, "j1")
    lock = job.expires - T0
    assert engine.heartbeat("j1", "w1", now=T0 + 5) == T0 + 5 + lock
