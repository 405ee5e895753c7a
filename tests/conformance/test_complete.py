"""complete (including advancing with `next`), complete_many, and completed-job retention."""

from __future__ import annotations

import pytest

from lanner import Capability, Engine, JobNotFound, JobState, LockLost

from .helpers import T0, get, pop_jids, put_all, require, running, whats


def test_complete_returns_complete(engine: Engine) -> None:
    running(engine, "j1")
    assert engine.complete("j1", "w1", "q", now=T0 + 1) == "complete"


@pytest.mark.requires(Capability.LOOKUP)
def test_completed_job_is_complete_with_no_queue_and_a_done_entry(engine: Engine) -> None:
    running(engine, "j1")
    engine.complete("j1", "w1", "q", now=T0 + 1)

    job = get(engine, "j1", T0 + 1)
    assert job.state == JobState.COMPLETE
    assert job.queue == ""
    assert whats(job) == ["put", "popped", "done"]
    assert job.history[-1].when == T0 + 1


@pytest.mark.requires(Capability.LISTING)
def test_completed_job_leaves_its_queue(engine: Engine) -> None:
    running(engine, "j1")
    engine.complete("j1", "w1", "q", now=T0 + 1)

    counts = engine.queue_counts("q", now=T0 + 1)
    assert (counts.running, counts.waiting, counts.stalled) == (0, 0, 0)
    assert engine.length("q", now=T0 + 1) == 0
    assert engine.jobs("running", "q", now=T0 + 1) == []
    assert pop_jids(engine, "q", "w2", now=T0 + 200) == []


@pytest.mark.requires(Capability.LOOKUP)
def test_complete_with_data_replaces_the_data(engine: Engine) -> None:
    running(engine, "j1")
    engine.complete("j1", "w1", "q", '{"result": 42}', now=T0 + 1)
    assert get(engine, "j1", T0 + 1).decoded_data() == {"result": 42}


@pytest.mark.requires(Capability.LOOKUP)
def test_complete_without_data_keeps_the_data(engine: Engine) -> None:
    engine.put("q", "j1", "Task", '{"in": 1}', now=T0)
    pop_jids(engine, "q")
    engine.complete("j1", "w1", "q", now=T0 + 1)
    assert get(engine, "j1", T0 + 1).decoded_data() == {"in": 1}


@pytest.mark.requires(Capability.LOOKUP)
def test_complete_by_another_worker_raises_lock_lost(engine: Engine) -> None:
    running(engine, "j1", worker="w1")
    with pytest.raises(LockLost):
        engine.complete("j1", "w2", "q", now=T0 + 1)
    assert get(engine, "j1", T0 + 1).state == JobState.RUNNING


@pytest.mark.requires(Capability.LOOKUP)
def test_complete_in_the_wrong_queue_raises_lock_lost(engine: Engine) -> None:
    running(engine, "j1", queue="q")
    engine.put("other", "x", "Task", now=T0)
    with pytest.raises(LockLost):
        engine.complete("j1", "w1", "other", now=T0 + 1)
    assert get(engine, "j1", T0 + 1).state == JobState.RUNNING


@pytest.mark.requires(Capability.LOOKUP)
def test_complete_of_a_waiting_job_raises_lock_lost(engine: Engine) -> None:
    engine.put("q", "j1", "Task", now=T0)
    with pytest.raises(LockLost):
        engine.complete("j1", "w1", "q", now=T0 + 1)
    assert get(engine, "j1", T0 + 1).state == JobState.WAITING


def test_complete_twice_raises_lock_lost(engine: Engine) -> None:
    running(engine, "j1")
    engine.complete("j1", "w1", "q", now=T0 + 1)
    with pytest.raises(LockLost):
        engine.complete("j1", "w1", "q", now=T0 + 2)


@pytest.mark.requires(Capability.LOOKUP)
def test_complete_of_a_missing_job_raises_job_not_found(engine: Engine) -> None:
    with pytest.raises(JobNotFound):
        engine.complete("nope", "w1", "q", now=T0)


@pytest.mark.requires(Capability.LISTING)
def test_jobs_complete_lists_completed_jobs_newest_first(engine: Engine) -> None:
    for i, jid in enumerate(["a", "b", "c"]):
        running(engine, jid, now=T0 + i)
        engine.complete(jid, "w1", "q", now=T0 + i)

    assert engine.jobs("complete", now=T0 + 10) == ["c", "b", "a"]
    assert engine.jobs("complete", offset=1, count=1, now=T0 + 10) == ["b"]


