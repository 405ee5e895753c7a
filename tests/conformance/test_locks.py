"""Locks: heartbeat, expiry, the grace period, and retries spent on lost locks.

A job popped at T0 holds its lock until T0 + 60 (the default heartbeat); the default
grace period is 10 seconds.
"""

from __future__ import annotations

import pytest

from lanner import Capability, Engine, InvalidState, JobNotFound, JobState, LockLost

from .helpers import GRACE, HEARTBEAT, T0, get, in_state, pop_jids, running, whats

EXPIRED = T0 + HEARTBEAT  # the first moment the lock of a job popped at T0 has run out


# -- heartbeat ----------------------------------------------------------------------------


@pytest.mark.requires(Capability.LOOKUP)
def test_heartbeat_extends_the_lock_and_returns_the_new_expiry(engine: Engine) -> None:
    running(engine, "j1")

    assert engine.heartbeat("j1", "w1", now=T0 + 30) == T0 + 30 + HEARTBEAT
    assert get(engine, "j1", T0 + 30).expires == T0 + 30 + HEARTBEAT


@pytest.mark.requires(Capability.LOOKUP)
def test_heartbeat_keeps_the_job_from_being_taken(engine: Engine) -> None:
    running(engine, "j1")
    engine.heartbeat("j1", "w1", now=T0 + 50)

    assert pop_jids(engine, "q", "w2", now=EXPIRED + GRACE) == []
    assert get(engine, "j1", EXPIRED + GRACE).worker == "w1"


@pytest.mark.requires(Capability.LOOKUP)
def test_heartbeat_with_data_replaces_the_data(engine: Engine) -> None:
    running(engine, "j1")
    engine.heartbeat("j1", "w1", '{"progress": 50}', now=T0 + 1)
    assert get(engine, "j1", T0 + 1).decoded_data() == {"progress": 50}


@pytest.mark.requires(Capability.LOOKUP)
def test_heartbeat_without_data_keeps_the_data(engine: Engine) -> None:
    engine.put("q", "j1", "Task", '{"keep": true}', now=T0)
    pop_jids(engine, "q")
    engine.heartbeat("j1", "w1", now=T0 + 1)
    assert get(engine, "j1", T0 + 1).decoded_data() == {"keep": True}


@pytest.mark.requires(Capability.LOOKUP)
def test_heartbeat_of_a_missing_job_raises_job_not_found(engine: Engine) -> None:
    with pytest.raises(JobNotFound):
        engine.heartbeat("nope", "w1", now=T0)


@pytest.mark.requires(Capability.LOOKUP)
@pytest.mark.parametrize("state", ["waiting", "complete", "failed"])
def test_heartbeat_of_a_job_not_running_raises_lock_lost_naming_its_state(
    engine: Engine, state: str
) -> None:
    in_state(engine, state, "j1")

    with pytest.raises(LockLost, match=state):
        engine.heartbeat("j1", "w1", now=T0 + 1)
    assert get(engine, "j1", T0 + 1).state == state


@pytest.mark.requires(Capability.LOOKUP)
def test_heartbeat_by_another_worker_raises_lock_lost(engine: Engine) -> None:
    running(engine, "j1", worker="w1")

    with pytest.raises(LockLost):
        engine.heartbeat("j1", "w2", now=T0 + 1)
    assert get(engine, "j1", T0 + 1).expires == T0 + HEARTBEAT


def test_lock_lost_is_an_invalid_state(engine: Engine) -> None:
    in_state(engine, "waiting", "j1")
    with pytest.raises(InvalidState):
        engine.heartbeat("j1", "w1", now=T0)


# -- lock expiry --------------------------------------------------------------------------


@pytest.mark.requires(Capability.LISTING)
def test_running_job_is_counted_running_until_its_lock_runs_out(engine: Engine) -> None:
    running(engine, "j1")
    counts = engine.queue_counts("q", now=EXPIRED - 0.5)
    assert (counts.running, counts.stalled) == (1, 0)
    assert engine.jobs("running", "q", now=EXPIRED - 0.5) == ["j1"]
    assert engine.jobs("stalled", "q", now=EXPIRED - 0.5) == []


@pytest.mark.requires(Capability.LISTING)
def test_job_whose_lock_ran_out_is_reported_stalled(engine: Engine) -> None:
    running(engine, "j1")
    counts = engine.queue_counts("q", now=EXPIRED)
    assert (counts.running, counts.stalled) == (0, 1)
    assert engine.jobs("stalled", "q", now=EXPIRED) == ["j1"]
    assert engine.jobs("running", "q", now=EXPIRED) == []


