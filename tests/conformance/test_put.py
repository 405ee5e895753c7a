"""put, requeue, put_many, get and multiget."""

from __future__ import annotations

import pytest

from lanner import (
    DEFAULT_RETRIES,
    Capability,
    Engine,
    JobNotFound,
    JobState,
    LockLost,
    MalformedArgument,
    NewJob,
)

from .helpers import T0, get, jids, pop_jids, require, running, whats


def test_put_returns_the_jid(engine: Engine) -> None:
    assert engine.put("q", "j1", "Task", now=T0) == "j1"


@pytest.mark.requires(Capability.LOOKUP)
def test_new_job_gets_the_documented_defaults(engine: Engine) -> None:
    engine.put("q", "j1", "app.Task", '{"a": 1}', now=T0)

    job = get(engine, "j1")
    assert job.jid == "j1"
    assert job.klass == "app.Task"
    assert job.queue == "q"
    assert job.decoded_data() == {"a": 1}
    assert job.state == JobState.WAITING
    assert job.priority == 0
    assert job.tags == ()
    assert job.retries == DEFAULT_RETRIES == 5
    assert job.remaining == DEFAULT_RETRIES
    assert job.worker == ""
    assert job.expires == 0
    assert job.failure is None
    assert job.dependencies == ()
    assert job.dependents == ()
    assert job.spawned_from_jid is None
    assert job.tracked is False


@pytest.mark.requires(Capability.LOOKUP)
def test_put_default_data_is_an_empty_object(engine: Engine) -> None:
    engine.put("q", "j1", "Task", now=T0)
    assert get(engine, "j1").decoded_data() == {}


@pytest.mark.requires(Capability.LOOKUP)
def test_put_keeps_the_data_text_as_given(engine: Engine) -> None:
    data = '{"z": [1, 2.5, "ü"], "a": null}'
    engine.put("q", "j1", "Task", data, now=T0)
    assert get(engine, "j1").data == data


@pytest.mark.requires(Capability.LOOKUP)
def test_put_records_a_put_history_entry_naming_the_queue(engine: Engine) -> None:
    engine.put("q", "j1", "Task", now=T0)

    (event,) = get(engine, "j1").history
    assert event.what == "put"
    assert event.when == T0
    assert event.details["q"] == "q"


@pytest.mark.requires(Capability.LOOKUP)
def test_put_with_retries_sets_retries_and_remaining(engine: Engine) -> None:
    engine.put("q", "j1", "Task", retries=2, now=T0)
    job = get(engine, "j1")
    assert (job.retries, job.remaining) == (2, 2)


@pytest.mark.requires(Capability.LOOKUP)
def test_put_with_zero_retries_is_allowed(engine: Engine) -> None:
    engine.put("q", "j1", "Task", retries=0, now=T0)
    assert get(engine, "j1").remaining == 0


def test_put_makes_the_queue_known(engine: Engine) -> None:
    engine.put("emails", "j1", "Task", now=T0)
    assert [q.name for q in engine.queues(now=T0)] == ["emails"]


@pytest.mark.requires(Capability.LOOKUP)
def test_put_with_delay_makes_the_job_scheduled(engine: Engine) -> None:
    require(engine, Capability.DELAY)
    engine.put("q", "j1", "Task", delay=10, now=T0)
    assert get(engine, "j1").state == JobState.SCHEDULED


def test_put_with_priority_sets_it(engine: Engine) -> None:
    require(engine, Capability.PRIORITY)
    engine.put("q", "j1", "Task", priority=-3, now=T0)
    assert get(engine, "j1").priority == -3


def test_put_with_tags_sets_them(engine: Engine) -> None:
    require(engine, Capability.TAGS)
    engine.put("q", "j1", "Task", tags=["a", "b"], now=T0)
    assert set(get(engine, "j1").tags) == {"a", "b"}


# -- re-put: moving a job -------------------------------------------------------------


