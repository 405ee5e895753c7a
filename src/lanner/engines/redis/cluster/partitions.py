"""Partitions: which hash tag holds a queue, which partition holds a job.

A queue's partition is `ql:{q:<queue>}` (a fanout child `p+c` shares `{q:p}`, as its
parent's put writes both). `ql:{g}` holds what belongs to no queue: the registry of
partitions (`ql:{g}:partitions`, a SET) and the settings every partition gets a copy of
(`ql:{g}:config`). A partition is registered the first time a process sends a command to
its queue; registering one copies the settings into it.

A job lives in the partition of the queue it was last put into (a completed job stays
there). Commands that name a job by jid alone find it through a cache of this process
(filled by put and pop, so a worker's heartbeats, fails and retries never look), else by
asking every partition at once (one pipelined EXISTS per partition); a cached partition
that turns out wrong (the job moved) is looked up again. A jid found in no partition is
sent to `ql:{g}`, whose core then answers as one Redis does ("Job ... does not exist").
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any, Final

from redis.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

GLOBAL: Final = "ql:{g}"
REGISTRY: Final = GLOBAL + ":partitions"
CONFIG: Final = GLOBAL + ":config"
CACHE_SIZE: Final = 100_000
"""Jobs whose partition a process remembers (the oldest are forgotten first)."""


def of_queue(queue: str) -> str:
    """The partition of a queue."""
    return "ql:{q:" + queue.partition("+")[0] + "}"


def key(partition: str, rest: str) -> str:
    """A key of the core's layout (`rest` after `ql:`) inside a partition."""
    return f"{partition}:{rest}"


class Partitions:
    """The partitions of one cluster, as one process knows them."""

    def __init__(self, client: RedisCluster) -> None:
        self._client = client
        self._registered: set[str] = set()
        self._jobs: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()
        self.stranded: list[tuple[str, str]] = []
        """(jid, partition) of jobs a lookup found moving out of a partition."""

    def register(self, partition: str) -> None:
        """Make sure the partition is in the registry and has the shared settings."""
        if partition in self._registered or partition == GLOBAL:
            return
        if self._client.sadd(REGISTRY, partition):
            settings = self._client.hgetall(CONFIG)
            if settings:
                flat = [part for pair in settings.items() for part in pair]
                self._client.hset(key(partition, "config"), items=flat)
        self._registered.add(partition)

    def every(self) -> list[str]:
        """Every registered partition, in a stable order."""
        found = {str(name) for name in self._client.smembers(REGISTRY)}
        self._registered |= found
        return sorted(found)

    def remember(self, jids: Iterable[str], partition: str) -> None:
        with self._lock:  # a worker's keeper thread settles jobs beside its main thread
            for jid in jids:
                self._jobs[jid] = partition
                self._jobs.move_to_end(jid)
            while len(self._jobs) > CACHE_SIZE:
                self._jobs.popitem(last=False)

    def forget(self, jid: str) -> None:
        with self._lock:
            self._jobs.pop(jid, None)

    def cached(self, jid: str) -> str | None:
        return self._jobs.get(jid)

    def locate(
        self, jids: Iterable[str], *, kind: str = "j", fresh: bool = False
    ) -> dict[str, str]:
        """jid -> partition of each job (`kind` "r": recurring template) found anywhere;
        with `fresh` the cache is not trusted."""
        wanted = list(dict.fromkeys(jids))
        found: dict[str, str] = {}
        if kind == "j" and not fresh:
            # .get: another thread may forget a jid between a test and a read.
            cached = {jid: self._jobs.get(jid) for jid in wanted}
            found = {jid: partition for jid, partition in cached.items() if partition}
        missing = [jid for jid in wanted if jid not in found]
        if missing:
            asked = self._ask(missing, kind)
            found.update(asked)
            if kind == "j":
                for jid, partition in asked.items():
                    self.remember([jid], partition)
        return found

    def _ask(self, jids: list[str], kind: str) -> dict[str, str]:
        """Every partition at once: where each jid is. Where one is in two partitions (a
        move under way), the one it is not moving out of; one only moving out is noted in
        `stranded`. One EXISTS of all the jids per partition (the keys of a partition
        share its slot), then one per jid in the partitions that hold any."""
        every = self.every()
        counts = self._exists([[key(part, f"{kind}:{jid}") for jid in jids] for part in every])
        holding = [part for part, count in zip(every, counts, strict=True) if count]
        asked = [(jid, part) for part in holding for jid in jids]
        answers = self._exists([[key(part, f"{kind}:{jid}")] for jid, part in asked])
        held = [pair for pair, exists in zip(asked, answers, strict=True) if exists]
        if not held:
            return {}
        pipe: Any = self._client.pipeline(transaction=False)  # type: ignore[no-untyped-call]
        for jid, part in held:
            pipe.sismember(key(part, "lanner:moving"), jid)
        found: dict[str, str] = {}
        moving: dict[str, str] = {}
        for (jid, part), leaving in zip(held, pipe.execute(), strict=True):
            if leaving:
                moving[jid] = part
                self.stranded.append((jid, part))
            else:
                found.setdefault(jid, part)
        return moving | found

    def _exists(self, key_groups: list[list[str]]) -> list[int]:
        """EXISTS of each group of keys (one slot each): one plain pipeline per node, as
        redis-py's cluster pipeline spends some 100 µs of Python routing each command; the
        cluster client where a node answers that a slot has moved."""
        by_node: dict[str, tuple[Any, list[int]]] = {}
        for index, group in enumerate(key_groups):
            node = self._client.get_node_from_key(group[0])  # type: ignore[no-untyped-call]
            by_node.setdefault(node.name, (node, []))[1].append(index)
        counts = [0] * len(key_groups)
        try:
            for node, indexes in by_node.values():
                pipe = node.redis_connection.pipeline(transaction=False)
                for index in indexes:
                    pipe.exists(*key_groups[index])
                for index, count in zip(indexes, pipe.execute(), strict=True):
                    counts[index] = int(count)
        except (ResponseError, RedisConnectionError, RedisTimeoutError):
            counts = [int(self._client.exists(*group)) for group in key_groups]
        return counts

    def take_stranded(self) -> list[tuple[str, str]]:
        taken, self.stranded = self.stranded, []
        return taken

    def group(self, jids: Iterable[str], *, kind: str = "j") -> dict[str, list[str]]:
        """The jids by partition, in their order; those found nowhere under GLOBAL."""
        wanted = list(dict.fromkeys(jids))
        where = self.locate(wanted, kind=kind)
        grouped: dict[str, list[str]] = {}
        for jid in wanted:
            grouped.setdefault(where.get(jid, GLOBAL), []).append(jid)
        return grouped
