"""Dependencies: put(depends=...), release on completion, depends_add / depends_remove."""

from __future__ import annotations

import pytest

from lanner import Capability, Engine, InvalidState, JobNotFound, JobState, NewJob

from .helpers import T0, get, in_state, pop_jids, require, running


@pytest.fixture(autouse=True)
def _needs_dependencies(engine: Engine) -> None:
    require(engine, Capability.DEPENDENCIES)


def test_job_with_an_unfinished_dependency_is_in_depends(engine: Engine) -> None:
    engine.put("q", "parent", "Task", now=T0)
    engine.put("q", "child", "Task", depends=["parent"], now=T0)

    child = get(engine, "child")
    assert child.state == JobState.DEPENDS
    assert child.dependencies == ("parent",)
    assert get(engine, "parent").dependents == ("child",)


def test_depending_job_is_not_popped(engine: Engine) -> None:
    engine.put("q", "parent", "Task", now=T0)
    engine.put("q", "child", "Task", depends=["parent"], now=T0)
    assert pop_jids(engine, "q", count=5) == ["parent"]
    assert pop_jids(engine, "q", count=5, now=T0 + 1) == []


def test_completing_the_dependency_releases_the_job(engine: Engine) -> None:
    running(engine, "parent")
    engine.put("q", "child", "Task", depends=["parent"], now=T0)

    engine.complete("parent", "w1", "q", now=T0 + 1)

    child = get(engine, "child", T0 + 1)
    assert child.state == JobState.WAITING
    assert child.dependencies == ()
    assert pop_jids(engine, "q", now=T0 + 1) == ["child"]


def test_job_waits_for_all_its_dependencies(engine: Engine) -> None:
    engine.put("q", "a", "Task", now=T0)
    engine.put("q", "b", "Task", now=T0)
    engine.put("q", "child", "Task", depends=["a", "b"], now=T0)
    pop_jids(engine, "q", count=2)

    engine.complete("a", "w1", "q", now=T0 + 1)
    child = get(engine, "child", T0 + 1)
    assert (child.state, child.dependencies) == (JobState.DEPENDS, ("b",))

    engine.complete("b", "w1", "q", now=T0 + 2)
    assert get(engine, "child", T0 + 2).state == JobState.WAITING


def test_released_job_with_a_pending_delay_is_scheduled(engine: Engine) -> None:
    require(engine, Capability.DELAY)
    running(engine, "parent")
    engine.put("q", "child", "Task", delay=100, depends=["parent"], now=T0)

    engine.complete("parent", "w1", "q", now=T0 + 10)

    assert get(engine, "child", T0 + 10).state == JobState.SCHEDULED
    assert pop_jids(engine, "q", now=T0 + 99) == []
    assert pop_jids(engine, "q", now=T0 + 100) == ["child"]


def test_released_job_whose_delay_has_passed_is_waiting(engine: Engine) -> None:
    require(engine, Capability.DELAY)
    running(engine, "parent")
    engine.put("q", "child", "Task", delay=5, depends=["parent"], now=T0)

    engine.complete("parent", "w1", "q", now=T0 + 10)

    assert pop_jids(engine, "q", now=T0 + 10) == ["child"]


def test_dependencies_on_missing_jobs_are_ignored(engine: Engine) -> None:
    engine.put("q", "child", "Task", depends=["ghost"], now=T0)
    child = get(engine, "child")
    assert (child.state, child.dependencies) == (JobState.WAITING, ())


def test_dependencies_on_complete_jobs_are_ignored(engine: Engine) -> None:
    in_state(engine, "complete", "parent")
    engine.put("q", "child", "Task", depends=["parent"], now=T0 + 1)
    child = get(engine, "child", T0 + 1)
    assert (child.state, child.dependencies) == (JobState.WAITING, ())


def test_a_failed_dependency_keeps_the_job_waiting_on_it(engine: Engine) -> None:
    running(engine, "parent")
    engine.put("q", "child", "Task", depends=["parent"], now=T0)
    engine.fail("parent", "w1", "boom", "broke", now=T0 + 1)
    assert get(engine, "child", T0 + 1).state == JobState.DEPENDS


@pytest.mark.requires(Capability.CROSS_QUEUE_DEPENDENCIES)
def test_reput_keeps_dependencies_when_not_given(engine: Engine) -> None:
    engine.put("q", "parent", "Task", now=T0)
    engine.put("q1", "child", "Task", depends=["parent"], now=T0)

    engine.put("q2", "child", "Task", now=T0 + 1)

    child = get(engine, "child", T0 + 1)
    assert (child.queue, child.state, child.dependencies) == ("q2", JobState.DEPENDS, ("parent",))
    assert engine.queue_counts("q2", now=T0 + 1).depends == 1
    assert engine.queue_counts("q1", now=T0 + 1).depends == 0


def test_reput_replaces_dependencies_when_given(engine: Engine) -> None:
    engine.put("q", "a", "Task", now=T0)
    engine.put("q", "b", "Task", now=T0)
    engine.put("q", "child", "Task", depends=["a"], now=T0)

    engine.put("q", "child", "Task", depends=["b"], now=T0 + 1)

    assert get(engine, "child", T0 + 1).dependencies == ("b",)
    assert get(engine, "a", T0 + 1).dependents == ()
    assert get(engine, "b", T0 + 1).dependents == ("child",)


