"""What the Redis engine and the Redis Cluster engine share: the face they both show
(`max_data_bytes`, `reopen`) and the two steps of a core call that do not depend on where
the call runs (its argv, and a put's arguments and reply).

Each engine keeps its own `_call` / `call_in`: one runs on one client, the other in a
partition of a cluster; both build their argv here, so a command reaches either core in
the same words.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any, Self

from lanner import checks
from lanner.engine import Engine
from lanner.engines.redis import arguments
from lanner.engines.redis.arguments import Arg
from lanner.engines.redis.blocking import Call
from lanner.engines.redis.connection import RedisOptions, impatient


def core_argv(command: str, now: float, args: tuple[Arg, ...]) -> list[str]:
    """`<command> <now> <args...>` as the core reads them (`now` as `repr(float)`)."""
    return [command, repr(now), *map(arguments.text, args)]


def put_jobs(call: Call, command: str, jobs: Sequence[Any], checked: checks.Put) -> list[str]:
    """put, requeue or put_many of `jobs` (of `checked`) through `call`; the jids put."""
    if command == "put_many":
        payload = arguments.put_many(jobs)
        reply = call("lanner.put_many", checked.now, "", payload, name=command, durable=True)
        return [str(jid) for jid in reply]
    # put and requeue: the core's own commands, which qless clients also call.
    [job] = jobs
    args = arguments.put(job, checked.worker)
    return [str(call(command, checked.now, *args, durable=True))]


class RedisFamilyEngine(Engine):
    """An engine opened from a URL and `RedisOptions`: reopened from the same URL."""

    _url: str
    options: RedisOptions

    @abc.abstractmethod
    def __init__(self, url: str, *, options: RedisOptions | None = None) -> None:
        """`options` replace those of the URL's query."""

    @property
    def max_data_bytes(self) -> int:
        return self.options.max_data_bytes

    def reopen(self, *, max_wait: float | None = None) -> Self:
        options = self.options if max_wait is None else impatient(self.options, max_wait)
        return type(self)(self._url, options=options)