def test_old_worker_can_complete_an_expired_lock_nobody_took(engine: Engine) -> None:
    running(engine, "j1")
    assert engine.complete("j1", "w1", "q", now=EXPIRED + 100) == "complete"


def test_old_worker_can_heartbeat_an_expired_lock_nobody_took(engine: Engine) -> None:
    running(engine, "j1")
    assert engine.heartbeat("j1", "w1", now=EXPIRED + 5) == EXPIRED + 5 + HEARTBEAT
    assert pop_jids(engine, "q", "w2", now=EXPIRED + 5) == []


@pytest.mark.requires(Capability.LOOKUP)
def test_first_pop_after_expiry_grants_a_grace_period(engine: Engine) -> None:
    running(engine, "j1")

    assert pop_jids(engine, "q", "w2", now=EXPIRED) == []

    job = get(engine, "j1", EXPIRED)
    assert job.state == JobState.RUNNING
    assert job.worker == "w1"
    assert job.expires == EXPIRED + GRACE
    assert job.remaining == 5
    assert whats(job)[-1] == "timed-out"
    assert job.history[-1].when == EXPIRED


def test_job_in_its_grace_period_is_not_reported_stalled(engine: Engine) -> None:
    running(engine, "j1")
    pop_jids(engine, "q", "w2", now=EXPIRED)
    counts = engine.queue_counts("q", now=EXPIRED + 1)
    assert (counts.running, counts.stalled) == (1, 0)


def test_old_worker_can_complete_during_the_grace_period(engine: Engine) -> None:
    running(engine, "j1")
    pop_jids(engine, "q", "w2", now=EXPIRED)
    assert engine.complete("j1", "w1", "q", now=EXPIRED + 5) == "complete"


def test_old_worker_can_heartbeat_during_the_grace_period(engine: Engine) -> None:
    running(engine, "j1")
    pop_jids(engine, "q", "w2", now=EXPIRED)

    assert engine.heartbeat("j1", "w1", now=EXPIRED + 5) == EXPIRED + 5 + HEARTBEAT
    assert pop_jids(engine, "q", "w2", now=EXPIRED + GRACE) == []


@pytest.mark.requires(Capability.LOOKUP)
def test_old_worker_can_fail_during_the_grace_period(engine: Engine) -> None:
    running(engine, "j1")
    pop_jids(engine, "q", "w2", now=EXPIRED)
    engine.fail("j1", "w1", "boom", "late failure", now=EXPIRED + 5)
    assert get(engine, "j1", EXPIRED + 5).state == JobState.FAILED


@pytest.mark.requires(Capability.LOOKUP)
def test_after_the_grace_period_the_job_goes_to_the_next_worker(engine: Engine) -> None:
    running(engine, "j1")
    pop_jids(engine, "q", "w2", now=EXPIRED)

    (job,) = engine.pop("q", "w2", now=EXPIRED + GRACE)

    assert (job.jid, job.worker, job.state) == ("j1", "w2", JobState.RUNNING)
    assert job.expires == EXPIRED + GRACE + HEARTBEAT
    assert job.remaining == 4
    assert whats(get(engine, "j1", EXPIRED + GRACE))[-2:] == ["timed-out", "popped"]


@pytest.mark.requires(Capability.LOOKUP)
def test_old_worker_loses_the_lock_once_the_job_is_handed_over(engine: Engine) -> None:
    running(engine, "j1")
    pop_jids(engine, "q", "w2", now=EXPIRED)
    pop_jids(engine, "q", "w2", now=EXPIRED + GRACE)
    later = EXPIRED + GRACE + 1

    with pytest.raises(LockLost):
        engine.complete("j1", "w1", "q", now=later)
    with pytest.raises(LockLost):
        engine.heartbeat("j1", "w1", now=later)
    with pytest.raises(LockLost):
        engine.fail("j1", "w1", "boom", "too late", now=later)
    with pytest.raises(LockLost):
        engine.retry("j1", "q", "w1", now=later)
    assert engine.complete_many(["j1"], "w1", "q", now=later) == []
    assert get(engine, "j1", later).worker == "w2"
    assert engine.complete("j1", "w2", "q", now=later) == "complete"


