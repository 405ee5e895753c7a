"""What the SQS engine promises beyond the conformance suite, against moto's SQS server.

The contract's shared parts run in tests/conformance/ (on SQS too, as far as its
capabilities go); here are SQS's own: long polls, locks that are visibility timeouts,
retries and dead letters, sizes, bodies someone else sent, long delays, names, requests.
Waits poll SQS with a deadline; the one time a test must let pass is a lock running out.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from lanner import (
    InvalidName,
    LockLost,
    MalformedArgument,
    NewJob,
    PayloadTooLarge,
    Unsupported,
)
from lanner.engines.sqs.engine import SQSEngine
from lanner.engines.sqs.messages import FAILURE_ROOM, Body

from .conftest import Raw


def eventually(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.05)


# -- long polls -----------------------------------------------------------------------------


def test_a_long_poll_returns_as_soon_as_a_message_arrives(
    engine: SQSEngine, connect: Callable[[], SQSEngine]
) -> None:
    engine.put("q", "warm", "Task")  # the queue exists before the wait starts
    [warm] = engine.pop("q", "w1")
    engine.complete(warm.jid, "w1", "q")
    publisher = connect()
    timer = threading.Timer(0.5, lambda: publisher.put("q", "j1", "Task"))
    started = time.monotonic()
    timer.start()
    try:
        jobs = engine.pop("q", "w1", wait=15)
    finally:
        timer.cancel()
    assert [job.jid for job in jobs] == ["j1"]
    assert time.monotonic() - started < 5  # far less than the wait


def test_a_pop_without_wait_on_an_empty_queue_returns_at_once(engine: SQSEngine) -> None:
    started = time.monotonic()
    assert engine.pop("empty", "w1", 10) == []
    # No long poll (the engine's is 20 s; moto answers in ms, a loaded machine in seconds).
    assert time.monotonic() - started < 10


def test_a_pop_of_more_than_ten_takes_several_receives(engine: SQSEngine) -> None:
    engine.put_many([NewJob("q", f"j{i}", "Task") for i in range(13)])
    jobs = engine.pop("q", "w1", 13)
    assert sorted(job.jid for job in jobs) == sorted(f"j{i}" for i in range(13))
    assert engine.requests["ReceiveMessage"] == 2


# -- locks: the visibility timeout ----------------------------------------------------------


def test_a_lock_that_runs_out_gives_the_job_to_another_worker_a_retry_spent(
    engine: SQSEngine, connect: Callable[[], SQSEngine]
) -> None:
    engine.config_set("q-heartbeat", 1)
    engine.put("q", "j1", "Task", retries=3)
    [first] = engine.pop("q", "w1")
    assert first.remaining == 3
    other = connect()
    [again] = eventually(lambda: other.pop("q", "w2"), 10, "the lock to run out")
    assert (again.jid, again.worker, again.remaining) == ("j1", "w2", 2)


def test_heartbeats_keep_the_job_from_other_workers(
    engine: SQSEngine, connect: Callable[[], SQSEngine]
) -> None:
    # A lock of 5 s renewed every half second or so: on a loaded machine a round of
    # moto's answers has taken over 2 s.
    engine.config_set("q-heartbeat", 5)
    engine.put("q", "j1", "Task")
    engine.pop("q", "w1")
    other = connect()
    until = time.monotonic() + 7  # longer than the lock
    while time.monotonic() < until:
        expires = engine.heartbeat("j1", "w1")
        assert expires == pytest.approx(time.time() + 5, abs=3)
        assert other.pop("q", "w2") == []
        time.sleep(0.5)
    assert engine.complete("j1", "w1", "q") == "complete"
    assert other.queue_counts("q").running == 0


def test_heartbeat_many_keeps_every_job_from_other_workers(
    engine: SQSEngine, connect: Callable[[], SQSEngine]
) -> None:
    engine.config_set("q-heartbeat", 5)  # as above
    engine.put_many([NewJob("q", "j1", "Task"), NewJob("q", "j2", "Task")])
    assert len(engine.pop("q", "w1", 2)) == 2
    other = connect()
    until = time.monotonic() + 7  # longer than the lock
    while time.monotonic() < until:
        extended = engine.heartbeat_many(["j1", "j2"], "w1")
        assert sorted(extended) == ["j1", "j2"]
        assert extended["j1"] == pytest.approx(time.time() + 5, abs=3)
        assert other.pop("q", "w2", 2) == []
        time.sleep(0.5)
    assert sorted(engine.complete_many(["j1", "j2"], "w1", "q")) == ["j1", "j2"]


def test_heartbeat_many_reports_a_message_gone_lost_and_extends_the_others(
    engine: SQSEngine, connect: Callable[[], SQSEngine]
) -> None:
    engine.config_set("short-heartbeat", 1)
    engine.put("short", "late", "Task")
    engine.put("q", "kept", "Task")
    engine.pop("short", "w1")
    engine.pop("q", "w1")
    other = connect()
    eventually(lambda: other.pop("short", "w2"), 10, "the lock to run out")
    assert other.complete("late", "w2", "short") == "complete"  # SQS: the handle is stale

    assert list(engine.heartbeat_many(["late", "kept"], "w1")) == ["kept"]
    with pytest.raises(LockLost, match="not held by this process"):  # its receipt is dropped
        engine.complete("late", "w1", "short")
    assert engine.complete("kept", "w1", "q") == "complete"


def test_heartbeat_many_takes_one_batch_request_per_ten_jobs_of_a_queue(
    engine: SQSEngine,
) -> None:
    engine.put_many([NewJob("q", f"j{i}", "Task") for i in range(13)] + [NewJob("r", "r1", "Task")])
    jids = [job.jid for job in engine.pop("q", "w1", 13) + engine.pop("r", "w1")]
    before = engine.requests.get("ChangeMessageVisibilityBatch", 0)

    assert sorted(engine.heartbeat_many(jids, "w1")) == sorted(jids)
    assert engine.requests["ChangeMessageVisibilityBatch"] - before == 3  # q: 10 + 3, r: 1
    assert engine.requests.get("ChangeMessageVisibility", 0) == 0


def test_only_the_popping_process_settles_a_job(
    engine: SQSEngine, connect: Callable[[], SQSEngine]
) -> None:
    engine.put("q", "j1", "Task")
    engine.pop("q", "w1")
    elsewhere = connect()  # a supervisor: same worker name, no receipt handle
    with pytest.raises(LockLost, match="process that popped it"):
        elsewhere.complete("j1", "w1", "q")
    assert elsewhere.complete_many(["j1"], "w1", "q") == []
    with pytest.raises(LockLost, match="running for w1"):
        engine.heartbeat("j1", "w2")
    assert engine.complete_many(["j1"], "w1", "q") == ["j1"]


def test_a_forked_process_holds_nothing_and_has_its_own_client(engine: SQSEngine) -> None:
    engine.put("q", "j1", "Task")
    engine.pop("q", "w1")
    pid = os.fork()
    if pid == 0:  # the child: none of the parent's receipts, a client of its own
        code = 0
        try:
            engine.complete("j1", "w1", "q")
            code = 1
        except LockLost:
            engine.put("q", "child", "Task")
            code = 0 if engine.requests == {"SendMessageBatch": 1} else 2
        except BaseException:
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert engine.complete("j1", "w1", "q") == "complete"
    [job] = engine.pop("q", "w1")
    assert job.jid == "child"


# -- retries, releases and dead letters -----------------------------------------------------


def test_retry_sends_the_job_again_with_one_retry_less(engine: SQSEngine) -> None:
    engine.put("q", "j1", "Task", '{"a": 1}', retries=2)
    engine.pop("q", "w1")
    assert engine.retry("j1", "q", "w1") == 1
    [again] = engine.pop("q", "w1")
    assert (again.jid, again.remaining, again.data) == ("j1", 1, '{"a": 1}')


def test_retry_with_a_delay_schedules_the_job(engine: SQSEngine) -> None:
    engine.put("q", "j1", "Task")
    engine.pop("q", "w1")
    engine.retry("j1", "q", "w1", delay=1)
    assert engine.queue_counts("q").scheduled == 1
    [again] = eventually(lambda: engine.pop("q", "w1"), 10, "the delay to pass")
    assert again.remaining == 4


def test_retries_exhausted_dead_letter_the_job_with_group_and_reason(
    engine: SQSEngine, raw: Raw
) -> None:
    engine.put("q", "j1", "Task", '{"x": 1}', retries=0)
    engine.pop("q", "w1")
    assert engine.retry("j1", "q", "w1", group="boom", message="it broke") == -1
    [letter] = raw.dead_letters("q")
    assert letter["jid"] == "j1"
    assert letter["data"] == '{"x": 1}'
    assert letter["failure"]["group"] == "boom"
    assert letter["failure"]["message"] == "it broke"
    assert letter["failure"]["worker"] == "w1"
    assert engine.queue_counts("q").waiting == 0


def test_fail_dead_letters_the_job(engine: SQSEngine, raw: Raw) -> None:
    engine.put("q", "j1", "app.Task", retries=3)
    engine.pop("q", "w1")
    engine.fail("j1", "w1", "ValueError", "Traceback: ValueError: bad")
    [letter] = raw.dead_letters("q")
    assert (letter["klass"], letter["failure"]["group"]) == ("app.Task", "ValueError")
    assert "bad" in letter["failure"]["message"]
    assert engine.queue_counts("q").running == 0
    with pytest.raises(LockLost):
        engine.complete("j1", "w1", "q")


def test_a_dead_letter_message_is_cut_to_fit(engine: SQSEngine, raw: Raw) -> None:
    engine.put("q", "j1", "Task")
    engine.pop("q", "w1")
    engine.fail("j1", "w1", "boom", "é" * engine.options.max_message_bytes)
    [letter] = raw.dead_letters("q")
    assert letter["failure"]["message"].endswith("cut to fit SQS's message size]")


def test_release_keeps_the_budget_and_spend_retry_spends_one(engine: SQSEngine) -> None:
    engine.put("q", "j1", "Task", retries=1)
    engine.pop("q", "w1")
    assert engine.release(["j1"], "w1", "q") == ["j1"]
    [job] = engine.pop("q", "w1")
    assert job.remaining == 1  # a release is not a lost lock: no retry spent
    assert [event.what for event in job.history].count("released") == 1
    assert engine.release(["j1"], "w1", "q", spend_retry=True) == ["j1"]
    [job] = engine.pop("q", "w1")
    assert job.remaining == 0


def test_a_release_spending_the_last_retry_dead_letters_the_job(
    engine: SQSEngine, raw: Raw
) -> None:
    engine.put("q", "j1", "Task", retries=0)
    engine.pop("q", "w1")
    assert engine.release(["j1"], "w1", "q", spend_retry=True) == []
    [letter] = raw.dead_letters("q")
    assert letter["failure"]["group"] == "failed-retries-q"
    counts = engine.queue_counts("q")
    assert (counts.waiting, counts.running) == (0, 0)


def test_a_job_whose_budget_ran_out_while_locks_expired_is_dead_lettered_by_the_pop(
    engine: SQSEngine, connect: Callable[[], SQSEngine], raw: Raw
) -> None:
    engine.config_set("q-heartbeat", 1)
    engine.put("q", "j1", "Task", retries=0)
    engine.pop("q", "w1")  # and its worker dies: the lock runs out
    other = connect()
    # The next pop after the lock ran out finds the budget spent: it gives nothing.
    eventually(lambda: other.pop("q", "w2") == [] and raw.dead_letters("q"), 10, "a dead letter")
    [letter] = raw.dead_letters("q")
    assert letter["failure"]["group"] == "failed-retries-q"
    assert letter["failure"]["message"] == 'Job exhausted retries in queue "q"'


# -- sizes ----------------------------------------------------------------------------------


def test_an_oversized_job_is_refused_before_anything_is_sent(engine: SQSEngine) -> None:
    engine.put("q", "small", "Task")  # the queue exists
    sent = engine.requests.get("SendMessageBatch", 0)
    too_big = json.dumps("x" * engine.max_data_bytes)
    with pytest.raises(PayloadTooLarge):
        engine.put_many([NewJob("q", "ok", "Task"), NewJob("q", "big", "Task", too_big)])
    # Within max_data_bytes as UTF-8, over the queue's size once escaped as ASCII JSON:
    escaped = json.dumps("\u4e2d" * (engine.max_data_bytes // 3 - 4), ensure_ascii=False)
    assert len(escaped.encode()) <= engine.max_data_bytes
    with pytest.raises(PayloadTooLarge, match="MaximumMessageSize"):
        engine.put("q", "wide", "Task", escaped)
    assert engine.requests.get("SendMessageBatch", 0) == sent
    assert engine.queue_counts("q").waiting == 1


def test_the_largest_job_fits_and_comes_back_unchanged(engine: SQSEngine) -> None:
    now = float(int(time.time()))  # the put time is in the envelope: one of known length
    envelope = len(Body("j1", "Task", "q", "", 5, 5, now).encoded())
    room = engine.options.max_message_bytes - FAILURE_ROOM - envelope
    data = json.dumps("x" * (room - 4))  # its two quotes, escaped, take 4 bytes
    engine.put("q", "j1", "Task", data, now=now)
    [job] = engine.pop("q", "w1")
    assert job.data == data
    with pytest.raises(PayloadTooLarge):
        engine.put("q", "j2", "Task", json.dumps("x" * (room - 3)), now=now)


def test_unicode_data_comes_back_exactly(engine: SQSEngine, raw: Raw) -> None:
    data = '{"s": "caf\\u00e9 \u00e9 \U0001f600 \ufffe \x7f", "n": 1.50}'
    engine.put("q", "j1", "Task", data)
    [job] = engine.pop("q", "w1")
    assert job.data == data


def test_queues_are_created_with_their_attributes(engine: SQSEngine, raw: Raw) -> None:
    engine.put("q", "j1", "Task")
    attributes = raw.attributes(raw.prefix + "q")
    assert attributes["VisibilityTimeout"] == "60"
    assert attributes["MaximumMessageSize"] == str(engine.options.max_message_bytes)
    assert attributes["MessageRetentionPeriod"] == "1209600"
    engine.config_set("q-heartbeat", 7.5)
    assert raw.attributes(raw.prefix + "q")["VisibilityTimeout"] == "8"  # whole seconds
    assert engine.config_get("q-heartbeat") == 8


# -- messages someone else sent -------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("hello", "not JSON"),
        ('{"id": "k1", "task": "tasks.Add"}', "not a lanner job"),
        ('{"lanner-job": 1, "jid": "j"}', "damaged"),
        ('{"lanner-job": 9}', "format 9"),
    ],
    ids=["text", "other-json", "damaged", "future-format"],
)
def test_a_message_that_is_no_lanner_job_is_dead_lettered_with_the_reason(
    engine: SQSEngine, raw: Raw, body: str, reason: str
) -> None:
    raw.send("q", body)
    engine.put("q", "j1", "Task")
    jobs = eventually(lambda: engine.pop("q", "w1", 10), 5, "the job")
    assert [job.jid for job in jobs] == ["j1"]
    [letter] = raw.dead_letters("q")
    assert letter["foreign"] == body
    assert letter["failure"]["group"] == "lanner-not-a-job"
    assert reason in letter["failure"]["message"]
    assert engine.queue_counts("q").waiting == 0


# -- delays past SQS's 900 s ----------------------------------------------------------------


def test_a_delay_past_900_seconds_is_carried_in_the_body(engine: SQSEngine) -> None:
    now = time.time()
    engine.put("q", "j1", "Task", delay=3600, now=now)
    counts = engine.queue_counts("q")
    assert (counts.waiting, counts.scheduled) == (0, 1)  # SQS's 900 s, for a start


def test_a_job_received_before_it_is_due_is_sent_again_out_of_sight(
    engine: SQSEngine, raw: Raw
) -> None:
    now = time.time()
    early = Body("j1", "Task", "q", "{}", 5, 5, now, due=now + 3600)
    raw.send("q", early.encoded())  # as if its first 900 s had passed
    assert engine.pop("q", "w1", now=now) == []
    counts = engine.queue_counts("q")
    assert (counts.waiting, counts.running, counts.scheduled) == (0, 0, 1)


def test_a_job_received_when_due_runs(engine: SQSEngine, raw: Raw) -> None:
    now = time.time()
    raw.send("q", Body("j1", "Task", "q", "{}", 5, 5, now, due=now + 3600).encoded())
    [job] = engine.pop("q", "w1", now=now + 3600)  # the pop's `now` decides what is due
    assert job.jid == "j1"


# -- names ----------------------------------------------------------------------------------


def test_a_queue_too_long_with_the_prefixes_is_refused_before_any_request(
    sqs_url: str,
) -> None:
    engine = SQSEngine(f"{sqs_url}&prefix={'p' * 20}-")
    with pytest.raises(InvalidName, match="80"):
        engine.put("q" * 60, "j1", "Task")  # dlq- + 21 + 60 = 85 characters
    engine.put("q" * 55, "j1", "Task")  # 80: fits
    assert engine.requests.get("SendMessageBatch") == 1


def test_a_queue_named_like_a_dead_letter_queue_is_refused(sqs_url: str) -> None:
    engine = SQSEngine(sqs_url)  # no prefix
    with pytest.raises(InvalidName, match="dead-letter"):
        engine.put("dlq-emails", "j1", "Task")
    assert engine.requests == {}


@pytest.mark.parametrize(
    "query",
    ["prefix=a.b", "prefix=a%20b", "dlq_prefix=", "prefix=dlq-x", f"prefix={'p' * 76}"],
)
def test_a_bad_prefix_is_refused_when_the_url_is_read(sqs_url: str, query: str) -> None:
    with pytest.raises(MalformedArgument, match="prefix"):
        SQSEngine(f"{sqs_url}&{query}")


def test_queues_lists_the_queues_of_the_prefix_only(
    engine: SQSEngine, raw: Raw, sqs_url: str
) -> None:
    engine.put("b", "j1", "Task")
    engine.put("a", "j2", "Task")
    raw.client.create_queue(QueueName="unrelated-" + raw.prefix)
    engine.pop("a", "w1")
    engine.fail("j2", "w1", "boom", "m")  # makes the dead-letter queue dlq-<prefix>a
    fresh = SQSEngine(f"{sqs_url}&prefix={raw.prefix}")
    assert [q.name for q in fresh.queues()] == ["a", "b"]


# -- what SQS cannot do ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda e: e.get("j1"), "cannot find a job by its id"),
        (lambda e: e.cancel(["j1"]), "cannot cancel a job"),
        (lambda e: e.jobs("waiting", "q"), "cannot list or peek"),
        (lambda e: e.failed_groups(), "cannot count, list or put back failed jobs"),
        (lambda e: e.config_set("grace-period", 3), "'grace-period'"),
        (lambda e: e.put("q", "j1", "Task", priority=5), "priority"),
        (lambda e: e.heartbeat("j1", "w1", '{"a": 1}'), "body never changes"),
    ],
    ids=["get", "cancel", "jobs", "failed_groups", "config", "priority", "heartbeat-data"],
)
def test_what_sqs_cannot_do_is_refused_with_one_clear_line(
    engine: SQSEngine, call: Callable[[SQSEngine], object], says: str
) -> None:
    engine.put("q", "j1", "Task")
    engine.pop("q", "w1")
    with pytest.raises(Unsupported) as refused:
        call(engine)
    assert str(refused.value).startswith("the sqs engine ")
    assert says in str(refused.value)
    assert "\n" not in str(refused.value)


def test_priority_zero_is_every_jobs_priority_and_accepted(engine: SQSEngine) -> None:
    engine.put("q", "j1", "Task", priority=0)
    [job] = engine.pop("q", "w1")
    assert job.priority == 0


# -- requests -------------------------------------------------------------------------------


def test_queues_reuses_counts_and_learns_emptiness_from_receives(engine: SQSEngine) -> None:
    engine.put("q", "j1", "Task")
    first = engine.queues()
    asked = engine.requests["GetQueueAttributes"]
    assert [(q.name, q.waiting) for q in first] == [("q", 1)]
    assert engine.queues() == first
    assert engine.requests["GetQueueAttributes"] == asked  # reused
    engine.pop("q", "w1", 10)  # a short receive: nothing more is waiting
    assert [(q.waiting, q.running) for q in engine.queues()] == [(0, 1)]
    assert engine.requests["GetQueueAttributes"] == asked


def test_a_batch_costs_three_requests_for_ten_jobs(engine: SQSEngine) -> None:
    engine.put("q", "warm", "Task")
    engine.pop("q", "w1")
    engine.complete("warm", "w1", "q")
    before = dict(engine.requests)
    engine.put_many([NewJob("q", f"j{i}", "Task") for i in range(10)])
    jobs = engine.pop("q", "w1", 10)
    assert len(jobs) == 10
    assert len(engine.complete_many([job.jid for job in jobs], "w1", "q")) == 10
    spent = {api: count - before.get(api, 0) for api, count in engine.requests.items()}
    assert {api: n for api, n in spent.items() if n} == {
        "SendMessageBatch": 1,
        "ReceiveMessage": 1,
        "DeleteMessageBatch": 1,
    }
