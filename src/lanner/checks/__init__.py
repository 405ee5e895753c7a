"""The argument checks of every engine command: one checker per command, for every engine.

An engine method hands its arguments to its command's checker, which returns them as one
record, or raises `MalformedArgument` (an `InvalidName`, a `PayloadTooLarge`) naming the
bad one before anything is stored. The engine then works only with the record. Records
carry the command's `now`, resolved here (None: the current time), so engines never read
the clock for a command on their own; `Pop.now` stays None for the clock, because a
blocking pop reads it again on each try. Records are NamedTuples: put_many and pop are hot
paths, and a frozen dataclass takes several times as long to build.

Commands of one argument check it with `names.label` or `names.queue_name` directly; the
value rules behind every check are in `lanner.values`. The recurring templates' checkers
are in `checks.recurring`, re-exported here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Final, NamedTuple

from lanner.checks.flow import flow as check_flow
from lanner.checks.recurring import RECUR_FIELDS as RECUR_FIELDS
from lanner.checks.recurring import Recur as Recur
from lanner.checks.recurring import RecurUpdate as RecurUpdate
from lanner.checks.recurring import recur as recur
from lanner.checks.recurring import recur_update as recur_update
from lanner.errors import MalformedArgument
from lanner.job import MAX_PROGRESS_MESSAGE, PROGRESS_ENTRY
from lanner.names import label, labels, queue_name, queue_names, sequence, unique_labels
from lanner.records import IF_EXISTS, ConfigValue, NewJob
from lanner.values import delay as due_in
from lanner.values import (
    integer,
    json_text,
    lease,
    message,
    now,
    optional_data,
    seconds,
    timestamp,
    worker_or_anyone,
)

LISTABLE_STATES: Final = ("complete", "waiting", "running", "stalled", "scheduled", "depends")
"""The states `jobs()` lists (and `recurring`, for templates)."""


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


class Wait(NamedTuple):
    jid: str
    timeout: float
    now: float | None  # None: the clock, read again as the wait goes on


def wait(jid: object, timeout: object, when: float | None) -> Wait:
    return Wait(
        label(jid, "jid"), seconds(timeout, "timeout"), None if when is None else timestamp(when)
    )


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


# -- managing jobs ------------------------------------------------------------------------
class Jids(NamedTuple):
    """cancel, timeout (each jid once) and multiget (in the order asked)."""

    jids: list[str]
    now: float


def jids(values: object, when: float | None, *, unique: bool = True) -> Jids:
    check = unique_labels if unique else labels
    return Jids(check(values, "jids"), now(when))  # type: ignore[arg-type]


class JobPriority(NamedTuple):
    jid: str
    priority: int
    now: float


def priority(jid: object, value: object, when: float | None) -> JobPriority:
    return JobPriority(label(jid, "jid"), integer(value, "priority"), now(when))


# -- queues -------------------------------------------------------------------------------
class QueueAt(NamedTuple):
    """queue_counts, length."""

    queue: str
    now: float


def queue_at(queue: object, when: float | None) -> QueueAt:
    return QueueAt(queue_name(queue), now(when))


class Listing(NamedTuple):
    """jobs(): which state, of which queue (None for complete jobs), which page."""

    state: str
    queue: str | None
    offset: int
    limit: int
    now: float


def listing(
    state: object, queue: object, offset: object, count: object, when: float | None
) -> Listing:
    if state not in (*LISTABLE_STATES, "recurring"):
        raise MalformedArgument(
            f"jobs(): unknown state {state!r}; known: {', '.join(LISTABLE_STATES)}, recurring"
        )
    checked_offset, checked_count = integer(offset, "offset", 0), integer(count, "count", 0)
    checked_queue = None
    if state != "complete":
        if queue is None:
            raise MalformedArgument(f"jobs(): state {state!r} needs a queue")
        checked_queue = queue_name(queue)
    return Listing(str(state), checked_queue, checked_offset, checked_count, now(when))


class Queues(NamedTuple):
    """pause, unpause, queue_forget."""

    queues: list[str]
    now: float


def queues(values: object, when: float | None) -> Queues:
    return Queues(queue_names(sequence(values, "queues")), now(when))


class Page(NamedTuple):
    """failed (key: the group), tagged (key: the tag), tags_top (key: '')."""

    key: str
    offset: int
    limit: int
    now: float


def failed_page(group: object, start: object, limit: object, when: float | None) -> Page:
    return Page(
        label(group, "group"), integer(start, "start", 0), integer(limit, "limit", 0), now(when)
    )


def tagged_page(tag: object, offset: object, count: object, when: float | None) -> Page:
    return Page(
        label(tag, "tag"), integer(offset, "offset", 0), integer(count, "count", 0), now(when)
    )


def top_page(offset: object, count: object, when: float | None) -> Page:
    return Page("", integer(offset, "offset", 0), integer(count, "count", 0), now(when))


class Unfail(NamedTuple):
    queue: str
    group: str
    limit: int
    now: float


def unfail(queue: object, group: object, count: object, when: float | None) -> Unfail:
    return Unfail(queue_name(queue), label(group, "group"), integer(count, "count", 0), now(when))


# -- configuration ------------------------------------------------------------------------
def config_key(key: object) -> str:
    return label(key, "config key")


class Setting(NamedTuple):
    key: str
    value: ConfigValue


def config_set(key: object, value: object) -> Setting:
    checked_key = config_key(key)
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise MalformedArgument(
            f"config value must be a str, int or float, not {type(value).__name__}"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise MalformedArgument(f"config value must be finite, not {value}")
    return Setting(checked_key, value)


def limit_value(setting: str, value: ConfigValue) -> None:
    """A LIMITS setting's value: a number >= 0 (whole but for `max-age`), `discard-old-when-full`
    0 or 1."""
    what = f"{setting} setting"
    if setting == "max-age":
        due_in(value, what)
    elif setting == "discard-old-when-full" and value not in (0, 1):
        raise MalformedArgument(f"{what} must be 0 or 1, not {value!r}")
    else:
        integer(value, what, 0)


LEASE_SETTINGS: Final = ("heartbeat", "grace-period")
"""Config keys that set how long a lock lasts, besides each queue's `<queue>-heartbeat`."""


