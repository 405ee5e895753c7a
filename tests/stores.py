"""The stores a test may run on, made fresh: the session's Redis server (tests/conftest.py's
`redis_url`) emptied, or a new SQLite file; for fixtures parametrized over both."""

from __future__ import annotations

from pathlib import Path

import pytest


def fresh_redis(request: pytest.FixtureRequest) -> str:
    """The session's Redis server, its database emptied for this test."""
    import redis

    url: str = request.getfixturevalue("redis_url")
    with redis.Redis.from_url(url) as client:
        client.flushdb()
    return url


def sqlite_or_redis(request: pytest.FixtureRequest, tmp_path: Path, file: str = "lanner.db") -> str:
    """The broker URL of a fixture parametrized over "sqlite" and "redis": a new SQLite file
    in `tmp_path`, or the session's Redis emptied."""
    if request.param == "sqlite":
        return f"sqlite:///{(tmp_path / file).as_posix()}"
    return fresh_redis(request)
