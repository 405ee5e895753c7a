"""Loading the Lua core on every primary of a cluster, and calling it in one partition.

The core is the single-instance one, as a function library (`FCALL <name> 1 <partition>
<command> <now> <args...>`): the one declared key, `ql:{<tag>}`, is the partition whose
hash slot every key of the call shares (redis-py routes the call by it). Functions are
replicated, so a replica promoted by a failover has it; a primary that lacks it (a new or
restarted node) answers "Function not found", and the core is loaded on every primary
again before the call is repeated. Clusters without FUNCTION (Redis 6.2) run it as a
script, `EVALSHA <sha> 1 <partition> ...`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis import Redis
from redis.cluster import RedisCluster
from redis.exceptions import ResponseError

from lanner.engines.redis.caller import LuaCaller, LuaMode
from lanner.engines.redis.script import build_library, build_script, library_name, script_sha


class ClusterCaller:
    """Calls the Lua core in one partition of a cluster."""

    def __init__(self, client: RedisCluster, mode: LuaMode) -> None:
        self._client = client
        self._sha = script_sha()
        self._name = library_name()
        self.mode = "script" if mode == "script" else "function"
        try:
            self.load()
        except ResponseError as error:
            if mode != "auto" or "unknown command" not in str(error):
                raise
            self.mode = "script"
            self.load()

    def load(self) -> None:
        """Load the core on every primary that lacks it."""
        for node in self._client.get_primaries():  # type: ignore[no-untyped-call]
            server: Redis = node.redis_connection
            if self.mode == "script":
                server.script_load(build_script())
                continue
            if server.function_list(library=self._name):
                continue
            try:
                server.function_load(build_library())
            except ResponseError as error:
                if "already exists" not in str(error):  # another process won the race
                    raise

    def call(self, partition: str, argv: Sequence[str]) -> Any:
        """One command in `partition`, loading the core again once if a primary lacks it."""
        for attempt in (1, 2):
            try:
                if self.mode == "function":
                    return self._client.fcall(self._name, 1, partition, *argv)
                return self._client.evalsha(self._sha, 1, partition, *argv)
            except ResponseError as error:
                if attempt == 2 or not LuaCaller.is_missing(error):
                    raise
                self.load()
        raise AssertionError("unreachable")  # pragma: no cover
