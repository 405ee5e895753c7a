"""Helpers of the Redis engine's own tests: a private server's shape, a raw client."""

from __future__ import annotations

from typing import Protocol

import redis

T0 = 1000.0


class RedisServer(Protocol):
    """What tests/conftest.py's `redis_server_factory` gives: a private server."""

    port: int

    @property
    def url(self) -> str: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def restart(self) -> None: ...


def raw(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=True)
