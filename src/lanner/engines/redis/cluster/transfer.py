"""Moving a job from one partition to another, in steps that a crash can neither lose
nor duplicate.

A put of a jid that lives in another queue's partition, or a complete that sends a job on
to a queue of another partition, takes three calls (the core's `cluster.lua` says what
each does): `lanner.move_out` in the source (the job leaves every set there and waits in
state `moving`, holding the put that recreates it), that put in the target unless the job
is there already, and `lanner.move_done` in the source. Each step can be repeated: a
process that dies between two leaves the jid listed in the source's `ql:lanner:moving`,
and `finish_all` (run when an engine opens) or the next lookup of the job does what is
left. Until then the job is in neither queue's counts: it is not lost, only late. With
the `wait` option, the steps out and in are durable calls (`lanner.move_done` need not be:
lost, it is done again).

`between_steps` is for tests: called with the name of each step just done, it may end
the process there.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lanner import checks
from lanner.engine import Capability
from lanner.engines.redis import arguments, replies
from lanner.engines.redis.cluster.partitions import key, of_queue
from lanner.errors import Unsupported
from lanner.records import NewJob

if TYPE_CHECKING:
    from lanner.engines.redis.cluster.engine import RedisClusterEngine

between_steps: Callable[[str], None] | None = None

_RECUR_FIELDS = ("klass", "data", "priority", "tags", "retries", "interval", "backlog")


def _step(name: str) -> None:
    if between_steps is not None:
        between_steps(name)


def move(
    engine: RedisClusterEngine, source: str, job: NewJob, checked: checks.Put, command: str
) -> str:
    """Put `job` into its queue's partition when its jid lives in `source`."""
    target = of_queue(job.queue)
    put = arguments.put_many([job._replace(if_exists="keep")])
    state = engine.call_in(
        source, "lanner.move_out", checked.now, target, job.jid, job.if_exists, put,
        name=command, durable=True,
    )  # fmt: skip
    if state == "kept":
        return job.jid
    if state == "was-moving":  # finish the move begun before, then put as asked
        finish(engine, source, job.jid, checked.now)
        return engine.put_in(target, command, [job], checked)[0]
    if state == "moving":
        _step("moved-out")
        finish(engine, source, job.jid, checked.now)
        return job.jid
    return engine.put_in(target, command, [job], checked)[0]  # gone meanwhile


def complete_to(engine: RedisClusterEngine, source: str, command: checks.Complete) -> str:
    """complete(next=...) into a queue of another partition."""
    if command.depends:
        capability = Capability.CROSS_QUEUE_DEPENDENCIES.value
        raise Unsupported(
            engine.name, "complete", capability,
            "on Redis Cluster a job sent on to a queue of another partition cannot depend "
            f"on other jobs: capability {capability!r}",
        )  # fmt: skip
    assert command.next is not None
    if engine.client.hexists(key(source, f"j:{command.jid}"), "lanner_flow"):
        # Its key or bucket is held in this partition: sent on, the job would run unheld.
        capability = Capability.CROSS_QUEUE_FLOW.value
        raise Unsupported(
            engine.name, "complete", capability,
            "on Redis Cluster a job under flow control cannot be sent on to a queue of "
            f"another partition ({command.queue!r} to {command.next!r}): its controls are "
            f"held in its own: capability {capability!r}",
        )  # fmt: skip
    target = of_queue(command.next)
    engine.partitions.register(target)
    state = engine.call_in(
        source, "lanner.complete_out", command.now, target, command.jid, command.worker,
        command.queue, command.data or "", command.next, command.delay, name="complete",
        durable=True,
    )  # fmt: skip
    _step("moved-out")
    finish(engine, source, command.jid, command.now)
    return str(state)


def finish(engine: RedisClusterEngine, source: str, jid: str, now: float) -> None:
    """Do what is left of a move out of `source` (nothing if there is none)."""
    pending: Any = engine.call_in(source, "lanner.move_pending", now, jid)
    if pending is None:
        return
    target, put, history, tracked, quiet = (str(part) for part in pending)
    engine.partitions.register(target)
    engine.call_in(target, "lanner.move_in", now, jid, put, history, tracked, quiet, durable=True)
    engine.partitions.remember([jid], target)
    _step("put")
    engine.call_in(source, "lanner.move_done", now, jid)


def finish_all(engine: RedisClusterEngine, now: float) -> int:
    """Finish every move a process left half done; how many there were."""
    every = engine.partitions.every()
    pipe: Any = engine.client.pipeline(transaction=False)  # type: ignore[no-untyped-call]
    for partition in every:
        pipe.smembers(key(partition, "lanner:moving"))
    done = 0
    for partition, jids in zip(every, pipe.execute(), strict=True):
        for jid in sorted(jids):
            finish(engine, partition, str(jid), now)
            done += 1
    return done


def move_template(
    engine: RedisClusterEngine, source: str, jid: str, recur_args: list[Any], now: float
) -> None:
    """A recurring template into a queue of another partition (recur of its jid there, or
    recur_update of its queue): made there with the runs it has spawned so far (so that
    its next run's jid follows on), then removed here. Not one step: a crash between the
    two leaves the template in both queues until one is unrecurred."""
    count = engine.client.hget(key(source, f"r:{jid}"), "count")
    target = of_queue(str(recur_args[0]))
    engine.partitions.register(target)
    engine.call_in(target, "recur", now, *recur_args, durable=True)
    if count is not None:
        engine.client.hset(key(target, f"r:{jid}"), "count", count)
    engine.call_in(source, "unrecur", now, jid, durable=True)


def template_args(
    engine: RedisClusterEngine, source: str, jid: str, queue: str, now: float
) -> list[Any] | None:
    """`recur`'s arguments that make the template as it is, in `queue`, next run as due."""
    fields = engine.client.hmget(key(source, f"r:{jid}"), ["queue", *_RECUR_FIELDS])
    if fields[0] is None:
        return None
    old_queue, klass, data, priority, tags, retries, interval, backlog = map(str, fields)
    due = engine.client.zscore(key(source, f"q:{old_queue}-recur"), jid)
    offset = max(0.0, float(due) - now) if due is not None else 0.0
    return [
        queue, jid, klass, data, "interval", interval, offset, "priority", priority,
        "tags", tags if tags != "None" else "[]", "retries", retries,
        "backlog", backlog if backlog != "None" else 0,
    ]  # fmt: skip


def unfail_elsewhere(engine: RedisClusterEngine, command: checks.Unfail, limit: int) -> int:
    """unfail's jobs of the group that failed in other partitions than the queue's: the
    oldest failures first, as the core's unfail takes them, each moved as a put moves a
    job (up to `limit`); how many."""
    moved = 0
    for partition in engine.partitions.every():
        if partition == of_queue(command.queue) or moved >= limit:
            continue
        left = limit - moved
        found = engine.call_in(partition, "failed", command.now, command.group, 0, 0)
        total = int(json.loads(found)["total"])
        page = json.loads(engine.call_in(partition, "failed", command.now, command.group,
                                         max(0, total - left), left))  # fmt: skip
        jids = [str(jid) for jid in reversed(replies.as_list(page["jobs"]))]
        if not jids:
            continue
        for job in replies.jobs(engine.call_in(partition, "lanner.multiget", command.now, *jids)):
            put = NewJob(
                command.queue, job.jid, job.klass, job.data,
                priority=job.priority, tags=list(job.tags), retries=job.retries,
            )  # fmt: skip
            move(engine, partition, put, checks.Put([put], "", command.now), "unfail")
            moved += 1
    return moved
