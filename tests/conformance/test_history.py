"""Job history: the events engines write, custom log entries, and the cap."""

from __future__ import annotations

import pytest

from lanner import Capability, Engine, JobNotFound

from .helpers import HEARTBEAT, T0, get, pop_jids, require, running, whats


@pytest.mark.requires(Capability.LOOKUP)
def test_a_full_life_is_recorded_in_order(engine: Engine) -> None:
    engine.put("q", "j1", "Task", now=T0)
    pop_jids(engine, "q", "w1", now=T0 + 1)
    engine.complete("j1", "w1", "q", now=T0 + 2)

    history = get(engine, "j1", T0 + 2).history
    assert [(e.what, e.when) for e in history] == [
        ("put", T0),
        ("popped", T0 + 1),
        ("done", T0 + 2),
    ]
    assert history[0].details["q"] == "q"
    assert history[1].details["worker"] == "w1"


@pytest.mark.requires(Capability.LOOKUP)
def test_failure_is_recorded_with_its_group(engine: Engine) -> None:
    running(engine, "j1")
    engine.fail("j1", "w1", "boom", "broke", now=T0 + 1)
    history = get(engine, "j1", T0 + 1).history
    assert [e.what for e in history] == ["put", "popped", "failed"]
    assert history[-1].details["group"] == "boom"


@pytest.mark.requires(Capability.LOOKUP)
def test_a_retry_is_recorded_with_its_worker_and_group(engine: Engine) -> None:
    running(engine, "j1", retries=2)
    engine.retry("j1", "q", "w1", group="ValueError", message="Traceback ...", now=T0 + 1)
    pop_jids(engine, "q", "w2", now=T0 + 2)
    engine.retry("j1", "q", "w2", now=T0 + 3)  # no group: as qless's clients may call it

    history = get(engine, "j1", T0 + 3).history
    assert [(e.what, e.when) for e in history] == [
        ("put", T0),
        ("popped", T0),
        ("retried", T0 + 1),
        ("popped", T0 + 2),
        ("retried", T0 + 3),
    ]
    assert dict(history[2].details) == {"worker": "w1", "group": "ValueError"}
    assert dict(history[4].details) == {"worker": "w2"}


@pytest.mark.requires(Capability.LOOKUP)
def test_a_retry_with_none_left_is_recorded_as_the_failure_only(engine: Engine) -> None:
    running(engine, "j1", retries=0)
    engine.retry("j1", "q", "w1", group="ValueError", message="Traceback ...", now=T0 + 1)
    history = get(engine, "j1", T0 + 1).history
    assert whats(get(engine, "j1", T0 + 1)) == ["put", "popped", "failed"]
    assert history[-1].details["group"] == "ValueError"


@pytest.mark.requires(Capability.LOOKUP)
def test_lost_lock_is_recorded_as_timed_out(engine: Engine) -> None:
    running(engine, "j1")
    engine.pop("q", "w2", now=T0 + HEARTBEAT)
    assert whats(get(engine, "j1", T0 + HEARTBEAT)) == ["put", "popped", "timed-out"]


@pytest.mark.requires(Capability.LOOKUP, Capability.CONFIG)
def test_history_is_capped_keeping_the_first_and_the_latest_entries(engine: Engine) -> None:
    engine.config_set("max-job-history", 3, now=T0)
    for i in range(10):
        engine.put("q", "j1", "Task", now=T0 + i)

    history = get(engine, "j1", T0 + 10).history
    assert [e.when for e in history] == [T0, T0 + 8, T0 + 9]
    assert [e.what for e in history] == ["put", "put", "put"]


@pytest.mark.requires(Capability.LOOKUP, Capability.CONFIG)
def test_history_cap_keeps_the_first_entry_across_kinds(engine: Engine) -> None:
    engine.config_set("max-job-history", 2, now=T0)
    engine.put("q", "j1", "Task", now=T0)
    for i in range(1, 6):
        pop_jids(engine, "q", now=T0 + i)
        engine.retry("j1", "q", "w1", now=T0 + i)
    pop_jids(engine, "q", now=T0 + 6)

    history = get(engine, "j1", T0 + 6).history
    assert [(e.what, e.when) for e in history] == [("put", T0), ("popped", T0 + 6)]


@pytest.mark.requires(Capability.LOOKUP)
def test_default_history_cap_is_100_entries(engine: Engine) -> None:
    for i in range(110):
        engine.put("q", "j1", "Task", now=T0 + i)
    history = get(engine, "j1", T0 + 110).history
    assert len(history) == 100
    assert history[0].when == T0
    assert history[-1].when == T0 + 109


# -- log ----------------------------------------------------------------------------------


def test_log_appends_a_custom_entry(engine: Engine) -> None:
    require(engine, Capability.LOG)
    engine.put("q", "j1", "Task", now=T0)

    engine.log("j1", "checkpoint", {"step": 3}, now=T0 + 1)

    event = get(engine, "j1", T0 + 1).history[-1]
    assert (event.what, event.when) == ("checkpoint", T0 + 1)
    assert event.details.get("step") == 3 or event.details.get("data") == {"step": 3}


def test_log_without_data_appends_an_entry(engine: Engine) -> None:
    require(engine, Capability.LOG)
    engine.put("q", "j1", "Task", now=T0)
    engine.log("j1", "note", now=T0 + 1)
    assert whats(get(engine, "j1", T0 + 1)) == ["put", "note"]


def test_log_entries_count_towards_the_cap(engine: Engine) -> None:
    require(engine, Capability.LOG)
    engine.config_set("max-job-history", 3, now=T0)
    engine.put("q", "j1", "Task", now=T0)
    for i in range(5):
        engine.log("j1", f"note{i}", now=T0 + 1 + i)
    assert whats(get(engine, "j1", T0 + 10)) == ["put", "note3", "note4"]


def test_log_of_a_missing_job_raises_job_not_found(engine: Engine) -> None:
    require(engine, Capability.LOG)
    with pytest.raises(JobNotFound):
        engine.log("nope", "note", now=T0)
