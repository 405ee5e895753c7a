"""A connection of a redis-py client's pool, held by the engine for its calls of the core.

redis-py's client takes a connection from its pool for every command and gives it back
after, and records each step for its observability hooks: with redis-py 8.1 that
bookkeeping costs about as much CPU as the call itself (a call of the core, in a loop: 38
to 58 µs of the caller's CPU through the pool, 21 to 31 µs here; docs/benchmarks.md). The
engine's calls of its core are many and small, so `HeldConnection` takes one connection
out of the pool once and sends each call down it with redis-py's own `Connection`
(`send_packed_command`, `read_response`: its health check, hiredis's reply parser),
packed by hiredis as that connection packs, under the same retry policy as any command of
the client (`connection._Retry`: backoff, reconnection, the first failure logged). What
the pool does around each command is kept:

- Forks: a connection is only ever used by the process that opened it. A child (the pid
  differs) leaves its parent's connection alone and takes its own from the pool, which
  redis-py resets in a child.
- Threads: one call at a time uses the held connection; a call that finds it in use goes
  through the pool as before, so threads never wait on each other.
- Before a call, a connection the server closed while it was idle (a restart) or one
  with unread data is dropped, and the call connects afresh, as the pool's hand-out does.
  After it, a connection marked for reconnection, or one the pool no longer owns (with
  Sentinel: a connection to a former primary), is dropped, as the pool's release does.
- A call cut off between its send and its read (a timeout, an exception raised by a
  signal handler) drops the connection, so that no later call reads its reply.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.utils import HIREDIS_AVAILABLE

if HIREDIS_AVAILABLE:
    from hiredis import pack_command


class _Held:
    """The held connection of one process, and the lock of the thread using it."""

    __slots__ = ("connection", "lock", "pid")

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        # A redis-py `Connection`, whose methods have no type hints.
        self.connection: Any = None


Command = tuple[str | int, ...]


class HeldConnection:
    """Runs commands on one connection of `client`'s pool, held between commands."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._pool = client.connection_pool
        self._held = _Held()

    def execute(self, *args: str | int) -> Any:
        """The reply of one command (an error reply raised as redis-py raises it)."""
        held = self._take()
        if held is None:
            return self._client.execute_command(*args)  # type: ignore[no-untyped-call]
        try:
            return self._run(held, (args,), errors_as_replies=False)[0]
        finally:
            self._give_back(held)

    def pipeline(self, *commands: Command) -> list[Any]:
        """The replies of `commands`, sent together down one connection, error replies
        among them as values: redis-py's ``pipeline(transaction=False)`` and its
        ``execute(raise_on_error=False)``."""
        held = self._take()
        if held is None:
            pipe = self._client.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)  # type: ignore[no-untyped-call]
            return pipe.execute(raise_on_error=False)
        try:
            replies: list[Any] = self._run(held, commands, errors_as_replies=True)
            return replies
        finally:
            self._give_back(held)

    def _take(self) -> _Held | None:
        """This process's held connection, locked for this thread; None if another
        thread is using it."""
        held = self._held
        if held.pid != os.getpid():
            # A fork's child: the parent's socket and lock are not this process's.
            held = self._held = _Held()
        return held if held.lock.acquire(blocking=False) else None

    def _give_back(self, held: _Held) -> None:
        if held is not self._held and held.connection is not None:
            # Two threads of a new child both replaced the state: give this one back.
            self._pool.release(held.connection)
            held.connection = None
        held.lock.release()

    def _run(self, held: _Held, commands: tuple[Command, ...], errors_as_replies: bool) -> Any:
        connection = self._ready(held)
        packed = _packed(connection, commands)

        def attempt() -> list[Any]:
            try:
                connection.send_packed_command(packed)
                return _replies(connection, len(commands), errors_as_replies)
            except ResponseError:
                raise  # a whole reply was read: the connection is ready for the next
            except BaseException:
                connection.disconnect()
                raise

        def failed(error: Exception, failures: int) -> None:
            connection.disconnect()

        try:
            return connection.retry.call_with_retry(attempt, failed, with_failure_count=True)
        finally:
            if _marked(connection) or not self._pool.owns_connection(connection):
                connection.disconnect()

    def _ready(self, held: _Held) -> Any:
        """The held connection, ready to send (the pool's checks when it hands one out)."""
        connection = held.connection
        if connection is None:
            connection = held.connection = self._pool.get_connection()
        elif connection._sock is not None:  # connected (`is_connected` is redis-py 7's)
            try:
                dirty = connection.can_read()
            except (RedisConnectionError, RedisTimeoutError, OSError):
                dirty = True  # closed by the server (a restart): reconnect without a retry
            if dirty:
                connection.disconnect()
        return connection


def _packed(connection: Any, commands: tuple[Command, ...]) -> Any:
    if HIREDIS_AVAILABLE:
        # What redis-py's connection packs with then, without its pass over each argument
        # for a bytearray or memoryview (the core's are str and int). hiredis's stub
        # declares a tuple of one item; it takes any number.
        if len(commands) == 1:
            return [pack_command(commands[0])]  # type: ignore[arg-type]
        return [b"".join(pack_command(args) for args in commands)]  # type: ignore[arg-type]
    return connection.pack_commands(commands)


def _replies(connection: Any, count: int, errors_as_replies: bool) -> list[Any]:
    """The next `count` replies; an error reply raised, or kept among them."""
    replies = []
    for _ in range(count):
        try:
            replies.append(connection.read_response())
        except ResponseError as error:
            if not errors_as_replies:
                raise
            replies.append(error)
    return replies


def _marked(connection: Any) -> bool:
    """Whether redis-py marked the connection for reconnection (a server's maintenance
    notice; redis-py 7 and later)."""
    marked = getattr(connection, "should_reconnect", None)
    return marked is not None and bool(marked())