def test_reput_with_no_dependencies_releases_the_job(engine: Engine) -> None:
    engine.put("q", "parent", "Task", now=T0)
    engine.put("q", "child", "Task", depends=["parent"], now=T0)

    engine.put("q", "child", "Task", depends=[], now=T0 + 1)

    assert get(engine, "child", T0 + 1).state == JobState.WAITING
    assert get(engine, "parent", T0 + 1).dependents == ()


@pytest.mark.requires(Capability.CROSS_QUEUE_DEPENDENCIES)
def test_complete_with_next_and_depends_waits_in_next(engine: Engine) -> None:
    engine.put("q", "other", "Task", now=T0)
    running(engine, "j1", queue="q1")

    assert engine.complete("j1", "w1", "q1", next="q2", depends=["other"], now=T0 + 1) == "depends"

    job = get(engine, "j1", T0 + 1)
    assert (job.queue, job.state, job.dependencies) == ("q2", JobState.DEPENDS, ("other",))


@pytest.mark.requires(Capability.CROSS_QUEUE_DEPENDENCIES)
def test_dependents_are_released_when_the_job_is_advanced_then_completed(engine: Engine) -> None:
    running(engine, "parent", queue="q1")
    engine.put("q", "child", "Task", depends=["parent"], now=T0)

    engine.complete("parent", "w1", "q1", next="q2", now=T0 + 1)
    assert get(engine, "child", T0 + 1).state == JobState.DEPENDS

    pop_jids(engine, "q2", now=T0 + 2)
    engine.complete("parent", "w1", "q2", now=T0 + 2)
    assert get(engine, "child", T0 + 2).state == JobState.WAITING


# -- depends_add / depends_remove -------------------------------------------------------


def test_depends_add_adds_dependencies(engine: Engine) -> None:
    engine.put("q", "a", "Task", now=T0)
    engine.put("q", "b", "Task", now=T0)
    engine.put("q", "child", "Task", depends=["a"], now=T0)

    engine.depends_add("child", ["b"], now=T0 + 1)

    assert set(get(engine, "child", T0 + 1).dependencies) == {"a", "b"}
    assert get(engine, "b", T0 + 1).dependents == ("child",)


def test_depends_add_on_a_job_not_in_depends_is_invalid_state(engine: Engine) -> None:
    engine.put("q", "a", "Task", now=T0)
    engine.put("q", "j1", "Task", now=T0)
    with pytest.raises(InvalidState):
        engine.depends_add("j1", ["a"], now=T0 + 1)
    assert get(engine, "j1", T0 + 1).dependencies == ()


def test_depends_add_on_a_missing_job_raises_job_not_found(engine: Engine) -> None:
    with pytest.raises(JobNotFound):
        engine.depends_add("nope", ["a"], now=T0)


def test_depends_remove_some_keeps_the_rest(engine: Engine) -> None:
    engine.put("q", "a", "Task", now=T0)
    engine.put("q", "b", "Task", now=T0)
    engine.put("q", "child", "Task", depends=["a", "b"], now=T0)

    engine.depends_remove("child", ["a"], now=T0 + 1)

    child = get(engine, "child", T0 + 1)
    assert (child.state, child.dependencies) == (JobState.DEPENDS, ("b",))
    assert get(engine, "a", T0 + 1).dependents == ()


def test_depends_remove_of_the_last_dependency_releases_the_job(engine: Engine) -> None:
    engine.put("q", "a", "Task", now=T0)
    engine.put("q", "child", "Task", depends=["a"], now=T0)

    engine.depends_remove("child", ["a"], now=T0 + 1)

    assert get(engine, "child", T0 + 1).state == JobState.WAITING
    assert pop_jids(engine, "q", count=2, now=T0 + 1) == ["a", "child"]


def test_depends_remove_none_drops_every_dependency(engine: Engine) -> None:
    engine.put("q", "a", "Task", now=T0)
    engine.put("q", "b", "Task", now=T0)
    engine.put("q", "child", "Task", depends=["a", "b"], now=T0)

    engine.depends_remove("child", None, now=T0 + 1)

    child = get(engine, "child", T0 + 1)
    assert (child.state, child.dependencies) == (JobState.WAITING, ())


def test_depends_remove_on_a_job_not_in_depends_is_invalid_state(engine: Engine) -> None:
    engine.put("q", "j1", "Task", now=T0)
    with pytest.raises(InvalidState):
        engine.depends_remove("j1", None, now=T0 + 1)


def test_a_put_many_job_depends_on_jobs_put_before_it_in_the_batch(engine: Engine) -> None:
    running(engine, "done-before")
    engine.complete("done-before", "w1", "q", now=T0)
    parents = [f"p{n}" for n in range(3)]
    engine.put_many(
        [NewJob("q", jid, "Task") for jid in parents]
        + [NewJob("q", "cb", "Task", depends=[*parents, "done-before", "missing"])],
        now=T0 + 1,
    )

    callback = get(engine, "cb", T0 + 1)
    assert callback.state == JobState.DEPENDS
    assert sorted(callback.dependencies) == parents
    assert all(get(engine, jid, T0 + 1).dependents == ("cb",) for jid in parents)
    for jid in pop_jids(engine, "q", count=5, now=T0 + 2):
        engine.complete(jid, "w1", "q", now=T0 + 3)
    assert get(engine, "cb", T0 + 3).state == JobState.WAITING
