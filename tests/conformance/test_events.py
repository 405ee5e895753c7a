"""EVENTS: `engine.events()` delivers what happens, once, live (docs/events.md)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from lanner import Capability, Engine, Event, EventStream

from .helpers import HEARTBEAT, T0, running

pytestmark = pytest.mark.requires(Capability.EVENTS)

WAIT = 10.0
"""The longest a test waits for an event it expects (a deadline, not a pause)."""

QUIET = 0.3
"""How long a test listens for an event it expects not to come."""


@pytest.fixture
def stream(engine: Engine) -> Iterator[EventStream]:
    with engine.events() as opened:
        yield opened


def take(stream: EventStream, count: int) -> list[Event]:
    """The next `count` events, each awaited up to WAIT seconds."""
    taken: list[Event] = []
    deadline = time.monotonic() + WAIT
    while len(taken) < count:
        left = deadline - time.monotonic()
        assert left > 0, f"only {len(taken)} of {count} events came: {taken}"
        event = stream.get(timeout=left)
        if event is not None:
            taken.append(event)
    return taken


def then_quiet(stream: EventStream) -> None:
    """Nothing more comes (no event twice, nothing unexpected)."""
    extra = stream.get(timeout=QUIET)
    assert extra is None, f"unexpected event {extra}"


def kinds(events: list[Event]) -> list[str]:
    return [event.kind for event in events]


def test_put_is_delivered_with_its_jid_and_queue(engine: Engine, stream: EventStream) -> None:
    engine.put("q", "j1", "Task", now=T0)
    assert take(stream, 1) == [Event("put", jid="j1", queue="q")]
    then_quiet(stream)


def test_details_are_an_immutable_mapping(engine: Engine, stream: EventStream) -> None:
    engine.put("q", "j1", "Task", now=T0)
    (event,) = take(stream, 1)
    assert dict(event.details) == {}
    with pytest.raises(TypeError):
        event.details["x"] = "y"  # type: ignore[index]


def test_put_many_delivers_one_put_per_job_in_order(engine: Engine, stream: EventStream) -> None:
    from lanner import NewJob

    engine.put_many([NewJob("q", f"j{n}", "Task") for n in range(5)], now=T0)
    assert take(stream, 5) == [Event("put", jid=f"j{n}", queue="q") for n in range(5)]
    then_quiet(stream)


def test_completed(engine: Engine, stream: EventStream) -> None:
    running(engine, "j1", "q", "w1")
    engine.complete("j1", "w1", "q", now=T0 + 1)
    assert take(stream, 2) == [
        Event("put", jid="j1", queue="q"),
        Event("completed", jid="j1", queue="q"),
    ]
    then_quiet(stream)


def test_complete_many_delivers_each(engine: Engine, stream: EventStream) -> None:
    for jid in ("a", "b"):
        engine.put("q", jid, "Task", now=T0)
    engine.pop("q", "w1", 2, now=T0)
    engine.complete_many(["a", "b"], "w1", "q", now=T0 + 1)
    events = take(stream, 4)
    assert events[2:] == [
        Event("completed", jid="a", queue="q"),
        Event("completed", jid="b", queue="q"),
    ]
    then_quiet(stream)


def test_advanced_names_the_next_queue(engine: Engine, stream: EventStream) -> None:
    running(engine, "j1", "q", "w1")
    engine.complete("j1", "w1", "q", next="q2", now=T0 + 1)
    assert take(stream, 2)[1] == Event("advanced", jid="j1", queue="q", details={"to": "q2"})
    then_quiet(stream)


def test_failed_carries_group_message_and_worker(engine: Engine, stream: EventStream) -> None:
    running(engine, "j1", "q", "w1")
    engine.fail("j1", "w1", "boom", "it broke", now=T0 + 1)
    assert take(stream, 2)[1] == Event(
        "failed", jid="j1", worker="w1", details={"group": "boom", "message": "it broke"}
    )
    then_quiet(stream)


@pytest.mark.requires(Capability.CANCEL)
def test_canceled_names_the_worker_that_held_it(engine: Engine, stream: EventStream) -> None:
    running(engine, "j1", "q", "w1")
    engine.put("q", "j2", "Task", now=T0)
    engine.cancel(["j1", "j2"], now=T0 + 1)
    assert take(stream, 4)[2:] == [
        Event("canceled", jid="j1", queue="q", worker="w1"),
        Event("canceled", jid="j2", queue="q", worker=""),
    ]
    then_quiet(stream)


@pytest.mark.requires(Capability.TIMEOUT)
def test_timeout_loses_the_lock(engine: Engine, stream: EventStream) -> None:
    running(engine, "j1", "q", "w1")
    engine.timeout(["j1"], now=T0 + 1)
    assert take(stream, 2)[1] == Event("lock_lost", jid="j1", worker="w1")
    then_quiet(stream)


@pytest.mark.driven_clock
def test_an_expired_lock_is_lost_when_a_pop_notices_it(engine: Engine, stream: EventStream) -> None:
    running(engine, "j1", "q", "w1")
    assert engine.pop("q", "w2", now=T0 + HEARTBEAT + 1) == []  # the grace period begins
    assert take(stream, 2)[1] == Event("lock_lost", jid="j1", worker="w1")
    then_quiet(stream)


@pytest.mark.requires(Capability.TRACKING)
def test_track_and_untrack(engine: Engine, stream: EventStream) -> None:
    engine.put("q", "j1", "Task", now=T0)
    engine.track("j1", now=T0)
    engine.untrack("j1", now=T0)
    assert take(stream, 3)[1:] == [Event("track", jid="j1"), Event("untrack", jid="j1")]
    then_quiet(stream)


@pytest.mark.requires(Capability.TRACKING, Capability.TIMEOUT)
def test_popped_and_stalled_only_for_tracked_jobs(engine: Engine, stream: EventStream) -> None:
    engine.put("q", "plain", "Task", now=T0)
    engine.pop("q", "w1", now=T0)
    engine.timeout(["plain"], now=T0)
    assert kinds(take(stream, 2)) == ["put", "lock_lost"]
    then_quiet(stream)

    engine.put("q2", "seen", "Task", now=T0)
    engine.track("seen", now=T0)
    engine.pop("q2", "w1", now=T0)
    engine.timeout(["seen"], now=T0)
    assert take(stream, 5) == [
        Event("put", jid="seen", queue="q2"),
        Event("track", jid="seen"),
        Event("popped", jid="seen"),
        Event("stalled", jid="seen"),
        Event("lock_lost", jid="seen", worker="w1"),
    ]
    then_quiet(stream)


def test_config_set_and_unset(engine: Engine, stream: EventStream) -> None:
    engine.config_set("q-heartbeat", 30, now=T0)
    engine.config_unset("q-heartbeat", now=T0)
    assert take(stream, 2) == [
        Event("config_set", details={"option": "q-heartbeat", "value": "30"}),
        Event("config_unset", details={"option": "q-heartbeat"}),
    ]
    then_quiet(stream)


@pytest.mark.requires(Capability.LIMITS)
@pytest.mark.driven_clock
def test_expired_jobs_are_reported_when_a_pop_drops_them(
    engine: Engine, stream: EventStream
) -> None:
    engine.put("q", "old", "Task", expires_at=T0 + 5, now=T0)
    assert engine.pop("q", "w1", now=T0 + 10) == []
    assert take(stream, 2)[1] == Event("expired", jid="old", queue="q")
    then_quiet(stream)


@pytest.mark.requires(Capability.LIMITS)
def test_discarded_jobs_are_reported(engine: Engine, stream: EventStream) -> None:
    engine.config_set("q-max-items", 1, now=T0)
    engine.config_set("q-discard-old-when-full", 1, now=T0)
    engine.put("q", "first", "Task", now=T0)
    engine.put("q", "second", "Task", now=T0)
    events = take(stream, 5)[2:]
    assert Event("discarded", jid="first", queue="q") in events
    assert Event("put", jid="second", queue="q") in events
    then_quiet(stream)


@pytest.mark.requires(Capability.TIMEOUT)
def test_a_worker_hears_only_its_own_events(engine: Engine) -> None:
    with engine.events(worker="w1") as mine:
        running(engine, "j1", "q", "w1")
        running(engine, "j2", "q", "w2")
        engine.timeout(["j2", "j1"], now=T0 + 1)
        engine.config_set("q-heartbeat", 30, now=T0)
        assert take(mine, 1) == [Event("lock_lost", jid="j1", worker="w1")]
        then_quiet(mine)


@pytest.mark.requires(Capability.CANCEL)
def test_a_worker_hears_a_job_of_its_own_canceled(engine: Engine) -> None:
    with engine.events(worker="w1") as mine:
        running(engine, "j1", "q", "w1")
        engine.cancel(["j1"], now=T0 + 1)
        assert take(mine, 1) == [Event("canceled", jid="j1", queue="q", worker="w1")]
        then_quiet(mine)


def test_two_streams_each_get_every_event_once(engine: Engine) -> None:
    with engine.events() as first, engine.events() as second:
        engine.put("q", "j1", "Task", now=T0)
        for stream in (first, second):
            assert take(stream, 1) == [Event("put", jid="j1", queue="q")]
            then_quiet(stream)


def test_events_of_another_connection_arrive(
    stream: EventStream, connect: Callable[[], Engine]
) -> None:
    other = connect()
    other.put("q", "j1", "Task", now=T0)
    assert take(stream, 1) == [Event("put", jid="j1", queue="q")]


def test_get_returns_none_after_its_timeout_on_a_quiet_store(stream: EventStream) -> None:
    started = time.monotonic()
    assert stream.get(timeout=0.2) is None
    assert 0.15 <= time.monotonic() - started < 2.0
    assert stream.get(timeout=0) is None


def test_close_from_another_thread_unblocks_get_and_ends_iteration(engine: Engine) -> None:
    stream = engine.events()
    seen: list[Event] = []
    ended = threading.Event()

    def consume() -> None:
        seen.extend(stream)
        ended.set()

    thread = threading.Thread(target=consume)
    thread.start()
    engine.put("q", "j1", "Task", now=T0)
    deadline = time.monotonic() + WAIT
    while not seen and time.monotonic() < deadline:
        ended.wait(0.01)
    assert seen == [Event("put", jid="j1", queue="q")]
    closed_at = time.monotonic()
    stream.close()
    assert ended.wait(WAIT)
    assert time.monotonic() - closed_at < 2.0
    thread.join()
    stream.close()  # idempotent
    assert stream.closed
    assert stream.get(timeout=1) is None


def test_a_closed_stream_delivers_nothing_more(engine: Engine) -> None:
    stream = engine.events()
    stream.close()
    engine.put("q", "j1", "Task", now=T0)
    assert stream.get(timeout=0.1) is None
    assert list(stream) == []


def test_async_iteration(engine: Engine, stream: EventStream) -> None:
    async def main() -> list[Event]:
        got: list[Event] = []
        ticks = 0

        async def ticker() -> None:  # the loop keeps running while the stream waits
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticking = asyncio.create_task(ticker())
        await asyncio.to_thread(engine.put, "q", "j1", "Task", now=T0)
        await asyncio.to_thread(engine.put, "q", "j2", "Task", now=T0)
        async with asyncio.timeout(WAIT):
            async for event in stream:
                got.append(event)
                if len(got) == 2:
                    break
        ticking.cancel()
        assert ticks > 0
        return got

    assert asyncio.run(main()) == [
        Event("put", jid="j1", queue="q"),
        Event("put", jid="j2", queue="q"),
    ]


def test_events_before_the_stream_are_not_delivered(engine: Engine) -> None:
    engine.put("q", "before", "Task", now=T0)
    with engine.events() as stream:
        engine.put("q", "after", "Task", now=T0)
        assert take(stream, 1) == [Event("put", jid="after", queue="q")]
        then_quiet(stream)


def test_a_put_moving_a_running_job_tells_its_worker(engine: Engine, stream: EventStream) -> None:
    running(engine, "j1", "q", "w1")
    engine.put("q2", "j1", "Task", worker="w2", now=T0 + 1)
    # Two queues: on Redis Cluster two shards, whose events may come in either order.
    assert sorted(take(stream, 3)[1:]) == [
        Event("lock_lost", jid="j1", worker="w1"),
        Event("put", jid="j1", queue="q2"),
    ]
    then_quiet(stream)


@pytest.mark.driven_clock
def test_a_lock_that_ran_out_of_retries_fails_its_job(engine: Engine, stream: EventStream) -> None:
    running(engine, "j1", "q", "w1", retries=0)
    engine.pop("q", "w2", now=T0 + HEARTBEAT + 1)  # noticed: the grace period
    engine.pop("q", "w2", now=T0 + HEARTBEAT + 100)  # expired again: no retry left
    group = "failed-retries-q"
    message = 'Job exhausted retries in queue "q"'
    assert take(stream, 3)[1:] == [
        Event("lock_lost", jid="j1", worker="w1"),
        Event("failed", jid="j1", worker="w1", details={"group": group, "message": message}),
    ]
    then_quiet(stream)


@pytest.mark.requires(Capability.FAILURES)
def test_unfail_puts_each_job_back(engine: Engine, stream: EventStream) -> None:
    running(engine, "j1", "q", "w1")
    engine.fail("j1", "w1", "boom", "no", now=T0)
    assert engine.unfail("q2", "boom", now=T0 + 1) == 1
    # Events of two queues: on Redis Cluster they come from two shards, in either order.
    assert Event("put", jid="j1", queue="q2") in take(stream, 3)[1:]
    then_quiet(stream)


@pytest.mark.requires(Capability.FANOUT)
def test_fanout_copies_are_put_too(engine: Engine, stream: EventStream) -> None:
    engine.pop("q+c", "w1", now=T0)  # q+c becomes a child of q
    engine.put("q", "j1", "Task", now=T0)
    events = take(stream, 2)
    assert sorted(events) == [
        Event("put", jid="j1", queue="q"),
        Event("put", jid="j1+c", queue="q+c"),
    ]
    then_quiet(stream)


def test_retry_out_of_retries_is_not_in_the_feed(engine: Engine, stream: EventStream) -> None:
    """qless-core announces this failure only to those tracking the job (ql:failed), and
    its log says nothing: neither does the feed (docs/events.md)."""
    running(engine, "j1", "q", "w1", retries=0)
    assert engine.retry("j1", "q", "w1", now=T0 + 1) < 0
    assert take(stream, 1) == [Event("put", jid="j1", queue="q")]
    then_quiet(stream)


def test_an_async_consumer_cancelled_while_waiting_loses_no_event(
    engine: Engine, stream: EventStream
) -> None:
    async def drain() -> None:
        async with asyncio.timeout(0.05):  # cancelled while its `get` waits in a thread
            async for _ in stream:
                pass

    async def main() -> Event:
        with pytest.raises(TimeoutError):
            await drain()
        await asyncio.to_thread(engine.put, "q", "j1", "Task", now=T0)
        async with asyncio.timeout(WAIT):
            async for event in stream:
                return event
        raise AssertionError("the stream ended")

    assert asyncio.run(main()) == Event("put", jid="j1", queue="q")
