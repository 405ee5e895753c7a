"""LIMITS: Kestrel's bounded queues. Item expiry, max-items, max-size, max-item-size,
max-age and discard-old-when-full, and the usage a queue reports (docs/kestrel.md)."""

from __future__ import annotations

import pytest

from lanner import (
    Capability,
    Engine,
    MalformedArgument,
    NewJob,
    PayloadTooLarge,
    QueueFull,
)

from .helpers import T0, jids, pop_jids

pytestmark = pytest.mark.requires(Capability.LIMITS)


def usage(engine: Engine, queue: str = "q") -> tuple[int, int, int, int, int]:
    u = engine.queue_usage(queue, now=T0)
    return u.items, u.bytes, u.total_items, u.expired, u.discarded


def test_a_job_past_its_expiry_is_dropped_not_given(engine: Engine) -> None:
    engine.put("q", "old", "Task", expires_at=T0 + 10, now=T0)
    engine.put("q", "new", "Task", expires_at=T0 + 100, now=T0)

    assert pop_jids(engine, "q", count=5, now=T0 + 11) == ["new"]
    assert pop_jids(engine, "q", count=5, now=T0 + 12) == []
    assert engine.queue_usage("q", now=T0 + 12).expired == 1


def test_a_job_before_its_expiry_is_given(engine: Engine) -> None:
    engine.put("q", "j", "Task", expires_at=T0 + 10, now=T0)
    assert pop_jids(engine, "q", now=T0 + 9) == ["j"]
    assert engine.queue_usage("q", now=T0 + 9).expired == 0


def test_an_expired_job_is_skipped_whatever_its_priority(engine: Engine) -> None:
    if Capability.PRIORITY not in engine.capabilities:
        pytest.skip(f"{engine.name} engine lacks priority")
    engine.put("q", "urgent", "Task", priority=10, expires_at=T0 + 1, now=T0)
    engine.put("q", "later", "Task", now=T0)
    assert pop_jids(engine, "q", now=T0 + 2) == ["later"]


@pytest.mark.requires(Capability.LOOKUP)
def test_an_expired_job_is_gone_once_read(engine: Engine) -> None:
    engine.put("q", "j", "Task", expires_at=T0 + 1, now=T0)
    engine.pop("q", "w1", now=T0 + 2)
    assert engine.get("j", now=T0 + 2) is None
    assert usage(engine)[:2] == (0, 0)


def test_an_expiry_already_past_at_put_is_stored_and_never_given(engine: Engine) -> None:
    engine.put("q", "j", "Task", expires_at=T0 - 1, now=T0)
    assert pop_jids(engine, "q", now=T0) == []
    assert engine.queue_usage("q", now=T0).expired == 1


def test_a_released_job_keeps_its_expiry(engine: Engine) -> None:
    engine.put("q", "j", "Task", expires_at=T0 + 10, now=T0)
    engine.pop("q", "w1", now=T0 + 1)
    assert engine.release(["j"], "w1", "q", now=T0 + 2) == ["j"]
    assert pop_jids(engine, "q", now=T0 + 11) == []


@pytest.mark.requires(Capability.LISTING)
def test_peek_does_not_show_expired_jobs(engine: Engine) -> None:
    engine.put("q", "old", "Task", expires_at=T0 + 1, now=T0)
    engine.put("q", "new", "Task", now=T0)
    assert jids(engine.peek("q", 5, now=T0 + 2)) == ["new"]


def test_max_age_caps_the_expiry_at_put(engine: Engine) -> None:
    engine.config_set("q-max-age", 30)
    engine.put("q", "plain", "Task", now=T0)
    engine.put("q", "later", "Task", expires_at=T0 + 100, now=T0)
    engine.put("q", "sooner", "Task", expires_at=T0 + 5, now=T0)

    assert pop_jids(engine, "q", count=5, now=T0 + 6) == ["plain", "later"]
    engine.put("q", "again", "Task", now=T0 + 6)
    assert pop_jids(engine, "q", count=5, now=T0 + 37) == []
    assert engine.queue_usage("q", now=T0 + 37).expired == 2