@pytest.mark.requires(Capability.LOOKUP)
def test_reput_moves_the_job_to_the_new_queue(engine: Engine) -> None:
    engine.put("q1", "j1", "Task", now=T0)
    engine.put("q2", "j1", "Task", now=T0 + 1)

    assert get(engine, "j1").queue == "q2"
    assert engine.queue_counts("q1", now=T0 + 1).waiting == 0
    assert engine.queue_counts("q2", now=T0 + 1).waiting == 1
    assert pop_jids(engine, "q1", now=T0 + 1) == []
    assert pop_jids(engine, "q2", now=T0 + 1) == ["j1"]


@pytest.mark.requires(Capability.LOOKUP)
def test_reput_adds_a_second_put_history_entry(engine: Engine) -> None:
    engine.put("q1", "j1", "Task", now=T0)
    engine.put("q2", "j1", "Task", now=T0 + 1)

    history = get(engine, "j1").history
    assert [(e.what, e.when, e.details.get("q")) for e in history] == [
        ("put", T0, "q1"),
        ("put", T0 + 1, "q2"),
    ]


@pytest.mark.requires(Capability.LOOKUP)
def test_reput_replaces_klass_and_data(engine: Engine) -> None:
    engine.put("q", "j1", "Old", '{"v": 1}', now=T0)
    engine.put("q", "j1", "New", '{"v": 2}', now=T0 + 1)
    job = get(engine, "j1")
    assert (job.klass, job.decoded_data()) == ("New", {"v": 2})


@pytest.mark.requires(Capability.LOOKUP)
def test_reput_keeps_retries_when_not_given(engine: Engine) -> None:
    engine.put("q1", "j1", "Task", retries=2, now=T0)
    engine.put("q2", "j1", "Task", now=T0 + 1)
    assert get(engine, "j1").retries == 2


@pytest.mark.requires(Capability.LOOKUP)
def test_reput_replaces_retries_when_given(engine: Engine) -> None:
    engine.put("q1", "j1", "Task", retries=2, now=T0)
    engine.put("q2", "j1", "Task", retries=7, now=T0 + 1)
    job = get(engine, "j1")
    assert (job.retries, job.remaining) == (7, 7)


@pytest.mark.requires(Capability.LOOKUP)
def test_reput_resets_remaining_to_retries(engine: Engine) -> None:
    running(engine, "j1", retries=3)
    assert engine.retry("j1", "q", "w1", now=T0) == 2
    engine.put("q", "j1", "Task", now=T0 + 1)
    assert get(engine, "j1", T0 + 1).remaining == 3


def test_reput_keeps_priority_when_not_given(engine: Engine) -> None:
    require(engine, Capability.PRIORITY)
    engine.put("q1", "j1", "Task", priority=5, now=T0)
    engine.put("q2", "j1", "Task", now=T0 + 1)
    assert get(engine, "j1").priority == 5


def test_reput_replaces_priority_when_given(engine: Engine) -> None:
    require(engine, Capability.PRIORITY)
    engine.put("q1", "j1", "Task", priority=5, now=T0)
    engine.put("q2", "j1", "Task", priority=0, now=T0 + 1)
    assert get(engine, "j1").priority == 0


def test_reput_keeps_tags_when_not_given(engine: Engine) -> None:
    require(engine, Capability.TAGS)
    engine.put("q1", "j1", "Task", tags=["a"], now=T0)
    engine.put("q2", "j1", "Task", now=T0 + 1)
    assert get(engine, "j1").tags == ("a",)


def test_reput_replaces_tags_when_given(engine: Engine) -> None:
    require(engine, Capability.TAGS)
    engine.put("q1", "j1", "Task", tags=["a"], now=T0)
    engine.put("q2", "j1", "Task", tags=["b"], now=T0 + 1)
    assert get(engine, "j1").tags == ("b",)