# -- advancing with next --------------------------------------------------------------


@pytest.mark.requires(Capability.LOOKUP)
def test_complete_with_next_advances_the_job_to_waiting_in_next(engine: Engine) -> None:
    running(engine, "j1", queue="q1")

    assert engine.complete("j1", "w1", "q1", next="q2", now=T0 + 1) == "waiting"

    job = get(engine, "j1", T0 + 1)
    assert (job.queue, job.state, job.worker) == ("q2", JobState.WAITING, "")
    assert engine.queue_counts("q1", now=T0 + 1).running == 0
    assert pop_jids(engine, "q2", "w2", now=T0 + 1) == ["j1"]


@pytest.mark.requires(Capability.LOOKUP)
def test_advancing_records_done_then_put_into_next(engine: Engine) -> None:
    running(engine, "j1", queue="q1")
    engine.complete("j1", "w1", "q1", next="q2", now=T0 + 1)

    history = get(engine, "j1", T0 + 1).history
    assert [e.what for e in history][-2:] == ["done", "put"]
    assert history[-1].details["q"] == "q2"


@pytest.mark.requires(Capability.LOOKUP)
def test_advancing_resets_remaining(engine: Engine) -> None:
    running(engine, "j1", queue="q1", retries=3)
    engine.retry("j1", "q1", "w1", now=T0)
    pop_jids(engine, "q1", now=T0 + 1)
    engine.complete("j1", "w1", "q1", next="q2", now=T0 + 2)
    job = get(engine, "j1", T0 + 2)
    assert (job.retries, job.remaining) == (3, 3)


@pytest.mark.requires(Capability.LISTING)
def test_advancing_is_not_a_completion(engine: Engine) -> None:
    running(engine, "j1", queue="q1")
    engine.complete("j1", "w1", "q1", next="q2", now=T0 + 1)
    assert engine.jobs("complete", now=T0 + 1) == []


def test_advancing_into_the_same_queue_gives_the_job_again(engine: Engine) -> None:
    running(engine, "j1", queue="q")
    assert engine.complete("j1", "w1", "q", next="q", now=T0 + 1) == "waiting"
    assert pop_jids(engine, "q", "w2", now=T0 + 1) == ["j1"]


@pytest.mark.requires(Capability.LOOKUP)
def test_complete_with_next_and_delay_schedules_the_job(engine: Engine) -> None:
    require(engine, Capability.DELAY)
    running(engine, "j1", queue="q1")

    assert engine.complete("j1", "w1", "q1", next="q2", delay=30, now=T0 + 1) == "scheduled"

    assert get(engine, "j1", T0 + 1).state == JobState.SCHEDULED
    assert pop_jids(engine, "q2", now=T0 + 30) == []
    assert pop_jids(engine, "q2", now=T0 + 31) == ["j1"]


# -- complete_many ------------------------------------------------------------------------


@pytest.mark.requires(Capability.LOOKUP)
def test_complete_many_completes_every_held_job(engine: Engine) -> None:
    put_all(engine, "q", ["a", "b", "c"])
    pop_jids(engine, "q", count=3)

    assert sorted(engine.complete_many(["a", "b", "c"], "w1", "q", now=T0 + 1)) == ["a", "b", "c"]
    assert [j.state for j in engine.multiget(["a", "b", "c"], now=T0 + 1)] == ["complete"] * 3


@pytest.mark.requires(Capability.LOOKUP)
def test_complete_many_skips_jobs_the_worker_does_not_hold(engine: Engine) -> None:
    put_all(engine, "q", ["mine", "theirs", "idle"])
    pop_jids(engine, "q", "w1")
    pop_jids(engine, "q", "w2")

    done = engine.complete_many(["mine", "theirs", "idle"], "w1", "q", now=T0 + 1)

    assert done == ["mine"]
    theirs, idle = engine.multiget(["theirs", "idle"], now=T0 + 1)
    assert (theirs.state, theirs.worker) == (JobState.RUNNING, "w2")
    assert idle.state == JobState.WAITING


def test_complete_many_of_nothing_returns_nothing(engine: Engine) -> None:
    assert engine.complete_many([], "w1", "q", now=T0) == []


