"""The Redis engine's event stream: its channels, and a restart of the server."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from lanner import Event, EventStream
from lanner.engines.redis.engine import RedisEngine
from lanner.engines.redis.events import decode

from .support import T0, RedisServer, raw


def next_event(stream: EventStream, within: float = 10.0) -> Event:
    event = stream.get(timeout=within)
    assert event is not None, f"no event within {within} s"
    return event


def test_a_log_message_becomes_an_event_with_its_extras_as_details() -> None:
    message = json.dumps(
        {"message": "m", "jid": "j", "group": "g", "event": "failed", "worker": "w"}
    )
    event = decode("ql:log", message)
    assert event == Event("failed", jid="j", worker="w", details={"group": "g", "message": "m"})


def test_bare_channels_carry_the_jid() -> None:
    assert decode("ql:popped", "j1") == Event("popped", jid="j1")
    assert decode("ql:untrack", "j1") == Event("untrack", jid="j1")


def test_a_message_that_is_not_an_event_is_skipped() -> None:
    assert decode("ql:log", "not json") is None
    assert decode("ql:log", '{"jid": "j"}') is None


def test_a_tracked_job_is_delivered_once_not_also_from_its_tracked_channel(
    redis_url: str,
) -> None:
    with raw(redis_url) as client:
        client.flushdb()
    with RedisEngine(redis_url) as engine, engine.events() as stream:
        engine.put("q", "j", "Task", now=T0)
        engine.track("j", now=T0)
        engine.put("q", "j", "Task", now=T0)  # published on ql:log and on ql:put
        assert [next_event(stream).kind for _ in range(3)] == ["put", "track", "put"]
        assert stream.get(timeout=0.3) is None


def test_a_restart_of_redis_yields_a_gap_then_events_again(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    server = redis_server_factory()
    with RedisEngine(server.url + "?retries=40") as engine, engine.events() as stream:
        engine.put("q", "before", "Task", now=T0)
        assert next_event(stream) == Event("put", jid="before", queue="q")
        server.stop()
        # The store is away: get keeps trying, and does not raise.
        started = time.monotonic()
        assert stream.get(timeout=0.5) is None
        assert time.monotonic() - started < 3.0
        server.start()
        assert next_event(stream) == Event("gap")
        engine.put("q", "after", "Task", now=T0)
        assert next_event(stream) == Event("put", jid="after", queue="q")
        assert stream.get(timeout=0.3) is None
