"""FANOUT: Kestrel's fanout queues. A put into `q` also reaches every `q+<child>` read at
least once, each child consumed on its own (docs/kestrel.md)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from lanner import Capability, Engine, InvalidName, NewJob

from .helpers import T0, get, pop_jids

pytestmark = pytest.mark.requires(Capability.FANOUT)


def test_a_child_never_read_gets_nothing(engine: Engine) -> None:
    engine.put("q", "j1", "Task", now=T0)
    assert pop_jids(engine, "q+c", now=T0) == []
    assert pop_jids(engine, "q", now=T0) == ["j1"]


def test_a_child_read_once_gets_a_copy_of_every_later_put(engine: Engine) -> None:
    assert pop_jids(engine, "q+c", now=T0) == []
    engine.put("q", "j1", "Task", '{"x": 1}', now=T0)

    (copy,) = engine.pop("q+c", "w1", now=T0)
    assert (copy.jid, copy.queue, copy.klass, copy.data) == ("j1+c", "q+c", "Task", '{"x": 1}')
    assert pop_jids(engine, "q", now=T0) == ["j1"]


def test_children_are_consumed_independently(engine: Engine) -> None:
    pop_jids(engine, "q+a", now=T0)
    pop_jids(engine, "q+b", now=T0)
    engine.put_many([NewJob("q", "j1", "Task"), NewJob("q", "j2", "Task")], now=T0)

    assert pop_jids(engine, "q+a", count=5, now=T0) == ["j1+a", "j2+a"]
    assert engine.complete("j1+a", "w1", "q+a", now=T0) == "complete"
    assert pop_jids(engine, "q+b", count=5, now=T0) == ["j1+b", "j2+b"]
    assert engine.length("q", now=T0) == 2


def test_a_put_into_a_child_reaches_only_that_child(engine: Engine) -> None:
    pop_jids(engine, "q+a", now=T0)
    pop_jids(engine, "q+b", now=T0)
    engine.put("q+a", "direct", "Task", now=T0)
    assert pop_jids(engine, "q+a", now=T0) == ["direct"]
    assert pop_jids(engine, "q+b", now=T0) == []
    assert pop_jids(engine, "q", now=T0) == []


def test_the_registry_of_children_is_in_the_store(
    engine: Engine, connect: Callable[[], Engine]
) -> None:
    pop_jids(connect(), "q+c", now=T0)
    engine.put("q", "j1", "Task", now=T0)
    assert pop_jids(engine, "q+c", now=T0) == ["j1+c"]


@pytest.mark.requires(Capability.LISTING)
def test_a_peek_makes_a_child_too(engine: Engine) -> None:
    assert engine.peek("q+c", now=T0) == []
    engine.put("q", "j1", "Task", now=T0)
    assert [job.jid for job in engine.peek("q+c", now=T0)] == ["j1+c"]


@pytest.mark.requires(Capability.QUEUE_FORGET)
def test_a_forgotten_child_gets_no_more_copies(engine: Engine) -> None:
    pop_jids(engine, "q+c", now=T0)
    engine.put("q", "j1", "Task", now=T0)
    engine.queue_forget(["q+c"], now=T0)
    engine.put("q", "j2", "Task", now=T0)
    assert pop_jids(engine, "q+c", count=5, now=T0) == ["j1+c"]


@pytest.mark.requires(Capability.LOOKUP)
def test_a_copy_carries_priority_tags_retries_and_delay(engine: Engine) -> None:
    pop_jids(engine, "q+c", now=T0)
    engine.put("q", "j1", "Task", priority=3, tags=["t"], retries=2, delay=10, now=T0)
    copy = get(engine, "j1+c")
    assert (copy.priority, copy.tags, copy.retries, copy.state) == (3, ("t",), 2, "scheduled")
    assert pop_jids(engine, "q+c", now=T0 + 11) == ["j1+c"]


@pytest.mark.requires(Capability.LIMITS)
def test_a_full_child_drops_its_copy_and_the_put_goes_on(engine: Engine) -> None:
    pop_jids(engine, "q+c", now=T0)
    engine.config_set("q+c-max-items", 1)
    engine.put("q", "j1", "Task", now=T0)
    engine.put("q", "j2", "Task", now=T0)

    assert pop_jids(engine, "q", count=5, now=T0) == ["j1", "j2"]
    assert pop_jids(engine, "q+c", count=5, now=T0) == ["j1+c"]
    assert engine.queue_usage("q+c", now=T0).discarded == 1


@pytest.mark.requires(Capability.LIMITS)
def test_a_copy_expires_with_its_job(engine: Engine) -> None:
    pop_jids(engine, "q+c", now=T0)
    engine.put("q", "j1", "Task", expires_at=T0 + 5, now=T0)
    assert pop_jids(engine, "q+c", now=T0 + 6) == []
    assert engine.queue_usage("q+c", now=T0 + 6).expired == 1


@pytest.mark.parametrize("name", ["a+b+c", "+a", "a+", "a++b", "a+1b"])
def test_fanout_names_are_two_queue_names_joined_by_one_plus(engine: Engine, name: str) -> None:
    with pytest.raises(InvalidName):
        engine.put(name, "j", "Task", now=T0)