def test_max_items_refuses_a_put_into_a_full_queue(engine: Engine) -> None:
    engine.config_set("q-max-items", 2)
    engine.put("q", "j1", "Task", now=T0)
    engine.put("q", "j2", "Task", now=T0)

    with pytest.raises(QueueFull, match="'q'"):
        engine.put("q", "j3", "Task", now=T0)

    assert engine.length("q", now=T0) == 2
    assert usage(engine)[0] == 2
    engine.put("other", "j3", "Task", now=T0)  # a bound is per queue


def test_running_jobs_count_until_they_finish(engine: Engine) -> None:
    engine.config_set("q-max-items", 1)
    engine.put("q", "j1", "Task", now=T0)
    engine.pop("q", "w1", now=T0)
    with pytest.raises(QueueFull):
        engine.put("q", "j2", "Task", now=T0)
    engine.complete("j1", "w1", "q", now=T0 + 1)
    engine.put("q", "j2", "Task", now=T0 + 1)
    assert pop_jids(engine, "q", now=T0 + 1) == ["j2"]


def test_max_size_counts_the_bytes_of_the_data(engine: Engine) -> None:
    engine.config_set("q-max-size", 20)
    engine.put("q", "j1", "Task", '"0123456789"', now=T0)  # 12 bytes
    with pytest.raises(QueueFull, match="max-size"):
        engine.put("q", "j2", "Task", '"0123456789"', now=T0)
    engine.put("q", "j2", "Task", '"012345"', now=T0)  # 8 bytes: 20 in all
    assert usage(engine)[:2] == (2, 20)


def test_bytes_are_utf8_bytes(engine: Engine) -> None:
    engine.put("q", "j", "Task", '"ü€"', now=T0)
    assert usage(engine)[1] == 7


def test_max_item_size_refuses_a_larger_item(engine: Engine) -> None:
    engine.config_set("q-max-item-size", 10)
    engine.put("q", "small", "Task", '"12345678"', now=T0)
    with pytest.raises(PayloadTooLarge, match="max-item-size"):
        engine.put("q", "big", "Task", '"123456789"', now=T0)
    assert pop_jids(engine, "q", count=5, now=T0) == ["small"]


def test_discard_old_when_full_drops_the_oldest_waiting_jobs(engine: Engine) -> None:
    engine.config_set("q-max-items", 2)
    engine.config_set("q-discard-old-when-full", 1)
    for n, jid in enumerate(["j1", "j2", "j3", "j4"]):
        engine.put("q", jid, "Task", now=T0 + n)

    assert pop_jids(engine, "q", count=5, now=T0 + 5) == ["j3", "j4"]
    assert usage(engine)[2:] == (4, 0, 2)


def test_discard_old_drops_the_head_of_the_queue_first(engine: Engine) -> None:
    if Capability.PRIORITY not in engine.capabilities:
        pytest.skip(f"{engine.name} engine lacks priority")
    engine.config_set("q-max-items", 2)
    engine.config_set("q-discard-old-when-full", 1)
    engine.put("q", "low", "Task", priority=0, now=T0)
    engine.put("q", "high", "Task", priority=5, now=T0 + 1)
    engine.put("q", "new", "Task", priority=0, now=T0 + 2)  # drops what pop gives next
    assert pop_jids(engine, "q", count=5, now=T0 + 3) == ["low", "new"]


def test_discard_old_drops_enough_bytes_for_the_new_item(engine: Engine) -> None:
    engine.config_set("q-max-size", 24)
    engine.config_set("q-discard-old-when-full", 1)
    for n, jid in enumerate(["j1", "j2", "j3"]):
        engine.put("q", jid, "Task", '"123456"', now=T0 + n)  # 8 bytes each
    engine.put("q", "big", "Task", '"12345678901234"', now=T0 + 5)  # 16 bytes

    assert pop_jids(engine, "q", count=5, now=T0 + 6) == ["j3", "big"]
    assert engine.queue_usage("q", now=T0 + 6).discarded == 2


def test_discard_old_never_drops_running_jobs(engine: Engine) -> None:
    engine.config_set("q-max-items", 1)
    engine.config_set("q-discard-old-when-full", 1)
    engine.put("q", "j1", "Task", now=T0)
    engine.pop("q", "w1", now=T0)
    with pytest.raises(QueueFull):
        engine.put("q", "j2", "Task", now=T0)
    assert engine.complete("j1", "w1", "q", now=T0 + 1) == "complete"


