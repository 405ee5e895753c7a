"""FLOW on Redis Cluster: which partition enforces each key and bucket, and the merged state.

A concurrency key's slots and a rate bucket's starts live in the partition of the queue
whose pop counts them (the core's flow.lua, under the partition's prefix), so that a pop,
complete or put of one queue stays one atomic call on one shard. A key is then enforced
over the queues of one partition only (a queue and its fanout children): a key named from
two partitions would be counted twice, each partition letting its own `max_concurrency`
run. So the first partition to name a key owns it (`lanner.flow_claim` in `ql:{g}`, all
the names of a put at once, before anything is put), and a put naming it from another
partition is refused with `Unsupported` (capability `cross-queue-flow`). A process
remembers the names it has claimed, so a put pays the claim once per new key.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, Final

from lanner import checks
from lanner.engine import Capability
from lanner.engines.redis import replies
from lanner.engines.redis.cluster.partitions import GLOBAL, of_queue
from lanner.errors import Unsupported
from lanner.records import FlowBucket, FlowKey, FlowState

CACHE_SIZE: Final = 100_000
"""Keys and buckets whose owner a process remembers (the oldest are forgotten first)."""
_CHUNK: Final = 1_000
"""The most names one claim sends (a put_many of many keys makes several)."""

Call = Callable[..., Any]


class FlowOwners:
    """The owning partition of each FLOW key and bucket, as one process has claimed them."""

    def __init__(self, engine_name: str) -> None:
        self._name = engine_name
        self._claimed: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def claim(self, call_in: Call, checked: checks.Put, command: str) -> None:
        """Refuse the put (before anything is put) if it names a key or bucket from two
        partitions, or one another partition owns; else claim what is new."""
        wanted: dict[str, str] = {}
        for job in checked.jobs:
            if job.flow is None:
                continue
            partition = of_queue(job.queue)
            for name in _names(job.flow):
                seen = wanted.setdefault(name, partition)
                if seen != partition:
                    raise self._refusal(command, name, seen, partition)
        with self._lock:
            new = [name for name in wanted if self._claimed.get(name) != wanted[name]]
        by_partition: dict[str, list[str]] = {}
        for name in new:
            by_partition.setdefault(wanted[name], []).append(name)
        for partition, names in by_partition.items():
            for start in range(0, len(names), _CHUNK):
                chunk = names[start : start + _CHUNK]
                # Durable: a claim a failover lost would let another partition take it.
                taken = replies.as_list(call_in(GLOBAL, "lanner.flow_claim", checked.now,
                                                partition, *chunk, name=command,
                                                durable=True))  # fmt: skip
                if taken:
                    raise self._refusal(command, str(taken[0]), str(taken[1]), partition)
                self._remember(chunk, partition)

    def _remember(self, names: Iterable[str], partition: str) -> None:
        with self._lock:
            for name in names:
                self._claimed[name] = partition
                self._claimed.move_to_end(name)
            while len(self._claimed) > CACHE_SIZE:
                self._claimed.popitem(last=False)

    def _refusal(self, command: str, name: str, owner: str, partition: str) -> Unsupported:
        kind, _, label = name.partition(":")
        what = "concurrency key" if kind == "c" else "rate bucket"
        capability = Capability.CROSS_QUEUE_FLOW.value
        return Unsupported(
            self._name, command, capability,
            f"{what} {label!r} is enforced in the partition {_queue(owner)!r}, so jobs of "
            f"queue {_queue(partition)!r} cannot name it (on Redis Cluster a key or bucket "
            f"stays with the queues of one partition: capability {capability!r})",
        )  # fmt: skip


def _names(flow: Any) -> list[str]:
    """The owner names of a job's flow: 'c:<key>' and 'r:<bucket>' (a fair key is its
    queue's own)."""
    names = [] if flow.concurrency_key is None else [f"c:{flow.concurrency_key}"]
    return names + [f"r:{rate.bucket}" for rate in flow.rates]


def _queue(partition: str) -> str:
    """The queue (or fanout family) of a partition, `ql:{q:emails}` -> `emails`."""
    return partition.removeprefix("ql:{q:").removesuffix("}")


def state(answers: Iterable[Any]) -> FlowState:
    """The flow state of every partition merged: a key or bucket in two partitions (one
    owned before another took it over by hand) shows its counts summed."""
    keys: dict[str, FlowKey] = {}
    buckets: dict[str, FlowBucket] = {}
    for answer in answers:
        reply = json.loads(answer)
        for k, running, cap, held in reply["keys"]:
            one = FlowKey(str(k), int(running), int(cap), int(held))
            seen = keys.get(one.key)
            keys[one.key] = one if seen is None else FlowKey(
                one.key, seen.running + one.running, max(seen.cap, one.cap), seen.held + one.held
            )  # fmt: skip
        for b, limit, period, recent, held, at in reply["buckets"]:
            bucket = FlowBucket(str(b), int(limit), float(period), int(recent), int(held),
                                float(at))  # fmt: skip
            prior = buckets.get(bucket.bucket)
            buckets[bucket.bucket] = bucket if prior is None else FlowBucket(
                bucket.bucket, bucket.limit, bucket.period, prior.recent + bucket.recent,
                prior.held + bucket.held, max(prior.next_at, bucket.next_at),
            )  # fmt: skip
    return FlowState(
        tuple(keys[name] for name in sorted(keys)),
        tuple(buckets[name] for name in sorted(buckets)),
    )
