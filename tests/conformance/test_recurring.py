"""Recurring jobs (capability `recurring`): templates that spawn `<jid>-<n>` on each pop.

A template made at T0 with interval 60 has runs due at T0, T0 + 60, T0 + 120, ...
"""

from __future__ import annotations

import pytest

from lanner import (
    Capability,
    Engine,
    JobState,
)

from .helpers import T0, get, jids, pop_jids, require
from .recurring import INTERVAL, put_times, recur, runs, template

pytestmark = pytest.mark.requires(Capability.RECURRING)


@pytest.fixture(autouse=True)
def _long_locks(engine: Engine) -> None:
    """Jobs popped at T0 keep their locks through every test (no grace periods to reason about)."""
    engine.config_set("heartbeat", 3600, now=T0)


# -- spawning -----------------------------------------------------------------------------


def test_recurring_job_spawns_jobs_named_after_it(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    engine.recur("q", "rec", "Task", '{"n": 1}', 60.0, now=T0)

    (job,) = engine.pop("q", "w1", now=T0)

    assert job.jid == "rec-1"
    assert job.spawned_from_jid == "rec"
    assert job.decoded_data() == {"n": 1}
    assert pop_jids(engine, "q", now=T0 + 59) == []
    assert pop_jids(engine, "q", now=T0 + 60) == ["rec-2"]


def test_recur_get_and_unrecur(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    engine.recur("q", "rec", "Task", "{}", 60.0, now=T0)
    template = engine.recur_get("rec", now=T0)
    assert template is not None
    assert (template.queue, template.klass, template.interval) == ("q", "Task", 60.0)
    engine.unrecur("rec", now=T0)
    assert engine.recur_get("rec", now=T0) is None


def test_spawning_follows_the_interval(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    engine.recur("q", "rec", "Task", '{"n": 1}', INTERVAL, now=T0)

    (job,) = engine.pop("q", "w1", 10, now=T0)

    assert job.jid == "rec-1"
    assert job.spawned_from_jid == "rec"
    assert (job.klass, job.queue, job.state) == ("Task", "q", JobState.RUNNING)
    assert job.decoded_data() == {"n": 1}
    assert pop_jids(engine, "q", count=10, now=T0 + 59) == []
    assert pop_jids(engine, "q", count=10, now=T0 + 61) == ["rec-2"]


def test_the_run_due_at_the_pop_time_is_spawned(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine)
    assert pop_jids(engine, "q", count=10, now=T0) == ["rec-1"]
    assert pop_jids(engine, "q", count=10, now=T0 + INTERVAL) == ["rec-2"]


def test_spawned_job_is_stored_with_its_template(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine)
    pop_jids(engine, "q", now=T0)
    job = get(engine, "rec-1")
    assert job.spawned_from_jid == "rec"
    assert (job.state, job.worker) == (JobState.RUNNING, "w1")


def test_offset_delays_the_first_run(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine, offset=10.0)
    assert pop_jids(engine, "q", count=10, now=T0 + 9) == []
    assert pop_jids(engine, "q", count=10, now=T0 + 11) == ["rec-1"]
    assert pop_jids(engine, "q", count=10, now=T0 + 69) == []
    assert pop_jids(engine, "q", count=10, now=T0 + 71) == ["rec-2"]


def test_spawned_jobs_carry_the_template_tags(engine: Engine) -> None:
    require(engine, Capability.RECURRING, Capability.TAGS)
    recur(engine, tags=["foo", "bar"])
    (job,) = engine.pop("q", "w1", 10, now=T0)
    assert job.tags == ("foo", "bar")


def test_spawned_jobs_carry_the_template_priority(engine: Engine) -> None:
    require(engine, Capability.RECURRING, Capability.PRIORITY)
    engine.put("q", "low", "Task", priority=0, now=T0)
    recur(engine, jid="high", priority=10)

    popped = engine.pop("q", "w1", 10, now=T0)

    assert jids(popped) == ["high-1", "low"]
    assert popped[0].priority == 10


def test_spawned_jobs_carry_the_template_retries(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine, retries=2)
    (job,) = engine.pop("q", "w1", 10, now=T0)
    assert (job.retries, job.remaining) == (2, 2)


def test_spawned_jobs_get_no_retries_by_default(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine)
    (job,) = engine.pop("q", "w1", 10, now=T0)
    assert (job.retries, job.remaining) == (0, 0)


def test_every_due_run_is_spawned(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine)
    assert pop_jids(engine, "q", count=10, now=T0 + 599) == runs(1, 10)
    assert template(engine, now=T0 + 599).count == 10


def test_a_pop_spawns_every_due_run_even_when_it_takes_fewer(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine)
    later = T0 + 599
    assert pop_jids(engine, "q", count=1, now=later) == ["rec-1"]
    assert template(engine, now=later).count == 10
    assert engine.jobs("waiting", "q", now=later) == runs(2, 10)
    assert get(engine, "rec-2", later).state == JobState.WAITING
    assert get(engine, "rec-2", later).spawned_from_jid == "rec"


def test_spawned_jobs_are_put_at_the_time_their_run_was_due(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine)
    later = T0 + 599
    spawned = pop_jids(engine, "q", count=100, now=later)
    assert put_times(engine, spawned, later) == [T0 + 60 * n for n in range(10)]
    assert get(engine, "rec-1", later).history[0].details["q"] == "q"


def test_backlog_spawns_only_the_latest_missed_runs(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine, backlog=1)
    later = T0 + 600
    spawned = pop_jids(engine, "q", count=10, now=later)
    assert spawned == ["rec-1", "rec-2"]
    assert put_times(engine, spawned, later) == [T0 + 540, T0 + 600]
    assert template(engine, now=later).count == 2


def test_backlog_between_runs(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine, backlog=2)
    later = T0 + 590
    spawned = pop_jids(engine, "q", count=10, now=later)
    assert spawned == ["rec-1", "rec-2"]
    assert put_times(engine, spawned, later) == [T0 + 480, T0 + 540]


def test_backlog_larger_than_the_missed_runs_spawns_them_all(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine, backlog=5)
    assert pop_jids(engine, "q", count=10, now=T0 + 150) == runs(1, 3)


def test_at_most_1000_runs_are_spawned_per_pop(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    engine.recur("q", "rec", "Task", "{}", 1.0, now=T0)
    later = T0 + 1999.5  # 2000 runs due
    assert pop_jids(engine, "q", now=later) == ["rec-1"]
    assert template(engine, now=later).count == 1000
    assert pop_jids(engine, "q", now=later) == ["rec-2"]
    assert template(engine, now=later).count == 2000
    assert engine.queue_counts("q", now=later).waiting == 1998


def test_peek_does_not_spawn(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine)
    later = T0 + 600
    engine.peek("q", 10, now=later)
    assert template(engine, now=later).count == 0
    assert engine.get("rec-1", now=later) is None
    assert engine.queue_counts("q", now=later).waiting == 0
    assert pop_jids(engine, "q", count=100, now=later) == runs(1, 11)


def test_a_pop_of_another_queue_does_not_spawn(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine)
    assert pop_jids(engine, "other", count=10, now=T0 + 120) == []
    assert template(engine, now=T0 + 120).count == 0
