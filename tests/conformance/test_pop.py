"""pop and peek: what is given, in which order, and what a pop changes."""

from __future__ import annotations

import pytest

from lanner import Capability, Engine, JobState

from .helpers import HEARTBEAT, T0, get, jids, pop_jids, put_all, require, whats


def test_pop_of_an_empty_queue_gives_nothing(engine: Engine) -> None:
    assert engine.pop("q", "w1", now=T0) == []


@pytest.mark.requires(Capability.LOOKUP)
def test_pop_of_an_unknown_queue_gives_nothing(engine: Engine) -> None:
    engine.put("q", "j1", "Task", now=T0)
    assert engine.pop("other", "w1", now=T0) == []
    assert get(engine, "j1").state == JobState.WAITING


def test_pop_locks_the_job_for_the_worker(engine: Engine) -> None:
    engine.put("q", "j1", "Task", '{"x": 1}', now=T0)

    (job,) = engine.pop("q", "w1", now=T0 + 5)

    assert job.jid == "j1"
    assert job.state == JobState.RUNNING
    assert job.worker == "w1"
    assert job.expires == T0 + 5 + HEARTBEAT
    assert job.decoded_data() == {"x": 1}
    assert job.queue == "q"


@pytest.mark.requires(Capability.LOOKUP)
def test_popped_state_is_stored(engine: Engine) -> None:
    engine.put("q", "j1", "Task", now=T0)
    engine.pop("q", "w1", now=T0 + 5)

    job = get(engine, "j1", T0 + 5)
    assert (job.state, job.worker, job.expires) == (JobState.RUNNING, "w1", T0 + 5 + HEARTBEAT)


@pytest.mark.requires(Capability.LOOKUP)
def test_pop_adds_a_popped_history_entry_naming_the_worker(engine: Engine) -> None:
    engine.put("q", "j1", "Task", now=T0)
    engine.pop("q", "w1", now=T0 + 5)

    event = get(engine, "j1", T0 + 5).history[-1]
    assert (event.what, event.when, event.details["worker"]) == ("popped", T0 + 5, "w1")


def test_a_popped_job_is_not_given_again(engine: Engine) -> None:
    engine.put("q", "j1", "Task", now=T0)
    assert pop_jids(engine, "q", "w1") == ["j1"]
    assert pop_jids(engine, "q", "w2", now=T0 + 1) == []


def test_pop_gives_at_most_count_jobs(engine: Engine) -> None:
    put_all(engine, "q", ["a", "b", "c"])
    assert pop_jids(engine, "q", count=2) == ["a", "b"]
    assert pop_jids(engine, "q", count=2) == ["c"]
    assert pop_jids(engine, "q", count=2) == []


def test_equal_priority_jobs_put_at_the_same_time_pop_in_insertion_order(engine: Engine) -> None:
    order = ["m", "c", "x", "a", "b", "z", "k"]
    put_all(engine, "q", order)
    assert pop_jids(engine, "q", count=10) == order


def test_equal_priority_jobs_pop_by_put_time(engine: Engine) -> None:
    engine.put("q", "b", "Task", now=T0)
    engine.put("q", "a", "Task", now=T0 + 1)
    engine.put("q", "c", "Task", now=T0 + 2)
    assert pop_jids(engine, "q", count=3, now=T0 + 3) == ["b", "a", "c"]


def test_pop_one_at_a_time_keeps_the_same_order(engine: Engine) -> None:
    order = ["m", "c", "x", "a"]
    put_all(engine, "q", order)
    assert [pop_jids(engine, "q")[0] for _ in order] == order


def test_higher_priority_pops_first(engine: Engine) -> None:
    require(engine, Capability.PRIORITY)
    engine.put("q", "low", "Task", priority=-5, now=T0)
    engine.put("q", "mid", "Task", now=T0)
    engine.put("q", "high", "Task", priority=10, now=T0)
    engine.put("q", "higher", "Task", priority=11, now=T0)
    assert pop_jids(engine, "q", count=4) == ["higher", "high", "mid", "low"]


def test_priority_beats_age(engine: Engine) -> None:
    require(engine, Capability.PRIORITY)
    engine.put("q", "old", "Task", now=T0)
    engine.put("q", "new", "Task", priority=1, now=T0 + 100)
    assert pop_jids(engine, "q", count=2, now=T0 + 100) == ["new", "old"]


def test_within_a_priority_jobs_pop_in_insertion_order(engine: Engine) -> None:
    require(engine, Capability.PRIORITY)
    for jid, priority in [("c", 1), ("x", 2), ("a", 1), ("y", 2), ("b", 1)]:
        engine.put("q", jid, "Task", priority=priority, now=T0)
    assert pop_jids(engine, "q", count=5) == ["x", "y", "c", "a", "b"]


def test_pop_takes_only_from_its_queue(engine: Engine) -> None:
    engine.put("q1", "a", "Task", now=T0)
    engine.put("q2", "b", "Task", now=T0)
    assert pop_jids(engine, "q2", count=5) == ["b"]
    assert pop_jids(engine, "q1", count=5) == ["a"]