def lease_value(key: str, value: ConfigValue) -> None:
    """A lease setting's value: seconds up to MAX_DELAY_SEC (as a str too, as qless's
    clients give it)."""
    number: object = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            raise MalformedArgument(f"{key} must be a number of seconds, not {value!r}") from None
    lease(number, key)


# -- optional capabilities ----------------------------------------------------------------
class Depends(NamedTuple):
    """depends_add, depends_remove (jids None: all of them)."""

    jid: str
    jids: list[str] | None
    now: float


def depends(jid: object, values: object, when: float | None) -> Depends:
    checked = None if values is None else unique_labels(values, "jids")  # type: ignore[arg-type]
    return Depends(label(jid, "jid"), checked, now(when))


class Retag(NamedTuple):
    """tag_add, tag_remove, recur_tag, recur_untag."""

    jid: str
    tags: list[str]
    now: float


def retag(jid: object, tags: object, when: float | None) -> Retag:
    return Retag(label(jid, "jid"), unique_labels(tags, "tags"), now(when))  # type: ignore[arg-type]


class Log(NamedTuple):
    jid: str
    message: str
    details: dict[str, object]  # JSON values; never `what` or `when`
    now: float


def log(jid: object, text: object, data: object, when: float | None) -> Log:
    checked_jid, checked_message = label(jid, "jid"), label(text, "message")
    if data is not None and not isinstance(data, Mapping):
        raise MalformedArgument(f"log data must be a mapping, not {type(data).__name__}")
    details = {str(k): v for k, v in (data or {}).items() if k not in ("what", "when")}
    if checked_message == PROGRESS_ENTRY:
        details = progress(details)
    try:
        json.dumps(details, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise MalformedArgument(f"log data is not JSON-serialisable: {error}") from None
    return Log(checked_jid, checked_message, details, now(when))


def progress(details: Mapping[str, object]) -> dict[str, object]:
    """A progress entry's data: `fraction` a number from 0 to 1 (rounded to 4 places, so
    that every engine writes it alike), `message` text of at most MAX_PROGRESS_MESSAGE
    characters, nothing else."""
    extra = sorted(set(details) - {"fraction", "message"})
    if extra:
        raise MalformedArgument(f"a progress entry takes fraction and message, not {extra}")
    fraction = details.get("fraction")
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        raise MalformedArgument(f"progress fraction must be a number, not {fraction!r}")
    if not math.isfinite(fraction) or not 0 <= fraction <= 1:
        raise MalformedArgument(f"progress fraction must be from 0 to 1, not {fraction!r}")
    text = details.get("message", "")
    if not isinstance(text, str):
        raise MalformedArgument(f"progress message must be text, not {type(text).__name__}")
    if len(text) > MAX_PROGRESS_MESSAGE:
        raise MalformedArgument(
            f"progress message is {len(text)} characters, over {MAX_PROGRESS_MESSAGE}"
        )
    rounded = round(float(fraction), 4)
    return {"fraction": int(rounded) if rounded.is_integer() else rounded, "message": text}


class Stats(NamedTuple):
    queue: str
    date: float


def stats(queue: object, date: object) -> Stats:
    return Stats(queue_name(queue), timestamp(date))


class WorkerAt(NamedTuple):
    worker: str
    now: float


def worker_at(worker: object, when: float | None) -> WorkerAt:
    return WorkerAt(label(worker, "worker"), now(when))