def test_put_many_into_a_full_queue_stores_none(engine: Engine) -> None:
    engine.config_set("q-max-items", 2)
    batch = [NewJob("q", f"j{n}", "Task") for n in range(3)]
    with pytest.raises(QueueFull):
        engine.put_many(batch, now=T0)
    assert engine.length("q", now=T0) == 0
    assert engine.put_many(batch[:2], now=T0) == ["j0", "j1"]


def test_put_many_past_a_discarding_bound_drops_its_own_oldest(engine: Engine) -> None:
    # The queue's waiting jobs go first, then those the call itself put, in put order.
    engine.config_set("q-max-items", 2)
    engine.config_set("q-discard-old-when-full", 1)
    engine.put("q", "old", "Task", now=T0)
    batch = [NewJob("q", f"j{n}", "Task") for n in range(4)]

    assert engine.put_many(batch, now=T0 + 1) == ["j0", "j1", "j2", "j3"]
    assert pop_jids(engine, "q", count=5, now=T0 + 2) == ["j2", "j3"]
    assert usage(engine)[2:] == (5, 0, 3)


def test_put_many_drops_only_its_own_jobs_that_would_wait(engine: Engine) -> None:
    # A job of the call that is delayed is not waiting: it is never dropped to make room.
    engine.config_set("q-max-items", 2)
    engine.config_set("q-discard-old-when-full", 1)
    batch = [NewJob("q", "later", "Task", delay=60), NewJob("q", "a", "Task"),
             NewJob("q", "b", "Task")]  # fmt: skip

    assert engine.put_many(batch, now=T0) == ["later", "a", "b"]
    assert usage(engine)[:1] + usage(engine)[2:] == (2, 3, 0, 1)
    assert sorted(pop_jids(engine, "q", count=5, now=T0 + 61)) == ["b", "later"]


def test_a_limit_unset_or_zero_bounds_nothing(engine: Engine) -> None:
    engine.config_set("q-max-items", 1)
    engine.put("q", "j1", "Task", now=T0)
    engine.config_set("q-max-items", 0)
    engine.put("q", "j2", "Task", now=T0)
    engine.config_set("q-max-items", 2)
    engine.config_unset("q-max-items")
    engine.put("q", "j3", "Task", now=T0)
    assert engine.length("q", now=T0) == 3


def test_usage_counts_what_the_queue_holds_and_took(engine: Engine) -> None:
    assert usage(engine) == (0, 0, 0, 0, 0)
    engine.put("q", "j1", "Task", '"abc"', now=T0)
    engine.put("q", "j2", "Task", '"abcdef"', now=T0)
    assert usage(engine) == (2, 13, 2, 0, 0)
    engine.pop("q", "w1", now=T0)
    assert usage(engine) == (2, 13, 2, 0, 0)
    engine.complete("j1", "w1", "q", now=T0)
    assert usage(engine) == (1, 8, 2, 0, 0)
    (job,) = engine.pop("q", "w1", now=T0)
    engine.fail(job.jid, "w1", "boom", "it broke", now=T0)
    assert usage(engine) == (0, 0, 2, 0, 0)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("q-max-items", -1),
        ("q-max-items", 1.5),
        ("q-max-size", "big"),
        ("q-max-item-size", -5),
        ("q-max-age", -1),
        ("q-discard-old-when-full", 2),
    ],
)
def test_bad_limit_values_are_refused(engine: Engine, key: str, value: object) -> None:
    with pytest.raises(MalformedArgument):
        engine.config_set(key, value)  # type: ignore[arg-type]
    assert engine.config_get(key) is None


@pytest.mark.parametrize("value", ["soon", float("inf"), True])
def test_a_bad_expiry_is_refused(engine: Engine, value: object) -> None:
    with pytest.raises(MalformedArgument, match="expires_at"):
        engine.put("q", "j", "Task", expires_at=value, now=T0)  # type: ignore[arg-type]
    assert engine.length("q", now=T0) == 0
