"""EVENTS on Redis: the core's PUBLISHes (lua/events.lua), heard on a connection of their own.

The core publishes each change once on `ql:log` (JSON), a tracked job's changes again on
`ql:<event>` (the bare jid), and what a worker loses on `ql:w:<worker>`. A stream
subscribes to `ql:log` and to the channels whose events the log lacks (`ql:popped`,
`ql:stalled`, `ql:track`, `ql:untrack`); the tracked copies of put, completed, failed and
canceled would deliver those twice. `events(worker=...)` subscribes to `ql:w:<worker>`
alone.

The subscription has its own redis-py PubSub connection, made as the engine's are, but
with no retries inside a read: a lost connection makes `_receive` give up at once, and
later calls resubscribe (with backoff) and yield `gap` once they have, since whatever was
published meanwhile is gone (Redis keeps nothing for a subscriber that is away).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from dataclasses import replace
from types import MappingProxyType
from typing import Any, Final

from redis.client import PubSub
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from lanner.engines.redis.connection import RedisAddress, RedisOptions, redis_client
from lanner.engines.redis.sentinel import close_sentinels
from lanner.errors import EngineUnavailable
from lanner.events import GAP, PolledStream
from lanner.records import NO_DETAILS, Event

logger = logging.getLogger("lanner.redis")

LOG_CHANNEL: Final = "ql:log"
BARE_CHANNELS: Final = ("ql:popped", "ql:stalled", "ql:track", "ql:untrack")
"""Channels whose message is a bare jid, and whose events ql:log does not carry."""

_FIELDS: Final = frozenset({"event", "jid", "queue", "worker"})
_LOST: Final = (RedisConnectionError, RedisTimeoutError, OSError)


def decode(channel: str, data: str) -> Event | None:
    """The event a message of `channel` announces (None: not an event of ours)."""
    if channel in BARE_CHANNELS:
        return Event(channel[3:], jid=data)
    try:
        fields: Any = json.loads(data)
        kind = fields["event"]
    except (ValueError, TypeError, KeyError):
        logger.warning("ignoring a message of %s that is not an event: %.200r", channel, data)
        return None
    details = {key: _text(value) for key, value in fields.items() if key not in _FIELDS}
    return Event(
        str(kind),
        jid=_text(fields.get("jid", "")),
        queue=_text(fields.get("queue", "")),
        worker=_text(fields.get("worker", "")),
        details=MappingProxyType(details) if details else NO_DETAILS,
    )


def _text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


class RedisEventStream(PolledStream):
    """A subscription to the core's channels (see the module's docstring)."""

    def __init__(self, address: RedisAddress, options: RedisOptions, worker: str | None) -> None:
        super().__init__()
        # One try per read, and no long connect: the stream resubscribes itself, without
        # blocking a `get` (or a `close`) long.
        quick = replace(
            options, retries=0, socket_connect_timeout=min(options.socket_connect_timeout, 2.0)
        )
        self._client = redis_client(address, quick, options.socket_timeout)
        self._channels = [f"ql:w:{worker}"] if worker is not None else [LOG_CHANNEL, *BARE_CHANNELS]
        self._address = address
        self._options = options
        self._pubsub: PubSub | None = None
        self._failures = 0
        self._retry_at = 0.0
        self._subscribe(deadline=time.monotonic() + options.socket_timeout, raising=True)

    def _subscribe(self, deadline: float, raising: bool) -> bool:
        """Subscribe anew; True once Redis confirmed every channel (the feed is then live)."""
        pubsub = self._client.pubsub(ignore_subscribe_messages=False)  # type: ignore[no-untyped-call]
        try:
            pubsub.subscribe(*self._channels)
            confirmed = 0
            while confirmed < len(self._channels):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RedisTimeoutError("no confirmation of SUBSCRIBE in time")
                message = pubsub.get_message(timeout=left)
                if message is not None and message["type"] == "subscribe":
                    confirmed += 1
        except _LOST as error:
            with contextlib.suppress(*_LOST):
                pubsub.close()
            if raising:
                raise EngineUnavailable(f"cannot subscribe at {self._address!r}: {error}") from None
            return False
        self._pubsub = pubsub
        return True

    def _receive(self, timeout: float) -> Event | None:
        if self._pubsub is None:
            return self._resubscribe(timeout)
        deadline = time.monotonic() + timeout
        while True:
            try:
                message = self._pubsub.get_message(
                    ignore_subscribe_messages=True, timeout=max(deadline - time.monotonic(), 0)
                )
            except _LOST as error:
                logger.warning("lost the event subscription at %r: %s", self._address, error)
                self._drop()
                return None
            if message is None:
                if time.monotonic() >= deadline:
                    return None
                continue
            if message.get("type") != "message":
                continue
            event = decode(str(message["channel"]), str(message["data"]))
            if event is not None:
                return event

    def _resubscribe(self, timeout: float) -> Event | None:
        """Try to subscribe again (not before the backoff's time): `GAP` once it worked."""
        now = time.monotonic()
        if now < self._retry_at:
            time.sleep(min(timeout, self._retry_at - now))
            return None
        wait = max(timeout, 0.05)
        if self._subscribe(deadline=time.monotonic() + wait, raising=False):
            self._failures = 0
            logger.info("event subscription at %r is back", self._address)
            return GAP
        self._failures += 1
        pause = min(self._options.backoff_cap, self._options.backoff_base * 2**self._failures)
        self._retry_at = time.monotonic() + pause
        return None

    def _drop(self) -> None:
        if self._pubsub is not None:
            with contextlib.suppress(*_LOST):
                self._pubsub.close()
            self._pubsub = None
        self._retry_at = 0.0

    def _shutdown(self) -> None:
        self._drop()
        self._client.close()
        self._client.connection_pool.disconnect()
        close_sentinels(self._client)
