"""Recurring jobs (capability `recurring`): reading, changing, tagging and deleting templates.

A template made at T0 with interval 60 has runs due at T0, T0 + 60, T0 + 120, ...
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import pytest

from lanner import (
    Capability,
    Engine,
    InvalidName,
    JobState,
    MalformedArgument,
    RecurringJob,
)

from .helpers import T0, get, pop_jids, require
from .recurring import INTERVAL, put_times, recur, runs, template

pytestmark = pytest.mark.requires(Capability.RECURRING)


@pytest.fixture(autouse=True)
def _long_locks(engine: Engine) -> None:
    """Jobs popped at T0 keep their locks through every test (no grace periods to reason about)."""
    engine.config_set("heartbeat", 3600, now=T0)


# -- recur_get ----------------------------------------------------------------------------


def test_recur_get_gives_the_template(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    data = '{"a": 1}'
    engine.recur(
        "q", "rec", "Task", data, INTERVAL, priority=3, tags=["x"], retries=2, backlog=4, now=T0
    )
    found = template(engine)
    assert json.loads(found.data) == {"a": 1}
    assert replace(found, data=data) == RecurringJob(
        jid="rec",
        klass="Task",
        queue="q",
        data=data,
        priority=3,
        tags=("x",),
        retries=2,
        interval=60.0,
        count=0,
        backlog=4,
    )


def test_recur_get_defaults(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine)
    found = template(engine)
    assert (found.priority, found.tags, found.retries, found.backlog) == (0, (), 0, 0)
    assert (found.interval, found.count) == (60.0, 0)
    assert json.loads(found.data) == {}


def test_recur_get_counts_spawned_jobs(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine)
    pop_jids(engine, "q", now=T0 + 130)
    assert template(engine, now=T0 + 130).count == 3


def test_recur_get_of_an_unknown_jid_is_none(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    assert engine.recur_get("nope", now=T0) is None
    engine.put("q", "job", "Task", now=T0)
    assert engine.recur_get("job", now=T0) is None


# -- recur_update -------------------------------------------------------------------------


def test_recur_update_priority(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine)
    assert engine.pop("q", "w1", 10, now=T0)[0].priority == 0
    engine.recur_update("rec", {"priority": 10}, now=T0)
    assert template(engine).priority == 10
    assert engine.pop("q", "w1", 10, now=T0 + 60)[0].priority == 10


def test_recur_update_interval_moves_the_next_run(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine)
    assert pop_jids(engine, "q", count=10, now=T0) == ["rec-1"]
    engine.recur_update("rec", {"interval": 10}, now=T0)
    assert template(engine).interval == 10.0
    later = T0 + 60
    spawned = pop_jids(engine, "q", count=10, now=later)
    assert spawned == runs(2, 7)
    assert put_times(engine, spawned, later) == [T0 + 10 * n for n in range(1, 7)]


def test_recur_update_retries(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine, retries=5)
    assert engine.pop("q", "w1", 10, now=T0)[0].retries == 5
    engine.recur_update("rec", {"retries": 2}, now=T0)
    assert template(engine).retries == 2
    job = engine.pop("q", "w1", 10, now=T0 + 60)[0]
    assert (job.retries, job.remaining) == (2, 2)


def test_recur_update_data(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine)
    assert engine.pop("q", "w1", 10, now=T0)[0].decoded_data() == {}
    engine.recur_update("rec", {"data": '{"foo": "bar"}'}, now=T0)
    assert json.loads(template(engine).data) == {"foo": "bar"}
    assert engine.pop("q", "w1", 10, now=T0 + 60)[0].decoded_data() == {"foo": "bar"}


def test_recur_update_klass(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine)
    assert engine.pop("q", "w1", 10, now=T0)[0].klass == "Task"
    engine.recur_update("rec", {"klass": "Other"}, now=T0)
    assert template(engine).klass == "Other"
    assert engine.pop("q", "w1", 10, now=T0 + 60)[0].klass == "Other"


def test_recur_update_queue_moves_the_template(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine)
    assert pop_jids(engine, "q", count=10, now=T0) == ["rec-1"]
    engine.recur_update("rec", {"queue": "other"}, now=T0)
    assert template(engine).queue == "other"
    assert pop_jids(engine, "q", count=10, now=T0 + 60) == []
    assert pop_jids(engine, "other", count=10, now=T0 + 60) == ["rec-2"]
    assert engine.queue_counts("q", now=T0 + 60).recurring == 0
    assert engine.queue_counts("other", now=T0 + 60).recurring == 1


def test_recur_update_backlog(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine)
    assert pop_jids(engine, "q", count=10, now=T0) == ["rec-1"]
    engine.recur_update("rec", {"backlog": 1}, now=T0)
    assert template(engine).backlog == 1
    later = T0 + 600
    spawned = pop_jids(engine, "q", count=10, now=later)
    assert spawned == ["rec-2", "rec-3"]
    assert put_times(engine, spawned, later) == [T0 + 540, T0 + 600]


def test_recur_update_of_several_keys(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine)
    engine.recur_update("rec", {"priority": 4, "klass": "Other", "retries": 1}, now=T0)
    found = template(engine)
    assert (found.priority, found.klass, found.retries) == (4, "Other", 1)


BAD_UPDATES: dict[str, Mapping[str, object]] = {
    "unknown-key": {"bogus": 1},
    "good-and-unknown": {"priority": 5, "bogus": 1},
    "count": {"count": 5},
    "priority-str": {"priority": "foo"},
    "priority-float": {"priority": 1.5},
    "priority-none": {"priority": None},
    "interval-zero": {"interval": 0},
    "interval-negative": {"interval": -10},
    "interval-nan": {"interval": math.nan},
    "interval-str": {"interval": "foo"},
    "retries-negative": {"retries": -1},
    "retries-str": {"retries": "foo"},
    "data-not-json": {"data": "[}"},
    "data-not-str": {"data": {"a": 1}},
    "klass-empty": {"klass": ""},
    "klass-none": {"klass": None},
    "queue-bad-name": {"queue": "1bad"},
    "queue-none": {"queue": None},
    "backlog-negative": {"backlog": -1},
    "backlog-str": {"backlog": "foo"},
}


@pytest.mark.parametrize("case", sorted(BAD_UPDATES))
def test_bad_recur_update_is_malformed_and_changes_nothing(engine: Engine, case: str) -> None:
    require(engine, Capability.RECURRING)
    recur(engine, priority=1, retries=3, backlog=2)
    before = template(engine)
    with pytest.raises(MalformedArgument):
        engine.recur_update("rec", BAD_UPDATES[case], now=T0)
    assert template(engine) == before
    assert engine.queue_counts("q", now=T0).recurring == 1


def test_recur_update_to_a_bad_queue_name_is_an_invalid_name(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine)
    with pytest.raises(InvalidName):
        engine.recur_update("rec", {"queue": "a b"}, now=T0)
    assert template(engine).queue == "q"


# -- unrecur ------------------------------------------------------------------------------


def test_unrecur_deletes_the_template(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine)
    engine.unrecur("rec", now=T0)
    assert engine.recur_get("rec", now=T0) is None
    assert engine.queue_counts("q", now=T0).recurring == 0


def test_unrecur_stops_spawning(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine)
    assert pop_jids(engine, "q", count=10, now=T0) == ["rec-1"]
    engine.unrecur("rec", now=T0)
    assert pop_jids(engine, "q", count=10, now=T0 + 60) == []


def test_unrecur_leaves_the_spawned_jobs(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine)
    later = T0 + 599
    assert pop_jids(engine, "q", count=1, now=later) == ["rec-1"]
    engine.unrecur("rec", now=later)

    assert get(engine, "rec-1", later).state == JobState.RUNNING
    assert get(engine, "rec-2", later).spawned_from_jid == "rec"
    assert pop_jids(engine, "q", count=100, now=T0 + 1200) == runs(2, 10)


# -- re-recur -----------------------------------------------------------------------------


def test_re_recur_keeps_the_jid_counter(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine)
    assert pop_jids(engine, "q", count=10, now=T0) == ["rec-1"]
    recur(engine, now=T0 + 60)
    assert template(engine, now=T0 + 60).count == 1
    assert pop_jids(engine, "q", count=10, now=T0 + 60) == ["rec-2"]


def test_re_recur_updates_the_attributes(engine: Engine) -> None:
    require(engine, Capability.RECURRING, Capability.TAGS)
    recur(engine, priority=10, tags=["foo"], retries=2)
    first = engine.pop("q", "w1", 10, now=T0)[0]
    assert (first.priority, first.tags, first.retries) == (10, ("foo",), 2)

    later = T0 + 60
    engine.recur(
        "q", "rec", "Other", '{"foo": "bar"}', 10.0, priority=5, tags=["bar"], retries=5, now=later
    )
    (job,) = engine.pop("q", "w1", 10, now=later)

    assert job.jid == "rec-2"
    assert (job.klass, job.decoded_data()) == ("Other", {"foo": "bar"})
    assert (job.priority, job.tags, job.retries, job.remaining) == (5, ("bar",), 5, 5)
    assert put_times(engine, ["rec-2"], later) == [later]
    assert template(engine, now=later).interval == 10.0


def test_re_recur_into_another_queue_moves_the_template(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine)
    assert pop_jids(engine, "q", count=10, now=T0) == ["rec-1"]
    recur(engine, queue="other", now=T0 + 60)

    assert pop_jids(engine, "other", count=10, now=T0 + 60) == ["rec-2"]
    assert pop_jids(engine, "q", count=10, now=T0 + 120) == []
    assert engine.queue_counts("q", now=T0 + 120).recurring == 0
    assert engine.jobs("recurring", "other", now=T0 + 120) == ["rec"]


# -- recur_tag / recur_untag --------------------------------------------------------------


def test_recur_tag_tags_later_children(engine: Engine) -> None:
    require(engine, Capability.RECURRING, Capability.TAGS)
    recur(engine, tags=["a"])
    assert engine.pop("q", "w1", 10, now=T0)[0].tags == ("a",)
    assert engine.recur_tag("rec", ["b"], now=T0) == ["a", "b"]
    assert template(engine).tags == ("a", "b")
    assert engine.pop("q", "w1", 10, now=T0 + 60)[0].tags == ("a", "b")
    assert get(engine, "rec-1", T0 + 60).tags == ("a",)


def test_recur_untag_untags_later_children(engine: Engine) -> None:
    require(engine, Capability.RECURRING, Capability.TAGS)
    recur(engine, tags=["foo", "bar"])
    assert engine.pop("q", "w1", 10, now=T0)[0].tags == ("foo", "bar")
    assert engine.recur_untag("rec", ["foo"], now=T0) == ["bar"]
    assert template(engine).tags == ("bar",)
    assert engine.pop("q", "w1", 10, now=T0 + 60)[0].tags == ("bar",)
    assert get(engine, "rec-1", T0 + 60).tags == ("foo", "bar")


# -- queues and listings ------------------------------------------------------------------


def test_queue_counts_count_templates_as_recurring(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine, jid="r1")
    recur(engine, jid="r2")
    recur(engine, queue="other", jid="r3")
    counts = engine.queue_counts("q", now=T0)
    assert counts.recurring == 2
    assert (counts.waiting, counts.scheduled, counts.running) == (0, 0, 0)
    assert engine.queue_counts("other", now=T0).recurring == 1


def test_templates_are_not_in_the_length(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine)
    assert engine.length("q", now=T0) == 0


def test_jobs_recurring_lists_templates_next_due_first(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine, jid="late", offset=100.0)
    recur(engine, jid="soon", offset=10.0)
    recur(engine, queue="other", jid="elsewhere")
    assert engine.jobs("recurring", "q", now=T0) == ["soon", "late"]
    assert engine.jobs("recurring", "other", now=T0) == ["elsewhere"]


def test_jobs_recurring_order_follows_spawning(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine, jid="a", offset=0.0)  # due T0, then T0 + 60
    recur(engine, jid="b", offset=30.0)  # due T0 + 30
    assert engine.jobs("recurring", "q", now=T0) == ["a", "b"]
    pop_jids(engine, "q", count=10, now=T0)
    assert engine.jobs("recurring", "q", now=T0) == ["b", "a"]


# -- bad arguments ------------------------------------------------------------------------

Call = Callable[[Any], object]

BAD_RECURS: dict[str, tuple[Call, type[Exception]]] = {
    "interval-zero": (lambda e: e.recur("q", "rec", "Task", "{}", 0.0, now=T0), MalformedArgument),
    "interval-negative": (
        lambda e: e.recur("q", "rec", "Task", "{}", -60.0, now=T0),
        MalformedArgument,
    ),
    "interval-nan": (
        lambda e: e.recur("q", "rec", "Task", "{}", math.nan, now=T0),
        MalformedArgument,
    ),
    "data-not-json": (
        lambda e: e.recur("q", "rec", "Task", "[}", INTERVAL, now=T0),
        MalformedArgument,
    ),
    "data-empty": (lambda e: e.recur("q", "rec", "Task", "", INTERVAL, now=T0), MalformedArgument),
    "queue-bad-name": (
        lambda e: e.recur("1bad", "rec", "Task", "{}", INTERVAL, now=T0),
        InvalidName,
    ),
    "queue-with-space": (
        lambda e: e.recur("a b", "rec", "Task", "{}", INTERVAL, now=T0),
        InvalidName,
    ),
    "jid-empty": (lambda e: e.recur("q", "", "Task", "{}", INTERVAL, now=T0), MalformedArgument),
    "klass-empty": (lambda e: e.recur("q", "rec", "", "{}", INTERVAL, now=T0), MalformedArgument),
    "backlog-negative": (
        lambda e: e.recur("q", "rec", "Task", "{}", INTERVAL, backlog=-1, now=T0),
        MalformedArgument,
    ),
    "retries-negative": (
        lambda e: e.recur("q", "rec", "Task", "{}", INTERVAL, retries=-1, now=T0),
        MalformedArgument,
    ),
    "priority-float": (
        lambda e: e.recur("q", "rec", "Task", "{}", INTERVAL, priority=1.5, now=T0),
        MalformedArgument,
    ),
    "priority-str": (
        lambda e: e.recur("q", "rec", "Task", "{}", INTERVAL, priority="1", now=T0),
        MalformedArgument,
    ),
    "tags-str": (
        lambda e: e.recur("q", "rec", "Task", "{}", INTERVAL, tags="abc", now=T0),
        MalformedArgument,
    ),
    "tags-bad-tag": (
        lambda e: e.recur("q", "rec", "Task", "{}", INTERVAL, tags=["ok", ""], now=T0),
        MalformedArgument,
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_RECURS))
def test_bad_recur_is_rejected_and_stores_nothing(engine: Engine, case: str) -> None:
    require(engine, Capability.RECURRING)
    call, error = BAD_RECURS[case]
    with pytest.raises(error):
        call(engine)
    assert engine.recur_get("rec", now=T0) is None
    assert engine.queue_counts("q", now=T0).recurring == 0
    assert pop_jids(engine, "q", count=10, now=T0 + 600) == []


def test_bad_re_recur_keeps_the_template(engine: Engine) -> None:
    require(engine, Capability.RECURRING)
    recur(engine, priority=2)
    before = template(engine)
    with pytest.raises(MalformedArgument):
        engine.recur("q", "rec", "Other", "{}", 0.0, now=T0 + 1)
    assert template(engine, now=T0 + 1) == before