@pytest.mark.requires(Capability.LOOKUP)
def test_reput_of_a_running_job_drops_its_lock(engine: Engine) -> None:
    running(engine, "j1", "q1")
    engine.put("q2", "j1", "Task", now=T0 + 1)

    job = get(engine, "j1", T0 + 1)
    assert job.state == JobState.WAITING
    assert job.worker == ""
    assert engine.queue_counts("q1", now=T0 + 1).running == 0
    with pytest.raises(LockLost):
        engine.complete("j1", "w1", "q1", now=T0 + 2)
    with pytest.raises(LockLost):
        engine.heartbeat("j1", "w1", now=T0 + 2)


@pytest.mark.requires(Capability.LOOKUP)
def test_reput_into_the_same_queue_drops_the_lock(engine: Engine) -> None:
    running(engine, "j1", "q")
    engine.put("q", "j1", "Task", now=T0 + 1)

    assert get(engine, "j1", T0 + 1).state == JobState.WAITING
    assert engine.queue_counts("q", now=T0 + 1).running == 0
    assert pop_jids(engine, "q", "w2", now=T0 + 2) == ["j1"]
    with pytest.raises(LockLost):
        engine.complete("j1", "w1", "q", now=T0 + 2)


@pytest.mark.requires(Capability.LOOKUP, Capability.FAILURES)
def test_reput_of_a_failed_job_drops_its_failure(engine: Engine) -> None:
    running(engine, "j1")
    engine.fail("j1", "w1", "boom", "it broke", now=T0)
    engine.put("q", "j1", "Task", now=T0 + 1)

    job = get(engine, "j1", T0 + 1)
    assert job.state == JobState.WAITING
    assert job.failure is None
    assert engine.failed_groups(now=T0 + 1).get("boom", 0) == 0
    assert engine.failed("boom", now=T0 + 1).total == 0


@pytest.mark.requires(Capability.LOOKUP, Capability.LISTING)
def test_reput_of_a_complete_job_makes_it_waiting_again(engine: Engine) -> None:
    running(engine, "j1")
    engine.complete("j1", "w1", "q", now=T0)
    engine.put("q", "j1", "Task", now=T0 + 1)

    assert get(engine, "j1", T0 + 1).state == JobState.WAITING
    assert "j1" not in engine.jobs("complete", now=T0 + 1)
    assert pop_jids(engine, "q", now=T0 + 1) == ["j1"]


@pytest.mark.requires(Capability.LOOKUP)
def test_reput_job_is_ready_at_its_new_put_time(engine: Engine) -> None:
    engine.put("q", "a", "Task", now=T0)
    engine.put("q", "b", "Task", now=T0)
    engine.put("q", "a", "Task", now=T0 + 1)
    assert pop_jids(engine, "q", count=2, now=T0 + 1) == ["b", "a"]


# -- requeue ------------------------------------------------------------------------------


@pytest.mark.requires(Capability.LOOKUP)
def test_requeue_of_a_missing_job_raises_job_not_found(engine: Engine) -> None:
    with pytest.raises(JobNotFound):
        engine.requeue("q", "nope", "Task", now=T0)
    assert engine.get("nope", now=T0) is None
    assert engine.queue_counts("q", now=T0).waiting == 0


@pytest.mark.requires(Capability.LOOKUP)
def test_requeue_moves_an_existing_job(engine: Engine) -> None:
    engine.put("q1", "j1", "Task", retries=2, now=T0)
    assert engine.requeue("q2", "j1", "Task", now=T0 + 1) == "j1"
    job = get(engine, "j1", T0 + 1)
    assert (job.queue, job.state, job.retries) == ("q2", JobState.WAITING, 2)


# -- put_many -----------------------------------------------------------------------------


@pytest.mark.requires(Capability.LOOKUP)
def test_put_many_stores_every_job_and_returns_their_jids(engine: Engine) -> None:
    batch = [NewJob("q", f"j{i}", "Task", f'{{"i": {i}}}') for i in range(5)]

    assert engine.put_many(batch, now=T0) == [f"j{i}" for i in range(5)]
    assert [job.decoded_data()["i"] for job in engine.multiget([j.jid for j in batch])] == list(
        range(5)
    )
    assert pop_jids(engine, "q", count=10) == [f"j{i}" for i in range(5)]


