"""Engines, and `open_engine(url)` which picks one from a broker URL.

sqlite:///relative/path.db        sqlite:////absolute/path.db
sqlite:///jobs.db?synchronous=normal&busy_timeout=5&max_data_bytes=1048576
redis://[user:password@]host[:port][/db]?socket_timeout=5    (needs lanner[redis])
rediss://user:password@host:6380/0                           (TLS, certificates verified)
"""

from __future__ import annotations

from dataclasses import replace
from urllib.parse import parse_qsl, urlsplit

from lanner.engine import Engine
from lanner.errors import MalformedArgument


def open_engine(url: str, *, max_wait: float | None = None) -> Engine:
    """Open the engine a broker URL names. Nothing is opened at import time.

    With `max_wait`, neither opening it nor its commands wait for the store longer than
    about that many seconds (`EngineUnavailable`), as with `Engine.reopen(max_wait=...)`.
    """
    if not isinstance(url, str):
        raise MalformedArgument(f"broker URL must be a str, not {type(url).__name__}")
    scheme, _, rest = url.partition("://")
    if scheme == "sqlite":
        from lanner.engines.sqlite import SQLiteEngine, SQLiteOptions

        parts = urlsplit(url)
        path = rest.split("?", 1)[0]
        if not path.startswith("/") or len(path) < 2:
            raise MalformedArgument(
                f"bad SQLite URL {url!r}: use sqlite:///relative.db or sqlite:////absolute.db"
            )
        options = SQLiteOptions.from_query(dict(parse_qsl(parts.query, strict_parsing=False)))
        if max_wait is not None:
            options = replace(options, busy_timeout=min(options.busy_timeout, max_wait))
        return SQLiteEngine(path[1:], options)
    if scheme in ("redis", "rediss"):
        # Imported only here: redis-py is an optional dependency (lanner[redis]).
        from lanner.engines.redis.connection import impatient, parse_url
        from lanner.engines.redis.engine import RedisEngine

        if max_wait is None:
            return RedisEngine(url)
        return RedisEngine(url, options=impatient(parse_url(url)[1], max_wait))
    raise MalformedArgument(
        f"unknown broker URL scheme {scheme!r} in {url!r}; known: sqlite, redis, rediss"
    )
