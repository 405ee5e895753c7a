"""How the Redis engine calls its Lua core: one function library, or one script.

On Redis 7 and later the engine loads the core as a function library (``FUNCTION LOAD``)
and calls ``FCALL <name> 0 <command> <now> <args...>``: the library's top level, which
defines a few hundred Lua functions, then runs once instead of on every call. On Redis
6.2, or where ACLs refuse ``FUNCTION LOAD``, it loads the same core as a script and calls
``EVALSHA <sha> 0 ...``, the way qless's clients do. Both use the same keys, so processes
using either way share queues.

Redis forgets loaded scripts and functions when it restarts without persistence, and on
``SCRIPT FLUSH`` / ``FUNCTION FLUSH``. A reply saying so (`is_missing`) makes the engine
load the core again and repeat the call. A replica promoted by a failover has the library
(``FUNCTION LOAD`` is replicated) but maybe not the script: the same reply loads it there.

Calls go down a connection the caller holds (`held.py`), not through redis-py's pool for
each; a call made while another thread uses it goes through the pool.

A durable call (the engine's `wait` option) is sent in one round trip with
``WAIT <replicas> <timeout ms>`` behind it on the same connection: the reply comes once
that many replicas have the call's writes. Redis replicates asynchronously, so without it a
write the primary acknowledged can be lost by a failover before a replica had it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from redis import Redis
from redis.exceptions import NoPermissionError, NoScriptError, ResponseError

from lanner.engines.redis.held import HeldConnection
from lanner.engines.redis.script import build_library, build_script, library_name, script_sha
from lanner.errors import EngineUnavailable, LannerError

LuaMode = Literal["auto", "function", "script"]
LUA_MODES: tuple[LuaMode, ...] = ("auto", "function", "script")


class LuaCaller:
    """Calls the Lua core through one Redis client, as a function where it can."""

    def __init__(
        self, client: Redis, mode: LuaMode, wait: int = 0, wait_timeout: float = 0.0
    ) -> None:
        """`wait`, `wait_timeout`: a durable call waits for that many replicas, at most
        that many seconds (0: durable calls are as any other)."""
        self._client = client
        self._held = HeldConnection(client)
        self._wait = wait
        self._wait_ms = max(1, round(wait_timeout * 1000))
        self._sha = script_sha()
        self._name = library_name()
        self.mode: Literal["function", "script"] = "script" if mode == "script" else "function"
        try:
            self.load()
        except ResponseError as error:
            # Redis 6.2 has no FUNCTION command; an ACL may allow scripts only.
            refused = isinstance(error, NoPermissionError) or "unknown command" in str(error)
            if mode != "auto" or not refused:
                raise
            self.mode = "script"
            self.load()

    def load(self) -> None:
        """Load the core into Redis unless it is there (again, after a restart or a flush).

        A library's name is its content's hash, so one of that name is this core: loading it
        again would only block Redis while it compiles (2-3 ms), at every process start.
        """
        if self.mode == "function":
            if self._client.function_list(library=self._name):
                return
            try:
                self._client.function_load(build_library())
            except ResponseError as error:
                if "already exists" not in str(error):  # another process won the race
                    raise
            return
        sha = self._client.script_load(build_script())
        if sha != self._sha:
            raise LannerError(f"Redis computed SHA {sha} for lanner's script, not {self._sha}")

    def call(self, argv: Sequence[str], durable: bool = False) -> Any:
        """One command, loading the core again once if Redis lost it; a `durable` one is
        followed by WAIT if the engine waits for replicas."""
        for attempt in (1, 2):
            try:
                if durable and self._wait:
                    return self._call_and_wait(argv)
                if self.mode == "function":
                    return self._held.execute("FCALL", self._name, 0, *argv)
                return self._held.execute("EVALSHA", self._sha, 0, *argv)
            except ResponseError as error:
                if attempt == 2 or not self.is_missing(error):
                    raise
                self.load()
        raise AssertionError("unreachable")  # pragma: no cover

    def _call_and_wait(self, argv: Sequence[str]) -> Any:
        """The call and WAIT in one pipeline: WAIT counts the replicas that have every
        write its connection made, so both must go down the same connection."""
        if self.mode == "function":
            call: tuple[str | int, ...] = ("FCALL", self._name, 0, *argv)
        else:
            call = ("EVALSHA", self._sha, 0, *argv)
        reply, replicas = self._held.pipeline(call, ("WAIT", self._wait, self._wait_ms))
        return waited(reply, replicas, self._wait, self._wait_ms, f"{argv[0]}: done on the primary")

    @staticmethod
    def is_missing(reply: object) -> bool:
        """Whether a reply says Redis does not have the core loaded."""
        return isinstance(reply, NoScriptError) or (
            isinstance(reply, ResponseError) and str(reply).startswith("Function not found")
        )


def waited(reply: Any, replicas: Any, wait: int, wait_ms: int, done: str) -> Any:
    """The reply of a durable call followed by WAIT, once `wait` replicas confirmed it
    (`done`: what the error says was done where)."""
    if isinstance(reply, Exception):
        raise reply
    if isinstance(replicas, Exception):
        raise replicas
    if int(replicas) < wait:
        raise EngineUnavailable(
            f"{done}, but {replicas} of the {wait} replica(s) asked for (wait={wait}) "
            f"confirmed it within {wait_ms} ms: a failover now could lose it"
        )
    return reply
