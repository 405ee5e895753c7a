"""Engines, and `open_engine(url)` which picks one from a broker URL.

sqlite:///relative/path.db        sqlite:////absolute/path.db
sqlite:///jobs.db?synchronous=normal&busy_timeout=5&max_data_bytes=1048576
redis://[user:password@]host[:port][/db]?socket_timeout=5    (needs lanner[redis])
rediss://user:password@host:6380/0                           (TLS, certificates verified)
redis+sentinel://host:26379,host2:26379/PRIMARY_NAME[/db]?wait=1  (the primary via Sentinel)
redis+cluster://host:port[,host:port...]    rediss+cluster://... (Redis Cluster: seed nodes)
sqs://eu-west-1?prefix=myapp-v42-&endpoint_url=http://127.0.0.1:9324      (needs lanner[sqs])
"""

from __future__ import annotations

import re
from dataclasses import replace
from urllib.parse import parse_qsl, urlsplit

from lanner.engine import Engine
from lanner.errors import MalformedArgument


def open_engine(url: str, *, max_wait: float | None = None, one_shot: bool = False) -> Engine:
    """Open the engine a broker URL names. Nothing is opened at import time.

    With `max_wait`, neither opening it nor its commands wait for the store longer than
    about that many seconds (`EngineUnavailable`), as with `Engine.reopen(max_wait=...)`.
    `one_shot`: for a command run once, such as the command line's: a store that cannot be
    reached (Redis, SQS) fails it within seconds, rather than being retried through a
    restart as workers and publishers do; waits for a lock or a reply are as usual.
    """
    if not isinstance(url, str):
        raise MalformedArgument(f"broker URL must be a str, not {type(url).__name__}")
    scheme = url.partition("://")[0]
    path = sqlite_path(url)
    if path is not None:
        from lanner.engines.sqlite import SQLiteEngine, SQLiteOptions

        query = dict(parse_qsl(urlsplit(url).query, strict_parsing=False))
        options = SQLiteOptions.from_query(query)
        if max_wait is not None:
            options = replace(options, busy_timeout=min(options.busy_timeout, max_wait))
        return SQLiteEngine(path, options)
    if scheme in ("redis", "rediss", "redis+sentinel", "rediss+sentinel"):
        # Imported only here: redis-py is an optional dependency (lanner[redis]).
        from lanner.engines.redis import connection as redis_connection
        from lanner.engines.redis.engine import RedisEngine

        redis_options = redis_connection.parse_url(url)[1]
        if one_shot:
            redis_options = redis_connection.one_shot(redis_options)
        if max_wait is not None:
            redis_options = redis_connection.impatient(redis_options, max_wait)
        return RedisEngine(url, options=redis_options)
    if scheme in ("redis+cluster", "rediss+cluster"):
        from lanner.engines.redis.cluster.engine import open_cluster

        return open_cluster(url, max_wait=max_wait, one_shot_command=one_shot)
    if scheme == "sqs":
        # Imported only here: boto3 is an optional dependency (lanner[sqs]).
        from lanner.engines.sqs import connection as sqs_connection
        from lanner.engines.sqs.engine import SQSEngine

        sqs_options = sqs_connection.parse_url(url)[1]
        if one_shot:
            sqs_options = sqs_connection.one_shot(sqs_options)
        if max_wait is not None:
            sqs_options = sqs_connection.impatient(sqs_options, max_wait)
        return SQSEngine(url, options=sqs_options)
    raise MalformedArgument(
        f"unknown broker URL scheme {scheme!r} in {shown_url(url)!r}; "
        "known: sqlite, redis, rediss, redis+sentinel, rediss+sentinel, redis+cluster, "
        "rediss+cluster, sqs"
    )


def sqlite_path(url: str) -> str | None:
    """The file a `sqlite://` URL names (relative to the working directory, or absolute),
    or None for another scheme."""
    scheme, _, rest = url.partition("://")
    if scheme != "sqlite":
        return None
    path = rest.split("?", 1)[0]
    if not path.startswith("/") or len(path) < 2:
        raise MalformedArgument(
            f"bad SQLite URL {url!r}: use sqlite:///relative.db or sqlite:////absolute.db"
        )
    return path[1:]


def shown_url(url: str) -> str:
    """A broker URL as logs and messages show it: without its password."""
    return re.sub(r"(//[^/@:]*:)[^/@]*@", r"\1***@", url)
