"""How the Redis engine waits: a pop for jobs, a client for a job to finish.

Both register in Redis, then BLPOP a list the command that makes the awaited thing happen
pushes to; neither polls.

A pop: register as waiting, then BLPOP for hand-offs and wake-ups.

`lanner.pop_wait` pops, and when it finds nothing registers the worker as waiting: a
command that makes jobs ready then pops them for the worker and pushes them to
`ql:lanner:handoff:<queue>:<worker>`, so the BLPOP reply is the jobs themselves. Ready jobs
not handed off push tokens to `ql:lanner:notify:<queue>`, which wake the worker to pop
again. Jobs that become ready with time (delays, expiring locks, recurring runs) are due
at the `next_due` pop_wait replies with, which bounds the wait. Every wait ends with a
pop_wait that registers nothing, so jobs handed off as a BLPOP timed out are taken, not
left behind.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import Any, Final

import redis

from lanner import checks
from lanner.engines.redis import replies
from lanner.job import Job

BLOCK_CHUNK: Final = 30.0
"""A blocked pop waits in BLPOP for at most this long at a time, so that a connection to a
server that vanished without closing it is noticed (the socket timeout is longer)."""

_IDLE_PAUSES: Final = (0.01, 1.0)
# When something is already due but a pop could not take it (e.g. the queue is at its
# concurrency limit), the wait between looks grows from the first to the second value.

Call = Callable[..., Any]


def pop(
    call: Call, client: redis.Redis | redis.RedisCluster, command: checks.Pop, prefix: str = "ql:"
) -> list[Job]:
    """Pop through `call` (the engine's call of its core); wait in `client`'s BLPOP.
    `prefix` starts the keys (on Redis Cluster, the queue's partition and ':')."""
    deadline = time.monotonic() + command.wait
    handoff = f"{prefix}lanner:handoff:{command.queue}:{command.worker}"
    notify = f"{prefix}lanner:notify:{command.queue}"
    idle = _IDLE_PAUSES[0]
    while True:
        at = time.time() if command.now is None else command.now
        remaining = deadline - time.monotonic()
        block = min(max(remaining, 0.0), BLOCK_CHUNK)
        reply = call(
            "lanner.pop_wait", at, command.queue, command.worker, command.limit, block,
            name="pop",
        )  # fmt: skip
        taken = replies.jobs(reply[0])
        if taken or remaining <= 0:
            return taken
        timeout = block
        next_due = reply[1] if len(reply) > 1 else None
        if next_due is not None:
            clock = time.time() if command.now is None else command.now
            if float(next_due) > clock:
                timeout = min(timeout, float(next_due) - clock)
            else:
                # Due, yet the pop could not take it (e.g. max-concurrency): look later.
                timeout = min(timeout, idle)
                idle = min(idle * 2, _IDLE_PAUSES[1])
        woken = client.blpop([handoff, notify], timeout=blpop_timeout(timeout))
        if woken is not None and woken[0] == handoff:
            return replies.jobs(woken[1])


def blpop_timeout(seconds: float) -> float:
    """BLPOP's timeout: whole milliseconds, rounded up, never 0 (which blocks forever)."""
    return max(0.001, math.ceil(min(seconds, BLOCK_CHUNK) * 1000) / 1000)


def wait(
    call: Call, client: redis.Redis | redis.RedisCluster, command: checks.Wait, prefix: str = "ql:"
) -> Job | None:
    """Wait for a job to finish: `lanner.await` registers the caller (until the wait's end)
    unless the job is finished or gone, then BLPOP its ql:lanner:finished:<jid> list."""
    deadline = time.monotonic() + command.timeout
    key = f"{prefix}lanner:finished:{command.jid}"
    while True:
        at = time.time() if command.now is None else command.now
        remaining = deadline - time.monotonic()
        reply = call("lanner.await", at, command.jid, at + max(remaining, 0.0), name="wait")
        if reply[0] == "gone":
            return None
        if reply[0] == "finished":
            return replies.job(json.loads(reply[1]))
        if remaining <= 0:  # the job as it is
            found = replies.jobs(call("lanner.multiget", at, command.jid, name="wait"))
            return found[0] if found else None
        client.blpop([key], timeout=blpop_timeout(remaining))
