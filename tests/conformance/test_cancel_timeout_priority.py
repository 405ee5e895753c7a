"""cancel, timeout and priority."""

from __future__ import annotations

import pytest

from lanner import Capability, Engine, InvalidState, JobNotFound, JobState, LockLost

from .helpers import T0, get, in_state, jids, pop_jids, put_all, require, running, whats

# -- cancel -------------------------------------------------------------------------------


@pytest.mark.requires(Capability.LOOKUP, Capability.CANCEL)
def test_cancel_deletes_the_job_and_returns_its_jid(engine: Engine) -> None:
    engine.put("q", "j1", "Task", now=T0)

    assert engine.cancel(["j1"], now=T0 + 1) == ["j1"]
    assert engine.get("j1", now=T0 + 1) is None
    assert engine.queue_counts("q", now=T0 + 1).waiting == 0
    assert pop_jids(engine, "q", now=T0 + 1) == []


@pytest.mark.requires(Capability.LOOKUP, Capability.CANCEL)
@pytest.mark.parametrize("state", ["waiting", "running", "failed"])
def test_cancel_deletes_a_job_in_any_state(engine: Engine, state: str) -> None:
    in_state(engine, state, "j1")
    assert engine.cancel(["j1"], now=T0 + 1) == ["j1"]
    assert engine.get("j1", now=T0 + 1) is None


@pytest.mark.requires(Capability.LOOKUP, Capability.CANCEL, Capability.LISTING)
def test_cancel_ignores_completed_jobs(engine: Engine) -> None:
    in_state(engine, "complete", "done")
    engine.put("q", "j1", "Task", now=T0)

    assert engine.cancel(["done", "j1"], now=T0 + 1) == ["j1"]
    assert get(engine, "done", T0 + 1).state == JobState.COMPLETE
    assert engine.jobs("complete", now=T0 + 1) == ["done"]


@pytest.mark.requires(Capability.CANCEL)
def test_cancel_ignores_unknown_jids(engine: Engine) -> None:
    engine.put("q", "j1", "Task", now=T0)
    assert engine.cancel(["nope", "j1", "other"], now=T0 + 1) == ["j1"]
    assert engine.cancel(["nope"], now=T0 + 1) == []


@pytest.mark.requires(Capability.CANCEL, Capability.LISTING)
def test_cancel_of_a_running_job_frees_its_queue(engine: Engine) -> None:
    running(engine, "j1")
    engine.cancel(["j1"], now=T0 + 1)
    counts = engine.queue_counts("q", now=T0 + 100)
    assert (counts.running, counts.stalled) == (0, 0)
    assert engine.jobs("running", "q", now=T0 + 1) == []


@pytest.mark.requires(Capability.CANCEL)
def test_cancelled_job_cannot_be_completed(engine: Engine) -> None:
    running(engine, "j1")
    engine.cancel(["j1"], now=T0 + 1)
    with pytest.raises((JobNotFound, LockLost)):
        engine.complete("j1", "w1", "q", now=T0 + 2)


@pytest.mark.requires(Capability.LOOKUP, Capability.CANCEL, Capability.FAILURES)
def test_cancel_of_a_failed_job_removes_it_from_its_group(engine: Engine) -> None:
    in_state(engine, "failed", "j1")
    engine.cancel(["j1"], now=T0 + 1)
    assert engine.failed_groups(now=T0 + 1).get("boom", 0) == 0
    assert engine.failed("boom", now=T0 + 1).total == 0


def test_cancel_refuses_while_a_job_not_cancelled_depends_on_it(engine: Engine) -> None:
    require(engine, Capability.DEPENDENCIES)
    engine.put("q", "parent", "Task", now=T0)
    engine.put("q", "child", "Task", depends=["parent"], now=T0)

    with pytest.raises(InvalidState):
        engine.cancel(["parent"], now=T0 + 1)

    assert get(engine, "parent", T0 + 1).dependents == ("child",)
    assert get(engine, "child", T0 + 1).state == JobState.DEPENDS


def test_cancel_refusing_cancels_none_of_the_jobs_given(engine: Engine) -> None:
    require(engine, Capability.DEPENDENCIES)
    engine.put("q", "lonely", "Task", now=T0)
    engine.put("q", "parent", "Task", now=T0)
    engine.put("q", "child", "Task", depends=["parent"], now=T0)

    with pytest.raises(InvalidState):
        engine.cancel(["lonely", "parent"], now=T0 + 1)
    assert engine.get("lonely", now=T0 + 1) is not None


def test_cancel_succeeds_with_the_dependents_cancelled_too(engine: Engine) -> None:
    require(engine, Capability.DEPENDENCIES)
    engine.put("q", "parent", "Task", now=T0)
    engine.put("q", "child", "Task", depends=["parent"], now=T0)

    assert sorted(engine.cancel(["parent", "child"], now=T0 + 1)) == ["child", "parent"]
    assert engine.multiget(["parent", "child"], now=T0 + 1) == []


