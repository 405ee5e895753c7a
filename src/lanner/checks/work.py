"""The checks of a job's working life: put, put_many, requeue, pop, peek, heartbeat,
heartbeat_many, complete, complete_many, release, fail, retry (`engine/work.py`'s commands).

put_many and pop are the hot paths: their records are NamedTuples, built once per call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, NamedTuple

from lanner.checks.flow import flow as check_flow
from lanner.checks.names import label, queue_name, sequence, unique_labels
from lanner.checks.values import delay as due_in
from lanner.checks.values import (
    integer,
    json_text,
    message,
    now,
    optional_data,
    seconds,
    timestamp,
    worker_or_anyone,
)
from lanner.errors import MalformedArgument
from lanner.records import IF_EXISTS, NewJob


# -- putting work -------------------------------------------------------------------------
class Put(NamedTuple):
    """put, requeue, put_many: the jobs, each checked, who puts them, and when."""

    jobs: list[NewJob]
    worker: str
    now: float


def new_job(
    queue: object,
    jid: object,
    klass: object,
    data: object,
    delay: object,
    priority: object,
    tags: object,
    retries: object,
    depends: object,
    if_exists: object,
    expires_at: object,
    flow: object,
    limit: int,
) -> NewJob:
    """One job's put arguments, checked (None: keep the job's value on a move)."""
    if if_exists not in IF_EXISTS:
        raise MalformedArgument(
            f"if_exists must be one of {', '.join(IF_EXISTS)}, not {if_exists!r}"
        )
    return NewJob(
        queue_name(queue),
        label(jid, "jid"),
        label(klass, "klass"),
        json_text(data, "data", limit),
        due_in(delay),
        None if priority is None else integer(priority, "priority"),
        None if tags is None else unique_labels(tags, "tags"),  # type: ignore[arg-type]
        None if retries is None else integer(retries, "retries", 0),
        None if depends is None else unique_labels(depends, "depends"),  # type: ignore[arg-type]
        str(if_exists),
        None if expires_at is None else timestamp(expires_at, "expires_at"),
        check_flow(flow),
    )


def put(job: NewJob, worker: object, when: float | None, limit: int) -> Put:
    """put and requeue: `job` holds the caller's arguments as given (unchecked)."""
    return Put([new_job(*job, limit)], worker_or_anyone(worker), now(when))


def put_many(jobs: object, when: float | None, limit: int) -> Put:
    if not isinstance(jobs, Sequence) or isinstance(jobs, NewJob | str):
        raise MalformedArgument(f"jobs must be a list of NewJob, not {type(jobs).__name__}")
    checked = []
    for job in jobs:
        if not isinstance(job, NewJob):
            raise MalformedArgument(f"put_many() takes NewJob values, not {type(job).__name__}")
        checked.append(new_job(*job, limit))
    return Put(checked, "", now(when))


# -- taking work --------------------------------------------------------------------------
class Pop(NamedTuple):
    queue: str
    worker: str
    limit: int  # at most this many jobs
    wait: float
    now: float | None  # None: the clock, read at each try of a blocking pop


def pop(queue: object, worker: object, count: object, wait: object, when: float | None) -> Pop:
    return Pop(
        queue_name(queue),
        label(worker, "worker"),
        integer(count, "count", 1),
        seconds(wait, "wait"),
        None if when is None else timestamp(when),
    )


class Peek(NamedTuple):
    queue: str
    limit: int
    now: float


def peek(queue: object, count: object, when: float | None) -> Peek:
    return Peek(queue_name(queue), integer(count, "count", 1), now(when))


class Heartbeat(NamedTuple):
    jid: str
    worker: str
    data: str | None
    now: float


def heartbeat(
    jid: object, worker: object, data: object, when: float | None, limit: int
) -> Heartbeat:
    return Heartbeat(
        label(jid, "jid"), label(worker, "worker"), optional_data(data, limit), now(when)
    )


MAX_HEARTBEAT_JIDS: Final = 10_000
"""The most jids one `heartbeat_many` takes: a process's jobs in flight, not a store's."""


class Heartbeats(NamedTuple):
    """heartbeat_many: the jids of the jobs whose locks `worker` extends."""

    jids: list[str]
    worker: str
    now: float


