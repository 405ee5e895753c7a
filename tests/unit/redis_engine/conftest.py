"""What the Redis engine's own tests share: an engine on the session's emptied server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

import lanner
from lanner.engines.redis.engine import RedisEngine


@pytest.fixture
def engine(redis_url: str) -> Iterator[RedisEngine]:
    with redis.Redis.from_url(redis_url) as client:
        client.flushdb()
    opened = lanner.open_engine(redis_url)
    assert isinstance(opened, RedisEngine)
    yield opened
    opened.close()