# -- retention of completed jobs --------------------------------------------------------


@pytest.mark.requires(Capability.LOOKUP, Capability.LISTING, Capability.CONFIG)
def test_completed_jobs_beyond_jobs_history_count_are_deleted(engine: Engine) -> None:
    engine.config_set("jobs-history-count", 2, now=T0)
    for i, jid in enumerate(["a", "b", "c"]):
        running(engine, jid, now=T0 + i)
        engine.complete(jid, "w1", "q", now=T0 + i)

    assert engine.get("a", now=T0 + 3) is None
    assert [j.jid for j in engine.multiget(["b", "c"], now=T0 + 3)] == ["b", "c"]
    assert engine.jobs("complete", now=T0 + 3) == ["c", "b"]


@pytest.mark.requires(Capability.LOOKUP, Capability.LISTING, Capability.CONFIG)
def test_completed_jobs_older_than_jobs_history_are_deleted(engine: Engine) -> None:
    engine.config_set("jobs-history", 100, now=T0)
    running(engine, "old")
    engine.complete("old", "w1", "q", now=T0)
    running(engine, "new", now=T0 + 150)
    engine.complete("new", "w1", "q", now=T0 + 150)

    assert engine.get("old", now=T0 + 150) is None
    assert engine.get("new", now=T0 + 150) is not None
    assert engine.jobs("complete", now=T0 + 150) == ["new"]


# -- release ------------------------------------------------------------------------------


@pytest.mark.requires(Capability.LOOKUP)
def test_release_gives_jobs_back_in_their_old_place_without_a_retry(engine: Engine) -> None:
    put_all(engine, "q", ["a", "b", "c"])
    popped = pop_jids(engine, "q", "w1", count=2, now=T0 + 1)
    assert popped == ["a", "b"]

    assert engine.release(["b", "a"], "w1", "q", now=T0 + 2) == ["b", "a"]

    assert pop_jids(engine, "q", "w2", count=3, now=T0 + 3) == ["a", "b", "c"]
    job = get(engine, "a", T0 + 3)
    assert job.remaining == job.retries
    assert whats(job)[-2:] == ["released", "popped"]


@pytest.mark.requires(Capability.LOOKUP)
def test_release_spending_a_retry_keeps_the_place_and_counts_the_try(engine: Engine) -> None:
    engine.put("q", "a", "Task", retries=1, now=T0)
    engine.put("q", "b", "Task", now=T0 + 0.5)
    assert pop_jids(engine, "q", "w1", now=T0 + 1) == ["a"]

    assert engine.release(["a"], "w1", "q", spend_retry=True, now=T0 + 2) == ["a"]
    assert get(engine, "a", T0 + 2).remaining == 0
    assert pop_jids(engine, "q", "w2", count=2, now=T0 + 3) == ["a", "b"]  # its old place

    assert engine.release(["a"], "w2", "q", spend_retry=True, now=T0 + 4) == ["a"]
    assert get(engine, "a", T0 + 4).remaining == 0  # never below none left


@pytest.mark.requires(Capability.LOOKUP)
def test_release_skips_jobs_the_worker_does_not_hold(engine: Engine) -> None:
    put_all(engine, "q", ["a", "b"])
    pop_jids(engine, "q", "w1", now=T0)
    pop_jids(engine, "q", "w2", now=T0)
    assert engine.release(["a", "b", "missing"], "w1", "q", now=T0 + 1) == ["a"]
    assert get(engine, "b", T0 + 1).worker == "w2"


@pytest.mark.requires(Capability.LOOKUP)
def test_release_in_another_queue_is_skipped(engine: Engine) -> None:
    running(engine, "a", queue="q")
    assert engine.release(["a"], "w1", "other", now=T0 + 1) == []
    assert get(engine, "a", T0 + 1).state == "running"


@pytest.mark.requires(Capability.LOOKUP)
def test_release_with_a_delay_schedules_the_job(engine: Engine) -> None:
    running(engine, "a", queue="q")
    assert engine.release(["a"], "w1", "q", delay=30, now=T0 + 1) == ["a"]
    assert get(engine, "a", T0 + 1).state == "scheduled"
    assert pop_jids(engine, "q", "w2", now=T0 + 30) == []
    assert pop_jids(engine, "q", "w2", now=T0 + 31) == ["a"]
