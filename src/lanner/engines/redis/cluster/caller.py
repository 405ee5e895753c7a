"""Loading the Lua core on every primary of a cluster, and calling it in one partition.

The core is the single-instance one, as a function library (`FCALL <name> 1 <partition>
<command> <now> <args...>`): the one declared key, `ql:{<tag>}`, is the partition whose
hash slot every key of the call shares (redis-py routes the call by it). Functions are
replicated, so a replica promoted by a failover has it; a primary that lacks it (a new or
restarted node) answers "Function not found", and the core is loaded on every primary
again before the call is repeated. Clusters without FUNCTION (Redis 6.2) run it as a
script, `EVALSHA <sha> 1 <partition> ...`.

A durable call (the `wait` option) goes with ``WAIT <replicas> <timeout ms>`` in one
pipeline down one connection to the primary of the partition's slot, as on one Redis: WAIT
counts the replicas that have every write of its connection, so it must follow the call on
the connection that ran it, which redis-py's cluster pipeline does not promise for a
command without a key. A primary that no longer serves the slot (a failover, a resharding)
answers MOVED before running anything: the slot map is read again and the call sent to
the new primary.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis import Redis
from redis.cluster import RedisCluster
from redis.exceptions import AskError, MovedError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from lanner.engines.redis.caller import LuaCaller, LuaMode, waited
from lanner.engines.redis.script import build_library, build_script, library_name, script_sha
from lanner.errors import EngineUnavailable


class ClusterCaller:
    """Calls the Lua core in one partition of a cluster."""

    def __init__(
        self, client: RedisCluster, mode: LuaMode, wait: int = 0, wait_timeout: float = 0.0
    ) -> None:
        """`wait`, `wait_timeout`: a durable call waits for that many replicas of its
        shard, at most that many seconds (0: durable calls are as any other)."""
        self._client = client
        self._wait = wait
        self._wait_ms = max(1, round(wait_timeout * 1000))
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

    def call(self, partition: str, argv: Sequence[str], durable: bool = False) -> Any:
        """One command in `partition`, loading the core again once if a primary lacks it;
        a `durable` one is followed by WAIT if the engine waits for replicas."""
        for attempt in (1, 2):
            try:
                if durable and self._wait:
                    return self._call_and_wait(partition, argv)
                if self.mode == "function":
                    return self._client.fcall(self._name, 1, partition, *argv)
                return self._client.evalsha(self._sha, 1, partition, *argv)
            except ResponseError as error:
                if attempt == 2 or not LuaCaller.is_missing(error):
                    raise
                self.load()
        raise AssertionError("unreachable")  # pragma: no cover

    def _call_and_wait(self, partition: str, argv: Sequence[str]) -> Any:
        """The call and WAIT in one pipeline to the primary of the partition's slot."""
        for _ in range(_REDIRECTS):
            node = self._client.get_node_from_key(partition)  # type: ignore[no-untyped-call]
            server: Redis = self._client.get_redis_connection(node)
            pipe = server.pipeline(transaction=False)
            if self.mode == "function":
                pipe.fcall(self._name, 1, partition, *argv)
            else:
                pipe.evalsha(self._sha, 1, partition, *argv)
            pipe.execute_command("WAIT", self._wait, self._wait_ms)  # type: ignore[no-untyped-call]
            try:
                reply, replicas = pipe.execute(raise_on_error=False)
            except (RedisConnectionError, RedisTimeoutError):
                # The primary may be gone: the next call reads the slot map again.
                self._client.nodes_manager.initialize(last_failed_node_name=node.name)
                raise
            if isinstance(reply, MovedError | AskError):
                # Refused unrun: the slot is served elsewhere now.
                self._client.nodes_manager.initialize()
                continue
            done = f"{argv[0]}: done on the primary {node.name}"
            return waited(reply, replicas, self._wait, self._wait_ms, done)
        raise EngineUnavailable(f"{argv[0]}: the slot of {partition} kept moving")


_REDIRECTS = 5
"""How many times a durable call follows its slot to another primary before giving up."""