def test_cancelling_a_dependent_detaches_it_from_its_dependency(engine: Engine) -> None:
    require(engine, Capability.DEPENDENCIES)
    engine.put("q", "parent", "Task", now=T0)
    engine.put("q", "child", "Task", depends=["parent"], now=T0)

    engine.cancel(["child"], now=T0 + 1)

    assert get(engine, "parent", T0 + 1).dependents == ()
    assert engine.cancel(["parent"], now=T0 + 2) == ["parent"]


# -- timeout ------------------------------------------------------------------------------


def test_timeout_makes_a_running_job_stalled(engine: Engine) -> None:
    require(engine, Capability.TIMEOUT)
    running(engine, "j1")

    engine.timeout(["j1"], now=T0 + 1)

    job = get(engine, "j1", T0 + 1)
    assert job.state == JobState.STALLED
    assert job.worker == ""
    assert whats(job)[-1] == "timed-out"
    assert job.history[-1].when == T0 + 1


def test_timed_out_job_is_counted_stalled(engine: Engine) -> None:
    require(engine, Capability.TIMEOUT)
    running(engine, "j1")
    engine.timeout(["j1"], now=T0 + 1)

    counts = engine.queue_counts("q", now=T0 + 1)
    assert (counts.stalled, counts.running, counts.waiting) == (1, 0, 0)
    assert engine.jobs("stalled", "q", now=T0 + 1) == ["j1"]
    assert engine.jobs("running", "q", now=T0 + 1) == []
    assert engine.length("q", now=T0 + 1) == 1


def test_timed_out_job_is_popped_again(engine: Engine) -> None:
    require(engine, Capability.TIMEOUT)
    running(engine, "j1")
    engine.timeout(["j1"], now=T0 + 1)

    (job,) = engine.pop("q", "w2", now=T0 + 2)
    assert (job.jid, job.state, job.worker) == ("j1", JobState.RUNNING, "w2")


def test_timed_out_job_goes_to_the_front_of_its_queue(engine: Engine) -> None:
    require(engine, Capability.TIMEOUT, Capability.PRIORITY)
    running(engine, "j1")
    engine.put("q", "urgent", "Task", priority=100, now=T0 + 1)
    engine.timeout(["j1"], now=T0 + 2)

    assert pop_jids(engine, "q", "w2", count=2, now=T0 + 3) == ["j1", "urgent"]


def test_timed_out_jobs_come_before_waiting_jobs(engine: Engine) -> None:
    require(engine, Capability.TIMEOUT)
    put_all(engine, "q", ["a", "b", "c"])
    assert pop_jids(engine, "q", count=2) == ["a", "b"]
    engine.timeout(["b"], now=T0 + 1)
    assert jids(engine.peek("q", 2, now=T0 + 2)) == ["b", "c"]
    assert pop_jids(engine, "q", "w2", count=2, now=T0 + 2) == ["b", "c"]


def test_old_worker_loses_the_lock_on_timeout(engine: Engine) -> None:
    require(engine, Capability.TIMEOUT)
    running(engine, "j1")
    engine.timeout(["j1"], now=T0 + 1)

    with pytest.raises(LockLost):
        engine.complete("j1", "w1", "q", now=T0 + 2)
    with pytest.raises(LockLost):
        engine.heartbeat("j1", "w1", now=T0 + 2)


def test_timeout_of_a_missing_job_raises_job_not_found(engine: Engine) -> None:
    require(engine, Capability.TIMEOUT)
    with pytest.raises(JobNotFound):
        engine.timeout(["nope"], now=T0)


@pytest.mark.parametrize("state", ["waiting", "failed", "complete"])
def test_timeout_of_a_job_not_running_raises_invalid_state(engine: Engine, state: str) -> None:
    require(engine, Capability.TIMEOUT)
    in_state(engine, state, "j1")
    with pytest.raises(InvalidState):
        engine.timeout(["j1"], now=T0 + 1)
    assert get(engine, "j1", T0 + 1).state == state


# -- priority -----------------------------------------------------------------------------


def test_priority_changes_the_jobs_priority(engine: Engine) -> None:
    require(engine, Capability.PRIORITY)
    engine.put("q", "j1", "Task", now=T0)
    engine.priority("j1", 7, now=T0 + 1)
    assert get(engine, "j1", T0 + 1).priority == 7


def test_priority_moves_a_waiting_job(engine: Engine) -> None:
    require(engine, Capability.PRIORITY)
    put_all(engine, "q", ["a", "b", "c"])

    engine.priority("c", 1, now=T0 + 1)
    engine.priority("a", -1, now=T0 + 1)

    assert pop_jids(engine, "q", count=3, now=T0 + 1) == ["c", "b", "a"]


def test_priority_of_a_running_job_is_kept_when_it_is_retried(engine: Engine) -> None:
    require(engine, Capability.PRIORITY)
    running(engine, "j1")
    engine.put("q", "other", "Task", now=T0)
    engine.priority("j1", 5, now=T0 + 1)
    engine.retry("j1", "q", "w1", now=T0 + 2)
    assert pop_jids(engine, "q", count=2, now=T0 + 2) == ["j1", "other"]


def test_priority_of_a_missing_job_raises_job_not_found(engine: Engine) -> None:
    require(engine, Capability.PRIORITY)
    with pytest.raises(JobNotFound):
        engine.priority("nope", 1, now=T0)
