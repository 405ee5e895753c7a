"""fail and retry."""

from __future__ import annotations

import pytest

from lanner import Capability, Engine, InvalidState, JobNotFound, JobState, LockLost

from .helpers import T0, get, pop_jids, require, running

# -- fail ---------------------------------------------------------------------------------


def test_fail_returns_the_jid(engine: Engine) -> None:
    running(engine, "j1")
    assert engine.fail("j1", "w1", "boom", "it broke", now=T0 + 1) == "j1"


@pytest.mark.requires(Capability.LOOKUP)
def test_failed_job_records_the_failure(engine: Engine) -> None:
    running(engine, "j1")
    engine.fail("j1", "w1", "boom", "it broke", now=T0 + 1)

    job = get(engine, "j1", T0 + 1)
    assert job.state == JobState.FAILED
    assert job.failure is not None
    assert job.failure.group == "boom"
    assert job.failure.message == "it broke"
    assert job.failure.when == T0 + 1
    assert job.failure.worker == "w1"


@pytest.mark.requires(Capability.LOOKUP)
def test_fail_adds_a_failed_history_entry_naming_the_group(engine: Engine) -> None:
    running(engine, "j1")
    engine.fail("j1", "w1", "boom", "it broke", now=T0 + 1)

    event = get(engine, "j1", T0 + 1).history[-1]
    assert (event.what, event.when, event.details["group"]) == ("failed", T0 + 1, "boom")


@pytest.mark.requires(Capability.LOOKUP)
def test_fail_with_data_replaces_the_data(engine: Engine) -> None:
    running(engine, "j1")
    engine.fail("j1", "w1", "boom", "it broke", '{"trace": "x"}', now=T0 + 1)
    assert get(engine, "j1", T0 + 1).decoded_data() == {"trace": "x"}


@pytest.mark.requires(Capability.FAILURES)
def test_failed_job_leaves_its_queue(engine: Engine) -> None:
    running(engine, "j1")
    engine.fail("j1", "w1", "boom", "it broke", now=T0 + 1)

    counts = engine.queue_counts("q", now=T0 + 100)
    assert (counts.running, counts.stalled, counts.waiting) == (0, 0, 0)
    assert pop_jids(engine, "q", "w2", now=T0 + 100) == []
    assert engine.failed_groups(now=T0 + 1) == {"boom": 1}


@pytest.mark.requires(Capability.LOOKUP, Capability.FAILURES)
def test_fail_by_another_worker_raises_lock_lost(engine: Engine) -> None:
    running(engine, "j1", worker="w1")
    with pytest.raises(LockLost):
        engine.fail("j1", "w2", "boom", "not mine", now=T0 + 1)
    assert get(engine, "j1", T0 + 1).state == JobState.RUNNING
    assert engine.failed_groups(now=T0 + 1) == {}


@pytest.mark.requires(Capability.LOOKUP)
def test_fail_of_a_waiting_job_raises_invalid_state(engine: Engine) -> None:
    engine.put("q", "j1", "Task", now=T0)
    with pytest.raises(InvalidState):
        engine.fail("j1", "w1", "boom", "not running", now=T0 + 1)
    assert get(engine, "j1", T0 + 1).state == JobState.WAITING


@pytest.mark.requires(Capability.LOOKUP)
def test_fail_of_a_missing_job_raises_job_not_found(engine: Engine) -> None:
    with pytest.raises(JobNotFound):
        engine.fail("nope", "w1", "boom", "gone", now=T0)


def test_old_worker_cannot_complete_a_failed_job(engine: Engine) -> None:
    running(engine, "j1")
    engine.fail("j1", "w1", "boom", "it broke", now=T0 + 1)
    with pytest.raises(LockLost):
        engine.complete("j1", "w1", "q", now=T0 + 2)


# -- retry --------------------------------------------------------------------------------


@pytest.mark.requires(Capability.LOOKUP)
def test_retry_returns_the_retries_remaining(engine: Engine) -> None:
    running(engine, "j1", retries=3)
    assert engine.retry("j1", "q", "w1", now=T0 + 1) == 2
    assert get(engine, "j1", T0 + 1).remaining == 2


@pytest.mark.requires(Capability.LOOKUP)
def test_retried_job_is_waiting_and_given_again(engine: Engine) -> None:
    running(engine, "j1")
    engine.retry("j1", "q", "w1", now=T0 + 1)

    job = get(engine, "j1", T0 + 1)
    assert (job.state, job.worker) == (JobState.WAITING, "")
    assert pop_jids(engine, "q", "w2", now=T0 + 1) == ["j1"]