@pytest.mark.requires(Capability.LOOKUP)
def test_put_many_applies_per_job_options(engine: Engine) -> None:
    engine.put_many(
        [NewJob("a", "j1", "Task", retries=1), NewJob("b", "j2", "Other", retries=3)], now=T0
    )
    one, two = engine.multiget(["j1", "j2"], now=T0)
    assert (one.queue, one.retries) == ("a", 1)
    assert (two.queue, two.klass, two.retries) == ("b", "Other", 3)


@pytest.mark.requires(Capability.LOOKUP)
def test_put_many_takes_names_that_spell_an_option_value(engine: Engine) -> None:
    # "move" is if_exists's default: a queue, jid or task of that name is a name like any
    # (Redis once left out every field that read "move", refusing the job).
    assert engine.put_many([NewJob("move", "move", "move")], now=T0) == ["move"]
    (job,) = engine.multiget(["move"], now=T0)
    assert (job.queue, job.klass) == ("move", "move")


def test_put_many_of_nothing_returns_an_empty_list(engine: Engine) -> None:
    assert engine.put_many([], now=T0) == []


@pytest.mark.requires(Capability.LOOKUP)
@pytest.mark.parametrize(
    "bad",
    [
        NewJob("1bad", "bad", "Task"),
        NewJob("q", "bad", "Task", data="{not json"),
        NewJob("q", "bad", "Task", retries=-1),
        NewJob("q", "", "Task"),
    ],
    ids=["queue-name", "data", "retries", "jid"],
)
def test_put_many_with_one_bad_job_stores_nothing(engine: Engine, bad: NewJob) -> None:
    batch = [NewJob("q", "good1", "Task"), bad, NewJob("other", "good2", "Task")]

    with pytest.raises(MalformedArgument):
        engine.put_many(batch, now=T0)

    assert engine.multiget(["good1", "good2", "bad"], now=T0) == []
    assert engine.queues(now=T0) == []


@pytest.mark.requires(Capability.LOOKUP)
def test_put_many_with_too_large_data_stores_nothing(engine: Engine) -> None:
    too_big = '"' + "x" * engine.max_data_bytes + '"'
    batch = [NewJob("q", "good", "Task"), NewJob("q", "big", "Task", data=too_big)]

    with pytest.raises(MalformedArgument):
        engine.put_many(batch, now=T0)
    assert engine.multiget(["good", "big"], now=T0) == []


@pytest.mark.requires(Capability.LOOKUP)
def test_put_many_failing_leaves_existing_jobs_untouched(engine: Engine) -> None:
    engine.put("q1", "old", "Task", retries=1, now=T0)
    batch = [NewJob("q2", "old", "Task", retries=4), NewJob("q2", "x", "Task", data="nope")]

    with pytest.raises(MalformedArgument):
        engine.put_many(batch, now=T0 + 1)
    job = get(engine, "old", T0 + 1)
    assert (job.queue, job.retries, len(job.history)) == ("q1", 1, 1)


# -- get / multiget ---------------------------------------------------------------------


@pytest.mark.requires(Capability.LOOKUP)
def test_get_of_a_missing_job_returns_none(engine: Engine) -> None:
    assert engine.get("nope", now=T0) is None


@pytest.mark.requires(Capability.LOOKUP)
def test_multiget_returns_existing_jobs_in_the_order_asked(engine: Engine) -> None:
    for jid in ["a", "b", "c"]:
        engine.put("q", jid, "Task", now=T0)
    assert jids(engine.multiget(["c", "nope", "a", "b"], now=T0)) == ["c", "a", "b"]


@pytest.mark.requires(Capability.LOOKUP)
def test_history_of_a_new_job_is_one_put(engine: Engine) -> None:
    engine.put("q", "j1", "Task", now=T0)
    assert whats(get(engine, "j1")) == ["put"]