def heartbeats(jids: object, worker: object, when: float | None) -> Heartbeats:
    given = sequence(jids, "jids")
    if len(given) > MAX_HEARTBEAT_JIDS:
        raise MalformedArgument(
            f"heartbeat_many() takes at most {MAX_HEARTBEAT_JIDS} jids, not {len(given)}"
        )
    return Heartbeats(unique_labels(given, "jids"), label(worker, "worker"), now(when))


# -- finishing work -----------------------------------------------------------------------
class Complete(NamedTuple):
    jid: str
    worker: str
    queue: str
    data: str | None
    next: str | None
    delay: float
    depends: list[str] | None
    result: str | None  # JSON text to keep with a completed job
    now: float


def complete(
    jid: object,
    worker: object,
    queue: object,
    data: object,
    next_queue: object,
    delay: object,
    depends: object,
    result: object,
    when: float | None,
    limit: int,
) -> Complete:
    checked_jid, checked_worker = label(jid, "jid"), label(worker, "worker")
    checked_queue = queue_name(queue)
    checked_data = optional_data(data, limit)
    checked_delay = due_in(delay)
    checked_result = None if result is None else json_text(result, "result", limit)
    if next_queue is None:
        if checked_delay or depends:
            raise MalformedArgument("complete(): delay and depends need a next queue")
        return Complete(
            checked_jid, checked_worker, checked_queue, checked_data, None, 0.0, None,
            checked_result, now(when),
        )  # fmt: skip
    if checked_result is not None:
        raise MalformedArgument("complete(): a result is kept only by a job that completes")
    return Complete(
        checked_jid,
        checked_worker,
        checked_queue,
        checked_data,
        queue_name(next_queue, "next queue"),
        checked_delay,
        None if depends is None else unique_labels(depends, "depends"),  # type: ignore[arg-type]
        None,
        now(when),
    )


class Settle(NamedTuple):
    """complete_many and release: jobs a worker holds in a queue."""

    jids: list[str]
    worker: str
    queue: str
    delay: float
    results: dict[str, str]  # complete_many: jid -> JSON text to keep with the job
    now: float
    spend_retry: bool = False  # release: each job counts as tried


def settle(
    jids: object,
    worker: object,
    queue: object,
    delay: object,
    when: float | None,
    results: object = None,
    limit: int = 0,
    spend_retry: object = False,
) -> Settle:
    checked = unique_labels(jids, "jids")  # type: ignore[arg-type]
    kept: dict[str, str] = {}
    if results is not None:
        if not isinstance(results, Mapping):
            raise MalformedArgument(f"results must be a mapping, not {type(results).__name__}")
        for jid, result in results.items():
            if jid not in checked:
                raise MalformedArgument(f"results: {jid!r} is not among the jids completed")
            kept[jid] = json_text(result, f"the result of {jid}", limit)
    if not isinstance(spend_retry, bool):
        raise MalformedArgument(f"spend_retry must be a bool, not {type(spend_retry).__name__}")
    return Settle(
        checked, label(worker, "worker"), queue_name(queue), due_in(delay), kept,
        now(when), spend_retry,
    )  # fmt: skip


class Fail(NamedTuple):
    jid: str
    worker: str
    group: str
    message: str
    data: str | None
    now: float


def fail(
    jid: object,
    worker: object,
    group: object,
    text: object,
    data: object,
    when: float | None,
    limit: int,
) -> Fail:
    return Fail(
        label(jid, "jid"),
        label(worker, "worker"),
        label(group, "group"),
        message(text),
        optional_data(data, limit),
        now(when),
    )


class Retry(NamedTuple):
    jid: str
    queue: str
    worker: str
    delay: float
    group: str | None
    message: str | None
    now: float


def retry(
    jid: object,
    queue: object,
    worker: object,
    delay: object,
    group: object,
    text: object,
    when: float | None,
) -> Retry:
    return Retry(
        label(jid, "jid"),
        queue_name(queue),
        label(worker, "worker"),
        due_in(delay),
        None if group is None else label(group, "group"),
        None if text is None else message(text),
        now(when),
    )