@pytest.mark.requires(Capability.LOOKUP)
def test_the_new_workers_lock_gets_its_own_grace_period(engine: Engine) -> None:
    running(engine, "j1")
    pop_jids(engine, "q", "w2", now=EXPIRED)
    assert pop_jids(engine, "q", "w2", now=EXPIRED + GRACE) == ["j1"]
    second_expiry = EXPIRED + GRACE + HEARTBEAT

    assert pop_jids(engine, "q", "w3", now=second_expiry) == []

    job = get(engine, "j1", second_expiry)
    assert (job.worker, job.expires, job.remaining) == ("w2", second_expiry + GRACE, 4)
    assert whats(job)[-1] == "timed-out"


@pytest.mark.requires(Capability.LOOKUP, Capability.CONFIG)
def test_zero_grace_period_hands_an_expired_job_over_at_once(engine: Engine) -> None:
    engine.config_set("grace-period", 0, now=T0)
    running(engine, "j1")

    (job,) = engine.pop("q", "w2", now=EXPIRED)

    assert (job.jid, job.worker, job.remaining) == ("j1", "w2", 4)
    assert "timed-out" in whats(get(engine, "j1", EXPIRED))


@pytest.mark.requires(Capability.CONFIG)
def test_expired_locks_are_given_before_waiting_jobs(engine: Engine) -> None:
    engine.config_set("grace-period", 0, now=T0)
    running(engine, "old")
    engine.put("q", "new", "Task", now=T0 + 1)
    assert pop_jids(engine, "q", "w2", count=2, now=EXPIRED) == ["old", "new"]


@pytest.mark.requires(Capability.CONFIG)
def test_each_lost_lock_spends_one_retry(engine: Engine) -> None:
    engine.config_set("grace-period", 0, now=T0)
    running(engine, "j1", retries=2)
    now = T0
    remaining = []
    for worker in ["w2", "w3"]:
        now += HEARTBEAT
        (job,) = engine.pop("q", worker, now=now)
        remaining.append(job.remaining)
    assert remaining == [1, 0]


@pytest.mark.requires(Capability.LOOKUP, Capability.FAILURES, Capability.CONFIG)
def test_job_losing_its_lock_with_no_retries_left_fails(engine: Engine) -> None:
    engine.config_set("grace-period", 0, now=T0)
    running(engine, "j1", retries=1)
    assert pop_jids(engine, "q", "w2", now=EXPIRED) == ["j1"]

    later = EXPIRED + HEARTBEAT
    assert pop_jids(engine, "q", "w3", now=later) == []

    job = get(engine, "j1", later)
    assert job.state == JobState.FAILED
    assert job.failure is not None
    assert job.failure.group == "failed-retries-q"
    assert job.failure.message == 'Job exhausted retries in queue "q"'
    assert job.failure.when == later
    assert engine.failed_groups(now=later) == {"failed-retries-q": 1}
    counts = engine.queue_counts("q", now=later)
    assert (counts.running, counts.stalled, counts.waiting) == (0, 0, 0)


@pytest.mark.requires(Capability.LOOKUP, Capability.FAILURES)
def test_exhaustion_goes_through_the_grace_period_first(engine: Engine) -> None:
    running(engine, "j1", retries=0)

    assert pop_jids(engine, "q", "w2", now=EXPIRED) == []
    assert get(engine, "j1", EXPIRED).state == JobState.RUNNING

    assert pop_jids(engine, "q", "w2", now=EXPIRED + GRACE) == []
    job = get(engine, "j1", EXPIRED + GRACE)
    assert job.state == JobState.FAILED
    assert job.failure is not None
    assert job.failure.group == "failed-retries-q"
    assert [e.details.get("group") for e in job.history if e.what == "failed"] == [
        "failed-retries-q"
    ]
    assert [j.jid for j in engine.failed("failed-retries-q", now=EXPIRED + GRACE).jobs] == ["j1"]


@pytest.mark.requires(Capability.LOOKUP, Capability.CONFIG)
def test_exhausted_job_failure_names_its_queue(engine: Engine) -> None:
    engine.config_set("grace-period", 0, now=T0)
    running(engine, "j1", queue="emails", retries=0)
    engine.pop("emails", "w2", now=EXPIRED)

    failure = get(engine, "j1", EXPIRED).failure
    assert failure is not None
    assert (failure.group, failure.message) == (
        "failed-retries-emails",
        'Job exhausted retries in queue "emails"',
    )