def test_old_worker_loses_the_lock_after_retry(engine: Engine) -> None:
    running(engine, "j1")
    engine.retry("j1", "q", "w1", now=T0 + 1)
    with pytest.raises(LockLost):
        engine.complete("j1", "w1", "q", now=T0 + 2)


def test_each_retry_spends_one(engine: Engine) -> None:
    running(engine, "j1", retries=3)
    spent = []
    for i in range(3):
        spent.append(engine.retry("j1", "q", "w1", now=T0 + i))
        pop_jids(engine, "q", now=T0 + i)
    assert spent == [2, 1, 0]


@pytest.mark.requires(Capability.LOOKUP)
def test_retry_with_delay_schedules_the_job(engine: Engine) -> None:
    require(engine, Capability.DELAY)
    running(engine, "j1")
    engine.retry("j1", "q", "w1", delay=30, now=T0 + 1)

    assert get(engine, "j1", T0 + 1).state == JobState.SCHEDULED
    assert pop_jids(engine, "q", now=T0 + 30) == []
    assert pop_jids(engine, "q", now=T0 + 31) == ["j1"]


@pytest.mark.requires(Capability.LOOKUP, Capability.FAILURES)
def test_retry_with_no_retries_left_fails_into_failed_retries(engine: Engine) -> None:
    running(engine, "j1", retries=0)

    assert engine.retry("j1", "q", "w1", now=T0 + 1) < 0

    job = get(engine, "j1", T0 + 1)
    assert job.state == JobState.FAILED
    assert job.failure is not None
    assert job.failure.group == "failed-retries-q"
    assert job.failure.message == 'Job exhausted retries in queue "q"'
    assert engine.failed_groups(now=T0 + 1) == {"failed-retries-q": 1}
    assert pop_jids(engine, "q", "w2", now=T0 + 1) == []


@pytest.mark.requires(Capability.LOOKUP, Capability.FAILURES)
def test_retry_exhaustion_uses_the_group_and_message_given(engine: Engine) -> None:
    running(engine, "j1", retries=0)
    engine.retry("j1", "q", "w1", group="flaky", message="gave up", now=T0 + 1)

    failure = get(engine, "j1", T0 + 1).failure
    assert failure is not None
    assert (failure.group, failure.message) == ("flaky", "gave up")
    assert engine.failed_groups(now=T0 + 1) == {"flaky": 1}


@pytest.mark.requires(Capability.LOOKUP, Capability.FAILURES)
def test_retry_with_retries_left_ignores_group(engine: Engine) -> None:
    running(engine, "j1", retries=1)
    engine.retry("j1", "q", "w1", group="flaky", message="gave up", now=T0 + 1)
    assert get(engine, "j1", T0 + 1).state == JobState.WAITING
    assert engine.failed_groups(now=T0 + 1) == {}


@pytest.mark.requires(Capability.LOOKUP)
def test_retry_by_another_worker_raises_lock_lost(engine: Engine) -> None:
    running(engine, "j1", worker="w1")
    with pytest.raises(LockLost):
        engine.retry("j1", "q", "w2", now=T0 + 1)
    job = get(engine, "j1", T0 + 1)
    assert (job.state, job.remaining) == (JobState.RUNNING, 5)


@pytest.mark.requires(Capability.LOOKUP)
def test_retry_in_the_wrong_queue_raises_lock_lost(engine: Engine) -> None:
    running(engine, "j1", queue="q")
    with pytest.raises(LockLost):
        engine.retry("j1", "other", "w1", now=T0 + 1)
    assert get(engine, "j1", T0 + 1).remaining == 5


def test_retry_of_a_waiting_job_raises_invalid_state(engine: Engine) -> None:
    engine.put("q", "j1", "Task", now=T0)
    with pytest.raises(InvalidState):
        engine.retry("j1", "q", "w1", now=T0 + 1)


@pytest.mark.requires(Capability.LOOKUP)
def test_retry_of_a_missing_job_raises_job_not_found(engine: Engine) -> None:
    with pytest.raises(JobNotFound):
        engine.retry("nope", "q", "w1", now=T0)


def test_retried_job_is_ready_at_its_retry_time(engine: Engine) -> None:
    engine.put("q", "a", "Task", now=T0)
    engine.put("q", "b", "Task", now=T0 + 1)
    assert pop_jids(engine, "q", now=T0 + 1) == ["a"]
    engine.retry("a", "q", "w1", now=T0 + 2)
    assert pop_jids(engine, "q", count=2, now=T0 + 2) == ["b", "a"]