# -- scheduled jobs -----------------------------------------------------------------------


@pytest.mark.requires(Capability.LOOKUP)
def test_scheduled_job_is_not_given_before_it_is_due(engine: Engine) -> None:
    require(engine, Capability.DELAY)
    engine.put("q", "j1", "Task", delay=10, now=T0)
    assert pop_jids(engine, "q", now=T0 + 9.5) == []
    assert get(engine, "j1", T0 + 9.5).state == JobState.SCHEDULED


@pytest.mark.requires(Capability.LOOKUP)
def test_scheduled_job_is_given_once_due(engine: Engine) -> None:
    require(engine, Capability.DELAY)
    engine.put("q", "j1", "Task", delay=10, now=T0)
    assert pop_jids(engine, "q", now=T0 + 10) == ["j1"]
    assert get(engine, "j1", T0 + 10).state == JobState.RUNNING


@pytest.mark.driven_clock
def test_delayed_job_is_ordered_by_its_due_time_after_earlier_ready_jobs(engine: Engine) -> None:
    require(engine, Capability.DELAY)
    engine.put("q", "delayed", "Task", delay=10, now=T0)  # ready at T0 + 10
    engine.put("q", "plain", "Task", now=T0 + 5)  # ready at T0 + 5
    assert pop_jids(engine, "q", count=2, now=T0 + 20) == ["plain", "delayed"]


@pytest.mark.driven_clock
def test_delayed_job_is_ordered_by_its_due_time_before_later_ready_jobs(engine: Engine) -> None:
    require(engine, Capability.DELAY)
    engine.put("q", "delayed", "Task", delay=5, now=T0)  # ready at T0 + 5
    engine.put("q", "plain", "Task", now=T0 + 8)  # ready at T0 + 8
    assert pop_jids(engine, "q", count=2, now=T0 + 20) == ["delayed", "plain"]


@pytest.mark.driven_clock
def test_jobs_due_at_the_same_time_pop_in_insertion_order(engine: Engine) -> None:
    require(engine, Capability.DELAY)
    engine.put("q", "b", "Task", delay=10, now=T0)  # due T0 + 10
    engine.put("q", "a", "Task", delay=5, now=T0 + 5)  # due T0 + 10 too
    engine.put("q", "c", "Task", now=T0 + 10)  # ready T0 + 10, put last
    assert pop_jids(engine, "q", count=3, now=T0 + 20) == ["b", "a", "c"]


def test_priority_orders_due_scheduled_jobs_too(engine: Engine) -> None:
    require(engine, Capability.DELAY, Capability.PRIORITY)
    engine.put("q", "plain", "Task", now=T0)
    engine.put("q", "urgent", "Task", delay=5, priority=3, now=T0)
    assert pop_jids(engine, "q", count=2, now=T0 + 5) == ["urgent", "plain"]


# -- peek ---------------------------------------------------------------------------------


@pytest.mark.requires(Capability.LOOKUP, Capability.LISTING)
def test_peek_gives_what_pop_would_without_locking(engine: Engine) -> None:
    put_all(engine, "q", ["a", "b", "c"])

    peeked = engine.peek("q", 2, now=T0)

    assert jids(peeked) == ["a", "b"]
    assert all(job.state == JobState.WAITING for job in peeked)
    assert get(engine, "a").state == JobState.WAITING
    assert whats(get(engine, "a")) == ["put"]
    assert engine.queue_counts("q", now=T0).running == 0
    assert pop_jids(engine, "q", count=2) == ["a", "b"]


@pytest.mark.requires(Capability.LISTING)
def test_peek_defaults_to_one_job(engine: Engine) -> None:
    put_all(engine, "q", ["a", "b"])
    assert jids(engine.peek("q", now=T0)) == ["a"]


def test_peek_follows_priority(engine: Engine) -> None:
    require(engine, Capability.PRIORITY)
    engine.put("q", "low", "Task", now=T0)
    engine.put("q", "high", "Task", priority=2, now=T0)
    assert jids(engine.peek("q", 5, now=T0)) == ["high", "low"]


@pytest.mark.requires(Capability.LISTING)
def test_peek_of_an_empty_queue_gives_nothing(engine: Engine) -> None:
    assert engine.peek("q", 3, now=T0) == []


@pytest.mark.requires(Capability.LISTING)
def test_peek_shows_a_scheduled_job_once_due(engine: Engine) -> None:
    require(engine, Capability.DELAY)
    engine.put("q", "j1", "Task", delay=10, now=T0)
    assert engine.peek("q", now=T0 + 9) == []
    assert jids(engine.peek("q", now=T0 + 10)) == ["j1"]


@pytest.mark.requires(Capability.LISTING)
def test_peek_does_not_show_running_jobs(engine: Engine) -> None:
    put_all(engine, "q", ["a", "b"])
    pop_jids(engine, "q")
    assert jids(engine.peek("q", 5, now=T0)) == ["b"]
