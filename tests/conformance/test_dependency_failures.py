"""A failed dependency: dependents carrying CASCADE_TAG fail with it, atomically, and down
the line; the others wait, as in qless. Every way a job fails for good counts: `fail`,
`retry` with no retries left, and a lock that ran out with no retries left (at a pop)."""

from __future__ import annotations

import pytest

from lanner import Capability, Engine, JobState
from lanner.job import CASCADE_TAG, DEPENDENCY_FAILED_GROUP

from .helpers import GRACE, HEARTBEAT, T0, get, pop_jids, require, running


@pytest.fixture(autouse=True)
def _needs_dependencies(engine: Engine) -> None:
    require(engine, Capability.DEPENDENCIES, Capability.TAGS)


def _dependent(engine: Engine, jid: str, on: list[str], queue: str = "q") -> None:
    engine.put(queue, jid, "Task", depends=on, tags=[CASCADE_TAG], now=T0)


def test_a_tagged_dependent_fails_in_the_call_that_fails_its_dependency(engine: Engine) -> None:
    running(engine, "parent")
    _dependent(engine, "child", ["parent"])

    engine.fail("parent", "w1", "boom", "broke", now=T0 + 1)

    child = get(engine, "child", T0 + 1)
    assert child.state == JobState.FAILED
    assert child.failure is not None
    assert child.failure.group == DEPENDENCY_FAILED_GROUP
    assert "parent" in child.failure.message
    assert "boom" in child.failure.message
    assert "broke" in child.failure.message
    assert engine.queue_counts("q", now=T0 + 1).depends == 0


@pytest.mark.requires(Capability.CROSS_QUEUE_DEPENDENCIES)
def test_the_failure_goes_down_a_chain_naming_the_first_job_that_failed(engine: Engine) -> None:
    running(engine, "a")
    _dependent(engine, "b", ["a"], queue="q2")
    _dependent(engine, "c", ["b"], queue="q3")

    engine.fail("a", "w1", "boom", "broke", now=T0 + 1)

    for jid in ("b", "c"):
        job = get(engine, jid, T0 + 1)
        assert job.state == JobState.FAILED
        assert job.failure is not None
        assert "dependency a failed" in job.failure.message


def test_a_dependent_without_the_tag_keeps_waiting(engine: Engine) -> None:
    running(engine, "parent")
    engine.put("q", "plain", "Task", depends=["parent"], now=T0)
    _dependent(engine, "tagged", ["parent"])

    engine.fail("parent", "w1", "boom", "broke", now=T0 + 1)

    assert get(engine, "plain", T0 + 1).state == JobState.DEPENDS
    assert get(engine, "tagged", T0 + 1).state == JobState.FAILED


@pytest.mark.requires(Capability.CROSS_QUEUE_DEPENDENCIES)
def test_a_dependent_of_many_fails_with_the_first_that_fails(engine: Engine) -> None:
    engine.put("q", "a", "Task", now=T0)
    engine.put("q", "b", "Task", now=T0)
    _dependent(engine, "chord", ["a", "b"], queue="q2")
    assert sorted(pop_jids(engine, "q", count=2)) == ["a", "b"]

    engine.complete("a", "w1", "q", now=T0 + 1)
    engine.fail("b", "w1", "boom", "broke", now=T0 + 2)

    chord = get(engine, "chord", T0 + 2)
    assert chord.state == JobState.FAILED
    assert chord.failure is not None
    assert "dependency b failed" in chord.failure.message
    groups = engine.failed_groups(now=T0 + 2) if Capability.FAILURES in engine.capabilities else {}
    assert groups.get(DEPENDENCY_FAILED_GROUP, 1) == 1


def test_retries_running_out_fail_the_dependents(engine: Engine) -> None:
    running(engine, "parent", retries=0)
    _dependent(engine, "child", ["parent"])

    assert engine.retry("parent", "q", "w1", now=T0 + 1) < 0

    assert get(engine, "child", T0 + 1).state == JobState.FAILED


@pytest.mark.driven_clock
def test_a_lock_running_out_with_no_retries_left_fails_the_dependents(engine: Engine) -> None:
    running(engine, "parent", retries=0)
    _dependent(engine, "child", ["parent"])
    expired = T0 + HEARTBEAT + 1
    late = expired + GRACE  # qless gives the lock its grace period first

    pop_jids(engine, "q", worker="w2", count=5, now=expired)
    pop_jids(engine, "q", worker="w2", count=5, now=late)

    assert get(engine, "parent", late).state == JobState.FAILED
    assert get(engine, "child", late).state == JobState.FAILED


def test_a_completed_dependency_still_releases_a_tagged_dependent(engine: Engine) -> None:
    running(engine, "parent")
    _dependent(engine, "child", ["parent"])

    engine.complete("parent", "w1", "q", now=T0 + 1)

    assert get(engine, "child", T0 + 1).state == JobState.WAITING


def test_a_failed_dependent_is_waited_for_no_longer(engine: Engine) -> None:
    require(engine, Capability.WAIT)
    running(engine, "parent")
    _dependent(engine, "child", ["parent"])
    engine.fail("parent", "w1", "boom", "broke", now=T0 + 1)

    job = engine.wait("child", timeout=5)
    assert job is not None
    assert job.state == JobState.FAILED


def test_put_many_may_depend_on_a_job_put_before_it_in_the_same_call(engine: Engine) -> None:
    from lanner import NewJob

    engine.put_many(
        [
            NewJob("q", "a", "Task"),
            NewJob("q", "b", "Task"),
            NewJob("q", "chord", "Task", depends=["a", "b"], tags=[CASCADE_TAG]),
        ],
        now=T0,
    )

    chord = get(engine, "chord")
    assert (chord.state, sorted(chord.dependencies)) == (JobState.DEPENDS, ["a", "b"])
    assert sorted(pop_jids(engine, "q", count=5)) == ["a", "b"]
    engine.complete("a", "w1", "q", now=T0 + 1)
    engine.complete("b", "w1", "q", now=T0 + 1)
    assert get(engine, "chord", T0 + 1).state == JobState.WAITING
