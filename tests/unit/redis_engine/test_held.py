"""The connection the Redis engine holds for its core's calls (`held.py`): forks, threads,
a call cut off, a server restarted while the connection was idle."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Callable

import pytest
import redis

from lanner import EngineUnavailable
from lanner.engines.redis.connection import RedisOptions
from lanner.engines.redis.engine import RedisEngine

from .support import T0, RedisServer

# Keeps the server busy (a script blocks every client) for about `ARGV[1]` milliseconds.
_BUSY_SCRIPT = """
local function ms() local t = redis.call('TIME') return t[1] * 1000 + t[2] / 1000 end
local stop = ms() + tonumber(ARGV[1])
while ms() < stop do end
return 1
"""


def _put_and_check(engine: RedisEngine, prefix: str, count: int) -> list[str]:
    """Put `count` jobs one by one; the jids whose put replied another jid (none if
    every reply is its own call's)."""
    wrong = []
    for i in range(count):
        jid = f"{prefix}-{i}"
        if engine.put("q", jid, "Task", now=T0) != jid:
            wrong.append(jid)
    return wrong


def _lanner_clients(client: redis.Redis) -> int:
    return sum(1 for one in client.client_list() if one["name"] == "lanner")


def test_a_forked_child_calls_on_its_own_connection(redis_url: str) -> None:
    context = multiprocessing.get_context("fork")
    called, go = context.Event(), context.Event()
    with redis.Redis.from_url(redis_url) as client, RedisEngine(redis_url) as engine:
        client.flushdb()
        engine.put("q", "before-fork", "Task", now=T0)  # the parent's connection is held
        before = _lanner_clients(client)

        def child() -> None:
            engine.put("q", "child", "Task", now=T0)
            called.set()
            go.wait(30)
            os._exit(1 if _put_and_check(engine, "child", 1000) else 0)

        process = context.Process(target=child)
        process.start()
        try:
            assert called.wait(30)
            assert _lanner_clients(client) == before + 1  # the child's own, beside the parent's
        finally:
            go.set()
        # Both processes call at once: a shared socket would mix their replies.
        wrong = _put_and_check(engine, "parent", 1000)
        process.join(120)
        assert process.exitcode == 0
        assert wrong == []
        assert engine.queue_counts("q", now=T0).waiting == 2002


def test_threads_calling_at_once_each_get_their_own_replies(redis_url: str) -> None:
    with redis.Redis.from_url(redis_url) as client:
        client.flushdb()
    with RedisEngine(redis_url) as engine:
        wrong: list[str] = []
        threads = [
            threading.Thread(target=lambda n=n: wrong.extend(_put_and_check(engine, f"t{n}", 200)))
            for n in range(6)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert wrong == []
        assert engine.queue_counts("q", now=T0).waiting == 1200
        # The calls that found the held connection busy went through the pool.
        assert engine._client.connection_pool._created_connections >= 2


def test_a_call_that_timed_out_leaves_no_reply_for_the_next(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    server = redis_server_factory()
    options = RedisOptions(socket_timeout=0.3, retries=0)
    with RedisEngine(server.url, options=options) as engine:
        engine.put("q", "j1", "Task", now=T0)
        with redis.Redis(port=server.port) as other:
            blocker = threading.Thread(target=lambda: other.eval(_BUSY_SCRIPT, 0, 1500))
            blocker.start()
            try:
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline:  # until the script holds the server
                    try:
                        engine.put("q", "late", "Task", now=T0)
                    except EngineUnavailable:
                        break
                else:
                    pytest.fail("the busy script never held the server up")
            finally:
                blocker.join(10)
        # The timed-out put's reply (its jid) is never read as a later call's.
        assert engine.put("q", "j2", "Task", now=T0) == "j2"
        assert engine.get("j1", now=T0) is not None


def test_a_restart_while_idle_is_followed_without_a_warning(
    redis_server_factory: Callable[..., RedisServer], caplog: pytest.LogCaptureFixture
) -> None:
    server = redis_server_factory()
    with RedisEngine(server.url) as engine:
        engine.put("q", "before", "Task", now=T0)
        server.restart()
        with caplog.at_level("WARNING", logger="lanner.redis"):
            start = time.monotonic()
            assert engine.put("q", "after", "Task", now=T0) == "after"
            elapsed = time.monotonic() - start
        # A connection the server closed is dropped before the call, as the pool's are:
        # no failed try, so neither the retry's warning nor its backoff.
        assert [m for m in caplog.messages if m.startswith("cannot reach")] == []
        assert elapsed < 5.0


def test_durable_calls_from_threads_at_once_each_get_their_own_replies(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    primary = redis_server_factory()
    redis_server_factory("--replicaof", "127.0.0.1", str(primary.port))
    with redis.Redis(port=primary.port, decode_responses=True) as client:
        deadline = time.monotonic() + 30
        while client.info("replication")["connected_slaves"] < 1:
            assert time.monotonic() < deadline, "the replica never connected"
            time.sleep(0.05)
    # A replica may take seconds to confirm on a loaded machine: 20 s, as the replicated
    # conformance stores allow.
    with RedisEngine(primary.url + "?wait=1&wait_timeout=20&socket_timeout=30") as engine:
        wrong: list[str] = []
        raised: list[BaseException] = []

        def puts(prefix: str) -> None:
            try:
                wrong.extend(_put_and_check(engine, prefix, 100))
            except BaseException as error:
                raised.append(error)

        threads = [threading.Thread(target=puts, args=(f"t{n}",)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert raised == []
        assert wrong == []  # each put's reply (its jid), WAIT's confirmed behind it
        assert engine.queue_counts("q", now=T0).waiting == 400
